"""No function or method in the package is longer than 60 lines, from `def` to its last line.

A function a reader cannot see whole on one screen hides its steps; splitting it into named
functions with docstrings that say why is how this codebase stays readable.  Read from the
source with `ast`, so nested functions and methods count on their own and decorators do not.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "aromcp_workflows"
LIMIT = 60
# Known offenders being split elsewhere, each with its length today.  An entry must still be
# too long (else it is stale and the test says to remove it), and may not grow.
KNOWN: dict[str, int] = {}


def _lengths(source: str) -> list[tuple[str, int, int]]:
    """(qualified name, first line, length) of every function and method in `source`."""
    found = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    found.append((name, child.lineno, (child.end_lineno or child.lineno) - child.lineno + 1))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def _too_long() -> dict[str, int]:
    """`path:qualname` → length of every function in the package over the limit."""
    over = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for name, _, length in _lengths(path.read_text(encoding="utf-8")):
            if length > LIMIT:
                over[f"{path.relative_to(PACKAGE).as_posix()}:{name}"] = length
    return over


def test_no_function_is_over_60_lines() -> None:
    over = {name: n for name, n in _too_long().items() if name not in KNOWN}
    assert not over, (
        f"functions over {LIMIT} lines (def to last line): "
        + ", ".join(f"{name} ({n})" for name, n in sorted(over.items()))
        + ". Split each into small functions whose docstrings say why."
    )


def test_known_offenders_are_still_offenders_and_do_not_grow() -> None:
    over = _too_long()
    for name, length in KNOWN.items():
        assert name in over, f"{name} is {LIMIT} lines or fewer now: remove it from KNOWN"
        assert over[name] <= length, f"{name} grew from {length} to {over[name]} lines: split it instead"


def test_the_count_runs_from_def_to_the_last_line() -> None:
    """The measure itself: decorators do not count, nested functions count on their own."""
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT - 1))
    source = f"@decorator\ndef fits():\n{body}\n\ndef over():\n{body}\n    y = 0\n\nclass C:\n    def m(self):\n" \
             f"        def inner():\n            return 1\n        return inner\n"
    lengths = {name: n for name, _, n in _lengths(source)}
    assert lengths == {"fits": LIMIT, "over": LIMIT + 1, "C.m": 4, "C.m.inner": 2}
