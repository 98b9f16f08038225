"""The user allows, or not, what the agent asks to do with their answers.

A `workflow_fork` from the agent that would start after user answers carries them
forward (a deploy the user approved once would run again): the service refuses it with
`ConsentNeeded` until the user allows it.  This asks them, through the same elicitation
that asks `user_input` questions (`elicit.py`): a form with the question and one yes/no
field.  In the 2025 era the form is a request sent mid-call; from 2026-07-28 the call
answers with an `InputRequiredResult` and the client calls again with the answer, our
question riding `request_state` (sealed by the SDK) so a later round applies only to the
very fork it asked about.

Allowed → the fork is made.  No, declined, dismissed, or a client that cannot show a
form → nothing is created, and the agent is told to fork from the CLI or the page.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any, TypeVar

from mcp_types import ElicitRequest, ElicitRequestFormParams, ElicitResult, InputRequiredResult

from aromcp_workflows.server.elicit import can_elicit, form_now, uses_input_required

T = TypeVar("T")
REQUEST_KEY = "aromcp_consent"
FIELD = "allow"
SCHEMA = {"type": "object", "properties": {FIELD: {"type": "boolean", "title": "Allow", "default": False}},
          "required": [FIELD]}


def fingerprint(arguments: dict[str, Any]) -> str:
    """Which request a consent is for: the tool's own arguments, canonical."""
    text = json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class Consent:
    """Asks the user one question for one tool call, in either protocol era."""

    def __init__(self, ctx: Any, arguments: dict[str, Any]):
        self.ctx = ctx
        self.request = fingerprint(arguments)

    def brought_back(self) -> bool | None:
        """The user's yes/no from an earlier round of this very call (2026 era); None: not asked yet."""
        if self.ctx is None or not can_elicit(self.ctx) or not uses_input_required(self.ctx):
            return None
        try:
            state = json.loads(self.ctx.request_state or "")
        except ValueError:
            return None
        if not isinstance(state, dict) or state.get("consent") != self.request:
            return None
        answer = (self.ctx.input_responses or {}).get(REQUEST_KEY)
        return isinstance(answer, ElicitResult) and allowed(answer)

    def ask(self, question: str) -> bool | InputRequiredResult | None:
        """The user's answer (2025 era), the question to send back (2026 era), or None when
        this client cannot be asked."""
        if self.ctx is None or not can_elicit(self.ctx):
            return None
        request = ElicitRequest(params=ElicitRequestFormParams(message=question, requested_schema=SCHEMA))
        if uses_input_required(self.ctx):
            return InputRequiredResult(input_requests={REQUEST_KEY: request},
                                       request_state=json.dumps({"consent": self.request}))
        if not self.ctx.session.can_send_request:
            return None
        answer = form_now(self.ctx, question, SCHEMA, "could not ask the user to allow a fork")
        return None if answer is None else allowed(answer)


def with_consent(ctx: Any, arguments: dict[str, Any], call: Callable[[bool], T]) -> T | InputRequiredResult:
    """`call(consented)`; when it needs the user's consent (`ConsentNeeded`), ask them and
    call again if they allow it.  A no, or a client that cannot ask, re-raises the refusal."""
    from aromcp_workflows.app import ConsentNeeded  # the repair code, loaded on first use

    consent = Consent(ctx, arguments)
    answer = consent.brought_back()  # the user's yes or no, asked in an earlier round of this call
    try:
        return call(answer is True)
    except ConsentNeeded as needed:
        if answer is not None:
            raise  # the user said no: nothing is done
        asked = consent.ask(needed.question)
        if isinstance(asked, InputRequiredResult):
            return asked
        if asked is not True:
            raise
    return call(True)


def allowed(answer: Any) -> bool:
    content = getattr(answer, "content", None) or {}
    return getattr(answer, "action", None) == "accept" and content.get(FIELD) is True
