"""Driving a run: advance under the instance lock, run shell commands outside it.

The service (and in-process tests) use `Driver` so that no lock is ever held across a
shell command: the run hands back a `ShellRequest`, the lock is released, the command
runs, and its result is applied under the lock again.  `commit` is called after every
change made under the lock, which is where the service persists the instance.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from aromcp_workflows.interpreter.outcomes import Answer, Busy, Completion, ShellRequest
from aromcp_workflows.interpreter.run import WorkflowRun
from aromcp_workflows.interpreter.shell import ProgressCallback, ShellResult, run_shell

ShellRunner = Callable[[ShellRequest, ProgressCallback | None], ShellResult]
BUSY_POLL_S = 0.02


def default_shell_runner(request: ShellRequest, progress: ProgressCallback | None) -> ShellResult:
    named = None if progress is None else _named(progress, request.step_id)
    return run_shell(request.command, request.cwd, env=request.env, timeout_ms=request.timeout_ms,
                     progress=named)


def _named(progress: ProgressCallback, step_id: str) -> ProgressCallback:
    """Progress reports that say which step is running (a client may run several)."""
    def report(elapsed: float, _message: str) -> None:
        seconds = f"{elapsed:.1f}" if elapsed < 10 else f"{elapsed:.0f}"
        progress(elapsed, f"step {step_id}: command running for {seconds} s")

    return report


@dataclass
class StepCompleteAnswer:
    success: bool
    status: str
    messages: list[str]
    next_step: dict[str, Any] | None
    error: str | None = None


@dataclass
class Holder:
    """What one locked stretch of driving works on: a run, its lock, how to save it."""

    run: WorkflowRun
    lock: AbstractContextManager[Any]
    commit: Callable[[], None]


class Driver:
    """Runs the advance/shell loop with a lock and a commit hook.

    Give either a fixed `run` (with `lock` and `commit`), or a `provider` that returns the
    current `Holder` each time the lock is taken: the service passes one, so a command's
    result lands on the instance as it is *now* (reloaded after another server's write,
    say), not on a stale copy captured when the command started.
    """

    def __init__(self, run: WorkflowRun | None = None, lock: AbstractContextManager[Any] | None = None,
                 commit: Callable[[WorkflowRun], None] | None = None,
                 shell_runner: ShellRunner = default_shell_runner,
                 provider: Callable[[], Holder] | None = None):
        if provider is None:
            if run is None:
                raise ValueError("Driver needs a run or a provider")
            save = commit or (lambda run: None)
            fixed = Holder(run, lock if lock is not None else nullcontext(), lambda: save(run))
            provider = lambda: fixed  # noqa: E731 - a constant provider
        self.provider = provider
        self.shell_runner = shell_runner

    @property
    def run(self) -> WorkflowRun:
        return self.provider().run

    def next_step(self, thread_id: str | None = None, progress: ProgressCallback | None = None) -> Answer:
        held = self.provider()
        with held.lock:
            outcome = held.run.advance(thread_id)
            held.commit()
        return self._settle(outcome, thread_id, progress)

    def complete(self, thread_id: str | None, step_id: str, status: str = "success", result: Any = None,
                 error: str | None = None, progress: ProgressCallback | None = None) -> StepCompleteAnswer:
        held = self.provider()
        with held.lock:
            completion: Completion = held.run.complete(thread_id, step_id, status, result, error)
            outcome = held.run.advance(thread_id) if completion.advance else None
            held.commit()
            if not completion.advance:
                thread = held.run.thread(thread_id)
                return StepCompleteAnswer(False, held.run.status_for(thread), [], completion.step, completion.error)
        answer = self._settle(outcome, thread_id, progress)
        return StepCompleteAnswer(completion.success, answer.status, answer.messages, answer.step,
                                  completion.error or answer.error)

    def _settle(self, outcome: Any, thread_id: str | None, progress: ProgressCallback | None) -> Answer:
        while not isinstance(outcome, Answer):
            if isinstance(outcome, ShellRequest):
                if outcome.delay_ms:
                    time.sleep(outcome.delay_ms / 1000)
                result = self.shell_runner(outcome, progress)
                held = self.provider()
                with held.lock:
                    outcome = held.run.finish_shell(outcome, result)
                    held.commit()
            elif isinstance(outcome, Busy):
                time.sleep(BUSY_POLL_S)
                held = self.provider()
                with held.lock:
                    outcome = held.run.advance(thread_id)
                    held.commit()
            else:
                raise TypeError(f"unexpected outcome {outcome!r}")
        return outcome


def new_lock() -> threading.RLock:
    return threading.RLock()
