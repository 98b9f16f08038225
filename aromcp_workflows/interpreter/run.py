"""`WorkflowRun`: one workflow instance on the program-counter machine.

Holds the bundle, the state stores, the threads (main + one per sub-agent task) and the
parallel groups, and answers the three questions the service asks: what is the next
step for this thread (`advance`), here is a shell command's result (`finish_shell`), and
here is the agent's result for a step (`complete`).  Everything it holds serialises to
JSON (`to_json`/`from_json`), so a restarted server continues exactly where it was.

The run never performs I/O itself: a `shell_command` comes back as a `ShellRequest` so
the caller can run it without holding the instance lock.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from aromcp_workflows.definition.loader import WorkflowBundle
from aromcp_workflows.definition.workflow import WorkflowDefinition
from aromcp_workflows.expressions import ExpressionEngine
from aromcp_workflows.interpreter.agent_steps import public
from aromcp_workflows.interpreter.compiler import ProgramSet, programs_for
from aromcp_workflows.interpreter.control import ControlFlow
from aromcp_workflows.interpreter.failures import Failures
from aromcp_workflows.interpreter.inputs import check_inputs
from aromcp_workflows.interpreter.outcomes import (
    Answer,
    Busy,
    Completion,
    RunError,
    ShellRequest,
    computed_specs,
    now_iso,
)
from aromcp_workflows.interpreter.parallel import ParallelSteps
from aromcp_workflows.interpreter.steps_exec import StepExecution
from aromcp_workflows.interpreter.thread import TERMINAL, Frame, Thread
from aromcp_workflows.masking import Masker, secret_values
from aromcp_workflows.state import StateStore

MAX_INSTRUCTIONS_PER_ADVANCE = 200_000


def process_alive(pid: Any) -> bool:
    """Whether the server process that started a shell command is still running it."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class WorkflowRun(ControlFlow, StepExecution, ParallelSteps, Failures):
    """A running (or finished) workflow instance."""

    def __init__(self, workflow_id: str, bundle: WorkflowBundle, engine: ExpressionEngine,
                 project_dir: Path, inputs: dict[str, Any]):
        self.workflow_id = workflow_id
        self.bundle = bundle
        self.engine = engine
        self.project_dir = Path(project_dir)
        self.inputs = inputs
        self.states: dict[str, StateStore] = {}
        self.state_workflows: dict[str, str] = {}  # state key -> definition name
        self.threads: dict[str, Thread] = {}
        self.groups: dict[str, dict[str, Any]] = {}
        self.status = "running"
        self.error: str | None = None
        self.counters: dict[str, int] = {}
        self.retries = 0
        self.events: list[dict[str, Any]] = []
        self.checkpoint_requested: str | None = None
        self._programs: dict[str, ProgramSet] = {}

    # -- construction and persistence ---------------------------------------------
    @classmethod
    def start(cls, workflow_id: str, bundle: WorkflowBundle, engine: ExpressionEngine,
              project_dir: Path, inputs: dict[str, Any] | None = None) -> WorkflowRun:
        """A new run: inputs checked (every problem at once), default state evaluated."""
        main = bundle.main.definition
        values = check_inputs(main.name, main.inputs, inputs or {})
        run = cls(workflow_id, bundle, engine, project_dir, values)
        run._begin()
        return run

    def _begin(self) -> None:
        main = self.bundle.main.definition
        self.states = {"main": self.new_state(main, self.inputs, "start")}
        self.state_workflows = {"main": main.name}
        prefix = f"attempt{self.retries + 1}." if self.retries else ""  # retry_workflow: fresh step ids
        self.threads = {"main": Thread("main", [Frame(main.name, "main", "main", prefix)])}
        self.groups = {}
        self.counters = {}
        self.record("started", data={"inputs": self.inputs, "attempt": self.retries + 1})

    def new_state(self, definition: WorkflowDefinition, inputs: dict[str, Any], trigger: str) -> StateStore:
        store = StateStore(self.engine, computed=computed_specs(definition), inputs=inputs)
        store.initialize(definition.default_state.model_dump())
        self.collect_traces(store, trigger)
        return store

    def programs(self, workflow: str) -> ProgramSet:
        cached = self._programs.get(workflow)
        if cached is None:
            cached = self._programs[workflow] = programs_for(self.bundle.get(workflow))
        return cached

    def to_json(self) -> dict[str, Any]:
        return {
            "workflow_id": self.workflow_id,
            "project_dir": str(self.project_dir),
            "inputs": self.inputs,
            "states": {key: store.snapshot() for key, store in self.states.items()},
            "state_workflows": self.state_workflows,
            "threads": {tid: thread.to_json() for tid, thread in self.threads.items()},
            "groups": self.groups,
            "status": self.status,
            "error": self.error,
            "counters": self.counters,
            "retries": self.retries,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], bundle: WorkflowBundle, engine: ExpressionEngine) -> WorkflowRun:
        run = cls(data["workflow_id"], bundle, engine, Path(data["project_dir"]), data["inputs"])
        run.state_workflows = data["state_workflows"]
        for key, snapshot in data["states"].items():
            definition = bundle.get(run.state_workflows[key])
            run.states[key] = StateStore.from_snapshot(engine, computed_specs(definition), snapshot)
        run.threads = {tid: Thread.from_json(t) for tid, t in data["threads"].items()}
        for thread in run.threads.values():
            pending = thread.pending
            if pending is not None and pending.kind == "shell" and not process_alive(pending.data.get("owner_pid")):
                thread.pending = None  # the server running it died mid-command: run it again (at least once)
        run.groups = data["groups"]
        run.status, run.error = data["status"], data["error"]
        run.counters, run.retries = data["counters"], data["retries"]
        return run

    # -- events -------------------------------------------------------------------
    def record(self, kind: str, step_id: str | None = None, task_id: str | None = None,
               data: dict[str, Any] | None = None) -> None:
        self.events.append({"kind": kind, "step_id": step_id, "task_id": task_id,
                            "timestamp": now_iso(), "data": data or {}})

    def drain_events(self) -> list[dict[str, Any]]:
        events, self.events = self.events, []
        return events

    def collect_traces(self, store: StateStore, trigger: str) -> None:
        for trace in store.drain_traces():
            self.record("transform_trace", data={**trace, "trigger": trace.get("trigger") or trigger})

    # -- the API the service drives ------------------------------------------------
    def thread(self, thread_id: str | None) -> Thread:
        tid = thread_id or "main"
        if tid not in self.threads:
            tasks = [t for t in self.threads if t != "main"]
            hint = f"; this instance's tasks: {', '.join(tasks[:20])}" if tasks else "; this instance has no sub-agent tasks yet"
            raise RunError(f"unknown task_id {tid!r} for workflow {self.workflow_id}{hint}")
        return self.threads[tid]

    def advance(self, thread_id: str | None = None) -> Answer | ShellRequest | Busy:
        """Run server-side instructions until the thread needs the agent, a shell, or ends."""
        thread = self.thread(thread_id)
        if thread.status == "pending":
            thread.status = "running"
            self.record("task_started", task_id=thread.thread_id)
        for _ in range(MAX_INSTRUCTIONS_PER_ADVANCE):
            if thread.done:
                return self.final_answer(thread)
            if thread.pending is not None:
                if thread.pending.kind == "shell":
                    return Busy(thread.thread_id)
                return self.pending_answer(thread)
            if not thread.frames:
                self.thread_finished(thread)
                continue
            outcome = self.execute(thread)
            if outcome is not None:
                return outcome
        self.fail(thread, thread.frames[-1].program if thread.frames else None,
                  f"advanced {MAX_INSTRUCTIONS_PER_ADVANCE} instructions without reaching an agent "
                  "step; the workflow seems to loop forever on server-side steps")
        return self.final_answer(thread)

    def pending_answer(self, thread: Thread) -> Answer:
        pending = thread.pending
        assert pending is not None
        step = self.parallel_step(thread) if pending.kind == "parallel" else pending.step
        return Answer(self.status_for(thread), public(step), list(pending.messages),
                      thread_id=thread.thread_id)

    def final_answer(self, thread: Thread) -> Answer:
        return Answer(self.status_for(thread), None, list(thread.final_messages),
                      thread.error if thread.status == "failed" else None, thread.thread_id)

    def status_for(self, thread: Thread) -> str:
        if thread.thread_id == "main":
            return self.status
        return thread.status

    def thread_finished(self, thread: Thread) -> None:
        """A thread ran out of frames: it is complete (or failed, when it was cleaning up)."""
        thread.final_messages, thread.outbox = thread.outbox, []
        failed = thread.failing is not None
        thread.status = "failed" if failed else "completed"
        if failed:
            thread.error = thread.error or thread.failing.get("message")  # type: ignore[union-attr]
        self.record("task_finished" if thread.thread_id != "main" else "finished",
                    task_id=None if thread.thread_id == "main" else thread.thread_id,
                    data={"status": thread.status, "error": thread.error})
        if thread.thread_id == "main":
            self.set_status(thread.status, thread.error)

    def set_status(self, status: str, error: str | None = None) -> None:
        if error:  # stored and listed everywhere (status lists): never with a secret in it
            error = Masker(secret_values(self.inputs, *(s.flattened() for s in self.states.values()))).mask_text(error)
        if self.status != status:
            self.record("status_changed", data={"from": self.status, "to": status, "error": error})
        self.status, self.error = status, error
        if status in TERMINAL:
            for other in self.threads.values():
                if other.thread_id != "main" and not other.done and status == "cancelled":
                    other.status = "cancelled"

    def cancel(self, status: str = "cancelled") -> None:
        main = self.threads["main"]
        main.pending, main.frames = None, []
        main.status = "cancelled" if status == "cancelled" else status
        for thread in self.threads.values():
            if not thread.done:
                thread.status, thread.pending, thread.frames = "cancelled", None, []
        self.set_status(status)

    def finish_shell(self, request: ShellRequest, result: Any) -> Answer | ShellRequest | Busy:
        thread = self.thread(request.thread_id)
        follow_up = self.shell_finished(thread, request, result)
        if follow_up is not None:
            return follow_up
        return self.advance(thread.thread_id)

    def complete(self, thread_id: str | None, step_id: str, status: str = "success",
                 result: Any = None, error: str | None = None) -> Completion:
        """Record the agent's result for the step it was given; say whether it was accepted."""
        thread = self.thread(thread_id)
        pending = thread.pending
        if pending is None or (pending.step_id != step_id and not self.is_wait_of(pending, step_id)):
            if step_id in thread.completed_ids:
                return Completion(True)  # completing twice is harmless
            if thread.done:
                who = "the workflow" if thread.thread_id == "main" else f"task {thread.thread_id}"
                return Completion(False, f"{who} is already {thread.status}; step {step_id} was not recorded "
                                         "and there is nothing more to do")
            return self.unknown_step(thread, step_id)
        if pending.kind == "parallel":
            return self.complete_parallel(thread, pending)
        if pending.kind == "shell":
            return Completion(False, f"step {step_id} is a server-side command that is still running; "
                              "call workflow_get_next_step again in a moment", advance=False)
        return self.complete_agent_step(thread, pending, status, result, error)

    def unknown_step(self, thread: Thread, step_id: str) -> Completion:
        current = thread.pending.step_id if thread.pending else None
        if current is None:
            raise RunError(f"step_id {step_id!r} was never delivered to "
                           f"{'the main thread' if thread.thread_id == 'main' else 'task ' + thread.thread_id}"
                           f" of workflow {self.workflow_id}; call workflow_get_next_step to get the current step")
        raise RunError(f"step_id {step_id!r} is not the current step of "
                       f"{'the main thread' if thread.thread_id == 'main' else 'task ' + thread.thread_id}; "
                       f"the current step is {current!r}: complete that one (workflow_get_next_step shows it)")
