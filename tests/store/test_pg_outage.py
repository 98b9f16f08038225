"""PostgreSQL restarting under a write: the caller gets its answer (later), never an error, and
no write is applied twice.

Found by the fault campaign (`benchmarks/chaos.py`, `pg_ctl restart -m immediate` at random
moments): the call in flight surfaced as a tool error ("… then retry"), and a store that
simply sent a broken write again could apply a commit whose acknowledgement was lost a
second time.  Each fault here is made exactly: a relay (`pg_proxy.PgRelay`) between the
store and the cluster loses the reply of one statement (PostgreSQL committed it), loses the
statement itself (nothing was committed), or holds it while the cluster restarts.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from pg_cluster import PgCluster
from pg_proxy import PgRelay

from aromcp_workflows.store import HistoryEvent, InstanceRecord, PostgresStore

pytestmark = pytest.mark.slow

SAVE_MARKER = "UPDATE instances SET status"  # the text of every save (sent in full until prepared)


@pytest.fixture
def relay(pg_cluster: PgCluster) -> Iterator[PgRelay]:
    proxy = PgRelay(pg_cluster.root / f".s.PGSQL.{pg_cluster.port}")
    yield proxy
    proxy.close()


@pytest.fixture
def relayed_url(pg_url: str, relay: PgRelay) -> str:
    return relay.url(pg_url.split("/")[3].split("?")[0])


def stored(url: str, workflow_id: str) -> tuple[int, list[str], dict[str, Any]]:
    """The version, history kinds and state as PostgreSQL holds them (read without the relay)."""
    store = PostgresStore(url)
    try:
        return store.version(workflow_id), [e.kind for e in store.history(workflow_id)], store.load(workflow_id).state
    finally:
        store.close()


def created(store: PostgresStore) -> InstanceRecord:
    record = InstanceRecord(workflow_id="wf_1", workflow="w", project_dir="/p", state={"n": 0})
    store.create(record, [HistoryEvent(kind="started")])
    return record


def save_step(store: PostgresStore, record: InstanceRecord, n: int) -> int:
    record.state = {"n": n}
    return store.save(record, record.version, [HistoryEvent(kind="step_completed", data={"n": n})])


TWO_STEPS = """\
name: two-steps
description: "two agent prompts, each answer appended"
default_state:
  raw:
    answers: []
steps:
  - id: ask
    type: foreach
    items: "{{ [1, 2] }}"
    steps:
      - id: think
        type: agent_prompt
        prompt: "part {{ item }}"
        state_update: {path: raw.answers, operation: append}
