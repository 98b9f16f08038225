"""Command-line interface: thin wrappers that parse arguments and print results.

Workflow logic lives in the packages; each command here loads, calls one API and
formats the answer for people (or as JSON with --json).  Exit codes: 0 ok, 1 invalid or
failed, 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aromcp_workflows import __version__
from aromcp_workflows.errors import KindedError

if TYPE_CHECKING:  # the definition package is imported by the commands that use it, so
    # `serve` starts as fast as a bare MCP server (README, "Performance")
    from aromcp_workflows.definition import CheckReport, DefinitionProblem, WorkflowLoader

CommandHandler = Callable[[argparse.Namespace], int]


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit status. Output cut short by the reader (`| head`) is no error
    (exit 0), but for `test` and `validate`, whose status is their verdict: they never let the
    broken pipe reach here (`test`'s cases still run: testing's `ReportStream`).

    Run as a program (no `argv`), a command given a store password first starts itself again
    without it in its arguments, which every local user can read (`argv_secrets`)."""
    if argv is None:
        from aromcp_workflows.cli.argv_secrets import restart_without_store_password

        restart_without_store_password()
    try:
        code = _dispatch(argv)
        sys.stdout.flush()  # here, not at interpreter exit, where a closed pipe prints a traceback
        return code
    except BrokenPipeError:
        from aromcp_workflows.cli.common import discard_stdout

        discard_stdout()
        return 0


def _dispatch(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    if args.project_dir is not None and not Path(args.project_dir).expanduser().is_dir():
        why = "is a file, not a folder" if Path(args.project_dir).expanduser().exists() else "does not exist"
        print(f"error: --project-dir {args.project_dir} {why}: name the project's folder", file=sys.stderr)
        return 2  # before anything is read or made: `run` would start a server there, `status` a store
    try:
        return int(args.handler(args))
    except KeyboardInterrupt:
        return 130
    except KindedError as exc:  # a store that cannot be opened or reached, a workflow that does not load, ...
        from aromcp_workflows.cli.store_cmd import store_error_exit

        return store_error_exit(exc)
    except Exception as exc:
        from aromcp_workflows.shell import CommandsDirError

        if not isinstance(exc, CommandsDirError):
            raise
        print(f"error: {exc}", file=sys.stderr)  # where commands keep their files is unsafe: one line
        return 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="aromcp-workflows",
        description="Run, validate and inspect YAML workflows for coding agents (an MCP server).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--project-dir", metavar="DIR",
                        help="project root (default: $AROMCP_PROJECT_DIR or the current directory)")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")

    listing = commands.add_parser("list", help="list the workflows that can be run here")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.add_argument("--no-global", action="store_true", help="leave out ~/.aromcp/workflows")
    listing.set_defaults(handler=cmd_list)

    info = commands.add_parser("info", help="show a workflow's description and inputs")
    info.add_argument("workflow", help="workflow name (e.g. standards:fix) or path to a .yaml file")
    info.add_argument("--json", action="store_true", help="print JSON")
    info.set_defaults(handler=cmd_info)

    validate = commands.add_parser(
        "validate", help="check workflows; exit 0 if all are valid, 1 if not",
        description="Validate workflows by name, file path, or folder (every .yaml in it). "
                    "Problems are printed as file:line:column: message.")
    validate.add_argument("targets", nargs="*", metavar="NAME|FILE|DIR")
    validate.add_argument("--all", action="store_true", help="validate every workflow that `list` shows")
    validate.add_argument("--json", action="store_true", help="print JSON")
    validate.set_defaults(handler=cmd_validate)

    schema = commands.add_parser("schema", help="print the JSON Schema of the workflow language")
    schema.add_argument("--output", "-o", metavar="FILE", help="write to FILE instead of stdout")
    schema.set_defaults(handler=cmd_schema)

    from aromcp_workflows.cli.commands import register_commands

    register_commands(commands)
    from aromcp_workflows.cli.repair_cmd import register_repair_commands

    register_repair_commands(commands)
    from aromcp_workflows.cli.store_cmd import register_store_commands

    register_store_commands(commands)
    from aromcp_workflows.importer import register as register_import

    register_import(commands)
    from aromcp_workflows.testing import register as register_test

    register_test(commands)
    return parser


def _loader(args: argparse.Namespace) -> WorkflowLoader:
    from aromcp_workflows.definition import WorkflowLoader, WorkflowResolver

    return WorkflowLoader(WorkflowResolver(project_dir=args.project_dir))


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False))


