"""A definition's computed fields as the state store sees them.

The store (`state/`) knows nothing of workflow files; this is the one translation from the
models of `state_schema.computed` to `ComputedFieldSpec`, used by every place that builds
a store or reads its dependency graph (the interpreter, catching up, `explain`, and the
secret analysis in `secrets.py`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aromcp_workflows.definition.workflow import WorkflowDefinition

if TYPE_CHECKING:  # the state package (and its JavaScript analysis) loads when a store is built
    from aromcp_workflows.state import ComputedFieldSpec


def computed_specs(definition: WorkflowDefinition) -> list[ComputedFieldSpec]:
    """The state store's view of a definition's computed fields."""
    from aromcp_workflows.state import ComputedFieldSpec

    return [
        ComputedFieldSpec(name=name, sources=spec.sources, source_is_list=isinstance(spec.from_, list),
                          transform=spec.transform, on_error=spec.on_error,
                          fallback=spec.fallback, validate=spec.validate_)
        for name, spec in definition.state_schema.computed.items()
    ]
