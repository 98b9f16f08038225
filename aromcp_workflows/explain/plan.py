"""`explain_plan`: what a workflow will do, without running anything.

Walks the definitions of a bundle and reports every step with the conditions and loops
around it, the sub-agent tasks, the MCP tools it calls, the state paths it writes, and
the compiled program listing.  Where `parallel_foreach` items can be evaluated from the
inputs and the default state alone (no command has to run), the number of sub-agents is
estimated; otherwise the estimate says what it depends on.
"""

from __future__ import annotations

from typing import Any

from aromcp_workflows.definition.loader import WorkflowBundle
from aromcp_workflows.definition.steps import (
    ConditionalStep,
    ForeachStep,
    IncludeWorkflowStep,
    McpCallStep,
    ParallelForeachStep,
    WhileStep,
)
from aromcp_workflows.definition.workflow import WorkflowDefinition
from aromcp_workflows.interpreter.compiler import listing, programs_for


def explain_plan(bundle: WorkflowBundle, inputs: dict[str, Any], engine: Any) -> dict[str, Any]:
    main = bundle.main.definition
    state = _default_state(main, inputs, engine)
    steps: list[dict[str, Any]] = []
    estimates: dict[str, Any] = {}
    for name, loaded in bundle.workflows.items():
        definition = loaded.definition
        prefix = "" if name == main.name else f"[{name}] "
        _walk(definition.steps, "", [], [], steps, prefix, definition, state if name == main.name else None,
              engine, estimates)
        for task_name, task in definition.sub_agent_tasks.items():
            _walk(task.steps, f"{prefix}task {task_name}: ", [], [], steps, "", definition, None, engine, estimates)
    tools = sorted({s["mcp_method"] for s in steps if s.get("mcp_method")})
    writes = sorted({p for s in steps for p in s.get("writes", [])})
    known = [v for v in estimates.values() if isinstance(v, int)]
    return {
        "workflow": main.name,
        "steps": steps,
        "estimated_sub_agents": {"total": sum(known) if len(known) == len(estimates) else None,
                                 "by_step": estimates},
        "required_tools": tools,
        "state_paths_written": writes,
        "program": {name: {key: listing(program) for key, program in programs_for(d).programs.items()
                           if len(program.instructions)}
                    for name, d in ((n, w.definition) for n, w in bundle.workflows.items())},
    }


def _walk(step_list: list[Any], prefix: str, conditions: list[str], loops: list[str], out: list[dict[str, Any]],
          label: str, definition: WorkflowDefinition, state: Any, engine: Any, estimates: dict[str, Any],
          branch: str = "") -> None:
    for index, step in enumerate(step_list):
        local = step.id or f"{branch}{step.type}_{index + 1}"  # the compiler's naming
        qid = f"{prefix}{local}"
        entry: dict[str, Any] = {"step_id": f"{label}{qid}", "type": step.type,
                                 "side": _side(step.type)}
        guards = [*conditions] + ([f"when {step.when}"] if step.when is not None else [])
        if guards:
            entry["conditions"] = guards
        if loops:
            entry["loops"] = list(loops)
        writes = _writes(step)
        if writes:
            entry["writes"] = writes
        if isinstance(step, McpCallStep):
            entry["mcp_method"] = step.mcp.method
        if isinstance(step, IncludeWorkflowStep):
            entry["includes"] = step.workflow
        if isinstance(step, ParallelForeachStep):
            entry["sub_agent_task"] = step.sub_agent_task
            entry["max_parallel"] = step.max_parallel
            estimate = _estimate(step, state, engine)
            entry["estimated_sub_agents"] = estimates[f"{label}{qid}"] = estimate
        out.append(entry)
        if isinstance(step, ConditionalStep):
            _walk(step.then, f"{qid}.", [*guards, f"if {step.condition}"], loops, out, label, definition, state,
                  engine, estimates, "then_")
            _walk(step.else_, f"{qid}.", [*guards, f"unless {step.condition}"], loops, out, label, definition,
                  state, engine, estimates, "else_")
        elif isinstance(step, WhileStep):
            _walk(step.body, f"{qid}.", guards, [*loops, f"while {step.condition} (max {step.max_iterations})"],
                  out, label, definition, state, engine, estimates)
        elif isinstance(step, ForeachStep):
            _walk(step.steps, f"{qid}.", guards, [*loops, f"foreach {step.items}"], out, label, definition, state,
                  engine, estimates)


_SERVER = {"shell_command", "state_update", "conditional", "while", "foreach", "break", "continue",
           "include_workflow", "exit"}


def _writes(step: Any) -> list[str]:
    paths = []
    for key in ("state_update", "error_state_update"):
        spec = getattr(step, key, None)
        if spec is not None and getattr(spec, "path", None):
            paths.append(spec.path)
    if step.type == "state_update":
        paths.extend(u.path for u in step.as_updates())
    if isinstance(step, ParallelForeachStep) and step.on_sub_agent_error.error_state_path:
        paths.append(step.on_sub_agent_error.error_state_path)
    return paths


def _default_state(definition: WorkflowDefinition, inputs: dict[str, Any], engine: Any) -> Any:
    """The state at start (inputs + default_state + computed), or None if it cannot be made."""
    from aromcp_workflows.interpreter.inputs import check_inputs
    from aromcp_workflows.interpreter.outcomes import computed_specs
    from aromcp_workflows.state import StateStore

    values = check_inputs(definition.name, definition.inputs, inputs)  # bad inputs are the caller's error
    try:
        store = StateStore(engine, computed=computed_specs(definition), inputs=values)
        store.initialize(definition.default_state.model_dump())
        return store
    except Exception:  # noqa: BLE001 - the plan still lists steps without a state
        return None


def _estimate(step: ParallelForeachStep, state: Any, engine: Any) -> Any:
    if state is None:
        return f"unknown: depends on {step.items} at run time"
    try:
        items = engine.render(step.items, state.scope({}), origin="explain_plan")
    except Exception as exc:  # noqa: BLE001
        return f"unknown: {step.items} cannot be evaluated before the run ({exc})"
    if isinstance(items, list) and items:
        return len(items)
    return f"unknown: {step.items} is empty before the run (it depends on earlier steps)"


def _side(step_type: str) -> str:
    """Who performs a step: the server, the agent, or nobody (a message shown to the user)."""
    if step_type == "user_message":
        return "message"
    return "server" if step_type in _SERVER else "agent"
