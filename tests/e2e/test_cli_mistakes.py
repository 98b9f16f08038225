"""The command line's answers to a user's mistakes, found by a bad-input probe and pinned:
a store URL of another scheme, empty or unknown names, a store that cannot be written, a
path that is not there, and exit statuses that say the same thing the same way.

Every command runs as a subprocess, with its store and HOME in the test's own folder.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.e2e.e2e_helpers import git_repo

WORKFLOW = """name: echo
steps:
  - {type: shell_command, command: "echo hi"}
"""


def cli(project: Path, *args: str, store: Path | str | None = None, timeout: float = 60
        ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "AROMCP_WORKFLOWS_STORE"}
    env["HOME"] = str(project.parent / "home")
    tail = ["--store", str(store)] if store is not None else []
    return subprocess.run([sys.executable, "-m", "aromcp_workflows", "--project-dir", str(project), *args, *tail],
                          capture_output=True, text=True, env=env, timeout=timeout, stdin=subprocess.DEVNULL,
                          cwd=project)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return git_repo(tmp_path / "repo", {".aromcp/workflows/echo.yaml": WORKFLOW})


def one_error(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, done.stderr
    return lines[0]


# -- a store URL of another scheme ------------------------------------------------------------

@pytest.mark.parametrize("url", ["mysql://me:hunter2@db.example/wf", "sqlite:///wf.sqlite3"])
@pytest.mark.parametrize("command", [["status"], ["run", "echo"], ["migrate", "--workflow", "echo"],
                                     ["serve"], ["trace", "wf_0123456789ab"]])
def test_a_url_of_another_scheme_is_refused_not_made_a_folder(project: Path, url: str,
                                                              command: list[str]) -> None:
    """It used to be taken as a relative path: `status` made `mysql:/…` in the project."""
    before = sorted(p.name for p in project.iterdir())
    done = cli(project, *command, store=url)
    assert done.returncode in (1, 2), done.stdout + done.stderr
    error = done.stderr + done.stdout
    assert "is a " + url.split("://")[0] + ":// URL; a store is a SQLite file path or a postgresql://" in error
    assert "hunter2" not in error and "Traceback" not in error
    assert sorted(p.name for p in project.iterdir()) == before
    if url.startswith("sqlite"):
        assert "For a SQLite file, give its path: /wf.sqlite3." in error


def test_a_url_in_the_environment_is_refused_too(project: Path) -> None:
    env = {**os.environ, "HOME": str(project.parent / "home"), "AROMCP_WORKFLOWS_STORE": "redis://x/0"}
    done = subprocess.run([sys.executable, "-m", "aromcp_workflows", "--project-dir", str(project), "status"],
                          capture_output=True, text=True, env=env, timeout=60, cwd=project)
    assert done.returncode == 2
    assert "redis://x/0 (AROMCP_WORKFLOWS_STORE) is a redis:// URL" in one_error(done)


# -- empty and unknown names ------------------------------------------------------------------

def test_migrate_with_an_empty_or_unknown_name_says_so(project: Path) -> None:
    store = project.parent / "s.sqlite3"
    empty_id = cli(project, "migrate", "", store=store)
    assert empty_id.returncode == 2
    assert one_error(empty_id) == "error: the instance id is empty: `aromcp-workflows status` lists the instances"
    empty_name = cli(project, "migrate", "--workflow", "", store=store)
    assert empty_name.returncode == 2 and "the workflow name is empty" in one_error(empty_name)
    unknown = cli(project, "migrate", "--workflow", "ehco", store=store)
    assert unknown.returncode == 1, unknown.stdout
    assert "workflow 'ehco' not found" in unknown.stderr and "closest first): echo" in unknown.stderr
    known = cli(project, "migrate", "--workflow", "echo", store=store)
    assert known.returncode == 0 and known.stdout.startswith("no waiting or running instance of echo")


def test_resume_with_an_empty_id_says_the_id_is_empty(project: Path) -> None:
    done = cli(project, "run", "--resume", "", store=project.parent / "s.sqlite3")
    assert done.returncode == 2
    assert one_error(done) == "error: --resume needs an instance id (`aromcp-workflows status` lists them)"


@pytest.mark.parametrize("target", ["missing.yaml", "sub/missing.yaml", "sub/missing"])
def test_test_with_a_path_that_is_not_there_says_no_such_file(project: Path, target: str) -> None:
    done = cli(project, "test", target)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"test: {target}: no such file (give a test file, a workflow file, a "
                                   "folder, or a workflow's name such as standards:fix)")


# -- exit statuses that mean one thing --------------------------------------------------------

def test_cancel_exits_0_when_the_instance_ends_cancelled_and_1_when_it_ended_otherwise(project: Path) -> None:
    store = project.parent / "s.sqlite3"
    assert cli(project, "run", "echo", "--quiet", store=store).returncode == 0
    (completed,) = [line.split()[0] for line in cli(project, "status", store=store).stdout.splitlines()
                    if line.startswith("wf_")]
    done = cli(project, "cancel", completed, store=store)
    assert done.returncode == 1 and done.stdout == ""
    assert one_error(done) == (f"error: workflow {completed} has already completed; an instance that ended "
                               "cannot be cancelled (nothing changed)")
    help_text = " ".join(cli(project, "cancel", "--help").stdout.split())
    assert "exit status: 0 cancelled, now or before; 1 it had already ended another way" in help_text


def test_run_says_not_started_for_any_store_it_cannot_use(project: Path, tmp_path: Path) -> None:
    """An unusable SQLite store and an unreachable PostgreSQL are both `not_started`, exit 2
    (the PostgreSQL one used to be `aborted`, exit 1, after a server was started for nothing)."""
    for store in (tmp_path, f"postgresql://postgres@/db?host={tmp_path / 'no-socket'}&port=5999"):
        done = cli(project, "run", "echo", store=store)
        assert done.returncode == 2, done.stdout + done.stderr
        assert done.stdout.startswith("status: not_started\nerror: ")
        assert "lost the connection" not in done.stdout


# -- a store that cannot be written -----------------------------------------------------------

@contextmanager
def read_only(folder: Path) -> Iterator[Path]:
    """`folder` as a read-only place: a read-only bind mount for root (whom file modes do
    not stop), else the modes; yields where to read it."""
    if os.geteuid() != 0:
        modes = {path: path.stat().st_mode for path in [folder, *folder.iterdir()]}
        for path in modes:
            path.chmod(0o555 if path.is_dir() else 0o444)
        try:
            yield folder
        finally:
            for path, mode in modes.items():
                path.chmod(mode)
        return
    mount = folder.with_name(folder.name + "-ro")
    mount.mkdir()
    if subprocess.run(["mount", "--bind", str(folder), str(mount)], capture_output=True).returncode != 0:
        pytest.skip("cannot bind-mount here (no CAP_SYS_ADMIN): a read-only store needs a read-only mount")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(mount)], check=True, capture_output=True)
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_a_store_that_cannot_be_written_can_still_be_read(project: Path, tmp_path: Path) -> None:
    kept = tmp_path / "kept"
    kept.mkdir()
    assert cli(project, "run", "echo", "--quiet", store=kept / "w.sqlite3").returncode == 0
    before = digest(kept)
    with read_only(kept) as folder:
        store = folder / "w.sqlite3"
        listed = cli(project, "status", store=store)
        assert listed.returncode == 0, listed.stderr
        (row,) = [line for line in listed.stdout.splitlines() if line.startswith("wf_")]
        workflow_id = row.split()[0]
        assert row.split()[1:3] == ["echo", "completed"]
        shown = cli(project, "status", workflow_id, store=store)
        assert shown.returncode == 0 and shown.stdout.startswith(f"{workflow_id}  echo  completed")
        assert cli(project, "trace", workflow_id, store=store).returncode == 0
        again = cli(project, "run", "echo", store=store)
        assert again.returncode == 2 and "readonly database" in again.stdout
    assert digest(kept) == before


def test_a_store_whose_last_commits_are_in_its_wal_is_refused_not_read_stale(project: Path,
                                                                             tmp_path: Path) -> None:
    """Read only as an unchanging file, SQLite would not see what is still in `-wal`."""
    kept = tmp_path / "kept"
    kept.mkdir()
    assert cli(project, "run", "echo", "--quiet", store=kept / "w.sqlite3").returncode == 0
    writer = ("import sqlite3, os, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
              "c.execute('PRAGMA wal_autocheckpoint = 0'); c.execute(\"UPDATE instances SET error = 'late'\"); "
              "os._exit(0)")
    subprocess.run([sys.executable, "-c", writer, str(kept / "w.sqlite3")], check=True)
    assert (kept / "w.sqlite3-wal").stat().st_size > 0
    (kept / "w.sqlite3-shm").unlink()  # as a copy of the files would leave it
    with read_only(kept) as folder:
        done = cli(project, "status", store=folder / "w.sqlite3")
        assert done.returncode == 1
        assert "its last commits are still in w.sqlite3-wal" in one_error(done)
    with sqlite3.connect(kept / "w.sqlite3") as conn:  # writable again: nothing was lost
        assert conn.execute("SELECT error FROM instances").fetchone() == ("late",)
