"""The rules of a write, the same in both stores: only the SQL around them differs.

Each write (`create`, `save`, `add_checkpoint`) is checked and encoded here into a plan
before any SQL runs, so bad input fails with nothing written; after the commit, the
record and its events are brought up to what was written (`note_created`,
`note_committed`).  Which deltas a new full snapshot drops is decided here too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aromcp_workflows.store.base import ConflictError, NotFoundError, StoreError
from aromcp_workflows.store.records import STATUSES, Checkpoint, HistoryEvent, InstanceRecord, utc_now

# What `json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)` builds
# on every call; made once, it saves about 1 µs per text (a save encodes three or more).
_COLUMN_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def json_text(value: Any, what: str) -> str:
    """JSON text for a column; a non-JSON value is the caller's bug, named precisely."""
    try:
        return _COLUMN_JSON.encode(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"cannot store {what}: it is not JSON-serializable ({exc})") from exc


def _check_status(record: InstanceRecord) -> None:
    """Refuse a status no reader understands before it reaches the database."""
    if record.status not in STATUSES:
        raise ValueError(f"status of {record.workflow_id!r} must be one of {', '.join(STATUSES)}, "
                         f"not {record.status!r}")


def snapshot_drops_through(record: InstanceRecord, new_version: int, delta: str | None,
                           snapshot: bool) -> int | None:
    """For a save (see `Store.save`): None when it writes a delta only; else it writes a
    full snapshot, and the deltas up to the returned version go — those the previous
    snapshot already held when this one comes with its own delta (copies behind may
    still need the rest), all of them when it comes without one."""
    if delta is not None and not snapshot:
        return None
    return record.snapshot_version if delta is not None else new_version


def note_saved(record: InstanceRecord, delta: str | None, body: Mapping[str, str]) -> None:
    """Update the snapshot bookkeeping of a record its store has just saved."""
    if delta is None:
        record.snapshot_version, record.deltas, record.delta_bytes = record.version, 0, 0
        record.body_bytes = len(body["state"]) + len(body["threads"])
    else:
        record.deltas += 1
        record.delta_bytes += len(delta)


def event_texts(workflow_id: str, events: Sequence[HistoryEvent], now: str) -> list[str]:
    """The `data` JSON text of each event, checked before anything is written: an event
    must have a kind and may name no other instance.  Fills in each event's `workflow_id`
    and an empty `timestamp` in place (`seq` comes from the database: `number_events`)."""
    texts = []
    for event in events:
        if not event.kind:
            raise ValueError(f"history event for {workflow_id!r} has an empty kind")
        if event.workflow_id and event.workflow_id != workflow_id:
            raise ValueError(
                f"history event of kind {event.kind!r} names instance "
                f"{event.workflow_id!r} but is being saved with {workflow_id!r}"
            )
        event.workflow_id = workflow_id
        event.timestamp = event.timestamp or now
        texts.append(json_text(event.data, f"history event {event.kind!r} data"))
    return texts


def number_events(events: Sequence[HistoryEvent], first: int | None) -> None:
    """Give written events their seq numbers (first, first + 1, …), as the store assigned them
    (None: a write confirmed after its connection broke, whose numbers could not be read)."""
    if first is None:
        return
    for offset, event in enumerate(events):
        event.seq = first + offset


@dataclass(slots=True)
class PlannedCreate:
    """What a `create` writes, encoded and checked before any SQL runs, so bad input fails
    with nothing written.  `values` are the columns `record_from_row` reads, in its order."""

    now: str
    created_at: str
    values: tuple[Any, ...]
    events: list[HistoryEvent]
    event_data: list[str]


def plan_create(record: InstanceRecord, events: Iterable[HistoryEvent]) -> PlannedCreate:
    """Check and encode a new instance at version 1 (see `Store.create`)."""
    now = utc_now()
    created, wid = record.created_at or now, record.workflow_id
    if not wid or any(ch.isspace() for ch in wid):
        raise ValueError(f"workflow_id must be a non-empty token without whitespace: {wid!r}")
    _check_status(record)
    steps = json_text(list(record.current_steps), f"the current_steps of {wid!r}")
    values = (wid, record.workflow, record.project_dir, record.status,
              json_text(record.definition, f"the definition of {wid!r}"),
              json_text(record.inputs, f"the inputs of {wid!r}"),
              json_text(record.state, f"the state of {wid!r}"),
              json_text(record.threads, f"the threads of {wid!r}"),
              steps, record.error, 1, created, now)
    events = list(events)
    return PlannedCreate(now, created, values, events, event_texts(wid, events, now))


def note_created(record: InstanceRecord, plan: PlannedCreate, first_seq: int) -> int:
    """Bring `record` and its events up to the instance its store has just created."""
    number_events(plan.events, first_seq)
    record.version, record.created_at, record.updated_at = 1, plan.created_at, plan.now
    note_saved(record, None, {"state": plan.values[6], "threads": plan.values[7]})
    return 1


