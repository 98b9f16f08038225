"""The instance layer's error, and the one place lower layers' failures become it.

Every failure a caller can act on reaches the MCP tools, the CLI and the web view as a
`ServiceError` whose text says what was wrong and what to do, and whose `kind` says what
sort of failure it is (`aromcp_workflows.errors`): each surface maps the kind to its own
answer.  A `hint` is the next step it points to, said by each surface in its own words
(`said`): an MCP tool for an agent, a command for someone at the command line.
`refusals()` is the single translator from the lower layers' exceptions (definition,
inputs, run, state, store) to it, used by the service and the instance layer alike, so
one failure reads the same, and is of the same kind, whichever road it took.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from typing import Literal

from aromcp_workflows.definition import DefinitionError
from aromcp_workflows.errors import ErrorKind, KindedError
from aromcp_workflows.interpreter import InputError, RunError, UserOwned
from aromcp_workflows.state import StateError
from aromcp_workflows.store import ConflictError, NotFoundError, StoreError

Surface = Literal["mcp", "cli"]


class Hint(Enum):
    """A next step an error points to, said by each surface in its own words: an MCP tool
    for an agent, a command for someone at the command line.  `{subject}` is the workflow
    or instance the error is about."""

    LIST_INSTANCES = ("workflow_status without an id lists the instances",
                      "`aromcp-workflows status` lists the instances")
    SHOW_INSTANCE = ("workflow_status shows the instance", "`aromcp-workflows status {subject}` shows it")
    DECLARED_INPUTS = ("workflow_get_info shows the declared inputs",
                       "`aromcp-workflows info {subject}` shows the declared inputs")
    RESUME_AS_IT_STANDS = ("workflow_resume without checkpoint_id resumes from where it stands",
                           "`aromcp-workflows run --resume {subject}` without --checkpoint goes on from where it "
                           "stands")
    FIELD_READS = ("workflow_state_dependencies lists it", "the field's `from` in the workflow file names it")

    def say(self, surface: Surface, subject: str = "") -> str:
        return self.value[surface == "cli"].format(subject=subject)


class ServiceError(KindedError):
    """A request the service refuses; the text says what was wrong and what to do, `kind`
    what sort of refusal it is (`invalid` unless the raise says otherwise).  A `hint` is
    said in the words of the surface that shows the error (`said`); plain `str` says it as
    the MCP tools do."""

    def __init__(self, message: str, kind: ErrorKind = "invalid", *, hint: Hint | None = None,
                 subject: str = "") -> None:
        super().__init__(message, kind=kind)
        self.message, self.hint, self.subject = message, hint, subject

    def said(self, surface: Surface) -> str:
        if self.hint is None:
            return self.message
        return f"{self.message.rstrip('.')}; {self.hint.say(surface, self.subject)}."

    def __str__(self) -> str:
        return self.said("mcp")


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
        raise ServiceError(str(exc), exc.kind, hint=Hint.DECLARED_INPUTS, subject=exc.workflow) from None
    except NotFoundError as exc:
        raise ServiceError(str(exc), exc.kind, hint=Hint.LIST_INSTANCES) from None
    except (DefinitionError, RunError, StateError, UserOwned) as exc:
        raise ServiceError(str(exc), exc.kind) from None
    except ConflictError as exc:
        raise ServiceError(f"the instance changed while this call worked on it ({exc}); retry the call",
                           "busy") from None
    except StoreError as exc:
        raise ServiceError(f"workflow store error: {exc}", exc.kind) from None
