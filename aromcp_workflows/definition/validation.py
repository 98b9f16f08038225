"""Semantic validation: what a schema cannot see, reported all at once with positions.

Runs after the models accepted a file: duplicate step ids, `break` outside a loop,
unknown sub-agent tasks, state paths that name no writable tier, computed-field cycles,
unbalanced template braces, tier collisions (warnings) and the like.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable

from aromcp_workflows.definition.errors import Problem, closest_names, did_you_mean
from aromcp_workflows.definition.loader import LoadedWorkflow, WorkflowBundle, _walk_steps
from aromcp_workflows.definition.steps import (
    BreakStep,
    ContinueStep,
    ForeachStep,
    ParallelForeachStep,
    UserInputStep,
    WhileStep,
    child_step_lists,
)
from aromcp_workflows.definition.workflow import WorkflowDefinition
from aromcp_workflows.definition.yaml_source import Path

TIERS = ("raw", "state", "computed", "inputs")
WRITABLE_TIERS = ("raw", "state")
IDENTIFIER = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")


def validate_bundle(bundle: WorkflowBundle) -> list[Problem]:
    problems: list[Problem] = []
    for loaded in bundle.workflows.values():
        problems.extend(validate_workflow(loaded))
    return problems


def validate_workflow(loaded: LoadedWorkflow) -> list[Problem]:
    """Every semantic problem of one workflow (errors and warnings), in file order."""
    checker = _Checker(loaded)
    checker.run()
    return sorted(checker.problems, key=lambda p: (p.file or "", p.line or 0, p.column or 0))


class _Checker:
    def __init__(self, loaded: LoadedWorkflow):
        self.loaded = loaded
        self.definition: WorkflowDefinition = loaded.definition
        self.problems: list[Problem] = []

    def error(self, path: Path, message: str) -> None:
        self.problems.append(self.loaded.positions.problem(path, message))

    def warn(self, path: Path, message: str) -> None:
        self.problems.append(self.loaded.positions.problem(path, message, "warning"))

    def run(self) -> None:
        definition = self.definition
        self.check_name_matches_file()
        self.check_program(("steps",), definition.steps, ("error_handling", "on_failure"),
                           definition.error_handling.on_failure)
        for name, task in definition.sub_agent_tasks.items():
            base = ("sub_agent_tasks", name)
            self.check_program((*base, "steps"), task.steps, (*base, "error_handling", "cleanup_on_error"),
                               task.error_handling.cleanup_on_error)
        self.check_unused_tasks()
        self.check_computed_fields()
        self.check_collisions()
        self.check_templates((), self.loaded_data())

    # -- steps -----------------------------------------------------------------
    def check_program(self, prefix: Path, steps: list[Any], handler_prefix: Path, handlers: list[Any]) -> None:
        seen: dict[str, Path] = {}
        for root, items in ((prefix, steps), (handler_prefix, handlers)):
            self.check_loop_nesting(root, items, in_loop=False)
            for path, step in _walk_steps(root, items):
                self.check_step(path, step)
                if step.id is None:
                    continue
                if step.id in seen:
                    self.error((*path, "id"), f"duplicate step id {step.id!r} (also used at "
                               f"{_line_of(self.loaded, seen[step.id])}); step ids must be unique")
                else:
                    seen[step.id] = path

    def check_loop_nesting(self, prefix: Path, steps: list[Any], in_loop: bool) -> None:
        for index, step in enumerate(steps):
            path = (*prefix, index)
            if isinstance(step, (BreakStep, ContinueStep)) and not in_loop:
                self.error((*path, "type"), f"'{step.type}' outside a loop; it may only appear "
                           "inside the body of a while or foreach")
            inner = in_loop or isinstance(step, (WhileStep, ForeachStep))
            for key, children in child_step_lists(step):
                self.check_loop_nesting((*path, key), children, inner)

    def check_step(self, path: Path, step: Any) -> None:
        if step.id is not None and not re.fullmatch(r"[A-Za-z0-9_\-]+", step.id):
            self.error((*path, "id"), f"step id {step.id!r} may use only letters, digits, '-' and '_'")
        for key in ("state_update", "error_state_update"):
            spec = getattr(step, key, None)
            if spec is not None:
                self.check_writable_path((*path, key, "path"), spec.path)
        if step.type == "state_update":
            for index, update in enumerate(step.as_updates()):
                where = (*path, "updates", index, "path") if step.updates else (*path, "path")
                self.check_writable_path(where, update.path)
        if isinstance(step, ParallelForeachStep):
            tasks = self.definition.sub_agent_tasks
            if step.sub_agent_task not in tasks:
                self.error((*path, "sub_agent_task"), f"sub_agent_task {step.sub_agent_task!r} is not "
                           f"defined in sub_agent_tasks{did_you_mean(step.sub_agent_task, tasks)}")
            if step.on_sub_agent_error.error_state_path:
                self.check_writable_path((*path, "on_sub_agent_error", "error_state_path"),
                                         step.on_sub_agent_error.error_state_path)
        if isinstance(step, UserInputStep) and step.validation and step.validation.pattern:
            try:
                re.compile(step.validation.pattern)
            except re.error as exc:
                self.error((*path, "validation", "pattern"), f"invalid regular expression: {exc}")

    def check_writable_path(self, path: Path, state_path: str) -> None:
        tier = state_path.split(".", 1)[0].split("[", 1)[0]
        if tier in WRITABLE_TIERS and len(state_path) > len(tier) + 1:
            return
        if tier in ("computed", "inputs"):
            why = ("computed fields are derived from their 'from' paths" if tier == "computed"
                   else "inputs are fixed when the workflow starts")
            self.error(path, f"cannot write {state_path!r}: {why}; write to raw.* or state.* "
                       "instead")
        else:
            self.error(path, f"state path {state_path!r} must start with 'raw.' or 'state.' "
                       f"(for example raw.{state_path or 'result'})")

    def check_unused_tasks(self) -> None:
        tasks = self.definition.sub_agent_tasks
        used = {step.sub_agent_task for _, step in _all_steps(self.definition)
                if isinstance(step, ParallelForeachStep)}
        for name in list(used - set(tasks)):  # a misspelt reference is already an error
            used.update(closest for closest in closest_names(name, tasks, 1)
                        if did_you_mean(name, [closest]))
        for name in tasks:
            if name not in used:
                self.warn(("sub_agent_tasks", name), f"sub-agent task {name!r} is never used by a parallel_foreach")

    def check_name_matches_file(self) -> None:
        stem = self.loaded.file.rsplit("/", 1)[-1].removesuffix(".yaml").removesuffix(".yml")
        if self.loaded.source in ("project", "global", "builtin") and stem != self.definition.name:
            self.warn(("name",), f"workflow name {self.definition.name!r} differs from its file name "
                      f"{stem!r}; it is found by the file name")

    # -- state -----------------------------------------------------------------
    def check_computed_fields(self) -> None:
        computed = self.definition.state_schema.computed
        graph: dict[str, list[str]] = {}
        for name, spec in computed.items():
            base = ("state_schema", "computed", name)
            deps: list[str] = []
            for index, source in enumerate(spec.sources):
                where = (*base, "from", index) if isinstance(spec.from_, list) else (*base, "from")
                tier, _, rest = source.partition(".")
                if tier not in TIERS or not rest:
                    self.error(where, f"computed field {name!r} reads {source!r}, which names no "
                               "state tier; start it with raw., state., computed. or inputs.")
                elif tier == "computed":
                    field = re.split(r"[.\[]", rest, maxsplit=1)[0]
                    if field not in computed:
                        self.error(where, f"computed field {name!r} reads unknown computed field "
                                   f"{field!r}{did_you_mean(field, computed)}")
                    else:
                        deps.append(field)
            deps.extend(n for n in transform_reads(spec.transform) if n in computed and n != name)
            graph[name] = deps
        for cycle in _cycles(graph):
            self.error(("state_schema", "computed", cycle[0]),
                       "circular computed fields: " + " → ".join(cycle))

    def check_collisions(self) -> None:
        schema, defaults = self.definition.state_schema, self.definition.default_state
        tiers = {
            "state": set(schema.state) | set(defaults.state),
            "raw": set(schema.raw) | set(defaults.raw),
            "computed": set(schema.computed),
        }
        order = ["state", "raw", "computed"]
        for low_index, low in enumerate(order):
            for high in order[low_index + 1:]:
                for name in sorted(tiers[low] & tiers[high]):
                    where = ("state_schema", high, name) if high != "raw" or name in schema.raw else ("default_state", "raw", name)
                    self.warn(where, f"{high}.{name} hides {low}.{name} in the flattened view "
                              "({{ " + name + " }} reads the " + high + " value); rename one, "
                              f"or read {low}.{name} explicitly")

    # -- templates ----------------------------------------------------------------
    def loaded_data(self) -> Any:
        return self.definition.model_dump(by_alias=True, exclude_defaults=True)

    def check_templates(self, path: Path, node: Any) -> None:
        if isinstance(node, str):
            problem = unbalanced_braces(node)
            if problem:
                self.error(_data_path(path), problem)
        elif isinstance(node, dict):
            for key, value in node.items():
                self.check_templates((*path, key), value)
        elif isinstance(node, list):
            for index, value in enumerate(node):
                self.check_templates((*path, index), value)


def unbalanced_braces(text: str) -> str | None:
    """Why `text`'s `{{ }}` do not pair up, or None when they do."""
    depth, index = 0, 0
    while index < len(text):
        if text.startswith("{{", index):
            if depth:
                return "template opens '{{' inside another '{{ ... }}'"
            depth, index = 1, index + 2
        elif text.startswith("}}", index) and depth:
            depth, index = 0, index + 2
        elif text.startswith("}}", index):
            return "template closes '}}' that was never opened"
        else:
            index += 1
    if depth:
        return "template opens '{{' but never closes it with '}}'"
    return None


