"""The server asks `user_input` questions itself when the client can show a form.

Real `mcp.Client`s with an `elicitation_callback`, in memory: `mode="legacy"` (2025-11-25,
the question is an `elicitation/create` request sent mid-call) and `mode="auto"`
(2026-07-28, the question comes back in an `InputRequiredResult` and the client calls
the tool again with the answer).  The callback plays the user from a script and records
every form it was shown.
"""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client
from mcp_types import ElicitResult
from srv_helpers import PYTHON, make_project, ok, serve_args, server_env

ASK = """
name: ask
description: "Two questions, then a task for the agent"
version: "1.0.0"
steps:
  - type: user_message
    message: "before the questions"
  - id: pick
    type: user_input
    prompt: "Which branch?"
    choices: [main, dev]
    default: main
    state_update: {path: raw.branch}
  - id: name
    type: user_input
    prompt: "Your name?"
    validation: {pattern: "[a-z]+", error_message: "lower-case letters only"}
    max_attempts: 2
    state_update: {path: raw.name}
  - type: user_message
    message: "hello {{ raw.name }} on {{ raw.branch }}"
  - id: after
    type: agent_prompt
    prompt: "say done"
"""

LENIENT = """
name: lenient
description: "A question the workflow can do without"
version: "1.0.0"
steps:
  - id: maybe
    type: user_input
    prompt: "Anything to add?"
    on_error: continue
    fallback_value: "nothing"
    state_update: {path: raw.note}
  - id: after
    type: agent_prompt
    prompt: "say done"
"""

THEN_ASK = """
name: then_ask
description: "A task for the agent, then a question"
version: "1.0.0"
steps:
  - id: first
    type: agent_prompt
    prompt: "do something"
  - type: user_message
    message: "after the task"
  - id: colour
    type: user_input
    prompt: "Favourite colour?"
    state_update: {path: raw.colour}
  - type: user_message
    message: "colour: {{ raw.colour }}"
"""


class User:
    """Answers forms from a script: ("accept", text) | ("decline",) | ("cancel",)."""

    def __init__(self, *script: tuple[str, ...]):
        self.script = list(script)
        self.forms: list[tuple[str, dict[str, Any]]] = []

    async def __call__(self, context: Any, params: Any) -> ElicitResult:
        self.forms.append((params.message, params.requested_schema))
        action, *rest = self.script.pop(0)
        content = {"answer": rest[0]} if action == "accept" else None
        return ElicitResult(action=action, content=content)  # type: ignore[arg-type]


@pytest.fixture
def project(tmp_path: Any) -> Any:
    return make_project(tmp_path / "project", {"ask": ASK, "lenient": LENIENT, "then_ask": THEN_ASK})


async def start(client: Any, workflow: str) -> str:
    return str((await ok(client, "workflow_start", {"workflow": workflow}))["workflow_id"])


async def state(client: Any, workflow_id: str) -> dict[str, Any]:
    return (await ok(client, "workflow_state_read", {"workflow_id": workflow_id}))["state"]


async def test_valid_answers_are_stored_and_the_agent_gets_the_next_step(server, mode):
    user = User(("accept", "dev"), ("accept", "ada"))
    async with Client(server, mode=mode, elicitation_callback=user) as client:
        wid = await start(client, "ask")
        answer = await ok(client, "workflow_get_next_step", {"workflow_id": wid})
        assert answer["step"]["id"] == "after" and answer["step"]["type"] == "agent_prompt"
        assert answer["messages"] == ["hello ada on dev"]
        assert [a["answer"] for a in answer["user_answers"]] == ["dev", "ada"]
        got = await state(client, wid)
        assert got["branch"] == "dev" and got["name"] == "ada"
    first_message, first_schema = user.forms[0]
    assert first_message.startswith("before the questions") and "Which branch?" in first_message
    field = first_schema["properties"]["answer"]
    assert field["enum"] == ["main", "dev"] and field["default"] == "main" and field["type"] == "string"
    assert first_schema["required"] == ["answer"]
    second_field = user.forms[1][1]["properties"]["answer"]
    assert second_field["pattern"] == "^(?:[a-z]+)$" and second_field["description"] == "lower-case letters only"


async def test_invalid_answer_is_asked_again_with_the_problem(server, mode):
    user = User(("accept", "main"), ("accept", "Ada 1"), ("accept", "ada"))
    async with Client(server, mode=mode, elicitation_callback=user) as client:
        wid = await start(client, "ask")
        answer = await ok(client, "workflow_get_next_step", {"workflow_id": wid})
        assert answer["step"]["id"] == "after"
        assert [a.get("accepted") for a in answer["user_answers"]] == [True, False, True]
        assert (await state(client, wid))["name"] == "ada"
    again = user.forms[2][0]
    assert "not accepted" in again and "lower-case letters only" in again and "Your name?" in again


