"""A server serves the instances of its own project, and no other, by id.

The attack: two projects share one store (the default: one SQLite file per user).  A
client of project B's server names an instance of project A by its id and reads its
state, answers its steps or cancels it.  `workflow_status` without an id lists only B's
instances, but the by-id calls checked nothing.  Now every by-id call on an instance of
another project gets the very answer an unknown id gets, unless the server was started
to serve every project (`serve --all-projects`, `WorkflowService(all_projects=True)`).

Real servers in memory (`mcp.Client` through JSON-RPC framing) on one real SQLite store.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from lead_helpers import ok, project_with, server_for, text_of
from mcp import Client

from aromcp_workflows.app.service import WorkflowService

FLOW = """
name: flow
description: "a question, then a task"
version: "1.0.0"
inputs:
  api_token: {type: string, default: "s3cr3t-value-of-project-a"}
steps:
  - id: think
    type: agent_prompt
    prompt: "think"
    state_update: {path: raw.thought}
  - id: more
    type: agent_prompt
    prompt: "more"
"""


def by_id_calls(workflow_id: str, step_id: str) -> list[tuple[str, dict[str, Any]]]:
    """Every tool that names an instance, with arguments that would succeed on it."""
    wid = {"workflow_id": workflow_id}
    return [
        ("workflow_get_next_step", wid),
        ("workflow_step_complete", wid | {"step_id": step_id, "result": "hijacked"}),
        ("workflow_state_read", wid),
        ("workflow_state_update", wid | {"updates": [{"path": "raw.thought", "value": "hijacked"}]}),
        ("workflow_state_dependencies", wid | {"field": "thought"}),
        ("workflow_checkpoint", wid | {"reason": "x"}),
        ("workflow_resume", wid),
        ("workflow_complete", wid | {"status": "cancelled"}),
        ("workflow_status", wid),
        ("workflow_trace_transformations", wid),
        ("workflow_debug_info", wid),
        ("workflow_retry", wid),
        ("workflow_fork", wid),
    ]


def shape(text: str, workflow_id: str) -> str:
    """An error text with the instance id left out (an unknown id is another id)."""
    return re.sub(r"wf_[0-9a-f]+", "<id>", text.replace(workflow_id, "<id>"))


@pytest.fixture
def two_projects(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    home = tmp_path / "home"
    home.mkdir()
    store = tmp_path / "shared.sqlite3"
    return (project_with(tmp_path / "a", {"flow": FLOW}), project_with(tmp_path / "b", {"flow": FLOW}), store, home)


async def test_by_id_calls_on_another_projects_instance_answer_as_an_unknown_id(two_projects) -> None:
    project_a, project_b, store, home = two_projects
    service_a = WorkflowService(project_dir=project_a, store_path=store, home=home)
    async with Client(server_for(service_a)) as client_a:
        workflow_id = (await ok(client_a, "workflow_start", {"workflow": "flow"}))["workflow_id"]
        await ok(client_a, "workflow_get_next_step", {"workflow_id": workflow_id})
    server_b = server_for(WorkflowService(project_dir=project_b, store_path=store, home=home))
    async with Client(server_b) as client_b:
        for tool, args in by_id_calls(workflow_id, "think"):
            foreign = await client_b.call_tool(tool, args)
            unknown = await client_b.call_tool(tool, args | {"workflow_id": "wf_0123456789ab"})
            assert foreign.is_error, f"{tool} served project A's instance to project B: {foreign.structured_content}"
            assert shape(text_of(foreign), workflow_id) == shape(text_of(unknown), "wf_0123456789ab"), tool
            assert "s3cr3t" not in text_of(foreign)
        listed = await ok(client_b, "workflow_status", {})
        assert listed["instances"] == []
    async with Client(server_for(WorkflowService(project_dir=project_a, store_path=store, home=home))) as again:
        state = (await ok(again, "workflow_state_read", {"workflow_id": workflow_id}))["state"]
        assert "thought" not in state or state["thought"] != "hijacked"  # nothing of B's attempts reached A
        status = await ok(again, "workflow_status", {"workflow_id": workflow_id})
        assert status["status"] == "running" and status["current_steps"] == ["think"]


async def test_a_server_for_all_projects_serves_every_instance(two_projects) -> None:
    project_a, project_b, store, home = two_projects
    service_a = WorkflowService(project_dir=project_a, store_path=store, home=home)
    workflow_id = service_a.start("flow").workflow_id
    everywhere = WorkflowService(project_dir=project_b, store_path=store, home=home, all_projects=True)
    async with Client(server_for(everywhere)) as client:
        step = await ok(client, "workflow_get_next_step", {"workflow_id": workflow_id})
        assert step["step"]["id"] == "think"
        done = await ok(client, "workflow_step_complete", {"workflow_id": workflow_id, "step_id": "think",
                                                           "result": "fine"})
        assert done["success"] and done["next_step"]["id"] == "more"
        listed = await ok(client, "workflow_status", {})
        assert listed["instances"] == [], "the list stays the project's own"


def test_the_service_refuses_by_id_calls_on_other_projects_whatever_the_caller(two_projects) -> None:
    """The check is in the instance layer: the CLI, the runner and the tools all pass it."""
    from aromcp_workflows.instances.errors import ServiceError

    project_a, project_b, store, home = two_projects
    workflow_id = WorkflowService(project_dir=project_a, store_path=store, home=home).start("flow").workflow_id
    service_b = WorkflowService(project_dir=project_b, store_path=store, home=home)
    for call in (lambda: service_b.status(workflow_id), lambda: service_b.masker(workflow_id),
                 lambda: service_b.instances.history(workflow_id),
                 lambda: service_b.instances.last_checkpoint(workflow_id),
                 lambda: service_b.instances.add_checkpoint(workflow_id, None, "x"),
                 lambda: service_b.resume(workflow_id, "cp_nope")):
        with pytest.raises(ServiceError, match="No workflow instance with id"):
            call()


async def test_refusals_reach_the_client_with_the_unknown_id_text(two_projects) -> None:
    project_a, project_b, store, home = two_projects
    workflow_id = WorkflowService(project_dir=project_a, store_path=store, home=home).start("flow").workflow_id
    async with Client(server_for(WorkflowService(project_dir=project_b, store_path=store, home=home))) as client:
        result = await client.call_tool("workflow_status", {"workflow_id": workflow_id})
    assert result.is_error and f"No workflow instance with id {workflow_id!r}" in text_of(result)
