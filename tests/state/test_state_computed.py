"""Computed fields: graph, incremental recompute, cut-off, error policies, limits, traces."""

import pytest

from aromcp_workflows.expressions import ExpressionEngine
from aromcp_workflows.state import ComputedFieldSpec as C
from aromcp_workflows.state import StateError, StateTiers, Update


def test_cycles_are_rejected_naming_the_cycle(engine):
    with pytest.raises(StateError, match=r"cycle \(each reads the next\): a -> c -> b -> a"):
        StateTiers(engine, [C("a", ["computed.c"]), C("b", ["computed.a"]),
                            C("c", [], False, "b + 1")])
    with pytest.raises(StateError, match="cycle .*: x -> x"):
        StateTiers(engine, [C("x", [], False, "(x || 0) + 1")])


def test_unknown_computed_source_is_rejected(engine):
    with pytest.raises(StateError, match="computed.nope"):
        StateTiers(engine, [C("a", ["computed.nope"])])


def test_prefix_overlap_decides_what_is_affected(engine):
    specs = [C("reads_a", ["raw.a"], False, "JSON.stringify(input)"),
             C("reads_abc", ["raw.a.b.c"], False, "input ?? null"),
             C("reads_ax", ["raw.a.x"], False, "input ?? null"),
             C("reads_other", ["raw.other"], False, "input ?? null")]
    s = StateTiers(engine, specs)
    s.initialize({"raw": {"a": {"b": {"c": 1}, "x": 0}, "other": 0}})
    r = s.apply([Update("raw.a.b", "set", {"c": 2})])
    assert sorted(r.recomputed) == ["reads_a", "reads_abc"]
    r = s.apply([Update("raw.a", "set", {"b": {"c": 2}, "x": 1})])
    assert sorted(r.recomputed) == ["reads_a", "reads_abc", "reads_ax"]
    assert r.computed_changed == {"reads_a": '{"b":{"c":2},"x":1}', "reads_ax": 1}


@pytest.mark.parametrize("python_simple", [False, True], ids=["v8-chain", "python-chain"])
def test_cut_off_where_a_value_did_not_change(python_simple):
    engine = ExpressionEngine(python_simple=python_simple)
    specs = [C("count", ["raw.items"], False, "input.length"),
             C("is_big", ["computed.count"], False, "input > 2"),
             C("label", ["computed.is_big"], False, "input ? 'big' : 'small'")]
    s = StateTiers(engine, specs)
    s.initialize({"raw": {"items": [1]}})
    before = engine.stats.v8_calls
    r = s.apply([Update("raw.items", "append", 2)])
    assert engine.stats.v8_calls - before == (0 if python_simple else 1)  # the chain in one crossing, or none
    assert r.recomputed == ["count", "is_big"]  # label not run: is_big came out unchanged
    assert r.computed_changed == {"count": 2}
    r = s.apply([Update("raw.items", "append", 3)])
    assert r.recomputed == ["count", "is_big", "label"]
    assert r.computed_changed == {"count": 3, "is_big": True, "label": "big"}


def test_update_touching_no_dependency_runs_no_transform(engine):
    s = StateTiers(engine, [C("count", ["raw.items"], False, "input.length")])
    s.initialize({"raw": {"items": []}})
    before = engine.stats.v8_calls
    r = s.apply([Update("raw.unrelated", "set", 1), Update("state.x", "set", 2)])
    assert r.recomputed == [] and engine.stats.v8_calls == before


def test_implicit_dependencies_from_free_names(engine):
    specs = [C("scaled", ["raw.values"], False, "input.map(v => v * factor)"),
             C("via_this", [], False, "this.factor + (computed.scaled || []).length"),
             C("via_tier", [], False, "raw.factor * 2 + state.bonus")]
    s = StateTiers(engine, specs)
    s.initialize({"raw": {"values": [1, 2], "factor": 2}, "state": {"bonus": 1}})
    assert s.flattened()["scaled"] == [2, 4]
    r = s.apply([Update("raw.factor", "set", 3)])
    assert r.computed_changed == {"scaled": [3, 6], "via_this": 5, "via_tier": 7}
    r = s.apply([Update("state.bonus", "set", 2)])
    assert r.computed_changed == {"via_tier": 8}
    assert sorted(s.dependencies("computed.via_tier")["direct_deps"]) == [
        "raw.factor", "state.bonus"]


def test_on_error_policies(engine):
    specs = [C("strict", ["raw.x"], False, "input.a.b"),
             C("fallback", ["raw.y"], False, "input.a.b", on_error="use_fallback",
               fallback="fb"),
             C("keep", ["raw.z"], False, "input.a.b", on_error="ignore"),
             C("below_keep", ["computed.keep"], False, "String(input) + '!'")]
    s = StateTiers(engine, specs)
    s.initialize({"raw": {"x": {"a": {"b": 1}}, "y": {"a": {"b": 2}}, "z": {"a": {"b": 3}}}})
    assert s.computed == {"strict": 1, "fallback": 2, "keep": 3, "below_keep": "3!"}
    r = s.apply([Update("raw.y", "set", {}), Update("raw.z", "set", {})])
    assert s.computed == {"strict": 1, "fallback": "fb", "keep": 3, "below_keep": "3!"}
    assert r.computed_changed == {"fallback": "fb"}
    assert {e["field"] for e in r.errors} == {"fallback", "keep"}
    with pytest.raises(StateError, match="strict"):
        s.apply([Update("raw.x", "set", {})])


