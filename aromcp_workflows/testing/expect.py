"""A case's expectations against what its run did, path by path.

`status` equals; `error` is a part of the failure's message; `state` is a subset of the
final state (every key written must be there with that value; lists and scalars compare
whole, and `true` is not `1`); `messages` appear in order among the messages shown, others
may come between.  Without `status`, a case expects `completed` — or `failed` when it
expects an `error`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from aromcp_workflows.testing.spec import Expect

MISSING = object()


@dataclass(frozen=True)
class Mismatch:
    """One expectation not met: where (`state.attempts`), what was expected, what was found."""

    path: str
    expected: Any
    actual: Any
    note: str = ""


def expected_status(expect: Expect) -> str:
    return expect.status or ("failed" if expect.error is not None else "completed")


def compare(expect: Expect, status: str, error: str | None, state: dict[str, Any],
            messages: list[str]) -> list[Mismatch]:
    """Every expectation not met, in the order of the keys of `expect`."""
    found: list[Mismatch] = []
    wanted = expected_status(expect)
    if status != wanted:
        found.append(Mismatch("status", wanted, status))
    if expect.error is not None and expect.error not in (error or ""):
        found.append(Mismatch("error", expect.error, error, "expected as a part of the failure's message"))
    if expect.state is not None:
        found += list(_subset("state", expect.state, state))
    if expect.messages is not None:
        found += _in_order(expect.messages, messages)
    return found


def _subset(path: str, expected: Any, actual: Any) -> Iterator[Mismatch]:
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key, value in expected.items():
            where = f"{path}.{key}"
            if key not in actual:
                yield Mismatch(where, value, MISSING)
            else:
                yield from _subset(where, value, actual[key])
    elif not same(expected, actual):
        yield Mismatch(path, expected, actual)


def same(expected: Any, actual: Any) -> bool:
    """JSON equality: `1` is `1.0`, but `true` is not `1` (Python would say it is)."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(expected) is type(actual) and expected == actual
    if isinstance(expected, dict) and isinstance(actual, dict):
        return expected.keys() == actual.keys() and all(same(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(same(e, a) for e, a in zip(expected, actual, strict=True))
    return bool(expected == actual)


def _in_order(expected: list[str], shown: list[str]) -> list[Mismatch]:
    """The first expected message not shown after the ones before it (one mismatch)."""
    position = 0
    for index, message in enumerate(expected):
        try:
            position = shown.index(message, position) + 1
        except ValueError:
            earlier = message in shown[:position]
            note = "shown, but before the message expected ahead of it" if earlier else "never shown"
            return [Mismatch(f"messages[{index}]", message, shown, note)]
    return []
