"""The web view's typed reads, built from what `explain/` finds in a run and its history.

`WorkflowService.instance_view` and `state_at` call these with the run and the history
they read under the instance layer's rules; nothing here touches the store or changes an
instance.  Every value that leaves passes the instance's masker, widened with the secrets
the history held (a value once under a sensitive key stays masked wherever it appears).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from aromcp_workflows.app.page_results import (
    FailureView,
    GraphBlock,
    GraphEdge,
    GraphNode,
    GraphView,
    InstanceSummaryRow,
    InstanceView,
    PendingQuestion,
    TaskLane,
)
from aromcp_workflows.app.statuses import instance_status
from aromcp_workflows.explain import Failure, failures, flow_graph, layout, state_history, step_of, step_path, watch
from aromcp_workflows.interpreter import EVENT_KINDS
from aromcp_workflows.safety import Masker
from aromcp_workflows.store import InstanceRecord, InstanceSummary

if TYPE_CHECKING:
    from aromcp_workflows.interpreter import WorkflowRun
    from aromcp_workflows.store import HistoryEvent

FINISHED = frozenset({"completed", "failed", "cancelled"})
# What the instance page reads of the history: everything but the transform traces (the
# bulk of it; the page asks for those on their own).
VIEW_KINDS = sorted((EVENT_KINDS | {"checkpoint"}) - {"transform_trace"})
# file, workflow name, the step's data path, the step -> (line, column, the file reads differently now)
Locate = Callable[[str, str, tuple[Any, ...], Any], tuple[int | None, int | None, bool] | None]


def duration(created_at: str, updated_at: str, status: str) -> float:
    """Start to the last change once finished; start to now while it runs."""
    start = datetime.fromisoformat(created_at)
    end = datetime.fromisoformat(updated_at) if status in FINISHED else datetime.now(UTC)
    return round(max(0.0, (end - start).total_seconds()), 1)


def summary_row(item: InstanceSummary) -> InstanceSummaryRow:
    return InstanceSummaryRow(workflow_id=item.workflow_id, workflow=item.workflow, project_dir=item.project_dir,
                              status=item.status, current_steps=item.current_steps, created_at=item.created_at,
                              updated_at=item.updated_at,
                              duration_seconds=duration(item.created_at, item.updated_at, item.status),
                              error=item.error)


def instance_view(run: WorkflowRun, record: InstanceRecord, events: list[HistoryEvent], masker: Masker,
                  locate: Locate) -> InstanceView:
    """The instance page: summary, graph with marks, tasks, messages, failures, timeline, state."""
    from aromcp_workflows.explain import step_history, step_types

    replayed = state_history.replay(events, None, lambda _cp: None, masker)
    mask = masker.with_secrets(replayed.secrets)
    tiers = run.states["main"]
    view = InstanceView(
        workflow_id=run.workflow_id, workflow=record.workflow, project_dir=record.project_dir, status=run.status,
        version=record.version, current_steps=list(record.current_steps), created_at=record.created_at,
        updated_at=record.updated_at, duration_seconds=duration(record.created_at, record.updated_at, run.status),
        error=run.error, graph=graph_view(run, events),
        tasks=[TaskLane(**lane) for lane in watch.task_lanes(run, events)],
        messages=watch.shown_messages(events), failures=[failure_view(run, f, locate) for f in failures(run)],
        timeline=step_history(events, step_types(run)),
        state={"raw": tiers.raw, "state": tiers.state, "computed": tiers.computed, "inputs": run.machine.inputs},
        state_points=state_history.state_points(events), questions=questions(run))
    status = instance_status(run, record)
    view.steps_in_hand, view.stalled = status.steps_in_hand or [], status.stalled
    return InstanceView.model_validate(mask.mask(view.model_dump(mode="json")))


def questions(run: WorkflowRun) -> list[PendingQuestion]:
    """The `user_input` steps handed out and not answered, as asked (templates filled in)."""
    found = []
    for tid, thread in run.threads.items():
        pending = thread.pending
        step = (pending.step or {}) if pending is not None else {}
        if pending is None or pending.kind != "agent" or step.get("type") != "user_input":
            continue
        definition = step.get("definition") or {}
        validation = definition.get("validation") or {}
        found.append(PendingQuestion(step_id=pending.step_id, task_id=None if tid == "main" else tid,
                                     prompt=str(definition.get("prompt") or ""), choices=definition.get("choices"),
                                     pattern=validation.get("pattern"), pattern_hint=validation.get("error_message"),
                                     default=definition.get("default")))
    return found


def graph_view(run: WorkflowRun, events: list[HistoryEvent]) -> GraphView:
    """The workflow's graph as `graph` draws it, laid out, each node marked for this run."""
    bundle = run.bundle
    included = {name: w.definition for name, w in bundle.workflows.items() if name != bundle.main.name}
    flow = flow_graph(bundle.main.definition, included)
    placed = layout(flow)
    marks = watch.node_marks(flow, run, events)
    nodes = []
    for node in flow.nodes:
        p, mark = placed.nodes[node.id], marks[node.id]
        nodes.append(GraphNode(id=node.id, lines=p.lines, shape=node.shape, role=node.role, step_id=node.step_id,
                               scope=node.scope, x=p.x, y=p.y, w=p.w, h=p.h, mark=mark.mark, runs=mark.runs,
                               detail=mark.detail))
    edges = [GraphEdge(source=r.source, target=r.target, points=[[x, y] for x, y in r.points], label=r.label,
                       dotted=r.dotted, back=r.back) for r in placed.edges]
    blocks = [GraphBlock(id=b.id, title=b.title, kind=b.kind, x=b.x, y=b.y, w=b.w, h=b.h) for b in placed.blocks]
    return GraphView(width=placed.width, height=placed.height, nodes=nodes, edges=edges, blocks=blocks)


def failure_view(run: WorkflowRun, failure: Failure, locate: Locate) -> FailureView:
    """A failure with its step's type and `file:line` (said when the file changed since)."""
    step = step_of(run, failure)
    loaded = run.bundle.workflows.get(failure.workflow)
    view = FailureView(task_id=failure.task_id, step_id=failure.step_id, message=failure.message,
                       step_type=None if step is None else str(step.type),
                       file=None if loaded is None else loaded.file)
    if step is None or loaded is None or failure.step_id is None:
        return view
    path = step_path(loaded.definition, failure.program, failure.step_id)
    where = None if path is None else locate(loaded.file, failure.workflow, path, step)
    if where is not None:
        view.line, view.column, view.file_changed = where
    return view


def state_at(events: list[HistoryEvent], seq: int | None, checkpoint_state: state_history.CheckpointState,
             masker: Masker) -> dict[str, Any]:
    """`StateAt`'s fields: the main state after event `seq`, masked."""
    replayed = state_history.replay(events, seq, checkpoint_state, masker)
    return {"seq": replayed.seq, "state": state_history.masked(replayed, masker), "changed": replayed.changed,
            "complete": replayed.complete, "note": replayed.note}
