"""Spans a real server makes, read from the SDK's `InMemorySpanExporter`: one per tool call
(the MCP SDK's, with the workflow's attributes), one per step from handed out to completed,
one per shell command with its exit code, one per recompute; a client's trace context in
`_meta` is the parent of the call's span."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mcp import Client
from opentelemetry import trace
from opentelemetry.trace import StatusCode

from tests.server.srv_helpers import ProtocolAgent, ok

TRACED = """
name: "trace:demo"
default_state:
  raw: {n: 0, done: []}
state_schema:
  computed:
    doubled: {from: raw.n, transform: "input * 2"}
steps:
  - {id: bump, type: state_update, path: raw.n, value: 2}
  - {id: ask, type: agent_prompt, prompt: "n is {{ n }}", state_update: {path: raw.answer}}
  - id: flaky
    type: shell_command
    command: "test -f once.txt || { touch once.txt; exit 3; }"
    on_error: retry
    retry_count: 1
    retry_delay: 10
  - id: fan
    type: parallel_foreach
    items: "{{ ['a', 'b'] }}"
    sub_agent_task: work
sub_agent_tasks:
  work:
    steps:
      - {id: act, type: agent_prompt, prompt: "do {{ item }}", state_update: {path: raw.done, operation: append}}
"""

FAILING = """
name: "trace:failing"
steps:
  - {id: ask, type: agent_prompt, prompt: "go"}
  - {id: broken, type: shell_command, command: "echo nope >&2; exit 4"}
