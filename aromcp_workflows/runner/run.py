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
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from aromcp_workflows.observe import Observer
from aromcp_workflows.runner import tracing
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
    `checkpoint` first, if given).  When the run is stopped — `stop` triggered by a signal
    (Ctrl-C, SIGTERM, SIGHUP), or `output` failing (a closed pipe: `| head`; a terminal
    gone) — the server is stopped with its shell commands, the instance is marked
    `interrupted` with the reason and the outcome says how to resume.
    `complete_parallel_early` completes each parallel_tasks step before its sub-agents
    finish (the server must answer with a `wait` step); `seed_style` calls
    workflow_get_next_step after every step_complete instead of using its answer, and
    aborts if the two disagree.  Both exist to test the server's protocol."""
    book = answers if isinstance(answers, AnswerBook) else (
        AnswerBook(answers) if isinstance(answers, dict) or answers is None else AnswerBook.load(answers))
    # the same rule the server applies; the runner is a client and imports none of the server's layers
    project = Path(project_dir or os.environ.get("AROMCP_PROJECT_DIR") or os.getcwd()).expanduser().resolve()
    if store and not _is_url(store):
        store = Path(store).expanduser().resolve()  # the server runs in the project dir
    stop = stop or Stop()
    stop.bind()  # a failing output stops the run as a signal does
    printer = Printer(output, quiet, on_lost=stop.output_lost)
    environ = {**os.environ, **(env or {})}
    traced = tracing.start(environ)  # None unless the OTEL_* variables ask for traces
    run = HeadlessRun(workflow, project, store, env, printer, stop, traced)
    try:
        outcome = await run.drive(book, inputs or {}, interactive, complete_parallel_early, seed_style, resume,
                                  checkpoint, tracing.console_asked(environ))
        printer.final(outcome)
    finally:
        if traced is not None:
            traced.shutdown()  # the runner's spans, and the root span of an instance it marked interrupted
    return outcome


class HeadlessRun:
    """One headless run: the server session, the agent, and what happens when it stops."""

    def __init__(self, workflow: str, project: Path, store: str | Path | None, env: dict[str, str] | None,
                 printer: Printer, stop: Stop, traced: Observer | None) -> None:
        self.workflow, self.project, self.store, self.env = workflow, project, store, env
        self.printer, self.stop, self.traced = printer, stop, traced
        self.agent: HeadlessAgent | None = None

    async def drive(self, book: AnswerBook, inputs: dict[str, Any], interactive: bool, early: bool, seed_style: bool,
                    resume: str | None, checkpoint: str | None, console: bool) -> RunOutcome:
        """The run through its server; a stop marks the instance interrupted.  With the
        console trace exporter the server's stderr is ours (its spans), else it is kept to
        show its end if the server fails."""
        from mcp import Client
        from mcp.client.stdio import stdio_client

        params = _server_params(self.workflow, self.project, self.store, self.env, bool(resume))
        finished: RunOutcome | None = None
        with _server_stderr(console) as errlog:
            try:
                async with Client(stdio_client(params, errlog=errlog)) as client:
                    self.agent = agent = HeadlessAgent(client, book, self.project, self.printer, interactive, early,
                                                       seed_style, tracing.RunTrace(self.traced))
                    finished = await (agent.resume(resume, checkpoint) if resume else agent.run(self.workflow, inputs))
                return finished
            except asyncio.CancelledError:
                if self.stop.signum is None or self.agent is None or not self.agent.workflow_id:
                    raise
                self.stop.absorb()
                return await _interrupted(self.agent, self.stop.signum, self.project, self.store, self.env,
                                          self.traced)
            except Exception as exc:
                if finished is not None:  # the run was over: a failure while closing the session changes nothing
                    return finished
                return self.aborted(exc, errlog)

    def aborted(self, exc: Exception, errlog: TextIO) -> RunOutcome:
        """The connection to the server was lost: the outcome says why, with the end of the
        server's stderr when it was kept."""
        tail = ""
        if errlog is not sys.stderr:
            errlog.seek(0)
            tail = errlog.read()[-3000:].strip()
        agent = self.agent
        outcome = agent.outcome if agent is not None and agent.outcome is not None else \
            RunOutcome(workflow=self.workflow, workflow_id=None, status="aborted")
        outcome.status = "aborted"
        outcome.error = (f"lost the connection to the server: {_describe(exc)}"
                         + (f"\nserver stderr (last lines):\n{tail}" if tail else ""))
        return outcome


