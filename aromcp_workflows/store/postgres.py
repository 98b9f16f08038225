"""`PostgresStore`: the store shared by server replicas (psycopg 3 + psycopg_pool).

Same contract and semantics as `SqliteStore` (see `base.Store`); what differs and why:

- One connection pool per process (``AROMCP_WORKFLOWS_STORE_POOL`` connections at most,
  default 10): replicas serve many instances at once, and PostgreSQL, unlike SQLite, lets
  writers of different rows proceed in parallel.  Connections run in autocommit, so a read
  is one round trip; writes open an explicit transaction.
- Optimistic concurrency per instance: a save is ``UPDATE … WHERE workflow_id = $1 AND
  version = $2`` plus its history rows, sent as ONE statement (``WITH base AS (UPDATE …
  RETURNING …) INSERT INTO history …``): atomic, and one round trip per save.  Zero rows
  updated means another writer (thread, process or replica) got there first:
  `ConflictError`, nothing written.  The same UPDATE advances ``instances.last_seq``, so
  history ``seq`` stays 1, 2, 3 … per instance with no ``MAX(seq)`` query; the row lock it
  takes (also taken by `add_checkpoint`) orders every writer of one instance.
- Opened lazily like SQLite; `open()` connects at once, runs the migrations and turns a
  wrong URL, a missing database or a refused connection into one `StoreOpenError` line.
- Durability is the database server's: a commit acknowledged by PostgreSQL survives a
  killed replica whatever its settings; ``synchronous_commit`` decides what survives a
  crash of PostgreSQL itself (docs/deploy.md).
- psycopg is an optional extra (``pip install 'aromcp-workflows[postgres]'``): imported
  only when a ``postgresql://`` store is used.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

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
from aromcp_workflows.store.pg_connect import (
    DEFAULT_POOL_SIZE,
    POOL_ENV_VAR,
    import_psycopg,
    is_postgres_url,
    one_line,
    open_message,
    redact,
)
from aromcp_workflows.store.pg_schema import SCHEMA_VERSION, migrate
from aromcp_workflows.store.sqlite import SqliteStore, _dumps

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

CONNECT_TIMEOUT_S = 10
POOL_TIMEOUT_S = 30.0

_INSTANCE_COLUMNS = (
    "workflow_id, workflow, project_dir, status, definition, inputs, state, threads, "
    "current_steps, error, version, created_at, updated_at"
)
_SUMMARY_COLUMNS = (
    "workflow_id, workflow, project_dir, status, current_steps, error, version, "
    "created_at, updated_at"
)
_INSERT_INSTANCE = (
    f"INSERT INTO instances ({_INSTANCE_COLUMNS}, last_seq, snapshot_version) "
    f"VALUES ({', '.join(['%s'] * 14)}, 1) ON CONFLICT (workflow_id) DO NOTHING RETURNING 1 AS first"
)
# One statement, one snapshot: the row and the deltas written since its full snapshot.
_LOAD_INSTANCE = (
    f"SELECT {_INSTANCE_COLUMNS}, snapshot_version, ARRAY(SELECT d.delta FROM deltas d "
    "WHERE d.workflow_id = i.workflow_id AND d.version > i.snapshot_version ORDER BY d.version) "
    "FROM instances i WHERE workflow_id = %s"
)
_PROGRESS = (  # one statement, one snapshot: the status columns and the deltas after a version
    "SELECT status, current_steps, error, version, updated_at, snapshot_version, "
    "ARRAY(SELECT d.delta FROM deltas d WHERE d.workflow_id = i.workflow_id AND d.version > %s "
    "ORDER BY d.version) FROM instances i WHERE workflow_id = %s"
)
_COMPARE_AND_SET = (
    "version = %s, updated_at = %s, last_seq = last_seq + %s WHERE workflow_id = %s AND version = %s "
    "RETURNING last_seq - %s + 1 AS first"
)
_UPDATE_FULL = (  # a new full snapshot; the deltas up to a version go (see `Store.save`)
    "WITH base AS (UPDATE instances SET status = %s, state = %s, threads = %s, current_steps = %s, error = %s, "
    f"snapshot_version = version + 1, {_COMPARE_AND_SET}), "
    "gone AS (DELETE FROM deltas WHERE workflow_id = %s AND version <= %s AND EXISTS (SELECT 1 FROM base)) "
)
_ADD_DELTA = "added AS (INSERT INTO deltas (workflow_id, version, delta) SELECT %s, %s, %s FROM base) "
_UPDATE_DELTA = (  # the small columns and one delta row; the large columns stay as they are
    "WITH base AS (UPDATE instances SET status = %s, current_steps = %s, error = %s, "
    f"{_COMPARE_AND_SET}), " + _ADD_DELTA
)
# Appended to a `WITH base AS (<write> RETURNING … AS first)`: the write and its history
# rows are one statement (one round trip, atomic in autocommit); no base row, no history.
_FIRST = "SELECT first FROM base"
_INSERT_HISTORY = (  # the events travel as one JSON array of [kind, step_id, task_id, timestamp, data]
    "INSERT INTO history (workflow_id, seq, kind, step_id, task_id, timestamp, data) "
    "SELECT %s, base.first + e.n - 1, e.r->>0, e.r->>1, e.r->>2, e.r->>3, e.r->>4 "
    "FROM base, json_array_elements(%s::json) WITH ORDINALITY AS e(r, n) RETURNING seq"
)


class PostgresStore:
    """A `Store` in one PostgreSQL database; shared by any number of threads and processes."""

    check_with_deltas = True  # one statement, one round trip: see `Store.check_with_deltas`

    def __init__(self, url: str, *, pool_size: int = DEFAULT_POOL_SIZE) -> None:
        if not is_postgres_url(url):
            raise ValueError(f"not a postgresql:// URL: {redact(url)!r}")
        self.url = url
        self.path = redact(url)
        self.pool_size = pool_size
        self.migrated_from: int | None = None
        self._lock = threading.Lock()
        self._pool: ConnectionPool[Any] | None = None
        self._pid = 0
        self._inherited: list[Any] = []  # pools copied by fork(): kept, never closed by the child

    # -- connection ---------------------------------------------------------------

    def open(self) -> None:
        """Connect and migrate now instead of on first use; StoreOpenError (one line) if not."""
        self._get_pool()

    def migrate(self) -> tuple[int, int]:
        """Apply pending migrations now; (version found, version now)."""
        self._get_pool()
        return (self.migrated_from or 0, SCHEMA_VERSION)

    def _get_pool(self) -> ConnectionPool[Any]:
        pool = self._pool
        if pool is not None and self._pid == os.getpid():
            return pool
        with self._lock:
            if self._pool is not None and self._pid == os.getpid():
                return self._pool
            if self._pool is not None:  # inherited through fork(): its sockets are the parent's
                self._inherited.append(self._pool)
                self._pool = None
            psycopg, psycopg_pool = import_psycopg()
            try:
                with psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as conn:
                    self.migrated_from = migrate(conn, self.path)
            except psycopg.Error as exc:
                raise StoreOpenError(open_message(self.path, exc)) from exc
            pool = psycopg_pool.ConnectionPool(
                self.url, min_size=1, max_size=self.pool_size, open=False, timeout=POOL_TIMEOUT_S,
                kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S}, name="aromcp-workflows",
            )
            pool.open(wait=False)
            self._pool, self._pid = pool, os.getpid()
            return pool

    @contextmanager
    def _conn(self, action: str) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection; database failures become a StoreError naming the store."""
        pool = self._get_pool()
        psycopg, psycopg_pool = import_psycopg()
        try:
            with pool.connection() as conn:
                yield conn
        except psycopg_pool.PoolTimeout as exc:
            raise StoreError(
                f"Could not {action} the workflow store {self.path}: no connection within "
                f"{POOL_TIMEOUT_S:g}s ({one_line(exc)}); check that PostgreSQL is up, or raise "
                f"{POOL_ENV_VAR} if the server is busy."
            ) from exc
        except psycopg.Error as exc:
            if isinstance(exc, psycopg.OperationalError):
                pool.check()  # PostgreSQL restarted? drop the other dead idle connections now
            raise StoreError(
                f"Could not {action} the workflow store {self.path}: {one_line(exc)}; check that "
                "PostgreSQL is up and reachable, then retry."
            ) from exc

    def _fetch(self, action: str, sql: str, params: Sequence[Any]) -> list[Any]:
        """The rows of one read.  A connection the server dropped (PostgreSQL restarted while
        it sat in the pool) is replaced and the read tried once more: reads are safe to repeat."""
        psycopg, _ = import_psycopg()
        for attempt in range(2):
            try:
                with self._conn(action) as conn:
                    return conn.execute(sql, params).fetchall()
            except StoreError as exc:
                if attempt or not isinstance(exc.__cause__, psycopg.OperationalError):
                    raise
        raise AssertionError("unreachable")

    @contextmanager
    def _write(self, action: str) -> Iterator[psycopg.Connection[Any]]:
        """One transaction: committed when the block ends, rolled back if it raises."""
        with self._conn(action) as conn, conn.transaction():
            yield conn

    def close(self) -> None:
        with self._lock:
            if self._pool is not None and self._pid == os.getpid():
                self._pool.close()
            self._pool = None

    # -- instances ----------------------------------------------------------------

    def create(self, record: InstanceRecord, events: Iterable[HistoryEvent] = ()) -> int:
        now = utc_now()
        created = record.created_at or now
        row = _instance_values(record, version=1, created_at=created, updated_at=now)
        events = list(events)
        columns = _event_columns(record.workflow_id, events, now)
        with self._conn("create an instance in") as conn:
            if events:
                cur = conn.execute(f"WITH base AS ({_INSERT_INSTANCE}) {_INSERT_HISTORY}",
                                   (*row, len(events), record.workflow_id, columns))
            else:
                cur = conn.execute(_INSERT_INSTANCE, (*row, 0))
            written = cur.rowcount
            if written == 0:
                found = conn.execute(
                    "SELECT version FROM instances WHERE workflow_id = %s", (record.workflow_id,)
                ).fetchone()
                raise ConflictError(record.workflow_id, 0, int(found[0]) if found else 0)
        _number(events, 1)
        record.version, record.created_at, record.updated_at = 1, created, now
        note_saved(record, None, {"state": row[6], "threads": row[7]})
        return 1

    def version(self, workflow_id: str) -> int:
        """The stored version alone (a cheap freshness check for cached instances)."""
        rows = self._fetch("read", "SELECT version FROM instances WHERE workflow_id = %s", (workflow_id,))
        if not rows:
            raise NotFoundError(workflow_id, self.path)
        return int(rows[0][0])

    def load(self, workflow_id: str) -> InstanceRecord:
        """The record: its last full snapshot with the deltas written since applied."""
        rows = self._fetch("read", _LOAD_INSTANCE, (workflow_id,))
        if not rows:
            raise NotFoundError(workflow_id, self.path)
        row = rows[0]
        record = record_from_row(row)
        record.snapshot_version, record.body_bytes = int(row[13]), len(row[6]) + len(row[7])
        return apply_deltas(record, list(row[14]))

    def deltas_since(self, workflow_id: str, version: int) -> CommitsSince | None:
        rows = self._fetch("read", _PROGRESS, (version, workflow_id))
        if not rows:
            raise NotFoundError(workflow_id, self.path)
        return commits_since_from(rows[0], list(rows[0][6]), version)

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
        """Compare-and-set the row and append `events` with the delta, a new full
        snapshot, or both, atomically, in one statement (see `Store.save`)."""
        now = utc_now()
        new_version = expected_version + 1
        wid = record.workflow_id
        if record.status not in STATUSES:
            raise ValueError(f"status of {wid!r} must be one of {', '.join(STATUSES)}, not {record.status!r}")
        encoded = encoded or {}
        body: dict[str, str] = {}
        steps = _dumps(list(record.current_steps), f"the current_steps of {wid!r}")
        events = list(events)
        columns = _event_columns(wid, events, now)
        cas = (new_version, now, len(events), wid, expected_version, len(events))
        params: tuple[Any, ...]
        drop_through = snapshot_drops_through(record, new_version, delta, snapshot)
        full = drop_through is not None
        if full:
            body = {"state": encoded.get("state") or _dumps(record.state, f"the state of {wid!r}"),
                    "threads": encoded.get("threads") or _dumps(record.threads, f"the threads of {wid!r}")}
            write, params = _UPDATE_FULL, (record.status, body["state"], body["threads"], steps, record.error,
                                           *cas, wid, drop_through)
            if delta is not None:  # the snapshot's own delta, for copies still catching up
                write, params = write + ", " + _ADD_DELTA, (*params, wid, new_version, delta)
        else:
            write, params = _UPDATE_DELTA, (record.status, steps, record.error, *cas, wid, new_version, delta)
        with self._conn("save an instance in") as conn:
            if events:  # one statement: compare-and-set, body or delta, numbering and history rows
                rows = conn.execute(write + _INSERT_HISTORY, (*params, wid, columns)).fetchall()
            else:
                rows = conn.execute(write + _FIRST, params).fetchall()
            first = min((int(r[0]) for r in rows), default=None)
            if first is None:
                found = conn.execute("SELECT version FROM instances WHERE workflow_id = %s", (wid,)).fetchone()
                if found is None:
                    raise NotFoundError(wid, self.path)
                raise ConflictError(wid, expected_version, int(found[0]))
        _number(events, first)
        record.version, record.updated_at = new_version, now
        note_saved(record, None if full else delta, body)
        return new_version

    def list_instances(
        self, project_dir: str | None = None, statuses: Sequence[str] | None = None
    ) -> list[InstanceSummary]:
        sql = f"SELECT {_SUMMARY_COLUMNS} FROM instances"
        where: list[str] = []
        params: list[Any] = []
        if project_dir is not None:
            where.append("project_dir = %s")
            params.append(project_dir)
        if statuses:
            where.append("status = ANY(%s)")
            params.append(list(statuses))
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY updated_at DESC, workflow_id"
        rows = self._fetch("list", sql, params)
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
        where = ["workflow_id = %s"]
        params: list[Any] = [workflow_id]
        if kinds:
            where.append("kind = ANY(%s)")
            params.append(list(kinds))
        if task_id is not None:
            where.append("task_id = %s")
            params.append(task_id)
        if after_seq is not None:
            where.append("seq > %s")
            params.append(after_seq)
        sql = (
            "SELECT seq, workflow_id, kind, step_id, task_id, timestamp, data FROM history "
            f"WHERE {' AND '.join(where)} ORDER BY seq DESC"
        )
        if limit is not None:
            sql += " LIMIT %s"
            params.append(max(0, int(limit)))
        rows = self._fetch("read the history of", sql, params)
        rows.reverse()
        return [event_from_row(r) for r in rows]

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
        with self._write("add a checkpoint to") as conn:
            bumped = conn.execute(  # also locks the row: saves of this instance wait for us
                "UPDATE instances SET last_seq = last_seq + 1 WHERE workflow_id = %s RETURNING last_seq",
                (workflow_id,),
            ).fetchone()
            if bumped is None:
                raise NotFoundError(workflow_id, self.path)
            seq = int(bumped[0])
            found = conn.execute(
                "SELECT COALESCE(MAX(n), 0) + 1 FROM checkpoints WHERE workflow_id = %s", (workflow_id,)
            ).fetchone()
            n = int(found[0]) if found else 1
            checkpoint_id = f"cp-{n}"
            conn.execute(
                "INSERT INTO checkpoints (workflow_id, n, checkpoint_id, step_id, reason, created_at, snapshot) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s)",
                (workflow_id, n, checkpoint_id, step_id, reason, now, text),
            )
            event = HistoryEvent(
                kind="checkpoint", step_id=step_id, data={"checkpoint_id": checkpoint_id, "reason": reason},
            )
            columns = _event_columns(workflow_id, [event], now)
            conn.execute(f"WITH base AS (SELECT %s::bigint AS first) {_INSERT_HISTORY}", (seq, workflow_id, columns))
        # A detached copy: later changes to the caller's state must not alter the checkpoint.
        return Checkpoint(checkpoint_id, workflow_id, step_id, reason, now, json.loads(text))

    def get_checkpoint(self, workflow_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        sql = (
            "SELECT checkpoint_id, workflow_id, step_id, reason, created_at, snapshot "
            "FROM checkpoints WHERE workflow_id = %s"
        )
        params: tuple[Any, ...] = (workflow_id,)
        if checkpoint_id is None:
            sql += " ORDER BY n DESC LIMIT 1"
        else:
            sql += " AND checkpoint_id = %s"
            params = (workflow_id, checkpoint_id)
        rows = self._fetch("read a checkpoint from", sql, params)
        if not rows:
            return None
        row = rows[0]
        return Checkpoint(row[0], row[1], row[2], row[3], row[4], json.loads(row[5]))

    def __repr__(self) -> str:
        return f"PostgresStore({self.path!r}, pool_size={self.pool_size})"


def _instance_values(record: InstanceRecord, *, version: int, created_at: str, updated_at: str) -> tuple[Any, ...]:
    """Column values in `_INSTANCE_COLUMNS` order, checked exactly as the SQLite store checks them."""
    row, body = SqliteStore._instance_values(record, version=version, created_at=created_at, updated_at=updated_at)
    return (*row[:4], *body[1:], *row[4:])


def _event_columns(workflow_id: str, events: list[HistoryEvent], now: str) -> str:
    """The events as one JSON array of `[kind, step_id, task_id, timestamp, data]` rows
    for `_INSERT_HISTORY`; checks them and fills in `workflow_id` and `timestamp` in
    place, as SQLite does.  One text parameter: psycopg adapts it at C speed, where five
    text arrays cost about 0.04 ms of Python per save."""
    rows: list[list[str | None]] = []
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
        rows.append([event.kind, event.step_id, event.task_id, event.timestamp,
                     _dumps(event.data, f"history event {event.kind!r} data")])
    return json.dumps(rows, ensure_ascii=False)


def _number(events: list[HistoryEvent], first: int) -> None:
    """Give committed events the seq numbers the database assigned (first, first + 1, …)."""
    for offset, event in enumerate(events):
        event.seq = first + offset
