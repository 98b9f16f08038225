"""Agent-side steps on the machine: delivering one, and taking the agent's result for it.

A step is rendered (all its templates in one engine call) into an atomic step and parked
as the thread's pending step; the `Answer` that hands it out is the effect.  When the
agent completes it, its result is parsed and validated (`agent_steps.accept_result`),
stored, and the thread moves on — or the step is re-issued with the problem stated, or
its `on_error` applies.
"""

from __future__ import annotations

from typing import Any

from aromcp_workflows.definition import AgentStep, ResultStep, UserInputStep
from aromcp_workflows.expressions import ExpressionError
from aromcp_workflows.interpreter import tracking
from aromcp_workflows.interpreter.agent_steps import (
    Accepted,
    accept_result,
    atomic_step,
    public,
    reissued,
    templated_fields,
)
from aromcp_workflows.interpreter.effects import Answer, Completion, now_iso
from aromcp_workflows.interpreter.failures import Fail, fail
from aromcp_workflows.interpreter.machine import Ctx, StepFailed
from aromcp_workflows.interpreter.ownership import UserAnswer, Writer, record, shown_question
from aromcp_workflows.interpreter.path_templates import path_template, path_value
from aromcp_workflows.interpreter.results import store_failure, store_result
from aromcp_workflows.interpreter.shell_steps import store_failed, working_directory
from aromcp_workflows.interpreter.thread import Pending


def deliver(ctx: Ctx, step: AgentStep, step_id: str) -> Answer | Fail | None:
    """Render an agent step (one engine call) and park it as the thread's pending step.
    An agent shell command whose `working_dir` is not a directory of the project fails
    here, before the agent sees it (its `on_error` decides what follows)."""
    fields = templated_fields(step)
    fields["_path"] = path_template(step.state_update.path) if step.state_update else None
    command = None
    if step.type == "agent_shell_command":
        rendered, command = ctx.render_command(fields, step.command, f"step {step_id}")
        try:
            rendered["working_dir"] = str(working_directory(ctx.m.project_dir, rendered["working_dir"], step_id))
        except StepFailed as exc:
            return store_failed(ctx, step, step_id, str(exc))
    else:
        rendered = ctx.render(fields, f"step {step_id}")
    atomic = atomic_step(step, step_id, rendered, command)
    thread = ctx.thread
    thread.pending = Pending(step_id, "agent", atomic, thread.outbox, state_path=path_value(rendered["_path"]),
                             data={"since": now_iso()})
    thread.outbox = []
    ctx.record("step_delivered", step_id, {"type": atomic["type"]})
    return ctx.m.answer(thread, atomic)


def complete(ctx: Ctx, pending: Pending, status: str, result: Any, error: str | None,
             by: Writer = "agent") -> Completion:
    """The agent's result for its pending step (or, for a question, the answer `by` gave):
    accepted, re-issued, or the step failed."""
    step = ctx.m.step_at(ctx.frame)
    if not isinstance(step, AgentStep):
        raise StepFailed(f"step {pending.step_id} is a {step.type} step, not one the agent performs; report this "
                         "as a bug")
    if status != "success":  # what the agent said goes to the history (`test --record` replays it)
        ctx.record("step_reported", pending.step_id, {"status": status, "error": error, "result": result})
        return _question_kept(ctx, step, pending, by,
                              step_failed(ctx, step, pending, error or f"the agent reported status {status!r}"))
    verdict = accept_result(step, result)
    if not isinstance(verdict, Accepted):
        pending.attempts += 1
        limit = getattr(step, "max_attempts", 1)
        ctx.record("step_rejected", pending.step_id, {"problem": verdict.problem, "attempt": pending.attempts,
                                                      "result": result})
        if pending.attempts >= limit:
            return _question_kept(ctx, step, pending, by, step_failed(
                ctx, step, pending, f"no valid answer after {limit} attempts: {verdict.problem}", rejected=True))
        pending.step = reissued(pending.step or {}, verdict.problem, pending.attempts, limit)
        return Completion(False, verdict.problem, public(pending.step), advance=False)
    try:
        store_result(ctx, step, pending.state_path, verdict.value, verdict.value, pending.step_id)
    except (StepFailed, ExpressionError) as exc:  # e.g. a `value` template that throws: the step failed
        return step_failed(ctx, step, pending, f"could not store the result: {exc}")
    reported: dict[str, Any] = {"result": result}
    if isinstance(step, UserInputStep):
        reported["answered_by"] = by
        if step.state_update is not None and pending.state_path is not None:
            _keep_answer(ctx, pending, by)
    finish(ctx, pending, reported=reported)
    return Completion(True)


