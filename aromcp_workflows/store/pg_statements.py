"""The PostgreSQL store's own statements: what `PostgresStore` sends where SQLite's differ.

Each write is ONE statement (``WITH base AS (UPDATE … RETURNING …) INSERT INTO history …``):
atomic in autocommit, and one round trip.  Each read of an instance is one statement too,
so the row and its deltas come from one snapshot.  The queries both databases send alike
are in `queries.py`; the statements that find out, after a broken connection, whether a
write was committed (`SAVED`, `CREATED`, `CHECKPOINTED`) are here with the writes they check.
"""

from __future__ import annotations

import json

from aromcp_workflows.store.queries import POSTGRES
from aromcp_workflows.store.records import HistoryEvent

_INSTANCE_COLUMNS = (
    "workflow_id, workflow, project_dir, status, definition, inputs, state, threads, "
    "current_steps, error, version, created_at, updated_at"
)
INSERT_INSTANCE = (
    f"INSERT INTO instances ({_INSTANCE_COLUMNS}, last_seq, last_commit, snapshot_version) "
    f"VALUES ({', '.join(['%s'] * 15)}, 1) ON CONFLICT (workflow_id) DO NOTHING RETURNING 1 AS first"
)
# One statement, one snapshot: the row and the deltas written since its full snapshot.
LOAD_INSTANCE = (
    f"SELECT {_INSTANCE_COLUMNS}, snapshot_version, ARRAY(SELECT d.delta FROM deltas d "
    "WHERE d.workflow_id = i.workflow_id AND d.version > i.snapshot_version ORDER BY d.version) "
    "FROM instances i WHERE workflow_id = %s"
)
PROGRESS = (  # one statement, one snapshot: the status columns and the deltas after a version
    "SELECT status, current_steps, error, version, updated_at, snapshot_version, "
    "ARRAY(SELECT d.delta FROM deltas d WHERE d.workflow_id = i.workflow_id AND d.version > %s "
    "ORDER BY d.version) FROM instances i WHERE workflow_id = %s"
)
BODY_AT = (  # one statement, one snapshot: the full snapshot and the deltas after it up to a version
    "SELECT state, threads, snapshot_version, ARRAY(SELECT d.delta FROM deltas d WHERE d.workflow_id = "
    "i.workflow_id AND d.version > i.snapshot_version AND d.version <= %s ORDER BY d.version) "
    "FROM instances i WHERE workflow_id = %s"
)
_COMPARE_AND_SET = (
    "version = %s, updated_at = %s, last_seq = last_seq + %s, last_commit = %s WHERE workflow_id = %s AND "
    "version = %s RETURNING last_seq - %s + 1 AS first"
)
UPDATE_FULL = (  # a new full snapshot; the deltas up to a version go (see `Store.save`)
    "WITH base AS (UPDATE instances SET status = %s, state = %s, threads = %s, current_steps = %s, error = %s, "
    f"snapshot_version = version + 1, {_COMPARE_AND_SET}), "
    "gone AS (DELETE FROM deltas WHERE workflow_id = %s AND version <= %s AND EXISTS (SELECT 1 FROM base)) "
)
UPDATE_FULL_DEFINITION = UPDATE_FULL.replace(  # and a new definition snapshot and inputs (a migration)
    "error = %s, snapshot_version", "error = %s, definition = %s, inputs = %s, snapshot_version")
ADD_DELTA = ("added AS (INSERT INTO deltas (workflow_id, version, delta, commit_id) "
              "SELECT %s, %s, %s, %s FROM base) ")
UPDATE_DELTA = (  # the small columns and one delta row; the large columns stay as they are
    "WITH base AS (UPDATE instances SET status = %s, current_steps = %s, error = %s, "
    f"{_COMPARE_AND_SET}), " + ADD_DELTA
)
# Appended to a `WITH base AS (<write> RETURNING … AS first)`: the write and its history
# rows are one statement (one round trip, atomic in autocommit); no base row, no history.
FIRST = "SELECT first FROM base"
VERSION = POSTGRES.version()
TAKE_KEY = POSTGRES.insert_start_key() + " ON CONFLICT (project_dir, key) DO NOTHING RETURNING 1"
# After a broken connection: which write made the version after the expected one (`save`),
# whether an instance was created (`create`) or a checkpoint added, and by whom.
SAVED = (
    "SELECT version, last_commit, last_seq, (SELECT d.commit_id FROM deltas d WHERE d.workflow_id = i.workflow_id "
    "AND d.version = %s) FROM instances i WHERE workflow_id = %s"
)
CREATED = "SELECT version, last_commit FROM instances WHERE workflow_id = %s"
CHECKPOINTED = ("SELECT n FROM checkpoints WHERE workflow_id = %s AND created_at = %s AND reason = %s "
                "AND snapshot = %s")
INSERT_HISTORY = (  # the events travel as one JSON array of [kind, step_id, task_id, timestamp, data]
    "INSERT INTO history (workflow_id, seq, kind, step_id, task_id, timestamp, data) "
    "SELECT %s, base.first + e.n - 1, e.r->>0, e.r->>1, e.r->>2, e.r->>3, e.r->>4 "
    "FROM base, json_array_elements(%s::json) WITH ORDINALITY AS e(r, n) RETURNING seq"
)
# `add_checkpoint`: bump the history counter (and lock the row: saves of this instance wait),
# then its history row numbered from the bumped value.
BUMP_SEQ = "UPDATE instances SET last_seq = last_seq + 1 WHERE workflow_id = %s RETURNING last_seq"
INSERT_HISTORY_FROM = f"WITH base AS (SELECT %s::bigint AS first) {INSERT_HISTORY}"


def history_rows(events: list[HistoryEvent], data: list[str]) -> str:
    """Checked events (`event_texts` gave their `data`) as the one JSON array of `[kind,
    step_id, task_id, timestamp, data]` rows `INSERT_HISTORY` reads.  One text parameter:
    psycopg adapts it at C speed, where five text arrays cost about 0.04 ms of Python per save."""
    return json.dumps([[e.kind, e.step_id, e.task_id, e.timestamp, text] for e, text in zip(events, data, strict=True)],
                      ensure_ascii=False)
