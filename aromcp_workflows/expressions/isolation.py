"""V8 in a child process, so that nothing a transform does can take the server down.

Some allocations (`new Array(1e9).fill(0)`) are *fatal* in V8: the process aborts, no
exception is raised, and the heap cap cannot help because it is only checked between
allocations.  `ProcessV8Runtime` keeps the in-process runtime's interface (`call`,
`reset`, `close`, `stats`, limits) but runs it in `python -m
aromcp_workflows.expressions.v8_child`; when that child dies in a call, the call is
reported as stopped by the memory limit and the next call starts a fresh child.

Each request is one length-prefixed JSON message each way over the child's stdin and
stdout (the child's stderr is the server's, for V8's own fatal messages).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import weakref
from typing import Any, Literal

from .pipe import read_message, write_message
from .runtime import EngineStats, FunctionDef, Interrupted, RuntimeFailure

WATCHDOG_SLACK_S = 10.0  # on top of twice the timeout: a child that hangs is killed


class ChildDied(Exception):
    """The V8 child process exited (or stopped answering) during a call."""


class ProcessV8Runtime:
    def __init__(self, timeout_ms: int = 1000, max_memory_mb: int = 256, gc_every: int = 1000):
        self.timeout_ms = timeout_ms
        self.max_memory_mb = max_memory_mb
        self.gc_every = gc_every
        self.lock = threading.RLock()
        self.stats = EngineStats()
        self._base = EngineStats()  # counters of children that are gone
        self._proc: subprocess.Popen[bytes] | None = None

    # -- the runtime interface -----------------------------------------------------------
    def call(self, entry: Literal["run", "chain", "check"], defs: list[FunctionDef],
             meta: dict[str, Any], vals: list[Any]) -> Any:
        request = {"op": "call", "entry": entry, "meta": meta,
                   "defs": [[d.fn_id, list(d.params), d.source, d.mode] for d in defs]}
        body = json.dumps(vals, separators=(",", ":")).encode()
        with self.lock:
            try:
                answer, result = self._exchange(request, body)
            except ChildDied:
                self._child_died()
                raise Interrupted("memory", None) from None
            if "interrupted" in answer:
                raise Interrupted(answer["interrupted"], answer.get("progress"))
            if "failure" in answer:
                raise RuntimeFailure(answer["failure"])
            return json.loads(result)

    def reset(self) -> None:
        with self.lock:
            if self._proc is not None:
                try:
                    self._exchange({"op": "reset"})
                except ChildDied:
                    self._child_died()

    def close(self) -> None:
        with self.lock:
            proc, self._proc = self._proc, None
            if proc is not None:
                self._fold_stats()
                _stop(proc)

    # -- the child ---------------------------------------------------------------------------
    def _child(self) -> subprocess.Popen[bytes]:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "aromcp_workflows.expressions.v8_child",
                 str(self.timeout_ms), str(self.max_memory_mb), str(self.gc_every)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, close_fds=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"})
            weakref.finalize(self, _stop, self._proc)  # no child outlives its engine
            self._child_stats: dict[str, int] = {}
        return self._proc

    def _exchange(self, request: dict[str, Any], body: bytes = b"") -> tuple[dict[str, Any], bytes]:
        proc = self._child()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            write_message(proc.stdin, request, body)
            if not select.select([proc.stdout], [], [], 2 * self.timeout_ms / 1000 + WATCHDOG_SLACK_S)[0]:
                raise ChildDied  # silent far past its own time limit: treat as dead
            message = read_message(proc.stdout)
        except (OSError, ValueError):
            raise ChildDied from None
        if message is None:
            raise ChildDied
        answer, result = message
        self._child_stats = answer.pop("stats", self._child_stats)
        self._update_stats()
        return answer, result

    def _child_died(self) -> None:
        """Count the lost child's work, note a lost context, and let the next call respawn."""
        proc, self._proc = self._proc, None
        self._fold_stats()
        self._base.out_of_memory += 1
        self._base.contexts_created += 1  # the values cached in V8 are gone
        self._update_stats()
        if proc is not None:
            _stop(proc)

    def _fold_stats(self) -> None:
        for key, value in getattr(self, "_child_stats", {}).items():
            setattr(self._base, key, getattr(self._base, key) + value)
        self._child_stats = {}

    def _update_stats(self) -> None:
        child = getattr(self, "_child_stats", {})
        for key in EngineStats().as_dict():
            setattr(self.stats, key, getattr(self._base, key) + child.get(key, 0))


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
