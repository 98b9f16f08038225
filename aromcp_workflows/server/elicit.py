"""The server asks `user_input` questions itself, through MCP elicitation.

When the client declared the form-elicitation capability, a `user_input` step is never
handed to the agent: the tool call that reaches it (`workflow_get_next_step`, or
`workflow_step_complete` whose next step is one) asks the user with a form built from the
step, hands the answer to `WorkflowService.step_complete` (the very code path an agent's
answer takes: the step's own `choices`/`validation`, its `max_attempts`, its `on_error`),
asks again with the problem in the message while the service re-issues the step, and
goes on to the next step.  The agent cannot answer for the user: its own
`workflow_step_complete` for a `user_input` step is refused (`may_answer_user=False`) —
before, while or after the question is out — and the user is asked instead; only the
answer that comes back through elicitation completes the step.

Two protocol eras, one flow.  Up to 2025-11-25 the question is a standalone
`elicitation/create` request sent mid-call (`ServerSession.elicit_form`).  From
2026-07-28 (Claude Code 2.1.328 and later) there is no back-channel: the call answers
with an `InputRequiredResult` carrying the question, and the client calls the tool again
with the answer in `input_responses` and our progress in `request_state` (sealed by the
SDK, so the client cannot forge it).  The SDK's `Resolve`/`Elicit` helpers are not used
because a `Resolve` parameter asks exactly one question per call and forbids the body
from asking another; asking again after an invalid answer needs the body-driven flow.

Outcomes: accept → the answer is validated and stored (or asked again); decline → the
step fails with "the user declined to answer" and its `on_error` applies (`continue`
stores `fallback_value` and goes on; `fail`, the default, fails the workflow); cancel
(the user dismissed the form) → the workflow is cancelled.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from mcp_types import ElicitRequest, ElicitRequestFormParams, ElicitResult, InputRequiredResult

from aromcp_workflows.app import NextStep, StepCompleted

if TYPE_CHECKING:  # typing only: the server imports this module at start, before any tool runs
    from aromcp_workflows.app import WorkflowService
    from aromcp_workflows.shell import ProgressCallback

log = logging.getLogger("aromcp_workflows")
REQUEST_KEY = "aromcp_user_input"  # our one question per round in `input_requests`
FIELD = "answer"  # the form's one field
STATE_VERSION = 2
INPUT_REQUIRED_VERSION = "2026-07-28"


def standing(workflow_id: str, completed: StepCompleted) -> NextStep:
    """Where the thread stands after a completion: its next step, as `next_step` would say."""
    return NextStep(workflow_id=workflow_id, status=completed.status, step=completed.next_step,
                    messages=completed.messages, error=completed.error, waiting_for=completed.waiting_for)


@dataclass
class CallState:
    """What one tool call did so far; in the 2026 era it rides `request_state` between rounds."""

    workflow_id: str
    task_id: str | None
    step_id: str = ""  # the step whose question is out
    problem: str | None = None  # why the last answer was refused (shown with the question again)
    answers: list[dict[str, Any]] = field(default_factory=list)
    head_success: bool = True  # workflow_step_complete's own answer to the agent's result
    head_error: str | None = None

    def encode(self) -> str:
        return json.dumps({"v": STATE_VERSION, **asdict(self)}, separators=(",", ":"))

    @classmethod
    def decode(cls, text: str | None, workflow_id: str, task_id: str | None) -> CallState | None:
        """Our state from the previous round, or None (first round, or state for another call)."""
        try:
            data = json.loads(text or "")
        except ValueError:
            return None
        if not isinstance(data, dict) or data.pop("v", None) != STATE_VERSION:
            return None
        try:
            progress = cls(**data)
        except TypeError:
            return None
        same = progress.workflow_id == workflow_id and progress.task_id == task_id
        return progress if same else None


def can_elicit(ctx: Any) -> bool:
    """The client declared form elicitation (a bare `elicitation: {}` means form)."""
    if ctx is None:
        return False
    try:
        capabilities = ctx.client_capabilities
    except ValueError:  # no request (a direct MCPServer.call_tool)
        return False
    elicitation = capabilities.elicitation if capabilities is not None else None
    return elicitation is not None and (elicitation.form is not None or elicitation.url is None)


def uses_input_required(ctx: Any) -> bool:
    from mcp_types.version import is_version_at_least

    version = ctx.protocol_version
    return version is not None and is_version_at_least(version, INPUT_REQUIRED_VERSION)


def form_now(ctx: Any, message: str, schema: dict[str, Any], failing: str) -> ElicitResult | None:
    """The 2025-era question: an `elicitation/create` request sent from this worker thread
    mid-call, and the user's answer; None (and `failing` logged) when it could not be sent."""
    import anyio.from_thread

    try:
        answer = anyio.from_thread.run(partial(ctx.session.elicit_form, message, schema,
                                               related_request_id=ctx.request_id))
    except Exception:
        log.warning(failing, exc_info=True)
        return None
    return answer if isinstance(answer, ElicitResult) else None


