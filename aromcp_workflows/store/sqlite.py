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

This module is the store's reads and writes; opening the file (WAL, the pragmas, the
migrations, what a failure says) is `sqlite_open.py`.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from aromcp_workflows.store import decode, writes
from aromcp_workflows.store.base import ConflictError, KeyTakenError, NotFoundError, StoreError
from aromcp_workflows.store.queries import SQLITE
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
from aromcp_workflows.store.schema import SCHEMA_VERSION
from aromcp_workflows.store.sqlite_open import open_file

_INSTANCE_COLUMNS = (  # a record: the small row joined with its body (see schema migration 2)
    "i.workflow_id, i.workflow, i.project_dir, i.status, b.definition, b.inputs, b.state, b.threads, "
    "i.current_steps, i.error, i.version, i.created_at, i.updated_at, i.snapshot_version"
)
_ROW_COLUMNS = (
    "workflow_id, workflow, project_dir, status, current_steps, error, version, created_at, updated_at, "
    "snapshot_version"
)
_LOAD = f"SELECT {_INSTANCE_COLUMNS} FROM instances i JOIN bodies b USING (workflow_id) WHERE i.workflow_id = ?"
_COMMITS = ("SELECT status, current_steps, error, version, updated_at, snapshot_version FROM instances "
            "WHERE workflow_id = ?")
_VERSION = SQLITE.version()
_DELTAS_AFTER = "SELECT delta FROM deltas WHERE workflow_id = ? AND version > ? ORDER BY version"
_BODY = ("SELECT b.state, b.threads, i.snapshot_version FROM instances i JOIN bodies b USING (workflow_id) "
         "WHERE i.workflow_id = ?")
_DELTAS_BETWEEN = ("SELECT delta FROM deltas WHERE workflow_id = ? AND version > ? AND version <= ? "
                   "ORDER BY version")


