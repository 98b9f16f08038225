"""Which computed fields a transform reads, without running it.

Validation must find the cycles the state store will refuse at start, so it asks the
same free-name analysis the store uses (`expressions.reads_of`) and applies the same
rules: a free name that is a computed field is a dependency (even when the transform
also declares it locally: the run-time analysis counts generously, so that no value is
ever stale), `this.x`/`computed.x` read `x`, and a bare `this`/`computed` reads them all.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass


@dataclass(frozen=True)
class TransformReads:
    """The computed fields a transform reads, or why its source cannot be analysed."""

    fields: frozenset[str]
    error: str | None = None


def computed_reads(source: str, computed: Collection[str]) -> TransformReads:
    """The computed fields `source` reads, by the rules of the state store's graph."""
    from aromcp_workflows.expressions import ExpressionError, reads_of

    try:
        reads = reads_of(source)
    except ExpressionError as exc:
        return TransformReads(frozenset(), str(exc.js_message or exc))
    found: set[str] = set()
    for name in reads.names:
        if name in ("this", "computed"):
            keys = reads.keys_of(name)
            found |= set(computed) if keys is None else {k for k in keys if k in computed}
        elif name in computed:
            found.add(name)
    return TransformReads(frozenset(found))


def js_free_names(source: str) -> set[str]:
    """The state names a transform really reads (declared locals, property names, object
    keys, strings and JS globals left out; `this.x` counts as `x`), from the same
    analysis the state store uses.  For messages: dependencies use `computed_reads`."""
    from aromcp_workflows.expressions import reads_of

    reads = reads_of(source)
    names = set(reads.likely_free) - {"this"}
    return names | set(reads.keys_of("this") or ())
