"""Which V8 worker runs which call: a small pool that a runaway transform cannot hog.

One V8 isolate serializes calls, so ten `while (true)` transforms used to delay every
other instance's trivial step by ten time limits.  The pool holds up to `size` workers
(V8 child processes), created only when concurrent calls need them, and schedules by
one rule: a call that has not run yet never waits more than about a quantum.

- A call runs on an idle worker (the most recently used one, so a sequential workload
  keeps using one warm V8), or on a new worker while the pool is below `size`.
- When a *fresh* call (one never preempted) waits and no worker is free, the fresh call
  that has been running longest, if it has run at least `quantum_s`, is preempted: V8
  terminates its script and it is queued again as *retried* (transforms are pure, so
  running one again is safe).  A retried call is never preempted again and has its full
  time limit.
- Retried calls hold at most `size - 1` workers, so one worker always serves fresh
  calls, and a trivial call waits at most about one quantum however many runaways run.
- A worker that does not give the call back within `kill_after_s` of the preemption is
  killed and replaced (`kill`), never waited on.

Workers idle longer than `retire_after_s`, beyond the first, are closed.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

W = TypeVar("W")


@dataclass(eq=False)
class _Ticket:
    retried: bool


@dataclass(eq=False)
class _Lease(Generic[W]):
    worker: W
    retried: bool
    started: float
    preempted_at: float | None = None


@dataclass
class PoolHooks(Generic[W]):
    """What the pool does to workers: make one, ask one to give its call back, kill one,
    close an idle one."""

    spawn: Callable[[], W]
    preempt: Callable[[W], None]
    kill: Callable[[W], None]
    close: Callable[[W], None]


@dataclass
class Pool(Generic[W]):
    hooks: PoolHooks[W]
    size: int = 3
    quantum_s: float = 0.25
    kill_after_s: float = 1.0
    retire_after_s: float = 60.0
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _idle: list[tuple[W, float]] = field(default_factory=list)  # (worker, idle since), LIFO
    _count: int = 0  # workers alive or being spawned
    _busy_retried: int = 0
    _running: dict[int, _Lease[W]] = field(default_factory=dict)
    _waiting: deque[_Ticket] = field(default_factory=deque)

    def acquire(self, retried: bool) -> W:
        """A worker for one call (blocks while none may be had)."""
        with self._cond:
            if self._idle and not self._waiting and (not retried or self._busy_retried < max(self.size - 1, 1)):
                ready = self._idle.pop()[0]  # the common case: nobody waits, a worker is idle
                self._busy_retried += retried
                self._running[id(ready)] = _Lease(ready, retried, time.monotonic())
                return ready
        ticket = _Ticket(retried)
        with self._cond:
            self._waiting.append(ticket)
            try:
                while not self._grantable(ticket):
                    self._cond.wait(self._preempt(time.monotonic()))
            finally:
                self._waiting.remove(ticket)
            self._busy_retried += retried
            worker: W | None = self._idle.pop()[0] if self._idle else None
            if worker is None:
                self._count += 1
        if worker is None:
            try:
                worker = self.hooks.spawn()
            except BaseException:
                with self._cond:
                    self._count -= 1
                    self._busy_retried -= retried
                    self._cond.notify_all()
                raise
        with self._cond:
            self._running[id(worker)] = _Lease(worker, retried, time.monotonic())
        return worker

    def release(self, worker: W, alive: bool) -> bool:
        """Give a worker back (`alive` False: it is gone); True if its call was preempted."""
        retire: list[W] = []
        with self._cond:
            lease = self._running.pop(id(worker))
            self._busy_retried -= lease.retried
            now = time.monotonic()
            if alive:
                self._idle.append((worker, now))
            else:
                self._count -= 1
            while len(self._idle) > 1 and now - self._idle[0][1] > self.retire_after_s:
                retire.append(self._idle.pop(0)[0])
                self._count -= 1
            if self._waiting:
                self._cond.notify_all()
        for old in retire:
            self.hooks.close(old)
        return lease.preempted_at is not None

    def workers(self) -> list[W]:
        with self._cond:
            return [w for w, _ in self._idle] + [lease.worker for lease in self._running.values()]

    def drain_idle(self) -> list[W]:
        """Take every idle worker out of the pool (to close them)."""
        with self._cond:
            idle, self._idle = [w for w, _ in self._idle], []
            self._count -= len(idle)
            return idle

    # -- policy (called with the lock held) ------------------------------------------------
    def _grantable(self, ticket: _Ticket) -> bool:
        if not self._idle and self._count >= self.size:
            return False
        retried_cap = max(self.size - 1, 1)
        for waiter in self._waiting:
            if not waiter.retried or self._busy_retried < retried_cap:
                return waiter is ticket
        return False

    def _preempt(self, now: float) -> float:
        """Preempt for waiting fresh calls if due; seconds until the next look."""
        fresh_waiting = sum(1 for t in self._waiting if not t.retried)
        pending = [lease for lease in self._running.values() if lease.preempted_at is not None]
        for lease in pending:
            if now - (lease.preempted_at or now) > self.kill_after_s:
                self.hooks.kill(lease.worker)  # its caller sees the worker die and retries
        candidates = sorted((lease for lease in self._running.values()
                             if not lease.retried and lease.preempted_at is None),
                            key=lambda lease: lease.started)
        wait = 0.1
        for lease in candidates[:max(fresh_waiting - len(pending), 0)]:
            due = lease.started + self.quantum_s - now
            if due <= 0:
                lease.preempted_at = now
                self.hooks.preempt(lease.worker)
            else:
                wait = min(wait, due)
        return max(wait, 0.01)
