"""State paths: parsing `raw.a.b`, `raw.list[3]`, `state.x["k"]`, and reading/writing them.

Writes are copy-on-write: only the containers along the path are copied, so a batch of
updates can be applied to a draft and dropped on error (atomic batches) and old values
held by traces or callers never change under them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from aromcp_workflows.expressions import MISSING
from aromcp_workflows.state.errors import StateError

Segment = str | int
TIERS = ("raw", "state", "computed", "inputs")
WRITABLE_TIERS = ("raw", "state")
FORBIDDEN_KEYS = frozenset({"__proto__", "constructor", "prototype"})
DELETE: Any = object()  # returned by a leaf function to delete the leaf
MAX_DEPTH = 64  # names and indexes in one path (deeper ones overran Python's recursion limit)

_TOKEN = re.compile(r"""\.([^.\[\]\s]+)|\[(\d+)\]|\["([^"\\]*)"\]|\['([^'\\]*)'\]""")
_HEAD = re.compile(r"[^.\[\]\s]+")


def parse_path(path: str) -> list[Segment]:
    """Segments of a path; integer segments are list indices.  Raises StateError."""
    if not isinstance(path, str):
        raise StateError(f"invalid state path {path!r}: empty", path=str(path))
    return list(_segments(path))  # a copy: callers may extend it


@lru_cache(maxsize=4096)
def _segments(path: str) -> tuple[Segment, ...]:
    """The parse of one path text (a loop writes the same few paths on every iteration)."""
    if not path.strip():
        raise StateError(f"invalid state path {path!r}: empty", path=str(path))
    text = path.strip()
    head = _HEAD.match(text)
    if head is None:
        raise StateError(f"invalid state path {path!r}: must start with a name, e.g. raw.x",
                         path=path)
    segments: list[Segment] = [head.group(0)]
    pos = head.end()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise StateError(
                f"invalid state path {path!r} at character {pos + 1}: use dotted names, "
                f"[index] or [\"key\"], e.g. raw.list[3].name", path=path)
        if m.group(2) is not None:
            segments.append(int(m.group(2)))
        else:
            segments.append(next(g for g in (m.group(1), m.group(3), m.group(4)) if g is not None))
        pos = m.end()
        if len(segments) > MAX_DEPTH:
            raise StateError(f"refused state path {text[:80]!r}…: deeper than {MAX_DEPTH} names and indexes, "
                             "more than any state holds; nest the value instead", path=text[:200])
    for seg in segments:
        if isinstance(seg, str) and seg in FORBIDDEN_KEYS:
            raise StateError(f"refused state path {path!r}: the key {seg!r} is not allowed "
                             f"(it would reach JavaScript object prototypes)", path=path)
    return tuple(segments)


def parse_write_path(path: str) -> tuple[str, list[Segment]]:
    """Tier and segments of a path an update may write; refuses read-only tiers."""
    segments = parse_path(path)
    tier = segments[0]
    if tier in ("computed", "inputs"):
        raise StateError(f"refused update of {path!r}: {tier}.* is read-only "
                         f"(computed fields are derived; inputs are fixed at start); "
                         f"write raw.* or state.* instead", path=path)
    if tier not in WRITABLE_TIERS:
        raise StateError(f"refused update of {path!r}: unknown tier {tier!r}; paths start "
                         f"with raw. or state. (for example raw.{path})", path=path)
    if len(segments) < 2:
        raise StateError(f"refused update of {path!r}: name a field, e.g. {tier}.x",
                         path=path)
    return str(tier), segments[1:]


def format_path(tier: str, segments: list[Segment]) -> str:
    """Canonical text of a path (`raw.a[3].b`)."""
    out = [tier]
    for seg in segments:
        if isinstance(seg, int):
            out.append(f"[{seg}]")
        elif _HEAD.fullmatch(seg):
            out.append("." + seg)
        else:
            out.append(f'["{seg}"]')
    return "".join(out)


def get_in(value: Any, segments: list[Segment]) -> Any:
    """Value at `segments` under `value`, or MISSING (lists also accept "3" keys)."""
    for seg in segments:
        if isinstance(value, dict):
            value = value.get(str(seg), MISSING) if isinstance(seg, int) else value.get(
                seg, MISSING)
        elif isinstance(value, list):
            idx = seg if isinstance(seg, int) else (int(seg) if seg.isdigit() else None)
            if idx is None:
                if seg == "length":
                    value = len(value)
                    continue
                return MISSING
            if idx >= len(value):
                return MISSING
            value = value[idx]
        else:
            return MISSING
        if value is MISSING:
            return MISSING
    return value


def update_in(root: dict[str, Any], segments: list[Segment], leaf: Callable[[Any], Any],
              path: str) -> dict[str, Any]:
    """A copy of `root` with the value at `segments` replaced by `leaf(old)`.

    Missing intermediate objects are created; `leaf` returning DELETE removes the key.
    Only containers on the path are copied.
    """
    def walk(node: Any, i: int) -> Any:
        seg = segments[i]
        last = i == len(segments) - 1
        if isinstance(node, list):
            if not isinstance(seg, int):
                raise StateError(f"refused update of {path!r}: {_where(segments, i)} is a "
                                 f"list, so the next segment must be an [index]", path=path)
            if seg > len(node) or (seg == len(node) and not last):
                raise StateError(f"refused update of {path!r}: index {seg} is out of range "
                                 f"(the list has {len(node)} items)", path=path)
            old = node[seg] if seg < len(node) else MISSING
            new = leaf(old) if last else walk(old, i + 1)
            items = list(node)
            if new is DELETE:
                if seg < len(items):
                    del items[seg]
            elif seg == len(items):
                items.append(new)
            else:
                items[seg] = new
            return items
        if node is MISSING or node is None:
            node = {}
        if not isinstance(node, dict):
            raise StateError(f"refused update of {path!r}: {_where(segments, i)} is a "
                             f"{_js_type(node)}, not an object", path=path)
        key = str(seg)
        old = node.get(key, MISSING)
        new = leaf(old) if last else walk(old, i + 1)
        copy = dict(node)
        if new is DELETE:
            copy.pop(key, None)
        else:
            copy[key] = new
        return copy

    result: dict[str, Any] = walk(root, 0)
    return result


def _where(segments: list[Segment], i: int) -> str:
    return "the value at " + (format_path("", segments[:i]).lstrip(".") or "the tier root")


def _js_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    return "object" if isinstance(value, dict) else type(value).__name__


def overlaps(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """True when one path is a prefix of the other (a change to one affects the other)."""
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def key_tuple(tier: str, segments: list[Segment]) -> tuple[str, ...]:
    return (tier, *(str(s) for s in segments))
