"""`explain_plan`: what a workflow will do, without running anything.

Walks the definitions of a bundle and reports every step with the conditions and loops
around it, the sub-agent tasks, the MCP tools it calls, the state paths it writes, and
the compiled program listing (the disassembly of what the interpreter will execute).
Step ids are the ones the compiler gives, so a plan line can be matched with a step the
agent later receives.  Sub-agent counts are estimated by `estimate.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aromcp_workflows.definition import (
    ConditionalStep,
    ForeachStep,
    IncludeWorkflowStep,
    McpCallStep,
    ParallelForeachStep,
    Step,
    WhileStep,
    WorkflowBundle,
    WorkflowDefinition,
    computed_specs,
)
from aromcp_workflows.explain.estimate import EstimatedWrite, estimate
from aromcp_workflows.expressions import ExpressionEngine
from aromcp_workflows.interpreter import check_inputs, listing, programs_for
from aromcp_workflows.state import StateTiers

_SERVER = frozenset({"shell_command", "state_update", "conditional", "while", "foreach", "break", "continue",
                     "include_workflow", "exit"})


@dataclass
class _Entry:
    """One step of the plan, with what the estimate needs to know about where it sits."""

    data: dict[str, Any]
    section: str  # "main", "task:<name>", "cleanup:<name>", "on_failure", or "[other] ..."
    loop_ids: tuple[str, ...] = ()
    step: Step | None = None


@dataclass
class _Walk:
    """Collects plan entries.  An `include_workflow` step's child steps are listed right
    after it with the ids the agent will see (`run_checks.check_lint.lint`), under the
    include's conditions and loops; the child's state is its own, so they are kept out
    of the parent's sub-agent estimates (section `include:<name>`)."""

    definitions: dict[str, WorkflowDefinition]
    entries: list[_Entry] = field(default_factory=list)
    included: set[str] = field(default_factory=set)
    _including: list[str] = field(default_factory=list)

    def steps(self, step_list: list[Any], section: str, label: str, prefix: str = "", branch: str = "",
              conditions: tuple[str, ...] = (), loops: tuple[str, ...] = (),
              loop_ids: tuple[str, ...] = ()) -> None:
        for index, step in enumerate(step_list):
            local = step.id or f"{branch}{step.type}_{index + 1}"  # the compiler's naming
            qid = f"{prefix}{local}"
            data: dict[str, Any] = {"step_id": f"{label}{qid}", "type": step.type, "side": _side(step.type)}
            guards = conditions + ((f"when {step.when}",) if step.when is not None else ())
            if guards:
                data["conditions"] = list(guards)
            if loops:
                data["loops"] = list(loops)
            writes = _writes(step, local)
            if writes:
                data["writes"] = writes
            if isinstance(step, McpCallStep):
                data["mcp_method"] = step.mcp.method
            if isinstance(step, IncludeWorkflowStep):
                data["includes"] = step.workflow
            if isinstance(step, ParallelForeachStep):
                data.update(sub_agent_task=step.sub_agent_task, max_parallel=step.max_parallel, items=step.items)
            self.entries.append(_Entry(data, section, loop_ids, step))
            if isinstance(step, IncludeWorkflowStep):
                self._include(step.workflow, label, f"{qid}.", guards, loops, loop_ids)
            inner: dict[str, Any] = {"section": section, "label": label, "prefix": f"{qid}."}
            if isinstance(step, ConditionalStep):
                self.steps(step.then, **inner, branch="then_", conditions=(*guards, f"if {step.condition}"),
                           loops=loops, loop_ids=loop_ids)
                self.steps(step.else_, **inner, branch="else_", conditions=(*guards, f"unless {step.condition}"),
                           loops=loops, loop_ids=loop_ids)
            elif isinstance(step, WhileStep):
                self.steps(step.body, **inner, conditions=guards, loop_ids=(*loop_ids, qid),
                           loops=(*loops, f"while {step.condition} (max {step.limit})"))
            elif isinstance(step, ForeachStep):
                self.steps(step.steps, **inner, conditions=guards, loop_ids=(*loop_ids, qid),
                           loops=(*loops, f"foreach {step.items}"))

    def _include(self, name: str, label: str, prefix: str, conditions: tuple[str, ...], loops: tuple[str, ...],
                 loop_ids: tuple[str, ...]) -> None:
        child = self.definitions.get(name)
        if child is None or name in self._including:  # unknown or circular: validation reports it
            return
        self.included.add(name)
        self._including.append(name)
        self.steps(child.steps, f"include:{name}", label, prefix, conditions=conditions, loops=loops,
                   loop_ids=loop_ids)
        self._including.pop()

    def definition(self, definition: WorkflowDefinition, label: str, main_steps: bool = True) -> None:
        """Every step list of one workflow: main, on_failure, each task and its cleanup."""
        if main_steps:
            self.steps(definition.steps, "main", label)
        for task_name, task in definition.sub_agent_tasks.items():
            self.steps(task.steps, f"task:{task_name}", f"{label}task {task_name}: ")
            self.steps(task.error_handling.cleanup_on_error, f"cleanup:{task_name}",
                       f"{label}task {task_name} (cleanup): ", "cleanup_on_error.")
        self.steps(definition.error_handling.on_failure, "on_failure", f"{label}on failure: ", "on_failure.")


