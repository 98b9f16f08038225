"""One trace per instance: every span of a run — tool calls, steps, commands, recomputes,
sub-agent tasks — in one trace whose root span is the instance, whichever server process
(replica) handles each call, and whatever changes the instance outside a tool call.

Two servers with their own tracing over one SQLite file stand for two processes here (the
trace context they share travels only through the store); tests/observe/test_trace_restart.py
does it with real processes, one of them killed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from aromcp_workflows.observe.context import derived_root, ended, instance_trace, parse, root_ends
from tests.observe.test_spans import TRACED
from tests.server.srv_helpers import ok

ASKING = """
name: "trace:asking"
steps:
  - {id: first, type: agent_prompt, prompt: "one"}
  - {id: second, type: agent_prompt, prompt: "two"}
"""


def service_on(tmp_path: Path, tracing: Any) -> Any:
    from aromcp_workflows.app.service import WorkflowService

    folder = tmp_path / "project" / ".aromcp" / "workflows"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "trace:demo.yaml").write_text(TRACED)
    (folder / "trace:asking.yaml").write_text(ASKING)
    return WorkflowService(project_dir=tmp_path / "project", store_path=tmp_path / "shared.sqlite3", home=tmp_path,
                           observer=tracing)


def server_on(service: Any, tracing: Any) -> Any:
    from aromcp_workflows.server.mcp import build_server

    return build_server(lambda: service, observer=tracing)


def new_tracing(global_tracing: Any) -> Any:
    from aromcp_workflows.observe.otel import Tracing

    return Tracing(global_tracing[0])


def in_trace(spans: Any, trace_id: str) -> list[Any]:
    return [s for s in spans if s.context.trace_id == int(trace_id, 16)]


def assert_one_tree(spans: list[Any], root_ids: Any, workflow: str) -> None:
    """One parentless span, the instance's, with the ids kept in the store; every other
    span's parent is a span of the same trace."""
    (root,) = [s for s in spans if s.parent is None]
    assert root.name == f"workflow {workflow}" and root.context.span_id == int(root_ids.span_id, 16)
    ids = {s.context.span_id for s in spans}
    orphans = [s.name for s in spans if s.parent is not None and s.parent.span_id not in ids]
    assert not orphans, orphans


async def agent_run(clients: list[Any], wid: str, task_id: str | None = None) -> dict[str, Any]:
    """Answer every step, each call through the next client in turn (replicas behind a
    balancer); sub-agent tasks are pulled the same way."""
    turn = 0
    args: dict[str, Any] = {"workflow_id": wid} | ({"task_id": task_id} if task_id else {})
    answer = await ok(clients[turn % len(clients)], "workflow_get_next_step", args)
    step = answer["step"]
    while step is not None:
        turn += 1
        if step["type"] == "parallel_tasks":
            for task in step["definition"]["tasks"]:
                await agent_run(clients[1:] + clients[:1], wid, task["task_id"])
        answer = await ok(clients[turn % len(clients)], "workflow_step_complete",
                          {**args, "step_id": step["id"], "result": "done"})
        step = answer["next_step"]
    return answer


async def test_replicas_make_one_trace_whose_root_is_the_instance(tmp_path, global_tracing, exporter):
    one, two = new_tracing(global_tracing), new_tracing(global_tracing)
    try:
        first, second = service_on(tmp_path, one), service_on(tmp_path, two)
        async with Client(server_on(first, one), mode="legacy") as a, \
                Client(server_on(second, two), mode="legacy") as b:
            wid = (await ok(a, "workflow_start", {"workflow": "trace:demo"}))["workflow_id"]
            assert (await agent_run([b, a], wid))["status"] == "completed"
        one.flush()
        two.flush()
    finally:
        one.stop()
        two.stop()
    kept = first.trace_root(wid)
    assert kept == second.trace_root(wid)  # both read it from the store
    spans = exporter.get_finished_spans()
    ours = in_trace(spans, kept.trace_id)
    assert_one_tree(ours, kept, "trace:demo")
    names = {s.name for s in ours}
    assert {"tools/call workflow_start", "tools/call workflow_get_next_step", "tools/call workflow_step_complete",
            "step bump", "shell", "recompute", "step fan", "step work_0.act", "step work_1.act"} <= names, names
    about = [s for s in spans if s.attributes.get("workflow.id") == wid]
    assert {s.context.trace_id for s in about} == {int(kept.trace_id, 16)}  # nothing of it elsewhere
    (root,) = [s for s in ours if s.name == "workflow trace:demo"]
    assert root.attributes["workflow.status"] == "completed"
    steps = [s for s in about if not s.name.startswith("tools/call ")]  # a call ends after its commit
    assert root.start_time <= min(s.start_time for s in about) and root.end_time >= max(s.end_time for s in steps)


