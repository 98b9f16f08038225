"""How many sub-agents a `parallel_foreach` will start, decided before anything runs.

`items` is evaluated once, when the step starts.  Its value is known in advance only if
nothing the workflow does before that moment can change it: so we evaluate it against
the start state (inputs + default_state + computed fields) *and* check, with the same
free-name analysis the state store uses for dependencies, that no step that can run
earlier writes any path it reads.  Otherwise the estimate names the paths and the steps
that write them, which is what an author needs to know to read the plan.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from aromcp_workflows.expressions import analyse
from aromcp_workflows.state import StateTiers

LOOP_NAMES = frozenset({"item", "index", "loop", "task", "result", "error"})
_TEMPLATE = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
_FILTER = re.compile(r"\|\s*[A-Za-z_]\w*(\(.*\))?\s*$", re.DOTALL)


@dataclass(frozen=True)
class EstimatedWrite:
    """A state path some step writes (templates cut off: `raw.batch_status.{{ id }}` is
    `raw.batch_status`), and who writes it."""

    path: str
    step_id: str

    @property
    def segments(self) -> list[str]:
        return _segments(self.path.split("{{", 1)[0])


def estimate(items: Any, state: StateTiers | None, engine: Any, earlier: list[EstimatedWrite]) -> int | str:
    """A number of sub-agents, or a sentence starting with `unknown:` saying why not."""
    if isinstance(items, list):
        return len(items)
    if state is None:
        return f"unknown: {items} is evaluated at run time (no start state here)"
    reads = _reads(items, state)
    if reads is None:
        return f"unknown: {items} reads loop or task variables, known only at run time"
    written = _overlap(reads, earlier)
    if written:
        who = ", ".join(f"{w.path.split('{{', 1)[0].rstrip('.')} (by {w.step_id})" for w in written[:4])
        return f"unknown: {items} depends on state written before it runs: {who}"
    try:
        value = engine.render(items, state.scope({}), origin="explain_plan")
    except Exception as exc:
        return f"unknown: {items} cannot be evaluated before the run ({exc})"
    if isinstance(value, list):
        return len(value)
    return f"unknown: {items} is not a list before the run (it is {type(value).__name__})"


def _reads(items: Any, state: StateTiers) -> list[list[str]] | None:
    """Tier-qualified paths (as segments) the items template reads, transitively through
    computed fields; None when it reads loop/task variables."""
    if not isinstance(items, str):
        return []
    sources = [_FILTER.sub("", m.group(1)).strip() for m in _TEMPLATE.finditer(items)] or [items]
    out: list[list[str]] = []
    for source in sources:
        reads = analyse(source)
        if reads.names & LOOP_NAMES:
            return None
        for name in reads.names:
            out.extend(_paths_of(name, reads.keys_of(name), state))
    return out


def _paths_of(name: str, keys: frozenset[str] | None, state: StateTiers) -> list[list[str]]:
    if name == "inputs":
        return []
    if name == "this":  # `this.x` is the flattened `x`
        if keys is None:
            return [["raw"], ["state"]]
        return [p for k in keys for p in _paths_of(k, None, state)]
    if name in ("raw", "state"):
        return [[name, k] for k in keys] if keys is not None else [[name]]
    if name == "computed":
        fields = keys if keys is not None else state.graph.nodes
        return [p for f in fields if f in state.graph.nodes for p in _computed_deps(f, state)]
    if name in state.graph.nodes:
        return _computed_deps(name, state)
    return [["raw", name], ["state", name]]  # a flattened name may live in either tier


def _computed_deps(field: str, state: StateTiers) -> list[list[str]]:
    deps = state.dependencies(field)["all_deps"]
    out = []
    for dep in deps:
        if dep == "*":
            return [["raw"], ["state"]]
        segments = _segments(dep)
        if segments and segments[0] in ("raw", "state"):
            out.append(segments)
    return out


def _overlap(reads: list[list[str]], writes: list[EstimatedWrite]) -> list[EstimatedWrite]:
    hits = []
    for write in writes:
        target = write.segments
        if any(_prefix(read, target) or _prefix(target, read) for read in reads) and write not in hits:
            hits.append(write)
    return hits


def _prefix(a: list[str], b: list[str]) -> bool:
    return len(a) <= len(b) and b[: len(a)] == a


def _segments(path: str) -> list[str]:
    return [s for s in re.split(r"[.\[\]]+", path.strip().rstrip(".")) if s]
