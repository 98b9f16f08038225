"""`ThreadTable` reports every thread a call could have changed (or "all" when in doubt)."""

from __future__ import annotations

from aromcp_workflows.interpreter.thread import Frame, Thread, ThreadTable


def table() -> ThreadTable:
    made = ThreadTable({tid: Thread(tid, [Frame("w", "main", "main")]) for tid in ("main", "t1", "t2")})
    made.take_reached()
    return made


def test_reaching_one_thread_reports_that_one() -> None:
    threads = table()
    threads["t1"].status = "failed"
    assert threads.get("t2") is not None
    assert threads.take_reached() == {"t1", "t2"}
    assert threads.take_reached() == set()  # starts afresh


def test_walking_or_copying_the_table_reports_all() -> None:
    walks = (list, lambda t: list(t.values()), lambda t: list(t.items()), dict, lambda t: t.copy(),
             lambda t: t.pop("t1"), lambda t: t.popitem(), lambda t: t.setdefault("t1"), lambda t: t.update({}))
    for walk in walks:
        threads = table()
        walk(threads)
        assert threads.take_reached() in (None, {"main", "t1", "t2"}), walk


def test_adding_and_removing_report_the_thread_and_the_commit_reads_quietly() -> None:
    threads = table()
    threads["t3"] = Thread("t3", [])
    del threads["t1"]
    assert "t2" in threads  # membership reaches nothing
    assert dict(threads.quiet_items()).keys() == {"main", "t2", "t3"}
    assert threads.take_reached() == {"t1", "t3"}


def test_a_new_table_counts_as_all_reached() -> None:
    assert ThreadTable().take_reached() is None