"""


def two_step_server(tmp_path: Path, url: str) -> Any:
    from aromcp_workflows.server.mcp import build_server

    project = tmp_path / "project"
    (project / ".aromcp" / "workflows").mkdir(parents=True)
    (project / ".aromcp" / "workflows" / "two-steps.yaml").write_text(TWO_STEPS, encoding="utf-8")

    def factory() -> Any:
        from aromcp_workflows.app.service import WorkflowService

        return WorkflowService(project_dir=project, store_path=url, home=tmp_path / "home")

    return build_server(factory)


def test_a_commit_whose_acknowledgement_was_lost_is_not_applied_twice(pg_url: str, relayed_url: str,
                                                                     relay: PgRelay) -> None:
    store = PostgresStore(relayed_url)
    try:
        record = created(store)
        relay.lose_reply(SAVE_MARKER)
        assert save_step(store, record, 1) == 2  # committed once; the store found its own token
        assert relay.fired.is_set()
        assert save_step(store, record, 2) == 3  # and the copy it holds is the stored one
    finally:
        store.close()
    assert stored(pg_url, "wf_1") == (3, ["started", "step_completed", "step_completed"], {"n": 2})


def test_a_statement_lost_on_the_way_is_sent_again(pg_url: str, relayed_url: str, relay: PgRelay) -> None:
    store = PostgresStore(relayed_url)
    try:
        record = created(store)
        relay.lose_request(SAVE_MARKER)
        assert save_step(store, record, 1) == 2
        assert relay.fired.is_set()
    finally:
        store.close()
    assert stored(pg_url, "wf_1") == (2, ["started", "step_completed"], {"n": 1})


def test_a_lost_create_acknowledgement_is_one_instance(pg_url: str, relayed_url: str, relay: PgRelay) -> None:
    store = PostgresStore(relayed_url)
    try:
        store.open()
        relay.lose_reply("INSERT INTO instances")
        created(store)
        assert relay.fired.is_set()
        assert [s.workflow_id for s in store.list_instances()] == ["wf_1"]
    finally:
        store.close()
    assert stored(pg_url, "wf_1") == (1, ["started"], {"n": 0})


def test_a_lost_checkpoint_acknowledgement_is_one_checkpoint(pg_url: str, relayed_url: str,
                                                             relay: PgRelay) -> None:
    store = PostgresStore(relayed_url)
    try:
        created(store)
        relay.lose_reply("INSERT INTO history")  # the last statement of the checkpoint's transaction
        point = store.add_checkpoint("wf_1", None, "before", {"n": 0})
        assert point.checkpoint_id == "cp-1" and relay.fired.is_set()
        assert store.add_checkpoint("wf_1", None, "after", {"n": 0}).checkpoint_id == "cp-2"
    finally:
        store.close()


def test_a_save_in_flight_through_a_restart_succeeds(pg_cluster: PgCluster, pg_url: str, relayed_url: str,
                                                     relay: PgRelay) -> None:
    store = PostgresStore(relayed_url)
    try:
        record = created(store)
        relay.hold_request(SAVE_MARKER)
        done: list[Any] = []
        saver = threading.Thread(target=lambda: done.append(save_step(store, record, 1)))
        saver.start()
        assert relay.fired.wait(10)
        pg_cluster.restart_immediate()  # every connection dies; the held statement never arrives
        relay.release()
        saver.join(60)
        assert done == [2]
        assert save_step(store, record, 2) == 3  # the pool's dead connections were replaced
    finally:
        store.close()
    assert stored(pg_url, "wf_1")[0] == 3


async def test_a_step_completed_while_postgresql_restarts_answers_normally(
        tmp_path: Path, pg_cluster: PgCluster, relayed_url: str, relay: PgRelay) -> None:
    """Through the MCP tools: the call in flight during `pg_ctl restart -m immediate` gets its
    normal answer, and the next call too (before: a tool error, "… then retry")."""
    server = two_step_server(tmp_path, relayed_url)
    async with Client(server) as client:
        started = await client.call_tool("workflow_start", {"workflow": "two-steps"})
        wid = started.structured_content["workflow_id"]
        first = (await client.call_tool("workflow_get_next_step", {"workflow_id": wid})).structured_content["step"]
        relay.hold_request(SAVE_MARKER)

        def restart_when_held() -> None:
            relay.fired.wait(30)
            pg_cluster.restart_immediate()
            relay.release()

        restarter = threading.Thread(target=restart_when_held)
        restarter.start()
        reply = await client.call_tool("workflow_step_complete", {"workflow_id": wid, "step_id": first["id"],
                                                                  "result": "one"})
        restarter.join(60)
        assert not reply.is_error, reply.content
        second = reply.structured_content["next_step"]
        assert second["id"] != first["id"]
        pg_cluster.restart_immediate()  # between calls: the pool holds only dead connections
        last = await client.call_tool("workflow_step_complete", {"workflow_id": wid, "step_id": second["id"],
                                                                 "result": "two"})
        assert not last.is_error, last.content
        assert last.structured_content["status"] == "completed"
        state = (await client.call_tool("workflow_state_read", {"workflow_id": wid})).structured_content
    assert state["state"]["answers"] == ["one", "two"]


def test_a_save_that_lost_to_another_writer_says_so_when_its_connection_breaks(pg_url: str, relayed_url: str,
                                                                              relay: PgRelay) -> None:
    """Found by the campaign (seed 140): a save whose compare-and-set found another version
    reads which version won; when its connection broke on that read, the raw psycopg error
    reached the agent as an internal error instead of the conflict it is."""
    from aromcp_workflows.store import ConflictError

    mine, other = PostgresStore(relayed_url), PostgresStore(pg_url)
    try:
        record = created(mine)
        theirs = other.load("wf_1")
        save_step(other, theirs, 7)  # another replica wrote version 2 first
        relay.lose_request("SELECT version FROM instances")
        with pytest.raises(ConflictError) as lost:
            save_step(mine, record, 1)
        assert relay.fired.is_set()
        assert "expected version 1, found version 2" in str(lost.value)
    finally:
        mine.close()
        other.close()
    assert stored(pg_url, "wf_1") == (2, ["started", "step_completed"], {"n": 7})


def test_the_descriptor_a_reply_waits_on_outlives_a_connection_another_thread_closes(pg_url: str) -> None:
    """Found by the campaign (replicas, seed 177): the reply waited for its save's answer on the
    event loop with the connection's own socket number, and another thread that found the
    connection broken closed it in between; the loop refused the closed number ("[Errno 9] Bad
    file descriptor" reached the agent), and a number reused by another socket would have been
    taken from its owner.  `watch()` now gives a duplicate, valid until its waiter closes it.

    Made real here: the save waits on a row lock held by another session, its backend is
    terminated, and a thread's `result()` finds the connection broken, closes it, and sends
    the save again once the lock is gone."""
    import psycopg

    store = PostgresStore(pg_url)
    try:
        record = created(store)
        with psycopg.connect(pg_url, autocommit=False) as locker:
            locker.execute("SELECT 1 FROM instances WHERE workflow_id = 'wf_1' FOR UPDATE")
            record.state = {"n": 1}
            pending = store.begin_save(record, record.version, [HistoryEvent(kind="step_completed", data={"n": 1})])
            assert pending.poll() == "waiting"
            fd = pending.watch()
            assert fd is not None
            with psycopg.connect(pg_url, autocommit=True) as watcher:
                watcher.execute("SELECT pg_terminate_backend(%s)", (_waiting_backend(watcher),))
            done: list[int] = []
            finisher = threading.Thread(target=lambda: done.append(pending.result()))
            finisher.start()
            time.sleep(0.5)  # the finisher has found the connection broken and closed it
            locker.commit()  # the lock goes: the save sent again commits
            finisher.join(30)
        assert done == [2]
        os.fstat(fd)  # still ours, still open: nothing another thread did closed it
        os.close(fd)
    finally:
        store.close()
    assert stored(pg_url, "wf_1") == (2, ["started", "step_completed"], {"n": 1})


def _waiting_backend(conn: Any) -> int:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                            "AND datname = current_database()").fetchall()
        if rows:
            return int(rows[0][0])
        time.sleep(0.02)
    raise AssertionError("the save never waited on the lock")
