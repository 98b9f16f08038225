"""An instance's life from outside its steps: resumed (rolled back to a checkpoint), ended
early (its commands stopped), interrupted, and a question answered by the person.

Each is one or a few transactions of the instance layer; `WorkflowService` hands these
calls here, so the service module keeps only the calls a step takes.
"""

from __future__ import annotations

from typing import Any

from aromcp_workflows.app import calls, repair
from aromcp_workflows.app.page_results import PendingQuestion
from aromcp_workflows.app.results import Answered, CheckpointInfo, Completed, Resumed, StatusChanged
from aromcp_workflows.app.views import questions
from aromcp_workflows.definition import UserInputStep
from aromcp_workflows.expressions import not_text
from aromcp_workflows.instances import InstanceRegistry, ServiceError, refusals
from aromcp_workflows.interpreter import Busy, Completion, Rejected, WorkflowRun, Writer, accept_result

END_STATUSES = {"success": "completed", "completed": "completed", "failed": "failed", "cancelled": "cancelled"}


def resume(instances: InstanceRegistry, workflow_id: str, checkpoint_id: str | None, by: Writer,
           consented: bool) -> Resumed:
    """Reload an instance (rolled back to a checkpoint if one is named); a failed one goes
    back to the step that failed when its workflow says so; an interrupted one runs again.
    The agent's roll-back to a checkpoint that holds user answers runs again over them:
    `ConsentNeeded` until the user allows it (`consented`)."""
    with refusals():
        instances.exists(workflow_id)
        if checkpoint_id is not None and by == "agent" and not consented:
            repair.consent_to_roll_back(instances, workflow_id, checkpoint_id)
        if checkpoint_id is not None:
            instances.roll_back(workflow_id, checkpoint_id)
        instances.forget(workflow_id)
        instances.transact(workflow_id, _resumed)
        last = instances.last_checkpoint(workflow_id)
        status, state = instances.read(workflow_id, lambda run, _: (run.status, run.states["main"].flattened()))
    return Resumed(workflow_id=workflow_id, status=status, state=state,
                   last_checkpoint=None if last is None else CheckpointInfo(
                       checkpoint_id=last.checkpoint_id, step_id=last.step_id, reason=last.reason,
                       timestamp=last.created_at))


def _resumed(run: WorkflowRun) -> None:
    """What resuming changes: the workflow's `on_resume.retry_failed_steps` (the seed's
    default: on) puts a failed instance back at the step that failed; an instance whose
    run was stopped (Ctrl-C) is running again."""
    if run.bundle.main.definition.on_resume.retry_failed_steps:
        run.retry_failed()
    if run.status == "interrupted":
        run.set_status("running")


def end(instances: InstanceRegistry, workflow_id: str, status: str, refuse_ended: bool = False) -> Completed:
    """End an instance early.  Its commands in flight are stopped once the end is
    committed — their whole process group, on this machine at once (the CLI's `cancel`,
    `workflow_complete` and the page all come here), on another host when its server
    next renews the command's lease — and their results are not kept.  `refuse_ended`
    (a person's cancel, at the page or the command line): an instance that already ended
    another way is refused (`conflict`) rather than reported done, judged in the same
    transaction as the end."""
    if status not in END_STATUSES:
        raise ServiceError(f"status must be one of success, failed, cancelled (got {status!r})")

    def finish(run: WorkflowRun) -> tuple[Completed, list[Busy]]:
        if refuse_ended and run.finished and run.status != END_STATUSES[status]:
            raise ServiceError(f"workflow {workflow_id} has already {run.status}; an instance that ended cannot be "
                               f"{END_STATUSES[status]} (nothing changed)", "conflict")
        shells = [] if run.finished else run.shells_in_flight()
        if not run.finished:
            run.cancel(END_STATUSES[status])
        return Completed(success=True, final_state=run.states["main"].flattened()), shells

    with refusals():
        done, shells = instances.transact(workflow_id, finish)
    calls.stop_commands(calls.local_run_dirs(shells), f"workflow {workflow_id} ended ({status})")
    return done


def interrupt(instances: InstanceRegistry, workflow_id: str, reason: str) -> StatusChanged:
    """Mark a running instance `interrupted`: the process running it was stopped (Ctrl-C
    during `run`).  Nothing else changes; `resume` goes on."""
    def mark(run: WorkflowRun) -> StatusChanged:
        if run.status in ("running", "waiting"):
            run.set_status("interrupted", reason or "the run was interrupted")
        return StatusChanged(workflow_id=workflow_id, status=run.status)

    with refusals():
        return instances.transact(workflow_id, mark)


# -- the person answers a question ------------------------------------------------------------
def question_for(instances: InstanceRegistry, workflow_id: str, step_id: str | None,
                 value: str) -> tuple[PendingQuestion, str]:
    """The question `value` answers (the one pending, or `step_id`), checked as a form's answer
    is checked (`choices`, `validation`), with the answer as it will be recorded (trimmed):
    a wrong value, no question pending, or one already answered is refused whole — nothing
    is recorded, no attempt is counted."""
    problem = not_text({"the answer": value})  # from a page's JSON, or argv's undecodable bytes: no store takes it
    if problem is not None:
        raise ServiceError(f"{problem}; nothing was recorded", "invalid")

    def look(run: WorkflowRun, _record: Any) -> tuple[list[PendingQuestion], str | None, str]:
        asked = questions(run)
        chosen = [q for q in asked if step_id in (None, q.step_id)]
        if len(chosen) != 1:
            return asked, None, value
        thread = run.machine.thread(chosen[0].task_id)
        step = run.machine.step_at(thread.frames[-1])
        verdict = accept_result(step, value) if isinstance(step, UserInputStep) else None
        if isinstance(verdict, Rejected):
            return chosen, verdict.problem, value
        return chosen, None, verdict.value if verdict is not None else value

    with refusals():
        asked, problem, kept = instances.read(workflow_id, look)
    if step_id is not None and not any(q.step_id == step_id for q in asked):
        raise ServiceError(f"workflow {workflow_id} has no question {step_id!r} waiting for an answer (answered "
                           f"already, or not asked yet){_waiting(asked)}", "conflict")
    if not asked:
        raise ServiceError(f"workflow {workflow_id} waits on no question; nothing was answered", "conflict")
    if len(asked) > 1:
        raise ServiceError(f"workflow {workflow_id} waits on {len(asked)} questions: name one with --step"
                           f"{_waiting(asked)}", "invalid")
    if problem is not None:
        raise ServiceError(f"not an answer to {asked[0].prompt!r}: {problem}; nothing was recorded", "invalid")
    return asked[0], kept


def answer(instances: InstanceRegistry, workflow_id: str, value: str, step_id: str | None) -> Answered:
    """Record the person's answer (checked first, so a wrong one records nothing); the run
    does not advance here — no command of the workflow runs in the answering process."""
    question, value = question_for(instances, workflow_id, step_id, value)

    def record(run: WorkflowRun) -> Completion:
        return run.complete(question.task_id, question.step_id, "success", value, None, True, "person")

    with refusals():
        done = instances.transact(workflow_id, record)
    if not done.success:
        raise ServiceError(f"the answer to {question.prompt!r} was not recorded: {done.error}", "conflict")
    return Answered(workflow_id=workflow_id, step_id=question.step_id, task_id=question.task_id,
                    question=question.prompt, answer=value)


def _waiting(asked: list[PendingQuestion]) -> str:
    return f" (waiting: {', '.join(q.step_id for q in asked)})" if asked else ""
