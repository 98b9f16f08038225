"""Batches: many expressions or a whole computed-field chain in one V8 crossing.

A batch is a table of values (each sent once, however many expressions read it) plus
items that say which compiled function to call with which *argument sources*.  An
argument source is JSON the prelude resolves: a value index, a partial object of some
keys, the current value of a computed field, a path into one, or a list of sources.

The drivers here also own recovery: a timeout tells us (through the prelude's `reached`
record) which item was running, so finished work is kept and only the guilty item is
reported; out-of-memory kills the context, so the rest of the batch is re-run one item per
call until the guilty one is found.  Either way the next evaluation works.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from aromcp_workflows.expressions.errors import MISSING, ExpressionError, JsFailure
from aromcp_workflows.expressions.runtime import FunctionDef, Interrupted, Runtime

ValueSource = Any  # int | None | dict (see module docstring)


class ValueTable:
    """Collects the values a batch sends, deduplicated by key, and builds sources."""

    def __init__(self) -> None:
        self.values: list[Any] = []
        self._index: dict[Any, int] = {}
        self._uses: list[int] = []

    def value(self, key: Any, value: Any) -> ValueSource:
        """The source for `value` (None for undefined); the same key is sent once."""
        if value is MISSING:
            return None
        idx = self._index.get(key)
        if idx is None:
            idx = len(self.values)
            self._index[key] = idx
            self.values.append(value)
            self._uses.append(0)
        self._uses[idx] += 1
        return idx

    def fresh(self, value: Any) -> int:
        """Add a value that is never deduplicated (e.g. a computed field's current value)."""
        idx = len(self.values)
        self.values.append(None if value is MISSING else value)
        self._uses.append(2)
        return idx

    @staticmethod
    def obj(pairs: list[tuple[str, ValueSource]]) -> ValueSource:
        return {"o": [[k, s] for k, s in pairs]}

    @staticmethod
    def computed(name: str) -> ValueSource:
        return {"c": name}

    @staticmethod
    def path(base: ValueSource, steps: list[str | int]) -> ValueSource:
        return {"g": base, "p": [str(s) for s in steps]} if steps else base

    @staticmethod
    def array(sources: list[ValueSource]) -> ValueSource:
        return {"a": sources}

    @staticmethod
    def output() -> ValueSource:
        return {"x": 1}

    def multi(self) -> list[int]:
        return [i for i, n in enumerate(self._uses) if n > 1]


@dataclass(frozen=True)
class Call:
    """One function call of a batch: what to run, with which arguments, for whom."""

    fn: FunctionDef
    args: list[ValueSource]
    this: ValueSource = None
    origin: str = ""

    def error(self, kind: JsFailure, message: str) -> ExpressionError:
        return ExpressionError(self.fn.source, self.origin, message, kind)


def _limit_message(kind: str, rt: Runtime) -> str:
    if kind == "timeout":
        return f"stopped after {rt.timeout_ms} ms (the time limit per evaluation)"
    return f"stopped: exceeded the memory limit of {rt.max_memory_mb} MB"


def run_calls(rt: Runtime, calls: list[Call], table: ValueTable,
              max_chars: int) -> list[Any]:
    """Evaluate independent calls; return per call a value, MISSING, or ExpressionError.

    A call whose V8 child died without answering (`Interrupted.lost`) is run again alone on a
    fresh child before it is blamed: the child may have died of something not its doing
    (killed from outside, by an operator or the OOM killer), and a transform that really
    kills V8 does so twice.  A limit V8 itself reports is the call's own at once."""
    defs = _defs(c.fn for c in calls)
    items = [[c.fn.fn_id, c.args, c.this] for c in calls]
    raw: list[Any] = [None] * len(calls)
    start, step = 0, False
    while start < len(calls):
        stop = start + 1 if step else len(calls)
        meta = {"items": items[:stop], "multi": table.multi(), "start": start, "max": max_chars}
        try:
            parts = rt.call("run", defs, meta, table.values)
        except Interrupted as exc:
            if exc.kind == "timeout" and exc.reached is not None and \
                    exc.reached["i"] >= start:
                done, i = exc.reached["done"], exc.reached["i"]
                raw[start:start + len(done)] = done
                if i == exc.reached["first"]:
                    raw[i] = [2, "timeout", _limit_message("timeout", rt)]
                    start = i + 1
                else:
                    start = i
                continue
            if stop - start == 1 and (step or not exc.lost):  # alone, and V8 said so (or died twice)
                raw[start] = [2, exc.kind, _limit_message(exc.kind, rt)]
                start += 1
                step = False
            else:
                step = True
            continue
        raw[start:start + len(parts)] = parts
        start += len(parts)
    out: list[Any] = []
    for call, part in zip(calls, raw, strict=False):
        if part[0] == 0:
            out.append(part[1])
        elif part[0] == 1:
            out.append(MISSING)
        else:
            out.append(call.error(part[1], part[2]))
    return out


@dataclass
class ChainItem:
    """One computed field in a recompute chain (items are in topological order)."""

    name: str
    call: Call
    policy: Literal["propagate", "use_fallback", "ignore"] = "propagate"
    fallback: ValueSource = None
    validate: Call | None = None
    dependents: list[int] = field(default_factory=list)


@dataclass
class ChainOutcome:
    """What happened to one chain item.

    status: skipped (not downstream of a change), unchanged, changed, failed (propagate:
    the chain stopped here), not_run (after a failure).  `error` is set whenever the
    transform or its validation failed, whatever the policy did about it.
    """

    status: Literal["skipped", "unchanged", "changed", "failed", "not_run"]
    value: Any = MISSING
    error: ExpressionError | None = None
    duration_ms: float = 0.0


def run_chain(rt: Runtime, items: list[ChainItem], table: ValueTable,
              current: dict[str, Any], dirty: set[int], max_chars: int,
              keys: dict[str, str] | None = None, cached: set[str] | None = None,
              new_keys: dict[str, str] | None = None) -> list[ChainOutcome]:
    """Recompute a chain in topological order with cut-off, normally in one crossing.

    `current` holds the present value of every computed field the items read or
    produce; `dirty` the indices directly affected by the change.  An item runs only if
    dirty; a changed output makes its dependents dirty.

    Values stay in V8 between calls under cache keys: `keys[name]` is the key of the
    current value, `cached` the names whose value V8 should still hold (sent by key, not
    by value), `new_keys[name]` the key under which a changed output is kept.  A cache
    miss (context replaced, entry evicted) costs one more call with values inline.
    """
    keys, cached, new_keys = keys or {}, set(cached or ()), new_keys or {}
    calls = [it.call for it in items] + [it.validate for it in items if it.validate]
    defs = _defs(c.fn for c in calls)
    js_items = _js_items(items, keys, new_keys)
    current = dict(current)
    dirty = set(dirty)
    outcomes: list[ChainOutcome | None] = [None] * len(items)
    start, step, inject = 0, False, None
    while start < len(items):
        computed = [[name, None, keys[name]] if name in cached and name in keys
                    else [name, table.fresh(value), keys.get(name)]
                    for name, value in current.items()]
        meta = {"items": js_items, "multi": table.multi(), "start": start, "max": max_chars,
                "computed": computed, "dirty": sorted(dirty), "limit": 1 if step else 0,
                "inject": inject}
        injected_memory = inject is not None and inject[1] == "memory"
        inject = None
        try:
            parts = rt.call("chain", defs, meta, table.values)
            if isinstance(parts, dict):  # {"miss": key}: resend every value inline
                cached.clear()
                continue
        except Interrupted as exc:
            cached.clear()  # the context may have been replaced: what V8 held is gone
            start, step, inject = _resume_after(exc, rt, items, outcomes, current, dirty, start, step)
            continue
        start = _absorb(items, outcomes, current, dirty, start, parts)
        if injected_memory:
            step = False
        if any(o is not None and o.status == "failed" for o in outcomes):
            break
    return [o if o is not None else ChainOutcome("not_run") for o in outcomes]


def _resume_after(exc: Interrupted, rt: Runtime, items: list[ChainItem], outcomes: list[ChainOutcome | None],
                  current: dict[str, Any], dirty: set[int], start: int,
                  step: bool) -> tuple[int, bool, list[Any] | None]:
    """Where a chain run resumes after V8 was interrupted: (start, one item per call?, the
    error to inject there).

    A timeout says (through the prelude's `reached`) which item was running: the parts
    finished before it are kept, and when it was the first item of its call it alone used
    up the time limit and gets the error.  Out-of-memory says nothing: the run goes on one
    transform per call, and when such a call fails, the one that ran is the guilty one."""
    reached = exc.reached
    if exc.kind == "timeout" and reached is not None and reached["i"] >= start:
        _absorb(items, outcomes, current, dirty, start, reached["done"])
        i = reached["i"]
        return i, step, [i, "timeout", _limit_message("timeout", rt)] if i == reached["first"] else None
    if not step:
        return start, True, None
    guilty = min((d for d in dirty if d >= start), default=start)
    for k in range(start, guilty):
        outcomes[k] = ChainOutcome("skipped")
    return guilty, True, [guilty, exc.kind, _limit_message(exc.kind, rt)]


def _js_items(items: list[ChainItem], keys: dict[str, str], new_keys: dict[str, str]) -> list[dict[str, Any]]:
    """The chain's items as the prelude's `chain` reads them (short keys: sent every call)."""
    return [{
        "n": it.name, "f": it.call.fn.fn_id, "a": it.call.args, "t": it.call.this,
        "v": None if it.validate is None else [it.validate.fn.fn_id, it.validate.args,
                                               it.validate.this],
        "p": it.policy, "fb": it.fallback, "d": it.dependents,
        "ok": keys.get(it.name), "nk": new_keys.get(it.name),
    } for it in items]


def _absorb(items: list[ChainItem], outcomes: list[ChainOutcome | None],
            current: dict[str, Any], dirty: set[int], start: int, parts: list[Any]) -> int:
    """Record finished parts from index `start`; keep `current` and `dirty` in step."""
    for k, part in enumerate(parts):
        i = start + k
        it = items[i]
        status = part[0]
        if status == 3:
            outcomes[i] = ChainOutcome("skipped")
            continue
        if status == 2:
            outcomes[i] = ChainOutcome("failed", error=it.call.error(part[1], part[2]),
                                       duration_ms=part[3])
            continue
        err = None if part[2] is None else _item_error(it, part[2], part[3])
        if status == 1:
            value = part[1][0] if part[1] else MISSING
            current[it.name] = value
            dirty.update(it.dependents)
            outcomes[i] = ChainOutcome("changed", value, err, part[4])
        else:
            outcomes[i] = ChainOutcome("unchanged", MISSING, err, part[4])
    return start + len(parts)


def _item_error(item: ChainItem, kind: JsFailure, message: str) -> ExpressionError:
    if kind == "validation" and item.validate is not None:
        return ExpressionError(item.validate.fn.source, item.call.origin, message, kind)
    return item.call.error(kind, message)


def _defs(fns: Any) -> list[FunctionDef]:
    seen: dict[str, FunctionDef] = {}
    for fn in fns:
        seen.setdefault(fn.fn_id, fn)
    return list(seen.values())