def _question_kept(ctx: Ctx, step: AgentStep, pending: Pending, by: Writer, outcome: Completion) -> Completion:
    """A question that ended without an answer (declined, or no valid one) and went on
    (`on_error: continue`): what its path holds now (the fallback, or what was there) is
    the user's decision as much as an answer would be, so it is theirs too."""
    if (isinstance(step, UserInputStep) and step.state_update is not None and pending.state_path is not None
            and step.on_error == "continue"):
        _keep_answer(ctx, pending, by)
    return outcome


def _keep_answer(ctx: Ctx, pending: Pending, by: Writer) -> None:
    """The path the answer wrote is the user's from now on (ownership.py)."""
    question = shown_question(((pending.step or {}).get("definition") or {}).get("prompt"))
    assert pending.state_path is not None
    record(ctx.m.owners, ctx.frame.state_key, UserAnswer(pending.state_path, pending.step_id, question, by,
                                                          now_iso()))


def asks_user(pending: Pending) -> bool:
    """The pending step is a question for the user (`user_input`)."""
    return pending.kind == "agent" and (pending.step or {}).get("type") == "user_input"


def note_in_form(pending: Pending, asking: bool = True) -> bool:
    """Mark a question as put to the user in a form, or (`asking=False`) as not, the form
    having failed (False: it is not a question)."""
    if not asks_user(pending):
        return False
    if asking:
        pending.data["in_form"] = True
    else:
        pending.data.pop("in_form", None)
    return True


def in_form(pending: Pending) -> bool:
    """Whether the question was put to the user in a form (`note_in_form`)."""
    return bool(pending.data.get("in_form"))


def user_is_asked(pending: Pending) -> Completion:
    """The refusal an agent gets for answering a question the server puts to the user itself:
    nothing recorded, the question stays out."""
    return Completion(False, f"step {pending.step_id} is a question for the user, and the user is being asked it "
                             "directly (a form in their client): only their answer completes it. Do not answer it "
                             "yourself; the call that asked it returns the next step once they have answered.",
                      public(pending.step), advance=False)


def step_failed(ctx: Ctx, step: ResultStep, pending: Pending, message: str, rejected: bool = False) -> Completion:
    """The step failed (reported failed, or no valid answer in `max_attempts`): apply its
    `on_error`. The completion is unsuccessful when the agent's last answer was rejected."""
    ctx.thread.pending = None
    outcome = Completion(not rejected, message if rejected else None)
    if getattr(step, "on_error", "fail") == "continue":
        try:
            store_failure(ctx, step, pending.step_id, message)
        except (StepFailed, ExpressionError) as exc:
            fail(ctx.m, ctx.thread, Fail(pending.step_id, str(exc)))
            return outcome
        finish(ctx, pending, "failed")
        return outcome
    fail(ctx.m, ctx.thread, Fail(pending.step_id, f"step {pending.step_id} failed: {message}"))
    return outcome


def finish(ctx: Ctx, pending: Pending, status: str = "success", reported: dict[str, Any] | None = None) -> None:
    """The step is done; its event keeps what the agent reported (`reported`: the result as given)."""
    if status == "success":
        tracking.step_succeeded(ctx.m, ctx.thread, pending.step_id)
    ctx.thread.pending = None
    ctx.thread.remember_completed(pending.step_id)
    ctx.frame.pc += 1
    ctx.record("step_completed", pending.step_id, {"type": (pending.step or {}).get("type"), "status": status,
                                                    "attempts": pending.attempts + 1, **(reported or {})})
