"""The V8 context: creation, limits, one locked crossing per call, and recovery.

Owns everything mini-racer specific so the rest of the package speaks in batches of
(function id, argument sources) and JSON.  `py_mini_racer` is imported lazily: the MCP
server must start fast and most processes never evaluate an expression before the first
tool call.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any, Literal, Protocol

from aromcp_workflows.errors import ErrorKind, KindedError
from aromcp_workflows.expressions.text import loads_well_formed

_PRELUDE: str | None = None
DRAIN_GRACE_S = 0.2  # promise jobs get the rest of the time limit, and at least this
PREEMPT_GONE_S = 1.0  # a preempted script must be gone within this, or V8 is abandoned


def _prelude() -> str:
    """The prelude applied to its lockdown, as one source taking the call token."""
    global _PRELUDE
    if _PRELUDE is None:
        files = resources.files(__package__)
        prelude = files.joinpath("prelude.js").read_text("utf-8").strip()
        lockdown = files.joinpath("lockdown.js").read_text("utf-8").strip()
        _PRELUDE = f"(token) => ({prelude})(token, {lockdown})"
    return _PRELUDE


@dataclass
class EngineStats:
    """Counters read by tests and benchmarks (`v8_calls` is the budgeted one)."""

    v8_calls: int = 0
    compiles: int = 0
    contexts_created: int = 0
    timeouts: int = 0
    out_of_memory: int = 0
    gc_requests: int = 0  # maintenance: not evaluation crossings
    preemptions: int = 0  # calls taken back for a waiting call and run again (pool.py)

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


class Interrupted(Exception):
    """V8 stopped a call: `kind` timeout (how far it got known) or memory (context replaced).
    `lost`: no answer came at all (the V8 child process died), so the cause may not be the
    call's own (see `batch.run_calls`)."""

    def __init__(self, kind: Literal["timeout", "memory"], reached: dict[str, Any] | None, lost: bool = False):
        super().__init__(kind)
        self.kind = kind
        self.reached = reached
        self.lost = lost


class Preempted(BaseException):
    """Raised in the V8 child when the parent takes its isolate back for a waiting call
    (see isolation.py); V8 terminates the script and the call is run again later.  A
    BaseException so that no `except Exception` on the way swallows it."""


class RuntimeFailure(Exception):
    """An error in our own JavaScript plumbing (never user code): a bug to report."""


class EngineUnavailable(KindedError):
    """No V8 process could be started (the machine is out of processes, memory or file
    descriptors, or the child died while starting): the server's trouble, not the
    workflow's, and passing.  The call that needed it changes nothing and may be sent again."""

    kind: ErrorKind = "unavailable"


class Runtime(Protocol):
    """What the batch drivers need of a V8 runtime, in-process or in child processes."""

    timeout_ms: int
    max_memory_mb: int

    @property
    def stats(self) -> EngineStats: ...

    def call(self, entry: Literal["run", "chain", "check"], defs: list[FunctionDef],
             meta: dict[str, Any], vals: list[Any]) -> Any: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class FunctionDef:
    fn_id: str
    params: tuple[str, ...]
    source: str
    mode: Literal["expr", "transform"]


# Words without which a source cannot start a promise job: async functions need the
# `async` keyword (which cannot be spelled with escapes), `import()` its keyword, and the
# global Promise is hidden (lockdown.js) unless a source names it.  Sources with none
# of them skip the drain below, so ordinary transforms pay nothing for it.
_DEFERRING_WORDS = ("async", "Promise", "import")


@lru_cache(maxsize=8192)
def may_defer(source: str) -> bool:
    """True if `source` could leave promise jobs (microtasks) behind when it returns."""
    return any(word in source for word in _DEFERRING_WORDS)


