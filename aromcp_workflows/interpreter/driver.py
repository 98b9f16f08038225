"""Driving a run: advance under the instance lock, run shell commands outside it.

The service (and in-process tests) use `Driver` so that no lock is ever held across a
shell command: the run hands back a `ShellRequest`, the lock is released, the command
runs, and its result is applied under the lock again.  `commit` is called after every
change made under the lock, which is where the service persists the instance.
"""

from __future__ import annotations

import threading
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Callable

from aromcp_workflows.interpreter.outcomes import Answer, Busy, Completion, ShellRequest
from aromcp_workflows.interpreter.run import WorkflowRun
from aromcp_workflows.interpreter.shell import ProgressCallback, ShellResult, run_shell

ShellRunner = Callable[[ShellRequest, ProgressCallback | None], ShellResult]
BUSY_POLL_S = 0.02


def default_shell_runner(request: ShellRequest, progress: ProgressCallback | None) -> ShellResult:
    return run_shell(request.command, request.cwd, env=request.env, timeout_ms=request.timeout_ms,
                     progress=progress)


@dataclass
class StepCompleteAnswer:
    success: bool
    status: str
    messages: list[str]
    next_step: dict[str, Any] | None
    error: str | None = None


class Driver:
    """Runs the advance/shell loop for one run with a lock and a commit hook."""

    def __init__(self, run: WorkflowRun, lock: AbstractContextManager[Any] | None = None,
                 commit: Callable[[WorkflowRun], None] | None = None,
                 shell_runner: ShellRunner = default_shell_runner):
        self.run = run
        self.lock = lock if lock is not None else nullcontext()
        self.commit = commit or (lambda run: None)
        self.shell_runner = shell_runner

    def next_step(self, thread_id: str | None = None, progress: ProgressCallback | None = None) -> Answer:
        with self.lock:
            outcome = self.run.advance(thread_id)
            self.commit(self.run)
        return self._settle(outcome, thread_id, progress)

    def complete(self, thread_id: str | None, step_id: str, status: str = "success", result: Any = None,
                 error: str | None = None, progress: ProgressCallback | None = None) -> StepCompleteAnswer:
        with self.lock:
            completion: Completion = self.run.complete(thread_id, step_id, status, result, error)
            outcome = self.run.advance(thread_id) if completion.advance else None
            self.commit(self.run)
        if not completion.advance:
            thread = self.run.thread(thread_id)
            return StepCompleteAnswer(False, self.run.status_for(thread), [], completion.step, completion.error)
        answer = self._settle(outcome, thread_id, progress)
        return StepCompleteAnswer(completion.success, answer.status, answer.messages, answer.step,
                                  completion.error or answer.error)

    def _settle(self, outcome: Any, thread_id: str | None, progress: ProgressCallback | None) -> Answer:
        while not isinstance(outcome, Answer):
            if isinstance(outcome, ShellRequest):
                if outcome.delay_ms:
                    time.sleep(outcome.delay_ms / 1000)
                result = self.shell_runner(outcome, progress)
                with self.lock:
                    outcome = self.run.finish_shell(outcome, result)
                    self.commit(self.run)
            elif isinstance(outcome, Busy):
                time.sleep(BUSY_POLL_S)
                with self.lock:
                    outcome = self.run.advance(thread_id)
                    self.commit(self.run)
            else:
                raise TypeError(f"unexpected outcome {outcome!r}")
        return outcome


def new_lock() -> threading.RLock:
    return threading.RLock()
