"""`while` loops that cannot end, where that is decidable from the file alone.

A loop whose condition is a truthy literal (`true`, `"{{ 1 }}"`) or reads nothing but
`inputs` (which never change) keeps running until its limit unless its body can leave
it: a `break` of this loop or an `exit`.  When reaching that limit fails the workflow
(the implicit limit, or `on_max_iterations: fail`), such a loop is always a mistake.  A
`max_iterations` the author wrote is a normal end, so `while: true` with
`max_iterations: 4` is the "repeat 4 times" idiom, and valid.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from aromcp_workflows.definition.steps import BreakStep, ExitStep, WhileStep, child_step_lists
from aromcp_workflows.definition.yaml_source import NodePath


def endless_loops(steps: list[Any], prefix: NodePath) -> Iterator[tuple[NodePath, str]]:
    """(path of the condition, message) for each `while` under `steps` that cannot end."""
    for index, step in enumerate(steps):
        path = (*prefix, index)
        if isinstance(step, WhileStep):
            why = _never_changes(step.condition)
            if why and step.at_limit == "fail" and not _can_leave(step.body, depth=0):
                yield ((*path, "condition"), _endless(step, why))
        for key, children in child_step_lists(step):
            yield from endless_loops(children, (*path, key))


def _endless(step: WhileStep, why: str) -> str:
    if step.max_iterations is None:
        stops = (f"so it stops only at the default limit of {step.limit} iterations, which fails the "
                 "workflow; add a conditional break, or a condition on state the body changes (to "
                 "repeat the body a fixed number of times, write max_iterations: N: reaching it ends "
                 "the loop and the workflow goes on)")
    else:
        stops = (f"so it stops only at max_iterations ({step.limit}), which with on_max_iterations: fail "
                 "fails the workflow; add a conditional break, a condition on state the body changes, "
                 "or drop on_max_iterations: fail to repeat the body max_iterations times")
    return f"while loop never ends: its condition {why} and its body has no break or exit, {stops}"


def _never_changes(condition: Any) -> str | None:
    """Why the condition is true on every check, or None when it may change."""
    from aromcp_workflows.expressions import ExpressionError, classify, js_truthy, parse_template, reads_of

    if isinstance(condition, bool):
        return "is always true" if condition else None
    source = condition
    if "{{" in condition:
        try:
            template = parse_template(condition)
        except ExpressionError:
            return None
        if not template.whole:
            return "is always true" if condition.strip() else None  # text is truthy
        source = template.expressions[0].source
    try:
        kind, value = classify(source)
        if kind == "literal":
            return f"{condition!r} is always true" if js_truthy(value) else None
        names = reads_of(source).names
    except ExpressionError:
        return None
    if names and names <= {"inputs"}:
        return f"{condition!r} reads only inputs, which never change while it runs,"
    return None


def _can_leave(steps: list[Any], depth: int) -> bool:
    """A `break` of the loop at `depth` 0, or an `exit` anywhere, can be reached."""
    for step in steps:
        if isinstance(step, ExitStep) or (isinstance(step, BreakStep) and depth == 0):
            return True
        inner = depth + 1 if step.type in ("while", "foreach") else depth
        if any(_can_leave(children, inner) for _, children in child_step_lists(step)):
            return True
    return False
