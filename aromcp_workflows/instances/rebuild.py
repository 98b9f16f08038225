"""An instance as it was committed at a past version: what `retry` and `fork` start from.

The store keeps an instance as one full snapshot plus a delta per commit since (see
`store.base.Store.save`); when it writes a new snapshot it drops the deltas the snapshot
before already held.  Checkpoints keep whole copies, each at the version it was taken
(`workflow_checkpoint`, `checkpoint_and_fail`, and the one the server takes before every
`parallel_foreach` of the main thread).  So version N can be rebuilt from:

- the store's snapshot, when it was written at or before N, plus the deltas up to N;
- else the newest checkpoint at or before N, plus the deltas after it up to N when those
  are still kept.

Anything older was compacted away; `body_at` then refuses and says which versions can be
rebuilt.  Which version a step was handed out in is in the history: the instance layer
stamps each `step_delivered` and `step_started` event with the version of its commit,
whose state is the state just before that step ran.
"""

from __future__ import annotations

from collections.abc import Sequence

from aromcp_workflows.instances.errors import ServiceError
from aromcp_workflows.store import Body, Checkpoint, HistoryEvent, InstanceRecord, Store, apply_deltas

OPENING_KINDS = ("step_delivered", "step_started")  # the events a step is handed out or started with


def body_at(store: Store, record: InstanceRecord, version: int) -> Body:
    """The instance's state and threads as committed at `version`, or why not."""
    wid = record.workflow_id
    if not 1 <= version <= record.version:
        raise ServiceError(f"workflow {wid} has versions 1 to {record.version}; version {version} is not one "
                           "of them (`aromcp-workflows debug` lists the steps and `status` the current version)",
                           "not_found")
    body = store.body_at(wid, version)
    if body is not None:
        return body
    points = store.checkpoints(wid)
    for point in reversed(points):
        body = _from_checkpoint(store, point, version)
        if body is not None:
            return body
    kept = ", ".join(f"{p.checkpoint_id} (version {_version_of(p)})" for p in points) or "none"
    raise ServiceError(f"version {version} of workflow {wid} can no longer be rebuilt: the store keeps it "
                       f"whole only from version {record.snapshot_version} on (older commits were compacted "
                       f"into that snapshot) and at its checkpoints ({kept}); pick a step, version or "
                       "checkpoint from those", "not_found")


def _version_of(point: Checkpoint) -> int:
    return int(point.snapshot.get("version") or 0)


def _from_checkpoint(store: Store, point: Checkpoint, version: int) -> Body | None:
    """`version` rebuilt from a checkpoint at or before it and the deltas after it, if kept."""
    start = _version_of(point)
    if not 1 <= start <= version:
        return None
    snap = point.snapshot
    if start == version:
        return Body(version, snap["state"], snap["threads"])
    since = store.deltas_since(point.workflow_id, start)
    if since is None or len(since.deltas) < version - start:
        return None
    record = InstanceRecord(workflow_id=point.workflow_id, workflow="", project_dir="",
                            state=snap["state"], threads=snap["threads"])
    apply_deltas(record, since.deltas[: version - start])
    return Body(version, record.state, record.threads)


def checkpoint_body(store: Store, record: InstanceRecord, checkpoint_id: str) -> Body:
    """The instance as a checkpoint keeps it, or why not."""
    point = store.get_checkpoint(record.workflow_id, checkpoint_id)
    if point is None:
        names = ", ".join(p.checkpoint_id for p in store.checkpoints(record.workflow_id)) or "none"
        raise ServiceError(f"workflow {record.workflow_id} has no checkpoint {checkpoint_id!r} (its checkpoints: "
                           f"{names})", "not_found")
    return Body(_version_of(point), point.snapshot["state"], point.snapshot["threads"])


def opening(events: Sequence[HistoryEvent], step_id: str) -> HistoryEvent | None:
    """The event that handed out or first started the latest delivery of `step_id`
    (a shell command's retries start it again: its first attempt counts)."""
    for event in reversed(events):
        if event.step_id == step_id and event.kind in OPENING_KINDS and not event.data.get("attempt"):
            return event
    return None


def opening_version(event: HistoryEvent, workflow_id: str) -> int:
    """The version an opening event was committed in, or why it is not known."""
    version = event.data.get("version")
    if not isinstance(version, int):
        raise ServiceError(f"step {event.step_id} of workflow {workflow_id} was handed out by an older server, "
                           "which did not record the version it was handed out in; fork from a version or a "
                           "checkpoint instead", "conflict")
    return version
