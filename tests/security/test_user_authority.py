"""What the user decides stays the user's: the agent cannot overturn an answer.

The attacks of issue 31, as a hostile agent makes them: through the MCP tools, with a real
`mcp.Client` in memory in both protocol eras (`legacy`: the form is a request sent
mid-call; `auto`: 2026-07-28, the form comes back in an `InputRequiredResult`).  The
callback plays the user.  The deploy is a real shell command that leaves a file, so "the
deploy ran" is a fact on disk, not a status.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp_types import ElicitResult

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))

from srv_helpers import fails, ok

DEPLOY = """
name: deploy
description: "Ask, build, then deploy only when the user said yes"
version: "1.0.0"
default_state: {raw: {confirmed: "no"}}
steps:
  - id: gate
    type: user_input
    prompt: "Deploy to production?"
    choices: ["yes", "no"]
    state_update: {path: raw.confirmed}
  - id: build
    type: agent_prompt
    prompt: "build it"
  - id: deploy
    type: shell_command
    when: "{{ confirmed === 'yes' }}"
    command: "echo deployed >> deploys.log"
  - id: done
    type: agent_prompt
    prompt: "say done"
"""


class User:
    """Answers forms from a script: a question gets ("accept", text) | ("decline",); a
    consent ("allow", True|False).  Every form's message is kept."""

    def __init__(self, *script: tuple[Any, ...]):
        self.script = list(script)
        self.forms: list[str] = []

    async def __call__(self, _context: Any, params: Any) -> ElicitResult:
        self.forms.append(params.message)
        action, *rest = self.script.pop(0)
        if action == "allow":
            return ElicitResult(action="accept", content={"allow": rest[0]})
        return ElicitResult(action=action, content={"answer": rest[0]} if action == "accept" else None)


@pytest.fixture
def setup(make_server: Any) -> tuple[Any, Path]:
    return make_server({"deploy": DEPLOY})


def deploys(project: Path) -> int:
    log = project / "deploys.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


async def answered(client: Any, answer: str) -> str:
    """Start `deploy`, the user answers the question; the agent is at `build`."""
    wid = str((await ok(client, "workflow_start", {"workflow": "deploy"}))["workflow_id"])
    step = (await ok(client, "workflow_get_next_step", {"workflow_id": wid}))["step"]
    assert step["id"] == "build", step
    return wid


async def instances(client: Any) -> int:
    return len((await ok(client, "workflow_status", {}))["instances"])


async def test_the_agent_cannot_overwrite_the_users_no(setup: tuple[Any, Path], mode: str) -> None:
    server, project = setup
    async with Client(server, mode=mode, elicitation_callback=User(("accept", "no"))) as client:
        wid = await answered(client, "no")
        error = await fails(client, "workflow_state_update", {
            "workflow_id": wid, "updates": [{"path": "raw.confirmed", "value": "yes"}]})
        assert "Deploy to production?" in error and "refused" in error and "\n" not in error.strip()
        for path in ("raw", "raw.confirmed.x"):  # above it, inside it
            await fails(client, "workflow_state_update", {"workflow_id": wid, "updates": [
                {"path": path, "value": {"confirmed": "yes"}}]})
        state = (await ok(client, "workflow_state_read", {"workflow_id": wid}))["state"]
        assert state["confirmed"] == "no"
        await ok(client, "workflow_step_complete", {"workflow_id": wid, "step_id": "build", "result": "ok"})
    assert deploys(project) == 0


async def test_a_fork_cannot_edit_the_users_answer(setup: tuple[Any, Path], mode: str) -> None:
    server, project = setup
    async with Client(server, mode=mode, elicitation_callback=User(("accept", "no"))) as client:
        wid = await answered(client, "no")
        before = await instances(client)
        error = await fails(client, "workflow_fork", {"workflow_id": wid, "at": "build",
                                                      "edits": {"raw.confirmed": "yes"}})
        assert "Deploy to production?" in error and "refused" in error
        assert await instances(client) == before  # nothing was created
    assert deploys(project) == 0


async def test_a_fork_that_reuses_an_answer_asks_the_user_and_a_no_creates_nothing(
        setup: tuple[Any, Path], mode: str) -> None:
    server, project = setup
    user = User(("accept", "yes"), ("allow", False))
    async with Client(server, mode=mode, elicitation_callback=user) as client:
        wid = await answered(client, "yes")
        done = await ok(client, "workflow_step_complete", {"workflow_id": wid, "step_id": "build", "result": "ok"})
        assert done["next_step"]["id"] == "done" and deploys(project) == 1  # the one deploy the user approved
        before = await instances(client)
        error = await fails(client, "workflow_fork", {"workflow_id": wid, "at": "build"})
        assert "command line" in error and await instances(client) == before
    consent = user.forms[-1]
    assert f"start a copy of {wid} at step build" in consent and "'Deploy to production?' → \"yes\"" in consent
    assert deploys(project) == 1


