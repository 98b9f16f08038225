"""Interleavings too narrow to hit reliably through the protocol, pinned at the service
level with the exact order of events a concurrent tool call would produce."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from srv_helpers import make_project


def test_a_call_holding_the_instance_during_a_rollback_cannot_undo_it(tmp_path: Path) -> None:
    from aromcp_workflows.app.service import WorkflowService
    from aromcp_workflows.state import Update

    project = make_project(tmp_path / "project")
    service = WorkflowService(project_dir=project, store_path=tmp_path / "s.sqlite3", home=tmp_path)
    workflow_id = service.start("messages").workflow_id
    service.next_step(workflow_id)
    checkpoint = service.checkpoint(workflow_id, "before").checkpoint_id
    service.state_update(workflow_id, [{"path": "raw.n", "value": 1}])
    seen = []

    def concurrent_call(run):  # a tool call that got the live instance before the rollback ...
        seen.append(run.states["main"].flattened()["n"])
        if len(seen) == 1:
            service.resume(workflow_id, checkpoint)  # ... while the orchestrator rolls back
        return run.agent_update(None, [Update(path="raw.hits", operation="append", value="late")])

    service.instances.transact(workflow_id, concurrent_call)
    assert seen == [1, 0], "the call was applied again to the rolled-back instance"
    service.instances.forget(workflow_id)
    state = service.state_read(workflow_id, ["raw.n", "raw.hits"]).state
    assert state["raw.n"] == 0, "the rollback was undone by a call that started before it"
    assert state["raw.hits"].count("late") == 1


async def command_started(project: Path) -> None:
    import asyncio

    for _ in range(400):
        if (project / "started.flag").exists():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the shell command never started")


SHELL_IN_TASK = """
name: shell-in-task
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
        command: "touch started.flag; sleep 1; echo ran >> runs.log; echo ran"
        state_update:
          path: raw.runs
          operation: append
      - id: ask
        type: agent_prompt
        prompt: "after"
"""


async def test_resume_during_a_running_shell_command_does_not_run_it_twice(tmp_path: Path) -> None:
    import asyncio

    from mcp import Client
    from srv_helpers import ok

    from aromcp_workflows.app.service import WorkflowService
    from aromcp_workflows.server.mcp import build_server

    project = make_project(tmp_path / "project", {"shell-in-task": SHELL_IN_TASK})
    server = build_server(lambda: WorkflowService(project_dir=project, store_path=tmp_path / "s.sqlite3",
                                                  home=tmp_path))
    async with Client(server, mode="legacy") as client:
        workflow_id = (await ok(client, "workflow_start", {"workflow": "shell-in-task"}))["workflow_id"]
        step = (await ok(client, "workflow_get_next_step", {"workflow_id": workflow_id}))["step"]
        task = {"workflow_id": workflow_id, "task_id": step["definition"]["tasks"][0]["task_id"]}

        async def sub_agent() -> Any:
            return await client.call_tool("workflow_get_next_step", task)

        async def orchestrator_resumes() -> Any:
            await command_started(project)
            await ok(client, "workflow_resume", {"workflow_id": workflow_id})
            return await client.call_tool("workflow_get_next_step", task)  # a second puller of the task

        first, second = await asyncio.gather(sub_agent(), orchestrator_resumes())
        runs = (project / "runs.log").read_text().count("ran")
        assert runs == 1, f"the command ran {runs} times"
        assert not first.is_error, first.content[0].text
        assert not second.is_error


async def test_a_write_from_another_server_during_a_shell_command_does_not_rerun_it(tmp_path: Path) -> None:
    import asyncio

    from mcp import Client
    from srv_helpers import ok

    from aromcp_workflows.app.service import WorkflowService
    from aromcp_workflows.server.mcp import build_server

    project = make_project(tmp_path / "project", {"shell-in-task": SHELL_IN_TASK})

    def server() -> Any:
        return build_server(lambda: WorkflowService(project_dir=project, store_path=tmp_path / "s.sqlite3",
                                                    home=tmp_path))

    async with Client(server(), mode="legacy") as one, Client(server(), mode="legacy") as two:
        workflow_id = (await ok(one, "workflow_start", {"workflow": "shell-in-task"}))["workflow_id"]
        step = (await ok(one, "workflow_get_next_step", {"workflow_id": workflow_id}))["step"]
        task = {"workflow_id": workflow_id, "task_id": step["definition"]["tasks"][0]["task_id"]}

        async def elsewhere() -> Any:
            await command_started(project)  # the command is running in server one
            await ok(two, "workflow_state_update", {"workflow_id": workflow_id,
                                                    "updates": [{"path": "raw.note", "value": "from two"}]})
            return await one.call_tool("workflow_get_next_step", task)

        first, _ = await asyncio.gather(one.call_tool("workflow_get_next_step", task), elsewhere())
        runs = (project / "runs.log").read_text().count("ran")
        assert runs == 1, f"the command ran {runs} times"
        assert not first.is_error, first.content[0].text
        state = (await ok(two, "workflow_state_read", {"workflow_id": workflow_id}))["state"]
        assert state["runs"] == ["ran"] and state["note"] == "from two"


def test_checkpoint_and_fail_leaves_a_checkpoint(tmp_path):
    """error_handling: checkpoint_and_fail (the default) saves a checkpoint at the failure,
    which workflow_resume then reports as the last one."""
    from aromcp_workflows.app.service import WorkflowService

    project = tmp_path / "p"
    (project / ".aromcp" / "workflows").mkdir(parents=True)
    (project / ".aromcp" / "workflows" / "boom.yaml").write_text(
        "name: boom\nsteps:\n  - id: bad\n    type: shell_command\n    command: \"exit 5\"\n")
    service = WorkflowService(project_dir=project, store_path=tmp_path / "s.sqlite3", home=tmp_path)
    workflow_id = service.start("boom").workflow_id
    assert service.next_step(workflow_id).status == "failed"
    last = service.resume(workflow_id).last_checkpoint
    assert last is not None and "checkpoint_and_fail" in last.reason and "exited with code 5" in last.reason
