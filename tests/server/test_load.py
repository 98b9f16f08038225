"""Load and multi-process tests over real stdio.

- 50 sub-agent loops at once over ONE stdio connection, each pulling its own task of a
  `parallel_foreach` and appending 20 items to one shared list: exactly 1,000 items,
  each exactly once, and a shared counter at exactly 1,000.
- Two server processes on one store file: a write from the process holding an old
  version loses the store's compare-and-set and is applied again to the current instance
  inside the server — never silently applied over the other process's write, and no
  conflict reaches a client.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from srv_helpers import PYTHON, AgentLog, ProtocolAgent, make_project, ok, serve_args, server_env

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
        ends = await asyncio.gather(*(agent.run(task_id) for agent, task_id in zip(agents, task_ids, strict=False)))
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


async def test_two_server_processes_never_lose_each_others_writes(dirs):
    """Each server brings a stale copy up to date (by deltas, or by loading it) before it
    acts, so interleaved writers both land; a write made on a stale copy loses the store's
    compare-and-set and is applied again (tests/store and test_conflict_between_check_and_save
    below)."""
    project, store, home = dirs
    async with Client(stdio(project, store, home), mode="legacy") as one, \
            Client(stdio(project, store, home), mode="legacy") as two:
        workflow_id = (await ok(one, "workflow_start", {"workflow": "messages"}))["workflow_id"]
        seen = await ok(two, "workflow_state_read", {"workflow_id": workflow_id})  # two loads version 1
        assert seen["state"]["hits"] == []
        for client, value in ((one, "A"), (two, "B"), (one, "A2")):
            await ok(client, "workflow_state_update", {"workflow_id": workflow_id, "updates": [
                {"path": "raw.hits", "operation": "append", "value": value}]})
        for client in (one, two):
            final = await ok(client, "workflow_state_read", {"workflow_id": workflow_id, "paths": ["raw.hits"]})
            assert final["state"]["raw.hits"] == ["A", "B", "A2"], "no write lost, none applied twice"


def test_conflict_between_check_and_save_is_retried_inside(tmp_path):
    """Two services (as two processes) on one store: a write that raced past the freshness
    check is applied again to the current instance — nothing overwritten, nothing refused."""
    from aromcp_workflows.app.service import WorkflowService
    from aromcp_workflows.state import Update

    project = tmp_path / "p"
    (project / ".aromcp" / "workflows").mkdir(parents=True)
    (project / ".aromcp" / "workflows" / "c.yaml").write_text(
        "name: c\ndefault_state: {raw: {hits: []}}\nsteps: []\n")
    one = WorkflowService(project_dir=project, store_path=tmp_path / "s.sqlite3", home=tmp_path)
    two = WorkflowService(project_dir=project, store_path=tmp_path / "s.sqlite3", home=tmp_path)
    workflow_id = one.start("c").workflow_id
    attempts = []

    def change(run):
        attempts.append(run.states["main"].flattened()["hits"])
        if len(attempts) == 1:  # the other process writes between two's check and its save
            one.state_update(workflow_id, [{"path": "raw.hits", "operation": "append", "value": "A"}])
        return run.agent_update(None, [Update(path="raw.hits", operation="append", value="B")])

    two.instances.transact(workflow_id, change)
    assert attempts == [[], ["A"]]  # applied once to the stale copy (refused), then to the current one
    assert two.state_read(workflow_id, ["raw.hits"]).state["raw.hits"] == ["A", "B"]
    assert one.state_read(workflow_id, ["raw.hits"]).state["raw.hits"] == ["A", "B"]


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
        late = await ok(two, "workflow_step_complete", {"workflow_id": workflow_id, "step_id": step["id"],
                                                        "result": "from two"})
        assert late["success"] is True  # the other process moved on: a second completion is harmless
        again = await ok(two, "workflow_step_complete", {"workflow_id": workflow_id, "step_id": step["id"],
                                                         "result": "from two"})
        assert again["success"] is True  # completing twice is harmless
        state = (await ok(two, "workflow_state_read", {"workflow_id": workflow_id}))["state"]
        assert state["said"] == "from one", "the first completion stands"




# -- the same store shared by two servers, in process (fast; the store is what is shared) --------------
SHELL_TASK = """
name: shell-task
default_state:
  raw:
    runs: []
steps:
  - id: pf
    type: parallel_foreach
    items: "{{ ['x'] }}"
    sub_agent_task: t
sub_agent_tasks:
  t:
    steps:
      - id: sh
        type: shell_command
        command: "touch started.flag; for i in $(seq 200); do [ -f release.flag ] && break; sleep 0.02; done; echo ran"
        state_update:
          path: raw.runs
          operation: append
      - id: ask
        type: agent_prompt
        prompt: "after"
