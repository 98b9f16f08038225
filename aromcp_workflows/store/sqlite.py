"""`SqliteStore`: the embedded default store (stdlib sqlite3, one file, WAL).

Why these choices (numbers in docs/store-and-claude.md, from benchmarks/bench_store.py):

- WAL journal: readers never block the writer, and several server processes (two Claude
  Code windows on one project) can share the file.
- ``synchronous=NORMAL`` by default (`open_store`): with WAL, a committed transaction
  survives a killed or crashed server process, which is the promise of the README ("Durability and concurrency"),
  and no fsync is paid per commit. ``FULL`` (``AROMCP_WORKFLOWS_STORE_SYNC=FULL``) also
  survives power loss or an OS crash, for an fsync per save that costs more than the
  whole 1 ms per-step budget on the machines measured.
- One connection per store guarded by a lock, not one per thread: SQLite admits a
  single writer anyway, and in-process contention on a lock is far cheaper than
  SQLite's busy handler (which sleeps in steps of milliseconds). Other *processes* are
  handled by ``busy_timeout`` and ``BEGIN IMMEDIATE``.
- Opened lazily on first use: constructing the store touches no file, so server
  start-up stays fast and a bad path is reported by the first tool that needs it
  (`open()` fails fast for callers that prefer that).
- Versioned writes: ``UPDATE ... WHERE version = expected`` inside ``BEGIN IMMEDIATE``,
  so a second writer (thread or process) gets `ConflictError` instead of overwriting.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aromcp_workflows.store.base import (
    STATUSES,
    Checkpoint,
    CommitsSince,
    ConflictError,
    HistoryEvent,
    InstanceRecord,
    InstanceSummary,
    NotFoundError,
    StoreError,
    StoreOpenError,
    apply_deltas,
    commits_since_from,
    event_from_row,
    note_saved,
    record_from_row,
    snapshot_drops_through,
    summary_from_row,
    utc_now,
)
from aromcp_workflows.store.schema import SCHEMA_VERSION, migrate

BUSY_TIMEOUT_MS = 10_000

_INSTANCE_COLUMNS = (  # a record: the small row joined with its body (see schema migration 2)
    "i.workflow_id, i.workflow, i.project_dir, i.status, b.definition, b.inputs, b.state, b.threads, "
    "i.current_steps, i.error, i.version, i.created_at, i.updated_at, i.snapshot_version"
)
_ROW_COLUMNS = (
    "workflow_id, workflow, project_dir, status, current_steps, error, version, created_at, updated_at, "
    "snapshot_version"
)
_SUMMARY_COLUMNS = (
    "workflow_id, workflow, project_dir, status, current_steps, error, version, "
    "created_at, updated_at"
)


def _dumps(value: Any, what: str) -> str:
    """JSON text for a column; a non-JSON value is the caller's bug, named precisely."""
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"cannot store {what}: it is not JSON-serializable ({exc})") from exc


