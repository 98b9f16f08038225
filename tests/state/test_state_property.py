"""Property: after every update every computed field equals its from-scratch value, and
no field outside the changed paths' downstream was recomputed.

Schemas are random DAGs of computed fields reading raw paths (via `from` and via free
names in the transform) and earlier fields; values collide often (mod M) so cut-off is
exercised.  The reference is a plain-Python evaluation of the same arithmetic.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aromcp_workflows.expressions import ExpressionEngine
from aromcp_workflows.state import ComputedFieldSpec, StateError, StateTiers, Update
from aromcp_workflows.state.paths import overlaps, parse_path

RAW_PATHS = ["raw.a", "raw.b", "raw.b.v", "raw.c", "raw.d.w", "raw.d"]
RAW_NAMES = ["a", "b", "c", "d"]
NUM_JS = "((x) => typeof x === 'object' && x !== null ? (x.v || 0) + (x.w || 0) : (x || 0))"
M = 3

ENGINE = ExpressionEngine()


def num(x):
    if isinstance(x, dict):
        return int(x.get("v") or 0) + int(x.get("w") or 0)
    return x or 0


@st.composite
def schemas(draw):
    n = draw(st.integers(1, 6))
    fields = []
    for i in range(n):
        sources = draw(st.lists(st.sampled_from(RAW_PATHS + [f"computed.f{j}" for j in range(i)]),
                                max_size=3, unique=True))
        implicit = draw(st.none() | st.sampled_from(RAW_NAMES + [f"f{j}" for j in range(i)]))
        fields.append((f"f{i}", sources, implicit))
    return fields


def to_specs(schema):
    specs = []
    for name, sources, implicit in schema:
        extra = f"{NUM_JS}({implicit})" if implicit else "0"
        transform = f"(input.reduce((s, v) => s + {NUM_JS}(v), 0) + {extra}) % {M}"
        specs.append(ComputedFieldSpec(name, sources, True, transform))
    return specs


def get(raw, computed, path):
    seg = parse_path(path)
    node = raw if seg[0] == "raw" else computed
    for s in seg[1:]:
        if not isinstance(node, dict) or s not in node:
            return None
        node = node[s]
    return node


def reference(schema, raw, state):
    computed = {}
    for name, sources, implicit in schema:
        total = sum(num(get(raw, computed, p)) for p in sources)
        if implicit:
            if implicit.startswith("f"):
                total += num(computed.get(implicit))
            else:  # flattened view: raw beats state
                total += num(raw[implicit] if implicit in raw else state.get(implicit))
        computed[name] = total % M
    return computed


def reference_downstream(schema, changed):
    """Fields whose transitive raw reads overlap a changed path."""
    deps: dict[str, set[tuple[str, ...]]] = {}
    hit = set()
    for name, sources, implicit in schema:
        mine: set[tuple[str, ...]] = set()
        ups = [p.split(".")[1] for p in sources if p.startswith("computed.")]
        mine |= {tuple(str(s) for s in parse_path(p)) for p in sources if p.startswith("raw.")}
        if implicit:
            if implicit.startswith("f"):
                ups.append(implicit)
            else:
                mine |= {("raw", implicit), ("state", implicit)}
        for up in ups:
            mine |= deps[up]
        deps[name] = mine
        if any(overlaps(d, c) for d in mine for c in changed):
            hit.add(name)
    return hit


values = st.integers(0, 5) | st.fixed_dictionaries({"v": st.integers(0, 5)},
                                                   optional={"w": st.integers(0, 5)})
updates = st.one_of(
    st.builds(Update, st.sampled_from(["raw.a", "raw.b", "raw.c", "raw.d"]), st.just("set"), values),
    st.builds(Update, st.sampled_from(["raw.b.v", "raw.d.w", "raw.b.w"]), st.just("set"),
              st.integers(0, 5)),
    st.builds(Update, st.sampled_from(["raw.a", "raw.c", "raw.b.v"]), st.just("increment"),
              st.integers(1, 4)),
    st.builds(Update, st.sampled_from(["raw.a", "raw.d", "raw.b.v", "raw.zzz"]), st.just("delete")),
    st.builds(Update, st.just("raw.unrelated"), st.just("set"), st.integers(0, 9)),
    st.builds(Update, st.sampled_from(["state.a", "state.c", "state.b"]), st.just("set"), values),
    st.builds(Update, st.sampled_from(["state.a", "state.b"]), st.just("delete")),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schemas(), st.lists(st.lists(updates, min_size=1, max_size=3), min_size=1, max_size=8),
       st.fixed_dictionaries(dict.fromkeys(RAW_NAMES, values)))
def test_no_stale_value_ever_and_no_needless_recompute(schema, batches, initial):
    store = StateTiers(ENGINE, to_specs(schema))
    store.initialize({"raw": initial})
    assert store.computed == reference(schema, store.raw, store.state)
    for batch in batches:
        before = store.snapshot()
        calls = ENGINE.stats.v8_calls
        try:
            result = store.apply(batch)
        except StateError:
            assert store.snapshot() == before  # refused batches change nothing
            continue
        assert ENGINE.stats.v8_calls - calls <= 1
        assert store.computed == reference(schema, store.raw, store.state)
        changed = [tuple(str(s) for s in parse_path(p)) for p in result.changed_paths]
        allowed = reference_downstream(schema, changed)
        assert set(result.recomputed) <= allowed
        assert set(result.computed_changed) <= set(result.recomputed)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schemas(), st.lists(st.tuples(st.integers(0, 1), st.lists(updates, min_size=1, max_size=3)),
                           min_size=1, max_size=8),
       st.fixed_dictionaries(dict.fromkeys(RAW_NAMES, values)))
def test_two_replicas_catching_up_with_each_other_never_hold_a_stale_value(schema, turns, initial):
    """Two copies of one instance (two server processes), each taking turns: after one applies
    a batch, the other catches up with what it wrote (`restore_value`, as catching up by deltas
    does). Every computed value of both stays its from-scratch value, whatever V8 kept."""
    copies = [StateTiers(ENGINE, to_specs(schema)), StateTiers(ENGINE, to_specs(schema))]
    for copy in copies:
        copy.initialize({"raw": initial})
        copy.take_dirty()
    for turn, batch in turns:
        here, there = copies[turn], copies[1 - turn]
        try:
            here.apply(batch)
        except StateError:
            continue
        for written in here.take_dirty():
            there.restore_value(written.tier, written.name, written.value)
        for copy in copies:
            assert copy.computed == reference(schema, copy.raw, copy.state)
