"""Every place of a workflow that holds JavaScript, with what is in scope there.

Validation asks two questions of each such place: does it parse (in V8, `js_syntax`),
and does it read names that exist where it runs (`references`)?  Both need the same
walk, so it lives here: each `Site` is one template string, bare condition, transform or
validate, with its data path (for the position) and the variables the interpreter adds
at that place (`item`, `index` and `loop` in loops; `item`, `index`, `task`, `context`,
the task's inputs by name and its `default_state` in sub-agent tasks and in the
`sub_agent_prompt_override` rendered for each of them; `result` in a step's `state_update.value`;
`error` in failure handlers and `error_state_update`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from aromcp_workflows.definition.yaml_source import NodePath

SiteKind = Literal["template", "expression", "transform", "validate"]
RESULT_STEPS = frozenset({"shell_command", "agent_shell_command", "mcp_call", "user_input",
                          "agent_prompt", "apply_hints"})
NOT_JS = frozenset({"response_schema", "id", "type", "description"})


@dataclass(frozen=True)
class Scope:
    """What the interpreter adds to the state view at one place."""

    variables: frozenset[str] = frozenset()
    task: str | None = None  # the sub-agent task this place belongs to
    task_inputs: frozenset[str] = frozenset()
    where: str = "outside any loop or task"  # for messages: "a while loop", ...
    tasks: Mapping[str, Scope] = field(default_factory=dict, compare=False)  # each task's own scope

    def plus(self, *names: str, **changes: Any) -> Scope:
        return replace(self, variables=self.variables | frozenset(names), **changes)


@dataclass(frozen=True)
class Site:
    """One piece of JavaScript: a `{{ }}` string, a bare condition or a transform."""

    path: NodePath
    kind: SiteKind
    source: str
    scope: Scope = field(default_factory=Scope)


def part_label(part: Any) -> str:
    """`template {{ files | default([]) }}`: how messages name one template expression."""
    filters = "".join(f" | {f.name}" + (f"({f.arg})" if f.arg is not None else "")
                      for f in part.filters)
    return f"template {{{{ {part.source.strip()}{filters} }}}}"


def sites(data: dict[str, Any]) -> Iterator[Site]:
    """Every site of a workflow, from its model dump (`by_alias=True`)."""
    tasks = data.get("sub_agent_tasks") or {}
    base = Scope()
    base = replace(base, tasks={name: _task_scope(name, task, base) for name, task in tasks.items()})
    yield from _steps(("steps",), data.get("steps") or [], base)
    handling = data.get("error_handling") or {}
    yield from _steps(("error_handling", "on_failure"), handling.get("on_failure") or [],
                      base.plus("error", where="error_handling.on_failure"))
    hook = data.get("on_high_context_usage") or {}
    yield from _steps(("on_high_context_usage", "steps"), hook.get("steps") or [], base)
    yield from _values(("default_state",), data.get("default_state") or {}, base)
    for name, task in tasks.items():
        yield from _task(("sub_agent_tasks", name), name, task, base)
    for name, spec in ((data.get("state_schema") or {}).get("computed") or {}).items():
        where = ("state_schema", "computed", name)
        yield Site((*where, "transform"), "transform", spec["transform"])
        if isinstance(spec.get("validate"), str):
            yield Site((*where, "validate"), "validate", spec["validate"])


def _task_scope(name: str, task: dict[str, Any], base: Scope) -> Scope:
    """What a task's steps read besides the state.  The seed's forms: a task's inputs are
    names in its steps (`{{ batch_id }}`), and `context` is what the sub-agent was given."""
    inputs, locals_ = task.get("inputs") or {}, task.get("default_state") or {}
    return base.plus("item", "index", "task", "context", *locals_, *inputs, task=name,
                     task_inputs=frozenset(inputs), where=f"sub-agent task {name!r}")


def _task(path: NodePath, name: str, task: dict[str, Any], base: Scope) -> Iterator[Site]:
    inputs = task.get("inputs") or {}
    locals_ = task.get("default_state") or {}
    outer = base.plus("item", "index", where=f"sub-agent task {name!r}")
    for key, spec in inputs.items():
        if isinstance(spec, dict) and "default" in spec:
            yield from _values((*path, "inputs", key, "default"), spec["default"], outer)
    yield from _values((*path, "default_state"), locals_, outer)
    inner = _task_scope(name, task, base)
    yield from _steps((*path, "steps"), task.get("steps") or [], inner)
    cleanup = (task.get("error_handling") or {}).get("cleanup_on_error") or []
    yield from _steps((*path, "error_handling", "cleanup_on_error"), cleanup,
                      inner.plus("error"))


def _steps(path: NodePath, steps: list[Any], scope: Scope) -> Iterator[Site]:
    for index, step in enumerate(steps):
        if isinstance(step, dict):
            yield from _step((*path, index), step, scope)


def _step(path: NodePath, step: dict[str, Any], scope: Scope) -> Iterator[Site]:
    kind = step.get("type")
    for key, value in step.items():
        where = (*path, key)
        if key in NOT_JS:
            continue
        if kind == "conditional" and key in ("then", "else"):
            yield from _steps(where, value or [], scope)
        elif kind == "while" and key == "body":
            yield from _steps(where, value or [], scope.plus("loop", where="a while loop"))
        elif kind == "foreach" and key == "steps":
            named = [str(step[k]) for k in ("variable_name", "index_name") if isinstance(step.get(k), str)]
            yield from _steps(where, value or [], scope.plus("item", "index", "loop", *named,
                                                             where="a foreach"))
        elif kind == "parallel_foreach" and key == "sub_agent_prompt_override":
            yield from _values(where, value, _override_scope(step, scope))
        elif key in ("condition", "when") and isinstance(value, str):
            # a while loop's own condition sees `loop` (the iteration it would start)
            seen = scope.plus("loop", where="a while loop") if kind == "while" and key == "condition" else scope
            yield Site(where, "template" if "{{" in value else "expression", value, seen)
        elif key in ("state_update", "error_state_update") and isinstance(value, dict):
            names = ("error",) if key == "error_state_update" else \
                ("result",) if kind in RESULT_STEPS else ()
            for sub, item in value.items():
                yield from _values((*where, sub), item, scope.plus(*names) if sub == "value" else scope)
        else:
            yield from _values(where, value, scope)


def _override_scope(step: dict[str, Any], scope: Scope) -> Scope:
    """`sub_agent_prompt_override` is rendered once per task, where the step runs, with the
    task's own names added (its item, index, task, context, inputs and local state)."""
    task = scope.tasks.get(str(step.get("sub_agent_task")))
    if task is None:  # an unknown task is reported on its own
        return scope
    return scope.plus(*task.variables, task=task.task, task_inputs=task.task_inputs,
                      where=f"sub_agent_prompt_override, rendered for each task of {task.task!r}")


def _values(path: NodePath, value: Any, scope: Scope) -> Iterator[Site]:
    if isinstance(value, str):
        if "{{" in value:
            yield Site(path, "template", value, scope)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _values((*path, key), item, scope)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _values((*path, index), item, scope)
