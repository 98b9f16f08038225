"""Computed fields: their specs and the dependency graph between them and the state.

A field depends on its `from` paths and on every name its transform (or `validate`)
reads from the flattened view — found by free-name analysis, so no computed value is
ever stale.  The graph answers: in which order to compute (topological, cycles rejected
naming the cycle), which fields a set of changed paths touches directly (path prefixes
overlap: a change to raw.a.b affects readers of raw.a and of raw.a.b.c), and what lies
downstream of them.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from aromcp_workflows.expressions import ExpressionError, Reads, reads_of
from aromcp_workflows.state.errors import StateError
from aromcp_workflows.state.paths import Segment, key_tuple, overlaps, parse_path

OnError = Literal["propagate", "use_fallback", "ignore"]
TIER_NAMES = ("raw", "state", "computed", "inputs")


@dataclass(frozen=True)
class ComputedFieldSpec:
    """One computed field as the workflow declares it.

    `sources`: the `from` paths (tier-qualified like `raw.files`/`computed.x`, or
    flattened names).  `source_is_list`: `from` was written as a list, so `input` is the
    list of values; otherwise `input` is the single value.  `transform`: a JS expression
    or function body over `input` and state names.  `validate`: JS over `output`.
    """

    name: str
    sources: Sequence[str] = ()
    source_is_list: bool = False
    transform: str = "input"
    on_error: OnError = "propagate"
    fallback: Any = None
    validate: str | None = None


@dataclass(frozen=True)
class Ref:
    """Where a read comes from.

    kind: `path` (raw/state/inputs tier + segments), `flat` (a flattened name + segments),
    `computed` (a computed field + segments), `tier` (a whole tier: raw, state, inputs,
    computed), `flat_all` (the whole flattened view, for dynamic `this[...]`).
    """

    kind: Literal["path", "flat", "computed", "tier", "flat_all"]
    root: str = ""
    segments: tuple[Segment, ...] = ()


@dataclass
class FieldNode:
    spec: ComputedFieldSpec
    input_refs: list[Ref]
    reads: Reads
    validate_reads: Reads | None
    name_refs: dict[str, Any] = field(default_factory=dict)  # param name -> Ref | partial
    upstream: set[str] = field(default_factory=set)
    dependents: set[str] = field(default_factory=set)
    state_deps: list[tuple[str, ...]] = field(default_factory=list)  # tier-qualified keys
    reads_everything: bool = False


def source_ref(path: str, computed_names: set[str]) -> Ref:
    """Ref of one `from` path (tier-qualified or flattened)."""
    segments = parse_path(path)
    head, rest = str(segments[0]), tuple(segments[1:])
    if head in ("raw", "state", "inputs"):
        return Ref("path", head, rest) if rest else Ref("tier", head)
    if head == "computed":
        if not rest:
            return Ref("tier", "computed")
        return Ref("computed", str(rest[0]), rest[1:])
    if head in computed_names:
        return Ref("computed", head, rest)
    return Ref("flat", head, rest)


def name_ref(name: str, keys: frozenset[str] | None, computed_names: set[str]) -> Any:
    """How to build the value of one free name of a transform.

    Returns a Ref, or ("obj", [(key, Ref)]) for a partial object when only static keys
    of a tier (or `this`) are read.
    """
    if name in ("raw", "state", "inputs"):
        if keys is None:
            return Ref("tier", name)
        return ("obj", [(k, Ref("path", name, (k,))) for k in sorted(keys)])
    if name == "computed":
        if keys is None:
            return Ref("tier", "computed")
        return ("obj", [(k, Ref("computed", k)) for k in sorted(keys) if k in computed_names])
    if name == "this":
        if keys is None:
            return Ref("flat_all")
        return ("obj", [(k, name_ref(k, None, computed_names)) for k in sorted(keys)])
    if name in computed_names:
        return Ref("computed", name)
    return Ref("flat", name)


class ComputedGraph:
    """Static analysis of all computed fields of one workflow (built once)."""

    def __init__(self, specs: Sequence[ComputedFieldSpec]) -> None:
        self.nodes: dict[str, FieldNode] = {}
        names = [s.name for s in specs]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise StateError(f"computed field(s) defined twice: {', '.join(sorted(dupes))}")
        computed_names = set(names)
        for spec in specs:
            if spec.on_error not in ("propagate", "use_fallback", "ignore"):
                raise StateError(f"computed field {spec.name!r}: on_error must be propagate, "
                                 f"use_fallback or ignore, not {spec.on_error!r}",
                                 field=spec.name)
            try:
                reads = reads_of(spec.transform)
                vreads = reads_of(spec.validate) if spec.validate else None
            except ExpressionError as exc:
                raise StateError(f"computed field {spec.name!r}: {exc}", field=spec.name,
                                 cause=exc) from None
            try:
                input_refs = [source_ref(p, computed_names) for p in spec.sources]
            except StateError as exc:
                raise StateError(f"computed field {spec.name!r}: {exc}", field=spec.name
                                 ) from None
            node = FieldNode(spec, input_refs, reads, vreads)
            for r in (reads, vreads):
                if r is None:
                    continue
                for n in sorted(r.names):
                    if n in ("input", "output"):
                        continue
                    node.name_refs[n] = name_ref(n, r.keys_of(n), computed_names)
            self._link(node, computed_names)
            self.nodes[spec.name] = node
        for node in self.nodes.values():
            for up in node.upstream:
                self.nodes[up].dependents.add(node.spec.name)
        self.order = self._toposort()
        self.index = {n: i for i, n in enumerate(self.order)}
        self.names = frozenset(self.nodes)

    def _link(self, node: FieldNode, computed_names: set[str]) -> None:
        """Fill upstream fields and state dependency keys of a node."""
        refs: list[Ref] = list(node.input_refs)
        for value in node.name_refs.values():
            if isinstance(value, Ref):
                refs.append(value)
            else:
                refs.extend(v if isinstance(v, Ref) else Ref("flat_all") for _, v in value[1])
        for ref in refs:
            if ref.kind == "computed":
                if ref.root not in computed_names:
                    raise StateError(f"computed field {node.spec.name!r} reads computed."
                                     f"{ref.root}, which is not defined", field=node.spec.name)
                node.upstream.add(ref.root)
            elif ref.kind == "path":
                node.state_deps.append(key_tuple(ref.root, list(ref.segments)))
            elif ref.kind == "flat":
                node.state_deps.append(key_tuple("raw", [ref.root, *ref.segments]))
                node.state_deps.append(key_tuple("state", [ref.root, *ref.segments]))
            elif ref.kind == "tier":
                if ref.root == "computed":
                    node.upstream.update(computed_names - {node.spec.name})
                else:
                    node.state_deps.append((ref.root,))
            else:  # flat_all
                node.reads_everything = True
                node.upstream.update(computed_names - {node.spec.name})
                node.state_deps.extend([("raw",), ("state",)])

    def _toposort(self) -> list[str]:
        order: list[str] = []
        mark: dict[str, int] = {}  # 1 visiting, 2 done
        path: list[str] = []

        def visit(name: str) -> None:
            if mark.get(name) == 2:
                return
            if mark.get(name) == 1:
                cycle = path[path.index(name):] + [name]
                raise StateError("computed fields form a cycle (each reads the next): "
                                 + " -> ".join(cycle),
                                 field=name)
            mark[name] = 1
            path.append(name)
            for up in sorted(self.nodes[name].upstream):
                visit(up)
            path.pop()
            mark[name] = 2
            order.append(name)

        for name in self.nodes:
            visit(name)
        return order

    def affected(self, changed: list[tuple[str, ...]]) -> set[str]:
        """Fields that read any of the changed (tier-qualified) paths directly."""
        hit: set[str] = set()
        for name, node in self.nodes.items():
            for dep in node.state_deps:
                if any(overlaps(dep, c) for c in changed):
                    hit.add(name)
                    break
        return hit

    def downstream(self, names: set[str]) -> list[str]:
        """`names` and every field depending on them, in topological order."""
        seen = set(names)
        stack = list(names)
        while stack:
            for dep in self.nodes[stack.pop()].dependents:
                if dep not in seen:
                    seen.add(dep)
                    stack.append(dep)
        return sorted(seen, key=self.index.__getitem__)

    def reaching(self, marked: Callable[[tuple[str, ...]], bool], seeds: Collection[str] = ()) -> frozenset[str]:
        """The fields in `seeds`, and those that read — through `from`, a name their transform
        reads, or another field — a tier-qualified state path for which `marked` holds.

        Why (secrets, `definition/secrets.py`): a transform copies, reverses or slices what it
        reads, so its output is as secret as its inputs; the same dependencies that keep a
        value fresh say where it came from."""
        reached: set[str] = set()
        for name in self.order:  # topological: every upstream field is decided first
            node = self.nodes[name]
            if name in seeds or node.upstream & reached or any(marked(dep) for dep in node.state_deps):
                reached.add(name)
        return frozenset(reached)

    def all_upstream(self, name: str) -> list[str]:
        seen: set[str] = set()
        stack = [name]
        while stack:
            for up in self.nodes[stack.pop()].upstream:
                if up not in seen:
                    seen.add(up)
                    stack.append(up)
        return sorted(seen, key=self.index.__getitem__)


_GRAPHS: weakref.WeakValueDictionary[str, ComputedGraph] = weakref.WeakValueDictionary()
_GRAPHS_LOCK = threading.Lock()


def shared_graph(specs: Sequence[ComputedFieldSpec]) -> ComputedGraph:
    """The graph of these specs, built once and shared by every store with equal specs.

    A graph is never changed after it is built, and each instance of a workflow has the
    same computed fields: 10,000 waiting instances need one graph, not 10,000.  Held
    weakly (a graph lives as long as a store uses it), so many workflows do not pile up."""
    key = json.dumps([asdict(s) for s in specs], sort_keys=True, default=repr)
    with _GRAPHS_LOCK:
        graph = _GRAPHS.get(key)
    if graph is None:
        graph = ComputedGraph(specs)  # raises StateError for bad specs, before anything is kept
        with _GRAPHS_LOCK:
            graph = _GRAPHS.setdefault(key, graph)
    return graph
