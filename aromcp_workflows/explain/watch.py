"""Where a running instance stands, read from its history and its threads: the marks on its
graph, its sub-agent tasks, the messages shown to the user, its failures.

The web view (`aromcp-workflows ui`) shows these; like `debug_info` they are built from
the append-only history the store keeps plus the threads as committed, so a page opened
on any host that reads the store tells the same story.

A history event names the step it is about by its *delivered* id — the qualified step id
(`fix_loop.run_lint`) with the thread's prefix in front (`files_3.` in a sub-agent task,
`attempt2.` after a workflow retry, `<include step>.` inside an included workflow) and the
loop iterations behind (`#2`, `#1.3`).  `node_key` takes those off again, so an event
lands on the graph node `flow_graph` drew for the step.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aromcp_workflows.explain.mermaid import FlowGraph, FlowNode, task_scope

if TYPE_CHECKING:
    from aromcp_workflows.interpreter import WorkflowRun
    from aromcp_workflows.store import HistoryEvent

_ITERATIONS = re.compile(r"#\d+(?:\.\d+)*")
_ATTEMPT = re.compile(r"^attempt\d+\.")
_BATCH = re.compile(r"\.(?:batch\d+|wait)$")
DONE_KINDS = frozenset({"step_completed", "condition_checked", "message_shown", "state_changed", "include_finished",
                        "loop_ended"})
JOIN_KINDS = frozenset({"tasks_finished", "include_finished"})
RUN_KINDS = frozenset({"step_delivered", "step_started", "step_completed", "condition_checked", "message_shown",
                       "step_error", "error", "step_skipped", "include_started", "state_changed"})


@dataclass
class NodeMark:
    """How far an instance got at one node: `mark` is done, current, failed, skipped or
    not_reached; `runs` how many times it ran (loop iterations, tasks); `detail` a short
    note (`iteration 3 of 10`, `4 of 5 tasks done`)."""

    mark: str = "not_reached"
    runs: int = 0
    detail: str | None = None
    deliveries: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class TaskScopes:
    """Which graph scope each sub-agent task's events belong to."""

    of: dict[str, str]

    @classmethod
    def of_run(cls, run: WorkflowRun) -> TaskScopes:
        scopes = {}
        for tid, thread in run.threads.items():
            if tid != "main" and thread.group:
                scopes[tid] = task_scope(task_name(tid), _bare(thread.group, None))
        return cls(scopes)


def task_name(task_id: str) -> str:
    """`files_3` → `files`: a task id is its sub-agent task's name and a number."""
    return task_id.rsplit("_", 1)[0]


def _bare(delivered: str, task_id: str | None) -> str:
    """A delivered step id without its thread prefix and loop iterations."""
    text = delivered
    if task_id:
        text = re.sub(rf"^{re.escape(task_id)}\.(?:retry\d+\.)?", "", text)
    else:
        text = _ATTEMPT.sub("", text)
    return _BATCH.sub("", _ITERATIONS.sub("", text))


def node_key(step_id: str, task_id: str | None, scopes: TaskScopes) -> tuple[str, str]:
    """The (scope, qualified step id) a history event's step belongs to."""
    scope = "main" if task_id is None else scopes.of.get(task_id, f"task:{task_name(task_id)}@?")
    return scope, _bare(step_id, task_id)


def node_marks(graph: FlowGraph, run: WorkflowRun, events: Iterable[HistoryEvent]) -> dict[str, NodeMark]:
    """The mark of every node of `graph` for this run and its history."""
    scopes = TaskScopes.of_run(run)
    index: dict[tuple[str, str], list[FlowNode]] = defaultdict(list)
    for node in graph.nodes:
        if node.step_id is not None:
            index[(node.scope, node.step_id)].append(node)
    marks = {node.id: NodeMark() for node in graph.nodes}
    for event in events:
        if event.step_id and (event.kind in RUN_KINDS or event.kind in DONE_KINDS or event.kind in JOIN_KINDS):
            for node in index.get(node_key(event.step_id, event.task_id, scopes), []):
                _note(marks[node.id], node, event)
    _mark_current(graph, run, scopes, index, marks)
    _mark_ends(graph, run, marks)
    _count_loops(graph, marks)
    _fan_outs(graph, run, marks)
    for mark in marks.values():
        mark.runs = len(mark.deliveries)
    return marks


def _note(mark: NodeMark, node: FlowNode, event: Any) -> None:
    """One event at a node: the last outcome wins (a retried step that passed is done)."""
    if node.role in ("join", "done") or event.kind in JOIN_KINDS:
        if event.kind in JOIN_KINDS:
            mark.mark = "done"
        return
    if event.kind in RUN_KINDS and event.kind != "step_skipped":
        mark.deliveries.add(event.step_id)
    if event.kind == "step_skipped":
        mark.mark = "done" if node.role == "when" else mark.mark if mark.mark != "not_reached" else "skipped"
        if node.role == "when":
            mark.deliveries.add(event.step_id)
    elif event.kind in ("error", "step_error"):
        mark.mark = "done" if event.data.get("handled") == "continue" else "failed"
    elif event.kind in DONE_KINDS or (node.role == "when" and event.kind in RUN_KINDS):
        mark.mark = "done"
    if event.kind == "loop_ended" and isinstance(event.data.get("iterations"), int):
        count = event.data["iterations"]
        mark.detail = f"{count} iteration{'s' if count != 1 else ''}, ended by {event.data.get('ended_by')}"


