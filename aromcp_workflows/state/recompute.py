"""Incremental recompute: turn "these fields are dirty" into one V8 chain call.

Python decides *which* fields may need recomputing (everything downstream of the fields
the changed paths touch) and sends, once, the values they read; V8 runs them in
topological order and cuts off below any field whose value came out unchanged.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aromcp_workflows.expressions import MISSING, Call, ChainItem, ChainOutcome, ExpressionEngine, ValueTable
from aromcp_workflows.state.computed import ComputedGraph, FieldNode, Ref
from aromcp_workflows.state.paths import get_in
from aromcp_workflows.state.python_chain import python_chain


@dataclass
class TierView:
    """The data a recompute reads: writable tiers, inputs, computed values."""

    raw: dict[str, Any]
    state: dict[str, Any]
    inputs: dict[str, Any]
    computed: dict[str, Any]  # absent or MISSING = undefined

    def tier(self, name: str) -> dict[str, Any]:
        if name == "raw":
            return self.raw
        if name == "state":
            return self.state
        if name == "inputs":
            return self.inputs
        return {k: v for k, v in self.computed.items() if v is not MISSING}

    def flat(self, name: str, computed_names: AbstractSet[str]) -> Any:
        """Flattened lookup of one name: computed > raw > state; `inputs` is the inputs."""
        if name in computed_names:
            return self.computed.get(name, MISSING)
        if name == "inputs":
            return self.inputs
        if name in self.raw:
            return self.raw[name]
        return self.state.get(name, MISSING)

    def flattened(self, computed_names: AbstractSet[str]) -> dict[str, Any]:
        out = {**self.state, **self.raw}
        for name in computed_names:
            value = self.computed.get(name, MISSING)
            if value is MISSING:
                out.pop(name, None)
            else:
                out[name] = value
        out["inputs"] = self.inputs
        return out


class _Builder:
    """Builds argument sources for chain items from Refs against one TierView."""

    def __init__(self, view: TierView, graph: ComputedGraph) -> None:
        self.view = view
        self.graph = graph
        self.names = set(graph.nodes)
        self.table = ValueTable()
        self.reads_computed: set[str] = set()

    def source(self, ref: Any) -> Any:
        if isinstance(ref, tuple):  # ("obj", [(key, ref)])
            return ValueTable.obj([(k, self.source(r)) for k, r in ref[1]])
        kind = ref.kind
        if kind == "computed":
            self.reads_computed.add(ref.root)
            return ValueTable.path(ValueTable.computed(ref.root), list(ref.segments))
        if kind == "path":
            value = get_in(self.view.tier(ref.root), list(ref.segments))
            return self.table.value(("p", ref.root, ref.segments), value)
        if kind == "flat":
            if ref.root in self.names:
                return self.source(Ref("computed", ref.root, ref.segments))
            value = get_in({ref.root: self.view.flat(ref.root, self.names)},
                           [ref.root, *ref.segments])
            return self.table.value(("f", ref.root, ref.segments), value)
        if kind == "tier":
            if ref.root == "computed":
                return ValueTable.obj([(n, self.source(Ref("computed", n)))
                                       for n in self.graph.order])
            return self.table.value(("t", ref.root), self.view.tier(ref.root))
        # flat_all: the whole flattened view, computed values included
        plain = {k: v for k, v in self.view.flattened(set()).items() if k not in self.names}
        pairs = [(k, self.table.value(("f", k, ()), v)) for k, v in plain.items()]
        pairs += [(n, self.source(Ref("computed", n))) for n in self.graph.order]
        return ValueTable.obj(pairs)

    def input_source(self, node: FieldNode) -> Any:
        if not node.input_refs and not node.spec.source_is_list:
            return None
        sources = [self.source(r) for r in node.input_refs]
        if node.spec.source_is_list or len(sources) != 1:
            return ValueTable.array(sources)
        return sources[0]


def build_items(engine: ExpressionEngine, graph: ComputedGraph, order: list[str],
                builder: _Builder) -> list[ChainItem]:
    """Chain items for the fields in `order` (topological), with dependents as indices."""
    position = {name: i for i, name in enumerate(order)}
    items: list[ChainItem] = []
    for name in order:
        node = graph.nodes[name]
        spec = node.spec

        def resolve(n: str, keys: Any, node: FieldNode = node) -> Any:
            return builder.source(node.name_refs[n]) if n in node.name_refs else None

        origin = f"computed field {name}"
        call = engine.transform_call(spec.transform, builder.table, resolve,
                                     {"input": builder.input_source(node)}, origin)
        validate: Call | None = None
        if spec.validate:
            validate = engine.transform_call(
                spec.validate, builder.table, resolve,
                {"input": builder.input_source(node), "output": ValueTable.output()},
                origin, mode="expr")
        fallback = builder.table.fresh(spec.fallback) if spec.on_error == "use_fallback" \
            else None
        dependents = sorted(position[d] for d in node.dependents if d in position)
        items.append(ChainItem(name, call, spec.on_error, fallback, validate, dependents))
    return items


class V8Cache:
    """Which of one store's computed values V8 still holds, and under which keys.

    Sending a 10,000-item value into V8 costs milliseconds; a value V8 produced itself can
    stay there (keyed by store, field and version) to serve as the next recompute's old
    value and input.  Python only tracks keys; V8 may evict, and then resends are
    automatic (see expressions.batch.run_chain).
    """

    def __init__(self) -> None:
        self.uid = uuid.uuid4().hex[:12]
        self.versions: dict[str, int] = {}
        self.cached: set[str] = set()
        self.epoch = -1

    def key(self, name: str, ahead: int = 0) -> str:
        return f"{self.uid}:{name}:{self.versions.get(name, 0) + ahead}"

    def replaced(self, name: str) -> None:
        """`name` got a value V8 did not compute (another process's commit, caught up): what
        V8 holds under its key is no longer the value, so the next recompute sends it, under
        a key V8 has never held."""
        self.cached.discard(name)
        self.versions[name] = self.versions.get(name, 0) + 1


@dataclass
class RecomputeOutcome:
    """Per-field outcomes of one recompute plus the traces it produced."""

    order: list[str]
    outcomes: list[ChainOutcome]
    traces: list[dict[str, Any]]
    sent: set[str] = field(default_factory=set)
    epoch: int = -1
    in_python: bool = False  # computed by python_chain: V8 holds none of the new values

    def commit_cache(self, cache: V8Cache, computed: dict[str, Any]) -> None:
        """After the store committed: advance versions of changed values; everything the
        call saw with a defined value is now held by V8."""
        for name, out in zip(self.order, self.outcomes, strict=False):
            if out.status == "changed":
                cache.versions[name] = cache.versions.get(name, 0) + 1
                if self.in_python:
                    cache.cached.discard(name)
        if cache.epoch != self.epoch:
            cache.cached.clear()
            cache.epoch = self.epoch
        for name in self.sent:
            if computed.get(name, MISSING) is MISSING:
                cache.cached.discard(name)
            else:
                cache.cached.add(name)


def recompute(engine: ExpressionEngine, graph: ComputedGraph, view: TierView,
              direct: set[str], trigger: str, cache: V8Cache | None = None) -> RecomputeOutcome:
    """Recompute everything downstream of `direct` against `view` (not mutated)."""
    order = graph.downstream(direct)
    if not order:
        return RecomputeOutcome([], [], [])
    cache = cache or V8Cache()
    stamp = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    t0 = time.perf_counter()
    quick = python_chain(engine, graph, order, view, direct)
    if quick is not None:
        outcomes, sent, epoch = quick, set(), cache.epoch  # V8 was not asked: its cache stands as it was
    else:
        if cache.epoch != engine.context_epoch:
            cache.cached.clear()
        builder = _Builder(view, graph)
        items = build_items(engine, graph, order, builder)
        needed = builder.reads_computed | set(order)
        current = {n: view.computed.get(n, MISSING) for n in graph.order if n in needed}
        dirty = {i for i, n in enumerate(order) if n in direct}
        outcomes = engine.run_chain(
            items, builder.table, current, dirty, keys={n: cache.key(n) for n in current},
            cached=cache.cached & set(current), new_keys={n: cache.key(n, 1) for n in order})
        sent, epoch = set(current), engine.context_epoch  # after the chain: it may have made the first context
    elapsed = (time.perf_counter() - t0) * 1000
    # Inputs for traces: resolved after the chain (upstream fields are final by then).
    after = dict(view.computed)
    for name, out in zip(order, outcomes, strict=False):
        if out.status == "changed":
            after[name] = out.value
    final = TierView(view.raw, view.state, view.inputs, after)
    traces = []
    ran = [o for o in outcomes if o.status in ("changed", "unchanged", "failed")]
    for name, out in zip(order, outcomes, strict=False):
        if out.status not in ("changed", "unchanged", "failed"):
            continue
        node = graph.nodes[name]
        inputs = [_resolve(final, r, graph) for r in node.input_refs]
        value = inputs if node.spec.source_is_list or len(inputs) > 1 else (
            inputs[0] if inputs else None)
        traces.append({
            "field": name,
            "timestamp": stamp,
            "trigger": trigger,
            "input": None if value is MISSING else value,
            "output": _none(after.get(name, MISSING)),
            "duration_ms": out.duration_ms if len(ran) > 1 else round(elapsed, 3),
            "error": None if out.error is None else out.error.to_dict(),
            "status": out.status,
        })
    return RecomputeOutcome(order, outcomes, traces, sent, epoch, in_python=quick is not None)


def _none(value: Any) -> Any:
    return None if value is MISSING else value


def _resolve(view: TierView, ref: Ref, graph: ComputedGraph) -> Any:
    names = set(graph.nodes)
    if ref.kind == "computed":
        return _none(get_in({"v": view.computed.get(ref.root, MISSING)}, ["v", *ref.segments]))
    if ref.kind == "path":
        return _none(get_in(view.tier(ref.root), list(ref.segments)))
    if ref.kind == "flat":
        return _none(get_in({"v": view.flat(ref.root, names)}, ["v", *ref.segments]))
    if ref.kind == "tier":
        return view.tier(ref.root)
    return view.flattened(names)
