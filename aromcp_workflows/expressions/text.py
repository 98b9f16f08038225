"""Text that can be stored: no half of a UTF-16 surrogate pair.

JavaScript strings are UTF-16 code units, so a transform can cut a character in two
(`'caf😀'.slice(0, 4)`), and JSON can spell half of one (`"\ud800"`). Python keeps such a
half as a lone surrogate code point, which no UTF-8 encoder accepts: the commit that
stored it failed, and with it the instance. A value V8 computed is made well formed as
JavaScript's own `toWellFormed()` does (each half becomes U+FFFD); a value given from
outside is refused with a clear error instead (`lone_surrogate_in`).
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar, cast

T = TypeVar("T")

_HALF = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def well_formed(value: T) -> T:
    """`value` with every lone surrogate in its strings (keys included) replaced by U+FFFD."""
    if isinstance(value, str):
        return value if value.isascii() else cast(T, _HALF.sub(REPLACEMENT, value))
    if isinstance(value, list):
        return cast(T, [well_formed(item) for item in value])
    if isinstance(value, dict):
        return cast(T, {well_formed(key): well_formed(item) for key, item in value.items()})
    return value


def loads_well_formed(text: str) -> Any:
    """JSON from V8, well formed: `JSON.stringify` writes a lone surrogate as a `\\udXXX`
    escape, so text without one (nearly all) is returned as parsed, unwalked."""
    value = json.loads(text)
    return well_formed(value) if "\\ud" in text else value


def lone_surrogate_in(value: object) -> str | None:
    """Where in `value` a string holds half of a surrogate pair (a path such as
    `updates[0].value`), or None when all its text is well formed.  The path is built only
    for a value that has one: this runs on every tool call's arguments."""
    found = _half_at(value)
    return None if found is None else ("".join(reversed(found)).lstrip(".") or "the value")


def not_text(value: object) -> str | None:
    """Why a value given from outside cannot be kept (half of a surrogate pair, and where),
    in the words every surface says it with; None when all its text is well formed."""
    half = lone_surrogate_in(value)
    return None if half is None else (f"{half} holds half of a UTF-16 surrogate pair (a lone \\udXXX escape, or "
                                      "bytes that are not UTF-8), which is not text and cannot be stored")


def _half_at(value: object) -> list[str] | None:
    """The path to the first half found, innermost piece first; None when there is none."""
    if isinstance(value, str):  # `isascii` reads a flag of the string: most text is never scanned
        return [] if not value.isascii() and _HALF.search(value) else None
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _half_at(item)
            if found is not None:
                return [*found, f"[{index}]"]
    elif isinstance(value, dict):
        for key, item in value.items():
            found = [] if isinstance(key, str) and not key.isascii() and _HALF.search(key) else _half_at(item)
            if found is not None:
                return [*found, f".{key}"]
    return None
