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

This module is the store's methods; its statements are `pg_statements.py`, its connections
and their outages `pg_pool.py`, and a save answered later `pg_pending.py`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from aromcp_workflows.store import decode, writes
from aromcp_workflows.store.base import ConflictError, KeyTakenError, NotFoundError
from aromcp_workflows.store.pg_connect import DEFAULT_POOL_SIZE, is_postgres_url, redact_url
from aromcp_workflows.store.pg_pending import PendingSave, PendingWrite
from aromcp_workflows.store.pg_pool import Committed, StorePool, new_token
from aromcp_workflows.store.pg_schema import SCHEMA_VERSION
from aromcp_workflows.store.pg_statements import (
    ADD_DELTA,
    BODY_AT,
    BUMP_SEQ,
    CHECKPOINTED,
    CREATED,
    FIRST,
    INSERT_HISTORY,
    INSERT_HISTORY_FROM,
    INSERT_INSTANCE,
    LOAD_INSTANCE,
    PROGRESS,
    TAKE_KEY,
    UPDATE_DELTA,
    UPDATE_FULL,
    UPDATE_FULL_DEFINITION,
    VERSION,
    history_rows,
)
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


class PostgresStore:
    """A `Store` in one PostgreSQL database; shared by any number of threads and processes."""

    check_with_deltas = True  # one statement, one round trip: see `Store.check_with_deltas`
    one_host = False  # replicas on other machines: a command's claim is committed before it starts

    def __init__(self, url: str, *, pool_size: int = DEFAULT_POOL_SIZE) -> None:
        if not is_postgres_url(url):
            raise ValueError(f"not a postgresql:// URL: {redact_url(url)!r}")
        self.url = url
        self.path = redact_url(url)
        self.pool_size = pool_size
        self._db = StorePool(url, self.path, pool_size)

    @property
    def migrated_from(self) -> int | None:
        """The schema version the first connection found (None before it was made)."""
        return self._db.migrated_from

    # -- connection ---------------------------------------------------------------

    def open(self) -> None:
        """Connect and migrate now instead of on first use; StoreOpenError (one line) if not."""
        self._db.get()

    def migrate(self) -> tuple[int, int]:
        """Apply pending migrations now; (version found, version now)."""
        self._db.get()
        return (self.migrated_from or 0, SCHEMA_VERSION)

    def close(self) -> None:
        self._db.close()

    # -- instances ----------------------------------------------------------------

    def create(self, record: InstanceRecord, events: Iterable[HistoryEvent] = (), *,
               start_key: StartKey | None = None) -> int:
        plan = writes.plan_create(record, events)
        wid, token = record.workflow_id, new_token()
        values = (*plan.values, len(plan.events), token)
        history = history_rows(plan.events, plan.event_data) if plan.events else None

        def attempt(conn: psycopg.Connection[Any]) -> int:
            if start_key is None:
                return self._insert(conn, wid, values, history)
            with conn.transaction():  # the key and the instance: both or neither
                if conn.execute(TAKE_KEY, (record.project_dir, start_key.key, start_key.request, wid,
                                            plan.now)).fetchone() is None:
                    taken = conn.execute(POSTGRES.start_key(), (record.project_dir, start_key.key)).fetchone()
                    raise KeyTakenError(start_key.key, taken[0], taken[1]) if taken else ConflictError(wid, 0, 0)
                return self._insert(conn, wid, values, history)

        def outcome() -> Committed[int] | None:
            rows = self._db.fetch("read", CREATED, (wid,))
            if not rows:
                return None
            if rows[0][1] != token:
                raise ConflictError(wid, 0, int(rows[0][0]))
            return Committed(1)

        self._db.write_once("create an instance in", attempt, outcome)
        return writes.note_created(record, plan, 1)

    @staticmethod
    def _insert(conn: psycopg.Connection[Any], wid: str, values: tuple[Any, ...], history: str | None) -> int:
        """The instance row and its first history rows, in one statement."""
        if history is not None:
            cur = conn.execute(f"WITH base AS ({INSERT_INSTANCE}) {INSERT_HISTORY}", (*values, wid, history))
        else:
            cur = conn.execute(INSERT_INSTANCE, values)
        if cur.rowcount == 0:
            found = conn.execute(VERSION, (wid,)).fetchone()
            raise ConflictError(wid, 0, int(found[0]) if found else 0)
        return 1

    def started_by(self, project_dir: str, key: str) -> tuple[str, str] | None:
        rows = self._db.fetch("read", POSTGRES.start_key(), (project_dir, key))
        return (rows[0][0], rows[0][1]) if rows else None

    def version(self, workflow_id: str) -> int:
        """The stored version alone (a cheap freshness check for cached instances)."""
        rows = self._db.fetch("read", VERSION, (workflow_id,))
        if not rows:
            raise NotFoundError(workflow_id, self.path)
        return int(rows[0][0])

    def load(self, workflow_id: str) -> InstanceRecord:
        """The record: its last full snapshot with the deltas written since applied."""
        rows = self._db.fetch("read", LOAD_INSTANCE, (workflow_id,))
        if not rows:
            raise NotFoundError(workflow_id, self.path)
        return decode.stored_record(rows[0], rows[0][14])

    def deltas_since(self, workflow_id: str, version: int) -> CommitsSince | None:
        rows = self._db.fetch("read", PROGRESS, (version, workflow_id))
        if not rows:
            raise NotFoundError(workflow_id, self.path)
        return decode.commits_since_from(rows[0], list(rows[0][6]), version)

    def body_at(self, workflow_id: str, version: int) -> Body | None:
        rows = self._db.fetch("read", BODY_AT, (version, workflow_id))
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
        delta, wid, version, count, token = plan.delta, record.workflow_id, plan.version, len(plan.events), new_token()
        cas = (version, plan.now, count, token, wid, expected_version, count)
        params: tuple[Any, ...]
        if plan.full and plan.definition is not None:
            write, params = UPDATE_FULL_DEFINITION, (record.status, plan.body["state"], plan.body["threads"],
                                                      plan.current_steps, record.error, *plan.definition, *cas,
                                                      wid, plan.drop_through)
        elif plan.full:
            write, params = UPDATE_FULL, (record.status, plan.body["state"], plan.body["threads"],
                                           plan.current_steps, record.error, *cas, wid, plan.drop_through)
            if delta is not None:  # the snapshot's own delta, for copies still catching up
                write, params = write + ", " + ADD_DELTA, (*params, wid, version, delta, token)
        else:
            write, params = UPDATE_DELTA, (record.status, plan.current_steps, record.error, *cas, wid, version,
                                            delta, token)
        if count:  # one statement: compare-and-set, body or delta, numbering and history rows
            write, params = write + INSERT_HISTORY, (*params, wid, history_rows(plan.events, plan.event_data))
        else:
            write += FIRST
        return PendingSave(self._db, PendingWrite(wid, expected_version, token, count, write, params), record, plan)

    def list_instances(
        self, project_dir: str | None = None, statuses: Sequence[str] | None = None
    ) -> list[InstanceSummary]:
        sql, params = POSTGRES.instances(project_dir, statuses)
        return [decode.summary_from_row(r) for r in self._db.fetch("list", sql, params)]

    def page_instances(self, where: InstanceFilter, limit: int, offset: int = 0) -> InstancePage:
        rows_sql, rows_params = POSTGRES.instance_page(where, limit, offset)
        count_sql, count_params = POSTGRES.instance_count(where)
        rows = self._db.fetch("list", rows_sql, rows_params)
        total = int(self._db.fetch("count", count_sql, count_params)[0][0])
        return InstancePage([decode.summary_from_row(r) for r in rows], total)

    def instance_groups(self) -> list[InstanceGroup]:
        rows = self._db.fetch("count", POSTGRES.instance_groups(), ())
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
        return decode.events_from_rows(self._db.fetch("read the history of", sql, params))

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
                bumped = conn.execute(BUMP_SEQ, (workflow_id,)).fetchone()  # saves of this instance wait for us
                if bumped is None:
                    raise NotFoundError(workflow_id, self.path)
                found = conn.execute(POSTGRES.next_checkpoint(), (workflow_id,)).fetchone()
                n = int(found[0]) if found else 1
                conn.execute(POSTGRES.insert_checkpoint(), plan.row(n))
                conn.execute(INSERT_HISTORY_FROM, (int(bumped[0]), workflow_id, history_rows(*plan.history(n))))
            return n

        def outcome() -> Committed[int] | None:  # the exact row written (time to the µs, reason, snapshot)
            rows = self._db.fetch("read", CHECKPOINTED, (workflow_id, plan.now, reason, plan.text))
            return Committed(int(rows[0][0])) if rows else None

        return plan.checkpoint(self._db.write_once("add a checkpoint to", attempt, outcome))

    def get_checkpoint(self, workflow_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        sql, params = POSTGRES.checkpoint(workflow_id, checkpoint_id)
        rows = self._db.fetch("read a checkpoint from", sql, params)
        return decode.checkpoint_from_row(rows[0]) if rows else None

    def checkpoints(self, workflow_id: str) -> list[Checkpoint]:
        sql, params = POSTGRES.checkpoints(workflow_id)
        return [decode.checkpoint_from_row(row) for row in self._db.fetch("read the checkpoints of", sql, params)]

    def __repr__(self) -> str:
        return f"PostgresStore({self.path!r}, pool_size={self.pool_size})"
