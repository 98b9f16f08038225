"""How an instance stands, as `status` tells it: one instance whole, or a row of a listing.

Built from the live run (one instance) or the store's summaries (a listing), so
`workflow_status`, `aromcp-workflows status` and the page read the same words.
"""

from __future__ import annotations

from datetime import UTC, datetime

from aromcp_workflows.app.results import ForkOrigin, InstanceRow, InstanceStatus, TaskCounts
from aromcp_workflows.interpreter import WorkflowRun
from aromcp_workflows.store import InstanceRecord, InstanceSummary


def instance_status(run: WorkflowRun, record: InstanceRecord) -> InstanceStatus:
    tasks = [t for tid, t in run.threads.items() if tid != "main"]
    counts = TaskCounts(tasks_total=len(tasks), tasks_completed=sum(t.status == "completed" for t in tasks),
                        tasks_failed=sum(t.status == "failed" for t in tasks),
                        tasks_running=sum(t.status == "running" for t in tasks))
    return InstanceStatus(workflow_id=run.workflow_id, workflow=record.workflow, status=run.status,
                          current_steps=list(record.current_steps), progress=counts,
                          error=run.masker().mask_text(run.error) if run.error else None, version=record.version,
                          forked_from=None if (origin := run.machine.forked_from) is None else ForkOrigin(**origin))


def rows_of(summaries: list[InstanceSummary]) -> list[InstanceRow]:
    """A listing's rows, most recently updated first (as the store gives them)."""
    now = datetime.now(UTC)
    return [InstanceRow(workflow_id=item.workflow_id, workflow=item.workflow, status=item.status,
                        current_steps=item.current_steps,
                        age_seconds=round((now - datetime.fromisoformat(item.created_at)).total_seconds(), 1),
                        updated_at=item.updated_at, error=item.error)
            for item in summaries]
