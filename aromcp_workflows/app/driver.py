"""Driving a run: perform the effects it returns, each locked stretch one transaction.

The interpreter answers every call with an effect value; this module performs them.
`Answer` goes back to the caller.  `ShellRequest` runs the command with no lock held,
then hands the result back in a new transaction; the transaction that hands out the
request also records its owner and lease (`shell.owner`), and a long command renews the
lease every third of it.  `Busy` (another call is running the thread's command) waits:
on the command's completion event when this process runs it — no thread polls — and
otherwise until its owner finishes; a command whose owner is gone (or whose lease
expired) is released so that it runs again.

A `Transact` function runs one change to an instance under its lock and commits it (or
changes nothing): the instance layer's `InstanceRegistry.transact`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from aromcp_workflows.interpreter import Answer, Busy, Completion, ShellRequest, ShellResult, WorkflowRun
from aromcp_workflows.interpreter.effects import Outcome
from aromcp_workflows.shell import owner as owners
from aromcp_workflows.shell.runner import Periodic, ProgressCallback, run_shell

T = TypeVar("T")
Transact = Callable[[str, Callable[[WorkflowRun], T]], T]  # (workflow_id, change) -> what change returned
ShellRunner = Callable[[ShellRequest, ProgressCallback | None, Sequence[Periodic]], ShellResult]
OTHER_PROCESS_POLL_S = (0.05, 0.5)  # backoff while a command runs in another server process
BUSY_WAIT_S = 5.0  # how long one wait on a running command lasts before it is looked at again
log = logging.getLogger("aromcp_workflows")


def default_shell_runner(request: ShellRequest, progress: ProgressCallback | None,
                         periodic: Sequence[Periodic] = ()) -> ShellResult:
    named = None if progress is None else _named(progress, request.step_id)
    return run_shell(request.command, request.cwd, env=request.env, timeout_ms=request.timeout_ms,
                     progress=named, periodic=periodic)


def _named(progress: ProgressCallback, step_id: str) -> ProgressCallback:
    """Progress reports that say which step is running (a client may run several)."""
    def report(elapsed: float, _message: str) -> None:
        seconds = f"{elapsed:.1f}" if elapsed < 10 else f"{elapsed:.0f}"
        progress(elapsed, f"step {step_id}: command running for {seconds} s")

    return report


class InFlight:
    """The shell commands this process is running now, each with an event set when it ends."""

    def __init__(self) -> None:
        self._events: dict[tuple[str, str, str], threading.Event] = {}
        self._guard = threading.Lock()

    def start(self, key: tuple[str, str, str]) -> None:
        with self._guard:
            self._events[key] = threading.Event()

    def end(self, key: tuple[str, str, str]) -> None:
        with self._guard:
            event = self._events.pop(key, None)
        if event is not None:
            event.set()

    def event(self, key: tuple[str, str, str]) -> threading.Event | None:
        with self._guard:
            return self._events.get(key)


IN_FLIGHT = InFlight()


@dataclass
class Completed:
    """What completing a step led to: accepted or not (`error` says why), then where the
    thread stands (`answer`: the next step or the end, with its messages)."""

    success: bool
    answer: Answer


@dataclass
class Pending:
    """An effect the driver must perform outside the lock for `workflow_id`: run a command
    (`ShellRequest`) or wait for the one another call runs (`Busy`)."""

    workflow_id: str
    effect: ShellRequest | Busy


Claimed = Answer | Pending


class Driver:
    """Runs a thread's advance/shell loop as a series of transactions.

    One driver serves every instance of a service: it holds no instance, only how to
    transact (the instance layer's `transact`), how to run a command and which commands
    this process runs now."""

    def __init__(self, transact: Transact[Any], shell_runner: ShellRunner = default_shell_runner,
                 in_flight: InFlight = IN_FLIGHT):
        self.transact = transact
        self.shell_runner = shell_runner
        self.in_flight = in_flight

    def next_step(self, workflow_id: str, thread_id: str | None = None,
                  progress: ProgressCallback | None = None) -> Answer:
        claimed = self.transact(workflow_id, lambda run: self._claim(run, run.advance(thread_id)))
        return self._settle(claimed, thread_id, progress)

    def complete(self, workflow_id: str, thread_id: str | None, step_id: str, status: str = "success",
                 result: Any = None, error: str | None = None,
                 progress: ProgressCallback | None = None, may_answer_user: bool = True) -> Completed:
        def change(run: WorkflowRun) -> tuple[Completion, Claimed | None, str]:
            completion = run.complete(thread_id, step_id, status, result, error, may_answer_user)
            claimed = self._claim(run, run.advance(thread_id)) if completion.advance else None
            return completion, claimed, run.status_for(run.thread(thread_id))

        completion, claimed, thread_status = self.transact(workflow_id, change)
        if claimed is None:  # refused: the same (or a `wait`) step again, nothing advanced
            return Completed(False, Answer(thread_status, completion.step, [], completion.error))
        answer = self._settle(claimed, thread_id, progress)
        if completion.error:
            answer.error = completion.error
        return Completed(completion.success, answer)

    # -- performing effects ------------------------------------------------------------------
    def _claim(self, run: WorkflowRun, outcome: Outcome) -> Claimed:
        """Inside the transaction: a command about to run is registered as in flight here,
        so a concurrent call waits for it instead of thinking it orphaned."""
        if isinstance(outcome, ShellRequest):
            self.in_flight.start((run.workflow_id, outcome.thread_id, outcome.step_id))
            me = owners.current()
            run.claim_shell(outcome.thread_id, outcome.step_id, {
                "owner": me.data(), "lease_until": time.time() + owners.lease_seconds(),
                "owner_pid": me.pid})  # what servers of older versions judge a claim by
            return Pending(run.workflow_id, outcome)
        if isinstance(outcome, Busy):
            return Pending(run.workflow_id, outcome)
        return outcome

    def _settle(self, claimed: Claimed, thread_id: str | None, progress: ProgressCallback | None) -> Answer:
        waits = 0
        while isinstance(claimed, Pending):
            if isinstance(claimed.effect, ShellRequest):
                claimed = self._run_shell(claimed.workflow_id, claimed.effect, progress)
            else:
                waits += 1
                claimed = self._wait(claimed.workflow_id, claimed.effect, thread_id, waits)
        return claimed

    def _run_shell(self, workflow_id: str, request: ShellRequest, progress: ProgressCallback | None) -> Claimed:
        key = (workflow_id, request.thread_id, request.step_id)
        try:
            if request.delay_ms:
                time.sleep(request.delay_ms / 1000)
            result = self.shell_runner(request, progress, [self._lease_renewal(workflow_id, request)])
            return self.transact(workflow_id, lambda run: self._claim(run, run.finish_shell(request, result)))
        finally:
            self.in_flight.end(key)

    def _lease_renewal(self, workflow_id: str, request: ShellRequest) -> Periodic:
        """Renew the command's lease every third of it while it runs (a command shorter than
        that never renews).  Each renewal is one ordinary commit; a renewal that fails is
        logged and tried again next time, and one that finds the command no longer ours
        (another server released it after the lease ran out) stops."""
        me, lease = owners.current().data(), owners.lease_seconds()
        lost = threading.Event()

        def renew(elapsed: float) -> None:
            if lost.is_set():
                return
            try:
                still = self.transact(workflow_id, lambda run: run.renew_shell(request.thread_id, request.step_id, me,
                                                                  time.time() + lease))
            except Exception as exc:  # the store is away: the lease may lapse, the command runs on
                log.warning("step %s: could not renew the lease of its command after %.0f s: %s",
                            request.step_id, elapsed, exc)
                return
            if not still:
                lost.set()
                log.warning("step %s: its command is no longer this server's (released after its lease "
                            "expired, or the workflow moved on): it may run twice", request.step_id)

        return Periodic(lease / 3, renew)

    def _wait(self, workflow_id: str, busy: Busy, thread_id: str | None, waits: int) -> Claimed:
        """Wait for the command another call is running; release it when nobody runs it."""
        key = (workflow_id, busy.thread_id, busy.step_id)
        event = self.in_flight.event(key)
        reason = None if event is not None else owners.abandoned(busy.claim, owners.current(), time.time())
        if event is not None:
            event.wait(BUSY_WAIT_S)
        elif reason is None:  # its owner still runs it, in another process or on another host
            low, high = OTHER_PROCESS_POLL_S
            time.sleep(min(high, low * waits))
        else:  # nobody runs it: run it again (unless its claim changed meanwhile)
            self.transact(workflow_id, lambda run: run.release_shell(busy.thread_id, busy.step_id, reason,
                                                                     busy.claim))
        return self.transact(workflow_id, lambda run: self._claim(run, run.advance(thread_id)))

