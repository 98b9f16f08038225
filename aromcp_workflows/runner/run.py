"""The headless agent: an MCP client that runs a workflow without an LLM.

`run_workflow` starts the server as a subprocess (`python -m aromcp_workflows serve`) and
speaks only the protocol (docs/language.md, the atomic step; README, "MCP interface"),
the economical way: `workflow_start`, one
`workflow_get_next_step`, then for every step perform it and `workflow_step_complete`,
whose answer carries the next step and the messages, until the next step is null.  It
runs `agent_shell_command` locally, answers `mcp_call`, `user_input` and `agent_prompt`
from a scripted answers file (or asks on a terminal), and runs the tasks of a
`parallel_tasks` step as concurrent sub-agents over the same session.  `run_from_cli`
is the `aromcp-workflows run` command.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any, TextIO

from aromcp_workflows.runner.agent import HeadlessAgent
from aromcp_workflows.runner.answers import AnswerBook, AnswersFileError
from aromcp_workflows.runner.report import Printer, RunOutcome, TranscriptEntry

__all__ = ["AnswerBook", "RunOutcome", "TranscriptEntry", "UsageError", "parse_inputs", "run_from_cli",
           "run_workflow"]


class UsageError(Exception):
    """Bad command-line input (exit code 2)."""


def parse_inputs(pairs: list[str]) -> dict[str, Any]:
    """`k=v` pairs; every value stays the text given.

    The server converts text to each input's declared type (``3`` for an integer, ``true``
    for a boolean, JSON for arrays and objects), so a string input takes ``true`` or ``42``
    as written; guessing JSON here would turn them into a boolean and a number."""
    inputs: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--input {pair!r} is not KEY=VALUE (for example --input base_ref=main "
                             "or --input 'files=[\"a.ts\"]')")
        inputs[key.strip()] = value
    return inputs


def server_command(project_dir: Path, store: str | Path | None, workflow_file: str | None = None,
                   resume: bool = False) -> list[str]:
    """The server for one run; a workflow given as a file is allowed by path (only that one).
    Resuming, it serves the instance whatever its project (`--all-projects`: the server is
    this run's own, over stdio); the steps say where their commands run."""
    args = ["-m", "aromcp_workflows", "--project-dir", str(project_dir), "serve"]
    args += ["--allow-file", workflow_file] if workflow_file else []
    args += ["--all-projects"] if resume else []
    args += ["--client-is-person"]  # the runner plays the agent and the person who answers and decides
    return args + (["--store", str(store)] if store else [])


async def run_workflow(workflow: str, inputs: dict[str, Any] | None = None,
                       answers: AnswerBook | dict[str, Any] | str | Path | None = None,
                       project_dir: str | Path | None = None, store: str | Path | None = None,
                       output: TextIO | None = None, *, quiet: bool = False, interactive: bool = False,
                       env: dict[str, str] | None = None, complete_parallel_early: bool = False,
                       seed_style: bool = False, resume: str | None = None, checkpoint: str | None = None,
                       stop: Stop | None = None) -> RunOutcome:
    """Run `workflow` to its end through a fresh server subprocess; print to `output`.

    With `resume` (a workflow id), go on with that instance instead (rolled back to
    `checkpoint` first, if given).  When `stop` was triggered (Ctrl-C, SIGTERM) while the
    run was cancelled, the server is stopped with its shell commands, the instance is
    marked `interrupted` and the outcome says how to resume.
    `complete_parallel_early` completes each parallel_tasks step before its sub-agents
    finish (the server must answer with a `wait` step); `seed_style` calls
    workflow_get_next_step after every step_complete instead of using its answer, and
    aborts if the two disagree.  Both exist to test the server's protocol."""
    from mcp import Client
    from mcp.client.stdio import stdio_client

    book = answers if isinstance(answers, AnswerBook) else (
        AnswerBook(answers) if isinstance(answers, dict) or answers is None else AnswerBook.load(answers))
    # the same rule the server applies; the runner is a client and imports none of the server's layers
    project = Path(project_dir or os.environ.get("AROMCP_PROJECT_DIR") or os.getcwd()).expanduser().resolve()
    if store and not _is_url(store):
        store = Path(store).expanduser().resolve()  # the server runs in the project dir
    params = _server_params(workflow, project, store, env, bool(resume))
    printer = Printer(output, quiet)
    agent: HeadlessAgent | None = None
    finished: RunOutcome | None = None
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
        try:
            async with Client(stdio_client(params, errlog=errlog)) as client:
                agent = HeadlessAgent(client, book, project, printer, interactive, complete_parallel_early,
                                      seed_style)
                finished = await (agent.resume(resume, checkpoint) if resume else agent.run(workflow, inputs or {}))
            outcome = finished
        except asyncio.CancelledError:
            if stop is None or stop.signum is None or agent is None or not agent.workflow_id:
                raise
            stop.absorb()
            outcome = await _interrupted(agent, stop.signum, project, store, env)
        except Exception as exc:
            if finished is not None:  # the run was over: a failure while closing the session changes nothing
                outcome = finished
            else:
                errlog.seek(0)
                tail = errlog.read()[-3000:].strip()
                outcome = agent.outcome if agent is not None and agent.outcome is not None else \
                    RunOutcome(workflow=workflow, workflow_id=None, status="aborted")
                outcome.status = "aborted"
                outcome.error = (f"lost the connection to the server: {_describe(exc)}"
                                 + (f"\nserver stderr (last lines):\n{tail}" if tail else ""))
    printer.final(outcome)
    return outcome


def _is_url(store: str | Path) -> bool:
    return str(store).startswith(("postgresql://", "postgres://"))


def _server_params(workflow: str, project: Path, store: str | Path | None, env: dict[str, str] | None,
                   resume: bool = False) -> Any:
    """How to start the run's server: in the project, allowing the workflow file if one was
    given, with a store URL in its environment (arguments are visible to every local user
    through `ps`), a store path as an argument; resuming, for the instance's own project."""
    from mcp import StdioServerParameters

    as_file = workflow if workflow.endswith((".yaml", ".yml")) else None
    url = {"AROMCP_WORKFLOWS_STORE": str(store)} if store and _is_url(store) else {}
    return StdioServerParameters(command=sys.executable,
                                 args=server_command(project, None if url else store, as_file, resume),
                                 env={**os.environ, **(env or {}), **url}, cwd=str(project))


class Stop:
    """Turns SIGINT/SIGTERM into cancelling the run (once); a second signal leaves at once."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._task: asyncio.Task[Any] | None = None

    def install(self) -> None:
        self._task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):  # Windows: Ctrl-C stays KeyboardInterrupt
                loop.add_signal_handler(signum, self._on_signal, signum)

    def _on_signal(self, signum: int) -> None:
        if self.signum is not None:
            os._exit(130)  # asked twice: do not wait for the clean-up
        self.signum = signum
        print(f"\n{signal.Signals(signum).name}: stopping the run and its shell commands "
              "(again to quit at once)...", file=sys.stderr, flush=True)
        if self._task is not None:
            self._task.cancel()

    def absorb(self) -> None:
        """The cancellation was ours and is handled: let the clean-up await again."""
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()


async def _interrupted(agent: HeadlessAgent, signum: int, project: Path, store: str | Path | None,
                       env: dict[str, str] | None) -> RunOutcome:
    """The server has stopped (with its commands): mark the instance interrupted in its store."""
    from aromcp_workflows.app import WorkflowService
    from aromcp_workflows.instances import ServiceError

    outcome = agent.outcome or RunOutcome(workflow="", workflow_id=agent.workflow_id, status="running")
    outcome.status = "interrupted"
    name = signal.Signals(signum).name
    store_path = store or (env or {}).get("AROMCP_WORKFLOWS_STORE") or None
    service = WorkflowService(project_dir=project, store_path=store_path, all_projects=True)
    try:
        where = service.status(agent.workflow_id).current_steps
        service.interrupt(agent.workflow_id, f"interrupted by {name}" + (f" during {', '.join(where)}" if where
                                                                         else ""))
    except ServiceError as exc:
        outcome.error = f"interrupted by {name}; the instance could not be marked interrupted: {exc}"
        return outcome
    again = "aromcp-workflows" + (f" --project-dir {project}" if project != Path.cwd() else "")
    again += f" run --resume {agent.workflow_id}" + (f" --store {_shown(store)}" if store else "")
    outcome.error = f"interrupted by {name}; resume with: {again}"
    return outcome


def _shown(store: str | Path) -> str:
    """A store as it may be printed: a URL without its password."""
    text = str(store)
    if text.startswith(("postgresql://", "postgres://")):
        from aromcp_workflows.store import redact_url

        return redact_url(text)
    return text


def _describe(exc: BaseException) -> str:
    """The innermost causes of an exception (task groups wrap what actually went wrong)."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _workflow_arg(workflow: str) -> str:
    """A path to a workflow file is made absolute (the server runs in the project dir)."""
    path = Path(workflow)
    if workflow.endswith((".yaml", ".yml")) and path.is_file():
        return str(path.resolve())
    return workflow


def run_from_cli(args: argparse.Namespace) -> int:
    """`aromcp-workflows run`: the workflow's final outcome is the exit status (`RunOutcome.exit_code`):
    0 completed, 1 failed, cancelled or aborted, 2 usage error or not started."""
    try:
        inputs = parse_inputs(list(args.input or []))
        answers = AnswerBook.load(args.answers) if args.answers else AnswerBook()
    except (UsageError, AnswersFileError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    resume = getattr(args, "resume", None)
    if (args.workflow is None) == (resume is None):
        print("error: name a workflow to run, or --resume WORKFLOW_ID to go on with an instance "
              "(`aromcp-workflows status` lists them)", file=sys.stderr)
        return 2
    stream = sys.stderr if args.json else sys.stdout

    async def main() -> RunOutcome:
        stop = Stop()
        stop.install()
        try:
            return await run_workflow(
                _workflow_arg(args.workflow or ""), inputs, answers, getattr(args, "project_dir", None),
                getattr(args, "store", None), stream, quiet=bool(args.quiet), interactive=sys.stdin.isatty(),
                resume=resume, checkpoint=getattr(args, "checkpoint", None), stop=stop)
        except asyncio.CancelledError:
            if stop.signum is None:
                raise
            stop.absorb()  # stopped before an instance existed: nothing to mark or resume
            outcome = RunOutcome(workflow=args.workflow or "", workflow_id=resume, status="interrupted",
                                 error=f"interrupted by {signal.Signals(stop.signum).name} before the run began "
                                       "(`aromcp-workflows status` lists any instance it left)")
            Printer(stream, bool(args.quiet)).final(outcome)
            return outcome

    outcome = asyncio.run(main())
    if args.json:
        print(json.dumps(outcome.to_json(), indent=2, ensure_ascii=False, default=str))
    return outcome.exit_code
