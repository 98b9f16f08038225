"""The persistence contract: records, history events, checkpoints and the `Store` protocol.

The service talks to storage only through this module, so SQLite (the embedded default)
and PostgreSQL (shared by server replicas) are interchangeable and no SQL leaks upward. Records are
plain dataclasses holding JSON-safe data: the store never interprets `state`, `threads`
or `definition`, it only keeps them safe and versioned.

Timestamps are ISO-8601 strings in UTC with microseconds and an explicit offset
(``2026-11-22T02:48:07.123456+00:00``, see `utc_now`): readable in history dumps, sortable
as text, and identical across processes and machines.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol, runtime_checkable

# `interrupted`: the process running it was stopped (Ctrl-C during `run`); it resumes.
InstanceStatus = Literal["running", "waiting", "completed", "failed", "cancelled", "interrupted"]
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
    status: InstanceStatus = "running"
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

    status: InstanceStatus
    current_steps: list[str]
    error: str | None
    version: int
    updated_at: str
    deltas: list[str]  # JSON texts, oldest first: exactly `version - the reader's version` of them
    snapshot_version: int  # the full snapshot the store holds now (the deltas may reach back past it)


def commits_since_from(row: Sequence[Any], deltas: list[str], since: int) -> CommitsSince | None:
    """`CommitsSince` from `status, current_steps, error, version, updated_at, snapshot_version`,
    or None when the deltas after `since` are not all there (each version has at most one
    delta, so as many deltas as versions means none is missing)."""
    version = int(row[3])
    if len(deltas) != version - since:
        return None
    return CommitsSince(row[0], json.loads(row[1]), row[2], version, row[4], deltas, int(row[5]))


@dataclass(frozen=True)
class Body:
    """An instance's two large JSON columns as committed at one version (`Store.body_at`)."""

    version: int
    state: dict[str, Any]
    threads: dict[str, Any]


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


@dataclass(frozen=True)
class InstanceSummary:
    """One row of `list_instances`: the record without its large JSON blobs."""

    workflow_id: str
    workflow: str
    project_dir: str
    status: InstanceStatus
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
    status: InstanceStatus
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


class StoreError(Exception):
    """Base class of every error the store raises on purpose."""


class NotFoundError(StoreError, KeyError):
    """No instance with this id exists in this store."""

    def __init__(self, workflow_id: str, store_path: str = "") -> None:
        where = f" in the store at {store_path}" if store_path else ""
        super().__init__(
            f"No workflow instance with id {workflow_id!r}{where}. Check the id "
            "(workflow_status without an id lists the instances), or start the workflow again."
        )
        self.workflow_id = workflow_id
        self.store_path = store_path

    def __str__(self) -> str:  # KeyError would wrap the message in quotes
        return str(self.args[0])

    def __reduce__(self) -> tuple[type[NotFoundError], tuple[str, str]]:
        return (type(self), (self.workflow_id, self.store_path))


class ConflictError(StoreError):
    """Another writer changed the instance since the caller loaded it; nothing was written."""

    def __init__(self, workflow_id: str, expected_version: int, found_version: int) -> None:
        if expected_version == 0:
            what = f"Workflow instance {workflow_id!r} already exists (version {found_version})"
            todo = "choose another workflow_id"
        else:
            what = (
                f"Workflow instance {workflow_id!r} was changed by another writer: expected "
                f"version {expected_version}, found version {found_version}"
            )
            todo = "reload the instance with load() and apply the change again"
        super().__init__(f"{what}. Nothing was written; {todo}.")
        self.workflow_id = workflow_id
        self.expected_version = expected_version
        self.found_version = found_version

    def __reduce__(self) -> tuple[type[ConflictError], tuple[str, int, int]]:
        return (type(self), (self.workflow_id, self.expected_version, self.found_version))


class StoreOpenError(StoreError):
    """The store file could not be opened or created (path, reason and remedy in the text)."""


@dataclass(frozen=True)
class StartKey:
    """The idempotency key of one `workflow_start`, kept with the instance it started.

    `key` is the client's token (unique per project); `request` a fingerprint of what the
    start asked for (workflow and inputs), so that the same key sent again with another
    request is told apart from a resend of the same one."""

    key: str
    request: str


class KeyTakenError(StoreError):
    """`create` found its start key used already: nothing was written.  `workflow_id` is
    the instance that key started, `request` the fingerprint stored with it."""

    def __init__(self, key: str, workflow_id: str, request: str) -> None:
        super().__init__(f"start key {key!r} already started instance {workflow_id!r}")
        self.key, self.workflow_id, self.request = key, workflow_id, request

    def __reduce__(self) -> tuple[type[KeyTakenError], tuple[str, str, str]]:
        return (type(self), (self.key, self.workflow_id, self.request))


class OutcomeUnknownError(StoreError):
    """The connection to the database broke while a write was in flight, and whether the
    write was committed could not be told afterwards: nothing may be assumed either way."""


