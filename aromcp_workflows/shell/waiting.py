"""Waiting for a running command: one thread, one `poll`, whatever else is due meanwhile.

The thread that started a command (or adopts one another server started) waits for its
exit, its deadline and its periodic duties (progress reports, lease renewals, cutting the
output files back to the cap) in one `poll` on a pidfd of the child, then for any process
the command left holding its output (`shell.runner` starts and collects; this waits).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from aromcp_workflows.shell.rundir import Output, RunDir

TRIM_INTERVAL_S = 0.25  # how often a running command's output files are cut back to the cap
TRIM_FAST_S = 0.02  # ... and while it writes faster than that (the last look found one past twice the cap)
HOLDER_POLL_S = (0.005, 0.1)  # backoff while a process left behind still holds the output open


@dataclass
class Periodic:
    """Something to do every `interval_s` seconds while a command runs, with the elapsed time
    (progress reports, renewing the command's lease).  Runs on the waiting thread."""

    interval_s: float
    action: Callable[[float], None]
    due: float = field(default=0.0, init=False)



class CommandWait:
    """One thread waits for everything: the command's exit (a pidfd of the wrapper, or its
    output locks for a command another server started), the deadline, the periodic duties
    (and cutting the output files back to the cap), then any process the command left
    holding its output (within the timeout)."""

    def __init__(self, pid: int | None, run_dir: RunDir, deadline: float, started: float, duties: list[Periodic],
                 process: subprocess.Popen[bytes] | None = None):
        self.pid, self.run_dir, self.process = pid, run_dir, process
        self.deadline, self.started = deadline, started
        self.dropped: dict[str, int] = {}
        self.output: Output | None = None  # read on the last look for a holder (None: read it later)
        self.trimming = Periodic(TRIM_INTERVAL_S, self._trim)
        self.duties = [*duties, self.trimming]
        for duty in self.duties:
            duty.due = started + duty.interval_s

    def run(self) -> bool:
        """True when the timeout killed the command."""
        pidfd = _pidfd(self.pid) if self.pid is not None else None
        try:
            if pidfd is not None and not self._until_exit(pidfd):
                return self._kill()
        finally:
            if pidfd is not None:
                os.close(pidfd)
        if (self.process is not None and self.process.poll() is None  # no pidfd (not Linux)
                and not self._until(lambda: self.process is not None and self.process.poll() is not None)):
            return self._kill()
        if not self._until(self._released):
            return self._kill()
        return False

    def _released(self) -> bool:
        """Whether no process holds the output any more; it is read on the same look.  A
        waiter of this process's own child has waited since the command started, so every cut
        of its output was made here and counted in `dropped`."""
        self.output = self.run_dir.released_output(self.dropped, every_cut=self.process is not None)
        return self.output is not None

    def _until_exit(self, pidfd: int) -> bool:
        """Wait for the wrapper to exit (reaping it when it is our child); False at the deadline."""
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        while True:
            now = time.monotonic()
            if now >= self.deadline:
                return False
            self._run_duties(now)
            if poller.poll(self._poll_ms(now)):
                if self.process is not None:
                    self.process.wait()  # it has exited: this only reaps it
                return True

    def _until(self, done: Callable[[], bool]) -> bool:
        """Poll `done` with a short backoff (a rare wait: a process left holding the output, a
        command this process did not start); False at the deadline."""
        pause = HOLDER_POLL_S[0]
        while not done():
            now = time.monotonic()
            if now >= self.deadline:
                return False
            self._run_duties(now)
            time.sleep(min(pause, max(0.0, self.deadline - now), self._poll_ms(now) / 1000))
            pause = min(HOLDER_POLL_S[1], pause * 2)
        return True

    def _poll_ms(self, now: float) -> int:
        wake = min([self.deadline, *(duty.due for duty in self.duties)])
        return max(1, int((wake - now) * 1000) + 1)

    def _run_duties(self, now: float) -> None:
        for duty in self.duties:
            if now >= duty.due:
                duty.action(now - self.started)
                duty.due = time.monotonic() + duty.interval_s

    def _trim(self, _elapsed: float) -> None:
        """Cut the output files back to the cap; look again sooner while the command writes fast."""
        self.trimming.interval_s = TRIM_FAST_S if self.run_dir.trim(self.dropped) else TRIM_INTERVAL_S

    def _kill(self) -> bool:
        if self.pid is not None:
            kill_group(self.pid, self.process)
        return True


def kill_group(pid: int, process: subprocess.Popen[bytes] | None) -> None:
    """SIGKILL the command's whole process group (its session), then reap it if it is ours."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    if process is not None:
        process.wait()


def _pidfd(pid: int) -> int | None:
    """A descriptor that polls readable when the process exits (Linux >= 5.3), or None."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        return int(opener(pid))
    except OSError:  # ENOSYS on an old kernel, a seccomp filter refusing it, or the process is gone
        return None
