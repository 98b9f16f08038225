"""The keys each step type accepts in this project's language, read from its models.

Read from the pydantic models themselves (field names and accepted aliases), so the
importer's idea of "a key this project knows" can never drift from the validator's.
"""

from __future__ import annotations

import sys
from functools import cache
from typing import Any, get_args

from pydantic import AliasChoices

from aromcp_workflows.definition import STEP_TYPES, Step

OUR_STEP_TYPES: tuple[str, ...] = STEP_TYPES
_EXTRA_ALIASES = {"mcp_call": {"method", "params"}}


@cache
def _models() -> dict[str, Any]:
    union = get_args(Step)[0]
    out: dict[str, Any] = {}
    for model in get_args(union):
        kind = get_args(model.model_fields["type"].annotation)[0]
        out[kind] = model
    return out


@cache
def allowed_keys(step_type: str) -> frozenset[str]:
    """Every key a step of `step_type` may carry here (empty for an unknown type)."""
    model = _models().get(step_type)
    if model is None:
        return frozenset()
    keys: set[str] = set(_EXTRA_ALIASES.get(step_type, set()))
    for name, info in model.model_fields.items():
        keys.add(info.alias or name.rstrip("_"))
        if isinstance(info.validation_alias, AliasChoices):
            keys.update(str(choice) for choice in info.validation_alias.choices)
        elif isinstance(info.validation_alias, str):
            keys.add(info.validation_alias)
    return frozenset(keys)


@cache
def count_bounds(step_type: str, field: str) -> tuple[int, int]:
    """The whole numbers this project's validator accepts for a step's count field
    (`max_attempts`, `retry_count`), read from the model so a translated count that the
    validator would refuse is refused first, at the line of the AroMCP key it came from."""
    low, high = 0, sys.maxsize
    for rule in _models()[step_type].model_fields[field].metadata:
        low = getattr(rule, "ge", low)
        high = getattr(rule, "le", high)
    return low, high
