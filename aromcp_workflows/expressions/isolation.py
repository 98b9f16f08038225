"""V8 in child processes, so that nothing a transform does can take the server down or
hold up the other instances.

Some allocations (`new Array(1e9).fill(0)`) are *fatal* in V8: the process aborts, no
exception is raised, and the heap cap cannot help because it is only checked between
allocations.  `ProcessV8Runtime` keeps the in-process runtime's interface (`call`,
`reset`, `close`, `stats`, limits) but runs it in `python -m
aromcp_workflows.expressions.v8_child`; when a child dies in a call, the call is
reported as stopped by the memory limit and the next call starts a fresh child.

Calls are spread over a small pool of children (`pool.py`): one child for a sequential
workload, up to `pool_size` under concurrency, and a runaway transform is preempted
rather than waited on, so a trivial step of another instance answers promptly.

Each request is one length-prefixed JSON message each way over the child's stdin and
stdout (the child's stderr is the server's, for V8's own fatal messages).
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import weakref
from typing import Any, Literal

from aromcp_workflows.expressions.pipe import read_message, write_message
from aromcp_workflows.expressions.pool import Pool, PoolHooks
from aromcp_workflows.expressions.runtime import (
    EngineStats,
    EngineUnavailable,
    FunctionDef,
    Interrupted,
    RuntimeFailure,
)
from aromcp_workflows.expressions.text import loads_well_formed

log = logging.getLogger("aromcp_workflows")

WATCHDOG_SLACK_S = 10.0  # on top of twice the timeout: a child that hangs is killed
MAX_ATTEMPTS = 3  # a call is preempted once; a stray late signal may cost one more run


class ChildDied(Exception):
    """The V8 child process exited or stopped answering in a call.  Both happen when V8
    meets an allocation it cannot survive or interrupt (`new Array(1e9).fill(0)`), so the
    call is reported as stopped by the memory limit."""

    def __init__(self, kind: Literal["timeout", "memory"] = "memory") -> None:
        super().__init__(kind)
        self.kind: Literal["timeout", "memory"] = kind


class _Child:
    """One V8 child process and the counters it last reported."""

    def __init__(self, args: list[str]) -> None:
        try:
            self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None,
                                         close_fds=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        except OSError as exc:  # EAGAIN, ENOMEM, EMFILE: the machine's state, not the workflow's
            raise EngineUnavailable(f"could not start a V8 process: {exc.strerror or exc}") from exc
        self.stats: dict[str, int] = {}
        weakref.finalize(self, _stop, self.proc)  # no child outlives its engine
        assert self.proc.stdout is not None
        if read_message(self.proc.stdout) is None:  # it has its SIGUSR1 handler from here on
            _stop(self.proc)
            raise EngineUnavailable(f"the V8 process exited while starting (exit status {self.proc.returncode}; "
                                    "see the server's stderr)")

    def exchange(self, request: dict[str, Any], body: bytes, watchdog_s: float) -> tuple[dict[str, Any], bytes]:
        proc = self.proc
        assert proc.stdin is not None and proc.stdout is not None
        try:
            write_message(proc.stdin, request, body)
            if not select.select([proc.stdout], [], [], watchdog_s)[0]:
                raise ChildDied  # silent far past its own limit: stuck in one huge allocation
            message = read_message(proc.stdout)
        except (OSError, ValueError):
            raise ChildDied from None
        if message is None:
            raise ChildDied
        answer, result = message
        self.stats = answer.pop("stats", self.stats)
        return answer, result

    def preempt(self) -> None:
        try:
            self.proc.send_signal(signal.SIGUSR1)
        except OSError:
            pass

    def kill(self) -> None:
        try:
            self.proc.kill()
        except OSError:
            pass


class ProcessV8Runtime:
    """The V8 runtime interface over a pool of child processes (see the module docstring)."""

    def __init__(self, timeout_ms: int = 1000, max_memory_mb: int = 256, gc_every: int = 1000,
                 pool_size: int = 3, quantum_ms: int = 250) -> None:
        self.timeout_ms = timeout_ms
        self.max_memory_mb = max_memory_mb
        self.gc_every = gc_every
        self.pool_size = pool_size
        self.lock = threading.RLock()  # guards the counters
        self._base = EngineStats()  # counters of children that are gone
        self._alive: set[_Child] = set()
        self._pool: Pool[_Child] = Pool(PoolHooks(self._spawn, self._preempt, _Child.kill, self._retire),
                                        size=max(pool_size, 1), quantum_s=quantum_ms / 1000)

    # -- the runtime interface -----------------------------------------------------------
    def call(self, entry: Literal["run", "chain", "check"], defs: list[FunctionDef],
             meta: dict[str, Any], vals: list[Any]) -> Any:
        request = {"op": "call", "entry": entry, "meta": meta,
                   "defs": [[d.fn_id, list(d.params), d.source, d.mode] for d in defs]}
        body = json.dumps(vals, separators=(",", ":")).encode()
        for attempt in range(MAX_ATTEMPTS):
            # Preempted (None): run again, never preempted again (a late signal aside).
            answer, result = self._attempt(request, body, retried=attempt > 0)
            if answer is not None:
                break
        else:
            raise Interrupted("timeout", None)
        if "interrupted" in answer:
            kind: Literal["timeout", "memory"] = "timeout" if answer["interrupted"] == "timeout" else "memory"
            raise Interrupted(kind, answer.get("reached"), lost=bool(answer.get("lost")))
        if "failure" in answer:
            raise RuntimeFailure(answer["failure"])
        return loads_well_formed(result.decode() if isinstance(result, bytes) else result)

    def _attempt(self, request: dict[str, Any], body: bytes,
                 retried: bool) -> tuple[dict[str, Any] | None, bytes]:
        """One run on one child: its answer, or None if the call was preempted."""
        child = self._pool.acquire(retried)
        gone: str | None = None
        try:
            answer, result = child.exchange(request, body, 2 * self.timeout_ms / 1000 + WATCHDOG_SLACK_S)
            if answer.get("exit"):
                gone = "exit"  # it abandoned a V8 still running a promise job, and exited
        except ChildDied as died:
            gone = died.kind
            answer, result = {"interrupted": died.kind, "reached": None, "lost": True}, b""
        except BaseException:
            gone = "memory"  # interrupted mid-exchange: the child's pipe is out of step
            raise
        finally:
            if gone is not None:
                self._fold(child, lost=gone != "exit")
                _stop(child.proc)
                if gone != "exit":
                    log.warning("V8 child %d was lost in a call (%s; exit status %s)", child.proc.pid, gone,
                                child.proc.returncode)
            preempted = self._pool.release(child, gone is None)
        if preempted and (answer.get("preempted") or gone not in (None, "exit")):
            return None, b""
        if answer.get("preempted"):  # a late signal hit an unrelated call: still a preemption
            return None, b""
        return answer, result

    def reset(self) -> None:
        """Close the idle children (a busy one finishes its call first)."""
        for child in self._pool.drain_idle():
            self._retire(child)

    def close(self) -> None:
        self.reset()

    def child_pids(self) -> list[int]:
        """Process ids of the live V8 children (for tests and diagnostics)."""
        return [c.proc.pid for c in self._pool.workers() if c.proc.poll() is None]

    # -- children ----------------------------------------------------------------------------
    def _spawn(self) -> _Child:
        child = _Child([sys.executable, "-m", "aromcp_workflows.expressions.v8_child",
                        str(self.timeout_ms), str(self.max_memory_mb), str(self.gc_every)])
        with self.lock:
            self._alive.add(child)
        return child

    def _preempt(self, child: _Child) -> None:
        with self.lock:
            self._base.preemptions += 1
        child.preempt()

    def _retire(self, child: _Child) -> None:
        self._fold(child, lost=False)
        _stop(child.proc)

    def _fold(self, child: _Child, lost: bool) -> None:
        """Move a departing child's counters into the base; a lost child (died in a call)
        counts as stopped by the memory limit.  Either way its V8 values are gone."""
        with self.lock:
            for key, value in child.stats.items():
                setattr(self._base, key, getattr(self._base, key) + value)
            child.stats = {}
            if lost:
                self._base.out_of_memory += 1
            self._base.contexts_created += 1  # what V8 cached is gone: a new epoch
            self._alive.discard(child)

    @property
    def stats(self) -> EngineStats:
        """Counters of every child, gone or alive, plus the pool's own (computed on read:
        the call path only stores what each child last reported)."""
        with self.lock:
            children = list(self._alive)
            total = EngineStats(**self._base.as_dict())
        for child in children:
            for key, value in child.stats.items():
                setattr(total, key, getattr(total, key) + value)
        return total


def _stop(proc: subprocess.Popen[bytes]) -> None:
    try:
        proc.kill()
        proc.wait(5)
    except Exception:
        pass
    for stream in (proc.stdin, proc.stdout):
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass
