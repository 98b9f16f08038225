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
- A restart of PostgreSQL is not the caller's problem.  A read whose connection breaks
  is sent again on a fresh one until PostgreSQL answers (`RECONNECT_PATIENCE_S`).  A
  write whose connection breaks may or may not have been committed (the commit can
  succeed and only its acknowledgement be lost), so it is never simply sent again: every
  write carries a random token (``last_commit`` of the row, ``commit_id`` of its delta,
  the exact checkpoint row), and once PostgreSQL answers again the store reads which
  write made the version after the expected one.  Its own token: it was committed, and
  the call goes on.  The expected version still there: nothing was committed, and the
  write is sent again (its compare-and-set still guards it).  Another writer's: a
  conflict, as if the write had lost the race.
- psycopg is an optional extra (``pip install 'aromcp-workflows[postgres]'``): imported
  only when a ``postgresql://`` store is used.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from aromcp_workflows.store import decode, pg_send, writes
from aromcp_workflows.store.base import (
    ConflictError,
    KeyTakenError,
    NotFoundError,
    OutcomeUnknownError,
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

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

T = TypeVar("T")
CONNECT_TIMEOUT_S = 10
POOL_TIMEOUT_S = 30.0
RECONNECT_PATIENCE_S = POOL_TIMEOUT_S  # how long a call waits for PostgreSQL to come back
RETRY_PAUSES_S = (0.0, 0.05, 0.1, 0.2, 0.4, 0.8)  # between attempts on a broken connection; then 1 s
log = logging.getLogger("aromcp_workflows")

_INSTANCE_COLUMNS = (
    "workflow_id, workflow, project_dir, status, definition, inputs, state, threads, "
    "current_steps, error, version, created_at, updated_at"
)
_INSERT_INSTANCE = (
    f"INSERT INTO instances ({_INSTANCE_COLUMNS}, last_seq, last_commit, snapshot_version) "
    f"VALUES ({', '.join(['%s'] * 15)}, 1) ON CONFLICT (workflow_id) DO NOTHING RETURNING 1 AS first"
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
    "version = %s, updated_at = %s, last_seq = last_seq + %s, last_commit = %s WHERE workflow_id = %s AND "
    "version = %s RETURNING last_seq - %s + 1 AS first"
)
_UPDATE_FULL = (  # a new full snapshot; the deltas up to a version go (see `Store.save`)
    "WITH base AS (UPDATE instances SET status = %s, state = %s, threads = %s, current_steps = %s, error = %s, "
    f"snapshot_version = version + 1, {_COMPARE_AND_SET}), "
    "gone AS (DELETE FROM deltas WHERE workflow_id = %s AND version <= %s AND EXISTS (SELECT 1 FROM base)) "
)
_UPDATE_FULL_DEFINITION = _UPDATE_FULL.replace(  # and a new definition snapshot and inputs (a migration)
    "error = %s, snapshot_version", "error = %s, definition = %s, inputs = %s, snapshot_version")
_ADD_DELTA = ("added AS (INSERT INTO deltas (workflow_id, version, delta, commit_id) "
              "SELECT %s, %s, %s, %s FROM base) ")
_UPDATE_DELTA = (  # the small columns and one delta row; the large columns stay as they are
    "WITH base AS (UPDATE instances SET status = %s, current_steps = %s, error = %s, "
    f"{_COMPARE_AND_SET}), " + _ADD_DELTA
)
# Appended to a `WITH base AS (<write> RETURNING … AS first)`: the write and its history
# rows are one statement (one round trip, atomic in autocommit); no base row, no history.
_FIRST = "SELECT first FROM base"
_VERSION = POSTGRES.version()
_TAKE_KEY = POSTGRES.insert_start_key() + " ON CONFLICT (project_dir, key) DO NOTHING RETURNING 1"
# After a broken connection: which write made the version after the expected one (`save`),
# whether an instance was created (`create`) or a checkpoint added, and by whom.
_SAVED = (
    "SELECT version, last_commit, last_seq, (SELECT d.commit_id FROM deltas d WHERE d.workflow_id = i.workflow_id "
    "AND d.version = %s) FROM instances i WHERE workflow_id = %s"
)
_CREATED = "SELECT version, last_commit FROM instances WHERE workflow_id = %s"
_CHECKPOINTED = ("SELECT n FROM checkpoints WHERE workflow_id = %s AND created_at = %s AND reason = %s "
                 "AND snapshot = %s")
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
            _quick_reconnects(psycopg_pool)
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
        """The rows of one read.  A connection the server dropped (PostgreSQL restarted) is
        replaced and the read sent again until PostgreSQL answers: reads are safe to repeat."""
        deadline = time.monotonic() + RECONNECT_PATIENCE_S
        attempt = 0
        while True:
            try:
                with self._conn(action) as conn:
                    return conn.execute(sql, params).fetchall()
            except StoreError as exc:
                if not _broken(exc) or time.monotonic() >= deadline:
                    raise
            _pause(attempt)
            attempt += 1

    def _write_once(self, action: str, attempt: Callable[[psycopg.Connection[Any]], T],
                    outcome: Callable[[], _Committed[T] | None], lost: BaseException | None = None) -> T:
        """Run a write exactly once.  When its connection breaks, the write may have been
        committed or not: `outcome` (a read, which waits for PostgreSQL) tells which —
        committed, with what the write returned; or not, and it is sent again.  `lost`: the
        write was sent already and its connection broke with this error (find out first)."""
        deadline = time.monotonic() + RECONNECT_PATIENCE_S
        while True:
            if lost is None:
                try:
                    with self._conn(action) as conn:
                        return attempt(conn)
                except StoreError as exc:
                    if not _broken(exc) or time.monotonic() >= deadline:
                        raise
                    lost = exc
            done = self._found_out(outcome, lost)
            log.warning("PostgreSQL connection lost while trying to %s %s: the write was %s", action, self.path,
                        "committed" if done is not None else "not committed; sending it again")
            if done is not None:
                return done.value
            lost = None

    def _found_out(self, outcome: Callable[[], _Committed[T] | None], lost: BaseException) -> _Committed[T] | None:
        """`outcome()`, or why it cannot be known (PostgreSQL did not come back in time)."""
        try:
            return outcome()
        except (NotFoundError, ConflictError, OutcomeUnknownError):
            raise
        except StoreError as exc:
            raise OutcomeUnknownError(
                f"The connection to the workflow store {self.path} broke while this change was being "
                f"saved ({one_line(lost.__cause__ or lost)}), and PostgreSQL did not answer again within "
                f"{RECONNECT_PATIENCE_S:g}s ({exc}): whether the change was saved is unknown. Check "
                "that PostgreSQL is up, look at the instance (workflow_status), then retry.") from exc

    def close(self) -> None:
        with self._lock:
            if self._pool is not None and self._pid == os.getpid():
                self._pool.close()
            self._pool = None

    # -- instances ----------------------------------------------------------------

    def create(self, record: InstanceRecord, events: Iterable[HistoryEvent] = (), *,
               start_key: StartKey | None = None) -> int:
        plan = writes.plan_create(record, events)
        wid, token = record.workflow_id, _token()
        values = (*plan.values, len(plan.events), token)
        history = _history_rows(plan.events, plan.event_data) if plan.events else None

        def attempt(conn: psycopg.Connection[Any]) -> int:
            if start_key is None:
                return self._insert(conn, wid, values, history)
            with conn.transaction():  # the key and the instance: both or neither
                if conn.execute(_TAKE_KEY, (record.project_dir, start_key.key, start_key.request, wid,
                                            plan.now)).fetchone() is None:
                    taken = conn.execute(POSTGRES.start_key(), (record.project_dir, start_key.key)).fetchone()
                    raise KeyTakenError(start_key.key, taken[0], taken[1]) if taken else ConflictError(wid, 0, 0)
                return self._insert(conn, wid, values, history)

        def outcome() -> _Committed[int] | None:
            rows = self._fetch("read", _CREATED, (wid,))
            if not rows:
                return None
            if rows[0][1] != token:
                raise ConflictError(wid, 0, int(rows[0][0]))
            return _Committed(1)

        self._write_once("create an instance in", attempt, outcome)
        return writes.note_created(record, plan, 1)

    @staticmethod
    def _insert(conn: psycopg.Connection[Any], wid: str, values: tuple[Any, ...], history: str | None) -> int:
        """The instance row and its first history rows, in one statement."""
        if history is not None:
            cur = conn.execute(f"WITH base AS ({_INSERT_INSTANCE}) {_INSERT_HISTORY}", (*values, wid, history))
        else:
            cur = conn.execute(_INSERT_INSTANCE, values)
        if cur.rowcount == 0:
            found = conn.execute(_VERSION, (wid,)).fetchone()
            raise ConflictError(wid, 0, int(found[0]) if found else 0)
        return 1

    def started_by(self, project_dir: str, key: str) -> tuple[str, str] | None:
        rows = self._fetch("read", POSTGRES.start_key(), (project_dir, key))
        return (rows[0][0], rows[0][1]) if rows else None

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
        return decode.stored_record(rows[0], rows[0][14])

    def deltas_since(self, workflow_id: str, version: int) -> CommitsSince | None:
        rows = self._fetch("read", _PROGRESS, (version, workflow_id))
        if not rows:
            raise NotFoundError(workflow_id, self.path)
        return decode.commits_since_from(rows[0], list(rows[0][6]), version)

    def body_at(self, workflow_id: str, version: int) -> Body | None:
        rows = self._fetch("read", _BODY_AT, (version, workflow_id))
        if not rows:
            raise NotFoundError(workflow_id, self.path)
        return decode.body_from(workflow_id, rows[0], list(rows[0][3]), version)

    def save(self, record: InstanceRecord, expected_version: int, events: Iterable[HistoryEvent] = (),
             **options: Any) -> int:
        """Compare-and-set the row and append `events` with the delta, a new full
        snapshot, or both, atomically, in one statement (see `Store.save`; `options` are
        its `encoded`, `delta`, `snapshot` and `definition`)."""
        return self.begin_save(record, expected_version, events, **options).result()

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
    ) -> PendingSave:
        """`save`, sent now and answered by `PendingSave.result()`: the caller does other work
        while the statement travels and commits.  `record` is brought up to the new version by
        `result()`, as `save` does.  With a new `definition`, the definition and inputs
        columns are written too."""
        plan = writes.plan_save(record, expected_version, events, encoded, delta, snapshot, definition)
        delta, wid, version, count, token = plan.delta, record.workflow_id, plan.version, len(plan.events), _token()
        cas = (version, plan.now, count, token, wid, expected_version, count)
        params: tuple[Any, ...]
        if plan.full and plan.definition is not None:
            write, params = _UPDATE_FULL_DEFINITION, (record.status, plan.body["state"], plan.body["threads"],
                                                      plan.current_steps, record.error, *plan.definition, *cas,
                                                      wid, plan.drop_through)
        elif plan.full:
            write, params = _UPDATE_FULL, (record.status, plan.body["state"], plan.body["threads"],
                                           plan.current_steps, record.error, *cas, wid, plan.drop_through)
            if delta is not None:  # the snapshot's own delta, for copies still catching up
                write, params = write + ", " + _ADD_DELTA, (*params, wid, version, delta, token)
        else:
            write, params = _UPDATE_DELTA, (record.status, plan.current_steps, record.error, *cas, wid, version,
                                            delta, token)
        if count:  # one statement: compare-and-set, body or delta, numbering and history rows
            write, params = write + _INSERT_HISTORY, (*params, wid, _history_rows(plan.events, plan.event_data))
        else:
            write += _FIRST
        return PendingSave(self, _Write(wid, expected_version, token, count, write, params), record, plan)

    def _saved(self, wid: str, expected: int, token: str, count: int) -> _Committed[int | None] | None:
        """After a broken connection: whether the save of `token` made version `expected + 1`
        (with its first history seq when that can still be read), or nothing was committed."""
        rows = self._fetch("read", _SAVED, (expected + 1, wid))
        if not rows:
            raise NotFoundError(wid, self.path)
        found, last, last_seq, delta_commit = int(rows[0][0]), rows[0][1], int(rows[0][2]), rows[0][3]
        if found == expected:
            return None
        if last == token:
            return _Committed(last_seq - count + 1)
        if delta_commit == token:
            return _Committed(None)  # ours, and others wrote since: its seq numbers are not at hand
        if found == expected + 1 or delta_commit is not None:
            raise ConflictError(wid, expected, found)
        raise OutcomeUnknownError(
            f"The connection to the workflow store {self.path} broke while instance {wid} was being saved, and "
            f"{found - expected} later versions were written since: whether this change was one of them cannot "
            "be told any more. Look at the instance (workflow_status) before retrying.")

    def list_instances(
        self, project_dir: str | None = None, statuses: Sequence[str] | None = None
    ) -> list[InstanceSummary]:
        sql, params = POSTGRES.instances(project_dir, statuses)
        return [decode.summary_from_row(r) for r in self._fetch("list", sql, params)]

    def page_instances(self, where: InstanceFilter, limit: int, offset: int = 0) -> InstancePage:
        rows_sql, rows_params = POSTGRES.instance_page(where, limit, offset)
        count_sql, count_params = POSTGRES.instance_count(where)
        rows = self._fetch("list", rows_sql, rows_params)
        total = int(self._fetch("count", count_sql, count_params)[0][0])
        return InstancePage([decode.summary_from_row(r) for r in rows], total)

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
        return decode.events_from_rows(self._fetch("read the history of", sql, params))

    # -- checkpoints ----------------------------------------------------------------

    def add_checkpoint(
        self,
        workflow_id: str,
        step_id: str | None,
        reason: str,
        snapshot: Mapping[str, Any],
    ) -> Checkpoint:
        plan = writes.plan_checkpoint(workflow_id, step_id, reason, snapshot)

        def attempt(conn: psycopg.Connection[Any]) -> int:
            with conn.transaction():
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
            return n

        def outcome() -> _Committed[int] | None:  # the exact row written (time to the µs, reason, snapshot)
            rows = self._fetch("read", _CHECKPOINTED, (workflow_id, plan.now, reason, plan.text))
            return _Committed(int(rows[0][0])) if rows else None

        return plan.checkpoint(self._write_once("add a checkpoint to", attempt, outcome))

    def get_checkpoint(self, workflow_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        sql, params = POSTGRES.checkpoint(workflow_id, checkpoint_id)
        rows = self._fetch("read a checkpoint from", sql, params)
        return decode.checkpoint_from_row(rows[0]) if rows else None

    def checkpoints(self, workflow_id: str) -> list[Checkpoint]:
        sql, params = POSTGRES.checkpoints(workflow_id)
        return [decode.checkpoint_from_row(row) for row in self._fetch("read the checkpoints of", sql, params)]

    def __repr__(self) -> str:
        return f"PostgresStore({self.path!r}, pool_size={self.pool_size})"


@dataclass(frozen=True)
class _Write:
    """One save statement, and what tells it apart from every other writer's (its token)."""

    workflow_id: str
    expected: int
    token: str
    events: int
    sql: str
    params: tuple[Any, ...]


class PendingSave:
    """A save on its way to PostgreSQL (`PostgresStore.begin_save`).

    The statement is sent at once on a pooled connection, through libpq's asynchronous calls
    (`pg_send.Sent`).  `ready()` tells without waiting whether its answer is in; `result()`
    reads it — the new version, or `ConflictError`/`NotFoundError` as `save` raises them —
    and gives the connection back.  A connection that breaks on the way is handled as in
    every write (`PostgresStore._write_once`): the store finds out whether the save was
    committed and sends it again only when it was not.  `result()` may be called from any
    thread and any number of times: the first call does the work, the others get its outcome."""

    def __init__(self, store: PostgresStore, write: _Write, record: InstanceRecord, plan: writes.PlannedSave) -> None:
        self.store, self.write, self.record, self.plan = store, write, record, plan
        self._lock = threading.Lock()
        self._outcome: tuple[int | None, BaseException | None] | None = None
        self._conn: Any = None
        self._sent: Any = None
        try:
            self._conn = store._get_pool().getconn(timeout=POOL_TIMEOUT_S)
            self._sent = pg_send.Sent(self._conn, pg_send.numbered(write.sql), write.params)
        except Exception:  # nothing reached PostgreSQL for sure: `result()` takes the road of every write
            self._sent = None

    def poll(self) -> str:
        """Without waiting (never even for the lock: the event loop asks): "in" when
        `result()` would only read an answer that has come (or give an outcome known
        already), "waiting" while the answer is on its way (`fileno` turns readable as it
        comes), "broken" when `result()` has a failure to handle or another thread is at it
        (it may wait for PostgreSQL to come back)."""
        if not self._lock.acquire(blocking=False):
            return "broken"  # another thread is reading it (maybe waiting for PostgreSQL): wait in a thread
        try:
            if self._outcome is not None:
                return "in"
            return "broken" if self._sent is None else str(self._sent.poll())
        finally:
            self._lock.release()

    def fileno(self) -> int | None:
        if not self._lock.acquire(blocking=False):
            return None
        try:
            return None if self._sent is None or self._outcome is not None else self._sent.fileno()
        finally:
            self._lock.release()

    def result(self) -> int:
        with self._lock:
            if self._outcome is None:
                try:
                    self._outcome = (self._finish(), None)
                except BaseException as exc:
                    self._outcome = (None, exc)
            version, error = self._outcome
        if error is not None:
            raise error
        assert version is not None
        return version

    def _finish(self) -> int:
        write, store = self.write, self.store
        first: int | None
        try:
            if self._sent is None:
                raise pg_send.Broken("no connection")
            first = min(self._sent.rows(), default=None)
            if first is None:  # compare-and-set found another version (or no instance): which?
                found = store._fetch("read", _VERSION, (write.workflow_id,))
                raise writes.save_refused(write.workflow_id, write.expected, found[0] if found else None, store.path)
        except pg_send.Refused as exc:
            raise StoreError(f"Could not save an instance in the workflow store {store.path}: {exc}") from None
        except pg_send.Broken as exc:
            self._release(broken=True)
            first = store._write_once("save an instance in", self._send_again, lambda: store._saved(
                write.workflow_id, write.expected, write.token, write.events), exc)
        finally:
            self._release()
        return writes.note_committed(self.record, self.plan, first)

    def _send_again(self, conn: psycopg.Connection[Any]) -> int | None:
        """The statement once more, the ordinary way (after a broken connection, nothing committed)."""
        write = self.write
        first = min((int(r[0]) for r in conn.execute(write.sql, write.params).fetchall()), default=None)
        if first is None:
            raise writes.save_refused(write.workflow_id, write.expected,
                                    conn.execute(_VERSION, (write.workflow_id,)).fetchone(), self.store.path)
        return first

    def _release(self, broken: bool = False) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if broken:
            with contextlib.suppress(Exception):
                conn.close()  # the pool sees it closed and replaces it
        self.store._get_pool().putconn(conn)


@dataclass(frozen=True)
class _Committed(Generic[T]):
    """A write found committed after its connection broke, with what the write returns."""

    value: T


def _token() -> str:
    """The random token a write leaves on what it writes (see the module's docstring)."""
    return secrets.token_hex(8)


def _broken(exc: StoreError) -> bool:
    """Whether a store error is a lost or refused connection (PostgreSQL restarting, say),
    after which the same request may succeed; not a refusal of the request itself."""
    psycopg, _ = import_psycopg()
    return isinstance(exc.__cause__, psycopg.OperationalError)


def _quick_reconnects(psycopg_pool: Any) -> None:
    """The pool tries to reconnect 1, 2, 4, 8 … s after losing PostgreSQL; after a restart of
    a second or two a replica could then wait for several seconds more — past the lease of
    the commands it runs, which another replica would then run again.  Start at 0.1 s and
    grow by half: a replica is back within about half a second of PostgreSQL."""
    attempt = psycopg_pool.base.AttemptWithBackoff
    attempt.INITIAL_DELAY, attempt.DELAY_BACKOFF = 0.1, 1.5


def _pause(attempt: int) -> None:
    time.sleep(RETRY_PAUSES_S[attempt] if attempt < len(RETRY_PAUSES_S) else 1.0)


def _history_rows(events: list[HistoryEvent], data: list[str]) -> str:
    """Checked events (`event_texts` gave their `data`) as the one JSON array of `[kind,
    step_id, task_id, timestamp, data]` rows `_INSERT_HISTORY` reads.  One text parameter:
    psycopg adapts it at C speed, where five text arrays cost about 0.04 ms of Python per save."""
    return json.dumps([[e.kind, e.step_id, e.task_id, e.timestamp, text] for e, text in zip(events, data, strict=True)],
                      ensure_ascii=False)
