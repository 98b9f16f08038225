"""The records the store keeps and hands back: instances, history events, checkpoints.

Plain dataclasses holding JSON-safe data: the store never interprets `state`, `threads`
or `definition`, it only keeps them safe and versioned.  Every other module of the store
(and every caller) speaks in these; they import nothing of ours.

Timestamps are ISO-8601 strings in UTC with microseconds and an explicit offset
(``2026-11-22T02:48:07.123456+00:00``, see `utc_now`): readable in history dumps, sortable
as text, and identical across processes and machines.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

# `interrupted`: the process running it was stopped (Ctrl-C during `run`); it resumes.
StatusValue = Literal["running", "waiting", "completed", "failed", "cancelled", "interrupted"]
STATUSES: tuple[str, ...] = ("running", "waiting", "completed", "failed", "cancelled", "interrupted")


def utc_now() -> str:
    """The store's timestamp format: ISO-8601, UTC, microseconds, explicit offset."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


@dataclass
class InstanceRecord:
    """Everything needed to resume one workflow instance after a restart.

    `definition` is a JSON snapshot of the workflow definition taken at start, so editing
    the YAML file never changes a running instance. `state` and `threads` are opaque JSON
    snapshots owned by the state store and the interpreter. `version` is managed by the
    store: `create` sets it to 1 and every successful `save` increments it.
    """

    workflow_id: str
    workflow: str
    project_dir: str
    status: StatusValue = "running"
    definition: dict[str, Any] = field(default_factory=dict)
    inputs: dict[str, Any] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    threads: dict[str, Any] = field(default_factory=dict)
    current_steps: list[str] = field(default_factory=list)
    error: str | None = None
    version: int = 0
    created_at: str = ""
    updated_at: str = ""
    # Where the stored body stands (set by the store): the version of its last full
    # snapshot, how many deltas were written since, and their size against the snapshot's.
    snapshot_version: int = 0
    deltas: int = 0
    delta_bytes: int = 0
    body_bytes: int = 0

    def snapshot(self) -> dict[str, Any]:
        """The part of the record a checkpoint keeps (what `workflow_resume` restores)."""
        return {
            "status": self.status,
            "state": self.state,
            "threads": self.threads,
            "current_steps": list(self.current_steps),
            "error": self.error,
            "version": self.version,
        }


@dataclass(frozen=True)
class CommitsSince:
    """An instance's commits after a version its reader holds (`Store.deltas_since`)."""

    status: StatusValue
    current_steps: list[str]
    error: str | None
    version: int
    updated_at: str
    deltas: list[str]  # JSON texts, oldest first: exactly `version - the reader's version` of them
    snapshot_version: int  # the full snapshot the store holds now (the deltas may reach back past it)



@dataclass(frozen=True)
class Body:
    """An instance's two large JSON columns as committed at one version (`Store.body_at`)."""

    version: int
    state: dict[str, Any]
    threads: dict[str, Any]



@dataclass(frozen=True)
class InstanceSummary:
    """One row of `list_instances`: the record without its large JSON blobs."""

    workflow_id: str
    workflow: str
    project_dir: str
    status: StatusValue
    current_steps: list[str]
    error: str | None
    version: int
    created_at: str
    updated_at: str


@dataclass(frozen=True)
class InstanceFilter:
    """Which instances a paginated listing shows (`Store.page_instances`); None: any."""

    project_dir: str | None = None
    statuses: tuple[str, ...] | None = None
    workflow: str | None = None


@dataclass(frozen=True)
class InstancePage:
    """One page of instances, newest started first, and how many match in all."""

    rows: list[InstanceSummary]
    total: int


@dataclass(frozen=True)
class InstanceGroup:
    """How many instances share a workflow, project and status (`Store.instance_groups`):
    what a listing offers as filters, counted without reading a single row."""

    workflow: str
    project_dir: str
    status: StatusValue
    count: int


@dataclass
class HistoryEvent:
    """One append-only entry of an instance's history (the source of truth for debugging).

    `seq` is assigned by the store (1, 2, 3 ... per instance, in commit order); leave it
    None when appending. An empty `workflow_id` or `timestamp` is filled in by the store.
    """

    kind: str
    step_id: str | None = None
    task_id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    workflow_id: str = ""
    timestamp: str = ""
    seq: int | None = None


@dataclass(frozen=True)
class Checkpoint:
    """A saved point an instance can be resumed from (`workflow_checkpoint`).

    `checkpoint_id` is an opaque token (``cp-<n>``, n counting per instance); `snapshot`
    is what the caller passed, typically `InstanceRecord.snapshot()`.
    """

    checkpoint_id: str
    workflow_id: str
    step_id: str | None
    reason: str
    created_at: str
    snapshot: dict[str, Any]


@dataclass(frozen=True)
class StartKey:
    """The idempotency key of one `workflow_start`, kept with the instance it started.

    `key` is the client's token (unique per project); `request` a fingerprint of what the
    start asked for (workflow and inputs), so that the same key sent again with another
    request is told apart from a resend of the same one."""

    key: str
    request: str