def explain_plan(bundle: WorkflowBundle, inputs: dict[str, Any], engine: ExpressionEngine) -> dict[str, Any]:
    """The plan as a JSON-safe dict (the MCP tool `workflow_explain_plan`, plus
    `state_paths_written` and per-step detail).  Bad inputs raise `InputError`."""
    main = bundle.main.definition
    state = _start_state(main, inputs, engine)
    walk = _Walk({name: loaded.definition for name, loaded in bundle.workflows.items()})
    walk.definition(main, "")
    main_entries = list(walk.entries)
    for name, loaded in bundle.workflows.items():
        if name != main.name:  # tasks and handlers of other workflows; their main steps if not included
            walk.definition(loaded.definition, f"[{name}] ", main_steps=name not in walk.included)
    by_step: dict[str, int | str] = {}
    per_iteration = False
    for position, entry in enumerate(main_entries):
        if isinstance(entry.step, ParallelForeachStep):
            guess = estimate(entry.step.items, state, engine, _earlier_writes(main_entries, position)) \
                if entry.section == "main" else _not_estimated(entry.section)
            entry.data["estimated_sub_agents"] = by_step[entry.data["step_id"]] = guess
            if entry.loop_ids:
                entry.data["estimate_note"] = "per iteration of " + ", ".join(entry.loop_ids)
                per_iteration = True
    for entry in walk.entries[len(main_entries):]:
        if isinstance(entry.step, ParallelForeachStep):
            guess = _not_estimated("include:")
            entry.data["estimated_sub_agents"] = by_step[entry.data["step_id"]] = guess
    for entry in walk.entries:
        entry.data.pop("items", None)
    steps = [e.data for e in walk.entries]
    known = [v for v in by_step.values() if isinstance(v, int)]
    total = sum(known) if len(known) == len(by_step) and not per_iteration else None
    return {
        "workflow": main.name,
        "steps": steps,
        "estimated_sub_agents": {"total": total, "by_step": by_step},
        "required_tools": sorted({s["mcp_method"] for s in steps if s.get("mcp_method")}),
        "state_paths_written": sorted({p for s in steps for p in s.get("writes", [])} | _handler_writes(bundle)),
        "program": {name: {key: listing(program) for key, program in programs_for(d).programs.items()
                           if len(program.instructions)}
                    for name, d in ((n, w.definition) for n, w in bundle.workflows.items())},
    }


def _handler_writes(bundle: WorkflowBundle) -> set[str]:
    """Paths written by error handling rather than by a step (`error_collection.state_path`)."""
    paths = set()
    for loaded in bundle.workflows.values():
        collection = loaded.definition.error_handling.error_collection
        if collection is not None and collection.enabled and collection.state_path:
            paths.add(collection.state_path)
    return paths


def _not_estimated(section: str) -> str:
    if section.startswith("include:"):
        return "unknown: in an included workflow, whose state exists only at run time"
    if section == "on_failure":
        return "unknown: runs only after a failure"
    return "unknown: started from a sub-agent task, known only at run time"


def _earlier_writes(entries: list[_Entry], position: int) -> list[EstimatedWrite]:
    """Writes that can happen before the step at `position` starts: steps earlier in the
    main list, every step of a loop around it (a later iteration follows them), and the
    tasks (and cleanups) of the `parallel_foreach` steps among those."""
    loops = set(entries[position].loop_ids)

    def before(i: int, entry: _Entry) -> bool:
        return entry.section == "main" and (i < position or bool(loops & set(entry.loop_ids)))

    tasks_run = {e.step.sub_agent_task for i, e in enumerate(entries)
                 if isinstance(e.step, ParallelForeachStep) and before(i, e)}
    writes: list[EstimatedWrite] = []
    for i, entry in enumerate(entries):
        task = entry.section.partition(":")[2] if entry.section.startswith(("task:", "cleanup:")) else None
        if before(i, entry) or task in tasks_run:
            writes.extend(EstimatedWrite(path, entry.data["step_id"]) for path in entry.data.get("writes", []))
    return writes


def _writes(step: Step, local: str) -> list[str]:
    paths = []
    for key in ("state_update", "error_state_update"):
        spec = getattr(step, key, None)
        if spec is not None and getattr(spec, "path", None):
            paths.append(spec.path)
    if isinstance(step, IncludeWorkflowStep) and step.state_update is None:
        paths.append(f"raw.{local}")  # where the child's final state goes by default
    if step.type == "state_update":
        paths.extend(u.path for u in step.as_updates())
    if isinstance(step, ParallelForeachStep) and step.on_sub_agent_error.error_state_path:
        paths.append(step.on_sub_agent_error.error_state_path)
    return paths


def _start_state(definition: WorkflowDefinition, inputs: dict[str, Any], engine: Any) -> StateTiers | None:
    """The state at start (inputs + default_state + computed), or None if it cannot be made."""
    values = check_inputs(definition.name, definition.inputs, inputs)  # bad inputs are the caller's error
    try:
        store = StateTiers(engine, computed=computed_specs(definition), inputs=values)
        store.initialize(definition.default_state.model_dump())
        return store
    except Exception:
        return None


def _side(step_type: str) -> str:
    """Who performs a step: the server, the agent, or nobody (a message shown to the user)."""
    if step_type == "user_message":
        return "message"
    return "server" if step_type in _SERVER else "agent"