@runtime_checkable
class Store(Protocol):
    """Durable, versioned storage of workflow instances, their history and checkpoints.

    Every method commits before it returns (an answered tool call is never lost) and is
    safe to call from many threads. Implementations must keep `save` atomic: either the
    record and all its events are written, or nothing is.
    """

    path: str
    # True when `deltas_since` costs about what `version` costs (one round trip to a
    # database server either way): a process then checks a cached copy with
    # `deltas_since` and, when it is behind, catches up in the same trip.  False for an
    # in-process database, where `version` is one cheap SELECT and `deltas_since` a
    # read transaction.
    check_with_deltas: bool

    def create(self, record: InstanceRecord, events: Iterable[HistoryEvent] = (), *,
               start_key: StartKey | None = None) -> int:
        """Insert a new instance at version 1 (set on `record` too) with its first events,
        and its `start_key` (per project), in one transaction.

        Raises ConflictError (expected_version 0) if the id is taken, KeyTakenError (nothing
        written) if the start key is.
        """
        ...

    def started_by(self, project_dir: str, key: str) -> tuple[str, str] | None:
        """The instance a start key started in a project, with the request fingerprint
        stored beside it: `(workflow_id, request)`, or None for an unused key."""
        ...

    def load(self, workflow_id: str) -> InstanceRecord:
        """The stored record; NotFoundError if there is none."""
        ...

    def version(self, workflow_id: str) -> int:
        """The stored version of an instance; NotFoundError if there is none."""
        ...

    def save(
        self,
        record: InstanceRecord,
        expected_version: int,
        events: Iterable[HistoryEvent] = (),
        *,
        encoded: Mapping[str, str] | None = None,
        delta: str | None = None,
        snapshot: bool = False,
        definition: Mapping[str, Any] | None = None,
    ) -> int:
        """Compare-and-set: write `record` and append `events` if the stored version is
        still `expected_version`, in one transaction.  Only the mutable fields are written:
        the definition snapshot and inputs are set at `create`, and changed only by a save
        that passes `definition` (an instance moved onto an edited workflow: the new
        snapshot, with `record.inputs`; such a save writes the body whole).  `encoded` may
        carry the JSON text of `state`/`threads` when the caller already has it.

        With `delta` (JSON text of `[op, column, path, value?]` operations, see
        `apply_delta`), `state` and `threads` are not written at all: the delta is stored
        beside the last full snapshot and applied to it by `load`, so a commit costs what
        it changed, not what the instance holds.  Without it, or with `snapshot`, the
        body is written whole and becomes the new snapshot.  A snapshot written with its
        delta keeps the deltas since the previous snapshot (`record.snapshot_version`) and
        stores its own, so a copy that is behind still catches up by deltas; older ones
        are dropped (all of them for a snapshot without a delta).

        Returns the new version and updates `record.version`/`record.updated_at` and the
        snapshot bookkeeping in place. Raises ConflictError (nothing written) when another
        writer got there first, NotFoundError if the instance is gone.
        """
        ...

    def deltas_since(self, workflow_id: str, version: int) -> CommitsSince | None:
        """What was committed after `version`: the status columns now and the deltas, in
        order, or None when that cannot be told by deltas (some of the deltas after
        `version` are gone: two full snapshots were written since): then `load` it whole.  For a server
        process whose copy is one or two commits behind (another replica served a call),
        catching up costs the change instead of the instance.  NotFoundError if none."""
        ...

    def body_at(self, workflow_id: str, version: int) -> Body | None:
        """The instance's `state` and `threads` as committed at `version`: its full snapshot
        with the deltas after it up to `version` applied, or None when the store no longer
        holds what that takes (its snapshot is newer than `version`, or the deltas in
        between were dropped).  NotFoundError if there is no such instance."""
        ...

    def list_instances(
        self, project_dir: str | None = None, statuses: Sequence[str] | None = None
    ) -> list[InstanceSummary]:
        """Summaries, most recently updated first; filtered by project and/or status."""
        ...

    def page_instances(self, where: InstanceFilter, limit: int, offset: int = 0) -> InstancePage:
        """Up to `limit` summaries from `offset` on, newest started first (then by id), and
        the number matching `where` in all: one page of a long listing, whose cost does not
        grow with the rows after it."""
        ...

    def instance_groups(self) -> list[InstanceGroup]:
        """The instance counts per workflow, project and status."""
        ...

    def history(
        self,
        workflow_id: str,
        kinds: Sequence[str] | None = None,
        task_id: str | None = None,
        limit: int | None = None,
        after_seq: int | None = None,
    ) -> list[HistoryEvent]:
        """Events in commit order (ascending seq). `limit` keeps the *latest* N matches."""
        ...

    def add_checkpoint(
        self,
        workflow_id: str,
        step_id: str | None,
        reason: str,
        snapshot: Mapping[str, Any],
    ) -> Checkpoint:
        """Store a checkpoint (and a `checkpoint` history event). NotFoundError if no instance."""
        ...

    def get_checkpoint(
        self, workflow_id: str, checkpoint_id: str | None = None
    ) -> Checkpoint | None:
        """The named checkpoint of this instance, or its latest when `checkpoint_id` is None."""
        ...

    def checkpoints(self, workflow_id: str) -> list[Checkpoint]:
        """Every checkpoint of this instance, oldest first (empty when it has none)."""
        ...

    def open(self) -> None:
        """Open now (create file and schema) instead of on first use; StoreOpenError if not."""
        ...

    def migrate(self) -> tuple[int, int]:
        """Open now, applying pending schema migrations; (version found, version now)."""
        ...

    def close(self) -> None:
        """Release connections; idempotent. A later call reopens lazily."""
        ...


