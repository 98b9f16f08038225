"""StateTiers: the tiers of one workflow instance, its updates and its computed fields.

The store is the only writer of an instance's state.  Every batch of updates is applied
to a draft, the computed fields downstream of what changed are recomputed (one V8
crossing), and only then is everything committed together — or nothing, if an update
is refused or a `propagate` transform fails.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from aromcp_workflows.expressions import MISSING, ExpressionEngine, ExpressionError
from aromcp_workflows.state.computed import ComputedFieldSpec, Ref, shared_graph
from aromcp_workflows.state.errors import StateError
from aromcp_workflows.state.paths import format_path, get_in, key_tuple, parse_path
from aromcp_workflows.state.recompute import TierView, V8Cache, recompute
from aromcp_workflows.state.updates import Update, UpdateResult, apply_updates, check_value_keys, describe_changes

SNAPSHOT_VERSION = 1


class Written(NamedTuple):
    """A top-level value written since the last commit.  `kept`: when every write since
    only appended to a list, how many of its first items the store already holds."""

    tier: str
    name: str
    value: Any
    kept: int | None


class StateTiers:
    """Tiers `raw`, `state` (writable), `computed` (derived), `inputs` (read-only)."""

    def __init__(self, engine: ExpressionEngine, computed: Sequence[ComputedFieldSpec] = (),
                 inputs: Mapping[str, Any] | None = None, max_traces: int = 1000) -> None:
        self.engine = engine
        self.graph = shared_graph(computed)  # one graph per distinct spec list, shared by stores
        self._names = self.graph.names
        self._raw: dict[str, Any] = {}
        self._state: dict[str, Any] = {}
        self._computed: dict[str, Any] = {}
        self._inputs: dict[str, Any] = dict(inputs or {})
        self._traces: deque[dict[str, Any]] = deque(maxlen=max_traces)
        self._lock = threading.RLock()
        self._v8_cache = V8Cache()
        # (tier, top-level name) written since the last `take_dirty`: what a commit stores.
        # The value is the length the stored list had when every write since was an
        # `append` to it (the commit stores the new items only), else None (store it whole).
        self._dirty: dict[tuple[str, str], int | None] = {}

    # -- reading -----------------------------------------------------------------------
    @property
    def raw(self) -> dict[str, Any]:
        return self._raw

    @property
    def state(self) -> dict[str, Any]:
        return self._state

    @property
    def computed(self) -> dict[str, Any]:
        """Computed values (a field whose value is undefined is absent)."""
        return {k: v for k, v in self._computed.items() if v is not MISSING}

    @property
    def inputs(self) -> dict[str, Any]:
        return self._inputs

    def _view(self) -> TierView:
        return TierView(self._raw, self._state, self._inputs, self._computed)

    def flattened(self) -> dict[str, Any]:
        """state < raw < computed (later wins), plus `inputs`.  Do not mutate the result."""
        return self._view().flattened(self._names)

    def scope(self, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Names for ExpressionEngine: the flattened view, the tiers by name, then `extra`
        (loop and task variables) on top."""
        out = self.flattened()
        out["raw"] = self._raw
        out["state"] = self._state
        out["computed"] = self.computed
        out["inputs"] = self._inputs
        if extra:
            out.update(extra)
        return out

    def read(self, paths: Iterable[str]) -> dict[str, Any]:
        """`{path: value}` for tier-qualified or flattened paths (None when absent)."""
        out: dict[str, Any] = {}
        for path in paths:
            segments = parse_path(path)
            head = str(segments[0])
            if head in ("raw", "state", "computed", "inputs"):
                root: Any = self._view().tier(head)
                value = get_in(root, segments[1:])
            else:
                value = get_in(self.flattened(), segments)
            out[path] = None if value is MISSING else value
        return out

    # -- writing -----------------------------------------------------------------------
    def initialize(self, default_state: Mapping[str, Any] | None = None,
                   extra: Mapping[str, Any] | None = None,
                   trigger: str = "initialize") -> UpdateResult:
        """Set the tiers from `default_state` (templates evaluated once, with `inputs`)
        and compute every computed field."""
        default_state = dict(default_state or {})
        unknown = set(default_state) - {"raw", "state"}
        if unknown:
            raise StateError(f"default_state may only have raw and state, not "
                             f"{', '.join(sorted(unknown))}")
        scope = {"inputs": self._inputs, **(extra or {})}
        try:
            rendered = self.engine.render(default_state, scope, origin="default_state")
        except ExpressionError as exc:
            raise StateError(f"default_state: {exc}", cause=exc) from None
        for tier in ("raw", "state"):
            value = rendered.get(tier) or {}
            if not isinstance(value, dict):
                raise StateError(f"default_state.{tier} must be an object")
            check_value_keys(value, f"default_state.{tier}")
        with self._lock:
            raw, state = dict(rendered.get("raw") or {}), dict(rendered.get("state") or {})
            view = TierView(raw, state, self._inputs, {})
            result = self._recompute(view, set(self._names), trigger)
            self._raw, self._state = raw, state
            result.changed_paths = [f"raw.{k}" for k in raw] + [f"state.{k}" for k in state]
            self._dirty.update({("raw", k): None for k in raw} | {("state", k): None for k in state})
            self._mark_computed(result)
            return result

    def apply(self, updates: Sequence[Update | Mapping[str, Any]], trigger: str = "") -> UpdateResult:
        """Apply a batch atomically and recompute what it affects (one V8 crossing)."""
        batch = [u if isinstance(u, Update) else Update.from_dict(u) for u in updates]
        with self._lock:
            done = apply_updates({"raw": self._raw, "state": self._state}, batch)
            tiers, changed, kept = done.tiers, done.changed, done.kept
            if not changed:
                return UpdateResult()
            keys = [key_tuple(t, s) for t, s in changed]
            direct = self.graph.affected(keys)
            view = TierView(tiers["raw"], tiers["state"], self._inputs, self._computed)
            result = self._recompute(view, direct, trigger)
            self._raw, self._state = tiers["raw"], tiers["state"]
            result.changed_paths = describe_changes(changed)
            result.writes = done.writes + [["s", ["computed", name], value]
                                           for name, value in result.computed_changed.items()]
            self._mark_written(changed, kept)
            self._mark_computed(result)
            return result

    def _mark_written(self, changed: list[tuple[str, list[Any]]], kept: list[int | None]) -> None:
        """Mark the top-level values a batch changed.  A value stays "appended to" while
        every write since the last commit appended to it; its stored length is the one
        before the first of those appends."""
        for (tier, segments), length in zip(changed, kept, strict=True):
            key = (tier, str(segments[0]))
            if key not in self._dirty:
                self._dirty[key] = length
            elif length is None:
                self._dirty[key] = None

    def recompute_all(self, trigger: str = "recompute") -> UpdateResult:
        """Recompute every field from the current tiers (e.g. after a definition change)."""
        with self._lock:
            return self._mark_computed(self._recompute(self._view(), set(self._names), trigger))

    def _mark_computed(self, result: UpdateResult) -> UpdateResult:
        self._dirty.update(dict.fromkeys((("computed", name) for name in result.computed_changed), None))
        return result

    def restore_value(self, tier: str, name: str, value: Any) -> None:
        """Put back a top-level value exactly as another process committed it (`MISSING`:
        gone), computed values included: no transform runs, nothing is marked dirty
        (the store already holds it), and a computed value is no longer taken from V8's
        copy (`V8Cache.replaced`): the next recompute reads it as restored.  The tier dict
        is replaced, not changed in place, as every write here does."""
        if tier not in ("raw", "state", "computed"):
            raise StateError(f"cannot restore a value of tier {tier!r}")
        with self._lock:
            current = {"raw": self._raw, "state": self._state, "computed": self._computed}[tier]
            if tier == "computed" and name not in self._names:
                return  # a field this definition does not have (cannot happen for one definition)
            updated = dict(current)
            if value is MISSING and tier != "computed":
                updated.pop(name, None)
            else:
                updated[name] = value
            if tier == "raw":
                self._raw = updated
            elif tier == "state":
                self._state = updated
            else:
                self._computed = updated
                self._v8_cache.replaced(name)
            if (tier, name) in self._dirty:  # no longer a known number of appends to the stored list
                self._dirty[(tier, name)] = None

    def take_dirty(self) -> list[Written]:
        """Every top-level value written since the last call (`MISSING` for one that is
        gone), and forget them: a commit stores exactly these."""
        with self._lock:
            tiers = {"raw": self._raw, "state": self._state, "computed": self._computed}
            out = [Written(tier, name, tiers[tier].get(name, MISSING), self._dirty[(tier, name)])
                   for tier, name in sorted(self._dirty)]
            self._dirty.clear()
            return out

    def _recompute(self, view: TierView, direct: set[str], trigger: str) -> UpdateResult:
        """Run the recompute; commit computed values and traces (tiers: the caller)."""
        if not direct:
            return UpdateResult()
        out = recompute(self.engine, self.graph, view, direct, trigger, self._v8_cache)
        self._traces.extend(out.traces)
        result = UpdateResult()
        new_values: dict[str, Any] = {}
        for name, outcome in zip(out.order, out.outcomes, strict=False):
            if outcome.status == "failed":
                err = outcome.error
                if err is not None and err.kind == "runtime" and self._sources_undefined(view, name):
                    result.errors.append({"field": name, "undefined_sources": True, **err.to_dict()})
                    continue  # the seed's reading: a field over a field nobody set yet is undefined
                raise StateError(f"computed field {name!r} failed: {err}", field=name,
                                 cause=err)
            if outcome.status in ("changed", "unchanged"):
                result.recomputed.append(name)
            if outcome.error is not None:
                result.errors.append({"field": name, **outcome.error.to_dict()})
            if outcome.status == "changed":
                new_values[name] = outcome.value
                result.computed_changed[name] = None if outcome.value is MISSING \
                    else outcome.value
        self._computed = {**view.computed, **new_values}
        out.commit_cache(self._v8_cache, self._computed)
        return result

    def _sources_undefined(self, view: TierView, name: str) -> bool:
        """Whether a `from` path of a computed field is still undefined (nothing set it yet):
        then a transform that throws leaves the field undefined instead of failing, as the
        seed design's fields over results that arrive one by one (`Object.values(input[1])`
        before the first lint result) expect.  Once every source is set, a throw fails."""
        refs = self.graph.nodes[name].input_refs
        names = set(self.graph.nodes)

        def undefined(ref: Ref) -> bool:
            if ref.kind == "path":
                return get_in(view.tier(ref.root), list(ref.segments)) is MISSING
            if ref.kind == "flat":
                return get_in({"v": view.flat(ref.root, names)}, ["v", *ref.segments]) is MISSING
            if ref.kind == "computed":
                return get_in({"v": view.computed.get(ref.root, MISSING)}, ["v", *ref.segments]) is MISSING
            return False

        return any(undefined(r) for r in refs)

    # -- introspection -----------------------------------------------------------------
    def dependencies(self, field: str) -> dict[str, list[str]]:
        """`{direct_deps, all_deps, dependents}` of a computed field, tier-qualified."""
        name = field[len("computed."):] if field.startswith("computed.") else field
        node = self.graph.nodes.get(name)
        if node is None:
            raise StateError(f"unknown computed field {field!r}; known: "
                             f"{', '.join(self.graph.order) or '(none)'}", field=field)
        direct = self._deps_of(name)
        all_deps = list(direct)
        for up in self.graph.all_upstream(name):
            for dep in self._deps_of(up):
                if dep not in all_deps:
                    all_deps.append(dep)
        dependents: list[str] = []
        stack = sorted(node.dependents)
        while stack:
            d = stack.pop(0)
            if f"computed.{d}" not in dependents:
                dependents.append(f"computed.{d}")
                stack.extend(sorted(self.graph.nodes[d].dependents))
        return {"direct_deps": direct, "all_deps": all_deps, "dependents": dependents}

    def _deps_of(self, name: str) -> list[str]:
        node = self.graph.nodes[name]
        refs: list[Ref] = list(node.input_refs)
        bound = node.reads.bound | (node.validate_reads.bound if node.validate_reads else set())
        for n, value in node.name_refs.items():
            if n in bound and not (n in self._raw or n in self._state or n in self._names):
                continue  # a local of the transform (`f` in `f => ...`), absent from state
            refs.extend([value] if isinstance(value, Ref) else
                        [r for _, r in value[1] if isinstance(r, Ref)])
        out: list[str] = []
        for ref in refs:
            if ref.kind == "computed":
                text = format_path("computed", [ref.root, *ref.segments])
            elif ref.kind == "path":
                text = format_path(ref.root, list(ref.segments))
            elif ref.kind == "flat":
                tier = "state" if ref.root in self._state and ref.root not in self._raw \
                    else "raw"
                text = format_path(tier, [ref.root, *ref.segments])
            elif ref.kind == "tier":
                text = ref.root
            else:
                text = "*"
            if text not in out:
                out.append(text)
        return out

    def traces(self, field: str | None = None) -> list[dict[str, Any]]:
        """Recorded traces (oldest first), optionally of one field; not drained."""
        return [t for t in self._traces if field is None or t["field"] == field]

    def drain_traces(self) -> list[dict[str, Any]]:
        """Traces recorded since the last drain (for the history), oldest first."""
        with self._lock:
            out = list(self._traces)
            self._traces.clear()
            return out

    # -- persistence -------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """JSON-safe copy of the data (not the traces) for persistence."""
        return {"version": SNAPSHOT_VERSION, "raw": self._raw, "state": self._state,
                "computed": self.computed, "inputs": self._inputs}

    @classmethod
    def from_snapshot(cls, engine: ExpressionEngine, computed: Sequence[ComputedFieldSpec],
                      snap: Mapping[str, Any], max_traces: int = 1000) -> StateTiers:
        """Restore a store without recomputing (values are what they were)."""
        store = cls(engine, computed, snap.get("inputs") or {}, max_traces)
        store._raw = dict(snap.get("raw") or {})
        store._state = dict(snap.get("state") or {})
        values = snap.get("computed") or {}
        store._computed = {n: values.get(n, MISSING) for n in store._names}
        return store
