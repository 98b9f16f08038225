"""Regular expressions written by workflow authors (`user_input.validation.pattern`), run on RE2.

Python's `re` backtracks: `^(a+)+$` against forty a's and `!` runs for hours while holding
the GIL, which freezes the whole server.  RE2 matches in time linear in the input, so an
answer from the user can never stall anyone.  The price is RE2's syntax: no backreferences
and no lookaround; such a pattern is refused when the workflow is validated, with this
module's message, rather than failing when the user answers.  Validation and the
interpreter both go through here so they can never disagree.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

import re2

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # RE2 would print every refused pattern on stderr (the stdio channel's neighbour)


class PatternError(ValueError):
    """A pattern RE2 cannot run; the message says why and what to write instead."""


@lru_cache(maxsize=1024)
def compile_pattern(pattern: str) -> Any:
    """The compiled RE2 pattern (cached); PatternError when RE2 cannot run it."""
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        raise PatternError(_explain(pattern, exc)) from None


def _explain(pattern: str, exc: Exception) -> str:
    raw = exc.args[0] if exc.args else exc
    reason = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    try:
        re.compile(pattern)
    except re.error:
        return f"invalid regular expression: {reason}"
    return (f"the pattern uses what RE2 cannot run ({reason}); patterns run on RE2, which takes time linear "
            "in the answer but has no backreferences (\\1) and no lookaround ((?=…), (?!…), (?<=…)): "
            "rewrite the pattern without them")


def pattern_problem(pattern: str) -> str | None:
    """Why `pattern` cannot be used, or None."""
    try:
        compile_pattern(pattern)
    except PatternError as exc:
        return str(exc)
    return None


def full_match(pattern: str, text: str) -> bool:
    """Whether all of `text` matches `pattern` (linear time in len(text))."""
    return compile_pattern(pattern).fullmatch(text) is not None
