"""Checking workflow inputs at start: types, required values, defaults — all problems at once.

Inputs arrive as JSON from MCP clients and as `k=v` text from the CLI and slash
commands, so text is converted to the declared type where that is unambiguous
("3" → 3 for an integer, "true" → True for a boolean, JSON text for arrays/objects).
"""

from __future__ import annotations

import json
from typing import Any

from aromcp_workflows.definition import InputSpec, did_you_mean
from aromcp_workflows.errors import KindedError
from aromcp_workflows.safety import is_sensitive


class InputError(KindedError, ValueError):
    """Inputs that do not match the declaration; `problems` lists every one."""

    def __init__(self, workflow: str, problems: list[str]):
        self.workflow, self.problems = workflow, problems
        super().__init__(f"invalid inputs for {workflow}: " + "; ".join(problems))


def check_inputs(workflow: str, declared: dict[str, InputSpec], given: dict[str, Any]) -> dict[str, Any]:
    """The inputs a run sees: given values converted and checked, defaults filled in."""
    problems: list[str] = []
    values: dict[str, Any] = {}
    for name in given:
        if name not in declared:
            known = ", ".join(sorted(declared)) or "none"
            problems.append(f"unknown input {name!r}{did_you_mean(name, declared)} (declared: {known})")
    for name, spec in declared.items():
        if name in given and given[name] is not None:
            value, problem = convert(given[name], spec.type, secret=spec.secret or is_sensitive(name))
            if problem:
                problems.append(f"input {name!r} {problem}")
            values[name] = value
        elif spec.required and spec.default is None:
            problems.append(f"input {name!r} is required ({spec.type}"
                            + (f": {spec.description}" if spec.description else "") + ")")
        else:
            values[name] = spec.default
    if problems:
        raise InputError(workflow, problems)
    return values


def convert(value: Any, type_name: str, secret: bool = False) -> tuple[Any, str | None]:
    """(converted value, None) or (value, what is wrong); a secret's value is not echoed."""
    if isinstance(value, str) and type_name != "string":
        value = _from_text(value, type_name)
    checks = {
        "string": lambda v: isinstance(v, str),
        "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
        "array": lambda v: isinstance(v, list),
        "object": lambda v: isinstance(v, dict),
    }
    if type_name == "integer" and isinstance(value, float) and value.is_integer():
        value = int(value)
    if checks[type_name](value):
        return value, None
    shown = f"a {type(value).__name__} value" if secret else json.dumps(value)[:60]
    return value, f"must be {_article(type_name)} {type_name}, got {shown}"


def _from_text(text: str, type_name: str) -> Any:
    stripped = text.strip()
    if type_name == "boolean" and stripped.lower() in ("true", "false", "yes", "no", "1", "0"):
        return stripped.lower() in ("true", "yes", "1")
    if type_name in ("number", "integer", "array", "object"):
        try:
            return json.loads(stripped)
        except json.JSONDecodeError:
            return text
    return text


def _article(type_name: str) -> str:
    return "an" if type_name[0] in "aeiou" else "a"
