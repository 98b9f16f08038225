"""`aromcp-workflows retry ID` and `fork ID`: repairing a run from the command line.

Argument parsing and output only; the work is `WorkflowService.retry` and `.fork`.  Exit
status: 0 done, 1 refused (unknown instance or step, a point that cannot be rebuilt, an
edit the state refuses: one line on stderr, nothing written), 2 usage.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from aromcp_workflows.cli.common import usage_error


def register_repair_commands(commands: Any) -> None:
    retry = commands.add_parser(
        "retry", help="go on with a failed instance from the step that failed",
        description="Put a failed instance back at the step that failed, with the state as it was before "
                    "that step (what the step wrote before failing, and the error handling after it, are "
                    "undone). The history records the retry; `run --resume ID` then drives it.")
    _instance_arguments(retry)
    retry.set_defaults(handler=cmd_retry)

    fork = commands.add_parser(
        "fork", help="start a new instance from a point of another, with state edits",
        description="Make a new instance from the state of another at a step (as `debug` lists it), a "
                    "version or a checkpoint (default: as it stands), with raw/state edits applied and the "
                    "computed fields recomputed. The original is not changed.")
    _instance_arguments(fork)
    point = fork.add_mutually_exclusive_group()
    point.add_argument("--at", metavar="STEP_ID", help="the step, as handed out (fix_batch_1.fix_files.apply#2)")
    point.add_argument("--version", type=int, metavar="N", help="the instance as committed at version N")
    point.add_argument("--checkpoint", metavar="CP", help="a checkpoint id (cp-3)")
    fork.add_argument("--set", action="append", default=[], metavar="PATH=JSON", dest="edits",
                      help="an edit (repeatable): raw.x or state.x set to a JSON value, e.g. --set 'raw.note=\"hi\"'")
    fork.set_defaults(handler=cmd_fork)

    answer = commands.add_parser(
        "answer", help="answer the question an instance waits on, as its user",
        description="Answer a user_input question an instance is waiting on, as the user would in a form: the "
                    "answer is checked against the question's choices and validation, and a wrong one changes "
                    "nothing (exit 1). The agent's next workflow_get_next_step goes past the question.",
        epilog="exit status: 0 answered; 1 not a valid answer, no question waiting (or that one answered "
               "already), or no such instance (one line says which).")
    _instance_arguments(answer)
    answer.add_argument("--step", metavar="STEP_ID", help="the question, when the instance waits on several")
    answer.add_argument("value", help="the answer (as typed in the form; a choice as it is listed)")
    answer.set_defaults(handler=cmd_answer)


def _instance_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workflow_id")
    parser.add_argument("--store", metavar="PATH", help="SQLite store file or postgresql:// URL")
    parser.add_argument("--json", action="store_true", help="print JSON")


def parse_edits(pairs: list[str]) -> dict[str, Any]:
    """`PATH=JSON` pairs as {path: value}; a pair that is not one is a usage error (exit 2)."""
    edits: dict[str, Any] = {}
    for pair in pairs:
        path, sep, text = pair.partition("=")
        if not sep or not path.strip():
            raise SystemExit(usage_error(f"--set {pair!r} is not PATH=JSON (for example --set raw.count=3 or "
                                         "--set 'raw.note=\"text\"')"))
        try:
            edits[path.strip()] = _stored_json(text)
        except json.JSONDecodeError as exc:
            raise SystemExit(usage_error(f"--set {path.strip()}: {text!r} is not JSON ({exc.msg}); a text value "
                                         f"needs its quotes: --set '{path.strip()}=\"{text}\"'")) from None
        except ValueError as exc:
            raise SystemExit(usage_error(f"--set {path.strip()}: {exc}")) from None
    return edits


def _stored_json(text: str) -> Any:
    """A JSON value the store can keep; ValueError (`JSONDecodeError` for bad syntax) saying
    why not: NaN and infinities are not JSON, nesting has a depth no reader follows, and
    half of a surrogate pair is not text."""
    def finite(number: str) -> float:
        value = float(number)
        if math.isinf(value):
            raise ValueError(f"{number} is beyond the largest number JSON can hold")
        return value

    def refused(constant: str) -> Any:
        raise ValueError(f"{constant} is not a JSON value (give a number, or a text in quotes)")

    try:
        value = json.loads(text, parse_float=finite, parse_constant=refused)
    except RecursionError:
        raise ValueError("the value is nested too deeply to store") from None
    from aromcp_workflows.expressions import not_text  # here: the package brings the engine

    problem = not_text(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def cmd_retry(args: argparse.Namespace) -> int:
    from aromcp_workflows.cli.common import call, print_json, service_for

    done = call(lambda: service_for(args).retry(args.workflow_id))
    if args.json:
        print_json(done)
        return 0
    restored = (f"the state of version {done.restored_version}, when it was handed out"
                if done.restored_version is not None else "the state it failed with, before error handling")
    print(f"{done.workflow_id}: step {done.step_id} runs again, with {restored}")
    print(f"  go on with: aromcp-workflows run --resume {done.workflow_id}{_store(args)}")
    return 0


def cmd_fork(args: argparse.Namespace) -> int:
    from aromcp_workflows.cli.common import call, print_json, service_for

    edits = parse_edits(args.edits)
    made = call(lambda: service_for(args).fork(args.workflow_id, at=args.at, version=args.version,
                                             checkpoint_id=args.checkpoint, edits=edits, by="person"))
    if args.json:
        print_json(made)
        return 0
    origin = made.forked_from
    where = (f"step {origin.step_id}, " if origin.step_id else "") + (
        f"checkpoint {origin.checkpoint_id}, " if origin.checkpoint_id else "") + f"version {origin.version}"
    edited = f"; edited {', '.join(origin.edits)}" if origin.edits else ""
    print(f"{made.workflow_id}: forked from {origin.workflow_id} at {where}{edited}")
    print(f"  go on with: aromcp-workflows run --resume {made.workflow_id}{_store(args)}")
    return 0


def cmd_answer(args: argparse.Namespace) -> int:
    """The person answers: the same answer a form brings back, checked the same way."""
    from aromcp_workflows.cli.common import call, print_json, service_for

    done = call(lambda: service_for(args).answer(args.workflow_id, args.value, args.step))
    if args.json:
        print_json(done)
        return 0
    print(f"{done.workflow_id}: {done.question!r} answered {args.value!r} (step {done.step_id}); the agent's next "
          "call goes on from there")
    return 0


def _store(args: argparse.Namespace) -> str:
    return f" --store {args.store}" if args.store else ""