class SqliteStore:
    """A `Store` in one SQLite file. Thread-safe; safe to share a file across processes."""

    check_with_deltas = False  # `version` is one SELECT in process: see `Store.check_with_deltas`
    one_host = True  # a file: its servers share this machine's run directories (`Store.one_host`)

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
        conn, self.migrated_from = open_file(self.path, self.synchronous)
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
            if (getattr(exc, "sqlite_errorcode", 0) & 0xFF) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
            else "check free disk space and that the file is writable"
        )
        return StoreError(f"Could not {action} the workflow store {self.path}: {exc}; {hint}.")

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    # -- instances ----------------------------------------------------------------

    def create(self, record: InstanceRecord, events: Iterable[HistoryEvent] = (), *,
               start_key: StartKey | None = None) -> int:
        plan = writes.plan_create(record, events)
        v = plan.values  # `record_from_row`'s columns: the row takes the small ones, bodies the JSON
        with self._write() as conn:
            found = conn.execute(_VERSION, (record.workflow_id,)).fetchone()
            if found is not None:
                raise ConflictError(record.workflow_id, 0, found[0])
            if start_key is not None:
                taken = conn.execute(SQLITE.start_key(), (record.project_dir, start_key.key)).fetchone()
                if taken is not None:
                    raise KeyTakenError(start_key.key, taken[0], taken[1])
                conn.execute(SQLITE.insert_start_key(), (record.project_dir, start_key.key, start_key.request,
                                                         record.workflow_id, plan.now))
            conn.execute(f"INSERT INTO instances ({_ROW_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1)",
                         (*v[:4], *v[8:]))
            conn.execute("INSERT INTO bodies (workflow_id, definition, inputs, state, threads) "
                         "VALUES (?, ?, ?, ?, ?)", v[:1] + v[4:8])
            first = self._append(conn, record.workflow_id, plan.events, plan.event_data)
        return writes.note_created(record, plan, first)

    def started_by(self, project_dir: str, key: str) -> tuple[str, str] | None:
        with self._lock:
            row = self._connection().execute(SQLITE.start_key(), (project_dir, key)).fetchone()
        return None if row is None else (row[0], row[1])

    def version(self, workflow_id: str) -> int:
        """The stored version alone (a cheap freshness check for cached instances)."""
        with self._lock:
            row = self._connection().execute(_VERSION, (workflow_id,)).fetchone()
        if row is None:
            raise NotFoundError(workflow_id, self.path)
        return int(row[0])

    def load(self, workflow_id: str) -> InstanceRecord:
        """The record: its last full snapshot with the deltas written since applied."""
        row, deltas = self._row_and_deltas(_LOAD, workflow_id, None)
        return decode.stored_record(row, deltas)

    def deltas_since(self, workflow_id: str, version: int) -> CommitsSince | None:
        row, deltas = self._row_and_deltas(_COMMITS, workflow_id, version)
        return decode.commits_since_from(row, deltas, version)

    def _row_and_deltas(self, sql: str, workflow_id: str, since: int | None) -> tuple[Any, list[str]]:
        """The instance's row read by `sql` and its deltas after version `since` (None: after
        the row's snapshot_version, its last column), in one read transaction so that both
        see the same commit; NotFoundError if there is no such instance."""
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN")
            try:
                row = conn.execute(sql, (workflow_id,)).fetchone()
                deltas: list[str] = []
                if row is not None:
                    after = row[-1] if since is None else since
                    deltas = [d for (d,) in conn.execute(_DELTAS_AFTER, (workflow_id, after))]
            finally:
                conn.execute("COMMIT")
        if row is None:
            raise NotFoundError(workflow_id, self.path)
        return row, deltas

    def body_at(self, workflow_id: str, version: int) -> Body | None:
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN")
            try:
                row = conn.execute(_BODY, (workflow_id,)).fetchone()
                deltas = [] if row is None else [
                    d for (d,) in conn.execute(_DELTAS_BETWEEN, (workflow_id, row[2], version))]
            finally:
                conn.execute("COMMIT")
        if row is None:
            raise NotFoundError(workflow_id, self.path)
        return decode.body_from(workflow_id, row, deltas, version)

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
        """Compare-and-set the small row (status, current steps, error, version) and append
        `events`, in one transaction, with the delta, a new full body, or both (see
        `Store.save`).  The definition and inputs are written by `create`, and again only
        with a new `definition`."""
        plan = writes.plan_save(record, expected_version, events, encoded, delta, snapshot, definition)
        delta, wid, version = plan.delta, record.workflow_id, plan.version
        with self._write() as conn:  # only a full snapshot moves snapshot_version (never the caller's copy of it)
            cur = conn.execute(
                "UPDATE instances SET status = ?, current_steps = ?, error = ?, version = ?, updated_at = ?, "
                "snapshot_version = CASE WHEN ? THEN ? ELSE snapshot_version END "
                "WHERE workflow_id = ? AND version = ?",
                (record.status, plan.current_steps, record.error, version, plan.now, plan.full, version,
                 wid, expected_version),
            )
            if cur.rowcount != 1:
                raise writes.save_refused(wid, expected_version, conn.execute(_VERSION, (wid,)).fetchone(), self.path)
            if plan.full:  # the deltas since the previous snapshot stay when this one comes with its delta
                conn.execute("UPDATE bodies SET state = ?, threads = ? WHERE workflow_id = ?",
                             (plan.body["state"], plan.body["threads"], wid))
                conn.execute("DELETE FROM deltas WHERE workflow_id = ? AND version <= ?", (wid, plan.drop_through))
            if plan.definition is not None:
                conn.execute("UPDATE bodies SET definition = ?, inputs = ? WHERE workflow_id = ?",
                             (*plan.definition, wid))
            if delta is not None:
                conn.execute("INSERT INTO deltas (workflow_id, version, delta) VALUES (?, ?, ?)",
                             (wid, version, delta))
            first = self._append(conn, wid, plan.events, plan.event_data)
        return writes.note_committed(record, plan, first)

    def list_instances(
        self, project_dir: str | None = None, statuses: Sequence[str] | None = None
    ) -> list[InstanceSummary]:
        sql, params = SQLITE.instances(project_dir, statuses)
        with self._lock:
            rows = self._connection().execute(sql, params).fetchall()
        return [decode.summary_from_row(r) for r in rows]

    def page_instances(self, where: InstanceFilter, limit: int, offset: int = 0) -> InstancePage:
        rows_sql, rows_params = SQLITE.instance_page(where, limit, offset)
        count_sql, count_params = SQLITE.instance_count(where)
        with self._lock:  # one read transaction: the total and the rows agree
            conn = self._connection()
            conn.execute("BEGIN")
            try:
                rows = conn.execute(rows_sql, rows_params).fetchall()
                total = int(conn.execute(count_sql, count_params).fetchone()[0])
            finally:
                conn.execute("COMMIT")
        return InstancePage([decode.summary_from_row(r) for r in rows], total)

    def instance_groups(self) -> list[InstanceGroup]:
        with self._lock:
            rows = self._connection().execute(SQLITE.instance_groups()).fetchall()
        return [InstanceGroup(r[0], r[1], r[2], int(r[3])) for r in rows]

    # -- history ------------------------------------------------------------------

    def history(
        self,
        workflow_id: str,
        kinds: Sequence[str] | None = None,
        task_id: str | None = None,
        limit: int | None = None,
        after_seq: int | None = None,
    ) -> list[HistoryEvent]:
        sql, params = SQLITE.history(workflow_id, kinds, task_id, limit, after_seq)
        with self._lock:
            rows = self._connection().execute(sql, params).fetchall()
        return decode.events_from_rows(rows)

    @staticmethod
    def _append(conn: sqlite3.Connection, workflow_id: str, events: list[HistoryEvent], data: list[str]) -> int:
        """Append checked events (`event_texts` gave their `data`) inside the caller's write
        transaction; returns the seq of the first, numbered after the instance's last."""
        if not events:
            return 1
        first = 1 + int(conn.execute(
            "SELECT COALESCE(MAX(seq), 0) FROM history WHERE workflow_id = ?", (workflow_id,)
        ).fetchone()[0])
        conn.executemany(
            "INSERT INTO history (workflow_id, seq, kind, step_id, task_id, timestamp, data) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(workflow_id, first + offset, e.kind, e.step_id, e.task_id, e.timestamp, text)
             for offset, (e, text) in enumerate(zip(events, data, strict=True))],
        )
        return first

    # -- checkpoints ----------------------------------------------------------------

    def add_checkpoint(
        self,
        workflow_id: str,
        step_id: str | None,
        reason: str,
        snapshot: Mapping[str, Any],
    ) -> Checkpoint:
        plan = writes.plan_checkpoint(workflow_id, step_id, reason, snapshot)
        with self._write() as conn:
            if conn.execute(_VERSION, (workflow_id,)).fetchone() is None:
                raise NotFoundError(workflow_id, self.path)
            n = int(conn.execute(SQLITE.next_checkpoint(), (workflow_id,)).fetchone()[0])
            conn.execute(SQLITE.insert_checkpoint(), plan.row(n))
            self._append(conn, workflow_id, *plan.history(n))
        return plan.checkpoint(n)

    def get_checkpoint(
        self, workflow_id: str, checkpoint_id: str | None = None
    ) -> Checkpoint | None:
        sql, params = SQLITE.checkpoint(workflow_id, checkpoint_id)
        with self._lock:
            row = self._connection().execute(sql, params).fetchone()
        return None if row is None else decode.checkpoint_from_row(row)

    def checkpoints(self, workflow_id: str) -> list[Checkpoint]:
        sql, params = SQLITE.checkpoints(workflow_id)
        with self._lock:
            rows = self._connection().execute(sql, params).fetchall()
        return [decode.checkpoint_from_row(row) for row in rows]

    def __repr__(self) -> str:
        return f"SqliteStore({self.path!r}, synchronous={self.synchronous!r})"
