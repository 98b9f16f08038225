"""The seed design's automatic error tracking, for workflows that declare its fields.

A workflow whose `default_state.raw` declares any of `steps_completed`, `steps_failed`,
`retry_counts`, `last_error` or `workflow_errors` gets them kept up to date by the engine:
the id of every agent or shell step that finished, of every step that failed, retries per
step, the last error and all errors.  Declaring them is the opt-in, so no other workflow's
state changes shape.  A tracking write that cannot be made (the author declared
`steps_completed` as a string, say) is recorded in the history and never fails a step.
"""

from __future__ import annotations

from typing import Any

from aromcp_workflows.interpreter.machine import Machine
from aromcp_workflows.interpreter.thread import Thread
from aromcp_workflows.state import Operation, StateError, Update

FIELDS = ("steps_completed", "steps_failed", "retry_counts", "last_error", "workflow_errors")


def tracked(m: Machine, workflow: str) -> frozenset[str]:
    """The tracking fields this workflow declares (computed once per run and definition)."""
    cache = m.tracked_fields
    if workflow not in cache:
        raw = m.bundle.get(workflow).default_state.model_dump().get("raw") or {}
        cache[workflow] = frozenset(name for name in FIELDS if name in raw)
    return cache[workflow]


def step_succeeded(m: Machine, thread: Thread, step_id: str) -> None:
    _write(m, thread, [("steps_completed", "append", _bare(step_id))])


def step_retried(m: Machine, thread: Thread, step_id: str, attempt: int) -> None:
    _write(m, thread, [("retry_counts", "merge", {_bare(step_id): attempt})])


def step_failed(m: Machine, thread: Thread, error: dict[str, Any]) -> None:
    step = _bare(error.get("step_id") or "")
    _write(m, thread, [("steps_failed", "append", step), ("last_error", "set", error),
                       ("workflow_errors", "append", error)])


def reset_counts(m: Machine, thread: Thread) -> None:
    """`on_resume: reset_error_counts`: retries per step start again from zero."""
    frame = thread.frames[0] if thread.frames else None
    if frame is not None and "retry_counts" in tracked(m, frame.workflow):
        result = m.states[frame.state_key].apply([Update(path="raw.retry_counts", value={})], trigger="on_resume")
        m.state_changed(None, None, result, frame.state_key, by="on_resume")


def _write(m: Machine, thread: Thread, changes: list[tuple[str, Operation, Any]]) -> None:
    if not thread.frames:
        return
    frame = thread.frames[0]
    names = tracked(m, frame.workflow)
    updates = [Update(path=f"raw.{name}", operation=op, value=value) for name, op, value in changes if name in names]
    if not updates:
        return
    store = m.states[frame.state_key]
    try:
        result = store.apply(updates, trigger="error_tracking")
        m.state_changed(None, None if thread.thread_id == "main" else thread.thread_id, result, frame.state_key,
                        by="error_tracking")
    except StateError as exc:
        m.record("error", None, None, {"message": f"error tracking could not update state: {exc}"})
    m.collect_traces(store, "error_tracking")


def _bare(step_id: str) -> str:
    """`fix_loop.run_lint#2` → `fix_loop.run_lint`: tracking speaks of steps, not deliveries."""
    return step_id.split("#", 1)[0]