async def test_a_change_outside_a_call_and_a_resume_stay_under_the_one_root(tmp_path, global_tracing, exporter):
    """Interrupting (the runner does it through the service, outside any tool call) ends the
    root span; resuming and finishing add spans under it, and no second root."""
    tracing = new_tracing(global_tracing)
    try:
        service = service_on(tmp_path, tracing)
        async with Client(server_on(service, tracing), mode="legacy") as client:
            wid = (await ok(client, "workflow_start", {"workflow": "trace:asking"}))["workflow_id"]
            await ok(client, "workflow_get_next_step", {"workflow_id": wid})
            service.interrupt(wid, "interrupted by SIGINT")
            tracing.flush()
            roots = [s for s in exporter.get_finished_spans() if s.name == "workflow trace:asking"]
            assert [r.attributes["workflow.status"] for r in roots] == ["interrupted"]
            await ok(client, "workflow_resume", {"workflow_id": wid})
            assert (await agent_run([client], wid))["status"] == "completed"
        tracing.flush()
    finally:
        tracing.stop()
    kept = service.trace_root(wid)
    ours = in_trace(exporter.get_finished_spans(), kept.trace_id)
    assert_one_tree(ours, kept, "trace:asking")
    assert {"step first", "step second", "tools/call workflow_resume"} <= {s.name for s in ours}


async def test_an_instance_started_while_tracing_was_off_gets_a_derived_root(tmp_path, global_tracing, exporter):
    """No trace context kept (tracing was off, or an older release made it): every process
    derives the same one from the workflow id, and nothing is written for it until the
    instance stops."""
    plain = service_on(tmp_path, None)
    wid = plain.start("trace:asking").workflow_id
    assert plain.instances.read(wid, lambda run, _: run.machine.trace_context) is None
    tracing = new_tracing(global_tracing)
    try:
        service = service_on(tmp_path, tracing)
        async with Client(server_on(service, tracing), mode="legacy") as client:
            assert (await agent_run([client], wid))["status"] == "completed"
        tracing.flush()
    finally:
        tracing.stop()
    assert service.trace_root(wid) == derived_root(wid)
    ours = in_trace(exporter.get_finished_spans(), derived_root(wid).trace_id)
    assert_one_tree(ours, derived_root(wid), "trace:asking")


def test_a_fork_has_a_trace_of_its_own_linked_to_its_origin(tmp_path, global_tracing, exporter):
    tracing = new_tracing(global_tracing)
    try:
        service = service_on(tmp_path, tracing)
        wid = service.start("trace:asking").workflow_id
        service.next_step(wid)
        fork = service.fork(wid).workflow_id
        service.complete(fork, "cancelled")
        tracing.flush()
    finally:
        tracing.stop()
    origin, forked = service.trace_root(wid), service.trace_root(fork)
    assert forked.trace_id != origin.trace_id
    (root,) = [s for s in exporter.get_finished_spans() if s.context.trace_id == int(forked.trace_id, 16)
               and s.parent is None]
    assert [link.context.span_id for link in root.links] == [int(origin.span_id, 16)]


@pytest.mark.parametrize("text,expected", [
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ("4bf92f3577b34da6a3ce929d0e0e4736", True)),
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", ("4bf92f3577b34da6a3ce929d0e0e4736", False)),
    ("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future", ("4bf92f3577b34da6a3ce929d0e0e4736", True)),
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", None),  # version 00 has 4 fields
    ("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None),
    ("00-00000000000000000000000000000000-00f067aa0ba902b7-01", None),
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", None),
    ("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", None),
    ("garbage", None), (None, None), (42, None),
])
def test_traceparent_is_read_as_w3c_writes_it(text, expected):
    found = parse(text)
    assert (found if found is None else (found.trace_id, found.sampled)) == expected


def test_the_root_ends_once_and_a_missing_context_is_derived():
    assert derived_root("wf_1") == derived_root("wf_1") != derived_root("wf_2")
    assert parse(derived_root("wf_1").traceparent) == derived_root("wf_1")
    assert root_ends(None, "interrupted") and not root_ends(None, "running") and not root_ends(None, "waiting")
    marked = ended(None, "wf_1")
    assert parse(marked["traceparent"]) == derived_root("wf_1") and not root_ends(marked, "completed")
    kept = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
    assert ended(kept, "wf_1")["traceparent"] == kept["traceparent"]
    made = instance_trace("wf_1", "demo", ended(kept, "wf_1"), "2026-01-01T00:00:00+00:00", "failed", ends=True)
    assert made.ended_at is not None and made.root.span_id == "00f067aa0ba902b7"
    assert instance_trace("wf_1", "demo", kept, "", "running").ended_at is None
