"""Update paths and operations: what is applied, what is refused, atomic batches."""

import pytest

from aromcp_workflows.state import ComputedFieldSpec as C
from aromcp_workflows.state import StateError, StateTiers, Update, parse_path


@pytest.fixture
def store(engine):
    s = StateTiers(engine, [C("n_items", ["raw.items"], False, "input.length")],
                   inputs={"branch": "main"})
    s.initialize({"raw": {"items": [1, 2], "count": 1, "cfg": {"a": 1}, "list": [{"x": 1}]},
                  "state": {"version": "1.0"}})
    return s


def test_parse_path_forms():
    assert parse_path("raw.a.b") == ["raw", "a", "b"]
    assert parse_path("raw.list[3].name") == ["raw", "list", 3, "name"]
    assert parse_path('raw.x["a.b"]') == ["raw", "x", "a.b"]
    with pytest.raises(StateError):
        parse_path("raw..x")


def test_operations(store):
    r = store.apply([Update("raw.count", "increment", 2), Update("raw.items", "append", 3),
                     Update("raw.cfg", "merge", {"b": 2}), Update("raw.list[0].x", "set", 5),
                     Update("raw.new.deep.key", "set", True), Update("state.version", "set", "1.1"),
                     Update("raw.list[1]", "set", {"x": 2})])
    assert store.raw["count"] == 3 and store.raw["items"] == [1, 2, 3]
    assert store.raw["cfg"] == {"a": 1, "b": 2} and store.raw["list"] == [{"x": 5}, {"x": 2}]
    assert store.raw["new"] == {"deep": {"key": True}} and store.state["version"] == "1.1"
    assert r.changed_paths == ["raw.count", "raw.items", "raw.cfg", "raw.list[0].x",
                               "raw.new.deep.key", "state.version", "raw.list[1]"]
    assert r.computed_changed == {"n_items": 3}
    r = store.apply([Update("raw.cfg.a", "delete"), Update("raw.missing", "delete")])
    assert store.raw["cfg"] == {"b": 2} and r.changed_paths == ["raw.cfg.a"]
    assert store.apply([Update("raw.fresh", "increment")]).changed_paths == ["raw.fresh"]
    assert store.raw["fresh"] == 1
    store.apply([{"path": "raw.items", "operation": "append", "value": 4}])
    assert store.raw["items"][-1] == 4


def test_setting_the_same_value_changes_nothing(store, engine):
    before = engine.stats.v8_calls
    r = store.apply([Update("raw.items", "set", [1, 2])])
    assert r.changed_paths == [] and r.recomputed == [] and engine.stats.v8_calls == before


@pytest.mark.parametrize("update,message", [
    (Update("computed.n_items", "set", 1), "read-only"),
    (Update("inputs.branch", "set", "x"), "read-only"),
    (Update("secret.x", "set", 1), "unknown tier"),
    (Update("raw.__proto__.polluted", "set", 1), "__proto__"),
    (Update("raw.a.constructor", "set", 1), "constructor"),
    (Update("raw.prototype", "set", 1), "prototype"),
    (Update("raw.x", "set", {"__proto__": {"p": 1}}), "__proto__"),
    (Update("raw.cfg", "increment", 1), "not a number"),
    (Update("raw.count", "increment", "2"), "not a number"),
    (Update("raw.count", "append", 1), "not a list"),
    (Update("raw.items", "merge", {"a": 1}), "not an object"),
    (Update("raw.items[9]", "set", 1), "out of range"),
    (Update("raw.count.x", "set", 1), "not an object"),
    (Update("raw.x", "upsert", 1), "unknown operation"),
    (Update("raw", "set", 1), "name a field"),
])
def test_refused_updates(store, update, message):
    with pytest.raises(StateError, match=message):
        store.apply([update])


def test_batches_are_atomic(store):
    snapshot = store.snapshot()
    with pytest.raises(StateError):
        store.apply([Update("raw.count", "set", 100), Update("raw.items", "append", 3),
                     Update("computed.n_items", "set", 0)])
    assert store.snapshot() == snapshot


def test_failed_propagate_transform_leaves_store_unchanged(engine):
    s = StateTiers(engine, [C("first", ["raw.items"], False, "input[0].name.toUpperCase()")])
    s.initialize({"raw": {"items": [{"name": "a"}]}})
    snapshot = s.snapshot()
    with pytest.raises(StateError) as exc:
        s.apply([Update("raw.items", "set", [{}]), Update("raw.other", "set", 1)])
    assert exc.value.field == "first" and exc.value.cause.kind == "runtime"
    assert "computed field first" in str(exc.value) and "toUpperCase" in str(exc.value)
    assert s.snapshot() == snapshot


def test_read_and_flattened_and_scope(store, engine):
    store.apply([Update("state.count", "set", 99), Update("raw.cfg.a", "set", 7)])
    flat = store.flattened()
    assert flat["count"] == 1  # raw beats state
    assert flat["n_items"] == 2 and flat["inputs"] == {"branch": "main"}
    assert store.read(["raw.cfg.a", "state.count", "n_items", "computed.n_items",
                       "inputs.branch", "items[1]", "nope"]) == {
        "raw.cfg.a": 7, "state.count": 99, "n_items": 2, "computed.n_items": 2,
        "inputs.branch": "main", "items[1]": 2, "nope": None}
    scope = store.scope({"item": "x"})
    assert engine.render("{{ this.count }} {{ state.count }} {{ raw.count }} {{ computed.n_items }} "
                         "{{ inputs.branch }} {{ item }} {{ n_items }}", scope) == "1 99 1 2 main x 2"


def test_computed_shadows_raw(engine):
    s = StateTiers(engine, [C("total", ["raw.items"], False, "input.length")])
    s.initialize({"raw": {"items": [1], "total": "raw value"}})
    assert s.flattened()["total"] == 1


def test_snapshot_roundtrip(store, engine):
    import json
    snap = json.loads(json.dumps(store.snapshot()))
    again = StateTiers.from_snapshot(engine, [C("n_items", ["raw.items"], False, "input.length")],
                                     snap)
    assert again.flattened() == store.flattened()
    assert again.apply([Update("raw.items", "append", 9)]).computed_changed == {"n_items": 3}
