"""Property: the deltas a commit writes for random batches of updates, applied by the store
to what it held, give exactly the live state — appends to a list stored as their new
items included, whatever writes they are mixed with between two commits.

The ops are made by the commit code itself (`commits._state_ops`) from a real
`StateTiers`, and applied by the store's own `apply_delta`, as a load does.
"""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aromcp_workflows.expressions import ExpressionEngine
from aromcp_workflows.instances.commits import Baseline, _state_ops, encode
from aromcp_workflows.state import StateError, StateTiers, Update
from aromcp_workflows.store import InstanceRecord
from aromcp_workflows.store.base import apply_delta

ENGINE = ExpressionEngine()
PATHS = ["raw.l", "raw.l[0]", "raw.l[1]", "raw.m", "raw.m.k", "state.l", "state.n"]

updates = st.builds(
    Update,
    path=st.sampled_from(PATHS),
    operation=st.sampled_from(["append", "append", "append", "set", "delete", "increment", "merge"]),
    value=st.one_of(st.integers(0, 3), st.just([7]), st.just({"k": 1}), st.none()),
)
# Each element: one batch of updates, then commit or not.
scripts = st.lists(st.tuples(st.lists(updates, min_size=1, max_size=4), st.booleans()), max_size=25)


def stored_tiers(record: InstanceRecord) -> dict[str, Any]:
    main = record.state["states"]["main"]
    return {"raw": main.get("raw", {}), "state": main.get("state", {})}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=scripts, start=st.sampled_from([[], [1, 2], None]))
def test_committed_deltas_rebuild_the_live_state(script: list[tuple[list[Update], bool]], start: Any) -> None:
    store = StateTiers(ENGINE)
    if start is not None:
        store.apply([Update("raw.l", "set", start)])
    store.take_dirty()  # what the store holds from here: the snapshot below
    record = InstanceRecord(workflow_id="wf_p", workflow="w", project_dir="/p",
                            state={"states": {"main": json.loads(encode(store.snapshot()))}}, threads={})
    run = SimpleNamespace(states={"main": store})
    appends = 0
    for batch, commit in [*script, ([], True)]:
        try:
            if batch:
                store.apply(batch)
        except StateError:
            pass  # refused: all or nothing, nothing marked written
        if not commit:
            continue
        ops: list[Any] = []
        live = {"states": {"main": store.snapshot()}}
        _state_ops(run, SimpleNamespace(state=live), Baseline(states={"main": store}), ops)  # type: ignore[arg-type]
        appends += sum(op[0] == "a" for op in ops)
        apply_delta(record, encode(ops))
        assert stored_tiers(record) == json.loads(encode({"raw": store.raw, "state": store.state}))
    assert store.take_dirty() == []


def test_the_property_exercises_appends() -> None:
    """Not vacuous: a batch of appends to a stored list commits as an append operation."""
    store = StateTiers(ENGINE)
    store.apply([Update("raw.l", "set", [1])])
    store.take_dirty()
    store.apply([Update("raw.l", "append", 2), Update("raw.l", "append", 3)])
    ops: list[Any] = []
    live = {"states": {"main": store.snapshot()}}
    _state_ops(SimpleNamespace(states={"main": store}), SimpleNamespace(state=live),  # type: ignore[arg-type]
               Baseline(states={"main": store}), ops)
    assert ops == [["a", "state", ["states", "main", "raw", "l"], 1, [2, 3]]]
    record = InstanceRecord(workflow_id="wf_p", workflow="w", project_dir="/p",
                            state={"states": {"main": {"raw": {"l": [1]}}}}, threads={})
    before = copy.deepcopy(record.state)
    apply_delta(record, encode(ops))
    assert record.state == {"states": {"main": {"raw": {"l": [1, 2, 3]}}}} != before
