"""Property: the writes an applied batch reports (`UpdateResult.writes`), replayed in order
on the tiers as they were (`replay_writes`), give the tiers as they are — raw, state and
computed — after any sequence of random batches.  The history keeps these writes, and the
web view shows the state after any step by replaying them."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aromcp_workflows.expressions import ExpressionEngine
from aromcp_workflows.state import ComputedFieldSpec, StateError, StateTiers, Update, replay_writes

ENGINE = ExpressionEngine()
PATHS = ["raw.a", "raw.list", "raw.obj.x", "raw.obj.y[0]", "state.s", "state.obj.deep.k", "raw.list[0]"]
VALUES = st.one_of(st.integers(-3, 3), st.text(max_size=3), st.none(),
                   st.lists(st.integers(0, 3), max_size=3),
                   st.dictionaries(st.sampled_from("xyz"), st.integers(), max_size=2))
UPDATES = st.builds(Update, path=st.sampled_from(PATHS),
                    operation=st.sampled_from(["set", "append", "increment", "merge", "delete"]), value=VALUES)
COMPUTED = [
    ComputedFieldSpec(name="count", sources=["raw.list"], source_is_list=False,
                      transform="Array.isArray(input) ? input.length : -1", on_error="propagate",
                      fallback=None, validate=None),
    ComputedFieldSpec(name="shape", sources=["raw.obj", "state.s"], source_is_list=True,
                      transform="JSON.stringify(input)", on_error="propagate", fallback=None, validate=None),
]


def tiers_of(store: StateTiers) -> dict:
    return {"raw": store.raw, "state": store.state, "computed": store.computed}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(UPDATES, min_size=1, max_size=3), max_size=8))
def test_replaying_the_writes_gives_the_state(batches: list[list[Update]]) -> None:
    store = StateTiers(ENGINE, computed=COMPUTED)
    store.initialize({"raw": {"list": [1], "obj": {"x": 1}}, "state": {"s": "a"}})
    replayed = tiers_of(store)
    for batch in batches:
        try:
            result = store.apply(batch)
        except StateError:
            continue  # refused whole: nothing changed, nothing to replay
        replayed = replay_writes(replayed, result.writes)
        assert replayed == tiers_of(store)


def test_an_append_is_kept_as_its_item() -> None:
    """A history entry stays the size of the change: appending to a long list keeps the item."""
    store = StateTiers(ENGINE)
    store.initialize({"raw": {"files": list(range(1000))}})
    result = store.apply([Update("raw.files", "append", "new.py"), Update("raw.n", "increment", 2),
                          Update("raw.files", "delete")])
    assert result.writes == [["a", ["raw", "files"], "new.py"], ["s", ["raw", "n"], 2], ["d", ["raw", "files"]]]
