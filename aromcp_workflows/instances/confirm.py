"""A reply waits for its commit, and only the reply does: saves confirmed on the way out.

A tool call's last commit (the one that hands out the next step) need not be waited for
inside the call: the reply is built and encoded while the statement travels to
PostgreSQL and commits, and the reply is let out only once the commit is confirmed.
The MCP layer opens a `Confirmations` list for each call (`collecting`); the instance
layer adds to it the saves it sent without waiting (`InstanceRegistry.transact` with
`defer`, on a store that `SavesLater`); the MCP layer confirms them all
(`confirm`) before the reply leaves.  Nothing acknowledged can be lost: no reply is sent
before its commit, and a commit that failed turns the reply into a rerun of the call
(`CommitLost`, the change was not kept) or an error.  Outside a tool call (the CLI, the
runner, tests) nothing collects, and every save is waited for where it is made.

A later call on the same instance confirms a pending save before it looks at the instance
(`InstanceRegistry._current`), so no call ever works on a change that was not committed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the store package is not imported before the first call needs it
    from aromcp_workflows.store import SentSave


def not_saved(workflow_id: str | None, exc: Exception) -> str:
    """What a call says when the store could not save its change (a deferred save here, a
    save waited for in the instance layer): nothing of it was kept."""
    return (f"workflow {workflow_id or '?'}: the store could not save this change ({exc}); nothing of this call "
            "was kept — fix the store (disk space, permissions, connection) and retry the call")


class CommitLost(Exception):
    """A deferred save lost to another writer: nothing of the call was kept; run it again."""


class CommitFailed(Exception):
    """A deferred save failed (the text says why and what to do): the call's reply is this error."""


Confirmations = list["SentSave"]
_COLLECTING: ContextVar[Confirmations | None] = ContextVar("aromcp_pending_commits", default=None)


@contextmanager
def collecting(defer: bool = True) -> Iterator[Confirmations]:
    """The saves the calls made in this block (and the worker threads they start) sent
    without waiting for them: each must be confirmed before their reply leaves.  With
    `defer=False` every save is waited for where it is made (a call run again after its
    deferred save lost: its conflicts are then retried inside, with back-off)."""
    pending: Confirmations = []
    token = _COLLECTING.set(pending if defer else None)
    try:
        yield pending
    finally:
        _COLLECTING.reset(token)


def may_defer() -> bool:
    """Whether someone will confirm a save sent now before the reply leaves."""
    return _COLLECTING.get() is not None


def add(pending: SentSave) -> None:
    found = _COLLECTING.get()
    assert found is not None, "a save was deferred outside a tool call: nobody would confirm it"
    found.append(pending)


def confirm_save(pending: SentSave, workflow_id: str = "") -> None:
    """Wait for one deferred save; what its failure means for the call that made it.  (The
    store is imported here, not above: the MCP layer imports this module at start-up.)"""
    from aromcp_workflows.store import ConflictError, NotFoundError, OutcomeUnknownError, StoreError

    try:
        pending.result()
    except ConflictError as exc:
        raise CommitLost(str(exc)) from None
    except (NotFoundError, OutcomeUnknownError) as exc:
        raise CommitFailed(f"workflow {workflow_id or '?'}: {exc}") from None
    except StoreError as exc:
        raise CommitFailed(not_saved(workflow_id, exc)) from None


def confirmed_quietly(pending: Confirmations) -> None:
    """Wait for saves whose call failed anyway (their connections go back to the pool)."""
    for item in pending:
        try:
            item.result()
        except Exception:  # the call is answered with its own error already
            pass
