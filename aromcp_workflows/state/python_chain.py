"""Recompute in Python when every field that may run is a simple transform.

A loop that increments a counter recomputes the fields downstream of it on every
iteration; when those are simple expressions (`inputs.n - input`, `!input[1] &&
input[0] < inputs.max`) Python computes them with exactly V8's result
(`expressions.simple_eval`), and the V8 crossing — most of what an iteration cost — is
not paid.  The rules are the V8 chain's (`expressions/prelude.js`, `chain`): topological
order, a field runs only when dirty, a changed value makes its dependents dirty, a value
whose JSON text is the same as before is unchanged.

Whenever Python cannot be sure — a transform that is a function body or outside the
subset, a `validate`, a result that is an object (JavaScript orders integer-like keys
first), an operand V8 would coerce, a transform that would throw — `python_chain`
returns None and the whole chain runs in V8 as before: nothing of the Python attempt is
kept.
"""

from __future__ import annotations

from typing import Any

from aromcp_workflows.expressions import MISSING, ChainOutcome, ExpressionEngine, NeedsV8, evaluate, is_number
from aromcp_workflows.state.computed import ComputedGraph, FieldNode, Ref
from aromcp_workflows.state.paths import get_in


class _Fallback(Exception):
    """This chain goes to V8."""


def python_chain(engine: ExpressionEngine, graph: ComputedGraph, order: list[str], view: Any,
                 direct: set[str]) -> list[ChainOutcome] | None:
    """Outcomes of the chain over `order` (as `ExpressionEngine.run_chain` gives them), or
    None when V8 must run it."""
    nodes = [graph.nodes[name] for name in order]
    trees = [None if node.spec.validate else engine.simple(node.spec.transform) for node in nodes]
    if any(tree is None for tree in trees):
        return None
    current = {name: view.computed.get(name, MISSING) for name in graph.order}
    dirty = {name for name in order if name in direct}
    outcomes: list[ChainOutcome] = []
    try:
        for name, node, tree in zip(order, nodes, trees, strict=True):
            if name not in dirty:
                outcomes.append(ChainOutcome("skipped"))
                continue
            scope = _scope(node, view, graph, current)
            value = _plain(evaluate(tree, scope))  # type: ignore[arg-type]  # None ruled out above
            if _text_key(value) == _text_key(current[name]):
                outcomes.append(ChainOutcome("unchanged"))
                continue
            current[name] = value
            dirty.update(node.dependents)
            outcomes.append(ChainOutcome("changed", value))
    except (NeedsV8, _Fallback):
        return None
    engine.python_evaluations += sum(o.status != "skipped" for o in outcomes)
    return outcomes


def _scope(node: FieldNode, view: Any, graph: ComputedGraph, current: dict[str, Any]) -> dict[str, Any]:
    """The names the transform reads, and `input`, with the values V8 would be given."""
    scope = {name: _value(ref, view, graph, current) for name, ref in node.name_refs.items()}
    values = [_value(ref, view, graph, current) for ref in node.input_refs]
    if node.input_refs or node.spec.source_is_list:
        scope["input"] = values if node.spec.source_is_list or len(values) != 1 else values[0]
    return scope


def _value(ref: Any, view: Any, graph: ComputedGraph, current: dict[str, Any]) -> Any:
    """What a read resolves to; computed values are this chain's current ones."""
    if isinstance(ref, tuple):  # a partial object of some keys
        return {key: value for key, part in ref[1]
                if (value := _value(part, view, graph, current)) is not MISSING}
    assert isinstance(ref, Ref)
    names = graph.nodes.keys()
    if ref.kind == "computed" or (ref.kind == "flat" and ref.root in names):
        return _within(current.get(ref.root, MISSING), ref.segments)
    if ref.kind == "path":
        return get_in(view.tier(ref.root), list(ref.segments))
    if ref.kind == "flat":
        return get_in({ref.root: view.flat(ref.root, names)}, [ref.root, *ref.segments])
    raise _Fallback  # a whole tier or the whole flattened view: rare, and V8 builds it


def _within(value: Any, segments: tuple[Any, ...]) -> Any:
    """A path into a computed value, where JavaScript's reading is certain (containers)."""
    for segment in segments:
        if isinstance(value, dict):
            value = value.get(str(segment), MISSING)
        elif isinstance(value, list) and isinstance(segment, int) and segment >= 0:
            value = value[segment] if segment < len(value) else MISSING
        else:
            raise _Fallback
    return value


def _plain(value: Any) -> Any:
    """The value when its JSON text is certain: a primitive, or a list of them."""
    if isinstance(value, list):
        if any(item is MISSING or isinstance(item, (dict, list)) for item in value):
            raise _Fallback
        return value
    if isinstance(value, dict):
        raise _Fallback
    return value


def _text_key(value: Any) -> Any:
    """Equal exactly when JSON.stringify gives the same text (1 and 1.0 alike, true and 1 not)."""
    if isinstance(value, list):
        return ("list", tuple(_text_key(v) for v in value))
    if isinstance(value, dict):
        return ("object",)  # only ever a current value: a new one that is an object goes to V8
    if is_number(value):
        return ("number", float(value))
    return (type(value).__name__, value)
