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

from aromcp_workflows.store import base
from aromcp_workflows.store.base import (
    Checkpoint,
    CommitsSince,
    ConflictError,
    HistoryEvent,
    InstanceFilter,
    InstanceGroup,
    InstancePage,
    InstanceRecord,
    InstanceSummary,
    NotFoundError,
    StoreError,
    StoreOpenError,
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
from aromcp_workflows.store.queries import POSTGRES

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

CONNECT_TIMEOUT_S = 10
POOL_TIMEOUT_S = 30.0

_INSTANCE_COLUMNS = (
    "workflow_id, workflow, project_dir, status, definition, inputs, state, threads, "
    "current_steps, error, version, created_at, updated_at"
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
_BODY_AT = (  # one statement, one snapshot: the full snapshot and the deltas after it up to a version
    "SELECT state, threads, snapshot_version, ARRAY(SELECT d.delta FROM deltas d WHERE d.workflow_id = "
    "i.workflow_id AND d.version > i.snapshot_version AND d.version <= %s ORDER BY d.version) "
    "FROM instances i WHERE workflow_id = %s"
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
_UPDATE_FULL_DEFINITION = _UPDATE_FULL.replace(  # and a new definition snapshot and inputs (a migration)
    "error = %s, snapshot_version", "error = %s, definition = %s, inputs = %s, snapshot_version")
_ADD_DELTA = "added AS (INSERT INTO deltas (workflow_id, version, delta) SELECT %s, %s, %s FROM base) "
_UPDATE_DELTA = (  # the small columns and one delta row; the large columns stay as they are
    "WITH base AS (UPDATE instances SET status = %s, current_steps = %s, error = %s, "
    f"{_COMPARE_AND_SET}), " + _ADD_DELTA
)
# Appended to a `WITH base AS (<write> RETURNING … AS first)`: the write and its history
# rows are one statement (one round trip, atomic in autocommit); no base row, no history.
_FIRST = "SELECT first FROM base"
_VERSION = POSTGRES.version()
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
        plan = base.plan_create(record, events)
        with self._conn("create an instance in") as conn:
            if plan.events:
                history = _history_rows(plan.events, plan.event_data)
                cur = conn.execute(f"WITH base AS ({_INSERT_INSTANCE}) {_INSERT_HISTORY}",
                                   (*plan.values, len(plan.events), record.workflow_id, history))
            else:
                cur = conn.execute(_INSERT_INSTANCE, (*plan.values, 0))
            if cur.rowcount == 0:
                found = conn.execute(_VERSION, (record.workflow_id,)).fetchone()
                raise ConflictError(record.workflow_id, 0, int(found[0]) if found else 0)
        return base.note_created(record, plan, 1)

    def version(self, workflow_id: str) -> int:
        """The stored version alone (a cheap freshness check for cached instances)."""
        rows = self._fetch("read", _VERSION, (workflow_id,))
        if not rows:
            raise NotFoundError(workflow_id, self.path)
        return int(rows[0][0])

    def load(self, workflow_id: str) -> InstanceRecord:
        """The record: its last full snapshot with the deltas written since applied."""
        rows = self._fetch("read", _LOAD_INSTANCE, (workflow_id,))
        if not rows:
            raise NotFoundError(workflow_id, self.path)
        return base.stored_record(rows[0], rows[0][14])

    def deltas_since(self, workflow_id: str, version: int) -> CommitsSince | None:
        rows = self._fetch("read", _PROGRESS, (version, workflow_id))
        if not rows:
            raise NotFoundError(workflow_id, self.path)
        return base.commits_since_from(rows[0], list(rows[0][6]), version)

    def body_at(self, workflow_id: str, version: int) -> base.Body | None:
        rows = self._fetch("read", _BODY_AT, (version, workflow_id))
        if not rows:
            raise NotFoundError(workflow_id, self.path)
        return base.body_from(workflow_id, rows[0], list(rows[0][3]), version)

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
        """Compare-and-set the row and append `events` with the delta, a new full
        snapshot, or both, atomically, in one statement (see `Store.save`); with a new
        `definition`, the definition and inputs columns too."""
        plan = base.plan_save(record, expected_version, events, encoded, delta, snapshot, definition)
        delta, wid, version, count = plan.delta, record.workflow_id, plan.version, len(plan.events)
        cas = (version, plan.now, count, wid, expected_version, count)
        params: tuple[Any, ...]
        if plan.full and plan.definition is not None:
            write, params = _UPDATE_FULL_DEFINITION, (record.status, plan.body["state"], plan.body["threads"],
                                                      plan.current_steps, record.error, *plan.definition, *cas,
                                                      wid, plan.drop_through)
        elif plan.full:
            write, params = _UPDATE_FULL, (record.status, plan.body["state"], plan.body["threads"],
                                           plan.current_steps, record.error, *cas, wid, plan.drop_through)
            if delta is not None:  # the snapshot's own delta, for copies still catching up
                write, params = write + ", " + _ADD_DELTA, (*params, wid, version, delta)
        else:
            write, params = _UPDATE_DELTA, (record.status, plan.current_steps, record.error, *cas, wid, version, delta)
        with self._conn("save an instance in") as conn:
            if count:  # one statement: compare-and-set, body or delta, numbering and history rows
                params = (*params, wid, _history_rows(plan.events, plan.event_data))
                rows = conn.execute(write + _INSERT_HISTORY, params).fetchall()
            else:
                rows = conn.execute(write + _FIRST, params).fetchall()
            first = min((int(r[0]) for r in rows), default=None)
            if first is None:
                raise base.save_refused(wid, expected_version, conn.execute(_VERSION, (wid,)).fetchone(), self.path)
        return base.note_committed(record, plan, first)

    def list_instances(
        self, project_dir: str | None = None, statuses: Sequence[str] | None = None
    ) -> list[InstanceSummary]:
        sql, params = POSTGRES.instances(project_dir, statuses)
        return [base.summary_from_row(r) for r in self._fetch("list", sql, params)]

    def page_instances(self, where: InstanceFilter, limit: int, offset: int = 0) -> InstancePage:
        rows_sql, rows_params = POSTGRES.instance_page(where, limit, offset)
        count_sql, count_params = POSTGRES.instance_count(where)
        rows = self._fetch("list", rows_sql, rows_params)
        total = int(self._fetch("count", count_sql, count_params)[0][0])
        return InstancePage([base.summary_from_row(r) for r in rows], total)

    def instance_groups(self) -> list[InstanceGroup]:
        rows = self._fetch("count", POSTGRES.instance_groups(), ())
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
        sql, params = POSTGRES.history(workflow_id, kinds, task_id, limit, after_seq)
        return base.events_from_rows(self._fetch("read the history of", sql, params))

    # -- checkpoints ----------------------------------------------------------------

    def add_checkpoint(
        self,
        workflow_id: str,
        step_id: str | None,
        reason: str,
        snapshot: Mapping[str, Any],
    ) -> Checkpoint:
        plan = base.plan_checkpoint(workflow_id, step_id, reason, snapshot)
        with self._write("add a checkpoint to") as conn:
            bumped = conn.execute(  # also locks the row: saves of this instance wait for us
                "UPDATE instances SET last_seq = last_seq + 1 WHERE workflow_id = %s RETURNING last_seq",
                (workflow_id,),
            ).fetchone()
            if bumped is None:
                raise NotFoundError(workflow_id, self.path)
            found = conn.execute(POSTGRES.next_checkpoint(), (workflow_id,)).fetchone()
            n = int(found[0]) if found else 1
            conn.execute(POSTGRES.insert_checkpoint(), plan.row(n))
            conn.execute(f"WITH base AS (SELECT %s::bigint AS first) {_INSERT_HISTORY}",
                         (int(bumped[0]), workflow_id, _history_rows(*plan.history(n))))
        return plan.checkpoint(n)

    def get_checkpoint(self, workflow_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        sql, params = POSTGRES.checkpoint(workflow_id, checkpoint_id)
        rows = self._fetch("read a checkpoint from", sql, params)
        return base.checkpoint_from_row(rows[0]) if rows else None

    def checkpoints(self, workflow_id: str) -> list[Checkpoint]:
        sql, params = POSTGRES.checkpoints(workflow_id)
        return [base.checkpoint_from_row(row) for row in self._fetch("read the checkpoints of", sql, params)]

    def __repr__(self) -> str:
        return f"PostgresStore({self.path!r}, pool_size={self.pool_size})"


def _history_rows(events: list[HistoryEvent], data: list[str]) -> str:
    """Checked events (`event_texts` gave their `data`) as the one JSON array of `[kind,
    step_id, task_id, timestamp, data]` rows `_INSERT_HISTORY` reads.  One text parameter:
    psycopg adapts it at C speed, where five text arrays cost about 0.04 ms of Python per save."""
    return json.dumps([[e.kind, e.step_id, e.task_id, e.timestamp, text] for e, text in zip(events, data, strict=True)],
                      ensure_ascii=False)
