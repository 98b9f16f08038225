"""Running one case in process: the agent's loop over the typed service, offline.

`CaseAgent` plays the agent as `aromcp-workflows run` does — answers from the case's
`answers` (the same `AnswerBook`), `agent_shell_command` run (or answered by a stub),
each `parallel_tasks` task pulled to its end — but calls `WorkflowService` directly: no
MCP, no process, one shared V8.  The tasks of a parallel step run one after another, in
task order, so a case's messages come in the same order every time.  A step with no
answer stops the run there: the case ends `waiting` at that step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aromcp_workflows.app import Coverage, WorkflowService
from aromcp_workflows.instances import ServiceError
from aromcp_workflows.runner import AnswerBook, ScriptedAnswer, shell_answer
from aromcp_workflows.shell import run_shell
from aromcp_workflows.testing.expect import Mismatch, compare
from aromcp_workflows.testing.spec import Case
from aromcp_workflows.testing.stubs import StubShell

MAX_STEPS = 10_000  # steps one case may perform: a workflow looping on agent steps stops here
HISTORY_TAIL = 8  # steps of the history a failure shows
AGENT_STEP_TYPES = ("mcp_call", "user_input", "agent_prompt", "agent_shell_command")


class Stopped(Exception):
    """The run cannot go on as the case is written: it stops, and says where and why."""


@dataclass
class CaseOutcome:
    """What one case did and whether it met its expectations."""

    case: Case
    workflow_id: str | None = None
    status: str = "not_started"
    error: str | None = None
    state: dict[str, Any] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)
    stopped: str | None = None  # why the run stopped before its end (no answer for a step)
    unmatched: list[str] = field(default_factory=list)  # commands no stub matched
    mismatches: list[Mismatch] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)  # the last steps, for a failure
    coverage: Coverage | None = None
    duration_s: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.mismatches and not self.unmatched


class CaseAgent:
    """Drives one instance through the service as the case's agent."""

    def __init__(self, service: WorkflowService, case: Case, shell: StubShell | None, work_dir: Path):
        self.service = service
        self.case = case
        self.shell = shell
        self.work_dir = work_dir
        self.book = AnswerBook(case.answers, origin=f"{case.file.name}: case {case.name!r}")
        self.workflow_id = ""
        self.messages: list[str] = []
        self.steps = 0

    def run(self, workflow_file: Path) -> tuple[str, str | None]:
        """Start the workflow and drive it to its end (status, error); `Stopped` when it cannot."""
        self.workflow_id = self.service.start(str(workflow_file), self.case.inputs).workflow_id
        first = self.service.next_step(self.workflow_id)
        self.messages += first.messages
        return self.drive(None, first.step, first.status, first.error)

    def drive(self, task_id: str | None, step: dict[str, Any] | None, status: str,
              error: str | None) -> tuple[str, str | None]:
        """Perform a thread's steps until the server hands out none; the thread's end."""
        while step is not None:
            self.steps += 1
            if self.steps > MAX_STEPS:
                raise Stopped(f"the case performed {MAX_STEPS} steps without reaching the end; the workflow "
                              "seems to loop forever on agent steps")
            report = self.perform(step, task_id)
            reply = self.service.step_complete(self.workflow_id, str(step["id"]), report.status, report.result,
                                               report.error, task_id)
            self.messages += reply.messages
            step, status, error = reply.next_step, reply.status, reply.error
        return status, error

    def perform(self, step: dict[str, Any], task_id: str | None) -> ScriptedAnswer:
        kind = step["type"]
        if kind in ("parallel_tasks", "wait"):
            listed = step["definition"].get("tasks") or [{"task_id": t} for t in step["definition"]["task_ids"]]
            for task in listed:
                self.run_task(str(task["task_id"]))
            return ScriptedAnswer("parallel", "success")
        scripted = self.book.take(step, task_id)
        if scripted is not None:
            return scripted
        if kind == "agent_shell_command":
            return self.run_command(step["definition"])
        who = f"task {task_id}" if task_id else "the main thread"
        raise Stopped(f"no answer for step {step['id']} ({kind}) of {who}: {self.book.missing_hint(step, task_id)}")

    def run_task(self, task_id: str) -> None:
        first = self.service.next_step(self.workflow_id, task_id)
        self.messages += first.messages
        self.drive(task_id, first.step, first.status, first.error)

    def run_command(self, definition: dict[str, Any]) -> ScriptedAnswer:
        """An agent shell command: answered by a stub when the case has `shell:`, else run."""
        command = str(definition.get("command") or "")
        if self.shell is not None:
            result = self.shell.run(command)
        else:  # in the step's own directory (inside the case's folder), as an agent must
            cwd = Path(definition.get("working_dir") or self.work_dir)
            result = run_shell(command, cwd, timeout_ms=definition.get("timeout"))
        return shell_answer(result.exit_code, result.stdout, result.stderr)


def run_case(service: WorkflowService, case: Case, workflow_file: Path, work_dir: Path,
             shell: StubShell | None, coverage: bool = False) -> CaseOutcome:
    """Run one case to its end and judge it."""
    started = time.perf_counter()
    outcome = CaseOutcome(case)
    agent = CaseAgent(service, case, shell, work_dir)
    try:
        outcome.status, outcome.error = agent.run(workflow_file)
    except Stopped as exc:
        outcome.status, outcome.stopped = "waiting", str(exc)
    except ServiceError as exc:  # said as the command line says it (`aromcp-workflows test` reports it)
        said = exc.said("cli")
        outcome.status, outcome.error = ("not_started", said) if not agent.workflow_id else ("error", said)
    outcome.workflow_id, outcome.messages = agent.workflow_id or None, agent.messages
    if agent.workflow_id:
        _read_end(service, outcome, coverage)
    outcome.unmatched = list(shell.unmatched) if shell is not None else []
    outcome.mismatches = compare(case.expect, outcome.status, outcome.error, outcome.state, outcome.messages)
    if agent.workflow_id and not outcome.passed:
        outcome.history = service.debug_info(agent.workflow_id).step_history[-HISTORY_TAIL:]
    outcome.duration_s = time.perf_counter() - started
    return outcome


def _read_end(service: WorkflowService, outcome: CaseOutcome, coverage: bool) -> None:
    """The instance as it ended: status (unless the case stopped it), error, state, coverage."""
    workflow_id = outcome.workflow_id or ""
    status = service.status(workflow_id)
    if outcome.stopped is None and outcome.status != "error":
        outcome.status, outcome.error = status.status, status.error
    state = service.state_read(workflow_id).state
    outcome.state = {k: v for k, v in state.items() if k != "inputs"}
    if coverage:
        outcome.coverage = service.coverage(workflow_id)