def _mark_current(graph: FlowGraph, run: WorkflowRun, scopes: TaskScopes, index: dict[tuple[str, str], list[FlowNode]],
                  marks: dict[str, NodeMark]) -> None:
    """Each unfinished thread's step in hand (delivered, or the instruction it stands on)."""
    from aromcp_workflows.interpreter import Ctx

    for tid, thread in run.threads.items():
        if thread.done or not thread.frames:
            continue
        task = None if tid == "main" else tid
        if thread.pending is not None:
            here = thread.pending.step_id
        else:
            frame = thread.frames[-1]
            program = run.machine.programs(frame.workflow)[frame.program]
            if frame.pc >= len(program.instructions):
                continue
            here = Ctx(run.machine, thread, frame).delivered_id(program.instructions[frame.pc].step_id)
        for node in index.get(node_key(here, task, scopes), []):
            if node.role != "join":
                marks[node.id].mark = "current"
        for frame in thread.frames:  # a loop running now: which iteration
            for loop in frame.loops:
                for node in index.get(node_key(f"{frame.id_prefix}{loop.loop_id}", task, scopes), []):
                    total = f" of {len(loop.items)}" if loop.items is not None else ""
                    marks[node.id].detail = f"iteration {loop.iteration}{total}"
                    marks[node.id].mark = "current"


def _mark_ends(graph: FlowGraph, run: WorkflowRun, marks: dict[str, NodeMark]) -> None:
    for node in graph.nodes:
        if node.role == "start" or (node.role == "end" and run.status == "completed"):
            marks[node.id].mark = "done"
        elif node.role == "end" and run.status in ("failed", "cancelled"):
            marks[node.id].mark = "failed" if run.status == "failed" else "not_reached"


def _count_loops(graph: FlowGraph, marks: dict[str, NodeMark]) -> None:
    """A loop head's iterations: as many as the runs of the steps directly in its body
    (a while loop's own condition checks count one more, the one that ended it)."""
    body: dict[str, int] = defaultdict(int)
    for node in graph.nodes:
        if node.loop is not None:
            body[node.loop] = max(body[node.loop], len(marks[node.id].deliveries))
    for head, runs in body.items():
        mark = marks[head]
        if mark.detail is None and runs:
            mark.detail = f"{runs} iteration{'s' if runs != 1 else ''}"


def _fan_outs(graph: FlowGraph, run: WorkflowRun, marks: dict[str, NodeMark]) -> None:
    """A fan-out's tasks: how many are done, failed and running."""
    groups: dict[str, list[Any]] = defaultdict(list)
    for tid, thread in run.threads.items():
        if tid != "main" and thread.group:
            groups[_bare(thread.group, None)].append(thread)
    for node in graph.nodes:
        if node.shape != "parallel" or node.step_id not in groups:
            continue
        tasks = groups[node.step_id]
        done = sum(t.status == "completed" for t in tasks)
        failed = sum(t.status == "failed" for t in tasks)
        text = f"{done} of {len(tasks)} tasks done" + (f", {failed} failed" if failed else "")
        marks[node.id].detail = text


def task_lanes(run: WorkflowRun, events: Iterable[HistoryEvent]) -> list[dict[str, Any]]:
    """One lane per sub-agent task: item, status, the step in hand, error, start and end."""
    times: dict[str, dict[str, str]] = defaultdict(dict)
    for event in events:
        if event.task_id and event.kind == "task_started":
            times[event.task_id]["started_at"] = event.timestamp
        elif event.task_id and event.kind == "task_finished":
            times[event.task_id]["finished_at"] = event.timestamp
    lanes = []
    for tid, thread in run.threads.items():
        if tid == "main":
            continue
        lanes.append({"task_id": tid, "task": task_name(tid), "fan_out": _bare(thread.group or "", None) or None,
                      "item": thread.context.get("item"), "index": thread.context.get("index"),
                      "status": thread.status, "retries": thread.retries,
                      "current_step": thread.pending.step_id if thread.pending and not thread.done else None,
                      "error": thread.error, **times.get(tid, {})})
    return lanes


def shown_messages(events: Iterable[HistoryEvent]) -> list[dict[str, Any]]:
    """The messages shown to the user, in order, with the step and task that showed them."""
    return [{"seq": e.seq, "timestamp": e.timestamp, "step_id": e.step_id, "task_id": e.task_id,
             "message": e.data.get("message")} for e in events if e.kind == "message_shown"]
