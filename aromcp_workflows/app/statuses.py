"""How an instance stands, as `status` tells it: one instance whole, or a row of a listing.

Built from the live run (one instance) or the stored record (a listing), so
`workflow_status`, `aromcp-workflows status` and the page read the same words.  Who each
step in hand waits for, and whether the run is stalled, are derived when read, from the
threads' pending steps (when each was handed out) and when an agent last called for each
thread (`WorkflowRun.note_call`): nothing is stored for them beyond what commits write anyway.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from aromcp_workflows.app.results import ForkOrigin, InstanceRow, InstanceStatus, StepInHand, TaskCounts
from aromcp_workflows.interpreter import ShellClaim, WorkflowRun, shown_question
from aromcp_workflows.safety import Masker
from aromcp_workflows.store import InstanceRecord, InstanceSummary

log = logging.getLogger("aromcp_workflows")
STALE_ENV = "AROMCP_STALE_AFTER"
DEFAULT_STALE_AFTER_S = 600.0


def stale_after() -> float:
    """Seconds an agent may hold a step without calling before the run is `stalled`."""
    raw = os.environ.get(STALE_ENV, "")
    if not raw:
        return DEFAULT_STALE_AFTER_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value <= 0:
        log.warning("%s=%r is not a number of seconds above 0; using %.0f", STALE_ENV, raw, DEFAULT_STALE_AFTER_S)
        return DEFAULT_STALE_AFTER_S
    return value


def instance_status(run: WorkflowRun, record: InstanceRecord) -> InstanceStatus:
    tasks = [t for tid, t in run.threads.items() if tid != "main"]
    counts = TaskCounts(tasks_total=len(tasks), tasks_completed=sum(t.status == "completed" for t in tasks),
                        tasks_failed=sum(t.status == "failed" for t in tasks),
                        tasks_running=sum(t.status == "running" for t in tasks))
    in_hand, stalled = _standing_of(run, record)
    masker = run.masker()
    return InstanceStatus(workflow_id=run.workflow_id, workflow=record.workflow, status=run.status,
                          current_steps=list(record.current_steps), progress=counts,
                          error=masker.mask_text(run.error) if run.error else None, version=record.version,
                          forked_from=None if (origin := run.machine.forked_from) is None else ForkOrigin(**origin),
                          steps_in_hand=[_masked(masker, s) for s in in_hand] or None,
                          stalled=stalled if run.status in ("running", "waiting") else None)


def standing(threads: Mapping[str, Mapping[str, Any]], last_calls: Mapping[str, str], updated_at: str,
             status: str, now: datetime | None = None) -> tuple[list[StepInHand], bool]:
    """Each step in hand and who it waits for; whether an agent holding one is idle past
    `stale_after()`.  `threads` as stored (JSON); `updated_at` stands in for when a step of an
    older release was handed out (it kept no time)."""
    if status not in ("running", "waiting"):
        return [], False
    now = now or datetime.now(UTC)
    limit, found = stale_after(), []
    fanned = _fanned_out(threads)
    for tid, thread in threads.items():
        task = None if tid == "main" else tid
        pending = thread.get("pending")
        if pending:
            found.append(_in_hand(pending, task, last_calls.get(tid), updated_at, now))
        elif thread.get("status") == "pending" and tid in fanned:  # no sub-agent pulled it yet
            since = fanned[tid]
            found.append(StepInHand(step_id=f"{tid} (not started)", task_id=task, waiting_for="agent", since=since,
                                    for_s=_seconds(now, since), idle_s=_seconds(now, since)))
    found = [s.model_copy(update={"stalled": True}) if s.waiting_for == "agent" and (s.idle_s or 0) > limit else s
             for s in found]
    return found, any(s.stalled for s in found)


def _in_hand(pending: Mapping[str, Any], task: str | None, last_call: str | None, updated_at: str,
             now: datetime) -> StepInHand:
    data, step = pending.get("data") or {}, pending.get("step") or {}
    since = str(data.get("since") or updated_at)
    held = StepInHand(step_id=str(pending.get("step_id")), task_id=task, waiting_for="agent", since=since,
                      for_s=_seconds(now, since))
    if pending.get("kind") == "shell":
        return held.model_copy(update={"waiting_for": "command", "command": _line(data.get("command")),
                                       "stalled": True if _runs_nowhere(data) else None})
    if pending.get("kind") == "parallel":
        return held.model_copy(update={"waiting_for": "task", "tasks": [str(t) for t in data.get("task_ids") or []]})
    if step.get("type") == "user_input":
        question = _line((step.get("definition") or {}).get("prompt"))
        return held.model_copy(update={"waiting_for": "user", "question": question})
    ages = [a for a in (held.for_s, _seconds(now, last_call) if last_call else None) if a is not None]
    return held.model_copy(update={"idle_s": min(ages) if ages else None})  # since it was handed out, or called for


def _runs_nowhere(data: Mapping[str, Any]) -> bool:
    """Whether the server that runs a pending command is gone (it died; on another host, its
    lease ran out): the command is no longer waited for, and the run stands still until an
    agent's next call takes it over (`app/adoption.py`), so it is stalled, not working.  A
    command this process runs is not judged (`owner.abandoned` would call it lost)."""
    from aromcp_workflows.shell import owner as owners

    claim, me = ShellClaim.from_data(data), owners.current()
    return not owners.started_here(claim, me) and owners.abandoned(claim, me, time.time()) is not None


def _masked(masker: Masker, held: StepInHand) -> StepInHand:
    """A question or a command may carry a secret's text: masked as replies are."""
    return StepInHand.model_validate(masker(held.model_dump(exclude_none=True)))


