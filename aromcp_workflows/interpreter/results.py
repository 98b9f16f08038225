"""Storing a step's result, or what `on_error: continue` stores instead.

Shared by server-side shell steps and agent-side steps: `result` is what templates in the
step's `state_update.value` see; without `value`, the parsed output is stored.
"""

from __future__ import annotations

from typing import Any

from aromcp_workflows.definition import ResultStep
from aromcp_workflows.interpreter import tracking
from aromcp_workflows.interpreter.machine import Ctx
from aromcp_workflows.interpreter.path_templates import path_template, path_value


def store_result(ctx: Ctx, step: ResultStep, path: str | None, result: Any, output: Any, step_id: str) -> None:
    spec = getattr(step, "state_update", None)
    if spec is None or path is None:
        return
    value = output
    if spec.value is not None:
        value = ctx.render(spec.value, f"state_update of step {step_id}", {"result": result})
    ctx.write([(path, spec.operation, value)], f"step {step_id}")


def store_failure(ctx: Ctx, step: ResultStep, step_id: str, message: str, output: Any = None,
                  result: Any = None) -> None:
    """`on_error: continue`: store `fallback_value` if given, else what the step's
    `state_update` would store (its `value` over `result`, or the parsed output);
    then apply `error_state_update`."""
    spec = getattr(step, "state_update", None)
    if spec is not None and (step.fallback_value is not None or result is not None or output is not None):
        path = path_value(ctx.render(path_template(spec.path), f"step {step_id}"))
        if step.fallback_value is not None:
            value = step.fallback_value
        elif spec.value is not None and result is not None:
            value = ctx.render(spec.value, f"state_update of step {step_id}", {"result": result})
        else:
            value = output
        ctx.write([(path, spec.operation, value)], f"step {step_id}")
    error_spec = getattr(step, "error_state_update", None)
    if error_spec is not None:
        error = {"message": message, "step_id": step_id}
        rendered = ctx.render({"path": path_template(error_spec.path), "value": error_spec.value},
                              f"error_state_update of step {step_id}", {"error": error})
        rendered["path"] = path_value(rendered["path"])
        value = rendered["value"] if error_spec.value is not None else error
        ctx.write([(rendered["path"], error_spec.operation, value)], f"step {step_id}")
    ctx.record("step_error", step_id, {"message": message, "handled": "continue"})
    tracking.step_failed(ctx.m, ctx.thread, {"message": message, "step_id": step_id, "handled": "continue"})