async def test_a_fork_the_user_allows_is_made(setup: tuple[Any, Path], mode: str) -> None:
    server, project = setup
    user = User(("accept", "yes"), ("allow", True))
    async with Client(server, mode=mode, elicitation_callback=user) as client:
        wid = await answered(client, "yes")
        forked = await ok(client, "workflow_fork", {"workflow_id": wid, "at": "build"})
        assert forked["state"]["confirmed"] == "yes" and len(user.forms) == 2
        step = (await ok(client, "workflow_get_next_step", {"workflow_id": forked["workflow_id"]}))["step"]
        assert step["id"] == "build"
        done = await ok(client, "workflow_step_complete", {"workflow_id": forked["workflow_id"],
                                                           "step_id": "build", "result": "ok"})
        assert done["next_step"]["id"] == "done"
    assert deploys(project) == 1  # the copy's own, allowed by the user


async def test_a_client_that_cannot_ask_the_user_gets_no_fork(setup: tuple[Any, Path], mode: str) -> None:
    server, project = setup
    async with Client(server, mode=mode) as client:  # no forms: the agent relays the answer
        wid = str((await ok(client, "workflow_start", {"workflow": "deploy"}))["workflow_id"])
        step = (await ok(client, "workflow_get_next_step", {"workflow_id": wid}))["step"]
        assert step["type"] == "user_input"
        await ok(client, "workflow_step_complete", {"workflow_id": wid, "step_id": "gate", "result": "yes"})
        before = await instances(client)
        error = await fails(client, "workflow_fork", {"workflow_id": wid, "at": "build"})
        assert "Allow?" in error and "aromcp-workflows fork" in error and await instances(client) == before
        error = await fails(client, "workflow_state_update", {
            "workflow_id": wid, "updates": [{"path": "raw.confirmed", "value": "no"}]})
        assert "Deploy to production?" in error  # relayed by the agent, still the user's


async def test_a_fork_before_any_answer_needs_no_consent(setup: tuple[Any, Path], mode: str) -> None:
    server, _ = setup
    user = User(("accept", "yes"))
    async with Client(server, mode=mode, elicitation_callback=user) as client:
        wid = await answered(client, "yes")
        forked = await ok(client, "workflow_fork", {"workflow_id": wid, "version": 1})
        assert forked["workflow_id"] != wid and len(user.forms) == 1  # only the question itself


async def test_retry_of_a_failed_step_reuses_the_answer_without_asking(make_server: Any, mode: str) -> None:
    failing = DEPLOY.replace('command: "echo deployed >> deploys.log"',
                             'command: "test -f go && echo deployed >> deploys.log"')
    server, project = make_server({"deploy": failing})
    user = User(("accept", "yes"))
    async with Client(server, mode=mode, elicitation_callback=user) as client:
        wid = await answered(client, "yes")
        done = await ok(client, "workflow_step_complete", {"workflow_id": wid, "step_id": "build", "result": "ok"})
        assert done["status"] == "failed"
        (project / "go").write_text("")
        await ok(client, "workflow_retry", {"workflow_id": wid})
        again = await ok(client, "workflow_get_next_step", {"workflow_id": wid})
        assert again["step"]["id"] == "done" and len(user.forms) == 1
    assert deploys(project) == 1


async def test_the_store_records_who_answered(setup: tuple[Any, Path], mode: str) -> None:
    server, _ = setup
    async with Client(server, mode=mode, elicitation_callback=User(("accept", "no"))) as client:
        wid = await answered(client, "no")
        debug = await ok(client, "workflow_debug_info", {"workflow_id": wid})
    gate = [e for e in debug["step_history"] if e.get("step_id") == "gate"]
    assert gate and json.dumps(gate).count('"user"') >= 1


def test_the_person_at_the_cli_may_fork_with_any_answer(setup: tuple[Any, Path], tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """`fork --set` is the person, not the agent: it may change what the user decided."""
    import asyncio

    from aromcp_workflows.cli import main

    server, project = setup

    async def ask() -> str:
        async with Client(server, mode="legacy", elicitation_callback=User(("accept", "no"))) as client:
            return await answered(client, "no")

    wid = asyncio.run(ask())
    code = main(["--project-dir", str(project), "fork", wid, "--at", "build", "--set", 'raw.confirmed="yes"',
                 "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert json.loads(out)["state"]["confirmed"] == "yes"


@pytest.mark.parametrize("allow", [False, True])
async def test_a_roll_back_over_an_answer_asks_the_user(setup: tuple[Any, Path], mode: str, allow: bool) -> None:
    """Taking an instance back to a checkpoint runs its steps again with the answers it
    held: the deploy the user approved once would run twice."""
    server, project = setup
    user = User(("accept", "yes"), ("allow", allow))
    async with Client(server, mode=mode, elicitation_callback=user) as client:
        wid = await answered(client, "yes")
        point = await ok(client, "workflow_checkpoint", {"workflow_id": wid, "reason": "before build"})
        await ok(client, "workflow_step_complete", {"workflow_id": wid, "step_id": "build", "result": "ok"})
        assert deploys(project) == 1
        args = {"workflow_id": wid, "checkpoint_id": point["checkpoint_id"]}
        if not allow:
            error = await fails(client, "workflow_resume", args)
            assert "back to checkpoint" in error and "Deploy to production?" in error
            step = (await ok(client, "workflow_get_next_step", {"workflow_id": wid}))["step"]
            assert step["id"] == "done"  # where it stood: nothing was rolled back
        else:
            await ok(client, "workflow_resume", args)
            step = (await ok(client, "workflow_get_next_step", {"workflow_id": wid}))["step"]
            assert step["id"] == "build"
    assert "back to checkpoint" in user.forms[-1]
