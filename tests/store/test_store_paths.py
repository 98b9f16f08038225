"""Where the store lives: explicit path > AROMCP_WORKFLOWS_STORE > platform data dir."""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
from pathlib import Path

import pytest

from aromcp_workflows.store import (
    ENV_VAR,
    InstanceRecord,
    SqliteStore,
    StoreOpenError,
    default_store_path,
    open_store,
    resolve_store_path,
)


def test_default_is_user_data_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    expected = tmp_path / "xdg" / "aromcp-workflows" / "workflows.sqlite3"
    if os.name == "posix" and os.uname().sysname == "Linux":
        assert default_store_path() == expected
    assert resolve_store_path() == default_store_path()
    store = open_store()
    assert store.path == str(default_store_path())


def test_env_var_overrides_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    target = tmp_path / "env" / "w.sqlite3"
    monkeypatch.setenv(ENV_VAR, str(target))
    store = open_store()
    assert store.path == str(target)
    store.create(InstanceRecord("wf-1", "demo", "/p"))
    assert target.exists()  # parent directories were made
    store.close()


def test_explicit_path_beats_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "env.sqlite3"))
    assert open_store(tmp_path / "explicit.sqlite3").path == str(tmp_path / "explicit.sqlite3")


def test_tilde_is_expanded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve_store_path("~/x.sqlite3") == tmp_path / "x.sqlite3"


def test_directory_path_is_refused_at_once(tmp_path: Path) -> None:
    with pytest.raises(StoreOpenError, match=f"{tmp_path}.*is a directory"):
        open_store(tmp_path)


def test_parent_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    with pytest.raises(StoreOpenError, match="afile is a file, not a directory"):
        open_store(tmp_path / "afile" / "sub" / "w.sqlite3")


def test_not_a_database_says_which_file(tmp_path: Path) -> None:
    path = tmp_path / "notes.sqlite3"
    path.write_text("these are my notes, not a database" * 100)
    store = open_store(path)  # lazy: nothing read yet
    with pytest.raises(StoreOpenError, match=f"Cannot open the workflow store {path}"):
        store.open()
    assert "my notes" in path.read_text()  # not clobbered


@pytest.mark.skipif(os.geteuid() == 0 if hasattr(os, "geteuid") else True,
                    reason="root ignores directory permissions")
def test_unwritable_directory(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(StoreOpenError, match=str(locked)):
            SqliteStore(locked / "sub" / "w.sqlite3").open()
    finally:
        locked.chmod(0o700)


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="needs Linux /proc")
def test_uncreatable_directory_even_as_root() -> None:
    target = Path("/proc/aromcp-no-such-dir/w.sqlite3")
    store = open_store(target)
    with pytest.raises(StoreOpenError, match=r"Cannot create the directory .*/proc/aromcp-no"):
        store.open()


def test_sync_mode_from_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from aromcp_workflows.store import SYNC_ENV_VAR

    assert open_store(tmp_path / "a.sqlite3").synchronous == "NORMAL"
    monkeypatch.setenv(SYNC_ENV_VAR, "full")
    store = open_store(tmp_path / "b.sqlite3")
    assert store.synchronous == "FULL"
    store.open()
    assert store._connection().execute("PRAGMA synchronous").fetchone()[0] == 2
    store.close()
    monkeypatch.setenv(SYNC_ENV_VAR, "sometimes")
    with pytest.raises(StoreOpenError, match=r"NORMAL .* or FULL"):
        open_store(tmp_path / "c.sqlite3")


def test_new_store_files_are_private_whatever_the_umask(tmp_path: Path) -> None:
    path = tmp_path / "data" / "w.sqlite3"
    old = os.umask(0o000)  # the most permissive umask: nothing may depend on it
    try:
        store = SqliteStore(path)
        store.create(InstanceRecord("wf-1", "demo", "/p"))  # a write: -wal and -shm exist now
        files = [path, Path(f"{path}-wal"), Path(f"{path}-shm")]
        assert all(f.exists() for f in files)
        assert {f.name: stat.S_IMODE(f.stat().st_mode) for f in files} == {f.name: 0o600 for f in files}
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700  # a directory the store created
        store.close()
    finally:
        os.umask(old)


def test_existing_store_file_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite3"
    SqliteStore(path).open()
    path.chmod(0o640)  # the owner chose to share it with a group
    SqliteStore(path).open()
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_a_new_store_file_opens_while_another_opener_switches_it_to_wal(tmp_path: Path) -> None:
    """Found under pytest-xdist (tests/server/test_start_key.py: two servers making one new
    store at once): switching a new file to WAL takes its write lock, and another connection
    asking for WAL meanwhile got "database is locked" at once (SQLite skips the busy timeout
    there: waiting could deadlock), so its server could not open the store.  About one new
    file in forty failed when four connections opened it together.  Here the other opener
    holds that lock (a write transaction before the file is in WAL) for 0.3 s."""
    path = tmp_path / "new.sqlite3"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # a rollback-journal file, its write lock held: as mid-switch
    timer = threading.Timer(0.3, other.execute, ("COMMIT",))
    timer.start()
    try:
        store = SqliteStore(path)
        store.create(InstanceRecord("wf-1", "demo", "/p"))
        assert store._connection().execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        store.close()
    finally:
        timer.join()
        other.close()