async def test_no_valid_answer_in_max_attempts_fails_the_workflow(server, mode):
    user = User(("accept", "main"), ("accept", "X"), ("accept", "Y"))
    async with Client(server, mode=mode, elicitation_callback=user) as client:
        wid = await start(client, "ask")
        answer = await ok(client, "workflow_get_next_step", {"workflow_id": wid})
        assert answer["step"] is None and answer["status"] == "failed"
        assert "no valid answer after 2 attempts" in answer["error"]
    assert len(user.forms) == 3


async def test_decline_applies_the_steps_on_error(server, mode):
    user = User(("decline",))
    async with Client(server, mode=mode, elicitation_callback=user) as client:
        wid = await start(client, "lenient")
        answer = await ok(client, "workflow_get_next_step", {"workflow_id": wid})
        assert answer["step"]["id"] == "after"  # on_error: continue
        assert answer["user_answers"] == [{"step_id": "maybe", "action": "decline"}]
        assert (await state(client, wid))["note"] == "nothing"
        wid = await start(client, "ask")
        user.script.append(("decline",))
        answer = await ok(client, "workflow_get_next_step", {"workflow_id": wid})
        assert answer["step"] is None and answer["status"] == "failed"  # on_error: fail (the default)
        assert "declined" in answer["error"]


async def test_cancel_cancels_the_workflow(server, mode):
    user = User(("accept", "dev"), ("cancel",))
    async with Client(server, mode=mode, elicitation_callback=user) as client:
        wid = await start(client, "ask")
        answer = await ok(client, "workflow_get_next_step", {"workflow_id": wid})
        assert answer["step"] is None and answer["status"] == "cancelled"
        assert "cancelled" in answer["error"]
        status = await ok(client, "workflow_status", {"workflow_id": wid})
        assert status["status"] == "cancelled"


async def test_step_complete_asks_when_its_next_step_is_user_input(server, mode):
    user = User(("accept", "blue"))
    async with Client(server, mode=mode, elicitation_callback=user) as client:
        wid = await start(client, "then_ask")
        first = await ok(client, "workflow_get_next_step", {"workflow_id": wid})
        assert first["step"]["id"] == "first" and "user_answers" not in first
        done = await ok(client, "workflow_step_complete", {"workflow_id": wid, "step_id": "first", "result": "ok"})
        assert done["success"] is True and done["next_step"] is None and done["status"] == "completed"
        assert done["messages"] == ["colour: blue"]
        assert done["user_answers"] == [{"step_id": "colour", "action": "accept", "answer": "blue", "accepted": True}]
    assert user.forms[0][0] == "after the task\n\nFavourite colour?"


async def test_a_client_without_the_capability_gets_the_user_input_step(server, mode):
    async with Client(server, mode=mode) as client:
        wid = await start(client, "ask")
        answer = await ok(client, "workflow_get_next_step", {"workflow_id": wid})
        assert answer["step"]["type"] == "user_input" and answer["step"]["id"] == "pick"
        assert answer["step"]["definition"]["default"] == "main"
        assert answer["messages"] == ["before the questions"] and "user_answers" not in answer


@pytest.mark.parametrize("era", ["legacy", "auto"])
async def test_over_stdio_as_claude_code_talks_to_it(tmp_path, era):
    """A real server subprocess: in "auto" the client speaks 2026-07-28 (as Claude Code 2.1.328
    does), so the question and the answer travel in InputRequiredResult rounds over stdio."""
    from mcp import StdioServerParameters

    project = make_project(tmp_path / "p", {"ask": ASK})
    home, store = tmp_path / "home", tmp_path / "store.sqlite3"
    home.mkdir()
    params = StdioServerParameters(command=PYTHON, args=serve_args(project, store), cwd=str(project),
                                   env=server_env(home, store))
    user = User(("accept", "dev"), ("accept", "A"), ("accept", "ada"))
    async with Client(params, mode=era, elicitation_callback=user) as client:
        assert (client.protocol_version > "2025-11-25") == (era == "auto")
        wid = await start(client, "ask")
        answer = await ok(client, "workflow_get_next_step", {"workflow_id": wid})
        assert answer["step"]["id"] == "after" and answer["messages"] == ["hello ada on dev"]
        assert [a["accepted"] for a in answer["user_answers"]] == [True, False, True]
    assert len(user.forms) == 3 and "lower-case letters only" in user.forms[2][0]
