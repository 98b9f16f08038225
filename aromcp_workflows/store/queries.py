"""The queries both stores send alike, written once.

SQLite and PostgreSQL hold the same tables for reading (`schema.py`, `pg_schema.py`), so
what a filter means (a project, some statuses, the latest N events) is one rule; the two
databases differ only in how a query names its parameters (`?`, `%s`) and matches a
column against a list of values.  That difference is a `Dialect`.  Where the two really
differ (a save is a transaction of several statements in SQLite and one statement in
PostgreSQL; the instance row is split in two in SQLite) the SQL stays in `sqlite.py` and
`postgres.py`.  The schema migrations' own table and the rule that orders and refuses them
(`pending_migrations`) are shared too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aromcp_workflows.store.base import StoreOpenError

if TYPE_CHECKING:
    from aromcp_workflows.store.records import InstanceFilter

# `workflow_start`'s idempotency keys: one row per key and project, naming the instance the
# key started and a fingerprint of the request (`records.StartKey`).  The same text in both.
CREATE_START_KEYS = (
    "CREATE TABLE start_keys (project_dir TEXT NOT NULL, key TEXT NOT NULL, request TEXT NOT NULL, "
    "workflow_id TEXT NOT NULL, created_at TEXT NOT NULL, PRIMARY KEY (project_dir, key))"
)

# The migrations' own table, one row per applied migration (`pending_migrations`).
CREATE_SCHEMA_VERSION = (
    "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)"
)
CURRENT_SCHEMA_VERSION = "SELECT COALESCE(MAX(version), 0) FROM schema_version"


def pending_migrations(migrations: list[tuple[int, list[str]]], current: int, where: str,
                       other: str) -> list[tuple[int, list[str]]]:
    """The migrations a store at schema version `current` still needs, in order.  A store
    written by a newer release is refused rather than guessed at: `other` names what the
    user may use instead (another store file, another database)."""
    newest = migrations[-1][0]
    if current > newest:
        raise StoreOpenError(
            f"The workflow store {where} has schema version {current}, but this release of "
            f"aromcp-workflows knows only up to version {newest}. Upgrade "
            f"aromcp-workflows, or use {other} (--store / AROMCP_WORKFLOWS_STORE)."
        )
    return [(version, statements) for version, statements in migrations if version > current]

_SUMMARY_COLUMNS = (
    "workflow_id, workflow, project_dir, status, current_steps, error, version, created_at, updated_at"
)


@dataclass(frozen=True)
class Dialect:
    """The shared queries as one database spells them: its parameter placeholder, and how
    it matches a column against a list of values."""

    mark: str  # the parameter placeholder
    array_parameters: bool  # a list travels as one array parameter (`= ANY(%s)`), else one per value

    def among(self, column: str, values: Sequence[str]) -> tuple[str, list[Any]]:
        """`column` is one of `values`: the condition and its parameters."""
        if self.array_parameters:
            return f"{column} = ANY({self.mark})", [list(values)]
        return f"{column} IN ({', '.join([self.mark] * len(values))})", list(values)

    def version(self) -> str:
        """The stored version of one instance (a freshness check, and why a save was refused)."""
        return f"SELECT version FROM instances WHERE workflow_id = {self.mark}"

    def instances(self, project_dir: str | None, statuses: Sequence[str] | None) -> tuple[str, list[Any]]:
        """`Store.list_instances`: `summary_from_row`'s columns, most recently updated first."""
        where: list[str] = []
        params: list[Any] = []
        if project_dir is not None:
            where.append(f"project_dir = {self.mark}")
            params.append(project_dir)
        if statuses:
            condition, values = self.among("status", statuses)
            where.append(condition)
            params.extend(values)
        sql = f"SELECT {_SUMMARY_COLUMNS} FROM instances"
        if where:
            sql += " WHERE " + " AND ".join(where)
        return sql + " ORDER BY updated_at DESC, workflow_id", params

    def _matching(self, where: InstanceFilter) -> tuple[str, list[Any]]:
        """The WHERE clause (empty when everything matches) of a filtered listing."""
        conditions: list[str] = []
        params: list[Any] = []
        for column, value in (("project_dir", where.project_dir), ("workflow", where.workflow)):
            if value is not None:
                conditions.append(f"{column} = {self.mark}")
                params.append(value)
        if where.statuses:
            condition, values = self.among("status", where.statuses)
            conditions.append(condition)
            params.extend(values)
        return (" WHERE " + " AND ".join(conditions)) if conditions else "", params

    def instance_page(self, where: InstanceFilter, limit: int, offset: int) -> tuple[str, list[Any]]:
        """`Store.page_instances`' rows: `summary_from_row`'s columns, newest started first."""
        condition, params = self._matching(where)
        return (f"SELECT {_SUMMARY_COLUMNS} FROM instances{condition} "
                f"ORDER BY created_at DESC, workflow_id DESC LIMIT {self.mark} OFFSET {self.mark}",
                [*params, max(0, int(limit)), max(0, int(offset))])

    def instance_count(self, where: InstanceFilter) -> tuple[str, list[Any]]:
        """`Store.page_instances`' total."""
        condition, params = self._matching(where)
        return f"SELECT COUNT(*) FROM instances{condition}", params

    def instance_groups(self) -> str:
        """`Store.instance_groups`: workflow, project_dir, status, count."""
        return "SELECT workflow, project_dir, status, COUNT(*) FROM instances GROUP BY workflow, project_dir, status"

    def history(self, workflow_id: str, kinds: Sequence[str] | None, task_id: str | None, limit: int | None,
                after_seq: int | None) -> tuple[str, list[Any]]:
        """`Store.history`: `event_from_row`'s columns, newest first, so that `limit` keeps the
        latest matches (`events_from_rows` puts them back in commit order)."""
        where = [f"workflow_id = {self.mark}"]
        params: list[Any] = [workflow_id]
        if kinds:
            condition, values = self.among("kind", kinds)
            where.append(condition)
            params.extend(values)
        if task_id is not None:
            where.append(f"task_id = {self.mark}")
            params.append(task_id)
        if after_seq is not None:
            where.append(f"seq > {self.mark}")
            params.append(after_seq)
        sql = (
            "SELECT seq, workflow_id, kind, step_id, task_id, timestamp, data FROM history "
            f"WHERE {' AND '.join(where)} ORDER BY seq DESC"
        )
        if limit is not None:
            sql += f" LIMIT {self.mark}"
            params.append(max(0, int(limit)))
        return sql, params

    def checkpoint(self, workflow_id: str, checkpoint_id: str | None) -> tuple[str, list[Any]]:
        """`Store.get_checkpoint`: `checkpoint_from_row`'s columns of the named checkpoint, or
        of the latest when `checkpoint_id` is None."""
        sql = (
            "SELECT checkpoint_id, workflow_id, step_id, reason, created_at, snapshot "
            f"FROM checkpoints WHERE workflow_id = {self.mark}"
        )
        if checkpoint_id is None:
            return sql + " ORDER BY n DESC LIMIT 1", [workflow_id]
        return sql + f" AND checkpoint_id = {self.mark}", [workflow_id, checkpoint_id]

    def checkpoints(self, workflow_id: str) -> tuple[str, list[Any]]:
        """`Store.checkpoints`: `checkpoint_from_row`'s columns of every checkpoint, oldest first."""
        return ("SELECT checkpoint_id, workflow_id, step_id, reason, created_at, snapshot "
                f"FROM checkpoints WHERE workflow_id = {self.mark} ORDER BY n", [workflow_id])

    def next_checkpoint(self) -> str:
        """The number of an instance's next checkpoint (its id is ``cp-<n>``)."""
        return f"SELECT COALESCE(MAX(n), 0) + 1 FROM checkpoints WHERE workflow_id = {self.mark}"

    def start_key(self) -> str:
        """`Store.started_by`: the instance a start key started in a project, and its request."""
        return f"SELECT workflow_id, request FROM start_keys WHERE project_dir = {self.mark} AND key = {self.mark}"

    def insert_start_key(self) -> str:
        """One start key row: project_dir, key, request, workflow_id, created_at."""
        return ("INSERT INTO start_keys (project_dir, key, request, workflow_id, created_at) "
                f"VALUES ({', '.join([self.mark] * 5)})")

    def insert_checkpoint(self) -> str:
        """One checkpoint row: workflow_id, n, checkpoint_id, step_id, reason, created_at, snapshot."""
        return ("INSERT INTO checkpoints (workflow_id, n, checkpoint_id, step_id, reason, created_at, snapshot) "
                f"VALUES ({', '.join([self.mark] * 7)})")


SQLITE = Dialect("?", array_parameters=False)
POSTGRES = Dialect("%s", array_parameters=True)
