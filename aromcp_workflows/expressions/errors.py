"""Errors and sentinels shared by the expression engine and its users."""

from __future__ import annotations

from typing import Any, Literal

JsFailure = Literal["syntax", "runtime", "timeout", "memory", "validation", "shell"]


class _Missing:
    """JavaScript `undefined`: a name or key that has no value.

    Distinct from None (JSON/JS `null`).  It is falsy, prints as `MISSING` and is a
    singleton, so `value is MISSING` is the test.
    """

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "MISSING"

    def __reduce__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class ExpressionError(Exception):
    """An expression could not be evaluated.

    Says what (`expression`), where it came from (`origin`: a step id, a computed field,
    ...), what JavaScript said (`js_message`) and which kind of failure it was (`kind`:
    syntax | runtime | timeout | memory | validation | shell), so the user can fix the YAML.
    """

    def __init__(self, expression: str, origin: str, js_message: str, kind: JsFailure) -> None:
        self.expression = expression
        self.origin = origin
        self.js_message = js_message
        self.kind: JsFailure = kind
        shown = expression if len(expression) <= 300 else expression[:300] + "..."
        where = f" in {origin}" if origin else ""
        super().__init__(f"{_KIND_TEXT[kind]}{where}: {js_message} (expression: {shown.strip()})")

    def to_dict(self) -> dict[str, str]:
        """JSON-safe form for traces, tool results and history."""
        return {
            "kind": self.kind,
            "message": self.js_message,
            "expression": self.expression,
            "origin": self.origin,
        }


class UnclosedTemplate(ExpressionError):
    """A `{{` whose closing `}}` cannot be found."""


class UnknownFilter(ExpressionError):
    """A `| name` filter that does not exist; `name` and the `known` ones, for a suggestion."""

    def __init__(self, expression: str, name: str, known: list[str]) -> None:
        super().__init__(expression, "", f"unknown filter '{name}' (known: {', '.join(known)})", "syntax")
        self.name, self.known = name, known


_KIND_TEXT: dict[str, str] = {
    "syntax": "JavaScript syntax error",
    "runtime": "JavaScript error",
    "timeout": "JavaScript evaluation timed out",
    "memory": "JavaScript evaluation ran out of memory",
    "validation": "Computed value failed validation",
    "shell": "Shell command cannot be built",
}
