"""A call that waits on a command: its budget, its progress reports, and stopping commands.

- **Budget.** Claude Code keeps a call open while a command runs and shows its progress;
  other clients give up after tens of seconds (an HTTP proxy's timeout, the SDK's read
  timeout).  With `AROMCP_CALL_BUDGET_S` set, a call that would wait on a command longer
  answers at the budget: the instance still `running`, a `wait` step, and `waiting_for`
  naming the command, so the agent calls again (or completes the wait step: the same).
  The command goes on, on a thread of its own that drives the thread to its next step as
  the call would have; the next call waits on it (`Driver._wait`).  Nothing runs twice.
- **Progress.** A running command's progress notification carries its latest output line
  (`shell.live.latest_line`), so Claude Code's terminal shows what the command prints.
- **Stopping.** A cancel stops the instance's commands wherever it comes from (the CLI,
  `workflow_complete`, the page): every command of this machine is found by its run
  directory and its whole process group stopped (`shell.live.stop`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future

from aromcp_workflows.interpreter import Answer, Busy, ShellRequest, command_wait
from aromcp_workflows.shell import ProgressCallback, RunDir, live, local_run_dir

BUDGET_ENV = "AROMCP_CALL_BUDGET_S"  # seconds a call may wait on a command (unset: as long as it runs)
log = logging.getLogger("aromcp_workflows")


def budget() -> float | None:
    """The call budget in seconds, or None (unset, empty, not a positive number)."""
    text = os.environ.get(BUDGET_ENV, "").strip()
    try:
        value = float(text) if text else 0.0
    except ValueError:
        log.warning("%s=%r is not a number of seconds: calls wait for their commands", BUDGET_ENV, text)
        return None
    return value if value > 0 else None


def within(deadline: float, effect: ShellRequest, workflow_id: str, progress: ProgressCallback | None,
           drive: Callable[[ProgressCallback | None], Answer]) -> Answer:
    """Run `drive` (the command, then the thread on to its answer) on a thread of its own and
    wait for it until `deadline`; past it, answer that the command still runs.  Progress
    reports stop once the call has answered."""
    answered = threading.Event()

    def muted(elapsed: float, message: str) -> None:
        if progress is not None and not answered.is_set():
            progress(elapsed, message)

    done: Future[Answer] = Future()

    def run() -> None:
        try:
            done.set_result(drive(muted))
        except BaseException as exc:  # the caller re-raises it, or it is logged once nobody waits
            done.set_exception(exc)
            if answered.is_set():
                log.warning("step %s of workflow %s: the command run past the call budget failed: %s",
                            effect.step_id, workflow_id, exc)

    started = time.time()
    threading.Thread(target=run, name="aromcp-command", daemon=True).start()
    try:
        return done.result(timeout=max(0.0, deadline - time.monotonic()))
    except TimeoutError:
        answered.set()
        return still_running(effect, started)


def still_running(effect: ShellRequest | Busy, started: float | None = None) -> Answer:
    """The answer of a call whose budget ran out while a command runs (started at `started`,
    wall clock; a `Busy` knows from its claim): the instance still `running`, a `wait` step
    (`interpreter.command_wait`: completing it, or calling again, waits on), and
    `waiting_for` (the step, the command, how long it has run)."""
    if isinstance(effect, Busy):
        started = effect.claim.started_at
    for_s = round(max(0.0, time.time() - started), 1) if started is not None else None
    wait = command_wait(effect.thread_id, effect.step_id, effect.command, for_s)
    return Answer("running", wait, [], None, effect.thread_id, waiting_for={
        "kind": "command", "step_id": effect.step_id, "command": effect.command, "for_s": for_s,
        "instructions": wait["instructions"]})


def reporting(progress: ProgressCallback, step_id: str, run_dir: RunDir) -> ProgressCallback:
    """Progress reports that say which step is running (a client may run several) and the
    latest line its command printed."""
    def report(elapsed: float, _message: str) -> None:
        seconds = f"{elapsed:.1f}" if elapsed < 10 else f"{elapsed:.0f}"
        line = live.latest_line(run_dir)
        progress(elapsed, f"step {step_id}: command running for {seconds} s" + (f": {line}" if line else ""))

    return report


def stop_commands(run_dirs: Iterable[RunDir], why: str) -> int:
    """Stop the whole process group of each command (those of this machine that still run);
    how many were stopped."""
    stopped = 0
    for run_dir in run_dirs:
        try:
            stopped += live.stop(run_dir)
        except OSError as exc:
            log.warning("%s: could not stop the command in %s: %s", why, run_dir.path, exc)
    return stopped


def local_run_dirs(shells: Iterable[Busy]) -> list[RunDir]:
    """The run directories of the commands in flight that run on this machine (the others'
    servers stop them when they next renew their lease)."""
    return [run_dir for busy in shells if (run_dir := local_run_dir(busy.claim)) is not None]
