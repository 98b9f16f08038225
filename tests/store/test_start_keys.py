"""`workflow_start`'s idempotency keys in the store: kept with the instance they started, in
the same transaction, per project; a second create under a taken key writes nothing.

Every test runs against SQLite and a real PostgreSQL (the `store` fixture)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from aromcp_workflows.store import InstanceRecord, KeyTakenError, StartKey, Store, open_store


def record(workflow_id: str, project: str = "/p") -> InstanceRecord:
    return InstanceRecord(workflow_id=workflow_id, workflow="w", project_dir=project, state={"n": 1})


def test_a_start_key_names_the_instance_it_started(store: Store) -> None:
    assert store.started_by("/p", "k1") is None
    store.create(record("wf_a"), start_key=StartKey("k1", "req-a"))
    assert store.started_by("/p", "k1") == ("wf_a", "req-a")
    assert store.started_by("/other", "k1") is None  # keys are per project


def test_a_taken_key_refuses_a_second_create_and_writes_nothing(store: Store) -> None:
    store.create(record("wf_a"), start_key=StartKey("k1", "req-a"))
    with pytest.raises(KeyTakenError) as caught:
        store.create(record("wf_b"), start_key=StartKey("k1", "req-b"))
    assert (caught.value.workflow_id, caught.value.request) == ("wf_a", "req-a")
    assert [s.workflow_id for s in store.list_instances()] == ["wf_a"]  # wf_b was not created
    store.create(record("wf_b", project="/q"), start_key=StartKey("k1", "req-b"))  # another project: its own key
    assert store.started_by("/q", "k1") == ("wf_b", "req-b")


def test_an_instance_id_taken_leaves_the_key_free(store: Store) -> None:
    store.create(record("wf_a"))
    with pytest.raises(Exception, match="already exists"):
        store.create(record("wf_a"), start_key=StartKey("k2", "req"))
    assert store.started_by("/p", "k2") is None  # the failed create took nothing


def test_a_version_2_sqlite_store_gains_the_key_table(tmp_path: Path) -> None:
    """A store made by the previous release (schema 2) migrates: its instances stay, keys work."""
    from aromcp_workflows.store.schema import MIGRATIONS

    path = tmp_path / "old.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)")
    for version, statements in MIGRATIONS[:2]:
        for sql in statements:
            conn.execute(sql)
        conn.execute("INSERT INTO schema_version VALUES (?, 'then')", (version,))
    conn.commit()
    conn.close()
    old = open_store(str(path))
    assert old.migrate() == (2, 3)
    old.create(record("wf_a"), start_key=StartKey("k", "r"))
    assert old.started_by("/p", "k") == ("wf_a", "r")
    old.close()
