"""Driving a run: perform the effects it returns, each locked stretch one transaction.

The interpreter answers every call with an effect value; this module performs them.
`Answer` goes back to the caller.  `ShellRequest` runs the command with no lock held,
then hands the result back in a new transaction; the transaction that hands out the
request also records its owner, lease and run directory (`shell.owner`,
`shell.rundir`), and a long command renews the lease every third of it.  The run
directory is removed once the result is committed, not before: until then a later call
can take the result from it.  `Busy` (another call is running the thread's command)
waits: on the command's completion event when this process runs it — no thread polls —
and otherwise until its owner finishes.  A command whose owner is gone (or whose lease
expired) is adopted when its run directory is on this machine: the command started
there goes on or has ended, and its result is taken, so it never runs twice on one
machine.  Only a command whose owner was on another machine (which died, or was cut
off past its lease) is released and runs again here: at least once.

A `Transact` function runs one change to an instance under its lock and commits it (or
changes nothing): the instance layer's `InstanceRegistry.transact`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from aromcp_workflows.interpreter import Answer, Busy, Completion, Outcome, ShellRequest, ShellResult, WorkflowRun
from aromcp_workflows.shell import DEFAULT_TIMEOUT_MS, Periodic, ProgressCallback, RunDir, adopt, run_shell
from aromcp_workflows.shell import owner as owners

T = TypeVar("T")
class Transact(Protocol):
    """One change to an instance under its lock, committed or nothing (`InstanceRegistry.transact`):
    what `change` returned; `defer` says of it whether its save may be confirmed later."""

    def __call__(self, workflow_id: str, change: Callable[[WorkflowRun], T],
                 defer: Callable[[T], bool] | None = None) -> T: ...
ShellRunner = Callable[[ShellRequest, ProgressCallback | None, Sequence[Periodic], RunDir, dict[str, Any]],
                       ShellResult]
OTHER_PROCESS_POLL_S = (0.05, 0.5)  # backoff while a command runs in another server process
BUSY_WAIT_S = 5.0  # how long one wait on a running command lasts before it is looked at again
log = logging.getLogger("aromcp_workflows")


def default_shell_runner(request: ShellRequest, progress: ProgressCallback | None,
                         periodic: Sequence[Periodic], run_dir: RunDir, meta: dict[str, Any]) -> ShellResult:
    named = None if progress is None else _named(progress, request.step_id)
    return run_shell(request.command, request.cwd, env=request.env, timeout_ms=request.timeout_ms,
                     progress=named, periodic=periodic, run_dir=run_dir, meta=meta)


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
        """Mark a command as run (or waited for) here; marking it again changes nothing."""
        with self._guard:
            self._events.setdefault(key, threading.Event())

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
class StepDone:
    """What completing a step led to: accepted or not (`error` says why), then where the
    thread stands (`answer`: the next step or the end, with its messages)."""

    success: bool
    answer: Answer


@dataclass
class PendingEffect:
    """An effect the driver must perform outside the lock for `workflow_id`: run a command
    (`ShellRequest`, in the run directory its claim names) or wait for the one another call
    runs (`Busy`)."""

    workflow_id: str
    effect: ShellRequest | Busy
    run_dir: RunDir | None = None


Claimed = Answer | PendingEffect


class Driver:
    """Runs a thread's advance/shell loop as a series of transactions.

    One driver serves every instance of a service: it holds no instance, only how to
    transact (the instance layer's `transact`), how to run a command and which commands
    this process runs now."""

    def __init__(self, transact: Transact, shell_runner: ShellRunner = default_shell_runner,
                 in_flight: InFlight = IN_FLIGHT, store_path: Callable[[], str] = lambda: ""):
        self.transact = transact
        self.shell_runner = shell_runner
        self.in_flight = in_flight
        self.store_path = store_path  # recorded with each command, for the server that adopts it

    def next_step(self, workflow_id: str, thread_id: str | None = None,
                  progress: ProgressCallback | None = None) -> Answer:
        claimed = self.transact(workflow_id, lambda run: self._claim(run, run.advance(thread_id)), _handed_out)
        return self._settle(claimed, thread_id, progress)

    def complete(self, workflow_id: str, thread_id: str | None, step_id: str, status: str = "success",
                 result: Any = None, error: str | None = None,
                 progress: ProgressCallback | None = None, may_answer_user: bool = True) -> StepDone:
        def change(run: WorkflowRun) -> tuple[Completion, Claimed | None, str]:
            completion = run.complete(thread_id, step_id, status, result, error, may_answer_user)
            claimed = self._claim(run, run.advance(thread_id)) if completion.advance else None
            return completion, claimed, run.machine.status_for(run.machine.thread(thread_id))

        completion, claimed, thread_status = self.transact(workflow_id, change,
                                                           lambda done: done[1] is None or _handed_out(done[1]))
        if claimed is None:  # refused: the same (or a `wait`) step again, nothing advanced
            return StepDone(False, Answer(thread_status, completion.step, [], completion.error))
        answer = self._settle(claimed, thread_id, progress)
        if completion.error:
            answer.error = completion.error
        return StepDone(completion.success, answer)

    # -- performing effects ------------------------------------------------------------------
    def _claim(self, run: WorkflowRun, outcome: Outcome) -> Claimed:
        """Inside the transaction: a command about to run is registered as in flight here,
        so a concurrent call waits for it instead of thinking it orphaned."""
        if isinstance(outcome, ShellRequest):
            self.in_flight.start((run.workflow_id, outcome.thread_id, outcome.step_id))
            me, run_dir = owners.current(), RunDir.new()
            run.claim_shell(outcome.thread_id, outcome.step_id, {
                "owner": me.data(), "lease_until": time.time() + owners.lease_seconds(),
                "owner_pid": me.pid,  # what servers of older versions judge a claim by
                "run_dir": str(run_dir.path),
                "deadline": time.time() + (outcome.delay_ms + (outcome.timeout_ms or DEFAULT_TIMEOUT_MS)) / 1000})
            return PendingEffect(run.workflow_id, outcome, run_dir)
        if isinstance(outcome, Busy):
            return PendingEffect(run.workflow_id, outcome)
        return outcome

    def _settle(self, claimed: Claimed, thread_id: str | None, progress: ProgressCallback | None) -> Answer:
        waits = 0
        while isinstance(claimed, PendingEffect):
            if isinstance(claimed.effect, ShellRequest):
                run_dir = claimed.run_dir or RunDir.new()
                claimed = self._run_shell(claimed.workflow_id, claimed.effect, progress, run_dir)
            else:
                waits += 1
                claimed = self._wait(claimed.workflow_id, claimed.effect, thread_id, waits)
        return claimed

    def _run_shell(self, workflow_id: str, request: ShellRequest, progress: ProgressCallback | None,
                   run_dir: RunDir) -> Claimed:
        key = (workflow_id, request.thread_id, request.step_id)
        try:
            if request.delay_ms:
                time.sleep(request.delay_ms / 1000)
            meta = {"workflow_id": workflow_id, "thread_id": request.thread_id, "step_id": request.step_id,
                    "store": self.store_path(), "server": owners.current().data()}
            result = self.shell_runner(request, progress, [self._lease_renewal(workflow_id, request)], run_dir, meta)
            claimed = self.transact(workflow_id, lambda run: self._claim(run, run.finish_shell(request, result,
                                                                                             owners.current().data())))
            run_dir.remove()  # committed: nobody needs its files any more
            return claimed
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
        """Wait for the command another call is running; take it over when nobody runs it."""
        key = (workflow_id, busy.thread_id, busy.step_id)
        event = self.in_flight.event(key)
        reason = None if event is not None else owners.abandoned(busy.claim, owners.current(), time.time())
        if event is not None:
            event.wait(BUSY_WAIT_S)
        elif reason is None:  # its owner still runs it, in another process or on another host
            low, high = OTHER_PROCESS_POLL_S
            time.sleep(min(high, low * waits))
        else:
            taken = self._adopt(workflow_id, busy, reason)
            if taken is not None:
                return taken
        return self.transact(workflow_id, lambda run: self._claim(run, run.advance(thread_id)), _handed_out)

    def take_back(self, workflow_id: str, thread_id: str | None) -> Callable[[], Answer] | None:
        """Claim now a command of this machine that a dead server left running or ended unrecorded
        (the claim renews its lease), so that no server elsewhere sees the lease run out while this
        one is still starting.  What is left (waiting for it, committing its result, going on as
        the thread's next step would) is returned to be run in the background; None when the
        command is not this server's to take (done already, or claimed by a live server)."""
        busy = self.transact(workflow_id, lambda run: run.busy_shell(thread_id))
        reason = None if busy is None else owners.abandoned(busy.claim, owners.current(), time.time())
        if busy is None or reason is None:
            return None
        mine = self._claim_abandoned(workflow_id, busy, reason)
        if mine is None:
            return None

        def rest() -> Answer:
            claimed = self._take_result(workflow_id, busy, reason, mine)
            return self.next_step(workflow_id, thread_id) if claimed is None else self._settle(claimed, thread_id, None)

        return rest

    def _adopt(self, workflow_id: str, busy: Busy, reason: str) -> Claimed | None:
        """Take over a command nobody runs any more.  On this machine its run directory tells
        where it stands: it is waited for and its result committed (None returned when the
        claim changed meanwhile: look again); it never started, and runs now for the first
        time; or it was killed before it could record its status, and runs again.  Elsewhere
        (or a claim without a run directory) it is released after the lease: it runs again."""
        mine = self._claim_abandoned(workflow_id, busy, reason)
        return None if mine is None else self._take_result(workflow_id, busy, reason, mine)

    def _claim_abandoned(self, workflow_id: str, busy: Busy, reason: str) -> dict[str, Any] | None:
        """Make this server the runner of an abandoned command of this machine (its new claim,
        committed, and the command marked in flight here, so no other call adopts it while
        `_take_result` is still to come), or release one of another machine (None: it runs
        again when asked)."""
        claim, me = busy.claim, owners.current()
        owner = owners.Owner.from_data(claim.get("owner"))
        if not isinstance(claim.get("run_dir"), str) or owner is None or not me.shares_pids_with(owner):
            self.transact(workflow_id, lambda run: run.release_shell(busy.thread_id, busy.step_id, reason, claim))
            return None
        mine = {**claim, "owner": me.data(), "lease_until": time.time() + owners.lease_seconds(), "owner_pid": me.pid}
        if not self.transact(workflow_id, lambda run: run.adopt_shell(busy.thread_id, busy.step_id, claim, mine,
                                                                      reason)):
            return None
        self.in_flight.start((workflow_id, busy.thread_id, busy.step_id))
        return mine

    def _take_result(self, workflow_id: str, busy: Busy, reason: str, mine: dict[str, Any]) -> Claimed | None:
        """Wait for a command claimed by `_claim_abandoned` (renewing its lease) and commit its
        result; or release it when it left none (it runs again).  Ends the in-flight mark the
        claim made."""
        key = (workflow_id, busy.thread_id, busy.step_id)
        try:
            me = owners.current()
            request = ShellRequest(busy.thread_id, busy.step_id, "", Path("."), {}, None, 0)
            folder = RunDir(Path(str(mine["run_dir"])))
            deadline = mine.get("deadline")
            result = adopt(folder, deadline if isinstance(deadline, int | float) else time.time(),
                           None, [self._lease_renewal(workflow_id, request)])
            claimed: Claimed | None = None
            if result is None:  # nothing to take: it runs (again) once released
                why = NOT_TAKEN.get(folder.state(), NOT_TAKEN["killed"])
                self.transact(workflow_id, lambda run: run.release_shell(busy.thread_id, busy.step_id,
                                                                         f"{reason}, {why}", mine))
            else:
                claimed = self.transact(workflow_id, lambda run: self._claim(run, run.finish_shell(request, result,
                                                                                                 me.data())))
            folder.remove()  # what it says is committed now: nobody needs its files any more
            return claimed
        finally:
            self.in_flight.end(key)


# Why an adopted command left no result to take (`RunDir.state()` once it has ended).
NOT_TAKEN = {"never_started": "before it started",
             "killed": "and the command was killed before it recorded its exit status (its machine or container "
                       "stopped?)"}


def _handed_out(claimed: Claimed) -> bool:
    """Whether a change ended in a step handed out (or the end): its save may be confirmed
    after the change (`app.confirm`).  A command about to run may not: its claim must be
    stored before it starts."""
    return isinstance(claimed, Answer)
