"""What kind of failure an error is: one word every surface maps to its own answer.

A domain error (the store's, the state's, a definition's, the service's) says what it is
with `kind`; the MCP tools, the command line and the web view each map the kind to what
they answer (an MCP error text, an exit code, an HTTP status), and none reads an error's
wording to decide.  Floor 0: every layer may raise a kinded error.

The kinds:

- `invalid`: the request or its input is wrong (a bad argument, input, path or workflow);
  sending it again as it is fails again.
- `not_found`: what it names does not exist (an instance, a workflow, a checkpoint, a step).
- `conflict`: it does not fit what the instance is now (retry a running instance, fork
  past its end, a key used with another request).
- `refused`: a rule forbids it whoever asks again (a user-owned value the agent may not write).
- `not_saved`: the store could not keep the change; nothing of it was kept.
- `busy`: the instance is being changed so often by others that the call gave up; nothing
  was changed, send it again.
- `unavailable`: something the server needs is away (the store, a V8 process); nothing
  was changed, send it again later.
"""

from __future__ import annotations

from typing import Literal, get_args

ErrorKind = Literal["invalid", "not_found", "conflict", "refused", "not_saved", "busy", "unavailable"]
KINDS: tuple[ErrorKind, ...] = get_args(ErrorKind)
RETRYABLE: frozenset[ErrorKind] = frozenset({"not_saved", "busy", "unavailable"})  # nothing changed: send it again


class KindedError(Exception):
    """An error that says what kind of failure it is (`kind`); the interface of every
    domain error.  A class sets its usual kind; one raise may name another."""

    kind: ErrorKind = "invalid"

    def __init__(self, *args: object, kind: ErrorKind | None = None) -> None:
        super().__init__(*args)
        if kind is not None:
            self.kind = kind


__all__ = ["KINDS", "RETRYABLE", "ErrorKind", "KindedError"]