@dataclass
class V8Runtime:
    """One lazily created MiniRacer context guarded by one lock."""

    timeout_ms: int = 1000
    max_memory_mb: int = 256
    gc_every: int = 1000
    stats: EngineStats = field(default_factory=EngineStats)

    def __post_init__(self) -> None:
        self.lock = threading.RLock()
        self._mr: Any = None
        self._installed: set[str] = set()
        self._calls_since_gc = 0
        self._token = secrets.token_hex(16)
        self._abandoned: list[Any] = []
        self.poisoned = False  # a context was abandoned with JavaScript still running

    # -- context lifecycle -------------------------------------------------------------
    def _create(self) -> Any:
        from py_mini_racer import MiniRacer

        box: list[Any] = []
        errors: list[BaseException] = []

        def make() -> None:
            try:
                mr = MiniRacer()
                mr.set_hard_memory_limit(self.max_memory_mb * 1024 * 1024)
                result = mr.eval(f"({_prelude()})({json.dumps(self._token)})",
                                 timeout_sec=10)
                if result != "ok":
                    raise RuntimeFailure(f"prelude returned {result!r}")
                box.append(mr)
            except BaseException as exc:
                errors.append(exc)

        # A MiniRacer made inside a running asyncio loop binds to it and then refuses
        # timeout_sec; make it on a plain thread so timeouts always work.
        if _loop_running():
            t = threading.Thread(target=make, name="aromcp-v8-init")
            t.start()
            t.join()
        else:
            make()
        if errors:
            raise errors[0]
        self.stats.contexts_created += 1
        self._installed = set()
        return box[0]

    def _context(self) -> Any:
        if self._mr is None:
            self._mr = self._create()
        return self._mr

    def reset(self) -> None:
        """Drop the context (after out-of-memory, or when asked); the next call makes one."""
        with self.lock:
            mr, self._mr = self._mr, None
            self._installed = set()
            if mr is not None:
                try:
                    mr.close()
                except Exception:
                    pass

    def close(self) -> None:
        self.reset()

    # -- calls -------------------------------------------------------------------------
    def call(self, entry: Literal["run", "chain", "check"], defs: list[FunctionDef],
             meta: dict[str, Any], vals: list[Any]) -> Any:
        """One crossing: install missing functions, run `__aro.<entry>`, parse the JSON.

        Raises Interrupted on timeout (with how far the batch got) or out-of-memory (after
        replacing the context), RuntimeFailure for plumbing errors.
        """
        text = self.call_text(entry, defs, meta, json.dumps(vals, separators=(",", ":")))
        result: Any = loads_well_formed(text)
        return result

    def call_text(self, entry: Literal["run", "chain", "check"], defs: list[FunctionDef],
                  meta: dict[str, Any], vals_json: str) -> str:
        """`call` with the values as JSON text in and the result as JSON text out, so a
        caller that only forwards them (the V8 child process) never decodes them."""
        with self.lock:
            mr = self._context()
            pieces = []
            new_ids = []
            for d in defs:
                if d.fn_id in self._installed:
                    continue
                pieces.append(f"__aro.def({json.dumps(self._token)},{json.dumps(d.fn_id)},{json.dumps(list(d.params))},{json.dumps(d.source)},{json.dumps(d.mode)});")
                new_ids.append(d.fn_id)
            pieces.append(f"__aro.{entry}({json.dumps(self._token)},{json.dumps(meta)},{_embed(vals_json)})")
            source = "".join(pieces)
            self.stats.v8_calls += 1
            self.stats.compiles += len(new_ids)
            text = self._eval(mr, source, new_ids, any(may_defer(d.source) for d in defs))
            self._installed.update(new_ids)
            self._calls_since_gc += 1
            if self._calls_since_gc >= self.gc_every:
                # V8 collects lazily; every call leaves a compiled script and its values
                # behind.  A periodic full GC keeps memory flat across long runs.
                self._calls_since_gc = 0
                self.stats.gc_requests += 1
                mr.low_memory_notification()
        if not isinstance(text, str):
            raise RuntimeFailure(f"V8 returned {type(text).__name__}, expected JSON text")
        return text

    def _eval(self, mr: Any, source: str, new_ids: list[str], deferring: bool) -> Any:
        """Run one crossing's source within the limits, its promise jobs included."""
        from py_mini_racer import _exc

        started = time.monotonic()
        try:
            text = mr.eval(source, timeout_sec=self.timeout_ms / 1000)
        except _exc.JSTimeoutException:
            self.stats.timeouts += 1
            self._installed.update(new_ids)  # defs run before user code
            self._drain_jobs(mr, started, deferring)
            raise Interrupted("timeout", self._reached(mr)) from None
        except _exc.JSOOMException:
            self.stats.out_of_memory += 1
            self.reset()
            raise Interrupted("memory", None) from None
        except _exc.MiniRacerBaseException as exc:
            if _memory_exhausted(mr):
                self.stats.out_of_memory += 1
                self.reset()
                raise Interrupted("memory", None) from None
            self._drain_jobs(mr, started, deferring)
            raise RuntimeFailure(f"V8 call failed: {exc}") from exc
        except BaseException:  # Preempted (see v8_child.py): V8 terminated the script
            # Make sure V8 is idle before the next call comes: the signal may have
            # landed before mini-racer could cancel the script.
            try:
                self._drain_jobs(mr, started, True, PREEMPT_GONE_S)
            except Interrupted:
                pass  # V8 abandoned (`poisoned`): the child exits after answering
            raise
        self._drain_jobs(mr, started, deferring)
        return text

    def _drain_jobs(self, mr: Any, started: float, deferring: bool, budget_s: float | None = None) -> None:
        """Wait, inside the call's time limit, for the promise jobs the call left behind.

        mini-racer runs promise jobs after an evaluation has answered, where its timeout
        no longer applies: a job that loops would hold V8 forever and the next caller
        would pay.  An evaluation queued behind them finishes only once they are done,
        so one is run as a fence.  If the jobs outlast the limit, nothing can stop them
        in this process: the context is abandoned (`poisoned`: the V8 child process then
        exits) and the call is reported as the timeout it is.  A preemption request
        arriving meanwhile is honoured once the jobs are done.
        """
        if not deferring or self._mr is not mr:
            return
        done = threading.Event()

        def fence() -> None:
            try:
                mr.eval("0")
            except Exception:
                pass
            finally:
                done.set()

        threading.Thread(target=fence, name="aromcp-v8-drain", daemon=True).start()
        if budget_s is None:
            deadline = max(started + self.timeout_ms / 1000, time.monotonic()) + DRAIN_GRACE_S
        else:
            deadline = time.monotonic() + budget_s
        preempted: BaseException | None = None
        while True:
            try:
                if done.wait(max(deadline - time.monotonic(), 0.0)):
                    break
            except Preempted as exc:
                preempted = exc
                continue
            self.stats.timeouts += 1
            self._abandon()
            raise Interrupted("timeout", None)
        if preempted is not None:
            raise preempted

    def _abandon(self) -> None:
        """Give up a context that is still running JavaScript nobody can stop.  It is kept
        referenced (closing it would wait for the loop) and never used again."""
        self._abandoned.append(self._mr)
        self._mr = None
        self._installed = set()
        self.poisoned = True

    def _reached(self, mr: Any) -> dict[str, Any] | None:
        self.stats.v8_calls += 1
        try:
            text = mr.eval(f"__aro.reached({json.dumps(self._token)})",
                           timeout_sec=max(self.timeout_ms / 1000, 1))
            reached: dict[str, Any] = json.loads(text)
            return reached
        except Exception:
            self.reset()
            return None


def _embed(text: str) -> str:
    """Values (JSON text) as JS source: a literal (fastest), or JSON.parse when a key is
    __proto__.

    In a JS object literal `"__proto__": x` sets the prototype instead of making a key;
    JSON.parse makes an ordinary own property, which is what the data means.
    """
    if "__proto__" in text:
        return f"JSON.parse({json.dumps(text)})"
    return text


def _memory_exhausted(mr: Any) -> bool:
    try:
        return bool(mr.was_hard_memory_limit_reached())
    except Exception:
        return True


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