def question(step: dict[str, Any], messages: list[str], problem: str | None) -> tuple[str, dict[str, Any]]:
    """The form's message and JSON Schema, built from the atomic `user_input` step."""
    definition = step.get("definition") or {}
    parts = [*messages, str(definition.get("prompt") or "")]
    if problem:
        parts.append(f"Your last answer was not accepted: {problem}. Please answer again.")
    prop: dict[str, Any] = {"type": "string", "title": "Answer"}
    choices = definition.get("choices")
    if isinstance(choices, list) and choices:
        prop["enum"] = [c if isinstance(c, str) else json.dumps(c) for c in choices]
    validation = definition.get("validation") or {}
    if validation.get("pattern"):
        prop["pattern"] = f"^(?:{validation['pattern']})$"  # the server checks the whole answer
        prop["description"] = validation.get("error_message") or f"must match {validation['pattern']}"
    default = definition.get("default")
    if default is not None:
        prop["default"] = default if isinstance(default, str) else json.dumps(default)
    schema = {"type": "object", "properties": {FIELD: prop}, "required": [FIELD]}
    return "\n\n".join(p for p in parts if p), schema


class UserInputGate:
    """Asks the user every `user_input` step one tool call reaches, then returns what follows."""

    def __init__(self, ctx: Any, service: WorkflowService, workflow_id: str, task_id: str | None,
                 progress: ProgressCallback | None):
        self.ctx = ctx
        self.service = service
        self.progress = progress
        self.input_required = uses_input_required(ctx)
        self.state = (CallState.decode(ctx.request_state, workflow_id, task_id) if self.input_required
                      else None) or CallState(workflow_id, task_id)

    @classmethod
    def for_call(cls, ctx: Any, service: WorkflowService, workflow_id: str, task_id: str | None,
                 progress: ProgressCallback | None) -> UserInputGate | None:
        """A gate when this client can be asked directly; None hands user_input to the agent."""
        if not can_elicit(ctx):
            return None
        if not uses_input_required(ctx) and not ctx.session.can_send_request:
            return None  # a 2025-era transport without a back-channel (stateless HTTP)
        return cls(ctx, service, workflow_id, task_id, progress)

    @property
    def resuming(self) -> bool:
        """This is a later round of a call whose question is out (2026 era)."""
        return bool(self.state.step_id)

    def answers(self) -> list[dict[str, Any]] | None:
        """What the user answered in forms during this call (None when nothing was asked)."""
        return self.state.answers or None

    def resume(self) -> NextStep:
        """Apply the answer the client brought back for our outstanding question."""
        responses = self.ctx.input_responses or {}
        answer = responses.get(REQUEST_KEY)
        if not isinstance(answer, ElicitResult):  # retried without (or with a wrong) answer: ask again
            return self.next_step()
        return self.apply(self.state.step_id, answer.action, answer.content)

    def next_step(self) -> NextStep:
        return self.service.next_step(self.state.workflow_id, self.state.task_id, self.progress)

    def completed(self, step_id: str, status: str, result: Any, error: str | None) -> NextStep:
        """The agent's own result (first round of `workflow_step_complete`), remembered so the
        call's final answer says whether it was accepted, whatever the user answers later.
        It may not answer a `user_input` step: this client's user is asked those directly."""
        done = self.service.step_complete(self.state.workflow_id, step_id, status, result, error,
                                          self.state.task_id, self.progress, may_answer_user=False)
        self.state.head_success, self.state.head_error = done.success, done.error
        return standing(self.state.workflow_id, done)

    def ask_user(self, reply: NextStep) -> NextStep | InputRequiredResult:
        """Ask each user_input step in turn until the thread needs something else."""
        while reply.step is not None and reply.step.get("type") == "user_input":
            step = reply.step
            message, schema = question(step, reply.messages, self.state.problem)
            self.service.asking_user(self.state.workflow_id, str(step["id"]), self.state.task_id)
            if self.input_required:
                self.state.step_id = str(step["id"])
                request = ElicitRequest(params=ElicitRequestFormParams(message=message, requested_schema=schema))
                return InputRequiredResult(input_requests={REQUEST_KEY: request}, request_state=self.state.encode())
            outcome = self._ask_now(message, schema)
            if outcome is None:  # the client could not be asked after all: the agent gets the step
                self.service.asking_user(self.state.workflow_id, str(step["id"]), self.state.task_id, asking=False)
                return reply
            reply = self.apply(str(step["id"]), outcome.action, outcome.content)
        return reply

    def _ask_now(self, message: str, schema: dict[str, Any]) -> Any:
        return form_now(self.ctx, message, schema, "elicitation failed; handing the user_input step to the agent")

    def apply(self, step_id: str, action: str, content: Any) -> NextStep:
        """Hand the user's answer (or refusal) to the service, as an agent's answer would be."""
        wid, tid = self.state.workflow_id, self.state.task_id
        self.state.step_id, self.state.problem = "", None
        if action == "cancel":
            self.service.complete(wid, "cancelled")
            self.state.answers.append({"step_id": step_id, "action": "cancel"})
            return NextStep(workflow_id=wid, status="cancelled", step=None, messages=[],
                            error=f"the user cancelled the question of step {step_id}; the workflow was cancelled")
        if action == "accept":
            answer = (content or {}).get(FIELD) if isinstance(content, dict) else None
            done = self.service.step_complete(wid, step_id, "success", answer, None, tid, self.progress, by="user")
            entry: dict[str, Any] = {"step_id": step_id, "action": "accept", "answer": answer,
                                     "accepted": done.success}
        else:
            done = self.service.step_complete(wid, step_id, "failed", None, "the user declined to answer", tid,
                                              self.progress, by="user")
            entry = {"step_id": step_id, "action": "decline"}
        self.state.answers.append(entry)
        step = done.next_step
        if not done.success and step is not None and str(step.get("id")) == step_id:
            self.state.problem = done.error  # the same step again: ask with the problem
        return standing(wid, done)