@dataclass(slots=True)
class PlannedSave:
    """What a `save` writes, encoded and checked before any SQL runs (see `Store.save`).

    `body` holds the `state`/`threads` texts when the save writes a full snapshot (and is
    empty when it writes a delta only); `drop_through` is then the version up to which
    the stored deltas go (`snapshot_drops_through`)."""

    now: str
    version: int  # the version the save writes: the expected one + 1
    current_steps: str
    body: dict[str, str]
    drop_through: int | None
    delta: str | None
    events: list[HistoryEvent]
    event_data: list[str]
    definition: tuple[str, str] | None = None  # texts of a new definition snapshot and inputs

    @property
    def full(self) -> bool:
        """Whether the save writes a full snapshot (else only its delta)."""
        return self.drop_through is not None


def plan_save(record: InstanceRecord, expected_version: int, events: Iterable[HistoryEvent],
              encoded: Mapping[str, str] | None, delta: str | None, snapshot: bool,
              definition: Mapping[str, Any] | None = None) -> PlannedSave:
    """Check and encode one save; `encoded` may carry the texts of `state`/`threads`.  With
    a new `definition`, the body is written whole (the deltas before it read the old one)."""
    now, new_version, wid = utc_now(), expected_version + 1, record.workflow_id
    _check_status(record)
    texts = None
    if definition is not None:
        texts = (json_text(dict(definition), f"the definition of {wid!r}"),
                 json_text(record.inputs, f"the inputs of {wid!r}"))
        delta = None
    drop_through = snapshot_drops_through(record, new_version, delta, snapshot)
    body: dict[str, str] = {}
    if drop_through is not None:
        encoded = encoded or {}
        body = {"state": encoded.get("state") or json_text(record.state, f"the state of {wid!r}"),
                "threads": encoded.get("threads") or json_text(record.threads, f"the threads of {wid!r}")}
    steps = json_text(list(record.current_steps), f"the current_steps of {wid!r}")
    events = list(events)
    return PlannedSave(now, new_version, steps, body, drop_through, delta, events,
                       event_texts(wid, events, now), texts)


def save_refused(workflow_id: str, expected_version: int, found: Sequence[Any] | None,
                 where: str) -> StoreError:
    """Why a compare-and-set wrote nothing, from the instance's `version` row read after
    it (None: there is no such instance any more): a user needs to know which it was."""
    if found is None:
        return NotFoundError(workflow_id, where)
    return ConflictError(workflow_id, expected_version, int(found[0]))


def note_committed(record: InstanceRecord, plan: PlannedSave, first_seq: int | None) -> int:
    """Bring `record` and its events up to the save its store has just committed; the new version."""
    number_events(plan.events, first_seq)
    record.version, record.updated_at = plan.version, plan.now
    note_saved(record, None if plan.full else plan.delta, plan.body)
    return plan.version


@dataclass(slots=True)
class PlannedCheckpoint:
    """What `add_checkpoint` writes, encoded before any SQL runs; the store numbers it
    (``cp-<n>``, n counting per instance) inside its write."""

    workflow_id: str
    step_id: str | None
    reason: str
    now: str
    text: str  # the snapshot's JSON text

    def row(self, n: int) -> tuple[Any, ...]:
        """`workflow_id, n, checkpoint_id, step_id, reason, created_at, snapshot` of checkpoint n."""
        return (self.workflow_id, n, _checkpoint_id(n), self.step_id, self.reason, self.now, self.text)

    def history(self, n: int) -> tuple[list[HistoryEvent], list[str]]:
        """The `checkpoint` history event that records checkpoint n, with its `event_texts`."""
        event = HistoryEvent(kind="checkpoint", step_id=self.step_id,
                             data={"checkpoint_id": _checkpoint_id(n), "reason": self.reason})
        return [event], event_texts(self.workflow_id, [event], self.now)

    def checkpoint(self, n: int) -> Checkpoint:
        """Checkpoint n as written, with a snapshot decoded afresh: later changes to the
        caller's state do not alter it."""
        return Checkpoint(_checkpoint_id(n), self.workflow_id, self.step_id, self.reason, self.now,
                          json.loads(self.text))


def _checkpoint_id(n: int) -> str:
    """The opaque token of an instance's n-th checkpoint."""
    return f"cp-{n}"


def plan_checkpoint(workflow_id: str, step_id: str | None, reason: str,
                    snapshot: Mapping[str, Any]) -> PlannedCheckpoint:
    """Encode a checkpoint (see `Store.add_checkpoint`); a snapshot that is not JSON fails here."""
    text = json_text(dict(snapshot), f"checkpoint snapshot of {workflow_id!r}")
    return PlannedCheckpoint(workflow_id, step_id, reason, utc_now(), text)


