"""The persistence contract: the `Store` protocol, the errors it raises, and what a delta means.

The service talks to storage only through this contract, so SQLite (the embedded default)
and PostgreSQL (shared by server replicas) are interchangeable and no SQL leaks upward.
The records it moves are in `records.py`; how both stores plan a write (`writes.py`) and
read a row back (`decode.py`) is shared, written once.  A delta (what one commit changed,
stored beside the last full snapshot) is part of the contract: every store, and a process
catching up its cached copy, applies it the same way (`apply_deltas`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from aromcp_workflows.errors import ErrorKind, KindedError
from aromcp_workflows.store.records import (
    Body,
    Checkpoint,
    CommitsSince,
    HistoryEvent,
    InstanceFilter,
    InstanceGroup,
    InstancePage,
    InstanceRecord,
    InstanceSummary,
    StartKey,
)


class StoreError(KindedError):
    """Base class of every error the store raises on purpose: by default, a write it could
    not make (`not_saved`)."""

    kind: ErrorKind = "not_saved"


class NotFoundError(StoreError, KeyError):
    """No instance with this id exists in this store."""

    kind: ErrorKind = "not_found"

    def __init__(self, workflow_id: str, store_path: str = "") -> None:
        where = f" in the store at {store_path}" if store_path else ""
        super().__init__(
            f"No workflow instance with id {workflow_id!r}{where}: check the id, or start the workflow again."
        )
        self.workflow_id = workflow_id
        self.store_path = store_path

    def __str__(self) -> str:  # KeyError would wrap the message in quotes
        return str(self.args[0])

    def __reduce__(self) -> tuple[type[NotFoundError], tuple[str, str]]:
        return (type(self), (self.workflow_id, self.store_path))


class ConflictError(StoreError):
    """Another writer changed the instance since the caller loaded it; nothing was written."""

    kind: ErrorKind = "conflict"

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

    kind: ErrorKind = "unavailable"


class KeyTakenError(StoreError):
    """`create` found its start key used already: nothing was written.  `workflow_id` is
    the instance that key started, `request` the fingerprint stored with it."""

    kind: ErrorKind = "conflict"

    def __init__(self, key: str, workflow_id: str, request: str) -> None:
        super().__init__(f"start key {key!r} already started instance {workflow_id!r}")
        self.key, self.workflow_id, self.request = key, workflow_id, request

    def __reduce__(self) -> tuple[type[KeyTakenError], tuple[str, str, str]]:
        return (type(self), (self.key, self.workflow_id, self.request))


class OutcomeUnknownError(StoreError):
    """The connection to the database broke while a write was in flight, and whether the
    write was committed could not be told afterwards: nothing may be assumed either way."""

    kind: ErrorKind = "unavailable"


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
    # True when every process that uses the store runs on this machine (a file): a
    # server-side command's run directory, named after the command, is then claim enough
    # to start it before its claim is committed (`app.driver`, "claimed while it runs").
    one_host: bool

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


class SentSave(Protocol):
    """A save sent to the database and not answered yet (`SavesLater.begin_save`)."""

    def poll(self) -> str: ...  # "in", "waiting" or "broken"

    def watch(self) -> int | None: ...  # a descriptor of its own, readable when its answer comes

    def result(self) -> int:
        """The new version once committed (waiting for it); raises what `Store.save` raises."""
        ...


@runtime_checkable
class SavesLater(Protocol):
    """A store whose save can be sent now and answered later (PostgreSQL: the statement
    travels and commits while the server builds its reply, `app.confirm`).  An in-process
    store (SQLite) saves at once and is not one."""

    def begin_save(
        self,
        record: InstanceRecord,
        expected_version: int,
        events: Iterable[HistoryEvent] = (),
        *,
        encoded: Mapping[str, str] | None = None,
        delta: str | None = None,
        snapshot: bool = False,
        definition: Mapping[str, Any] | None = None,
    ) -> SentSave:
        """`Store.save`, sent now; `result()` answers it and brings `record` up to the new
        version, as `save` does."""
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


def apply_deltas(record: InstanceRecord, texts: Sequence[str]) -> InstanceRecord:
    """The record with its deltas applied and its snapshot bookkeeping filled in."""
    for text in texts:
        apply_delta(record, text)
    record.deltas = len(texts)
    record.delta_bytes = sum(len(t) for t in texts)
    return record


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

