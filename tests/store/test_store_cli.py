"""`store migrate` and the store errors `serve` reports at start-up, as real subprocesses."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from pg_cluster import PgCluster, free_port

from aromcp_workflows.store.schema import SCHEMA_VERSION


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aromcp_workflows", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


def test_store_migrate_sqlite_creates_a_private_file(tmp_path: Path) -> None:
    path = tmp_path / "new" / "w.sqlite3"
    done = cli("store", "migrate", "--store", str(path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{path}: schema version {SCHEMA_VERSION} (migrated from version 0)"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = cli("store", "migrate", "--store", str(path))
    assert again.stdout.strip().endswith("(already up to date)")


def test_store_migrate_postgres_from_env(pg_url: str) -> None:
    done = cli("store", "migrate", env={"AROMCP_WORKFLOWS_STORE": pg_url})
    assert done.returncode == 0, done.stderr
    assert "(migrated from version 0)" in done.stdout and "postgresql://postgres@/" in done.stdout
    assert "(already up to date)" in cli("store", "migrate", "--store", pg_url).stdout


def test_store_without_action_is_a_usage_error() -> None:
    assert cli("store").returncode == 2


def test_migrate_unparsable_url_exits_2() -> None:
    done = cli("store", "migrate", "--store", "postgresql://me@localhost/db?bogus=1")
    assert done.returncode == 2
    assert "not understood" in one_line_error(done)


def test_serve_refused_connection_is_one_line(tmp_path: Path) -> None:
    url = f"postgresql://postgres@/db?host={tmp_path}&port={free_port()}"
    done = cli("serve", "--http", "--port", str(free_port()), "--store", url)
    assert done.returncode == 1
    assert "start PostgreSQL" in one_line_error(done)


def test_serve_missing_database_is_one_line(pg_cluster: PgCluster) -> None:
    done = cli("serve", "--store", pg_cluster.url("nope"), timeout=60)  # stdio: would wait for a client
    assert done.returncode == 1
    line = one_line_error(done)
    assert '"nope" does not exist' in line and "createdb" in line


def test_status_on_unreachable_store_is_one_line(tmp_path: Path) -> None:
    url = f"postgresql://postgres@/db?host={tmp_path}&port={free_port()}"
    done = cli("status", "--store", url)
    assert done.returncode == 1
    assert "start PostgreSQL" in one_line_error(done)


def test_run_and_status_on_a_postgres_store(tmp_path: Path, pg_url: str) -> None:
    """The headless runner passes a URL through to its server untouched (a path would be
    resolved against the project), and `status` reads the same database."""
    project = tmp_path / "project"
    (project / ".aromcp" / "workflows").mkdir(parents=True)
    (project / ".aromcp" / "workflows" / "hello.yaml").write_text(
        'name: hello\ndescription: "one shell step"\nversion: "1.0.0"\n'
        "default_state:\n  raw:\n    out: ''\n"
        "steps:\n  - id: say\n    type: shell_command\n    command: echo hi-from-pg\n"
        "    state_update:\n      path: raw.out\n  - type: user_message\n    message: 'said {{ out }}'\n",
        encoding="utf-8")
    done = cli("--project-dir", str(project), "run", "hello", "--store", pg_url, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "said hi-from-pg" in done.stdout and "status: completed" in done.stdout
    listed = cli("--project-dir", str(project), "status", "--json", "--store", pg_url)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)["instances"]
    assert [(r["workflow"], r["status"]) for r in rows] == [("hello", "completed")]
