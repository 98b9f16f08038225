"""The PostgreSQL schema of the workflow store and its migrations.

Same tables and meaning as the SQLite schema (`schema.py`): ``instances``, ``history``,
``checkpoints`` and a ``schema_version`` table with one row per applied migration.  JSON
columns are TEXT, not JSONB: the store never looks inside them, and TEXT keeps the exact
bytes the caller encoded (no re-parse on write, no key reordering on read).  Timestamps are
TEXT in the `utc_now` format so both stores sort and print them identically.

Several replicas may start at once on an empty database: the migration takes a
transaction-scoped advisory lock first, so each migration is applied exactly once and the
others wait, then see it applied.  A database written by a newer release is refused.

Every save rewrites one ``instances`` row, so the table is built for HOT updates (the new
row version stays on the same page and no index changes): no index on a column a save
writes (``updated_at`` is sorted at query time instead), and pages left 30% free
(``fillfactor = 70``).  Without that, each save adds an entry to every index and lookups
slow down as dead row versions pile up between autovacuum runs (measured: 0.6 ms per
save rising to 3-4 ms after 2,500 saves of one instance).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aromcp_workflows.store.queries import (
    CREATE_SCHEMA_VERSION,
    CREATE_START_KEYS,
    CURRENT_SCHEMA_VERSION,
    pending_migrations,
)
from aromcp_workflows.store.records import utc_now

if TYPE_CHECKING:
    import psycopg

# Any constant works; it only has to be the same in every replica ("aromcp" in ASCII).
MIGRATION_LOCK = 0x61726F6D6370

# Append new migrations; never edit a released one.
MIGRATIONS: list[tuple[int, list[str]]] = [
    (
        1,
        [
            """CREATE TABLE instances (
                workflow_id   TEXT PRIMARY KEY,
                workflow      TEXT NOT NULL,
                project_dir   TEXT NOT NULL,
                status        TEXT NOT NULL,
                definition    TEXT NOT NULL,
                inputs        TEXT NOT NULL,
                state         TEXT NOT NULL,
                threads       TEXT NOT NULL,
                current_steps TEXT NOT NULL,
                error         TEXT,
                version       BIGINT NOT NULL,
                created_at    TEXT NOT NULL,
                updated_at    TEXT NOT NULL,
                last_seq      BIGINT NOT NULL DEFAULT 0
            ) WITH (fillfactor = 70)""",
            "CREATE INDEX instances_project_dir ON instances (project_dir)",
            """CREATE TABLE history (
                workflow_id TEXT NOT NULL,
                seq         BIGINT NOT NULL,
                kind        TEXT NOT NULL,
                step_id     TEXT,
                task_id     TEXT,
                timestamp   TEXT NOT NULL,
                data        TEXT NOT NULL,
                PRIMARY KEY (workflow_id, seq)
            )""",
            """CREATE TABLE checkpoints (
                workflow_id   TEXT NOT NULL,
                n             BIGINT NOT NULL,
                checkpoint_id TEXT NOT NULL,
                step_id       TEXT,
                reason        TEXT NOT NULL,
                created_at    TEXT NOT NULL,
                snapshot      TEXT NOT NULL,
                PRIMARY KEY (workflow_id, n)
            )""",
            "CREATE UNIQUE INDEX checkpoints_id ON checkpoints (workflow_id, checkpoint_id)",
        ],
    ),
    (
        # Commit deltas: a commit stores what it changed beside the last full snapshot
        # (`state`/`threads` of the row, rewritten now and then).  A save that writes a
        # delta leaves the large TOASTed columns untouched, so PostgreSQL copies none of
        # them into the new row version.
        2,
        [
            "ALTER TABLE instances ADD COLUMN snapshot_version BIGINT NOT NULL DEFAULT 0",
            "UPDATE instances SET snapshot_version = version",
            """CREATE TABLE deltas (
                workflow_id TEXT NOT NULL,
                version     BIGINT NOT NULL,
                delta       TEXT NOT NULL,
                PRIMARY KEY (workflow_id, version)
            )""",
        ],
    ),
    (
        # `workflow_start`'s idempotency keys; and the token of the write that made each
        # version (`last_commit` of the row, `commit_id` of a delta), by which a write whose
        # acknowledgement was lost with its connection finds out whether it was committed.
        3,
        [
            CREATE_START_KEYS,
            "ALTER TABLE instances ADD COLUMN last_commit TEXT",
            "ALTER TABLE deltas ADD COLUMN commit_id TEXT",
        ],
    ),
]

SCHEMA_VERSION = MIGRATIONS[-1][0]


def migrate(conn: psycopg.Connection[tuple[object, ...]], where: str) -> int:
    """Bring the database to `SCHEMA_VERSION`; returns the version found before migrating."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        conn.execute(CREATE_SCHEMA_VERSION)
        row = conn.execute(CURRENT_SCHEMA_VERSION).fetchone()
        current = int(row[0]) if row else 0  # type: ignore[call-overload]
        for version, statements in pending_migrations(MIGRATIONS, current, where, "another database"):
            for sql in statements:
                conn.execute(sql)  # literal SQL from MIGRATIONS
            conn.execute("INSERT INTO schema_version (version, applied_at) VALUES (%s, %s)", (version, utc_now()))
    return current
