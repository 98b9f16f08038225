"""The instance layer's error, and the one place lower layers' failures become it.

Every failure a caller can act on reaches the MCP tools, the CLI and the web view as a
`ServiceError` whose text says what was wrong and what to do, and whose `kind` says what
sort of failure it is (`aromcp_workflows.errors`): each surface maps the kind to its own
answer.  `refusals()` is the single translator from the lower layers' exceptions
(definition, inputs, run, state, store) to it, used by the service and the instance layer
alike, so one failure reads the same, and is of the same kind, whichever road it took.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from aromcp_workflows.definition import DefinitionError
from aromcp_workflows.errors import ErrorKind, KindedError
from aromcp_workflows.interpreter import InputError, RunError, UserOwned
from aromcp_workflows.state import StateError
from aromcp_workflows.store import ConflictError, NotFoundError, StoreError


class ServiceError(KindedError):
    """A request the service refuses; the text says what was wrong and what to do, `kind`
    what sort of refusal it is (`invalid` unless the raise says otherwise)."""

    def __init__(self, message: str, kind: ErrorKind = "invalid") -> None:
        super().__init__(message, kind=kind)


@contextmanager
def refusals() -> Iterator[None]:
    """Turn every expected failure of the block into a `ServiceError` of the same kind, with
    an actionable text.

    A `ConflictError` that reaches here lost a race the instance layer does not retry (a
    checkpoint, a roll-back): the caller is told to retry.  Anything unexpected passes
    through untouched, to be reported as an internal error by the caller's edge."""
    try:
        yield
    except ServiceError:
        raise
    except InputError as exc:
        raise ServiceError(f"{exc}. workflow_get_info shows the declared inputs.", exc.kind) from None
    except (DefinitionError, RunError, StateError, NotFoundError, UserOwned) as exc:
        raise ServiceError(str(exc), exc.kind) from None
    except ConflictError as exc:
        raise ServiceError(f"the instance changed while this call worked on it ({exc}); retry the call",
                           "busy") from None
    except StoreError as exc:
        raise ServiceError(f"workflow store error: {exc}", exc.kind) from None