def transform_reads(source: str) -> set[str]:
    """Names a transform may read from the flattened view (for dependency and cycle checks)."""
    finder: Callable[[str], Iterable[str]] | None = _free_name_finder()
    if finder is not None:
        try:
            return set(finder(source))
        except Exception:  # noqa: BLE001 - a transform that does not tokenize is checked at run time
            pass
    return js_free_names(source)


def _free_name_finder() -> Callable[[str], Iterable[str]] | None:
    try:
        from aromcp_workflows.expressions import free_names  # type: ignore[attr-defined]
    except ImportError:
        return None
    return free_names  # type: ignore[no-any-return]


_JS_TOKEN = re.compile(r"""
    (?P<skip>//[^\n]*|/\*.*?\*/|'(?:\\.|[^'\\])*'|"(?:\\.|[^"\\])*")
  | (?P<template>`(?:\\.|[^`\\])*`)
  | (?P<name>[A-Za-z_$][A-Za-z0-9_$]*)
  | (?P<punct>\?\.|=>|\.\.\.|\S)
""", re.S | re.X)
_DECLARES = frozenset({"const", "let", "var", "function"})


def js_free_names(source: str) -> set[str]:
    """A careful approximation of a JS transform's free names, without a JS parser.

    Over-counting would report cycles that do not exist, so this leaves out what is surely
    not a read of state: property names (`input.files`), object keys (`{ files: x }`),
    strings, comments, and names the transform declares (`const files`, `files => ...`).
    """
    tokens: list[tuple[str, str]] = []
    for match in _JS_TOKEN.finditer(source):
        kind = match.lastgroup or "punct"
        if kind == "template":  # only the code inside ${ ... } can read names
            for code in re.findall(r"\$\{(.*?)\}", match.group()):
                tokens.append(("code", code))
        elif kind != "skip":
            tokens.append((kind, match.group()))
    names: set[str] = set()
    local: set[str] = set()
    for index, (kind, text) in enumerate(tokens):
        before = tokens[index - 1][1] if index else ""
        after = tokens[index + 1][1] if index + 1 < len(tokens) else ""
        if kind == "code":
            names |= js_free_names(text)
        elif kind != "name" or before in (".", "?."):
            if text == "=>" and before == ")":
                local |= _arrow_params(tokens, index - 1)
        elif before in _DECLARES or after == "=>":
            local.add(text)
        elif after == ":" and before in ("{", ","):
            continue
        else:
            names.add(text)
    return names - local