# -- deltas: what a commit changed, applied to the last full snapshot on load ----------------
DELTA_COLUMNS = ("state", "threads")


def apply_delta(record: InstanceRecord, text: str) -> None:
    """Apply one stored delta to `record.state`/`record.threads` in place.

    A delta is a JSON list of operations, in order: `["s", column, path, value]` sets the
    value at `path` (a list of object keys; missing objects on the way are created),
    `["d", column, path]` deletes it and `["a", column, path, kept, items]` appends
    `items` to the list there, which must hold `kept` items (an append to a long list
    stores the new items, not the list).  `column` is `state` or `threads`.  The store
    never interprets the values, exactly as it never interprets a full snapshot."""
    for op in json.loads(text):
        kind, column, path = op[0], op[1], op[2]
        if column not in DELTA_COLUMNS or not path or kind not in ("s", "d", "a"):
            raise StoreError(f"instance {record.workflow_id}: unreadable delta operation {op[:3]!r}")
        node = record.state if column == "state" else record.threads
        for key in path[:-1]:
            node = node.setdefault(key, {})
        if kind == "s":
            node[path[-1]] = op[3]
        elif kind == "d":
            node.pop(path[-1], None)
        else:
            _append(record, node, path, op[3], op[4])


def _append(record: InstanceRecord, node: dict[str, Any], path: list[str], kept: int, items: list[Any]) -> None:
    """Extend the list at `path` in place (the record was just decoded: nothing shares it)."""
    target = node.get(path[-1])
    if not isinstance(target, list) or len(target) != kept:
        found = f"{len(target)} items" if isinstance(target, list) else type(target).__name__
        raise StoreError(f"instance {record.workflow_id}: a delta appends to {path!r} after "
                         f"{kept} items, but the store holds {found} there")
    target.extend(items)


def snapshot_drops_through(record: InstanceRecord, new_version: int, delta: str | None,
                           snapshot: bool) -> int | None:
    """For a save (see `Store.save`): None when it writes a delta only; else it writes a
    full snapshot, and the deltas up to the returned version go — those the previous
    snapshot already held when this one comes with its own delta (copies behind may
    still need the rest), all of them when it comes without one."""
    if delta is not None and not snapshot:
        return None
    return record.snapshot_version if delta is not None else new_version


def apply_deltas(record: InstanceRecord, texts: Sequence[str]) -> InstanceRecord:
    """The record with its deltas applied and its snapshot bookkeeping filled in."""
    for text in texts:
        apply_delta(record, text)
    record.deltas = len(texts)
    record.delta_bytes = sum(len(t) for t in texts)
    return record


def note_saved(record: InstanceRecord, delta: str | None, body: Mapping[str, str]) -> None:
    """Update the snapshot bookkeeping of a record its store has just saved."""
    if delta is None:
        record.snapshot_version, record.deltas, record.delta_bytes = record.version, 0, 0
        record.body_bytes = len(body["state"]) + len(body["threads"])
    else:
        record.deltas += 1
        record.delta_bytes += len(delta)


def note_caught_up(record: InstanceRecord, since: CommitsSince) -> None:
    """Update the status columns and snapshot bookkeeping of a record whose run was just
    brought to `since` by its deltas.  Another process may have written a snapshot
    meanwhile: the record takes it over (a later save must never write back the old one,
    or a load would apply the deltas in between twice) and counts the deltas after it."""
    record.status, record.current_steps, record.error = since.status, since.current_steps, since.error
    record.version, record.updated_at = since.version, since.updated_at
    after = since.deltas
    if since.snapshot_version != record.snapshot_version:
        after = after[max(0, len(after) - (since.version - since.snapshot_version)):]
        record.snapshot_version, record.deltas, record.delta_bytes = since.snapshot_version, 0, 0
    record.deltas += len(after)
    record.delta_bytes += sum(len(text) for text in after)


# -- the rules of a write, the same in both stores: only the SQL around them differs ---------
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


# -- schema migrations: one order and one refusal for both databases ---------------------------
def pending_migrations(migrations: list[tuple[int, list[str]]], current: int, where: str,
                       other: str) -> list[tuple[int, list[str]]]:
    """The migrations a store at schema version `current` still needs, in order.  A store
    written by a newer release is refused rather than guessed at: `other` names what the
    user may use instead (another store file, another database)."""
    newest = migrations[-1][0]
    if current > newest:
        raise StoreOpenError(
            f"The workflow store {where} has schema version {current}, but this release of "
            f"aromcp-workflows knows only up to version {newest}. Upgrade "
            f"aromcp-workflows, or use {other} (--store / AROMCP_WORKFLOWS_STORE)."
        )
    return [(version, statements) for version, statements in migrations if version > current]


# -- rows to records: both stores select the same columns in the same order ------------------
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
