"""The `test` subcommand: run workflow test files offline, or record a case from a run.

Exit codes: 0 every case passed (and coverage reached `--coverage-min`); 1 a case failed
(or coverage is under the minimum, or a recorded case does not pass); 2 usage error or
an invalid test file (each problem as `file:line:column: message`).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aromcp_workflows.testing.report import ReportStream

HELP = "run workflow test files (<workflow>.test.yaml) offline, with branch coverage"
DESCRIPTION = (
    "Run the cases of workflow test files in process (no MCP, no LLM, no process per case): each case "
    "starts the workflow with its inputs, answers its agent steps from `answers`, answers its shell "
    "commands from `shell` stubs (or runs them in a throwaway folder holding the case's `project` "
    "files), and checks the final status, state, messages and error. With no argument, every test "
    "file under the project's .aromcp/workflows/. The format: docs/testing.md.")
EPILOG = ("exit status: 0 all cases passed; 1 a case failed, coverage is under --coverage-min, or a "
          "recorded case does not pass; 2 usage error or an invalid test file (file:line:column: message).")


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `test` to the CLI's subcommands (called from cli/entry.py)."""
    parser = commands.add_parser("test", help=HELP, description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("targets", nargs="*", metavar="NAME|FILE",
                        help="a test file, a folder of them, a workflow file or a workflow name")
    parser.add_argument("-k", dest="keyword", metavar="PATTERN",
                        help="only cases whose file::name holds PATTERN (and, or, not as in pytest)")
    parser.add_argument("--coverage", action="store_true", help="report branches covered, per workflow")
    parser.add_argument("--coverage-min", type=_percentage, metavar="PCT",
                        help="fail when a workflow's branch coverage is under PCT percent, 0 to 100 (implies "
                             "--coverage)")
    parser.add_argument("--junit", metavar="FILE", help="also write JUnit XML to FILE")
    parser.add_argument("--record", metavar="ID", help="write a case from this finished instance (with --out)")
    parser.add_argument("--out", metavar="FILE", help="with --record: the test file to add the case to")
    parser.add_argument("--name", help="with --record: the case's name (default: recorded <ID>)")
    parser.add_argument("--store", metavar="PATH|URL", help="with --record: the store holding the instance")
    parser.set_defaults(handler=cmd_test)


def _percentage(text: str) -> float:
    """`--coverage-min`'s value: 150 could never be reached and -5 never missed, so either is
    a mistake said at once (argparse: a usage error, exit 2), not a run that cannot mean it."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value <= 100:  # NaN too
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage from 0 to 100")
    return value


def cmd_test(args: argparse.Namespace) -> int:
    from aromcp_workflows.testing.report import ReportStream

    out = ReportStream(sys.stdout)
    try:
        return _record(args, out) if args.record or args.out else _test(args, out)
    finally:
        out.flush()  # here, where a reader gone is caught: at the CLI's own flush it would make `test` exit 0


def _test(args: argparse.Namespace, out: ReportStream) -> int:
    """Run the test files the arguments name (all of the project's without any)."""
    from aromcp_workflows.testing.session import TestCommandError, TestSession, find_test_files

    try:
        paths = find_test_files(args.targets, args.project_dir)
    except TestCommandError as exc:
        print(f"test: {exc}", file=sys.stderr)
        return 2
    if not paths:
        print("test: no test files found under .aromcp/workflows/; write <workflow>.test.yaml beside a "
              "workflow (docs/testing.md)", file=sys.stderr)
        return 2
    session = TestSession(args.project_dir, coverage=args.coverage or args.coverage_min is not None)
    try:
        return _run(session, paths, args, out)
    finally:
        session.close()


def _run(session: Any, paths: list[Path], args: argparse.Namespace, out: ReportStream) -> int:
    from aromcp_workflows.testing import report
    from aromcp_workflows.testing.session import load_all

    started = time.perf_counter()
    files, invalid = load_all(session, paths)
    for error in invalid:  # as `validate` prints problems: file:line:column: message
        report.print_lines([f"{report.shown_path(p.file or '')}:{p.line or 1}:{p.column or 1}: {p.message}"
                            for p in error.problems], out)
    outcomes = []
    for test_file in files:
        for case in test_file.cases:
            if args.keyword and not report.keyword_matches(args.keyword, case.node_id):
                continue
            outcome = session.run(test_file, case)
            outcomes.append(outcome)
            out.write(report.case_line(outcome) + "\n")
            out.flush()
    failed = [o for o in outcomes if not o.passed]
    if failed:
        report.print_lines([" FAILURES ".center(report.WIDTH, "=")], out)
        for outcome in failed:
            report.print_lines(report.failure_text(outcome), out)
    seconds = time.perf_counter() - started
    report.print_lines([report.summary_line(outcomes, len(invalid), seconds)], out)
    if args.junit:
        report.write_junit(Path(args.junit), outcomes, seconds)
    under = _coverage(session, args, out)
    if invalid:
        return 2
    return 1 if failed or under else 0


def _coverage(session: Any, args: argparse.Namespace, out: ReportStream) -> bool:
    """Print the coverage report; True when a workflow is under `--coverage-min`."""
    from aromcp_workflows.testing import report

    if not session.coverage:
        return False
    totals = session.coverage_totals()
    report.print_lines(report.coverage_lines(totals), out)
    if args.coverage_min is None:
        return False
    under = [t for t in totals if t.percent < args.coverage_min]
    for total in under:
        out.write(f"coverage of {total.workflow} is {total.percent:.1f}%, under --coverage-min "
                  f"{args.coverage_min:g}%\n")
    return bool(under)


def _record(args: argparse.Namespace, out: ReportStream) -> int:
    from aromcp_workflows.app import WorkflowService
    from aromcp_workflows.instances import ServiceError
    from aromcp_workflows.testing.record import record
    from aromcp_workflows.testing.session import TestCommandError, TestSession
    from aromcp_workflows.testing.spec import TestFileError

    if not (args.record and args.out) or args.targets:
        print("test: --record ID needs --out FILE (the test file beside the workflow), and no other target",
              file=sys.stderr)
        return 2
    session = TestSession(args.project_dir)
    try:
        recording = WorkflowService(project_dir=args.project_dir, store_path=args.store).recording(args.record)
        done = record(session, recording, Path(args.out), args.name)
    except (ServiceError, TestCommandError) as exc:
        print(f"test: {exc}", file=sys.stderr)
        return 2
    except TestFileError as exc:
        print(f"test: {args.out} is not a valid test file; fix it first:\n{exc}", file=sys.stderr)
        return 2
    finally:
        session.close()
    print(f"wrote case {done.name!r} to {done.out}", file=out)
    for item in done.left_out:
        print(f"  left out {item}: it differs from run to run (now(), uuid(), the workflow id)", file=out)
    if recording.masked:
        print("  note: secret values were written as ***; the case may need them back to pass", file=out)
    if not done.passes:
        print("  the recorded case does not pass when run:", *done.problems, sep="\n    ", file=out)
        return 1
    return 0
