"""A throwaway PostgreSQL cluster for tests: initdb in a temp dir, unix socket only.

PostgreSQL refuses to run as root, so as root the cluster belongs to the ``postgres``
user (``runuser -u postgres -- …``); as anyone else it runs as that user.  It listens on
no TCP address: clients reach it through the socket in its temp dir, on a port number
that is free on this machine (the port only names the socket file).  Durability settings
are off (``fsync=off``): the cluster is deleted after the run, and PostgreSQL itself is
only restarted on purpose (`restart_immediate`: the outage tests and the fault campaign).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


def find_bin_dir() -> Path | None:
    """Where initdb/pg_ctl live: next to ``pg_ctl`` on PATH, else the Debian layout."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(os.path.realpath(found)).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), reverse=True)
    return Path(candidates[0]).parent if candidates else None


def unavailable(reason: str) -> None:
    """PostgreSQL cannot be had: skip on a developer machine, fail in CI (``CI=true``)."""
    import pytest

    if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
        pytest.fail(f"PostgreSQL tests cannot run in CI: {reason}. .ci/run installs postgresql; fix that.")
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PgCluster:
    """One running cluster; `url(db)` names a database in it, `create_database` makes one."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="aromcp-pg-"))  # short: socket paths are limited
        self.data = self.root / "data"
        self.port = free_port()
        self.as_postgres = os.geteuid() == 0
        self._count = 0

    def _run(self, *args: str) -> None:
        command = [str(self.bin_dir / args[0]), *args[1:]]
        if self.as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")

    def start(self) -> PgCluster:
        if self.as_postgres:
            shutil.chown(self.root, "postgres")
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync")
        options = (f"-p {self.port} -k {self.root} -c listen_addresses='' -c fsync=off "
                   "-c full_page_writes=off -c max_connections=300")
        self._run("pg_ctl", "-D", str(self.data), "-w", "-l", str(self.root / "log"), "-o", options, "start")
        return self

    def restart(self) -> None:
        """A fast restart (every client connection is dropped); same port, same databases."""
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-m", "fast", "-w", "restart")

    def restart_immediate(self) -> None:
        """A crash and recovery: ``pg_ctl restart -m immediate`` (no shutdown checkpoint,
        every connection cut mid-statement), as after PostgreSQL was killed."""
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-m", "immediate", "-w", "restart")

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def url(self, dbname: str) -> str:
        return f"postgresql://postgres@/{dbname}?host={self.root}&port={self.port}"

    def admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(sql)  # type: ignore[arg-type]

    def create_database(self) -> str:
        """A new empty database (one per test: no state leaks between tests); its URL."""
        self._count += 1
        name = f"t{self._count}"
        self.admin(f"CREATE DATABASE {name}")
        return self.url(name)

    def drop_database(self, url: str) -> None:
        name = url.split("/")[3].split("?")[0]
        self.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
