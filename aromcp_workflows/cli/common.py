"""What the CLI's commands share: the service they call, how a refusal ends a command, JSON
output, `--input` pairs, and a reader that stops early."""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from aromcp_workflows.app.results import Result
    from aromcp_workflows.app.service import WorkflowService

T = TypeVar("T")


def service_for(args: argparse.Namespace) -> WorkflowService:
    """The service of the CLI's own commands: the local user reads their own store, so an
    instance id of any project is theirs to look at (`status` without an id lists this
    project's)."""
    from aromcp_workflows.app.service import WorkflowService

    return WorkflowService(project_dir=args.project_dir, store_path=getattr(args, "store", None), all_projects=True)


def print_json(result: Result) -> None:
    print(json.dumps(result.model_dump(mode="json"), indent=2))


def parse_inputs(pairs: list[str]) -> dict[str, Any]:
    """`k=v` pairs as text (the runner's rule: the server converts to the declared type)."""
    from aromcp_workflows.runner.run import UsageError
    from aromcp_workflows.runner.run import parse_inputs as parse

    try:
        return parse(pairs)
    except UsageError as exc:
        raise SystemExit(f"error: {exc}") from None


def pipe_safe(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """`aromcp-workflows explain X | head` is normal use: a reader that stops early is not
    an error worth a traceback."""
    @functools.wraps(handler)
    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
            return 0
    return run


def said(exc: BaseException) -> str:
    """An error as the command line says it: a hint names a command (`aromcp-workflows
    status`), not the MCP tool an agent would call."""
    from aromcp_workflows.app.errors import ServiceError

    return exc.said("cli") if isinstance(exc, ServiceError) else str(exc)


def call(action: Callable[[], T]) -> T:
    """Run a service call; a user-facing error becomes `error: ...` and exit status 1."""
    from aromcp_workflows.app.errors import ServiceError
    from aromcp_workflows.interpreter import InputError

    try:
        return action()
    except (ServiceError, InputError) as exc:
        print(f"error: {said(exc)}", file=sys.stderr)
        raise SystemExit(1) from None
