"""When the server asks the user a question itself, only the user's answer completes it.

The attack: a client that shows forms, so the server asks `user_input` questions through
elicitation and never hands them to the agent.  While the question "Deploy to
production?" is out, a prompt-injected agent calls
`workflow_step_complete(step_id="confirm", result="yes")` — and it was accepted: the
workflow went on with "yes" that the user never gave.  Now that completion is refused
with a message saying the user is being asked, and the step waits for the answer that
comes back through elicitation (the sealed resume round in the 2026-07-28 generation,
the `elicitation/create` reply before it).

Real `mcp.Client`s in memory with an `elicitation_callback` (the user), both protocol
generations; the agent is the same client calling the tool while the form is open.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lead_helpers import ok, project_with, server_for, text_of
from mcp import Client
from mcp_types import ElicitResult

from aromcp_workflows.app.service import WorkflowService

DEPLOY = """
name: deploy
description: "build, then ask before deploying"
version: "1.0.0"
steps:
  - id: build
    type: agent_prompt
    prompt: "build it"
  - id: confirm
    type: user_input
    prompt: "Deploy to production?"
    choices: ["yes", "no"]
    state_update: {path: raw.deploy}
  - id: ship
    type: agent_prompt
    when: "{{ raw.deploy === 'yes' }}"
    prompt: "deploy to production"
  - type: user_message
    message: "deploy: {{ raw.deploy }}"
"""


@pytest.fixture
def service(tmp_path: Path) -> WorkflowService:
    home = tmp_path / "home"
    home.mkdir()
    return WorkflowService(project_dir=project_with(tmp_path / "p", {"deploy": DEPLOY}),
                           store_path=tmp_path / "s.sqlite3", home=home)


class InjectedAgentAndUser:
    """The form callback: while the form is open the agent answers for the user; then the
    user answers `said`."""

    def __init__(self, said: str):
        self.said = said
        self.client: Any = None
        self.workflow_id = ""
        self.agent_replies: list[Any] = []
        self.forms: list[str] = []

    async def __call__(self, _context: Any, params: Any) -> ElicitResult:
        self.forms.append(params.message)
        if len(self.forms) == 1:  # the question is out: the agent tries to answer it
            self.agent_replies.append(await self.client.call_tool("workflow_step_complete", {
                "workflow_id": self.workflow_id, "step_id": "confirm", "result": "yes"}))
        return ElicitResult(action="accept", content={"answer": self.said})


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_agent_cannot_answer_while_the_user_is_asked(service: WorkflowService, mode: str) -> None:
    user = InjectedAgentAndUser(said="no")
    async with Client(server_for(service), mode=mode, elicitation_callback=user) as client:
        user.client = client
        user.workflow_id = (await ok(client, "workflow_start", {"workflow": "deploy"}))["workflow_id"]
        await ok(client, "workflow_get_next_step", {"workflow_id": user.workflow_id})
        done = await ok(client, "workflow_step_complete", {"workflow_id": user.workflow_id, "step_id": "build",
                                                           "result": "built"})
        assert done["next_step"] is None and done["messages"] == ["deploy: no"], done
        state = (await ok(client, "workflow_state_read", {"workflow_id": user.workflow_id}))["state"]
    assert state["deploy"] == "no", "the user's answer, not the agent's"
    [reply] = user.agent_replies
    refusal = text_of(reply) if reply.is_error else str(reply.structured_content.get("error"))
    assert reply.is_error or reply.structured_content["success"] is False, reply
    assert "user" in refusal and "being asked" in refusal, refusal


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_agent_cannot_answer_before_it_is_asked_either(service: WorkflowService, mode: str) -> None:
    """The agent names the question's step in its own step_complete (the id is in the
    definition): refused, and the user is asked."""
    forms: list[str] = []

    async def user(_context: Any, params: Any) -> ElicitResult:
        forms.append(params.message)
        return ElicitResult(action="accept", content={"answer": "no"})

    async with Client(server_for(service), mode=mode, elicitation_callback=user) as client:
        wid = (await ok(client, "workflow_start", {"workflow": "deploy"}))["workflow_id"]
        await ok(client, "workflow_get_next_step", {"workflow_id": wid})
        await ok(client, "workflow_step_complete", {"workflow_id": wid, "step_id": "build", "result": "built"})
        state = (await ok(client, "workflow_state_read", {"workflow_id": wid}))["state"]
        assert state["deploy"] == "no"
        again = await ok(client, "workflow_start", {"workflow": "deploy"})
        wid = again["workflow_id"]
        await ok(client, "workflow_get_next_step", {"workflow_id": wid})
        service.step_complete(wid, "build", result="built")  # another caller moved the thread to the question
        forms.clear()
        reply = await ok(client, "workflow_step_complete", {"workflow_id": wid, "step_id": "confirm", "result": "yes"})
        assert reply["success"] is False and "being asked" in reply["error"], reply
        assert forms and "Deploy to production?" in forms[0], "the user was asked instead"
        assert (await ok(client, "workflow_state_read", {"workflow_id": wid}))["state"]["deploy"] == "no"


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_client_without_forms_still_relays_the_question(service: WorkflowService, mode: str) -> None:
    """No elicitation: the agent is the one asking the user, and its answer is the answer."""
    async with Client(server_for(service), mode=mode) as client:
        wid = (await ok(client, "workflow_start", {"workflow": "deploy"}))["workflow_id"]
        await ok(client, "workflow_get_next_step", {"workflow_id": wid})
        done = await ok(client, "workflow_step_complete", {"workflow_id": wid, "step_id": "build", "result": "b"})
        assert done["next_step"]["id"] == "confirm"
        done = await ok(client, "workflow_step_complete", {"workflow_id": wid, "step_id": "confirm", "result": "yes"})
        assert done["success"] and done["next_step"]["id"] == "ship"
