"""Store fixtures: every store test runs against SQLite and against a real PostgreSQL.

`location` is what a user gives ``--store``: a SQLite file path, or the URL of a fresh
database in a throwaway PostgreSQL cluster (`pg_cluster.PgCluster`, one per session).
Without PostgreSQL binaries the PostgreSQL cases are skipped on a developer machine, but
fail in CI (``CI=true``): the suite must not go green there without them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pg_cluster import PgCluster, find_bin_dir, unavailable  # tests/store is on sys.path (rootdir import mode)

from aromcp_workflows.store import Store, open_store

STORES = ["sqlite", "postgres"]


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    bin_dir = find_bin_dir()
    if bin_dir is None:
        unavailable("PostgreSQL is not installed (no pg_ctl; apt-get install -y postgresql)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        unavailable("psycopg is not installed (pip install -e '.[test]')")
    cluster = PgCluster(bin_dir).start()  # type: ignore[arg-type]
    yield cluster
    cluster.stop()


@pytest.fixture
def pg_url(pg_cluster: PgCluster) -> Iterator[str]:
    """The URL of a new, empty database, dropped after the test."""
    url = pg_cluster.create_database()
    yield url
    pg_cluster.drop_database(url)


@pytest.fixture(params=STORES)
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store location as --store takes it: a SQLite path or a postgresql:// URL."""
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return str(tmp_path / "store.sqlite3")


@pytest.fixture
def store(location: str) -> Iterator[Store]:
    s = open_store(location)
    yield s
    s.close()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: takes seconds (server subprocesses); still runs by default")
