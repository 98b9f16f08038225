"""Repairing a run: `retry` a failed instance at the step that failed, `fork` a new one from
any point of another.

Both start from the instance as it was committed at a past version (`app.rebuild`), put
the step back before it was handed out (`WorkflowRun.rewind`) and commit through the
instance layer like any other change, so `run --resume` (or any agent) then drives the
result as it would any instance.

- **retry**: the state as it was before the failed step.  A step that was handed out or
  started (an agent step, a command, a fan-out) is rebuilt at the commit that did it, so
  whatever the step wrote before it failed (the agent's state updates, a fan-out's tasks)
  is gone with the error handling that followed; a step that failed inside the server in
  the call that ran it wrote nothing itself, and the state it failed with is kept on the
  failed instance.  The history says what was restored (`workflow_retry`).
- **fork**: a new instance from a step (the commit that handed it out), a version or a
  checkpoint, with raw/state edits applied and the computed fields recomputed; it records
  `forked_from` and the original is not written to.  The person (CLI, page) may fork from
  anywhere and edit any raw or state path.  The agent may not edit a path the user decided,
  and a fork of the agent's that would start after user answers carries them forward:
  `ConsentNeeded` until the user allows it (the MCP layer asks them).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aromcp_workflows.app.results import Forked, ForkOrigin, Retried
from aromcp_workflows.errors import ErrorKind, KindedError
from aromcp_workflows.instances import Hint, InstanceRegistry, ServiceError, rebuild
from aromcp_workflows.interpreter import UserAnswer, WorkflowRun, Writer, answers_in, owner_of, refusal
from aromcp_workflows.state import StateError, Update
from aromcp_workflows.store import Body, InstanceRecord

JSON_TYPES: dict[str, tuple[type, ...]] = {  # the types `state_schema.raw/state` may declare
    "string": (str,), "number": (int, float), "integer": (int,), "boolean": (bool,),
    "array": (list,), "object": (dict,),
}


@dataclass(frozen=True)
class ForkPoint:
    """Where to fork from: one of a step, a version, a checkpoint; none: as it stands now."""

    step_id: str | None = None
    version: int | None = None
    checkpoint_id: str | None = None


# -- retry -------------------------------------------------------------------------------------
def retry(registry: InstanceRegistry, workflow_id: str) -> Retried:
    record = registry.load(workflow_id)
    if record.status != "failed":
        raise ServiceError(f"workflow {workflow_id} is {record.status}, not failed: only a failed instance can be "
                           "retried (fork makes a new instance from any point of this one)", "conflict")
    run = registry.run_from(record, Body(record.version, record.state, record.threads))
    step_id = _failed_step_id(run, workflow_id)
    counters, retries, trace = dict(run.machine.counters), run.machine.retries, run.machine.trace_context
    found = rebuild.opening(registry.history(workflow_id, list(rebuild.OPENING_KINDS)), step_id)
    restored = None
    if found is not None:  # handed out or started: the commit that did it holds the state before it
        restored = rebuild.opening_version(found, workflow_id)
        run = registry.run_from(record, rebuild.body_at(registry.store, record, restored))
        run.rewind(step_id)
        # fresh task ids: a late sub-agent of the failed try finds none
        run.machine.counters, run.machine.retries = counters, retries
        run.machine.trace_context = trace  # the same trace, whose root the failure may have ended
        run.machine.set_status("running")
    else:
        run.reopen_failed()
    run.machine.record("workflow_retry", step_id, None, {"reason": "retry", "restored_version": restored})
    registry.replace(workflow_id, run, record.version)
    return Retried(workflow_id=workflow_id, status=run.status, step_id=step_id, restored_version=restored)


def _failed_step_id(run: WorkflowRun, workflow_id: str) -> str:
    """The id of the main thread's failed step, or why the instance cannot be retried."""
    failed = run.failed_step()
    if failed is None or failed.step_id is None:
        raise ServiceError(f"workflow {workflow_id} failed outside any step ({run.error}); there is no step to run "
                           "again — fork it from a step or version instead", "conflict")
    if failed.by_exit:
        raise ServiceError(f"workflow {workflow_id} ended at its own `exit` step {failed.step_id} with status "
                           "failed; running that step again would end it the same way — fork it from an "
                           "earlier step with the state changed instead", "conflict")
    return failed.step_id