def _arrow_params(tokens: list[tuple[str, str]], close: int) -> set[str]:
    depth, index, params = 0, close, set()
    while index >= 0:
        kind, text = tokens[index]
        depth += text == ")"
        depth -= text == "("
        if kind == "name" and depth == 1:
            params.add(text)
        if depth == 0:
            break
        index -= 1
    return params


def _cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """Each distinct cycle once, as `[a, b, a]`."""
    found: list[list[str]] = []
    seen_sets: set[frozenset[str]] = set()
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for dep in graph.get(node, []):
            if state.get(dep) == 1:
                cycle = stack[stack.index(dep):] + [dep]
                key = frozenset(cycle)
                if key not in seen_sets:
                    seen_sets.add(key)
                    found.append(cycle)
            elif state.get(dep) is None:
                visit(dep, stack)
        stack.pop()
        state[node] = 2

    for node in graph:
        if node not in state:
            visit(node, [])
    return found


def _all_steps(definition: WorkflowDefinition):
    from aromcp_workflows.definition.loader import iter_steps_with_paths

    return iter_steps_with_paths(definition)


def _data_path(path: Path) -> Path:
    return tuple("else" if p == "else_" else p for p in path)


def _line_of(loaded: LoadedWorkflow, path: Path) -> str:
    line, _ = loaded.positions.locate(path)
    return f"line {line}" if line else "another step"
