"""The SQLite schema of the workflow store and its migrations.

The ``schema_version`` table holds one row per applied migration. Migrations run in one
``BEGIN IMMEDIATE`` transaction, so two processes opening a new file at once apply each
migration exactly once. A file written by a newer release (a version this code does not
know) is refused rather than guessed at.
"""

from __future__ import annotations

import sqlite3

from aromcp_workflows.store.queries import (
    CREATE_SCHEMA_VERSION,
    CREATE_START_KEYS,
    CURRENT_SCHEMA_VERSION,
    pending_migrations,
)
from aromcp_workflows.store.records import utc_now

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
                version       INTEGER NOT NULL,
                created_at    TEXT NOT NULL,
                updated_at    TEXT NOT NULL
            )""",
            "CREATE INDEX instances_project_dir ON instances (project_dir)",
            """CREATE TABLE history (
                workflow_id TEXT NOT NULL,
                seq         INTEGER NOT NULL,
                kind        TEXT NOT NULL,
                step_id     TEXT,
                task_id     TEXT,
                timestamp   TEXT NOT NULL,
                data        TEXT NOT NULL,
                PRIMARY KEY (workflow_id, seq)
            ) WITHOUT ROWID""",
            """CREATE TABLE checkpoints (
                workflow_id   TEXT NOT NULL,
                n             INTEGER NOT NULL,
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
        # Commit deltas.  SQLite rewrites a whole row when any column changes, so the
        # large JSON moves out of the row a commit updates: `instances` keeps the small
        # mutable columns, `bodies` the last full snapshot (written now and then), and
        # `deltas` one row per commit since that snapshot.
        2,
        [
            """CREATE TABLE bodies (
                workflow_id TEXT PRIMARY KEY,
                definition  TEXT NOT NULL,
                inputs      TEXT NOT NULL,
                state       TEXT NOT NULL,
                threads     TEXT NOT NULL
            )""",
            "INSERT INTO bodies SELECT workflow_id, definition, inputs, state, threads FROM instances",
            "ALTER TABLE instances ADD COLUMN snapshot_version INTEGER NOT NULL DEFAULT 0",
            "UPDATE instances SET snapshot_version = version",
            "ALTER TABLE instances DROP COLUMN definition",
            "ALTER TABLE instances DROP COLUMN inputs",
            "ALTER TABLE instances DROP COLUMN state",
            "ALTER TABLE instances DROP COLUMN threads",
            """CREATE TABLE deltas (
                workflow_id TEXT NOT NULL,
                version     INTEGER NOT NULL,
                delta       TEXT NOT NULL,
                PRIMARY KEY (workflow_id, version)
            )""",
        ],
    ),
    (
        # `workflow_start`'s idempotency keys (a resent start returns the instance it made).
        3,
        [CREATE_START_KEYS + " WITHOUT ROWID"],
    ),
]

SCHEMA_VERSION = MIGRATIONS[-1][0]


def migrate(conn: sqlite3.Connection, path: str) -> int:
    """Bring the file to `SCHEMA_VERSION`; returns the version found before migrating."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(CREATE_SCHEMA_VERSION)
        current = int(conn.execute(CURRENT_SCHEMA_VERSION).fetchone()[0])
        for version, statements in pending_migrations(MIGRATIONS, current, path, "another store file"):
            for sql in statements:
                conn.execute(sql)
            conn.execute("INSERT INTO schema_version (version, applied_at) VALUES (?, ?)", (version, utc_now()))
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return current
