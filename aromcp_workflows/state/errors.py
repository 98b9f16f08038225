"""StateError: an update or recompute was refused; the store is left unchanged."""

from __future__ import annotations

from typing import Any

from aromcp_workflows.errors import KindedError


class StateError(KindedError):
    """A refused update (bad path, read-only tier, wrong type) or a failed computed field.

    `path` names the offending update path, `field` the computed field, `cause` the
    underlying ExpressionError when a transform failed under `on_error: propagate`.
    """

    def __init__(self, message: str, *, path: str | None = None, field: str | None = None,
                 cause: Any = None) -> None:
        super().__init__(message)
        self.path = path
        self.field = field
        self.cause = cause
