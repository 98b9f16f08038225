"""A command that cannot be spawned is a step failure, never a wedged instance or server.

The attack: a 300 KB value (the kernel refuses it: E2BIG) or a NUL byte (no program can
receive one) inserted into a `shell_command`.  Before the fix the spawn raised, the
instance stayed "running" with its command parked forever, every later call busy-polled
it, and the worker threads ran out.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from lead_helpers import ok, project_with, server_for, service_for
from mcp import Client

WORKFLOW = """
name: spawn
inputs:
  x: {type: string}
default_state:
  raw: {stored: null}
steps:
  - id: echo_it
    type: shell_command
    command: "echo {{ inputs.x }}"
    on_error: ON_ERROR
    fallback_value: gave-up
    state_update: {path: raw.stored}
  - type: user_message
    message: "stored={{ stored }}"
"""

HUGE = "a" * 300_000
NUL = "before\x00after"


@pytest.fixture
def server(tmp_path: Path) -> object:
    project = project_with(tmp_path / "p", {
        "spawn": WORKFLOW.replace("ON_ERROR", "fail"),
        "spawn-continue": WORKFLOW.replace("ON_ERROR", "continue").replace("name: spawn", "name: spawn-continue"),
        "trivial": "name: trivial\nsteps:\n  - {type: user_message, message: hi}\n",
    })
    (tmp_path / "h").mkdir()
    return server_for(service_for(project, tmp_path / "s.sqlite3", tmp_path / "h"))


@pytest.mark.parametrize("value", [HUGE, NUL], ids=["e2big", "nul"])
async def test_spawn_failure_fails_the_step_and_the_server_keeps_serving(server: object, value: str) -> None:
    async with Client(server, mode="legacy") as client:
        started = await ok(client, "workflow_start", {"workflow": "spawn", "inputs": {"x": value}})
        wid = started["workflow_id"]
        answer = await asyncio.wait_for(ok(client, "workflow_get_next_step", {"workflow_id": wid}), 20)
        assert answer["status"] == "failed"
        assert "echo_it" in answer["error"] and "could not be started" in answer["error"]
        again = await asyncio.wait_for(ok(client, "workflow_get_next_step", {"workflow_id": wid}), 20)
        assert again["status"] == "failed"  # not parked on a command that never ran
        status = await ok(client, "workflow_status", {"workflow_id": wid})
        assert status["status"] == "failed" and status["current_steps"] == []
        # many more calls on the broken instance do not exhaust the server's workers
        await asyncio.wait_for(asyncio.gather(*[
            ok(client, "workflow_get_next_step", {"workflow_id": wid}) for _ in range(60)]), 30)
        other = await ok(client, "workflow_start", {"workflow": "trivial"})
        done = await asyncio.wait_for(ok(client, "workflow_get_next_step", {"workflow_id": other["workflow_id"]}), 10)
        assert done["messages"] == ["hi"]


async def test_spawn_failure_obeys_on_error_continue(server: object) -> None:
    async with Client(server, mode="legacy") as client:
        started = await ok(client, "workflow_start", {"workflow": "spawn-continue", "inputs": {"x": HUGE}})
        answer = await asyncio.wait_for(
            ok(client, "workflow_get_next_step", {"workflow_id": started["workflow_id"]}), 20)
        assert answer["status"] == "completed"
        assert answer["messages"] == ["stored=gave-up"]


async def test_spawn_error_names_the_cause(server: object) -> None:
    async with Client(server, mode="legacy") as client:
        started = await ok(client, "workflow_start", {"workflow": "spawn", "inputs": {"x": NUL}})
        answer = await ok(client, "workflow_get_next_step", {"workflow_id": started["workflow_id"]})
        assert "NUL byte" in answer["error"]
