"""What happens when a step fails and its own `on_error` did not absorb it.

In a sub-agent task: the task's `cleanup_on_error` steps run, then the task is failed
(the parallel step's `on_sub_agent_error` decides what that means).  In the main thread:
the workflow's `error_handling` applies — `continue` skips the step, `retry_workflow`
starts over (up to `max_retries`), `checkpoint_and_fail` runs `on_failure` steps with
`error` in scope and fails the instance.  Errors are collected into
`error_collection.state_path` when asked.  Nothing is deleted: state and history stay.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aromcp_workflows.interpreter.outcomes import now_iso
from aromcp_workflows.interpreter.thread import Frame, Thread

if TYPE_CHECKING:
    from aromcp_workflows.interpreter.run import WorkflowRun


class Failures:
    def fail(self: WorkflowRun, thread: Thread, step_id: str | None, message: str,
             handled: bool = True) -> None:
        error = {"message": message, "step_id": step_id, "timestamp": now_iso()}
        thread.pending = None
        self.record("error", step_id, self.task_of(thread), {"message": message})
        if thread.failing is not None or any(f.role in ("cleanup", "on_failure") for f in thread.frames):
            return self.terminate(thread, thread.failing or error)
        if thread.thread_id != "main":
            return self.fail_task(thread, error)
        self.collect_error(error)
        handling = self.bundle.main.definition.error_handling
        if handled and handling.on_error == "continue" and thread.frames:
            thread.frames[-1].pc += 1
            thread.outbox.append(f"Step {step_id} failed and was skipped: {message}")
            return None
        if handled and handling.on_error == "retry_workflow" and self.retries < handling.max_retries:
            self.retries += 1
            self.record("workflow_retry", step_id, None, {"attempt": self.retries + 1, "error": message})
            self._begin()
            return None
        self.checkpoint_requested = f"checkpoint_and_fail: {message}"
        thread.failing = error
        thread.error = message
        if self.bundle.main.definition.error_handling.on_failure:
            main = self.bundle.main.definition.name
            thread.frames = [Frame(main, "on_failure", "main", role="on_failure")]
            return None
        return self.terminate(thread, error)

    def fail_task(self: WorkflowRun, thread: Thread, error: dict[str, Any]) -> None:
        thread.failing = error
        thread.error = error["message"]
        base = thread.frames[0] if thread.frames else None
        if base is not None and base.program.startswith("task:"):
            name = base.program[len("task:"):]
            cleanup = self.programs(base.workflow)[f"cleanup:{name}"]
            if len(cleanup.instructions):
                thread.frames = [Frame(base.workflow, f"cleanup:{name}", base.state_key, f"{thread.thread_id}.",
                                       role="cleanup")]
                return None
        return self.terminate(thread, error)

    def terminate(self: WorkflowRun, thread: Thread, error: dict[str, Any]) -> None:
        """End the thread as failed, keeping the messages produced on the way."""
        thread.frames = []
        thread.pending = None
        thread.failing = error
        thread.error = thread.error or error["message"]
        self.thread_finished(thread)

    def collect_error(self: WorkflowRun, error: dict[str, Any]) -> None:
        collection = self.bundle.main.definition.error_handling.error_collection
        if collection is None or not collection.enabled or not collection.state_path:
            return
        from aromcp_workflows.state import StateError, Update

        try:
            self.states["main"].apply([Update(path=collection.state_path, operation="append", value=error)],
                                      trigger="error_collection")
        except StateError as exc:
            self.record("error", None, None, {"message": f"could not collect error: {exc}"})
