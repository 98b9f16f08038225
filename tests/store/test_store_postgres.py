"""What only the PostgreSQL store has: URL selection, one-line open errors, its schema table,
replicas migrating one empty database at once, and a missing optional extra."""

from __future__ import annotations

import sys
import threading

import psycopg
import pytest
from pg_cluster import PgCluster, free_port, unavailable

from aromcp_workflows.store import (
    ENV_VAR,
    InstanceRecord,
    PostgresStore,
    SqliteStore,
    StoreError,
    StoreOpenError,
    open_store,
)
from aromcp_workflows.store.pg_connect import StoreURLError
from aromcp_workflows.store.pg_connect import redact_url as redact
from aromcp_workflows.store.pg_schema import SCHEMA_VERSION


def test_url_selects_postgres_and_a_path_keeps_sqlite(tmp_path, monkeypatch, pg_url: str) -> None:
    store = open_store(pg_url)
    assert isinstance(store, PostgresStore)
    store.close()
    monkeypatch.setenv(ENV_VAR, pg_url)
    from_env = open_store()
    assert isinstance(from_env, PostgresStore) and from_env.url == pg_url
    from_env.close()
    assert isinstance(open_store(tmp_path / "w.sqlite3"), SqliteStore)  # an explicit path wins


def test_constructing_connects_to_nothing_and_open_says_refused(tmp_path) -> None:
    url = f"postgresql://postgres@/db?host={tmp_path}&port={free_port()}"  # nothing listens there
    store = open_store(url)  # lazy: no connection yet, no error
    with pytest.raises(StoreOpenError) as info:
        store.open()
    message = str(info.value)
    assert "\n" not in message
    assert "Cannot open the workflow store" in message and "start PostgreSQL" in message
    assert str(tmp_path) in message


def test_missing_database_is_one_line_that_says_create_it(pg_cluster: PgCluster) -> None:
    store = open_store(pg_cluster.url("no_such_db"))
    with pytest.raises(StoreOpenError) as info:
        store.list_instances()
    message = str(info.value)
    assert "\n" not in message and '"no_such_db" does not exist' in message and "createdb" in message


def test_unparsable_url_fails_at_once() -> None:
    with pytest.raises(StoreURLError, match=r"not understood.*postgresql://USER@HOST:PORT/DB") as info:
        open_store("postgresql://me@localhost/db?no_such_option=1")
    assert "\n" not in str(info.value)


def test_password_never_appears_in_messages(pg_cluster: PgCluster) -> None:
    url = f"postgresql://postgres:s3cret@/missing_db?host={pg_cluster.root}&port={pg_cluster.port}"
    store = open_store(url)
    assert "s3cret" not in store.path and "s3cret" not in repr(store)
    with pytest.raises(StoreOpenError) as info:
        store.open()
    assert "s3cret" not in str(info.value)
    assert redact("postgresql://u@/d?host=/x&password=pw") == "postgresql://u@/d?host=/x&password=***"


def test_bad_pool_size_is_refused(monkeypatch, pg_url: str) -> None:
    monkeypatch.setenv("AROMCP_WORKFLOWS_STORE_POOL", "lots")
    with pytest.raises(StoreURLError, match="AROMCP_WORKFLOWS_STORE_POOL='lots'"):
        open_store(pg_url)
    monkeypatch.setenv("AROMCP_WORKFLOWS_STORE_POOL", "3")
    store = open_store(pg_url)
    assert isinstance(store, PostgresStore) and store.pool_size == 3
    store.close()


def test_schema_version_table_and_migrate_reports(pg_url: str) -> None:
    store = open_store(pg_url)
    assert store.migrate() == (0, SCHEMA_VERSION)  # an empty database: created now
    store.close()
    again = open_store(pg_url)
    assert again.migrate() == (SCHEMA_VERSION, SCHEMA_VERSION)
    again.close()
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute("SELECT version FROM schema_version ORDER BY version").fetchall()
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
    assert [r[0] for r in rows] == list(range(1, SCHEMA_VERSION + 1))
    assert {"instances", "history", "checkpoints", "schema_version"} <= tables


def test_replicas_starting_together_migrate_once(pg_url: str) -> None:
    stores = [PostgresStore(pg_url) for _ in range(6)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(stores))

    def start(store: PostgresStore) -> None:
        barrier.wait()
        try:
            store.open()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(s.migrated_from for s in stores) == [0] + [SCHEMA_VERSION] * 5  # exactly one migrated
    stores[0].create(InstanceRecord("wf-1", "demo", "/p"))
    assert stores[5].load("wf-1").version == 1
    for s in stores:
        s.close()


def test_newer_schema_refused(pg_url: str) -> None:
    first = open_store(pg_url)
    first.migrate()
    first.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("INSERT INTO schema_version VALUES (99, 'x')")
    with pytest.raises(StoreOpenError, match=r"schema version 99.*Upgrade aromcp-workflows"):
        open_store(pg_url).open()


def test_missing_extra_is_one_line(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # what an install without the extra looks like
    with pytest.raises(StoreOpenError, match=r"pip install 'aromcp-workflows\[postgres\]'") as info:
        open_store("postgresql://me@localhost/db")
    assert "\n" not in str(info.value)


def test_missing_postgres_fails_in_ci_and_skips_elsewhere(monkeypatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="cannot run in CI: no pg_ctl"):
        unavailable("no pg_ctl")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="no pg_ctl"):
        unavailable("no pg_ctl")


def test_postgres_restart_costs_reads_nothing_and_writes_at_most_one_error(pg_cluster: PgCluster, pg_url: str) -> None:
    """Idle pooled connections die when PostgreSQL restarts: reads are retried on a fresh
    connection, and the first failure purges the other dead ones."""
    store = PostgresStore(pg_url, pool_size=4)
    record = InstanceRecord("wf-1", "demo", "/p")
    store.create(record)
    barrier = threading.Barrier(4)

    def hold() -> None:  # four connections in the pool at once, then idle
        with store._db.connection("test") as conn:
            barrier.wait()
            conn.execute("SELECT 1")

    threads = [threading.Thread(target=hold) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pg_cluster.restart()
    try:
        assert store.load("wf-1").version == 1  # a read: retried, no error
        assert store.version("wf-1") == 1
        failures = 0
        for _ in range(6):
            try:
                store.save(record, record.version)
            except StoreError as exc:
                failures += 1
                assert "\n" not in str(exc) and "retry" in str(exc)
        assert failures <= 1
        assert store.version("wf-1") == 1 + 6 - failures
    finally:
        store.close()