class ConsentNeeded(KindedError):
    """The agent's fork would reuse the user's answers: the user must allow it first.
    `question` is what to ask them, in one paragraph."""

    kind: ErrorKind = "refused"

    def __init__(self, question: str, answers: list[UserAnswer]) -> None:
        super().__init__(f"{question} Nothing was created: the user has not allowed it. Fork from the command "
                         "line (`aromcp-workflows fork`) or the page instead, where the person decides.")
        self.question, self.answers = question, answers


# -- fork --------------------------------------------------------------------------------------
def fork(registry: InstanceRegistry, workflow_id: str, point: ForkPoint, edits: Mapping[str, Any],
         by: Writer = "person", consented: bool = False) -> Forked:
    """`by="agent"`: edits of a user-owned path are refused, and a copy that starts after user
    answers needs the user's `consented`; the person may do both."""
    record = registry.load(workflow_id)
    body = _body_for(registry, record, point)
    run = registry.run_from(record, body)
    if point.step_id is not None:
        run.rewind(point.step_id)
    run.rewind_agent_steps()
    main = run.threads["main"]
    if main.done:
        where = f"step {point.step_id}" if point.step_id else f"version {body.version}"
        raise ServiceError(f"at {where} workflow {workflow_id} had already ended ({main.status}); fork it at an "
                           "earlier step or version (`aromcp-workflows debug` lists its steps)", "conflict")
    if by == "agent":
        _refuse_owned_edits(run, edits)
        _consent(run, workflow_id, point, body.version, consented, edits)
    origin = ForkOrigin(workflow_id=workflow_id, version=body.version, step_id=point.step_id,
                        checkpoint_id=point.checkpoint_id, edits=list(edits))
    run.rename(f"wf_{uuid.uuid4().hex[:12]}")
    run.machine.forked_from = origin.model_dump()
    run.machine.record("forked", point.step_id, None, run.machine.forked_from)
    run.machine.set_status("running")
    if edits:
        _edit(run, edits, by)
    registry.create(run, record.workflow, record.definition)
    return Forked(workflow_id=run.workflow_id, status=run.status, forked_from=origin,
                  current_steps=[t.pending.step_id for t in run.threads.values() if t.pending is not None],
                  state=run.states["main"].flattened())


def _body_for(registry: InstanceRegistry, record: InstanceRecord, point: ForkPoint) -> Body:
    named = [v for v in (point.step_id, point.version, point.checkpoint_id) if v is not None]
    if len(named) > 1:
        raise ServiceError("name one point to fork from: a step (at), a version, or a checkpoint — not several")
    if point.checkpoint_id is not None:
        return rebuild.checkpoint_body(registry.store, record, point.checkpoint_id)
    if point.version is not None:
        return rebuild.body_at(registry.store, record, point.version)
    if point.step_id is not None:
        found = rebuild.opening(registry.history(record.workflow_id, list(rebuild.OPENING_KINDS)), point.step_id)
        if found is None:
            raise ServiceError(f"workflow {record.workflow_id} never handed out or started a step "
                               f"{point.step_id!r}; name a step as `aromcp-workflows debug` lists it (an agent "
                               "step, command or fan-out, with its task and loop iteration: "
                               "fix_batch_1.fix_files.apply#2)", "not_found")
        return rebuild.body_at(registry.store, record, rebuild.opening_version(found, record.workflow_id))
    return Body(record.version, record.state, record.threads)


