"""Load and multi-process tests over real stdio.

- 50 sub-agent loops at once over ONE stdio connection, each pulling its own task of a
  `parallel_foreach` and appending 20 items to one shared list: exactly 1,000 items,
  each exactly once, and a shared counter at exactly 1,000.
- Two server processes on one store file: a write from the process holding an old
  version is refused with an error naming the other writer, never silently applied over
  the other process's write.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path


import pytest
from mcp import Client, StdioServerParameters
from srv_helpers import PYTHON, AgentLog, ProtocolAgent, fails, make_project, ok, serve_args, server_env

pytestmark = pytest.mark.slow

TASKS, PER_TASK = 50, 20


def stdio(project: Path, store: Path, home: Path) -> StdioServerParameters:
    return StdioServerParameters(command=PYTHON, args=serve_args(project, store), cwd=str(project),
                                 env=server_env(home, store))


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path, Path]:
    home = tmp_path / "home"
    home.mkdir()
    return make_project(tmp_path / "project"), tmp_path / "store.sqlite3", home


async def test_fifty_sub_agents_over_one_connection(dirs):
    project, store, home = dirs
    names = [f"item{n:02d}" for n in range(TASKS)]
    async with Client(stdio(project, store, home), mode="legacy") as client:
        started = await ok(client, "workflow_start", {"workflow": "fanout",
                                                      "inputs": {"items": names, "per_task": PER_TASK}})
        workflow_id = started["workflow_id"]
        answer = await ok(client, "workflow_get_next_step", {"workflow_id": workflow_id})
        step = answer["step"]
        assert step["type"] == "parallel_tasks"
        task_ids = [t["task_id"] for t in step["definition"]["tasks"]]
        assert len(task_ids) == TASKS, "max_parallel 50: one batch with every task"
        log = AgentLog()
        # most sub-agents economical, every tenth seed-style: both over the same connection
        agents = [ProtocolAgent(client, workflow_id, economical=n % 10 != 0, log=log) for n in range(TASKS)]
        began = time.perf_counter()
        ends = await asyncio.gather(*(agent.run(task_id) for agent, task_id in zip(agents, task_ids)))
        elapsed = time.perf_counter() - began
        assert all(end["step"] is None and end["status"] == "completed" for end in ends)
        calls = log.total_calls
        print(f"50 sub-agents: {calls} tool calls in {elapsed:.2f}s ({calls / elapsed:.0f} calls/s)")
        finish = await ok(client, "workflow_step_complete", {"workflow_id": workflow_id, "step_id": step["id"]})
        assert finish["success"] is True and finish["next_step"] is None
        assert finish["messages"] == [f"done: {TASKS * PER_TASK} results, count {TASKS * PER_TASK}"]
        state = (await ok(client, "workflow_state_read", {"workflow_id": workflow_id}))["state"]
        shared = state["shared"]
        assert len(shared) == TASKS * PER_TASK == 1000
        expected = {f"did: Work on {name} part {i}" for name in names for i in range(PER_TASK)}
        assert set(shared) == expected and len(set(shared)) == len(shared), "each item exactly once"
        assert state["count"] == 1000 and state["total"] == 1000
        # each task's own appends arrive in its own order
        for name in names[:5]:
            mine = [s for s in shared if s.startswith(f"did: Work on {name} part ")]
            assert mine == [f"did: Work on {name} part {i}" for i in range(PER_TASK)]
        status = await ok(client, "workflow_status", {"workflow_id": workflow_id})
        assert status["status"] == "completed" and status["progress"]["tasks_completed"] == TASKS


async def test_two_server_processes_detect_a_conflicting_write(dirs):
    project, store, home = dirs
    async with Client(stdio(project, store, home), mode="legacy") as one, \
            Client(stdio(project, store, home), mode="legacy") as two:
        workflow_id = (await ok(one, "workflow_start", {"workflow": "messages"}))["workflow_id"]
        seen = await ok(two, "workflow_state_read", {"workflow_id": workflow_id})  # two loads version 1
        assert seen["state"]["hits"] == []
        await ok(one, "workflow_state_update", {"workflow_id": workflow_id,
                                                "updates": [{"path": "raw.hits", "operation": "append", "value": "A"}]})
        text = await fails(two, "workflow_state_update", {"workflow_id": workflow_id, "updates": [
            {"path": "raw.hits", "operation": "append", "value": "B"}]})
        assert "Another server process" in text and workflow_id in text, text
        assert "retry" in text
        # the refused write was not applied; after the error, two has reloaded and a retry works
        await ok(two, "workflow_state_update", {"workflow_id": workflow_id, "updates": [
            {"path": "raw.hits", "operation": "append", "value": "B"}]})
        text = await fails(one, "workflow_state_update", {"workflow_id": workflow_id, "updates": [
            {"path": "raw.hits", "operation": "append", "value": "A2"}]})
        assert "Another server process" in text
        await ok(one, "workflow_state_update", {"workflow_id": workflow_id, "updates": [
            {"path": "raw.hits", "operation": "append", "value": "A2"}]})
        final = await ok(one, "workflow_state_read", {"workflow_id": workflow_id, "paths": ["raw.hits"]})
        assert final["state"]["raw.hits"] == ["A", "B", "A2"], "no write lost, none applied twice"


async def test_two_processes_completing_the_same_step(dirs):
    project, store, home = dirs
    async with Client(stdio(project, store, home), mode="legacy") as one, \
            Client(stdio(project, store, home), mode="legacy") as two:
        workflow_id = (await ok(one, "workflow_start", {"workflow": "messages"}))["workflow_id"]
        step = (await ok(one, "workflow_get_next_step", {"workflow_id": workflow_id}))["step"]
        seen = (await ok(two, "workflow_state_read", {"workflow_id": workflow_id}))["state"]
        assert seen["said"] == ""
        await ok(one, "workflow_step_complete", {"workflow_id": workflow_id, "step_id": step["id"],
                                                 "result": "from one"})
        result = await two.call_tool("workflow_step_complete", {"workflow_id": workflow_id,
                                                                 "step_id": step["id"], "result": "from two"})
        if result.is_error:  # detected: the other process moved on
            text = "\n".join(getattr(c, "text", "") for c in result.content)
            assert "Another server process" in text, text
        again = await ok(two, "workflow_step_complete", {"workflow_id": workflow_id, "step_id": step["id"],
                                                         "result": "from two"})
        assert again["success"] is True  # completing twice is harmless
        state = (await ok(two, "workflow_state_read", {"workflow_id": workflow_id}))["state"]
        assert state["said"] == "from one", "the first completion stands"


