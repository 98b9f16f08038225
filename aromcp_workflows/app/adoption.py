"""Adopting a command whose server is gone: its result is taken, it is not run again.

A server-side command runs in a session of its own with its output and exit status in a run
directory (`shell.rundir`), so it outlives a server killed while it runs.  Whoever finds
the command's claim abandoned (`shell.owner.abandoned`) adopts it — one verb for all of it:

- `Adopter.adopt`: a call on its thread found it busy and nobody runs it (`Driver._wait`);
- `Adopter.adopt_now`: a server starting up found a dead server's run directory of its store
  (`WorkflowService.adopt_orphans`), and claims the command before it answers anything.

Adopting is two transactions around a wait: the new claim (`_adopt_claim`: committed, and the
command marked in flight here, so no other call adopts it meanwhile), then the result taken
from the run directory and committed (`_adopt_result`).  On this machine the run directory
tells where the command stands: still running (waited for), ended (its result taken), never
started (it runs now, for the first time), or killed before it recorded its status (it runs
again).  A claim of another machine is released once its lease ran out: it runs again there
or here, at least once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypeVar

from aromcp_workflows.app.pending import Claimed, InFlight, Transact
from aromcp_workflows.interpreter import Answer, Busy, Outcome, ShellClaim, ShellRequest, WorkflowRun
from aromcp_workflows.shell import Periodic, ProgressCallback, RunDir, local_run_dir
from aromcp_workflows.shell import adopt as wait_and_collect
from aromcp_workflows.shell import owner as owners

T = TypeVar("T")


class Driving(Protocol):
    """What adoption uses of its driver (`app.driver.Driver`)."""

    transact: Transact
    in_flight: InFlight

    def claim(self, run: WorkflowRun, outcome: Outcome) -> Claimed: ...

    def perform(self, claimed: Claimed, thread_id: str | None, progress: ProgressCallback | None,
               budget: float | None = None) -> Answer: ...

    def next_step(self, workflow_id: str, thread_id: str | None = None,
                  progress: ProgressCallback | None = None, by_agent: bool = True) -> Answer: ...

    def lease_renewal(self, workflow_id: str, request: ShellRequest, run_dir: RunDir) -> Periodic: ...

    def transact_claims(self, workflow_id: str, change: Callable[[WorkflowRun], T],
                        defer: Callable[[T], bool] | None = None) -> T: ...

# Why an adopted command left no result to take (`RunDir.state()` once it has ended).
NOT_TAKEN = {"never_started": "before it started",
             "killed": "and the command was killed before it recorded its exit status (its machine or container "
                       "stopped?)"}


class Adopter:
    """Adopts the commands a dead server left, for its driver (whose transactions, claims and
    in-flight marks it uses)."""

    def __init__(self, driver: Driving):
        self.driver = driver

    def adopt_now(self, workflow_id: str, thread_id: str | None) -> Callable[[], Answer] | None:
        """Claim now a command of this machine that a dead server left running or ended unrecorded
        (the claim renews its lease), so that no server elsewhere sees the lease run out while this
        one is still starting.  What is left (waiting for it, committing its result, going on as
        the thread's next step would) is returned to be run in the background; None when the
        command is not this server's to adopt (done already, or claimed by a live server)."""
        driver = self.driver
        busy = driver.transact(workflow_id, lambda run: run.busy_shell(thread_id))
        if busy is None or driver.in_flight.event((workflow_id, busy.thread_id, busy.step_id)) is not None:
            return None  # nothing to adopt, or adopted already (a thread can leave two run directories)
        reason = owners.abandoned(busy.claim, owners.current(), time.time())
        if reason is None:
            return None
        mine = self._adopt_claim(workflow_id, busy, reason)
        if mine is None:
            return None

        def rest() -> Answer:
            claimed = self._adopt_result(workflow_id, busy, reason, mine)
            if claimed is None:
                return driver.next_step(workflow_id, thread_id, by_agent=False)
            return driver.perform(claimed, thread_id, None)

        return rest

    def adopt(self, workflow_id: str, busy: Busy, reason: str) -> Claimed | None:
        """Adopt a command nobody runs any more (see the module's docstring): what its thread
        does next, or None when the claim changed meanwhile or the command was released
        (look again)."""
        mine = self._adopt_claim(workflow_id, busy, reason)
        return None if mine is None else self._adopt_result(workflow_id, busy, reason, mine)

    def _adopt_claim(self, workflow_id: str, busy: Busy, reason: str) -> ShellClaim | None:
        """Make this server the runner of an abandoned command of this machine (its new claim,
        committed, and the command marked in flight here, so no other call adopts it while
        `_adopt_result` is still to come), or release one of another machine (None: it runs
        again when asked)."""
        claim, me, driver = busy.claim, owners.current(), self.driver
        if local_run_dir(claim) is None:
            driver.transact(workflow_id, lambda run: run.release_shell(busy.thread_id, busy.step_id, reason, claim))
            return None
        mine = claim.renewed(me.data(), me.pid, time.time() + owners.lease_seconds())
        if not driver.transact(workflow_id, lambda run: run.adopt_shell(busy.thread_id, busy.step_id, claim, mine,
                                                                        reason)):
            return None
        driver.in_flight.start((workflow_id, busy.thread_id, busy.step_id))
        return mine

    def _adopt_result(self, workflow_id: str, busy: Busy, reason: str, mine: ShellClaim) -> Claimed | None:
        """Wait for a command claimed by `_adopt_claim` (renewing its lease) and commit its
        result; or release it when it left none (it runs again).  Ends the in-flight mark the
        claim made."""
        driver, key = self.driver, (workflow_id, busy.thread_id, busy.step_id)
        try:
            me = owners.current()
            request = ShellRequest(busy.thread_id, busy.step_id, busy.command, Path("."), {}, None, 0)
            assert mine.run_dir is not None  # `_adopt_claim` adopts only a claim that names one
            folder = RunDir(Path(mine.run_dir))
            result = wait_and_collect(folder, mine.deadline if mine.deadline is not None else time.time(),
                                      mine.timeout_ms, [driver.lease_renewal(workflow_id, request, folder)])
            claimed: Claimed | None = None
            if result is None:  # nothing to take: it runs (again) once released
                why = NOT_TAKEN.get(folder.state(), NOT_TAKEN["killed"])
                driver.transact(workflow_id, lambda run: run.release_shell(busy.thread_id, busy.step_id,
                                                                           f"{reason}, {why}", mine))
            else:
                claimed = driver.transact_claims(workflow_id, lambda run: driver.claim(
                    run, run.finish_shell(request, result, me.data())))
            folder.remove()  # what it says is committed now: nobody needs its files any more
            return claimed
        finally:
            driver.in_flight.end(key)
