"""What happens when a step fails and its own `on_error` did not absorb it.

A handler says a step failed by returning (or raising into) a `Fail` value; `fail` applies
it.  In a sub-agent task: the task's `cleanup_on_error` steps run, then the task is failed
(the parallel step's `on_sub_agent_error` decides what that means).  In the main thread:
the workflow's `error_handling` applies — `continue` skips the step, `retry_workflow`
starts over (up to `max_retries`), `checkpoint_and_fail` asks for a checkpoint, runs
`on_failure` steps with `error` in scope and fails the instance.  Errors are collected
into `error_collection.state_path` when asked.  Nothing is deleted: state and history stay.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from aromcp_workflows.interpreter import tracking
from aromcp_workflows.interpreter.effects import now_iso
from aromcp_workflows.interpreter.machine import Machine
from aromcp_workflows.interpreter.thread import Frame, Thread, frame_json
from aromcp_workflows.state import StateError, Update


@dataclass(frozen=True)
class Fail:
    """A step failed: where, why, and whether workflow error handling may absorb it."""

    step_id: str | None
    message: str
    handled: bool = True


def fail(m: Machine, thread: Thread, failure: Fail) -> None:
    error = {"message": failure.message, "step_id": failure.step_id, "timestamp": now_iso()}
    before = None
    if thread.failing is None and thread.frames:  # where it failed, for on_resume: retry_failed_steps
        thread.failed_at = copy.deepcopy([frame_json(f) for f in thread.frames])
        if thread.thread_id == "main":  # the state before error handling writes to it (retry)
            before = {key: store.snapshot() for key, store in m.states.items()}
    tracking.step_failed(m, thread, error)
    thread.pending = None
    m.record("error", failure.step_id, None if thread.thread_id == "main" else thread.thread_id,
             {"message": failure.message})
    if thread.failing is not None or any(f.role in ("cleanup", "on_failure") for f in thread.frames):
        return terminate(m, thread, thread.failing or error)
    if thread.thread_id != "main":
        if failure.handled and not _returns_errors(m, thread) and thread.frames:
            thread.frames[-1].pc += 1  # return_on_error: false — the task goes on without the step
            thread.outbox.append(f"Step {failure.step_id} failed and was skipped: {failure.message}")
            return None
        return fail_task(m, thread, error)
    collect_error(m, thread, error)
    handling = m.bundle.main.definition.error_handling
    if failure.handled and handling.on_error == "continue" and thread.frames:
        thread.frames[-1].pc += 1
        thread.outbox.append(f"Step {failure.step_id} failed and was skipped: {failure.message}")
        return None
    if failure.handled and handling.on_error == "retry_workflow" and m.retries < handling.max_retries:
        m.retries += 1
        m.record("workflow_retry", failure.step_id, None, {"attempt": m.retries + 1, "error": failure.message})
        m.begin()
        return None
    m.request_checkpoint(f"checkpoint_and_fail: {failure.message}")
    thread.failed_state = before if before is not None else thread.failed_state
    thread.failing = error
    thread.error = failure.message
    if handling.on_failure:
        thread.frames = [Frame(m.bundle.main.definition.name, "on_failure", "main", role="on_failure")]
        return None
    return terminate(m, thread, error)


def _returns_errors(m: Machine, thread: Thread) -> bool:
    """A task's `error_handling.return_on_error` (default true: a failed step ends the task
    and its error goes back to the orchestrator's `on_sub_agent_error`)."""
    base = thread.frames[0] if thread.frames else None
    if base is None or not base.program.startswith("task:"):
        return True
    task = m.bundle.get(base.workflow).sub_agent_tasks.get(base.program[len("task:"):])
    return task is None or task.error_handling.return_on_error


def fail_task(m: Machine, thread: Thread, error: dict[str, Any]) -> None:
    thread.failing = error
    thread.error = error["message"]
    base = thread.frames[0] if thread.frames else None
    if base is not None and base.program.startswith("task:"):
        name = base.program[len("task:"):]
        cleanup = m.programs(base.workflow)[f"cleanup:{name}"]
        if len(cleanup.instructions):
            thread.frames = [Frame(base.workflow, f"cleanup:{name}", base.state_key, f"{thread.thread_id}.",
                                   role="cleanup")]
            return None
    return terminate(m, thread, error)


def terminate(m: Machine, thread: Thread, error: dict[str, Any]) -> None:
    """End the thread as failed, keeping the messages produced on the way."""
    thread.frames = []
    thread.pending = None
    thread.failing = error
    thread.error = thread.error or error["message"]
    m.thread_finished(thread)


def collect_error(m: Machine, thread: Thread, error: dict[str, Any]) -> None:
    collection = m.bundle.main.definition.error_handling.error_collection
    if collection is None or not collection.enabled or not collection.state_path:
        return
    if collection.include_stack_traces:  # the workflow's own stack: which frames ran the step
        error = {**error, "stack": [f"{f.workflow} {f.program} at instruction {f.pc}"
                                    + (f" (loop iteration {f.loops[-1].iteration})" if f.loops else "")
                                    for f in reversed(thread.frames)]}
    try:
        result = m.states["main"].apply([Update(path=collection.state_path, operation="append", value=error)],
                                        trigger="error_collection")
        m.state_changed(None, None if thread.thread_id == "main" else thread.thread_id, result, "main",
                        by="error_collection")
    except StateError as exc:
        m.record("error", None, None, {"message": f"could not collect error: {exc}"})