"""


def two_servers(tmp_path: Path) -> tuple[Any, Any]:
    from aromcp_workflows.app.service import WorkflowService
    from aromcp_workflows.server.mcp import build_server

    project = make_project(tmp_path / "project", {"shell-task": SHELL_TASK})
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)

    def server() -> Any:
        return build_server(lambda: WorkflowService(project_dir=project, store_path=tmp_path / "s.sqlite3",
                                                    home=home))

    return server(), server()


async def test_two_sub_agents_pulling_one_task_while_its_shell_command_runs(tmp_path):
    """No lock is held across the command: the instance keeps answering; the command runs once."""
    one, _ = two_servers(tmp_path)
    async with Client(one, mode="legacy") as client:
        workflow_id = (await ok(client, "workflow_start", {"workflow": "shell-task"}))["workflow_id"]
        step = (await ok(client, "workflow_get_next_step", {"workflow_id": workflow_id}))["step"]
        task_id = step["definition"]["tasks"][0]["task_id"]

        async def pull() -> str:
            answer = await ok(client, "workflow_get_next_step", {"workflow_id": workflow_id, "task_id": task_id})
            return str(answer["step"]["id"])

        async def read_during_command() -> float:
            project = tmp_path / "project"
            for _ in range(500):  # until the command is running (it says so with a file)
                if (project / "started.flag").exists():
                    break
                await asyncio.sleep(0.01)
            began = time.perf_counter()
            await ok(client, "workflow_state_read", {"workflow_id": workflow_id})
            elapsed = time.perf_counter() - began
            (project / "release.flag").touch()  # now let the command finish
            return elapsed

        first, second, read_time = await asyncio.gather(pull(), pull(), read_during_command())
        assert first == second == f"{task_id}.ask"
        assert read_time < 1.0, f"state_read waited {read_time:.2f}s: a lock was held across the shell command"
        runs = await ok(client, "workflow_state_read", {"workflow_id": workflow_id, "paths": ["raw.runs"]})
        assert runs["state"] == {"raw.runs": ["ran"]}, "the command ran once"


async def test_looking_at_the_next_step_from_another_server_is_not_a_conflict(tmp_path):
    one, two = two_servers(tmp_path)
    async with Client(one, mode="legacy") as a, Client(two, mode="legacy") as b:
        workflow_id = (await ok(a, "workflow_start", {"workflow": "messages"}))["workflow_id"]
        step = (await ok(a, "workflow_get_next_step", {"workflow_id": workflow_id}))["step"]
        assert (await ok(b, "workflow_get_next_step", {"workflow_id": workflow_id}))["step"] == step
        reply = await ok(a, "workflow_step_complete", {"workflow_id": workflow_id, "step_id": step["id"],
                                                       "result": "r"})
        assert reply["success"] is True


async def test_reads_in_another_server_see_committed_changes(tmp_path):
    one, two = two_servers(tmp_path)
    async with Client(one, mode="legacy") as a, Client(two, mode="legacy") as b:
        workflow_id = (await ok(a, "workflow_start", {"workflow": "messages"}))["workflow_id"]
        assert (await ok(b, "workflow_state_read", {"workflow_id": workflow_id}))["state"]["n"] == 0
        await ok(a, "workflow_state_update", {"workflow_id": workflow_id, "updates": [{"path": "raw.n", "value": 5}]})
        seen = await ok(b, "workflow_state_read", {"workflow_id": workflow_id, "paths": ["raw.n"]})
        assert seen["state"] == {"raw.n": 5}


async def test_two_processes_racing_writes_no_conflict_reaches_a_client(dirs):
    """200 concurrent appends split over two server processes: writes that race past the
    freshness check are applied again inside the server; every append succeeds and lands
    exactly once."""
    project, store, home = dirs
    async with Client(stdio(project, store, home), mode="legacy") as one, \
            Client(stdio(project, store, home), mode="legacy") as two:
        workflow_id = (await ok(one, "workflow_start", {"workflow": "messages"}))["workflow_id"]
        await ok(two, "workflow_state_read", {"workflow_id": workflow_id})

        async def append(client: Any, value: str) -> None:
            await ok(client, "workflow_state_update", {"workflow_id": workflow_id, "updates": [
                {"path": "raw.hits", "operation": "append", "value": value}]})

        values = [f"v{n}" for n in range(200)]
        await asyncio.gather(*(append(one if n % 2 else two, value) for n, value in enumerate(values)))
        final = (await ok(one, "workflow_state_read", {"workflow_id": workflow_id, "paths": ["raw.hits"]}))["state"]
        assert sorted(final["raw.hits"]) == sorted(values)
        again = (await ok(two, "workflow_state_read", {"workflow_id": workflow_id, "paths": ["raw.hits"]}))["state"]
        assert again["raw.hits"] == final["raw.hits"], "both processes read the same committed list"


