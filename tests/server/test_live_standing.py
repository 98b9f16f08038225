"""Who a live run waits for, whether it is stalled, and its question answered by the person.

A real server subprocess over stdio (`mcp.Client(StdioServerParameters)`) plays the
agent's server; the person uses the real CLI in another process (`status`, `answer`),
which reads the same SQLite store.  `AROMCP_STALE_AFTER` is set low so "stalled" is a
matter of seconds.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from srv_helpers import PYTHON, make_project, ok, serve_args, server_env

from aromcp_workflows.app.statuses import standing

pytestmark = pytest.mark.slow

LIVE = """
name: live
description: "A task, a question, a command"
version: "1.0.0"
steps:
  - id: think
    type: agent_prompt
    prompt: "think it over"
  - id: confirm
    type: user_input
    prompt: "Deploy to production?"
    choices: ["yes", "no"]
    state_update: {path: raw.confirmed}
  - id: work
    type: shell_command
    command: "sleep 8 && echo built"
  - id: done
    type: agent_prompt
    prompt: "say done"
"""


class Live:
    """The project, the store, the agent's stdio server and the person's CLI."""

    def __init__(self, tmp_path: Path):
        self.home = tmp_path / "home"
        self.home.mkdir()
        self.project = make_project(tmp_path / "project", {"live": LIVE})
        self.store = tmp_path / "s.sqlite3"
        self.env = server_env(self.home, self.store, AROMCP_STALE_AFTER="1",
                              AROMCP_COMMANDS_DIR=str(tmp_path / "commands"))

    @asynccontextmanager
    async def agent(self) -> AsyncIterator[Any]:
        params = StdioServerParameters(command=PYTHON, args=serve_args(self.project, self.store),
                                       cwd=str(self.project), env=self.env)
        async with Client(params, mode="legacy") as client:
            yield client

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([PYTHON, "-m", "aromcp_workflows", "--project-dir", str(self.project), *args,
                               "--store", str(self.store)], env=self.env, capture_output=True, text=True,
                              timeout=120)

    def status(self, wid: str) -> dict[str, Any]:
        done = self.cli("status", wid, "--json")
        assert done.returncode == 0, done.stderr
        return dict(json.loads(done.stdout))


@pytest.fixture
def live(tmp_path: Path) -> Live:
    return Live(tmp_path)


async def test_a_run_says_who_it_waits_for_and_when_its_agent_is_gone(live: Live) -> None:
    async with live.agent() as client:
        wid = str((await ok(client, "workflow_start", {"workflow": "live"}))["workflow_id"])
        step = (await ok(client, "workflow_get_next_step", {"workflow_id": wid}))["step"]
        assert step["id"] == "think"
        mine = await ok(client, "workflow_status", {"workflow_id": wid})
        held = mine["steps_in_hand"]
        assert [(h["step_id"], h["waiting_for"]) for h in held] == [("think", "agent")]
        assert held[0]["since"] and held[0]["for_s"] >= 0 and mine["stalled"] is False
        time.sleep(1.6)  # past AROMCP_STALE_AFTER=1 with the agent silent
        seen = live.status(wid)
        assert seen["stalled"] is True and seen["steps_in_hand"][0]["waiting_for"] == "agent"
        assert seen["steps_in_hand"][0]["stalled"] is True
        text = live.cli("status", wid).stdout
        assert "waiting for the agent (think) since" in text and "— stalled" in text and "(stalled)" in text
        listing = live.cli("status").stdout
        assert "stalled" in next(line for line in listing.splitlines() if line.startswith(wid))
        version = seen["version"]
        again = await ok(client, "workflow_get_next_step", {"workflow_id": wid})  # the agent is back
        assert again["step"]["id"] == "think"
        mine = await ok(client, "workflow_status", {"workflow_id": wid})
        assert mine["stalled"] is False  # its own server knows the call
        assert live.status(wid)["version"] == version  # a call that changed nothing wrote nothing


async def test_the_person_answers_the_question_from_the_command_line(live: Live) -> None:
    async with live.agent() as client:
        wid = str((await ok(client, "workflow_start", {"workflow": "live"}))["workflow_id"])
        await ok(client, "workflow_get_next_step", {"workflow_id": wid})
        done = await ok(client, "workflow_step_complete", {"workflow_id": wid, "step_id": "think", "result": "ok"})
        assert done["next_step"]["id"] == "confirm"
        seen = live.status(wid)
        assert [(h["step_id"], h["waiting_for"], h.get("question")) for h in seen["steps_in_hand"]] == [
            ("confirm", "user", "Deploy to production?")]
        assert "waiting for the user: Deploy to production?" in live.cli("status", wid).stdout
        assert seen["stalled"] is False  # a person, not an agent, is awaited

        wrong = live.cli("answer", wid, "maybe")
        assert wrong.returncode == 1 and len(wrong.stderr.strip().splitlines()) == 1
        assert "Deploy to production?" in wrong.stderr and "nothing was recorded" in wrong.stderr
        assert live.status(wid)["version"] == seen["version"]  # a wrong value changes nothing

        right = live.cli("answer", wid, "no")
        assert right.returncode == 0, right.stderr
        assert live.cli("answer", wid, "yes").returncode == 1  # answered already

        step = (await ok(client, "workflow_get_next_step", {"workflow_id": wid}))["step"]
        assert step["id"] == "done"  # past the question (and the command ran on the agent's call)
        state = (await ok(client, "workflow_state_read", {"workflow_id": wid}))["state"]
        assert state["confirmed"] == "no"
        debug = await ok(client, "workflow_debug_info", {"workflow_id": wid})
        assert [e.get("answered_by") for e in debug["step_history"] if e["step_id"] == "confirm"] == ["person"]
        refused = await client.call_tool("workflow_state_update", {
            "workflow_id": wid, "updates": [{"path": "raw.confirmed", "value": "yes"}]})
        assert refused.is_error  # the person's answer is the user's


async def test_a_running_command_is_what_the_run_waits_for(live: Live) -> None:
    async with live.agent() as client:
        wid = str((await ok(client, "workflow_start", {"workflow": "live"}))["workflow_id"])
        await ok(client, "workflow_get_next_step", {"workflow_id": wid})
        await ok(client, "workflow_step_complete", {"workflow_id": wid, "step_id": "think", "result": "ok"})
        assert live.cli("answer", wid, "yes").returncode == 0
        import asyncio

        call = asyncio.create_task(client.call_tool("workflow_get_next_step", {"workflow_id": wid}))
        deadline = time.monotonic() + 20
        while True:
            held = live.status(wid).get("steps_in_hand") or []
            if held and held[0]["waiting_for"] == "command":
                break
            assert time.monotonic() < deadline, held
            await asyncio.sleep(0.2)
        assert held[0]["command"] == "sleep 8 && echo built"
        assert "command running" in live.cli("status", wid).stdout
        assert (await call).structured_content["step"]["id"] == "done"


def test_standing_names_each_kind_of_wait() -> None:
    """The derivation alone, on stored thread JSON (what a listing reads)."""
    from datetime import UTC, datetime, timedelta

    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    at = (now - timedelta(seconds=900)).isoformat()
    threads = {
        "main": {"status": "running", "pending": {"step_id": "fan", "kind": "parallel",
                                                  "data": {"task_ids": ["t1", "t2"], "since": at}}},
        "t1": {"status": "running", "pending": {"step_id": "t1.fix", "kind": "agent",
                                                "step": {"type": "agent_prompt"}, "data": {"since": at}}},
        "t2": {"status": "pending", "pending": None},
    }
    held, stalled = standing(threads, {"t1": (now - timedelta(seconds=30)).isoformat()}, at, "running", now)
    kinds = {(h.step_id, h.task_id, h.waiting_for) for h in held}
    assert kinds == {("fan", None, "task"), ("t1.fix", "t1", "agent"), ("t2 (not started)", "t2", "agent")}
    assert stalled  # t2: no sub-agent pulled it in 900 s
    t1 = next(h for h in held if h.task_id == "t1")
    assert t1.idle_s == 30 and t1.for_s == 900
    # the flag is the step's own: the busy sub-agent's step is not the stalled one
    assert {h.step_id for h in held if h.stalled} == {"t2 (not started)"} and t1.stalled is None
    del threads["t2"]
    assert standing(threads, {"t1": (now - timedelta(seconds=30)).isoformat()}, at, "running", now)[1] is False
    assert standing(threads, {}, at, "completed", now) == ([], False)
