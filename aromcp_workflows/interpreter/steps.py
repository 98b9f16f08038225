"""The `Run` instruction: one leaf step, dispatched by its type through a table.

Server-side steps (`state_update`, `user_message`, `include_workflow`) change the
machine's data and return None; `shell_command` returns a `ShellRequest`; agent-side
steps and `parallel_foreach` return the `Answer` that hands a step out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aromcp_workflows.definition import (
    AgentStep,
    IncludeWorkflowStep,
    ParallelForeachStep,
    ShellCommandStep,
    StateUpdateStep,
    Step,
    StepBase,
    UserMessageStep,
)
from aromcp_workflows.expressions import ExpressionError
from aromcp_workflows.interpreter import delivery, parallel
from aromcp_workflows.interpreter.control import Effect
from aromcp_workflows.interpreter.inputs import InputError, check_inputs
from aromcp_workflows.interpreter.machine import Ctx, StepFailed
from aromcp_workflows.interpreter.path_templates import path_template, path_value
from aromcp_workflows.interpreter.program import Run
from aromcp_workflows.interpreter.shell_steps import request_shell, store_failed
from aromcp_workflows.interpreter.thread import Frame

StepHandler = Callable[[Ctx, Any, str], Effect]  # each takes the step class it is listed under


def run(ctx: Ctx, ins: Run) -> Effect:
    step, step_id = ins.step, ctx.delivered_id(ins.step_id)
    handler = STEP_HANDLERS.get(type(step))
    if handler is not None:
        return handler(ctx, step, step_id)
    if isinstance(step, AgentStep):
        return delivery.deliver(ctx, step, step_id)
    return _unknown(ctx, step, step_id)


def state_update(ctx: Ctx, step: StateUpdateStep, step_id: str) -> Effect:
    updates = ctx.render([{**u.model_dump(), "path": path_template(u.path)} for u in step.as_updates()],
                         f"step {step_id}")
    ctx.write([(path_value(u["path"]), u["operation"], u["value"]) for u in updates], f"step {step_id}")
    ctx.frame.pc += 1
    return None


def user_message(ctx: Ctx, step: UserMessageStep, step_id: str) -> Effect:
    message = ctx.render(step.message, f"step {step_id}")
    ctx.thread.outbox.append("" if message is None else str(message))
    text = ctx.thread.outbox[-1]
    shown = text[:500] + ("…" if len(text) > 500 else "")
    ctx.record("message_shown", step_id, {"type": "user_message", "message": shown})
    ctx.frame.pc += 1
    return None


def shell_command(ctx: Ctx, step: ShellCommandStep, step_id: str) -> Effect:
    """A command that cannot even be written (a template that throws, a value that would end
    a here-document early) is a failure of this step: its `on_error` decides."""
    try:
        return request_shell(ctx, step, step_id, attempt=0)
    except (ExpressionError, StepFailed) as exc:
        ctx.thread.pending = None
        return store_failed(ctx, step, step_id, f"the command could not be built: {exc}")


def include_workflow(ctx: Ctx, step: IncludeWorkflowStep, step_id: str) -> Effect:
    """Run the child workflow inline in a new frame with its own state (only the inputs passed)."""
    m, frame = ctx.m, ctx.frame
    child = m.bundle.get(step.workflow)
    rendered = ctx.render({"inputs": step.inputs,
                           "path": path_template(step.state_update.path) if step.state_update else None},
                          f"step {step_id}")
    rendered["path"] = path_value(rendered["path"])
    try:
        given = rendered["inputs"] or {}
        # a child that declares no inputs takes what it is passed, as the seed's shared workflows do
        inputs = check_inputs(child.name, child.inputs, given) if child.inputs else dict(given)
    except InputError as exc:
        raise StepFailed(f"include_workflow {step_id}: {exc}") from None
    key = f"{frame.state_key}/{step_id}"
    m.states[key] = m.new_state(child, inputs, f"include {step_id}")
    m.state_workflows[key] = child.name
    local = step_id.rsplit(".", 1)[-1].split("#", 1)[0]
    frame.pc += 1
    ctx.thread.frames.append(Frame(child.name, "main", key, f"{step_id}.",
                                   result_path=rendered["path"] or f"raw.{local}", role="include"))
    ctx.record("include_started", step_id, {"workflow": child.name, "inputs": inputs})
    return None


def _unknown(ctx: Ctx, step: Step, step_id: str) -> Effect:
    raise StepFailed(f"step {step_id}: the interpreter has no handler for step type {step.type!r}")


STEP_HANDLERS: dict[type[StepBase], StepHandler] = {
    StateUpdateStep: state_update,
    UserMessageStep: user_message,
    ShellCommandStep: shell_command,
    IncludeWorkflowStep: include_workflow,
    ParallelForeachStep: parallel.run_parallel,
}