def cmd_list(args: argparse.Namespace) -> int:
    from aromcp_workflows.definition import DefinitionError

    loader = _loader(args)
    rows = []
    for location in loader.resolver.list(include_global=not args.no_global):
        row: dict[str, Any] = {"name": location.name, "source": location.source,
                               "path": str(location.path), "description": "", "version": ""}
        try:
            loaded = loader.load_one_file(location.path, location.source)
            row.update(description=loaded.definition.description, version=loaded.definition.version)
        except DefinitionError as exc:
            row["error"] = str(exc.problems[0]) if exc.problems else str(exc)
        rows.append(row)
    if args.json:
        _print_json({"workflows": rows})
        return 0
    if not rows:
        print("No workflows found. Put one in ./.aromcp/workflows/<name>.yaml")
        return 0
    width = max(len(r["name"]) for r in rows)
    for row in rows:
        text = (row.get("error") and f"(invalid: {row['error']})") or row["description"]
        print(f"{row['name']:<{width}}  {row['source']:<8} {text}")
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    loaded = _loader(args).load(args.workflow)
    definition = loaded.definition
    inputs = {name: spec.model_dump(exclude_none=True) for name, spec in definition.inputs.items()}
    if args.json:
        _print_json({"name": definition.name, "description": definition.description,
                     "version": definition.version, "inputs": inputs,
                     "found_at": loaded.file, "source": loaded.source})
        return 0
    print(f"{definition.name} {definition.version}  ({loaded.source}: {loaded.file})")
    if definition.description:
        print(f"  {definition.description}")
    if not inputs:
        print("  inputs: none")
    for name, spec in definition.inputs.items():
        flag = "required" if spec.required else f"default {json.dumps(spec.default)}"
        text = f" — {spec.description}" if spec.description else ""
        print(f"  --input {name}=<{spec.type}>  ({flag}){text}")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from aromcp_workflows.definition import TEST_FILE_SUFFIX, check

    loader = _loader(args)
    targets: list[str] = []
    for target in args.targets:  # a folder means every workflow file in it (test files are not workflows)
        folder = Path(target)
        if not folder.is_dir():
            targets.append(target)
            continue
        files = sorted(f for f in [*folder.glob("*.yaml"), *folder.glob("*.yml")]
                       if not f.name.endswith(TEST_FILE_SUFFIX))
        if not files:
            print(f"validate: no .yaml files in {target}", file=sys.stderr)
            return 1
        targets += [str(f) for f in files]
    if args.all:
        targets += [w.name for w in loader.resolver.list()]
    if not targets:
        print("validate: name at least one workflow or file, or pass --all", file=sys.stderr)
        return 2
    reports = [check(target, loader) for target in targets]
    verdict = 0 if all(r.valid for r in reports) else 1
    try:
        if args.json:
            _print_json({"results": [_report_json(r) for r in reports], "valid": verdict == 0})
        else:
            for report in reports:
                _print_report(report)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader stopped (`validate --all | head` in CI): the verdict stands
        from aromcp_workflows.cli.common import discard_stdout

        discard_stdout()
    return verdict


def _report_json(report: CheckReport) -> dict[str, Any]:
    return {"target": report.target, "valid": report.valid,
            "errors": [p.to_dict() for p in report.errors],
            "warnings": [p.to_dict() for p in report.warnings]}


def _print_report(report: CheckReport) -> None:
    """Problems as `file:line:col: message` on stdout (like compilers), then a verdict."""
    for problem in report.errors + report.warnings:
        print(str(_relative(problem)))
    verdict = "valid" if report.valid else f"INVALID ({_count(len(report.errors), 'error')})"
    extra = f", {_count(len(report.warnings), 'warning')}" if report.warnings else ""
    print(f"{report.target}: {verdict}{extra}")


def _relative(problem: DefinitionProblem) -> DefinitionProblem:
    """Files under the current directory are shown relative to it: shorter, still clickable."""
    if problem.file:
        try:
            return replace(problem, file=str(Path(problem.file).relative_to(Path.cwd())))
        except ValueError:
            pass
    return problem


def cmd_schema(args: argparse.Namespace) -> int:
    from aromcp_workflows.definition import workflow_json_schema

    text = json.dumps(workflow_json_schema(), indent=2) + "\n"
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"
