"""Rows to records: what both stores select, decoded alike (the same columns in the same order).

Each function names the columns it reads, in order; the SQL that selects them lives with
each database (`sqlite.py`, `pg_statements.py`, `queries.py`).  JSON columns are decoded
afresh on every read, so no two callers share a value.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from aromcp_workflows.store.base import apply_deltas
from aromcp_workflows.store.records import (
    Body,
    Checkpoint,
    CommitsSince,
    HistoryEvent,
    InstanceRecord,
    InstanceSummary,
)


def commits_since_from(row: Sequence[Any], deltas: list[str], since: int) -> CommitsSince | None:
    """`CommitsSince` from `status, current_steps, error, version, updated_at, snapshot_version`,
    or None when the deltas after `since` are not all there (each version has at most one
    delta, so as many deltas as versions means none is missing)."""
    version = int(row[3])
    if len(deltas) != version - since:
        return None
    return CommitsSince(row[0], json.loads(row[1]), row[2], version, row[4], deltas, int(row[5]))


def body_from(workflow_id: str, row: Sequence[Any], deltas: Sequence[str], version: int) -> Body | None:
    """`Body` at `version` from the snapshot columns `state, threads, snapshot_version` and
    the deltas after that snapshot up to `version`, or None when some are missing."""
    snapshot_version = int(row[2])
    if snapshot_version > version or len(deltas) != version - snapshot_version:
        return None
    record = InstanceRecord(workflow_id=workflow_id, workflow="", project_dir="",
                            state=json.loads(row[0]), threads=json.loads(row[1]))
    apply_deltas(record, deltas)
    return Body(version, record.state, record.threads)


def record_from_row(row: Sequence[Any]) -> InstanceRecord:
    """An `InstanceRecord` from `workflow_id, workflow, project_dir, status, definition,
    inputs, state, threads, current_steps, error, version, created_at, updated_at`."""
    return InstanceRecord(
        workflow_id=row[0], workflow=row[1], project_dir=row[2], status=row[3],
        definition=json.loads(row[4]), inputs=json.loads(row[5]), state=json.loads(row[6]),
        threads=json.loads(row[7]), current_steps=json.loads(row[8]), error=row[9],
        version=int(row[10]), created_at=row[11], updated_at=row[12],
    )


def summary_from_row(row: Sequence[Any]) -> InstanceSummary:
    """An `InstanceSummary` from `workflow_id, workflow, project_dir, status, current_steps,
    error, version, created_at, updated_at`."""
    return InstanceSummary(
        workflow_id=row[0], workflow=row[1], project_dir=row[2], status=row[3],
        current_steps=json.loads(row[4]), error=row[5], version=int(row[6]),
        created_at=row[7], updated_at=row[8],
    )


def stored_record(row: Sequence[Any], deltas: Sequence[str]) -> InstanceRecord:
    """The record a `load` returns from its row (`record_from_row`'s columns, then
    snapshot_version) and the deltas written since that snapshot, applied."""
    record = record_from_row(row)
    record.snapshot_version, record.body_bytes = int(row[13]), len(row[6]) + len(row[7])
    return apply_deltas(record, deltas)


def events_from_rows(rows: Sequence[Sequence[Any]]) -> list[HistoryEvent]:
    """Events in commit order from rows read newest first (how `limit` keeps the latest)."""
    return [event_from_row(row) for row in reversed(rows)]


def checkpoint_from_row(row: Sequence[Any]) -> Checkpoint:
    """A `Checkpoint` from `checkpoint_id, workflow_id, step_id, reason, created_at, snapshot`;
    its snapshot is decoded afresh, so no caller shares it with another."""
    return Checkpoint(row[0], row[1], row[2], row[3], row[4], json.loads(row[5]))


def event_from_row(row: Sequence[Any]) -> HistoryEvent:
    """A `HistoryEvent` from `seq, workflow_id, kind, step_id, task_id, timestamp, data`."""
    return HistoryEvent(seq=int(row[0]), workflow_id=row[1], kind=row[2], step_id=row[3], task_id=row[4],
                        timestamp=row[5], data=json.loads(row[6]))
