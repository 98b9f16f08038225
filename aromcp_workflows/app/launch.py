"""Starting a command before its claim is committed, on a store of one machine.

A server-side command's claim (owner, lease, run directory) is what keeps it from running
twice.  Committed before the command starts, it costs a whole transaction in front of every
command: a third of a short one.  On a store that only this machine's servers use
(`Store.one_host`: a SQLite file), the command starts first and its claim is committed
while it runs:

- its run directory is named after the run (`RunDir.for_command`: store, instance,
  thread, step, command, directory, environment), and making it is the claim on this machine: the directory
  exists before the command does;
- a server that reaches a run whose directory exists while the store has no claim for it
  takes the command from there (`Launch.adopted`) and does not start it again: the server
  that started it died before its claim was committed.  When that server is still alive,
  it is committing the claim right now, and the transaction is tried again
  (`StartingElsewhere`, a conflict), until the claim shows;
- a transaction tried again in this process (a conflict) finds its own command
  (`Launcher.launch` remembers it) and does not start another, and so does another call's
  transaction for the same run (a client that gave up and sent the call again).  A command
  is stopped when the last transaction holding it ends without any having committed a claim
  of it, not when the one that started it did: the other may be committing its claim;
- once the claim is committed, the directory says so (`RunDir.mark_claimed`): a marked
  directory whose run has no claim in the store is a leftover of a run whose result was
  committed (its server died before removing it), and it is removed, not adopted.

A store shared by several machines (PostgreSQL) keeps the claim first: a run directory on
this machine claims nothing on another.  So does a command with a delay (a retry's back-off)
or a runner other than the real one (`aromcp-workflows test`'s stubs).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from aromcp_workflows.interpreter import ShellRequest, ShellResult
from aromcp_workflows.shell import RunDir, RunningCommand, start_command, stop_command
from aromcp_workflows.shell import owner as owners
from aromcp_workflows.store import ConflictError, StoreError

NEW_DIR_S = 2.0  # a run directory younger than this, with no meta yet, is still being made by its server


class StartingElsewhere(ConflictError):
    """Another server of this machine has started this run's command and is committing its
    claim: the transaction is tried again (as any conflict), and then finds the claim."""

    def __init__(self, workflow_id: str, run_dir: RunDir) -> None:
        StoreError.__init__(self, f"workflow {workflow_id}: another server of this machine is starting the same "
                                  f"command ({run_dir.path}); try again")


@dataclass
class Launch:
    """A command of a claim about to be committed: started here (`started`), found in the
    directory a server that died left (`adopted`), or unable to start (`result`)."""

    run_dir: RunDir
    key: tuple[str, str, str]  # the instance, thread and step it runs for
    started: RunningCommand | None = None
    result: ShellResult | None = None
    held: int = field(default=0, compare=False)  # transactions holding it now: its starter's, those that found it
    claimed: bool = field(default=False, compare=False)  # a committed change claims it: it is never stopped here

    @property
    def adopted(self) -> bool:
        return self.started is None and self.result is None


class Launcher:
    """Starts commands inside the transaction that claims them (see the module's docstring),
    remembering each until its result is committed (`done`)."""

    def __init__(self, one_host: Callable[[], bool], store_path: Callable[[], str],
                 stopped: Callable[[Launch], None] = lambda _launch: None):
        """`stopped`: told of each command stopped because its claim went elsewhere."""
        self.one_host = one_host
        self.store_path = store_path
        self.stopped = stopped
        self._launched: dict[str, Launch] = {}
        self._guard = threading.Lock()
        self._attempts = threading.local()  # what the transaction running on this thread launched

    def launch(self, workflow_id: str, request: ShellRequest, meta: Callable[[], dict[str, Any]]) -> Launch | None:
        """Start the command of `request` now (its run directory saying `meta()`), its claim
        to be committed while it runs; None when this store or this request keeps the claim
        first (see the module's docstring)."""
        if request.delay_ms or not self.one_host():
            return None
        run_dir = RunDir.for_command(self.identity(workflow_id, request))
        with self._guard:
            found = self._launched.get(str(run_dir.path))
            if found is not None:  # this transaction tried again after a conflict, or another call's
                self._hold(found)
                return found
        key = (workflow_id, request.thread_id, request.step_id)
        if os.path.isdir(run_dir.path):
            left = self._left_behind(workflow_id, run_dir, key)
            if left is not None:
                return left
        try:
            started = start_command(request.command, request.cwd, env=request.env, timeout_ms=request.timeout_ms,
                                    run_dir=run_dir, meta=meta())
        except FileExistsError:  # made by another server of this machine a moment ago
            raise StartingElsewhere(workflow_id, run_dir) from None
        launch = (Launch(run_dir, key, started) if isinstance(started, RunningCommand)
                  else Launch(run_dir, key, result=started))
        with self._guard:
            self._launched[str(run_dir.path)] = launch
            self._hold(launch)
        return launch

    def _hold(self, launch: Launch) -> None:
        """The transaction running on this thread holds `launch` (once however often it
        meets it), until `attempts` ends.  Called under the guard."""
        launched = getattr(self._attempts, "launched", None)
        if launched is not None and not any(held is launch for held in launched):
            launched.append(launch)
            launch.held += 1

    @contextmanager
    def attempts(self) -> Iterator[Callable[[Launch | None], None]]:
        """Around a transaction that may claim a command: a command its attempts started or
        found that no committed change claims (a conflict, and meanwhile the instance was
        cancelled or went elsewhere) is stopped once no other transaction holds it.  The
        block calls the function it is given with the launch the committed change claims.
        When the transaction fails, what it held runs on: the thread's next call finds it
        (`launch` remembers it)."""
        launched: list[Launch] = []
        kept: list[Launch | None] = []
        self._attempts.launched = launched
        committed = False
        try:
            yield kept.append
            committed = True
        finally:
            self._attempts.launched = None
            unclaimed = self._release(launched, kept, committed)
        for launch in unclaimed:
            assert launch.started is not None
            stop_command(launch.started)
            self.stopped(launch)

    def _release(self, launched: list[Launch], kept: list[Launch | None], committed: bool) -> list[Launch]:
        """A transaction ends: what it held is held one fewer time, what it committed a claim
        of is claimed.  The launches nobody holds or claims any more, forgotten (`done`) here
        under the guard so that no transaction finds them again, are returned to be stopped
        (none after a failed transaction: the next call finds them)."""
        with self._guard:
            for launch in launched:
                launch.held -= 1
                launch.claimed = launch.claimed or (committed and any(k is launch for k in kept))
            if not committed:
                return []
            unclaimed = [launch for launch in launched
                         if launch.held == 0 and not launch.claimed and launch.started is not None]
            for launch in unclaimed:
                self._launched.pop(str(launch.run_dir.path), None)
            return unclaimed

    def done(self, launch: Launch) -> None:
        """The command's result is committed (or it was handed to adoption): forget it."""
        with self._guard:
            self._launched.pop(str(launch.run_dir.path), None)

    def identity(self, workflow_id: str, request: ShellRequest) -> str:
        """What names one run of one command: the same for every server that reaches it
        before its claim is committed, another once its result is (the step moved on, or
        its directory was marked claimed and removed)."""
        return json.dumps([self.store_path(), workflow_id, request.thread_id, request.step_id, request.command,
                           str(request.cwd), sorted(request.env.items())])

    def _left_behind(self, workflow_id: str, run_dir: RunDir, key: tuple[str, str, str]) -> Launch | None:
        """A directory of this run found with no claim in the store: adopted (its server died
        before committing the claim), or removed when a committed run left it (None: start
        the command); `StartingElsewhere` while its server still lives."""
        if run_dir.claimed():
            run_dir.remove()
            return None
        meta, me = run_dir.meta(), owners.current()
        server = owners.Owner.from_data((meta or {}).get("server"))
        if server is None and _age_s(run_dir) < NEW_DIR_S:  # made a moment ago, its meta not written yet
            raise StartingElsewhere(workflow_id, run_dir)
        if server is not None and server != me and me.shares_pids_with(server) and owners.runs(server):
            raise StartingElsewhere(workflow_id, run_dir)
        return Launch(run_dir, key)


def _age_s(run_dir: RunDir) -> float:
    try:
        return time.time() - os.stat(run_dir.path).st_mtime
    except OSError:
        return NEW_DIR_S
