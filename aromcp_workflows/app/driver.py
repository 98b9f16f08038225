"""Driving a run: perform the effects it returns, each locked stretch one transaction.

The interpreter answers every call with an effect value; this module performs them.
`Answer` goes back to the caller.  `ShellRequest` runs the command with no lock held,
then hands the result back in a new transaction; the transaction that hands out the
request also records its claim (`interpreter.claim.ShellClaim`: owner, lease, run
directory, deadline), and a long command renews the lease every third of it.  On a store
of one machine the command starts inside that transaction and the claim is committed
while it runs (`app.launch`); on a shared one, after the commit.  The run directory is
removed once the result is committed, not before: until then a later call can take the
result from it.  `Busy` (another call is running the thread's command)
waits: on the command's completion event when this process runs it — no thread polls —
and otherwise until its owner finishes.  A command whose owner is gone (or whose lease
expired) is adopted (`app.adoption`): on this machine its run directory tells where it
stands, so it never runs twice there; only a command whose owner was on another machine
is released and runs again here: at least once.

With a call budget (`AROMCP_CALL_BUDGET_S`, `app.calls`), a call that would wait on a
command longer answers at the budget with the command still running (a `wait` step and
`waiting_for`); the command goes on, driven to the thread's next step by a thread of its own.

A `Transact` function runs one change to an instance under its lock and commits it (or
changes nothing): the instance layer's `InstanceRegistry.transact`.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from aromcp_workflows.app import calls
from aromcp_workflows.app.adoption import Adopter
from aromcp_workflows.app.launch import Launch, Launcher
from aromcp_workflows.app.pending import IN_FLIGHT, Claimed, InFlight, PendingEffect, Transact
from aromcp_workflows.interpreter import (
    Answer,
    Busy,
    Completion,
    Outcome,
    ShellClaim,
    ShellRequest,
    ShellResult,
    WorkflowRun,
    Writer,
)
from aromcp_workflows.shell import DEFAULT_TIMEOUT_MS, Periodic, ProgressCallback, RunDir, run_shell, wait_command
from aromcp_workflows.shell import adopt as wait_and_collect
from aromcp_workflows.shell import owner as owners

ShellRunner = Callable[[ShellRequest, ProgressCallback | None, Sequence[Periodic], RunDir, dict[str, Any]],
                       ShellResult]
OTHER_PROCESS_POLL_S = (0.05, 0.5)  # backoff while a command runs in another server process
ADOPTED_BY_NAME = ("its server died after it started the command, before the command's claim was committed; its "
                   "result is taken from where it runs (it does not run again)")
BUSY_WAIT_S = 5.0  # how long one wait on a running command lasts before it is looked at again
log = logging.getLogger("aromcp_workflows")
T = TypeVar("T")


def default_shell_runner(request: ShellRequest, progress: ProgressCallback | None,
                         periodic: Sequence[Periodic], run_dir: RunDir, meta: dict[str, Any]) -> ShellResult:
    return run_shell(request.command, request.cwd, env=request.env, timeout_ms=request.timeout_ms,
                     progress=progress, periodic=periodic, run_dir=run_dir, meta=meta)


@dataclass
class StepDone:
    """What completing a step led to: accepted or not (`error` says why), then where the
    thread stands (`answer`: the next step or the end, with its messages)."""

    success: bool
    answer: Answer


class Driver:
    """Runs a thread's advance/shell loop as a series of transactions.

    One driver serves every instance of a service: it holds no instance, only how to
    transact (the instance layer's `transact`), how to run a command, which commands
    this process runs now, and its `Adopter` of commands whose server died."""

    def __init__(self, transact: Transact, shell_runner: ShellRunner = default_shell_runner,
                 in_flight: InFlight = IN_FLIGHT, store_path: Callable[[], str] = lambda: "",
                 one_host: Callable[[], bool] = lambda: False):
        """`one_host`: whether the store is used by this machine's servers alone (a file): its
        commands then start before their claims are committed (`app.launch`)."""
        self.transact = transact
        self.shell_runner = shell_runner
        self.in_flight = in_flight
        self.store_path = store_path  # recorded with each command, for the server that adopts it
        self.adopter = Adopter(self)
        self.launcher = Launcher(lambda: shell_runner is default_shell_runner and one_host(), store_path,
                                 stopped=lambda launch: in_flight.end(launch.key))

    def next_step(self, workflow_id: str, thread_id: str | None = None,
                  progress: ProgressCallback | None = None, by_agent: bool = True) -> Answer:
        """The thread's next step; `by_agent`: an agent's call (what `status` calls its last
        call), not the server going on by itself (an adopted command's thread)."""
        def change(run: WorkflowRun) -> Claimed:
            if by_agent:
                run.note_call(thread_id)
            return self.claim(run, run.advance(thread_id))

        claimed = self.transact_claims(workflow_id, change, handed_out)
        return self.perform(claimed, thread_id, progress, calls.budget())

    def complete(self, workflow_id: str, thread_id: str | None, step_id: str, status: str = "success",
                 result: Any = None, error: str | None = None,
                 progress: ProgressCallback | None = None, may_answer_user: bool = True,
                 by: Writer = "agent") -> StepDone:
        def change(run: WorkflowRun) -> tuple[Completion, Claimed | None, str]:
            run.note_call(thread_id)
            completion = run.complete(thread_id, step_id, status, result, error, may_answer_user, by)
            claimed = self.claim(run, run.advance(thread_id)) if completion.advance else None
            return completion, claimed, run.machine.status_for(run.machine.thread(thread_id))

        completion, claimed, thread_status = self.transact_claims(workflow_id, change,
                                                                  lambda done: done[1] is None or handed_out(done[1]))
        if claimed is None:  # refused: the same (or a `wait`) step again, nothing advanced
            return StepDone(False, Answer(thread_status, completion.step, [], completion.error))
        answer = self.perform(claimed, thread_id, progress, calls.budget())
        if completion.error:
            answer.error = completion.error
        return StepDone(completion.success, answer)

    def transact_claims(self, workflow_id: str, change: Callable[[WorkflowRun], T],
                        defer: Callable[[T], bool] | None = None) -> T:
        """`transact` of a change that may claim a command (`claim`), which may start it
        before the commit (`app.launch`): a command an attempt started that the committed
        change does not claim is stopped (`Launcher.attempts`)."""
        with self.launcher.attempts() as keep:
            value = self.transact(workflow_id, change, defer)
            keep(_launch_of(value))
        return value

    # -- performing effects ------------------------------------------------------------------
    def claim(self, run: WorkflowRun, outcome: Outcome) -> Claimed:
        """Inside the transaction: a command about to run is registered as in flight here,
        so a concurrent call waits for it instead of thinking it orphaned, and claimed (on a
        store of one machine it is started now: `app.launch`)."""
        if isinstance(outcome, ShellRequest):
            launch = self.launcher.launch(run.workflow_id, outcome, lambda: self._meta(run.workflow_id, outcome))
            self.in_flight.start((run.workflow_id, outcome.thread_id, outcome.step_id))  # not before: it may raise
            me, now = owners.current(), time.time()
            run_dir = RunDir.new() if launch is None else launch.run_dir
            if launch is not None and launch.adopted:
                run.machine.record("shell_adopted", outcome.step_id, None if outcome.thread_id == "main" else
                                   outcome.thread_id, {"reason": ADOPTED_BY_NAME})
            run.claim_shell(outcome.thread_id, outcome.step_id, ShellClaim(
                owner=me.data(), lease_until=now + owners.lease_seconds(), owner_pid=me.pid,
                run_dir=str(run_dir.path), started_at=now + outcome.delay_ms / 1000,
                deadline=now + (outcome.delay_ms + (outcome.timeout_ms or DEFAULT_TIMEOUT_MS)) / 1000))
            return PendingEffect(run.workflow_id, outcome, run_dir, launch)
        if isinstance(outcome, Busy):
            return PendingEffect(run.workflow_id, outcome)
        return outcome

    def perform(self, claimed: Claimed, thread_id: str | None, progress: ProgressCallback | None,
               budget: float | None = None) -> Answer:
        """Perform effects until the thread has an answer; with a `budget` (seconds), answer
        when it runs out with the command still running (`waiting_for`)."""
        deadline = None if budget is None else time.monotonic() + budget
        waits = 0
        while isinstance(claimed, PendingEffect):
            if deadline is not None and time.monotonic() >= deadline:
                return calls.still_running(claimed.effect)
            if isinstance(claimed.effect, ShellRequest):
                run_dir = claimed.run_dir or RunDir.new()
                if deadline is not None:
                    return calls.within(deadline, claimed.effect, claimed.workflow_id, progress,
                                        functools.partial(self._drive, claimed, run_dir, thread_id))
                claimed = self.run_shell(claimed.workflow_id, claimed.effect, progress, run_dir, claimed.launch)
            else:
                waits += 1
                claimed = self._wait(claimed.workflow_id, claimed.effect, thread_id, waits, deadline)
        return claimed

    def _drive(self, pending: PendingEffect, run_dir: RunDir, thread_id: str | None,
               progress: ProgressCallback | None) -> Answer:
        """Run the command and every effect after it until the thread has an answer (on a
        thread of its own when the call's budget may run out first)."""
        assert isinstance(pending.effect, ShellRequest)
        return self.perform(self.run_shell(pending.workflow_id, pending.effect, progress, run_dir, pending.launch),
                            thread_id, progress)

    def run_shell(self, workflow_id: str, request: ShellRequest, progress: ProgressCallback | None,
                  run_dir: RunDir, launch: Launch | None = None) -> Claimed:
        """Run the claimed command (or wait for the one `launch` started before the claim was
        committed) and commit its result with what the thread does next."""
        key = (workflow_id, request.thread_id, request.step_id)
        try:
            if request.delay_ms:  # (a command with a delay is never launched before its claim: `app.launch`)
                time.sleep(request.delay_ms / 1000)
            renewal = self.lease_renewal(workflow_id, request, run_dir)
            reports = None if progress is None else calls.reporting(progress, request.step_id, run_dir)
            if launch is None:
                result = self.shell_runner(request, reports, [renewal], run_dir, self._meta(workflow_id, request))
            else:
                run_dir.mark_claimed()  # committed: the store names this directory now
                result = self._launched(workflow_id, launch, request, reports, renewal)
            claimed = self.transact_claims(workflow_id, lambda run: self.claim(
                run, run.finish_shell(request, result, owners.current().data())))
            run_dir.remove()  # committed: nobody needs its files any more
            return claimed
        finally:
            self.in_flight.end(key)
            if launch is not None:
                self.launcher.done(launch)

    def _launched(self, workflow_id: str, launch: Launch, request: ShellRequest, reports: ProgressCallback | None,
                  renewal: Periodic) -> ShellResult:
        """The result of a command started before its claim was committed: waited for here,
        or taken from the directory of a server that died before committing it (a command
        that never started there, or was killed before recording its status, runs now)."""
        if launch.result is not None:
            return launch.result
        if launch.started is not None:
            return wait_command(launch.started, reports, [renewal])
        timeout_s = (request.timeout_ms or DEFAULT_TIMEOUT_MS) / 1000
        result = wait_and_collect(launch.run_dir, launch.run_dir.made_at() + timeout_s, request.timeout_ms, [renewal])
        if result is not None:
            return result
        launch.run_dir.remove()
        return self.shell_runner(request, reports, [renewal], launch.run_dir, self._meta(workflow_id, request))

    def _meta(self, workflow_id: str, request: ShellRequest) -> dict[str, Any]:
        """What a run directory says of its command, for the server that adopts it."""
        return {"workflow_id": workflow_id, "thread_id": request.thread_id, "step_id": request.step_id,
                "store": self.store_path(), "server": owners.current().data()}

    def lease_renewal(self, workflow_id: str, request: ShellRequest, run_dir: RunDir) -> Periodic:
        """Renew the command's lease every third of it while it runs (a command shorter than
        that never renews).  Each renewal is one ordinary commit; a renewal that fails is
        logged and tried again next time.  One that finds the command no longer ours stops:
        when the instance ended meanwhile (cancelled from another host) the command is
        stopped; else another server released it after the lease ran out, and it may run twice."""
        me, lease = owners.current().data(), owners.lease_seconds()
        lost = threading.Event()

        def renew(elapsed: float) -> None:
            if lost.is_set():
                return
            try:
                still, ended = self.transact(workflow_id, lambda run: (
                    run.renew_shell(request.thread_id, request.step_id, me, time.time() + lease), run.finished))
            except Exception as exc:  # the store is away: the lease may lapse, the command runs on
                log.warning("step %s: could not renew the lease of its command after %.0f s: %s",
                            request.step_id, elapsed, exc)
                return
            if not still:
                lost.set()
                if ended:
                    calls.stop_commands([run_dir], f"step {request.step_id}: the instance ended")
                else:
                    log.warning("step %s: its command is no longer this server's (released after its lease "
                                "expired, or the workflow moved on): it may run twice", request.step_id)

        return Periodic(lease / 3, renew)

    def _wait(self, workflow_id: str, busy: Busy, thread_id: str | None, waits: int,
              deadline: float | None) -> Claimed:
        """Wait for the command another call is running (at most until `deadline`); adopt it
        when nobody runs it."""
        key = (workflow_id, busy.thread_id, busy.step_id)
        event = self.in_flight.event(key)
        reason = None if event is not None else owners.abandoned(busy.claim, owners.current(), time.time())
        left = BUSY_WAIT_S if deadline is None else max(0.0, min(BUSY_WAIT_S, deadline - time.monotonic()))
        if event is not None:
            event.wait(left)
        elif reason is None:  # its owner still runs it, in another process or on another host
            low, high = OTHER_PROCESS_POLL_S
            time.sleep(min(high, low * waits, left))
        else:
            taken = self.adopter.adopt(workflow_id, busy, reason)
            if taken is not None:
                return taken
        return self.transact_claims(workflow_id, lambda run: self.claim(run, run.advance(thread_id)), handed_out)


def _launch_of(value: object) -> Launch | None:
    """The launch a committed change claims: its `PendingEffect`'s, alone or in a tuple."""
    for item in value if isinstance(value, tuple) else (value,):
        if isinstance(item, PendingEffect):
            return item.launch
    return None


def handed_out(claimed: Claimed) -> bool:
    """Whether a change ended in a step handed out (or the end): its save may be confirmed
    after the change (`app.confirm`).  A command about to run may not: its claim must be
    stored before it starts."""
    return isinstance(claimed, Answer)