def _fanned_out(threads: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Task id -> when the fan-out that lists it was handed out."""
    found: dict[str, str] = {}
    for thread in threads.values():
        pending = thread.get("pending") or {}
        if pending.get("kind") == "parallel":
            since = str((pending.get("data") or {}).get("since") or "")
            for task in (pending.get("data") or {}).get("task_ids") or []:
                found[str(task)] = since
    return {task: since for task, since in found.items() if since}


def _seconds(now: datetime, since: str) -> float | None:
    try:
        then = datetime.fromisoformat(since.replace("Z", "+00:00"))
    except ValueError:
        return None
    return round(max(0.0, (now - then).total_seconds()), 1)


def _line(text: Any) -> str | None:
    return None if text is None else shown_question(text)


def rows_of(summaries: list[InstanceSummary], stalled: Mapping[str, bool] | None = None) -> list[InstanceRow]:
    """A listing's rows, most recently updated first (as the store gives them); `stalled`
    for the running ones whose standing was read."""
    now = datetime.now(UTC)
    return [InstanceRow(workflow_id=item.workflow_id, workflow=item.workflow, status=item.status,
                        current_steps=item.current_steps,
                        age_seconds=round((now - datetime.fromisoformat(item.created_at)).total_seconds(), 1),
                        updated_at=item.updated_at, error=item.error,
                        stalled=(stalled or {}).get(item.workflow_id))
            for item in summaries]


def _standing_of(run: WorkflowRun, record: InstanceRecord) -> tuple[list[StepInHand], bool]:
    threads = {tid: thread.to_json() for tid, thread in run.threads.items()}
    return standing(threads, run.machine.last_calls, record.updated_at, run.status)


def stalled_of_run(run: WorkflowRun, record: InstanceRecord) -> bool:
    """Whether a live instance is stalled (a listing's row: no status is built for it)."""
    return _standing_of(run, record)[1]


def stalled_of(record: InstanceRecord) -> bool:
    """Whether a stored instance is stalled (a listing's row: no run is built for it)."""
    _, stalled = standing(record.threads, (record.state or {}).get("last_calls") or {}, record.updated_at,
                          record.status)
    return stalled