def test_validate_failure_counts_as_an_error(engine):
    spec = C("ratio", ["raw.a", "raw.b"], True, "input[0] / input[1]",
             validate="Number.isFinite(output)")
    s = StateTiers(engine, [spec])
    s.initialize({"raw": {"a": 1, "b": 2}})
    with pytest.raises(StateError) as exc:
        s.apply([Update("raw.b", "set", 0)])
    assert exc.value.cause.kind == "validation"
    assert s.computed["ratio"] == 0.5


def test_traces(engine):
    s = StateTiers(engine, [C("double", ["raw.n"], False, "input * 2"),
                            C("bad", ["raw.n"], False, "input.x.y", on_error="ignore")])
    s.initialize({"raw": {"n": 1}}, trigger="workflow_start")
    s.drain_traces()
    s.apply([Update("raw.n", "set", 5)], trigger="step set_n")
    traces = s.drain_traces()
    assert [t["field"] for t in traces] == ["double", "bad"]
    t = traces[0]
    assert set(t) >= {"field", "timestamp", "trigger", "input", "output", "duration_ms", "error"}
    assert (t["trigger"], t["input"], t["output"], t["error"]) == ("step set_n", 5, 10, None)
    assert traces[1]["error"]["kind"] == "runtime" and traces[1]["error"]["origin"] == \
        "computed field bad"
    assert s.drain_traces() == []


def test_traces_are_bounded(engine):
    s = StateTiers(engine, [C("double", ["raw.n"], False, "input * 2")], max_traces=10)
    s.initialize({"raw": {"n": 0}})
    for i in range(30):
        s.apply([Update("raw.n", "set", i + 1)])
    assert len(s.traces()) == 10


def test_runaway_transform_is_reported_with_field_and_source_and_store_keeps_serving():
    eng = ExpressionEngine(timeout_ms=300)
    try:
        specs = [C("ok_before", ["raw.n"], False, "input + 1"),
                 C("runaway", ["raw.n"], False, "if (input > 1) { while (true) {} } return input"),
                 C("ok_after", ["computed.ok_before"], False, "input * 10")]
        s = StateTiers(eng, specs)
        s.initialize({"raw": {"n": 1}})
        with pytest.raises(StateError) as exc:
            s.apply([Update("raw.n", "set", 2)])
        err = exc.value.cause
        assert exc.value.field == "runaway" and err.kind == "timeout"
        assert "while (true)" in err.expression and err.origin == "computed field runaway"
        assert s.raw["n"] == 1
        r = s.apply([Update("raw.n", "set", 0)])
        assert r.computed_changed == {"ok_before": 1, "runaway": 0, "ok_after": 10}
    finally:
        eng.close()


def test_runaway_with_fallback_keeps_the_rest_of_the_chain():
    eng = ExpressionEngine(timeout_ms=300)
    try:
        specs = [C("a", ["raw.n"], False, "input + 1"),
                 C("slow", ["computed.a"], False, "while (true) {}", on_error="use_fallback",
                   fallback=-1),
                 C("b", ["computed.slow"], False, "input * 2"),
                 C("c", ["computed.a"], False, "input * 3")]
        s = StateTiers(eng, specs)
        r = s.initialize({"raw": {"n": 1}})
        assert s.computed == {"a": 2, "slow": -1, "b": -2, "c": 6}
        assert [e["kind"] for e in r.errors] == ["timeout"]
    finally:
        eng.close()


@pytest.mark.slow  # two out-of-memory kills of a V8 context on purpose: about 3 s
def test_out_of_memory_in_a_chain_blames_the_one_transform_and_keeps_the_rest():
    """Out-of-memory says nothing about which transform ran (unlike a timeout): the chain
    is re-run one transform per call until the guilty one is found (batch.run_chain)."""
    hog = "let a = []; while (true) { a.push('x'.repeat(1 << 20) + a.length) }"
    eng = ExpressionEngine(timeout_ms=5000, max_memory_mb=128)
    try:
        specs = [C("big", ["raw.n"], False, "input > 100"),
                 C("flag", ["computed.big"], False, "input ? 1 : 0"),  # cut off: big stays false
                 C("hog", ["raw.n"], False, hog, on_error="use_fallback", fallback=-1),
                 C("twice", ["computed.hog"], False, "input * 2")]
        s = StateTiers(eng, specs)
        r = s.initialize({"raw": {"n": 1}})
        assert s.computed == {"big": False, "flag": 0, "hog": -1, "twice": -2}
        assert [(e["field"], e["kind"]) for e in r.errors] == [("hog", "memory")]
        r = s.apply([Update("raw.n", "set", 5)])  # one transform per call: big, then (flag skipped) hog
        assert s.computed == {"big": False, "flag": 0, "hog": -1, "twice": -2}
        assert [(e["field"], e["kind"]) for e in r.errors] == [("hog", "memory")]
    finally:
        eng.close()


