"""What the CLI's commands share: the service they call, how a refusal or a usage error ends
a command, JSON output, `--input` pairs, and a reader that stops early."""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from aromcp_workflows.errors import ErrorKind, KindedError

if TYPE_CHECKING:
    from aromcp_workflows.app import Result, WorkflowService

T = TypeVar("T")
# A command that was understood and refused exits 1, whatever the kind of refusal (scripts
# of earlier releases rely on it); 2 stays argparse's, for a command line that does not parse.
EXIT_CODES: dict[ErrorKind, int] = {
    "invalid": 1, "not_found": 1, "conflict": 1, "refused": 1, "not_saved": 1, "busy": 1, "unavailable": 1,
}


def service_for(args: argparse.Namespace) -> WorkflowService:
    """The service of the CLI's own commands: the local user reads their own store, so an
    instance id of any project is theirs to look at (`status` without an id lists this
    project's)."""
    from aromcp_workflows.app import WorkflowService

    return WorkflowService(project_dir=args.project_dir, store_path=getattr(args, "store", None), all_projects=True)


def print_json(result: Result) -> None:
    print(json.dumps(result.model_dump(mode="json"), indent=2))


def parse_inputs(pairs: list[str]) -> dict[str, Any]:
    """`k=v` pairs as text (the runner's rule: the server converts to the declared type)."""
    from aromcp_workflows.runner import UsageError
    from aromcp_workflows.runner import parse_inputs as parse

    try:
        return parse(pairs)
    except UsageError as exc:
        raise SystemExit(usage_error(str(exc))) from None


def usage_error(message: str) -> int:
    """Say a command line that cannot be followed (`--input noequals`) on stderr, as one line;
    its exit status, 2, as argparse's own and `run`'s for the same mistake."""
    print(f"error: {message}", file=sys.stderr)
    return 2


def pipe_safe(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """`aromcp-workflows explain X | head` is normal use: a reader that stops early is not
    an error worth a traceback."""
    @functools.wraps(handler)
    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except BrokenPipeError:
            discard_stdout()
            return 0
    return run


def discard_stdout() -> None:
    """Point stdout at /dev/null once its reader is gone: what is still buffered, and the
    flush at exit, go nowhere instead of raising a second error."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def said(exc: BaseException) -> str:
    """An error as the command line says it: a hint names a command (`aromcp-workflows
    status`), not the MCP tool an agent would call."""
    from aromcp_workflows.app import ServiceError

    return exc.said("cli") if isinstance(exc, ServiceError) else str(exc)


def call(action: Callable[[], T]) -> T:
    """Run a service call; a refusal becomes `error: ...` and its kind's exit status."""
    try:
        return action()
    except KindedError as exc:
        raise SystemExit(refused(exc)) from None


def refused(exc: KindedError) -> int:
    """Say a refusal on stderr, as one line in the command line's words; its exit status (`EXIT_CODES`)."""
    print(f"error: {said(exc)}", file=sys.stderr)
    return EXIT_CODES[exc.kind]
