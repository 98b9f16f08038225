"""A save that moves an instance onto a new definition (`migrate`), on SQLite and PostgreSQL.

Only such a save rewrites the definition snapshot and inputs set at `create`; it writes the
body whole and drops every delta, so a reader that was behind loads the instance again
instead of applying deltas made under the old definition.  Compare-and-set holds as for
any save: a stale writer changes nothing.
"""

from __future__ import annotations

import pytest

from aromcp_workflows.store import ConflictError, HistoryEvent, InstanceRecord, Store


def record() -> InstanceRecord:
    return InstanceRecord(workflow_id="wf-1", workflow="demo", project_dir="/p",
                          definition={"main": "demo", "definitions": {"demo": {"definition": {"steps": [1]}}}},
                          inputs={"a": 1}, state={"raw": {"n": 1}}, threads={"main": {"pc": 0}})


def test_a_new_definition_is_written_with_a_whole_body_and_no_deltas(store: Store) -> None:
    first = record()
    store.create(first)
    first.state = {"raw": {"n": 2}}
    store.save(first, 1, delta='[["s","state",["raw","n"],2]]')
    assert store.deltas_since("wf-1", 1) is not None
    moved = store.load("wf-1")
    moved.definition = {"main": "demo", "definitions": {"demo": {"definition": {"steps": [1, 2]}}}}
    moved.inputs = {"a": 1, "b": "new"}
    moved.state = {"raw": {"n": 2, "m": 0}}
    version = store.save(moved, 2, [HistoryEvent(kind="migrated", data={"plan": ["x"]})],
                         delta='[["s","state",["raw","m"],0]]', definition=moved.definition)
    assert version == 3
    loaded = store.load("wf-1")
    assert loaded.definition == moved.definition and loaded.inputs == {"a": 1, "b": "new"}
    assert loaded.state == {"raw": {"n": 2, "m": 0}}
    assert store.deltas_since("wf-1", 1) is None  # a reader at version 1 must load it whole
    assert [e.kind for e in store.history("wf-1")] == ["migrated"]


def test_a_stale_move_changes_nothing(store: Store) -> None:
    store.create(record())
    stale = store.load("wf-1")
    fresh = store.load("wf-1")
    fresh.state = {"raw": {"n": 5}}
    store.save(fresh, 1, encoded=None, snapshot=True)
    stale.definition = {"main": "demo", "definitions": {}}
    with pytest.raises(ConflictError):
        store.save(stale, 1, [HistoryEvent(kind="migrated")], definition=stale.definition)
    loaded = store.load("wf-1")
    assert loaded.definition == record().definition and loaded.state == {"raw": {"n": 5}}
    assert store.history("wf-1") == []