def test_values_kept_in_v8_survive_a_lost_context(engine):
    s = StateTiers(engine, [C("evens", ["raw.items"], False, "input.filter(x => x % 2 === 0)"),
                            C("count", ["computed.evens"], False, "input.length")])
    s.initialize({"raw": {"items": [1, 2, 3, 4]}})
    calls = engine.stats.v8_calls
    s.apply([Update("raw.items", "append", 6)])
    assert engine.stats.v8_calls - calls == 1  # old values came from V8's cache
    engine.close()  # the context (and its cache) is gone
    assert engine.evaluate("1 + 1", {}) == 2
    s._v8_cache.epoch = engine.context_epoch  # make the store believe V8 still has them
    calls = engine.stats.v8_calls
    r = s.apply([Update("raw.items", "append", 8)])
    assert engine.stats.v8_calls - calls == 2  # a miss, then values resent inline
    assert r.computed_changed == {"evens": [2, 4, 6, 8], "count": 4}
    calls = engine.stats.v8_calls
    s.apply([Update("raw.items", "append", 10)])
    assert engine.stats.v8_calls - calls == 1 and s.computed["count"] == 5


def test_recompute_all_and_undefined_values_survive_snapshots(engine):
    specs = [C("maybe", ["raw.x"], False, "input ? input * 2 : undefined"),
             C("after", ["computed.maybe"], False, "input === undefined ? 'none' : input")]
    s = StateTiers(engine, specs)
    s.initialize({"raw": {"x": 0}})
    assert s.computed == {"after": "none"} and "maybe" not in s.flattened()
    again = StateTiers.from_snapshot(engine, specs, s.snapshot())
    assert again.computed == {"after": "none"}
    r = again.apply([Update("raw.x", "set", 2)])
    assert r.computed_changed == {"maybe": 4, "after": 4}
    assert again.recompute_all().computed_changed == {}


def test_v8_keeps_a_bounded_number_of_values_however_many_stores():
    """Each store's values have keys of their own in V8's cache; with thousands of
    instances V8 keeps only the most recent 2,048 entries, and an evicted store's next
    recompute resends its values (one more crossing) and stays right."""
    eng = ExpressionEngine()
    try:
        s = StateTiers(eng, [C("evens", ["raw.items"], False, "input.filter(x => x % 2 === 0)")])
        s.initialize({"raw": {"items": [1, 2, 3, 4]}})
        others = [StateTiers(eng, [C("evens", ["raw.items"], False, "input.filter(x => x % 2 === 0)")])
                  for _ in range(2100)]
        for n, other in enumerate(others):  # one value each in V8 (a change replaces its old key)
            other.initialize({"raw": {"items": [n, n + 1]}})
        calls = eng.stats.v8_calls
        r = s.apply([Update("raw.items", "append", 6)])
        assert eng.stats.v8_calls - calls == 2  # evicted: a miss, then the values inline
        assert r.computed_changed == {"evens": [2, 4, 6]}
        calls = eng.stats.v8_calls
        others[-1].apply([Update("raw.items", "append", 2102)])
        assert eng.stats.v8_calls - calls == 1  # a recent store's value is still in V8
    finally:
        eng.close()


def test_a_recompute_after_a_restored_computed_value_reads_the_restored_value(engine):
    """Another server process's commit comes in by `restore_value` (catching up by deltas):
    a computed field it changed must be read as restored by the next recompute, not as V8
    last held it. Found by the fault campaign (CI-sized seed 5): a replica that had computed
    `filtered_files` as [] at the start caught up with the other replica's ten files, then
    recomputed `summary` from the [] its V8 still held under the old key — `files: 0`."""
    specs = [C("listed", ["raw.items"], False, "input.filter(x => x !== 'skip')"),
             C("summary", ["computed.listed", "raw.marks"], False,
               "({count: input[0].length, marks: Object.keys(input[1]).length})")]
    here = StateTiers(engine, specs)
    here.initialize({"raw": {"items": [], "marks": {}}})
    assert here.computed["summary"] == {"count": 0, "marks": 0}
    elsewhere = StateTiers(engine, specs)  # the other replica, from the same start
    elsewhere.initialize({"raw": {"items": [], "marks": {}}})
    elsewhere.apply([Update("raw.items", "set", ["a", "skip", "b"])])
    for written in elsewhere.take_dirty():  # its commit, as a delta, caught up here
        here.restore_value(written.tier, written.name, written.value)
    assert here.computed["listed"] == ["a", "b"]
    here.apply([Update("raw.marks.first", "set", True)])
    assert here.computed["summary"] == {"count": 2, "marks": 1}
