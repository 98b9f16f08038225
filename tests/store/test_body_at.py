"""`Store.body_at` and `Store.checkpoints`: an instance's body as committed at a past version,
as far as the store still holds it; on SQLite and on a real PostgreSQL (`store`)."""

from __future__ import annotations

import json

from aromcp_workflows.store import InstanceRecord, NotFoundError, Store


def record(n: int) -> InstanceRecord:
    return InstanceRecord(workflow_id="wf_body", workflow="w", project_dir="/p", state={"n": n, "log": []},
                          threads={"main": {"pc": n}})


def commit(store: Store, rec: InstanceRecord, n: int, snapshot: bool = False) -> None:
    """Version + 1 with `n` set and appended, as a delta (and a full snapshot if asked)."""
    delta = json.dumps([["s", "state", ["n"], n], ["a", "state", ["log"], len(rec.state["log"]), [n]],
                        ["s", "threads", ["main", "pc"], n]])
    rec.state = {"n": n, "log": [*rec.state["log"], n]}
    rec.threads = {"main": {"pc": n}}
    store.save(rec, rec.version, delta=delta, snapshot=snapshot)


def test_every_version_from_the_snapshot_on_is_rebuilt_and_older_ones_are_not(store: Store):
    rec = record(0)
    store.create(rec)
    for n in range(1, 5):
        commit(store, rec, n)  # versions 2..5
    for version in range(1, 6):
        body = store.body_at("wf_body", version)
        assert body is not None and body.version == version
        assert body.state == {"n": version - 1, "log": list(range(1, version))}
        assert body.threads == {"main": {"pc": version - 1}}
    commit(store, rec, 5, snapshot=True)  # version 6: a snapshot; the deltas before the last one go
    commit(store, rec, 6, snapshot=True)  # version 7
    assert store.body_at("wf_body", 3) is None and store.body_at("wf_body", 6) is None
    body = store.body_at("wf_body", 7)
    assert body is not None and body.state["log"] == [1, 2, 3, 4, 5, 6]
    assert store.load("wf_body").state == body.state  # the same body a load gives


def test_checkpoints_are_listed_oldest_first_with_their_snapshots(store: Store):
    rec = record(0)
    store.create(rec)
    assert store.checkpoints("wf_body") == []
    store.add_checkpoint("wf_body", None, "one", rec.snapshot())
    commit(store, rec, 1)
    store.add_checkpoint("wf_body", "ask", "two", rec.snapshot())
    points = store.checkpoints("wf_body")
    assert [(p.checkpoint_id, p.step_id, p.reason, p.snapshot["version"]) for p in points] == [
        ("cp-1", None, "one", 1), ("cp-2", "ask", "two", 2)]
    assert points[1].snapshot["state"] == {"n": 1, "log": [1]}


def test_an_unknown_instance_is_not_found(store: Store):
    try:
        store.body_at("wf_gone", 1)
    except NotFoundError as exc:
        assert "wf_gone" in str(exc)
    else:
        raise AssertionError("body_at of an unknown instance must raise NotFoundError")
