"""Semantic validation: what a schema cannot see, reported all at once with positions.

Runs after the models accepted a file: duplicate step ids, `break` outside a loop,
unknown sub-agent tasks, state paths that name no writable tier, computed-field cycles
(by the state store's own rules), templates (by the engine's own parser), inputs passed
to included workflows, input defaults of the wrong type, and warnings for tier
collisions, unused tasks and a name that differs from its file.  Everything that would
make `workflow_start` fail for a reason visible in the file belongs here.  The checks of
JavaScript itself live beside it: syntax in V8 (`js_syntax`), names in scope
(`references`), loops that cannot end (`loops`).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from typing import Any

from aromcp_workflows.definition.build import describe
from aromcp_workflows.definition.errors import DefinitionProblem, closest_names, did_you_mean
from aromcp_workflows.definition.graphs import cycles
from aromcp_workflows.definition.js_names import computed_reads, js_free_names
from aromcp_workflows.definition.js_syntax import syntax_problems
from aromcp_workflows.definition.loader import LoadedWorkflow, WorkflowBundle, _walk_steps
from aromcp_workflows.definition.loops import endless_loops
from aromcp_workflows.definition.references import declared_names, reference_problems
from aromcp_workflows.definition.scopes import sites
from aromcp_workflows.definition.secrets import secret_problems
from aromcp_workflows.definition.steps import (
    BreakStep,
    ContinueStep,
    ForeachStep,
    IncludeWorkflowStep,
    ParallelForeachStep,
    Step,
    UserInputStep,
    WhileStep,
    child_step_lists,
)
from aromcp_workflows.definition.templates import command_problem, condition_problem, template_problems
from aromcp_workflows.definition.workflow import WorkflowDefinition
from aromcp_workflows.definition.yaml_source import NodePath
from aromcp_workflows.safety import pattern_problem

TIERS = ("raw", "state", "computed", "inputs")
WRITABLE_TIERS = ("raw", "state")
FORBIDDEN_KEYS = frozenset({"__proto__", "constructor", "prototype"})


JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "number": (int, float), "integer": (int,), "boolean": (bool,),
    "array": (list,), "object": (dict,),
}
NOT_TEMPLATES = ("transform", "validate", "response_schema")  # JS or JSON Schema, not {{ }}


def validate_bundle(bundle: WorkflowBundle, engine: Callable[[], Any] | None = None) -> list[DefinitionProblem]:
    """Every workflow of the bundle, each checked once, with includes checked against it.
    `engine`: where JavaScript is compiled (see `js_syntax.syntax_problems`)."""
    problems: list[DefinitionProblem] = []
    for loaded in bundle.workflows.values():
        problems.extend(validate_workflow(loaded, bundle, engine))
    return problems


def validate_workflow(loaded: LoadedWorkflow, bundle: WorkflowBundle | None = None,
                      engine: Callable[[], Any] | None = None) -> list[DefinitionProblem]:
    """Every semantic problem of one workflow (errors and warnings), in file order."""
    checker = _Checker(loaded, bundle, engine)
    checker.run()
    return sorted(checker.problems, key=lambda p: (p.file or "", p.line or 0, p.column or 0))


class _Checker:
    def __init__(self, loaded: LoadedWorkflow, bundle: WorkflowBundle | None = None,
                 engine: Callable[[], Any] | None = None):
        self.bundle = bundle
        self.engine = engine
        self.loaded = loaded
        self.definition: WorkflowDefinition = loaded.definition
        self.problems: list[DefinitionProblem] = []

    def error(self, path: NodePath, message: str) -> None:
        self.problems.append(self.loaded.positions.problem(path, message))

    def warn(self, path: NodePath, message: str) -> None:
        self.problems.append(self.loaded.positions.problem(path, message, "warning"))

    def report(self, path: NodePath, message: str, severity: str) -> None:
        (self.error if severity == "error" else self.warn)(_data_path(path), message)

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
        self.check_inputs(("inputs",), definition.inputs)
        for name, task in definition.sub_agent_tasks.items():
            self.check_inputs(("sub_agent_tasks", name, "inputs"), task.inputs)
        collection = definition.error_handling.error_collection
        if collection is not None and collection.state_path:
            self.check_writable_path(("error_handling", "error_collection", "state_path"),
                                     collection.state_path)
        self.check_computed_fields()
        self.check_collisions()
        self.check_templates((), self.loaded_data())
        self.check_javascript()
        self.check_seed_orchestrator_keys()

    def check_javascript(self) -> None:
        """Syntax (V8, one crossing for the file), names in scope, loops that cannot end."""
        data = self.loaded_data()
        found = list(sites(data))
        for path, message in syntax_problems(found, self.engine):
            self.report(path, message, "error")
        for site in (s for s in found if s.kind == "template" and s.path[-1] in ("condition", "when")):
            problem = condition_problem(site.source)  # "{{ n }} > 0": text, always true
            if problem is not None:
                self.report(site.path, problem, "error")
        for path, message, severity in reference_problems(found, declared_names(data)):
            self.report(path, message, severity)
        for path, message, severity in secret_problems(self.definition, data, found):
            self.report(path, message, severity)
        definition = self.definition
        roots: list[tuple[NodePath, list[Any]]] = [(("steps",), definition.steps),
                                               (("error_handling", "on_failure"), definition.error_handling.on_failure)]
        roots += [(("sub_agent_tasks", name, "steps"), task.steps)
                  for name, task in definition.sub_agent_tasks.items()]
        for prefix, steps in roots:
            for path, message in endless_loops(steps, prefix):
                self.error(path, message)

    def check_seed_orchestrator_keys(self) -> None:
        """The seed's orchestrator keys are accepted, but say plainly that nothing runs them."""
        if self.definition.orchestrator_behavior is not None:
            self.warn(("orchestrator_behavior",), "orchestrator_behavior (from the seed design) "
                      "is kept as documentation only: agents are not sent it; the orchestrator "
                      "prompt already checkpoints when its context runs high")
        hook = self.definition.on_high_context_usage
        if hook is not None:
            self.check_program(("on_high_context_usage", "steps"), hook.steps, (), [])
            self.warn(("on_high_context_usage",), "on_high_context_usage (from the seed design) "
                      "is validated but never run: the server cannot see an agent's context; "
                      "the orchestrator prompt has the agent call workflow_checkpoint and ask "
                      "the user to run /workflow resume <id> instead")

    # -- steps -----------------------------------------------------------------
    def check_program(self, prefix: NodePath, steps: list[Any], handler_prefix: NodePath, handlers: list[Any]) -> None:
        seen: dict[str, NodePath] = {}
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

    def check_loop_nesting(self, prefix: NodePath, steps: list[Any], in_loop: bool) -> None:
        for index, step in enumerate(steps):
            path = (*prefix, index)
            if isinstance(step, (BreakStep, ContinueStep)) and not in_loop:
                self.error((*path, "type"), f"'{step.type}' outside a loop; it may only appear "
                           "inside the body of a while or foreach")
            inner = in_loop or isinstance(step, (WhileStep, ForeachStep))
            for key, children in child_step_lists(step):
                self.check_loop_nesting((*path, key), children, inner)

    def check_step(self, path: NodePath, step: Step) -> None:
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
        if isinstance(step, IncludeWorkflowStep):
            self.check_include_inputs(path, step)
        if step.type in ("shell_command", "agent_shell_command"):
            problem = command_problem(step.command)
            if problem:
                self.error((*path, "command"), problem)
        if isinstance(step, UserInputStep) and step.validation and step.validation.pattern:
            problem = pattern_problem(step.validation.pattern)
            if problem:
                self.error((*path, "validation", "pattern"), problem)

    def check_include_inputs(self, path: NodePath, step: IncludeWorkflowStep) -> None:
        """The inputs an include passes must be ones the child declares, required ones included."""
        child = self.bundle.workflows.get(step.workflow) if self.bundle else None
        if child is None:
            return  # an unknown workflow is reported by the loader
        declared = child.definition.inputs
        misspelt: set[str] = set()
        for key in step.inputs:
            if key in declared:
                continue
            if not declared:  # the seed design's shared workflows read undeclared inputs
                self.warn((*path, "inputs", key), f"workflow {step.workflow!r} declares no "
                          f"inputs, so {key!r} reaches it undeclared; declare it in that "
                          "workflow's 'inputs' to have it checked")
                continue
            hint = did_you_mean(key, declared)
            misspelt.update(closest_names(key, declared, 1) if hint else [])
            self.error((*path, "inputs", key), f"workflow {step.workflow!r} has no input "
                       f"{key!r}{hint} (its inputs: {', '.join(declared)})")
        for key, spec in declared.items():
            if key in misspelt:
                continue  # reported once, as the typo
            if spec.required and spec.default is None and key not in step.inputs:
                self.error((*path, "workflow"), f"include_workflow must pass required input "
                           f"{key!r} of {step.workflow!r} (add it under 'inputs')")

    def check_inputs(self, prefix: NodePath, inputs: dict[str, Any]) -> None:
        """A default must have the declared type (a `{{ }}` template is checked at run time)."""
        for name, spec in inputs.items():
            value = spec.default
            if value is None or (isinstance(value, str) and "{{" in value):
                continue
            wanted = JSON_TYPES[spec.type]
            if not isinstance(value, wanted) or (isinstance(value, bool) and bool not in wanted):
                self.error((*prefix, name, "default"), f"default of input {name!r} is "
                           f"{describe(value)}, but its type is {spec.type}")

    def check_writable_path(self, path: NodePath, state_path: str) -> None:
        """A write must go to raw.* or state.*, through no prototype-polluting key."""
        if state_path.startswith("{{"):
            return  # the whole path is computed at run time, where it is checked
        static = re.sub(r"\{\{.*?\}\}", "x", state_path)
        bad = [part for part in re.split(r"[.\[\]]", static) if part in FORBIDDEN_KEYS]
        if bad:
            self.error(path, f"state path {state_path!r} uses the key {bad[0]!r}, which is "
                       "refused (it would reach JavaScript object internals); rename it")
            return
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
        reasons: dict[tuple[str, str], str] = {}  # edges that come from reading a name
        for name, spec in computed.items():
            base = ("state_schema", "computed", name)
            deps: list[str] = []
            for index, source in enumerate(spec.sources):
                where = (*base, "from", index) if isinstance(spec.from_, list) else (*base, "from")
                tier, _, rest = source.partition(".")
                if tier not in TIERS or not rest:
                    self.error(where, f"computed field {name!r} reads {source!r}, which names no "
                               "state tier; start it with raw., state., computed. or inputs."
                               + self._tier_hint(source))
                elif tier == "inputs":
                    field = re.split(r"[.\[]", rest, maxsplit=1)[0]
                    if field not in self.definition.inputs:
                        self.error(where, f"computed field {name!r} reads unknown input {field!r}"
                                   f"{did_you_mean(field, self.definition.inputs)}; declare it "
                                   "under 'inputs'")
                elif tier == "computed":
                    field = re.split(r"[.\[]", rest, maxsplit=1)[0]
                    if field not in computed:
                        self.error(where, f"computed field {name!r} reads unknown computed field "
                                   f"{field!r}{did_you_mean(field, computed)}")
                    else:
                        deps.append(field)
            scripts: list[tuple[str, str | None]] = [("transform", spec.transform),
                                                     ("validate", spec.validate_)]
            for key, script in scripts:
                if script is None:
                    continue
                found = computed_reads(script, computed)
                if found.error:
                    self.error((*base, key), f"{key} of computed field {name!r} is not valid "
                               f"JavaScript: {found.error}")
                    continue
                precise = js_free_names(script)
                for dep in sorted(found.fields - set(deps)):
                    deps.append(dep)
                    reasons[(name, dep)] = (
                        f"the {key} of {name!r} reads {dep!r}" if dep in precise or dep == "this"
                        else f"the {key} of {name!r} names a local {dep!r}, which counts as "
                        "reading that field: rename the local")
            graph[name] = deps
        for cycle in cycles(graph):
            why = [reasons[edge] for edge in itertools.pairwise(cycle) if edge in reasons]
            hint = f" ({'; '.join(why)})" if why else ""
            self.error(("state_schema", "computed", cycle[0]),
                       "circular computed fields: " + " → ".join(cycle) + hint)

    def _tier_hint(self, source: str) -> str:
        """` (did you mean 'raw.files'?)` when the head is a name some tier declares."""
        head = re.split(r"[.\[]", source, maxsplit=1)[0]
        schema, defaults = self.definition.state_schema, self.definition.default_state
        tiers = {"computed": schema.computed, "raw": {**schema.raw, **defaults.raw},
                 "state": {**schema.state, **defaults.state}, "inputs": self.definition.inputs}
        for tier, names in tiers.items():
            if head in names:
                return f" (did you mean '{tier}.{source}'?)"
        return ""

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
                    where = ("state_schema", high, name) if high != "raw" or name in schema.raw \
                        else ("default_state", "raw", name)
                    self.warn(where, f"{high}.{name} hides {low}.{name} in the flattened view "
                              "({{ " + name + " }} reads the " + high + " value); rename one, "
                              f"or read {low}.{name} explicitly")

    # -- templates ----------------------------------------------------------------
    def loaded_data(self) -> Any:
        return self.definition.model_dump(by_alias=True, exclude_defaults=True)

    def check_templates(self, path: NodePath, node: Any, task: Any = None) -> None:
        """`task`: the sub-agent task whose names a template sees (inside its steps, or in
        a `sub_agent_prompt_override`, which is rendered for each of its tasks)."""
        if path and path[-1] in NOT_TEMPLATES:
            return
        if isinstance(node, str):
            if task is None and len(path) > 1 and path[0] == "sub_agent_tasks":
                task = self.definition.sub_agent_tasks.get(str(path[1]))
            warnings: list[str] = []
            for problem in template_problems(node, self.definition.inputs,
                                             task.inputs if task is not None else None, warnings):
                self.error(_data_path(path), problem)
            for warning in warnings:
                self.warn(_data_path(path), warning)
        elif isinstance(node, dict):
            for key, value in node.items():
                override = key == "sub_agent_prompt_override" and node.get("type") == "parallel_foreach"
                self.check_templates((*path, key), value, self.definition.sub_agent_tasks.get(
                    str(node.get("sub_agent_task"))) if override else task)
        elif isinstance(node, list):
            for index, value in enumerate(node):
                self.check_templates((*path, index), value, task)


def _all_steps(definition: WorkflowDefinition) -> Iterator[tuple[tuple[Any, ...], Any]]:
    from aromcp_workflows.definition.loader import iter_steps_with_paths

    return iter_steps_with_paths(definition)


def _data_path(path: NodePath) -> NodePath:
    return tuple("else" if p == "else_" else p for p in path)


def _line_of(loaded: LoadedWorkflow, path: NodePath) -> str:
    line, _ = loaded.positions.locate(path)
    return f"line {line}" if line else "another step"