def _create_private(path: Path) -> None:
    """Create a new store file readable by its owner only (0600), whatever the umask.

    Instances hold workflow state (inputs, command output, answers), which is nobody
    else's business on a shared machine.  SQLite gives the ``-wal`` and ``-shm`` files it
    creates later the database file's own permissions, so they are 0600 too.  An
    existing file is left as its owner set it.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    try:
        os.fchmod(fd, 0o600)  # the umask may have removed bits, never added: this is exact
    finally:
        os.close(fd)


class SqliteStore:
    """A `Store` in one SQLite file. Thread-safe; safe to share a file across processes."""

    check_with_deltas = False  # `version` is one SELECT in process: see `Store.check_with_deltas`

    def __init__(self, path: str | os.PathLike[str], *, synchronous: str = "NORMAL") -> None:
        if synchronous.upper() not in ("FULL", "NORMAL", "EXTRA", "OFF"):
            raise ValueError(f"synchronous must be FULL, NORMAL, EXTRA or OFF, not {synchronous!r}")
        self.path = str(path)
        self.synchronous = synchronous.upper()
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = 0
        self.migrated_from: int | None = None

    # -- connection ---------------------------------------------------------------

    def open(self) -> None:
        """Open (creating file and schema) now instead of on first use; StoreOpenError if not."""
        with self._lock:
            self._connection()

    def migrate(self) -> tuple[int, int]:
        """Apply pending migrations now; (version found, version now)."""
        self.open()
        return (self.migrated_from or 0, SCHEMA_VERSION)

    def _connection(self) -> sqlite3.Connection:
        """The live connection, opened on first use (and again in a forked child)."""
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        # A connection inherited through fork() must not be used (or closed) by the child.
        self._conn = None
        path = Path(self.path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise StoreOpenError(
                f"Cannot create the directory for the workflow store {self.path}: "
                f"{exc.strerror or exc}. Choose another location with --store or "
                "AROMCP_WORKFLOWS_STORE."
            ) from exc
        try:
            _create_private(path)
        except OSError as exc:
            raise StoreOpenError(
                f"Cannot create the workflow store {self.path}: {exc.strerror or exc}. Choose a "
                "writable location with --store or AROMCP_WORKFLOWS_STORE."
            ) from exc
        conn: sqlite3.Connection | None = None
        try:
            conn = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                check_same_thread=False,
            )
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise sqlite3.OperationalError(f"journal_mode WAL refused (got {mode})")
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            conn.execute("PRAGMA foreign_keys = ON")
            self.migrated_from = migrate(conn, self.path)
        except StoreError:
            if conn is not None:
                conn.close()
            raise
        except sqlite3.Error as exc:
            if conn is not None:
                conn.close()
            raise StoreOpenError(
                f"Cannot open the workflow store {self.path}: {exc}. If the file is not an "
                "aromcp-workflows store, move it away or choose another location with "
                "--store or AROMCP_WORKFLOWS_STORE; if the directory is read-only, choose a "
                "writable one."
            ) from exc
        self._conn, self._pid = conn, os.getpid()
        return conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction holding SQLite's write lock from the start (no upgrade race)."""
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise self._failure("start a write", exc) from exc
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise self._failure("write", exc) from exc
                raise

    def _failure(self, action: str, exc: sqlite3.Error) -> StoreError:
        """A sqlite3 error as a StoreError that names the file and what to do."""
        hint = (
            "another process held the write lock for too long; retry"
            if "locked" in str(exc) or "busy" in str(exc)
            else "check free disk space and that the file is writable"
        )
        return StoreError(f"Could not {action} the workflow store {self.path}: {exc}; {hint}.")

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    # -- instances ----------------------------------------------------------------

    def create(self, record: InstanceRecord, events: Iterable[HistoryEvent] = ()) -> int:
        now = utc_now()
        created = record.created_at or now
        row, body = self._instance_values(record, version=1, created_at=created, updated_at=now)
        events = list(events)
        with self._write() as conn:
            found = conn.execute(
                "SELECT version FROM instances WHERE workflow_id = ?", (record.workflow_id,)
            ).fetchone()
            if found is not None:
                raise ConflictError(record.workflow_id, 0, found[0])
            conn.execute(f"INSERT INTO instances ({_ROW_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1)", row)
            conn.execute("INSERT INTO bodies (workflow_id, definition, inputs, state, threads) "
                         "VALUES (?, ?, ?, ?, ?)", body)
            self._append(conn, record.workflow_id, events, now)
        record.version, record.created_at, record.updated_at = 1, created, now
        note_saved(record, None, {"state": body[3], "threads": body[4]})
        return 1

    def version(self, workflow_id: str) -> int:
        """The stored version alone (a cheap freshness check for cached instances)."""
        with self._lock:
            row = self._connection().execute(
                "SELECT version FROM instances WHERE workflow_id = ?", (workflow_id,)
            ).fetchone()
        if row is None:
            raise NotFoundError(workflow_id, self.path)
        return int(row[0])

    def load(self, workflow_id: str) -> InstanceRecord:
        """The record: its last full snapshot with the deltas written since applied.
        Both reads are one read transaction, so they see the same commit."""
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN")
            try:
                row = conn.execute(
                    f"SELECT {_INSTANCE_COLUMNS} FROM instances i JOIN bodies b USING (workflow_id) "
                    "WHERE i.workflow_id = ?", (workflow_id,),
                ).fetchone()
                deltas = [] if row is None else [d for (d,) in conn.execute(
                    "SELECT delta FROM deltas WHERE workflow_id = ? AND version > ? ORDER BY version",
                    (workflow_id, row[13]),
                )]
            finally:
                conn.execute("COMMIT")
        if row is None:
            raise NotFoundError(workflow_id, self.path)
        record = record_from_row(row)
        record.snapshot_version, record.body_bytes = int(row[13]), len(row[6]) + len(row[7])
        return apply_deltas(record, deltas)

    def deltas_since(self, workflow_id: str, version: int) -> CommitsSince | None:
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN")
            try:
                row = conn.execute(
                    "SELECT status, current_steps, error, version, updated_at, snapshot_version FROM instances "
                    "WHERE workflow_id = ?", (workflow_id,),
                ).fetchone()
                deltas = [] if row is None else [d for (d,) in conn.execute(
                    "SELECT delta FROM deltas WHERE workflow_id = ? AND version > ? ORDER BY version",
                    (workflow_id, version),
                )]
            finally:
                conn.execute("COMMIT")
        if row is None:
            raise NotFoundError(workflow_id, self.path)
        return commits_since_from(row, deltas, version)

    def save(
        self,
        record: InstanceRecord,
        expected_version: int,
        events: Iterable[HistoryEvent] = (),
        *,
        encoded: Mapping[str, str] | None = None,
        delta: str | None = None,
        snapshot: bool = False,
    ) -> int:
        """Compare-and-set the small row (status, current steps, error, version) and append
        `events`, in one transaction, with the delta, a new full body, or both (see
        `Store.save`).  The definition and inputs are written once by `create`."""
        now = utc_now()
        new_version = expected_version + 1
        wid = record.workflow_id
        if record.status not in STATUSES:
            raise ValueError(f"status of {wid!r} must be one of {', '.join(STATUSES)}, not {record.status!r}")
        encoded = encoded or {}
        drop_through = snapshot_drops_through(record, new_version, delta, snapshot)
        full = drop_through is not None
        if full:
            state = encoded.get("state") or _dumps(record.state, f"the state of {wid!r}")
            threads = encoded.get("threads") or _dumps(record.threads, f"the threads of {wid!r}")
        steps = _dumps(list(record.current_steps), f"the current_steps of {wid!r}")
        events = list(events)
        with self._write() as conn:  # only a full snapshot moves snapshot_version (never the caller's copy of it)
            cur = conn.execute(
                "UPDATE instances SET status = ?, current_steps = ?, error = ?, version = ?, updated_at = ?, "
                "snapshot_version = CASE WHEN ? THEN ? ELSE snapshot_version END "
                "WHERE workflow_id = ? AND version = ?",
                (record.status, steps, record.error, new_version, now, full, new_version, wid, expected_version),
            )
            if cur.rowcount != 1:
                found = conn.execute(
                    "SELECT version FROM instances WHERE workflow_id = ?", (record.workflow_id,)
                ).fetchone()
                if found is None:
                    raise NotFoundError(record.workflow_id, self.path)
                raise ConflictError(record.workflow_id, expected_version, found[0])
            if full:  # the deltas since the previous snapshot stay when this one comes with its delta
                conn.execute("UPDATE bodies SET state = ?, threads = ? WHERE workflow_id = ?", (state, threads, wid))
                conn.execute("DELETE FROM deltas WHERE workflow_id = ? AND version <= ?", (wid, drop_through))
            if delta is not None:
                conn.execute("INSERT INTO deltas (workflow_id, version, delta) VALUES (?, ?, ?)",
                             (wid, new_version, delta))
            self._append(conn, record.workflow_id, events, now)
        record.version, record.updated_at = new_version, now
        note_saved(record, None if full else delta, {"state": state, "threads": threads} if full else {})
        return new_version

    def list_instances(
        self, project_dir: str | None = None, statuses: Sequence[str] | None = None
    ) -> list[InstanceSummary]:
        sql = f"SELECT {_SUMMARY_COLUMNS} FROM instances"
        where: list[str] = []
        params: list[Any] = []
        if project_dir is not None:
            where.append("project_dir = ?")
            params.append(project_dir)
        if statuses:
            where.append(f"status IN ({', '.join('?' * len(statuses))})")
            params.extend(statuses)
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY updated_at DESC, workflow_id"
        with self._lock:
            rows = self._connection().execute(sql, params).fetchall()
        return [summary_from_row(r) for r in rows]

    # -- history ------------------------------------------------------------------

    def history(
        self,
        workflow_id: str,
        kinds: Sequence[str] | None = None,
        task_id: str | None = None,
        limit: int | None = None,
        after_seq: int | None = None,
    ) -> list[HistoryEvent]:
        where = ["workflow_id = ?"]
        params: list[Any] = [workflow_id]
        if kinds:
            where.append(f"kind IN ({', '.join('?' * len(kinds))})")
            params.extend(kinds)
        if task_id is not None:
            where.append("task_id = ?")
            params.append(task_id)
        if after_seq is not None:
            where.append("seq > ?")
            params.append(after_seq)
        sql = (
            "SELECT seq, workflow_id, kind, step_id, task_id, timestamp, data FROM history "
            f"WHERE {' AND '.join(where)} ORDER BY seq DESC"
        )
        if limit is not None:
            sql += " LIMIT ?"
            params.append(max(0, int(limit)))
        with self._lock:
            rows = self._connection().execute(sql, params).fetchall()
        rows.reverse()
        return [event_from_row(r) for r in rows]

    @staticmethod
    def _append(
        conn: sqlite3.Connection, workflow_id: str, events: list[HistoryEvent], now: str
    ) -> None:
        """Append events inside the caller's write transaction; assigns seq in place.

        seq is assigned on the event objects before commit; if the transaction rolls back
        the caller discards them together with the failed save.
        """
        if not events:
            return
        last = conn.execute(
            "SELECT COALESCE(MAX(seq), 0) FROM history WHERE workflow_id = ?", (workflow_id,)
        ).fetchone()[0]
        rows = []
        for offset, event in enumerate(events, start=1):
            if not event.kind:
                raise ValueError(f"history event for {workflow_id!r} has an empty kind")
            if event.workflow_id and event.workflow_id != workflow_id:
                raise ValueError(
                    f"history event of kind {event.kind!r} names instance "
                    f"{event.workflow_id!r} but is being saved with {workflow_id!r}"
                )
            event.workflow_id = workflow_id
            event.timestamp = event.timestamp or now
            event.seq = last + offset
            rows.append((
                workflow_id, event.seq, event.kind, event.step_id, event.task_id,
                event.timestamp, _dumps(event.data, f"history event {event.kind!r} data"),
            ))
        conn.executemany(
            "INSERT INTO history (workflow_id, seq, kind, step_id, task_id, timestamp, data) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            rows,
        )

    # -- checkpoints ----------------------------------------------------------------

    def add_checkpoint(
        self,
        workflow_id: str,
        step_id: str | None,
        reason: str,
        snapshot: Mapping[str, Any],
    ) -> Checkpoint:
        now = utc_now()
        text = _dumps(dict(snapshot), f"checkpoint snapshot of {workflow_id!r}")
        with self._write() as conn:
            if conn.execute(
                "SELECT 1 FROM instances WHERE workflow_id = ?", (workflow_id,)
            ).fetchone() is None:
                raise NotFoundError(workflow_id, self.path)
            n = conn.execute(
                "SELECT COALESCE(MAX(n), 0) + 1 FROM checkpoints WHERE workflow_id = ?",
                (workflow_id,),
            ).fetchone()[0]
            checkpoint_id = f"cp-{n}"
            conn.execute(
                "INSERT INTO checkpoints (workflow_id, n, checkpoint_id, step_id, reason, "
                "created_at, snapshot) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (workflow_id, n, checkpoint_id, step_id, reason, now, text),
            )
            event = HistoryEvent(
                kind="checkpoint", step_id=step_id,
                data={"checkpoint_id": checkpoint_id, "reason": reason},
            )
            self._append(conn, workflow_id, [event], now)
        # A detached copy: later changes to the caller's state must not alter the checkpoint.
        return Checkpoint(checkpoint_id, workflow_id, step_id, reason, now, json.loads(text))

    def get_checkpoint(
        self, workflow_id: str, checkpoint_id: str | None = None
    ) -> Checkpoint | None:
        sql = (
            "SELECT checkpoint_id, workflow_id, step_id, reason, created_at, snapshot "
            "FROM checkpoints WHERE workflow_id = ?"
        )
        params: tuple[Any, ...] = (workflow_id,)
        if checkpoint_id is None:
            sql += " ORDER BY n DESC LIMIT 1"
        else:
            sql += " AND checkpoint_id = ?"
            params = (workflow_id, checkpoint_id)
        with self._lock:
            row = self._connection().execute(sql, params).fetchone()
        if row is None:
            return None
        return Checkpoint(row[0], row[1], row[2], row[3], row[4], json.loads(row[5]))

    # -- helpers --------------------------------------------------------------------

    @staticmethod
    def _instance_values(
        record: InstanceRecord, *, version: int, created_at: str, updated_at: str
    ) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """(row in `_ROW_COLUMNS` order without snapshot_version, body values); JSON errors name the field."""
        wid = record.workflow_id
        if not wid or any(ch.isspace() for ch in wid):
            raise ValueError(f"workflow_id must be a non-empty token without whitespace: {wid!r}")
        if record.status not in STATUSES:
            raise ValueError(
                f"status of {wid!r} must be one of {', '.join(STATUSES)}, not {record.status!r}"
            )
        row = (wid, record.workflow, record.project_dir, record.status,
               _dumps(list(record.current_steps), f"the current_steps of {wid!r}"),
               record.error, version, created_at, updated_at)
        body = (wid, _dumps(record.definition, f"the definition of {wid!r}"),
                _dumps(record.inputs, f"the inputs of {wid!r}"),
                _dumps(record.state, f"the state of {wid!r}"),
                _dumps(record.threads, f"the threads of {wid!r}"))
        return row, body

    def __repr__(self) -> str:
        return f"SqliteStore({self.path!r}, synchronous={self.synchronous!r})"
