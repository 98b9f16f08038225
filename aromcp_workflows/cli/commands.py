"""CLI commands that serve and run instances: `serve`, `ui`, `run`, `status`, `cancel`,
`migrate`, `install`.

Argument parsing and output formatting only; the work is done by `server.serve`, the
headless `runner`, `WorkflowService` and `integrations.claude`.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aromcp_workflows.cli.common import print_json, refused, service_for
from aromcp_workflows.errors import KindedError

if TYPE_CHECKING:
    from aromcp_workflows.app import WorkflowService


def register_commands(commands: Any) -> None:
    """Every subcommand of this module: running instances, then looking at workflows and instances."""
    from aromcp_workflows.cli.inspect_cmd import register_inspecting

    _register_running(commands)
    _register_ui(commands)
    register_inspecting(commands)
    _register_install(commands)


# `serve --http` and `ui` check Host and Origin by the one rule (http/hosts.py)
ALLOWED_HOST_HELP = ("a name clients reach the server by (Host/Origin checks, against DNS rebinding; the bind "
                     "address and loopback are always allowed); repeatable")


def _register_ui(commands: Any) -> None:
    ui = commands.add_parser("ui", help="a live web view of the instances in the store",
                             description="Serve a local web page over the instance store (the one `serve` uses, "
                                         "SQLite or PostgreSQL): every instance, its graph, tasks, messages, "
                                         "history and state, following each change. Every read needs a login: "
                                         "it gives a one-time login URL (on its terminal, or in a private file it "
                                         "names). Read-only unless --actions.")
    ui.add_argument("--port", type=int, default=8780, help="port (default 8780; 0 picks a free one)")
    ui.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    ui.add_argument("--store", metavar="PATH|URL", help="SQLite store file or postgresql:// URL "
                                                      "(default: $AROMCP_WORKFLOWS_STORE or the user data directory)")
    ui.add_argument("--open", action="store_true", help="open the page, logged in, in the default browser")
    ui.add_argument("--actions", action="store_true",
                    help="allow cancel, retry, fork and answering questions from the page (to whoever has logged in)")
    ui.add_argument("--allowed-host", action="append", default=[], metavar="HOST[:PORT]", help=ALLOWED_HOST_HELP)
    ui.add_argument("--auth-token-file", metavar="FILE",
                    help="a token the page also accepts (as a bearer token, or pasted to log in); needed to bind "
                         "beyond loopback")
    ui.set_defaults(handler=cmd_ui)



def _register_running(commands: Any) -> None:
    _register_serve(commands)
    run = commands.add_parser(
        "run", help="run a workflow headless, acting as the agent (no LLM needed)",
        description="Start the server as a subprocess and drive a workflow over real MCP stdio: prints "
                    "user messages, runs agent shell commands locally, answers prompts from --answers "
                    "(or asks on a terminal) and runs parallel tasks as concurrent sub-agents.",
        epilog="exit status: 0 the workflow completed; 1 it failed or was cancelled (an `exit` step with "
               "status: failed, a failing step), or the runner had to stop; 2 usage error, or the workflow "
               "did not start (unknown workflow, invalid inputs); 130 interrupted (Ctrl-C or SIGTERM: "
               "go on with --resume ID).")
    run.add_argument("workflow", nargs="?", help="workflow name or path to a .yaml file")
    run.add_argument("--input", "-i", action="append", default=[], metavar="KEY=VALUE",
                     help="a workflow input (repeatable); VALUE is text, converted to the "
                          "input's declared type (JSON for arrays and objects)")
    run.add_argument("--resume", metavar="WORKFLOW_ID",
                     help="go on with an interrupted (Ctrl-C) or checkpointed instance instead of starting one")
    run.add_argument("--checkpoint", metavar="CHECKPOINT_ID", help="with --resume: roll back to this checkpoint first")
    run.add_argument("--answers", metavar="FILE", help="YAML answers keyed by step id or MCP method")
    run.add_argument("--store", metavar="PATH", help="SQLite store file or postgresql:// URL for the server")
    run.add_argument("--json", action="store_true", help="print the final answer as JSON")
    run.add_argument("--quiet", "-q", action="store_true", help="print only messages and the result")
    run.set_defaults(handler=cmd_run)

    status = commands.add_parser("status", help="list this project's instances, or show one")
    status.add_argument("workflow_id", nargs="?")
    status.add_argument("--store", metavar="PATH", help="SQLite store file or postgresql:// URL")
    status.add_argument("--json", action="store_true", help="print JSON")
    status.set_defaults(handler=cmd_status)

    cancel = commands.add_parser(
        "cancel", help="end an instance (status cancelled); it cannot be resumed",
        description="End an instance: its status becomes cancelled and a command it runs is stopped (its "
                    "whole process group). It cannot be resumed; `fork` copies it.",
        epilog="exit status: 0 cancelled, now or before; 1 it had already ended another way (completed or "
               "failed) and is left as it is, or it cannot be found or changed; 2 usage error.")
    cancel.add_argument("workflow_id")
    cancel.add_argument("--store", metavar="PATH", help="SQLite store file or postgresql:// URL")
    cancel.set_defaults(handler=cmd_cancel)
    _register_migrate(commands)


def _register_migrate(commands: Any) -> None:
    migrate = commands.add_parser(
        "migrate", help="move waiting instances onto their edited workflow file, when that is safe",
        description="An instance runs the definition it started with. migrate moves it onto its workflow "
                    "file as the file is now, when every thread's place exists there, new inputs have "
                    "defaults and the state the remaining steps read exists; otherwise it says which step "
                    "stands in the way (file:line) and changes nothing (docs/evolving.md).",
        epilog="exit status: 0 moved (or would move, or nothing to move); 1 refused, or the instance or "
               "file cannot be used; 2 usage error.")
    migrate.add_argument("workflow_id", nargs="?", help="the instance to move")
    migrate.add_argument("--workflow", metavar="NAME", help="every waiting or running instance of this workflow "
                                                            "in this project")
    migrate.add_argument("--dry-run", action="store_true", help="print the plan and change nothing")
    migrate.add_argument("--store", metavar="PATH", help="SQLite store file or postgresql:// URL")
    migrate.set_defaults(handler=cmd_migrate)


def _register_serve(commands: Any) -> None:
    serve = commands.add_parser(
        "serve", help="run the MCP server (stdio by default)",
        description="Run the MCP server. stdio is what Claude Code and most clients start; --http serves "
                    "streamable HTTP on 127.0.0.1, where every client must send a bearer token (docs/security.md).")
    serve.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8765, help="HTTP port (default 8765)")
    serve.add_argument("--store", metavar="PATH|URL",
                       help="SQLite store file, or postgresql://USER@HOST:PORT/DB shared by replicas "
                            "(default: $AROMCP_WORKFLOWS_STORE or the user data directory)")
    serve.add_argument("--allow-file", action="append", default=[], metavar="FILE",
                       help="also run this workflow file by path (clients otherwise name workflows only)")
    serve.add_argument("--all-projects", action="store_true",
                       help="serve instances of every project in the store by id (default: this project's only)")
    serve.add_argument("--client-is-person", action="store_true",
                       help="stdio: the client is the person at this terminal, not an agent (what `run` starts): "
                            "it may change and reuse the user's answers as the CLI may (docs/security.md)")
    serve.add_argument("--ui", action="store_true", help="with --http: also serve the web view at /ui (log in with "
                                                           "the bearer token, or the one-time login URL in the file "
                                                           "the server names)")
    serve.add_argument("--ui-actions", action="store_true",
                       help="with --ui: the web view can cancel, retry, fork and answer questions (to whoever "
                            "has logged in)")
    auth = serve.add_argument_group("HTTP clients", "who may call an --http server (default: a bearer token; on "
                                                    "loopback the server makes one and prints where it is)")
    auth.add_argument("--auth-token-file", metavar="FILE", help="the bearer token clients must send (also: "
                                                                 "$AROMCP_HTTP_TOKEN)")
    auth.add_argument("--no-auth", action="store_true", help="no token at all (loopback only)")
    auth.add_argument("--allowed-host", action="append", default=[], metavar="HOST[:PORT]", help=ALLOWED_HOST_HELP)
    auth.add_argument("--token-verifier", metavar="MODULE:NAME",
                      help="an identity provider's token verifier instead of a token (docs/security.md)")
    auth.add_argument("--auth-issuer-url", metavar="URL", help="with --token-verifier: where clients get tokens")
    auth.add_argument("--auth-resource-url", metavar="URL",
                      help="with --token-verifier: this server's URL as tokens name it (default http://HOST:PORT/mcp)")
    auth.add_argument("--auth-scope", action="append", default=[], metavar="SCOPE",
                      help="with --token-verifier: a scope every token must carry (repeatable)")
    serve.set_defaults(handler=cmd_serve)


def _register_install(commands: Any) -> None:
    install = commands.add_parser("install", help="set up a client (Claude Code) to use this server")
    install.add_argument("client", choices=["claude"], help="the client to configure")
    install.add_argument("--global", dest="global_scope", action="store_true",
                         help="user scope (~/.claude.json, ~/.claude/commands) instead of the project")
    install.set_defaults(handler=cmd_install)


HTTP_ONLY = ("auth_token_file", "no_auth", "allowed_host", "token_verifier", "auth_issuer_url", "auth_resource_url",
             "auth_scope", "ui", "ui_actions")


def cmd_serve(args: argparse.Namespace) -> int:
    from aromcp_workflows.cli.store_cmd import check_shared_store
    from aromcp_workflows.server import serve

    stray = [f"--{name.replace('_', '-')}" for name in HTTP_ONLY if getattr(args, name)]
    if stray and not args.http:
        print(f"error: {', '.join(stray)} needs --http (these are about serving over HTTP; the web view is "
              "served beside MCP)", file=sys.stderr)
        return 2
    if args.client_is_person and args.http:
        print("error: --client-is-person is for stdio, where the client is the process that started the server "
              "(`run` does); over HTTP anyone with a credential is a client, and an agent may not act as the "
              "user (docs/security.md): drop the flag", file=sys.stderr)
        return 2
    failed = check_shared_store(args.store)
    if failed is not None:
        return failed
    if not args.http:
        serve(args.project_dir, args.store, tuple(args.allow_file), args.all_projects,
              client="person" if args.client_is_person else "agent")
        return 0
    from aromcp_workflows.server import HttpOptions, HttpSetupError  # HTTP only: stdio starts lean

    http = HttpOptions(host=args.host, port=args.port, token_file=args.auth_token_file, no_auth=args.no_auth,
                       allowed_hosts=tuple(args.allowed_host), token_verifier=args.token_verifier,
                       issuer_url=args.auth_issuer_url, resource_url=args.auth_resource_url,
                       scopes=tuple(args.auth_scope), ui=args.ui or args.ui_actions, ui_actions=args.ui_actions)
    try:
        serve(args.project_dir, args.store, tuple(args.allow_file), args.all_projects, http)
    except HttpSetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


def cmd_ui(args: argparse.Namespace) -> int:
    """`aromcp-workflows ui`: the web view over the store, until Ctrl-C."""

    from aromcp_workflows.cli.store_cmd import check_shared_store
    from aromcp_workflows.web import UiOptions, run_ui

    failed = check_shared_store(args.store)
    if failed is not None:
        return failed
    from aromcp_workflows.store import named_store

    service = functools.cache(lambda: service_for(args))
    return run_ui(service, UiOptions(args.host, args.port, args.actions, args.open, tuple(args.allowed_host),
                                     args.auth_token_file, named_store(args.store)))


def cmd_run(args: argparse.Namespace) -> int:
    from aromcp_workflows.runner import run_from_cli

    return run_from_cli(args)


def cmd_status(args: argparse.Namespace) -> int:
    from aromcp_workflows.app import InstanceStatus
    service = service_for(args)
    try:
        found = service.list_instances() if args.workflow_id is None else service.status(args.workflow_id)
    except KindedError as exc:
        return refused(exc)
    if args.json:
        print_json(found)
        return 0
    if not isinstance(found, InstanceStatus):
        if found.store:  # not the default store (the one the Claude Code plugin's server uses too)
            print(f"store: {found.store}")
        if not found.instances:
            print(f"No workflow instances for {service.project_dir}.")
        for row in found.instances:
            steps = ", ".join(row.current_steps) or "-"
            status = "stalled" if row.stalled else row.status
            print(f"{row.workflow_id}  {row.workflow:<20} {status:<10} {_age(row.age_seconds):>6}  {steps}")
        return 0
    print(f"{found.workflow_id}  {found.workflow}  {found.status}" + ("  (stalled)" if found.stalled else ""))
    print(f"  current steps: {', '.join(found.current_steps) or '-'}")
    for held in found.steps_in_hand or []:
        print(f"  {held.task_id + ': ' if held.task_id else ''}{waiting_line(held)}")
    tasks = found.progress
    if tasks.tasks_total:
        print(f"  tasks: {tasks.tasks_completed}/{tasks.tasks_total} completed, "
              f"{tasks.tasks_failed} failed, {tasks.tasks_running} running")
    if found.error:
        print(f"  error: {found.error}")
    if found.definition_changed:
        print(f"  definition changed since start (aromcp-workflows migrate {found.workflow_id} moves it onto "
              "the file as it is now)")
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    if (args.workflow_id is None) == (args.workflow is None):
        print("error: name one instance (migrate ID) or a workflow (migrate --workflow NAME)", file=sys.stderr)
        return 2
    if "" in (args.workflow_id, args.workflow):
        said = "instance id is empty: `aromcp-workflows status` lists the instances" if args.workflow_id == "" \
            else "workflow name is empty: `aromcp-workflows list` lists the workflows"
        print(f"error: the {said}", file=sys.stderr)
        return 2
    service = service_for(args)
    try:
        ids = [args.workflow_id] if args.workflow_id else _to_migrate(service, args.workflow)
        if not ids:
            print(f"no waiting or running instance of {args.workflow} in {service.project_dir}")
            return 0
        results = [service.migrate(workflow_id, dry_run=args.dry_run) for workflow_id in ids]
    except KindedError as exc:
        return refused(exc)
    for result in results:
        _print_migration(result)
    return 1 if any(r.outcome == "refused" for r in results) else 0


def _to_migrate(service: WorkflowService, workflow: str) -> list[str]:
    """The waiting and running instances of `workflow` in the project.  A name with no file
    and no instance at all is a mistake (`WorkflowNotFound`, with the closest names), not
    "nothing to move"."""
    rows = [row for row in service.list_instances().instances if row.workflow == workflow]
    if not rows:
        service.resolver.find(workflow)
    return [row.workflow_id for row in rows if row.status in ("running", "waiting")]


def _print_migration(result: Any) -> None:
    file = _shown(result.file)
    said = {"moved": f"moved onto {file}", "would_move": f"can move onto {file} (dry run: nothing was changed)",
            "refused": "refused: nothing was changed", "unchanged": "nothing to move"}
    print(f"{result.workflow_id} ({result.workflow}): {said[result.outcome]}")
    for blocker in result.blockers:
        where = f"{_shown(blocker.file)}:{blocker.line}: " if blocker.file and blocker.line else \
            f"{_shown(blocker.file)}: " if blocker.file else ""
        print(f"  {where}{blocker.message}")
    for line in result.plan if result.outcome != "refused" else []:
        print(f"  {line}")


def _shown(path: str | None) -> str:
    try:
        return str(Path(path or "").resolve().relative_to(Path.cwd()))
    except ValueError:
        return path or ""


def cmd_cancel(args: argparse.Namespace) -> int:
    """`workflow_complete(status="cancelled")` on this machine: for an instance no agent will finish."""
    service = service_for(args)
    try:
        before = service.status(args.workflow_id).status
        service.complete(args.workflow_id, "cancelled", refuse_ended=True)  # one that ended otherwise: refused
        after = service.status(args.workflow_id).status
    except KindedError as exc:
        return refused(exc)
    if before == after:
        print(f"{args.workflow_id} was already cancelled; nothing changed")
        return 0
    print(f"{args.workflow_id}: {before} -> {after}")
    return 0


def waiting_line(held: Any) -> str:
    """Who one step in hand waits for, as a person reads it: "waiting for the agent since
    14:02 (12 min) — stalled", "waiting for the user: Deploy to production?", "command
    running 2 m 10 s: npm test"."""
    if held.waiting_for == "user":
        return f"waiting for the user: {held.question}"
    if held.waiting_for == "command" and held.stalled:
        return (f"command started {_duration(held.for_s)} ago, its server gone — stalled (an agent's next call "
                f"takes its result over): {held.command}")
    if held.waiting_for == "command":
        return f"command running {_duration(held.for_s)}: {held.command}"
    if held.waiting_for == "task":
        return f"waiting for tasks {', '.join(held.tasks or [])} since {_clock(held.since)} ({_duration(held.for_s)})"
    idle = held.idle_s if held.idle_s is not None else held.for_s
    late = " — stalled" if held.stalled else ""
    return f"waiting for the agent ({held.step_id}) since {_clock(held.since)} ({_duration(idle)} idle){late}"


def _clock(since: str | None) -> str:
    from datetime import datetime

    try:
        return datetime.fromisoformat(str(since).replace("Z", "+00:00")).astimezone().strftime("%H:%M")
    except ValueError:
        return "?"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        minutes, rest = divmod(int(seconds), 60)
        return f"{minutes} min" if minutes >= 10 else f"{minutes} m {rest} s"
    return f"{seconds / 3600:.1f} h"


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def cmd_install(args: argparse.Namespace) -> int:
    from aromcp_workflows.definition import project_root
    from aromcp_workflows.integrations import InstallError, install_claude

    try:
        report = install_claude(Path(project_root(args.project_dir)), global_scope=args.global_scope)
    except InstallError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(report)
    return 0


