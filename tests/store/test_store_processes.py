"""Two real processes on one store (SQLite file or PostgreSQL database): conflicts,
lost-update freedom, SIGKILL safety."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from aromcp_workflows.store import ConflictError, HistoryEvent, InstanceRecord, Store, is_postgres_url, open_store

CHILD = str(Path(__file__).with_name("store_child.py"))


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, CHILD, *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


@pytest.fixture
def path(location: str) -> str:
    """A SQLite file or a PostgreSQL URL (the `location` fixture runs each test on both)."""
    return location


@pytest.fixture
def opened() -> Iterator[Callable[[str], Store]]:
    """open_store, with every store closed after the test (a pool left to the GC warns)."""
    stores: list[Store] = []

    def open_(where: str) -> Store:
        stores.append(open_store(where))
        return stores[-1]

    yield open_
    for store in stores:
        store.close()


def seed(opened: Callable[[str], Store], path: str) -> Store:
    store = opened(path)
    store.create(InstanceRecord("wf-1", "demo", "/p", state={"counter": 0}))
    return store


def test_other_process_write_conflicts_here(path: str, opened: Callable[[str], Store]) -> None:
    store = seed(opened, path)
    mine = store.load("wf-1")
    child = spawn("conflict", path, "wf-1")
    assert child.stdout.readline().strip() == "loaded"
    child.stdin.write("go\n")
    child.stdin.flush()
    assert child.stdout.readline().split() == ["saved", "2"]
    assert child.wait(30) == 0
    mine.state["writer"] = "parent"
    with pytest.raises(ConflictError) as info:
        store.save(mine, mine.version)
    assert (info.value.expected_version, info.value.found_version) == (1, 2)
    assert store.load("wf-1").state["writer"] == "child"


def test_write_here_conflicts_in_other_process(path: str, opened: Callable[[str], Store]) -> None:
    store = seed(opened, path)
    child = spawn("conflict", path, "wf-1")
    assert child.stdout.readline().strip() == "loaded"  # B has loaded version 1
    mine = store.load("wf-1")
    mine.state["writer"] = "parent"
    assert store.save(mine, 1) == 2  # A saves first
    child.stdin.write("go\n")
    child.stdin.flush()
    assert child.stdout.readline().split() == ["conflict", "1", "2"]  # B is refused
    assert child.wait(30) == 0
    loaded = store.load("wf-1")
    assert loaded.state["writer"] == "parent" and loaded.version == 2


def test_two_processes_incrementing_lose_nothing(path: str, opened: Callable[[str], Store]) -> None:
    store = seed(opened, path)
    store.close()
    children = [spawn("increment", path, "wf-1", "150") for _ in range(2)]
    for child in children:
        assert child.stdout.readline().strip() == "ready"
    for child in children:  # start both at once so their writes interleave
        child.stdin.write("go\n")
        child.stdin.flush()
    retries = 0
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
        assert out.startswith("done")
        retries += int(out.split()[1])
    assert retries > 0, "the two writers never collided: the test did not test conflicts"
    loaded = opened(path).load("wf-1")
    assert loaded.state["counter"] == 300 and loaded.version == 301
    assert len(opened(path).history("wf-1")) == 300


def test_sigkill_mid_loop_keeps_every_committed_save(path: str, opened: Callable[[str], Store]) -> None:
    store = seed(opened, path)
    store.close()
    child = spawn("crash", path, "wf-1")
    reported = 0
    while reported < 150:  # versions the child saw committed (save had returned)
        line = child.stdout.readline()
        assert line, child.stderr.read()
        reported = int(line)
    os.kill(child.pid, signal.SIGKILL)
    child.wait(30)
    assert child.returncode == -signal.SIGKILL

    if not is_postgres_url(path):
        raw = sqlite3.connect(path)
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        raw.close()
    reopened = opened(path)
    record = reopened.load("wf-1")
    assert record.version >= reported  # at most one more committed after the last print
    assert record.state["i"] == record.version - 1
    history = reopened.history("wf-1")
    assert [e.seq for e in history] == list(range(1, record.version))
    assert [e.data["i"] for e in history] == list(range(1, record.version))
    # The store keeps working after the crash.
    assert reopened.save(record, record.version, [HistoryEvent("status_changed")]) > reported