@contextlib.contextmanager
def _server_stderr(console: bool) -> Iterator[TextIO]:
    """Where the server's stderr goes: ours when it writes spans there (and ours is a real
    file), else a temporary file."""
    if console and _is_file(sys.stderr):
        yield sys.stderr
        return
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
        yield errlog


def _is_file(stream: TextIO) -> bool:
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):  # pytest's capture, a StringIO
        return False
    return True


def _is_url(store: str | Path) -> bool:
    """A URL of any scheme goes to the server as it is (one it cannot use, it refuses)."""
    from aromcp_workflows.store import is_url

    return is_url(str(store))


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


# Why a run stopped, by signal (the reason kept in the instance), and its exit status.
WHY = {signal.SIGHUP: "the terminal went away", signal.SIGPIPE: "its output was closed (a reader such as "
                                                                  "`| head` stopped reading)"}
USER_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # sent twice: leave at once


class Stop:
    """Turns a stop into cancelling the run (once): SIGINT, SIGTERM and SIGHUP, and the
    run's output failing (`output_lost`: a closed pipe, a terminal gone).  SIGINT or
    SIGTERM a second time leaves at once."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._task: asyncio.Task[Any] | None = None

    def bind(self) -> None:
        """Cancel the current task when stopped."""
        self._task = asyncio.current_task()

    def install(self) -> None:
        self.bind()
        loop = asyncio.get_running_loop()
        for signum in (*USER_SIGNALS, signal.SIGHUP):
            with contextlib.suppress(NotImplementedError, RuntimeError):  # Windows: Ctrl-C stays KeyboardInterrupt
                loop.add_signal_handler(signum, self.trigger, signum)

    def output_lost(self, exc: OSError) -> None:
        """Writing the run's output failed: a closed pipe is SIGPIPE, anything else (EIO: the
        terminal went away) SIGHUP."""
        self.trigger(signal.SIGPIPE if isinstance(exc, BrokenPipeError) else signal.SIGHUP)

    def trigger(self, signum: int) -> None:
        if self.signum is not None:
            if signum in USER_SIGNALS and self.signum in USER_SIGNALS:
                os._exit(130)  # asked twice: do not wait for the clean-up
            return
        self.signum = signum
        with contextlib.suppress(OSError, ValueError):  # stderr may be gone with the terminal
            print(f"\n{signal.Signals(signum).name}: stopping the run and its shell commands"
                  + (" (again to quit at once)..." if signum in USER_SIGNALS else "..."), file=sys.stderr, flush=True)
        if self._task is not None:
            self._task.cancel()

    def absorb(self) -> None:
        """The cancellation was ours and is handled: let the clean-up await again."""
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()


def interrupted_reason(signum: int, where: list[str] | None = None) -> str:
    """`interrupted by SIGINT during long`, and why when the signal does not say it."""
    name = signal.Signals(signum)
    why = WHY.get(name)
    return (f"interrupted by {name.name}" + (f" during {', '.join(where)}" if where else "")
            + (f": {why}" if why else ""))


async def _interrupted(agent: HeadlessAgent, signum: int, project: Path, store: str | Path | None,
                       env: dict[str, str] | None, traced: Observer | None = None) -> RunOutcome:
    """The server has stopped (with its commands): mark the instance interrupted in its
    store, with the reason (tracing, when on, ends the instance's root span there)."""
    from aromcp_workflows.app import ServiceError, WorkflowService

    outcome = agent.outcome or RunOutcome(workflow="", workflow_id=agent.workflow_id, status="running")
    outcome.status, outcome.signal = "interrupted", signum
    reason = interrupted_reason(signum)
    store_path = store or (env or {}).get("AROMCP_WORKFLOWS_STORE") or None
    service = WorkflowService(project_dir=project, store_path=store_path, all_projects=True, observer=traced)
    try:
        where = service.status(agent.workflow_id).current_steps
        service.interrupt(agent.workflow_id, interrupted_reason(signum, where))
    except ServiceError as exc:
        outcome.error = f"{reason}; the instance could not be marked interrupted: {exc.said('cli')}"
        return outcome
    again = "aromcp-workflows" + (f" --project-dir {project}" if project != Path.cwd() else "")
    again += f" run --resume {agent.workflow_id}" + (f" --store {_shown(store)}" if store else "")
    outcome.error = f"{reason}; resume with: {again}"
    return outcome


def _shown(store: str | Path) -> str:
    """A store as it may be printed: a URL without its password."""
    text = str(store)
    if _is_url(text):
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


def _refused(args: argparse.Namespace, inputs: dict[str, Any], resume: str | None) -> str | None:
    """What the run's server would refuse at once — a store it cannot open or reach, an
    unknown workflow or instance, missing or mistyped inputs, an unknown checkpoint — found
    here from the files and the store (about 0.4 s of imports) instead of after starting a
    server (seconds); said as the command line says it.  Anything else is left to the
    server, which says it the same way."""
    from aromcp_workflows.app import ServiceError, WorkflowService
    from aromcp_workflows.store import StoreError

    project = getattr(args, "project_dir", None) or os.environ.get("AROMCP_PROJECT_DIR") or os.getcwd()
    service = WorkflowService(project_dir=Path(project).expanduser().resolve(), all_projects=True,
                              store_path=getattr(args, "store", None))
    try:
        service.instances.store.open()  # one that cannot be opened or reached: the server would refuse to start
        if resume:
            service.check_resume(resume, getattr(args, "checkpoint", None))
        else:
            service.check_start(_workflow_arg(args.workflow or ""), inputs)
    except ServiceError as exc:
        return exc.said("cli")
    except StoreError as exc:
        return str(exc)
    finally:
        service.close()
    return None


def run_from_cli(args: argparse.Namespace) -> int:
    """`aromcp-workflows run`: the workflow's final outcome is the exit status (`RunOutcome.exit_code`):
    0 completed, 1 failed, cancelled or aborted, 2 usage error or not started, 128 + the
    signal when interrupted (SIGINT and SIGTERM: 130)."""
    try:
        inputs = parse_inputs(list(args.input or []))
        answers = AnswerBook.load(args.answers) if args.answers else AnswerBook()
    except (UsageError, AnswersFileError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    resume = getattr(args, "resume", None)
    if (args.workflow is None) == (resume is None) or resume == "":
        print(("error: --resume needs an instance id" if resume == "" else "error: name a workflow to run, or "
               "--resume WORKFLOW_ID to go on with an instance") + " (`aromcp-workflows status` lists them)",
              file=sys.stderr)
        return 2
    stream = sys.stderr if args.json else sys.stdout
    refused = _refused(args, inputs, resume)
    if refused is not None:  # said now, before a server is started for nothing
        outcome = RunOutcome(workflow=args.workflow or "", workflow_id=resume, status="not_started", error=refused)
        Printer(stream, bool(args.quiet)).final(outcome)
        if args.json:
            print(json.dumps(outcome.to_json(), indent=2, ensure_ascii=False, default=str))
        return outcome.exit_code

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
                                 error=f"{interrupted_reason(stop.signum)} before the run began "
                                       "(`aromcp-workflows status` lists any instance it left)", signal=stop.signum)
            Printer(stream, bool(args.quiet)).final(outcome)
            return outcome

    outcome = asyncio.run(main())
    try:
        if args.json:
            print(json.dumps(outcome.to_json(), indent=2, ensure_ascii=False, default=str))
        sys.stdout.flush()
    except OSError:  # nobody reads stdout any more: the run's end was not delivered
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return outcome.exit_code or 128 + signal.SIGPIPE
    return outcome.exit_code
