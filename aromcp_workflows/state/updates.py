"""Update operations (`set`, `append`, `increment`, `merge`, `delete`) applied as one batch.

A batch is applied to a draft of the writable tiers; any refused update raises StateError
before anything is committed, so a batch is all or nothing.  The result lists the paths
whose value really changed: an update that writes the same value changes nothing and
triggers no recompute.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from aromcp_workflows.expressions import MISSING
from aromcp_workflows.state.errors import StateError
from aromcp_workflows.state.paths import DELETE, FORBIDDEN_KEYS, Segment, format_path, parse_write_path, update_in

Operation = Literal["set", "append", "increment", "merge", "delete"]
OPERATIONS: tuple[str, ...] = ("set", "append", "increment", "merge", "delete")


@dataclass(frozen=True)
class Update:
    """One write: `path` (templates already rendered), `operation`, `value`."""

    path: str
    operation: Operation = "set"
    value: Any = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Update:
        """From the tool/YAML shape `{path, operation?, value?}`."""
        return cls(path=data["path"], operation=data.get("operation") or "set",
                   value=data.get("value"))


@dataclass
class UpdateResult:
    """What an applied batch did.

    `changed_paths`: canonical paths whose value changed, in update order.
    `computed_changed`: computed fields whose value changed, with the new value (None for
    undefined).  `recomputed`: fields whose transform ran.  `errors`: transform failures
    that `use_fallback`/`ignore` absorbed (`{field, kind, message, expression}`).
    `writes`: what changed, in order, as JSON-ready `[op, [tier, *segments], value?]` —
    `s` set the value there, `a` appended the value to the list there, `d` deleted it —
    for raw, state and computed alike (`replay_writes` applies them): the history keeps
    them, so the state after any step can be shown again.
    """

    changed_paths: list[str] = field(default_factory=list)
    computed_changed: dict[str, Any] = field(default_factory=dict)
    recomputed: list[str] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    writes: list[list[Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"changed_paths": self.changed_paths, "computed_changed": self.computed_changed,
                "recomputed": self.recomputed, "errors": self.errors}


def check_value_keys(value: Any, path: str) -> None:
    """Refuse values whose object keys include __proto__/constructor/prototype."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for k, v in node.items():
                if k in FORBIDDEN_KEYS:
                    raise StateError(f"refused update of {path!r}: the value contains the key "
                                     f"{k!r}, which is not allowed in state", path=path)
                if isinstance(v, (dict, list)):
                    stack.append(v)
        elif isinstance(node, list):
            stack.extend(v for v in node if isinstance(v, (dict, list)))


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _leaf(update: Update) -> Any:
    op, value, path = update.operation, update.value, update.path

    def set_(old: Any) -> Any:
        return value

    def append(old: Any) -> Any:
        if old is MISSING or old is None:
            return [value]
        if not isinstance(old, list):
            raise StateError(f"refused append to {path!r}: the current value is not a list "
                             f"({type(old).__name__}); use operation 'set' to replace it",
                             path=path)
        return [*old, value]

    def increment(old: Any) -> Any:
        step = 1 if value is None else value
        if not _is_number(step):
            raise StateError(f"refused increment of {path!r}: the increment {step!r} is not "
                             f"a number", path=path)
        if old is MISSING or old is None:
            old = 0
        if not _is_number(old):
            raise StateError(f"refused increment of {path!r}: the current value {old!r} is "
                             f"not a number", path=path)
        return old + step

    def merge(old: Any) -> Any:
        if not isinstance(value, dict):
            raise StateError(f"refused merge into {path!r}: the value must be an object",
                             path=path)
        if old is MISSING or old is None:
            return dict(value)
        if not isinstance(old, dict):
            raise StateError(f"refused merge into {path!r}: the current value is not an "
                             f"object", path=path)
        return {**old, **value}

    def delete(old: Any) -> Any:
        return DELETE

    return {"set": set_, "append": append, "increment": increment, "merge": merge,
            "delete": delete}[op]


@dataclass
class Applied:
    """What `apply_updates` did: the new tiers, the changed (tier, segments) in order,
    `kept[i]` — the length of the list change `i` appended one item to when it was an
    `append` to an existing top-level list, else None (a commit then stores the new item
    instead of the whole list) — and the writes (`UpdateResult.writes`)."""

    tiers: dict[str, dict[str, Any]]
    changed: list[tuple[str, list[Segment]]] = field(default_factory=list)
    kept: list[int | None] = field(default_factory=list)
    writes: list[list[Any]] = field(default_factory=list)


def apply_updates(tiers: Mapping[str, dict[str, Any]], updates: Sequence[Update]) -> Applied:
    """Apply a batch to copies of the tiers.

    Raises StateError (naming the update) and leaves `tiers` untouched on any refusal.
    """
    done = Applied(dict(tiers))
    draft, changed, kept = done.tiers, done.changed, done.kept
    for update in updates:
        if update.operation not in OPERATIONS:
            raise StateError(f"refused update of {update.path!r}: unknown operation "
                             f"{update.operation!r} (use one of {', '.join(OPERATIONS)})",
                             path=update.path)
        tier, segments = parse_write_path(update.path)
        if update.operation != "delete":
            check_value_keys(update.value, update.path)
        leaf = _leaf(update)
        seen: list[Any] = []

        def recording(old: Any, leaf: Any = leaf, seen: list[Any] = seen) -> Any:
            new = leaf(old)
            seen.append((old, new))
            return new

        new_root = update_in(draft[tier], segments, recording, update.path)
        old, new = seen[0]
        if (new is DELETE and old is MISSING) or (new is not DELETE and _same(old, new)):
            continue
        draft[tier] = new_root
        changed.append((tier, segments))
        appended = update.operation == "append" and len(segments) == 1 and isinstance(old, list)
        kept.append(len(old) if appended else None)
        done.writes.append(_write(update, [tier, *segments], old, new))
    return done


def _write(update: Update, path: list[Segment], old: Any, new: Any) -> list[Any]:
    """One entry of `UpdateResult.writes` (an append to a list keeps the item, not the list)."""
    if new is DELETE:
        return ["d", path]
    if update.operation == "append" and isinstance(old, list):
        return ["a", path, update.value]
    return ["s", path, new]


def replay_writes(tiers: dict[str, Any], writes: Sequence[Sequence[Any]]) -> dict[str, Any]:
    """`tiers` (`{raw, state, computed}`) with `writes` applied, by the very path rules
    updates follow; the containers on each path are copied, `tiers` itself is unchanged.
    Raises StateError when a write does not fit the value it is applied to."""
    tiers = dict(tiers)
    for op, path, *value in writes:
        tier, segments = str(path[0]), list(path[1:])
        if segments:
            tiers[tier] = update_in(tiers.get(tier) or {}, segments, _replayed(op, value),
                                    format_path(tier, segments))
    return tiers


def _replayed(op: str, value: list[Any]) -> Any:
    """The leaf function of one write of `UpdateResult.writes`."""
    if op == "d":
        return lambda old: DELETE
    if op == "a":
        return lambda old: [*(old if isinstance(old, list) else []), value[0]]
    return lambda old: value[0]


def _same(a: Any, b: Any) -> bool:
    if a is MISSING or b is MISSING:
        return a is b
    return type(a) is type(b) and a == b


def describe_changes(changed: list[tuple[str, list[Segment]]]) -> list[str]:
    out: list[str] = []
    for tier, segments in changed:
        text = format_path(tier, segments)
        if text not in out:
            out.append(text)
    return out