def _refuse_owned_edits(run: WorkflowRun, edits: Mapping[str, Any]) -> None:
    """The agent's edits may not touch what the user decided (before anything is checked)."""
    for path in edits:
        answer = owner_of(run.machine.owners, "main", path)
        if answer is not None:
            raise ServiceError(refusal(path, answer), "refused")


def _consent(run: WorkflowRun, workflow_id: str, point: ForkPoint, version: int, consented: bool,
             edits: Mapping[str, Any]) -> None:
    """A copy that starts after user answers reuses them: only with the user's consent, asked
    with everything the agent changes in the copy (its edits), not only what it keeps."""
    carried = answers_in(run.machine.owners)
    if not carried or consented:
        return
    where = (f"step {point.step_id}" if point.step_id else f"checkpoint {point.checkpoint_id}"
             if point.checkpoint_id else f"version {version}")
    reused = "; ".join(f"{a.question!r} → {_shown(_answer_value(run, a))}" for a in carried)
    sets = ", ".join(f"{path} = {_shown(value)}" for path, value in edits.items())
    changed = f" It also sets {sets}." if sets else ""
    raise ConsentNeeded(f"The agent asks to start a copy of {workflow_id} at {where}, reusing your "
                        f"answer{'s' if len(carried) > 1 else ''}: {reused}.{changed} Allow?", carried)


def consent_to_roll_back(registry: InstanceRegistry, workflow_id: str, checkpoint_id: str) -> None:
    """An instance taken back to a checkpoint runs its steps after it again: with the user's
    answers it holds, only when the user allows it (`ConsentNeeded`)."""
    point = registry.last_checkpoint(workflow_id, checkpoint_id)
    if point is None:
        return  # the roll-back itself says the checkpoint does not exist
    carried = answers_in((point.snapshot.get("state") or {}).get("owners") or {})
    if carried:
        reused = "; ".join(repr(a.question) for a in carried)
        raise ConsentNeeded(f"The agent asks to take {workflow_id} back to checkpoint {checkpoint_id} and run its "
                            f"steps after it again, reusing your answer{'s' if len(carried) > 1 else ''} to "
                            f"{reused}. Allow?", carried)


def _answer_value(run: WorkflowRun, answer: UserAnswer) -> Any:
    try:
        return run.states["main"].read([answer.path]).get(answer.path)
    except Exception:  # an answer of an include's own state: its question says enough
        return "…"


def _edit(run: WorkflowRun, edits: Mapping[str, Any], by: Writer) -> None:
    """Apply `raw.*`/`state.*` edits to the main state as one batch (computed fields
    recomputed), each checked against the fields `state_schema` declares."""
    schema = run.bundle.main.definition.state_schema
    for path, value in edits.items():
        tier, _, rest = path.partition(".")
        if tier == "computed" or path in schema.computed:
            raise ServiceError(f"cannot edit {path}: computed fields are worked out from raw and state and "
                               "recomputed after the edits; edit what they read instead", hint=Hint.FIELD_READS)
        if tier not in ("raw", "state"):
            raise ServiceError(f"cannot edit {path!r}: an edit's path starts with raw. or state. (e.g. raw.files)")
        declared = (schema.raw if tier == "raw" else schema.state).get(rest)
        expected = JSON_TYPES.get(declared) if isinstance(declared, str) else None
        if expected is not None and value is not None and (
                not isinstance(value, expected) or (isinstance(value, bool) and bool not in expected)):
            raise ServiceError(f"cannot set {path} to {_shown(value)}: state_schema.{tier} declares {rest} as "
                               f"{declared}")
    try:
        run.agent_update(None, [Update(path=path, operation="set", value=value) for path, value in edits.items()],
                         by=by, trigger="fork")
    except StateError as exc:
        raise ServiceError(f"the edits were refused: {exc}") from None


def _shown(value: Any, limit: int = 60) -> str:
    import json

    text = json.dumps(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
