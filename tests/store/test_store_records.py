"""Store CRUD, history, checkpoints and in-process conflicts, against real SQLite and PostgreSQL.

The `store` fixture (conftest.py) runs each test once per store; tests about one engine's
own machinery (WAL, pragmas, schema tables) say which engine in their name.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from aromcp_workflows.store import (
    ConflictError,
    HistoryEvent,
    InstanceFilter,
    InstanceGroup,
    InstanceRecord,
    NotFoundError,
    SqliteStore,
    Store,
    open_store,
)
from aromcp_workflows.store.schema import SCHEMA_VERSION


def make(workflow_id: str = "wf-1", project_dir: str = "/proj/a", **kw) -> InstanceRecord:
    return InstanceRecord(
        workflow_id=workflow_id,
        workflow="standards:fix",
        project_dir=project_dir,
        definition={"name": "standards:fix", "steps": [{"type": "shell_command"}]},
        inputs={"branch": "main"},
        state={"raw": {"files": ["a.py", "ü.py"]}, "state": {}},
        threads={"main": {"pc": 0, "loops": []}},
        current_steps=["detect"],
        **kw,
    )


def test_satisfies_protocol(store: Store) -> None:
    assert isinstance(store, Store)


def test_sqlite_constructing_touches_no_file(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "dir" / "store.sqlite3"
    s = SqliteStore(path)
    assert not (tmp_path / "deep").exists()
    s.list_instances()
    assert path.exists()
    s.close()


def test_create_load_round_trip(store: Store) -> None:
    record = make()
    assert store.create(record) == 1
    assert record.version == 1 and record.created_at and record.updated_at
    loaded = store.load("wf-1")
    assert loaded == record
    assert loaded.state["raw"]["files"] == ["a.py", "ü.py"]
    assert loaded.created_at.endswith("+00:00")


def test_create_existing_id_conflicts(store: Store) -> None:
    store.create(make())
    with pytest.raises(ConflictError, match="already exists") as info:
        store.create(make())
    assert info.value.expected_version == 0 and info.value.found_version == 1


def test_load_missing_names_id(store: Store) -> None:
    with pytest.raises(NotFoundError) as info:
        store.load("nope-123")
    message = str(info.value)
    assert "nope-123" in message and store.path in message
    assert "wf-" not in message  # lists nothing else
    assert isinstance(info.value, KeyError)


def test_save_increments_version_and_persists(store: Store) -> None:
    record = make()
    store.create(record)
    record.state["raw"]["files"].append("b.py")
    record.status = "waiting"
    record.current_steps = ["fix#1", "fix#2"]
    assert store.save(record, 1) == 2
    assert record.version == 2
    loaded = store.load("wf-1")
    assert loaded.version == 2
    assert loaded.status == "waiting"
    assert loaded.current_steps == ["fix#1", "fix#2"]
    assert loaded.state["raw"]["files"][-1] == "b.py"
    assert loaded.created_at == record.created_at
    assert loaded.updated_at >= loaded.created_at


def test_stale_save_conflicts_and_writes_nothing(store: Store) -> None:
    record = make()
    store.create(record)
    first, second = store.load("wf-1"), store.load("wf-1")
    first.state["who"] = "first"
    store.save(first, 1, [HistoryEvent("state_changed")])
    second.state["who"] = "second"
    with pytest.raises(ConflictError) as info:
        store.save(second, 1, [HistoryEvent("state_changed", data={"lost": True})])
    err = info.value
    assert (err.workflow_id, err.expected_version, err.found_version) == ("wf-1", 1, 2)
    assert "wf-1" in str(err) and "reload" in str(err)
    loaded = store.load("wf-1")
    assert loaded.state["who"] == "first" and loaded.version == 2
    assert [e.data for e in store.history("wf-1")] == [{}]  # the losing event is not there
    assert second.version == 1  # unchanged on failure


def test_save_missing_instance(store: Store) -> None:
    with pytest.raises(NotFoundError):
        store.save(make("ghost"), 1)


def test_non_json_value_is_refused_with_field_name(store: Store) -> None:
    record = make()
    record.state["bad"] = {1, 2}
    with pytest.raises(ValueError, match="state of 'wf-1'"):
        store.create(record)
    with pytest.raises(NotFoundError):
        store.load("wf-1")


def test_bad_workflow_id_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="whitespace"):
        store.create(make("has space"))


def test_history_order_filters_and_limit(store: Store) -> None:
    record = make()
    store.create(record, [HistoryEvent("instance_created")])
    events = [
        HistoryEvent("step_delivered", step_id="s1"),
        HistoryEvent("step_completed", step_id="s1", data={"result": "ok"}),
        HistoryEvent("step_delivered", step_id="t1", task_id="task-0"),
        HistoryEvent("transform_trace", data={"field": "batches"}),
    ]
    store.save(record, 1, events)
    assert [e.seq for e in events] == [2, 3, 4, 5]  # assigned in place
    store.save(record, 2, [HistoryEvent("step_completed", step_id="t1", task_id="task-0")])
    history = store.history("wf-1")
    assert [e.seq for e in history] == [1, 2, 3, 4, 5, 6]
    assert [e.kind for e in history][:3] == ["instance_created", "step_delivered", "step_completed"]
    assert all(e.workflow_id == "wf-1" and e.timestamp for e in history)
    assert history[2].data == {"result": "ok"}
    kinds = store.history("wf-1", kinds=["step_delivered", "step_completed"])
    assert [e.seq for e in kinds] == [2, 3, 4, 6]
    assert [e.seq for e in store.history("wf-1", task_id="task-0")] == [4, 6]
    assert [e.seq for e in store.history("wf-1", limit=2)] == [5, 6]  # the latest, in order
    assert [e.seq for e in store.history("wf-1", after_seq=4)] == [5, 6]
    assert store.history("unknown") == []


def test_history_is_per_instance(store: Store) -> None:
    a, b = make("a"), make("b")
    store.create(a, [HistoryEvent("instance_created")])
    store.create(b, [HistoryEvent("instance_created")])
    store.save(a, 1, [HistoryEvent("error", data={"message": "x"})])
    assert [e.seq for e in store.history("a")] == [1, 2]
    assert [e.seq for e in store.history("b")] == [1]


def test_event_for_other_instance_refused(store: Store) -> None:
    record = make()
    store.create(record)
    with pytest.raises(ValueError, match="names instance 'other'"):
        store.save(record, 1, [HistoryEvent("error", workflow_id="other")])
    assert store.load("wf-1").version == 1


def test_list_instances_by_project_and_status(store: Store) -> None:
    a, b, c = make("a", "/p1"), make("b", "/p2"), make("c", "/p1")
    for r in (a, b, c):
        store.create(r)
    c.status = "completed"
    store.save(c, 1)
    assert store.list_instances()[0].workflow_id == "c"  # latest update first
    assert {s.workflow_id for s in store.list_instances()} == {"a", "b", "c"}
    assert {s.workflow_id for s in store.list_instances("/p1")} == {"a", "c"}
    assert [s.workflow_id for s in store.list_instances(statuses=["completed"])] == ["c"]
    summary = store.list_instances("/p2")[0]
    assert summary.current_steps == ["detect"] and summary.version == 1
    assert not hasattr(summary, "state")


def test_page_instances_newest_started_first_filtered_and_counted(store: Store) -> None:
    """A listing page: newest started first (ties by id, newest id first), filters on
    project, workflow and status combined, and the total of all matching rows."""
    for n in range(7):
        record = make(f"w{n}", "/p1" if n % 2 else "/p2", created_at=f"2026-11-2{n}T00:00:00.000000+00:00")
        if n == 3:
            record.workflow = "ci:retry-tests"
        store.create(record)
    late = make("w0", "/p2")
    late.status = "failed"
    store.save(late, 1)  # a save moves updated_at, never the order by start
    page = store.page_instances(InstanceFilter(), limit=3)
    assert [r.workflow_id for r in page.rows] == ["w6", "w5", "w4"] and page.total == 7
    page = store.page_instances(InstanceFilter(), limit=3, offset=6)
    assert [r.workflow_id for r in page.rows] == ["w0"] and page.total == 7
    assert store.page_instances(InstanceFilter(), limit=3, offset=9).rows == []
    odd = store.page_instances(InstanceFilter(project_dir="/p1"), limit=10)
    assert [r.workflow_id for r in odd.rows] == ["w5", "w3", "w1"] and odd.total == 3
    one = store.page_instances(InstanceFilter(project_dir="/p1", workflow="ci:retry-tests"), limit=10)
    assert [r.workflow_id for r in one.rows] == ["w3"] and one.total == 1
    failed = store.page_instances(InstanceFilter(statuses=("failed", "cancelled")), limit=10)
    assert [(r.workflow_id, r.status) for r in failed.rows] == [("w0", "failed")] and failed.total == 1
    assert store.page_instances(InstanceFilter(workflow="nope"), limit=10).total == 0
    groups = sorted(store.instance_groups(), key=lambda g: (g.workflow, g.project_dir, g.status))
    assert groups == [InstanceGroup("ci:retry-tests", "/p1", "running", 1),
                      InstanceGroup("standards:fix", "/p1", "running", 2),
                      InstanceGroup("standards:fix", "/p2", "failed", 1),
                      InstanceGroup("standards:fix", "/p2", "running", 3)]


def test_checkpoints_latest_and_by_id(store: Store) -> None:
    record = make()
    store.create(record)
    assert store.get_checkpoint("wf-1") is None
    first = store.add_checkpoint("wf-1", "detect", "before fix", record.snapshot())
    record.state["raw"]["files"] = []
    store.save(record, 1)
    second = store.add_checkpoint("wf-1", None, "context high", record.snapshot())
    assert (first.checkpoint_id, second.checkpoint_id) == ("cp-1", "cp-2")
    latest = store.get_checkpoint("wf-1")
    assert latest == second and latest.snapshot["version"] == 2
    assert latest.snapshot["state"]["raw"]["files"] == []
    by_id = store.get_checkpoint("wf-1", "cp-1")
    assert by_id == first and by_id.snapshot["state"]["raw"]["files"] == ["a.py", "ü.py"]
    assert by_id.step_id == "detect" and by_id.reason == "before fix"
    assert store.get_checkpoint("wf-1", "cp-9") is None
    marks = store.history("wf-1", kinds=["checkpoint"])
    assert [e.data["checkpoint_id"] for e in marks] == ["cp-1", "cp-2"]


def test_checkpoint_of_missing_instance(store: Store) -> None:
    with pytest.raises(NotFoundError):
        store.add_checkpoint("ghost", None, "", {})


def test_checkpoint_ids_are_scoped_to_instance(store: Store) -> None:
    store.create(make("a"))
    store.create(make("b"))
    store.add_checkpoint("a", None, "", {"x": 1})
    assert store.get_checkpoint("b", "cp-1") is None


def test_reopen_after_close_sees_everything(location: str) -> None:
    s1 = open_store(location)
    s1.create(make(), [HistoryEvent("instance_created")])
    s1.close()
    s1.close()  # idempotent
    s2 = open_store(location)
    assert s2.load("wf-1").version == 1
    assert len(s2.history("wf-1")) == 1
    s2.close()


def test_sqlite_wal_and_normal_sync_and_schema(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "store.sqlite3")
    store.open()
    conn = store._connection()
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL (durable across a killed process in WAL)
    full = SqliteStore(tmp_path / "full.sqlite3", synchronous="FULL")
    assert full._connection().execute("PRAGMA synchronous").fetchone()[0] == 2
    full.close()
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 1000
    raw = sqlite3.connect(store.path)
    assert raw.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] == SCHEMA_VERSION
    names = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    assert "instances_project_dir" in names
    raw.close()
    store.close()


def test_sqlite_newer_schema_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    SqliteStore(path).open()
    raw = sqlite3.connect(path)
    raw.execute("INSERT INTO schema_version VALUES (99, 'x')")
    raw.commit()
    raw.close()
    with pytest.raises(Exception, match=r"schema version 99.*Upgrade"):
        SqliteStore(path).open()


def test_concurrent_saves_20_threads_different_instances(store: Store) -> None:
    saves, errors = 25, []

    def work(n: int) -> None:
        try:
            record = make(f"t-{n}")
            store.create(record, [HistoryEvent("instance_created")])
            for i in range(saves):
                record.state["i"] = i
                store.save(record, record.version, [HistoryEvent("state_changed", data={"i": i})])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for n in range(20):
        loaded = store.load(f"t-{n}")
        assert loaded.version == saves + 1 and loaded.state["i"] == saves - 1
        history = store.history(f"t-{n}")
        assert [e.seq for e in history] == list(range(1, saves + 2))
        assert [e.data.get("i") for e in history[1:]] == list(range(saves))


def test_concurrent_increments_one_instance_lose_nothing(store: Store) -> None:
    store.create(make())
    conflicts = []

    def work() -> None:
        for _ in range(20):
            while True:
                record = store.load("wf-1")
                record.state["counter"] = record.state.get("counter", 0) + 1
                try:
                    store.save(record, record.version)
                    break
                except ConflictError:
                    conflicts.append(1)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    loaded = store.load("wf-1")
    assert loaded.state["counter"] == 160 and loaded.version == 161


def test_unknown_status_refused(store: Store) -> None:
    record = make()
    record.status = "done"  # type: ignore[assignment]
    with pytest.raises(ValueError, match="must be one of running, waiting"):
        store.create(record)


def test_errors_survive_pickling() -> None:
    import pickle

    conflict = pickle.loads(pickle.dumps(ConflictError("wf-1", 3, 4)))
    assert (conflict.expected_version, conflict.found_version) == (3, 4)
    assert str(conflict) == str(ConflictError("wf-1", 3, 4))
    missing = pickle.loads(pickle.dumps(NotFoundError("wf-2", "/s.sqlite3")))
    assert missing.workflow_id == "wf-2" and "/s.sqlite3" in str(missing)


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
def test_forked_child_reopens_instead_of_sharing_connection(store: Store) -> None:
    import os

    record = make()
    store.create(record)
    pid = os.fork()
    if pid == 0:  # child: must not use the parent's connection
        code = 1
        try:
            child = store.load("wf-1")
            store.save(child, child.version, [HistoryEvent("status_changed")])
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    loaded = store.load("wf-1")  # the parent's connection still works
    assert loaded.version == 2
    store.save(loaded, 2)
    assert store.load("wf-1").version == 3


def test_checkpoints_racing_saves_keep_history_numbered(store: Store) -> None:
    """Checkpoints and saves of one instance from many threads: seq stays 1..N, no gaps, no
    duplicates, and every committed event is there exactly once."""
    store.create(make(), [HistoryEvent("instance_created")])
    errors: list[BaseException] = []

    def saver(n: int) -> None:
        try:
            for i in range(15):
                while True:
                    record = store.load("wf-1")
                    try:
                        store.save(record, record.version, [HistoryEvent("state_changed", data={"w": n, "i": i}),
                                                            HistoryEvent("step_completed")])
                        break
                    except ConflictError:
                        continue
        except BaseException as exc:  # reported below
            errors.append(exc)

    def checkpointer() -> None:
        try:
            for i in range(10):
                store.add_checkpoint("wf-1", None, f"r{i}", {"i": i})
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=saver, args=(n,)) for n in range(4)] + [threading.Thread(target=checkpointer)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    history = store.history("wf-1")
    assert [e.seq for e in history] == list(range(1, 1 + 1 + 4 * 15 * 2 + 10))
    saves = sorted((e.data["w"], e.data["i"]) for e in history if e.kind == "state_changed")
    assert saves == sorted((n, i) for n in range(4) for i in range(15))
    assert [e.data["checkpoint_id"] for e in history if e.kind == "checkpoint"] == [f"cp-{i}" for i in range(1, 11)]
    assert store.load("wf-1").version == 1 + 4 * 15