"""


def make_server(tmp_path: Path, tracing: Any) -> Any:
    from aromcp_workflows.app.service import WorkflowService
    from aromcp_workflows.server.mcp import build_server

    folder = tmp_path / "project" / ".aromcp" / "workflows"
    folder.mkdir(parents=True)
    (folder / "trace:demo.yaml").write_text(TRACED)
    (folder / "trace:failing.yaml").write_text(FAILING)
    service = WorkflowService(project_dir=tmp_path / "project", store_path=tmp_path / "s.sqlite3",
                              home=tmp_path, observer=tracing)
    return build_server(lambda: service, observer=tracing)


def by_name(spans: Any, name: str) -> list[Any]:
    return [s for s in spans if s.name == name]


def step(spans: Any, step_id: str) -> Any:
    (found,) = [s for s in spans if s.name == f"step {step_id}"]
    return found


async def test_a_run_makes_a_span_per_tool_call_step_command_and_recompute(tmp_path, tracing, exporter):
    server = make_server(tmp_path, tracing)
    async with Client(server, mode="legacy") as client:
        wid = (await ok(client, "workflow_start", {"workflow": "trace:demo"}))["workflow_id"]
        agent = ProtocolAgent(client, wid)
        assert (await agent.run())["status"] == "completed"
    tracing.flush()  # the spans of every commit so far (a worker makes them every 0.2 s)
    spans = exporter.get_finished_spans()
    calls = [s for s in spans if s.name.startswith("tools/call ")]
    assert len(calls) == agent.log.total_calls + 1  # and workflow_start
    assert all(s.attributes["workflow.id"] == wid and s.attributes["workflow.name"] == "trace:demo" for s in calls)
    ours = [s for s in spans if s.name.startswith(("step ", "shell", "recompute"))]
    assert all(s.attributes["workflow.id"] == wid and s.attributes["workflow.name"] == "trace:demo" for s in ours)
    assert {s.name for s in ours if s.name.startswith("step ")} == {
        "step bump", "step ask", "step flaky", "step fan", "step work_0.act", "step work_1.act"}

    calls_by_id = {s.context.span_id: s for s in calls}
    ask = step(spans, "ask")
    assert ask.attributes["step.type"] == "agent_prompt" and ask.attributes["step.id"] == "ask"
    delivered_by = calls_by_id[ask.parent.span_id]  # the call that handed it out is its parent
    assert delivered_by.name in ("tools/call workflow_get_next_step", "tools/call workflow_step_complete")
    assert ask.start_time <= ask.end_time and ask.status.status_code == StatusCode.UNSET
    assert step(spans, "bump").attributes["step.type"] == "state_update"
    assert step(spans, "fan").attributes["step.type"] == "parallel_tasks"
    for task in ("work_0", "work_1"):
        act = step(spans, f"{task}.act")
        assert act.attributes["task.id"] == task and act.attributes["step.type"] == "agent_prompt"

    flaky = step(spans, "flaky")
    shells = sorted((s for s in by_name(spans, "shell") if s.parent.span_id == flaky.context.span_id),
                    key=lambda s: s.start_time)
    assert [s.attributes["process.exit.code"] for s in shells] == [3, 0]
    assert [s.attributes["shell.attempt"] for s in shells] == [0, 1]
    assert shells[0].status.status_code == StatusCode.ERROR and flaky.status.status_code == StatusCode.UNSET
    assert flaky.start_time <= shells[0].start_time and shells[1].end_time <= flaky.end_time

    recomputes = by_name(spans, "recompute")
    assert {tuple(s.attributes["transform.fields"]) for s in recomputes} == {("doubled",)}
    assert {s.attributes["transform.trigger"] for s in recomputes} >= {"initialize", "step bump"}
    assert tracing._open == {}  # the instance ended: no span is left open


async def test_a_failed_step_ends_its_span_as_an_error_and_the_instance_leaves_none_open(tmp_path, tracing, exporter):
    server = make_server(tmp_path, tracing)
    async with Client(server, mode="legacy") as client:
        wid = (await ok(client, "workflow_start", {"workflow": "trace:failing"}))["workflow_id"]
        await ok(client, "workflow_get_next_step", {"workflow_id": wid})
        done = await ok(client, "workflow_step_complete", {"workflow_id": wid, "step_id": "ask"})
        assert done["status"] == "failed"
    tracing.flush()  # the spans of every commit so far (a worker makes them every 0.2 s)
    spans = exporter.get_finished_spans()
    broken = step(spans, "broken")
    assert broken.status.status_code == StatusCode.ERROR and broken.status.description == "the step failed"
    assert not any("nope" in str(s.status.description) + str(dict(s.attributes)) for s in spans)  # no stderr
    (shell,) = by_name(spans, "shell")
    assert shell.attributes["process.exit.code"] == 4 and shell.parent.span_id == broken.context.span_id
    assert tracing._open == {}


async def test_a_client_trace_becomes_a_link_and_the_calls_stay_in_the_instance_trace(tmp_path, tracing, exporter):
    """The client (the MCP SDK's, like any other) puts the `traceparent` of its call in the
    request's `_meta`.  The instance has a trace of its own, so the server's span of each
    call is in it, under the instance's root, and links to the client's span; the start's
    reply announces the root in its `_meta`."""
    server = make_server(tmp_path, tracing)
    orchestrator = trace.get_tracer("test-orchestrator")
    async with Client(server, mode="legacy") as client:
        with orchestrator.start_as_current_span("orchestrator turn") as turn:
            started = await client.call_tool("workflow_start", {"workflow": "trace:demo"})
            wid = started.structured_content["workflow_id"]
            await ok(client, "workflow_get_next_step", {"workflow_id": wid})
            await ok(client, "workflow_step_complete", {"workflow_id": wid, "step_id": "ask", "result": "x"})
    tracing.flush()  # the spans of every commit so far (a worker makes them every 0.2 s)
    spans = exporter.get_finished_spans()
    root = tracing.root_of(wid)
    assert started.meta == {"traceparent": root.traceparent}
    sent = {s.context.span_id: s for s in spans if s.name.startswith("MCP send tools/call")}
    assert {s.context.trace_id for s in sent.values()} == {turn.get_span_context().trace_id}
    calls = [s for s in spans if s.name.startswith("tools/call ")]
    assert len(calls) == 3
    for call in calls:
        assert call.context.trace_id == int(root.trace_id, 16) and call.parent.span_id == int(root.span_id, 16)
        (link,) = call.links
        assert link.context.span_id in sent and link.attributes["link.kind"] == "caller"
    assert step(spans, "bump").context.trace_id == int(root.trace_id, 16)
    assert step(spans, "ask").context.trace_id == int(root.trace_id, 16)
