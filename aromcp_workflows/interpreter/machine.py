"""The machine's data, and the explicit context every instruction handler receives.

`Machine` is one instance as plain data: the definitions it runs, its state stores, its
threads (main + one per sub-agent task), its parallel groups and the `Journal` of effects
not yet performed.  `Ctx` is what a handler is given: the machine, the thread and the
frame the instruction belongs to, with the few operations every handler needs (render a
template, test a condition, write state, record an event).  Handlers import this module
and never the loop in `run.py`, so the interpreter has no import circle.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from aromcp_workflows.definition import (
    BoolOrTemplate,
    SecretFields,
    Step,
    StepBase,
    WorkflowBundle,
    WorkflowDefinition,
    computed_specs,
    secret_fields,
)
from aromcp_workflows.expressions import MISSING, ExpressionEngine, js_truthy
from aromcp_workflows.interpreter.agent_steps import public
from aromcp_workflows.interpreter.compiler import ProgramSet, programs_for
from aromcp_workflows.interpreter.effects import (
    EVENT_KINDS,
    Answer,
    CheckpointRequest,
    Event,
    Journal,
    RunError,
    now_iso,
)
from aromcp_workflows.interpreter.program import Instruction, Run
from aromcp_workflows.interpreter.thread import TERMINAL, Frame, LoopFrame, Thread, ThreadTable
from aromcp_workflows.safety import Masker, SecretIndex
from aromcp_workflows.state import StateError, StateTiers, Update, UpdateResult

S = TypeVar("S", bound=StepBase)
DEFAULT_SUB_AGENT_PROMPT = (
    "You are a workflow sub-agent for workflow {workflow_id}, task {task_id}. Call "
    "workflow_get_next_step(workflow_id, task_id), do exactly what the step says, report it "
    "with workflow_step_complete(workflow_id, step_id, result, task_id) and continue with the "
    "next_step in that answer until it is null. Never decide control flow yourself."
)


class StepFailed(Exception):
    """A step could not be carried out; the message says why (for the failure answer)."""


class Machine:
    """One workflow instance as data, with the bookkeeping every handler shares; the
    `WorkflowRun` that drives it has it (`run.machine`)."""

    def __init__(self, workflow_id: str, bundle: WorkflowBundle, engine: ExpressionEngine,
                 project_dir: Path, inputs: dict[str, Any], sub_agent_prompt: str | None = None):
        self.workflow_id = workflow_id
        self.bundle = bundle
        self.engine = engine
        self.project_dir = Path(project_dir)
        self.inputs = inputs
        self._sub_agent_prompt = sub_agent_prompt  # the shared text; filled in only when asked for
        self.states: dict[str, StateTiers] = {}
        self.state_workflows: dict[str, str] = {}  # state key -> definition name
        self.threads = ThreadTable()
        self.groups: dict[str, dict[str, Any]] = {}
        self.status = "running"
        self.error: str | None = None
        self.counters: dict[str, int] = {}
        self.retries = 0
        self.forked_from: dict[str, Any] | None = None  # a fork: the instance and point it was made from
        self.owners: dict[str, dict[str, dict[str, str]]] = {}  # state key -> path -> the user's answer (ownership.py)
        self.last_calls: dict[str, str] = {}  # thread id -> an agent's last call for it (stored by commits that write)
        self.trace_context: dict[str, Any] | None = None  # tracing's (observe/context.py), kept as it is
        self.journal = Journal()
        self._programs: dict[str, ProgramSet] = {}
        self.tracked_fields: dict[str, frozenset[str]] = {}  # tracking.py: declared per definition
        self._secrets = SecretIndex()  # masker(): re-walks only the state values that changed
        self._secret_fields: dict[str, SecretFields] = {}  # by definition name

    @property
    def sub_agent_prompt(self) -> str:
        """The prompt for this instance's sub-agents (built on demand: kept per instance, the
        filled-in text cost 2.3 KB of every waiting instance)."""
        return (self._sub_agent_prompt or DEFAULT_SUB_AGENT_PROMPT).replace("{workflow_id}", self.workflow_id)

    # -- definitions and state ----------------------------------------------------------
    def programs(self, workflow: str) -> ProgramSet:
        cached = self._programs.get(workflow)
        if cached is None:
            cached = self._programs[workflow] = programs_for(self.bundle.get(workflow))
        return cached

    def reset_definitions(self) -> None:
        """Forget what was worked out from the bundle (it was replaced: a migration)."""
        self._programs = {}
        self.tracked_fields = {}

    def instruction(self, frame: Frame) -> Instruction:
        return self.programs(frame.workflow)[frame.program].instructions[frame.pc]

    def step_at(self, frame: Frame) -> Step:
        """The step model of the `Run` instruction the frame stands on."""
        ins = self.instruction(frame)
        assert isinstance(ins, Run)
        return ins.step

    def step_as(self, frame: Frame, kind: type[S]) -> S:
        """The step the frame stands on, known to be of `kind` (a thread waits on the step it
        was handed; another kind there is a bug in the run's own bookkeeping)."""
        step = self.step_at(frame)
        if not isinstance(step, kind):
            raise StepFailed(f"step {step.id or frame.pc} is a {step.type} step, where a {kind.__name__} was "
                             "expected; report this as a bug")
        return step

    def new_state(self, definition: WorkflowDefinition, inputs: dict[str, Any], trigger: str) -> StateTiers:
        store = StateTiers(self.engine, computed=computed_specs(definition), inputs=inputs)
        store.initialize(definition.default_state.model_dump())
        self.collect_traces(store, trigger)
        return store

    def begin(self) -> None:
        """Fresh state and a main thread at the first step (start, and `retry_workflow`)."""
        main = self.bundle.main.definition
        self.states = {"main": self.new_state(main, self.inputs, "start")}
        self.state_workflows = {"main": main.name}
        prefix = f"attempt{self.retries + 1}." if self.retries else ""  # retry_workflow: fresh step ids
        self.threads = ThreadTable({"main": Thread("main", [Frame(main.name, "main", "main", prefix)])})
        self.groups = {}
        self.counters = {}
        main_state = self.states["main"]
        self.record("started", data={"inputs": self.inputs, "attempt": self.retries + 1,
                                     "state": {"raw": main_state.raw, "state": main_state.state,
                                               "computed": main_state.computed}})

    # -- the journal: effects for the instance layer ---------------------------------------
    def record(self, kind: str, step_id: str | None = None, task_id: str | None = None,
               data: dict[str, Any] | None = None) -> None:
        assert kind in EVENT_KINDS, f"unknown history event kind {kind!r}: add it to effects.EVENT_KINDS"
        self.journal.events.append(Event(kind, step_id, task_id, now_iso(), data or {}))

    def state_changed(self, step_id: str | None, task_id: str | None, result: UpdateResult, state_key: str,
                      by: str | None = None) -> None:
        """The `state_changed` event of one applied batch: the paths it changed and what it
        wrote there (`UpdateResult.writes`), so the state after any step can be shown again."""
        data: dict[str, Any] = {"paths": result.changed_paths, "computed_changed": sorted(result.computed_changed),
                                "writes": result.writes}
        if state_key != "main":
            data["state"] = state_key
        if by is not None:
            data["by"] = by
        self.record("state_changed", step_id, task_id, data)

    def collect_traces(self, store: StateTiers, trigger: str) -> None:
        for trace in store.drain_traces():
            self.record("transform_trace", data={**trace, "trigger": trace.get("trigger") or trigger})

    def request_checkpoint(self, reason: str) -> None:
        self.journal.checkpoints.append(CheckpointRequest(reason))

    def take_journal(self) -> Journal:
        journal, self.journal = self.journal, Journal()
        return journal

    # -- threads and status -------------------------------------------------------------
    def thread(self, thread_id: str | None) -> Thread:
        tid = thread_id or "main"
        if tid not in self.threads:
            tasks = [t for t in self.threads if t != "main"]
            hint = (f"; this instance's tasks: {', '.join(tasks[:20])}" if tasks
                    else "; this instance has no sub-agent tasks yet")
            raise RunError(f"unknown task_id {tid!r} for workflow {self.workflow_id}{hint}")
        return self.threads[tid]

    def status_for(self, thread: Thread) -> str:
        return self.status if thread.thread_id == "main" else thread.status

    def answer(self, thread: Thread, step: dict[str, Any] | None) -> Answer:
        """The answer for a thread's pending step, with the messages that come before it."""
        messages = list(thread.pending.messages) if thread.pending is not None else []
        return Answer(self.status_for(thread), public(step), messages, thread_id=thread.thread_id)

    def final_answer(self, thread: Thread) -> Answer:
        return Answer(self.status_for(thread), None, list(thread.final_messages),
                      thread.error if thread.status == "failed" else None, thread.thread_id)

    def thread_finished(self, thread: Thread) -> None:
        """A thread ran out of frames: it is complete (or failed, when it was cleaning up)."""
        thread.final_messages, thread.outbox = thread.outbox, []
        failed = thread.failing is not None
        thread.status = "failed" if failed else "completed"
        if failed and thread.failing is not None:
            thread.error = thread.error or thread.failing.get("message")
        is_main = thread.thread_id == "main"
        self.record("finished" if is_main else "task_finished", task_id=None if is_main else thread.thread_id,
                    data={"status": thread.status, "error": thread.error})
        if is_main:
            self.set_status(thread.status, thread.error)

    def set_status(self, status: str, error: str | None = None) -> None:
        if error:  # stored and listed everywhere (status lists): never with a secret in it
            error = self.masker().mask_text(error)
        if self.status != status:
            self.record("status_changed", data={"from": self.status, "to": status, "error": error})
        self.status, self.error = status, error
        if status == "cancelled":
            for other in self.threads.values():
                if other.thread_id != "main" and not other.done:
                    other.status = "cancelled"

    def masker(self) -> Masker:
        """Masks the secrets of the inputs, of every tier of every state (each tier on its own,
        so a `state` value shadowed by `raw` is masked too) and of sub-agent tasks' inputs:
        declared ones and computed fields fed by them whole, strings under sensitive names.
        Incremental: only top-level values replaced since the last call are walked."""
        main_name = self.bundle.main.definition.name
        main = self.secret_fields(main_name)
        roots: list[Any] = [self.inputs]
        declared: list[frozenset[str]] = [main.inputs]
        keys, task_inputs = set(main.names), set(main.task_inputs)
        for key, store in self.states.items():
            fields = self.secret_fields(self.state_workflows.get(key, main_name))
            roots += [store.raw, store.state, store.computed, store.inputs]
            declared += [fields.raw, fields.state, fields.computed, fields.inputs]
            keys |= fields.names
            task_inputs |= fields.task_inputs
        for thread in self.threads.values():
            if isinstance(thread.context.get("task"), dict):
                roots.append(thread.context["task"])
                declared.append(frozenset(task_inputs))
        return Masker(self._secrets.secrets(*roots, declared=declared), keys)

    def secret_fields(self, workflow: str) -> SecretFields:
        """The fields of a workflow this instance runs that are secret whole (declared, or fed by a secret)."""
        found = self._secret_fields.get(workflow)
        if found is None:
            found = self._secret_fields[workflow] = secret_fields(self.bundle.get(workflow))
        return found

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL


@dataclass
class Ctx:
    """What one instruction handler works with: the machine, its thread and frame."""

    m: Machine
    thread: Thread
    frame: Frame

    @property
    def task(self) -> str | None:
        """The task id for history events (None on the main thread)."""
        return None if self.thread.thread_id == "main" else self.thread.thread_id

    def delivered_id(self, qualified_id: str, outer_only: bool = False) -> str:
        """Unique per delivery: `fix_loop.run_lint#2` in the loop's second iteration.
        `outer_only` leaves out the innermost loop (a loop's own checks are named by the loop)."""
        loops = self.frame.loops[:-1] if outer_only else self.frame.loops
        suffix = ".".join(str(loop.iteration) for loop in loops)
        return f"{self.frame.id_prefix}{qualified_id}" + (f"#{suffix}" if suffix else "")

    def record(self, kind: str, step_id: str | None, data: dict[str, Any] | None = None) -> None:
        self.m.record(kind, step_id, self.task, data)

    # -- expressions --------------------------------------------------------------------
    def scope(self, extra: dict[str, Any] | None = None) -> Mapping[str, Any]:
        """What templates of this frame can read: state, loop, task and error variables."""
        thread, frame = self.thread, self.frame
        variables: dict[str, Any] = {"workflow_id": self.m.workflow_id}
        if thread.context and frame.role in ("body", "cleanup") and frame.program.startswith(("task:", "cleanup:")):
            variables.update(thread.context)
        for loop in frame.loops:  # outer loops first, so the innermost loop's names win
            variables.update(loop_variables(loop))
        if thread.failing is not None and frame.role in ("on_failure", "cleanup"):
            variables["error"] = thread.failing
        if extra:
            variables.update(extra)
        return self.m.states[frame.state_key].scope(variables)

    def render(self, value: Any, origin: str, extra: dict[str, Any] | None = None) -> Any:
        return self.m.engine.render(value, self.scope(extra), origin=origin)

    def render_command(self, fields: dict[str, Any], command: str, origin: str) -> tuple[Any, str]:
        """A step's fields and its shell-quoted command, rendered in one engine call."""
        rendered, quoted = self.m.engine.render_with_command(fields, command, self.scope(), origin)
        return rendered, quoted

    def truthy(self, condition: BoolOrTemplate, step_id: str, branches: tuple[str, str] | None = None,
               own_loop: bool = False, record_false: bool = True) -> bool:
        """A condition's JavaScript truthiness; with `branches` (taken, not taken) the check,
        its value and the branch taken go to the history for `workflow_debug_info` (a false
        one only with `record_false`: a `when` guard records its skip itself)."""
        origin = f"condition of step {step_id}"
        if isinstance(condition, str) and "{{" not in condition:
            value = self.m.engine.evaluate(condition, self.scope(), origin=origin)
        else:
            value = self.render(condition, origin)
        truth = js_truthy(value)
        if branches is not None and (truth or record_false):
            data = {"value": _shown(value), "branch": branches[0 if truth else 1]}  # the text is in the definition
            if own_loop:
                data["iteration"] = self.frame.loops[-1].iteration
            self.record("condition_checked", self.delivered_id(step_id, outer_only=own_loop), data)
        return truth

    # -- state ----------------------------------------------------------------------------
    def write(self, updates: list[tuple[str, Any, Any]], trigger: str) -> None:
        """Apply updates atomically to the frame's state; a refusal fails the step."""
        store = self.m.states[self.frame.state_key]
        try:
            result = store.apply([Update(path=p, operation=o, value=v) for p, o, v in updates], trigger=trigger)
        except StateError as exc:
            self.m.collect_traces(store, trigger)
            raise StepFailed(str(exc)) from None
        self.m.collect_traces(store, trigger)
        self.m.state_changed(trigger.removeprefix("step "), self.task, result, self.frame.state_key)


def _shown(value: Any, limit: int = 120) -> Any:
    """A condition's value as the history keeps it: JSON-safe, `undefined` as None, short."""
    if value is MISSING:
        return None
    text = json.dumps(value, default=str)
    return value if len(text) <= limit else text[:limit] + f"… ({len(text)} chars)"


def loop_variables(loop: LoopFrame) -> dict[str, Any]:
    """`item`/`index`/`loop` of a loop frame (a while loop has only `loop`)."""
    info = {"index": loop.index, "iteration": loop.iteration, "first": loop.iteration == 1,
            "last": loop.items is not None and loop.index == len(loop.items) - 1}
    if loop.kind == "foreach" and loop.items is not None and 0 <= loop.index < len(loop.items):
        names = {"item": loop.items[loop.index], "index": loop.index, "loop": info}
        if loop.item_name:
            names[loop.item_name] = names["item"]
        if loop.index_name:
            names[loop.index_name] = loop.index
        return names
    return {"loop": info}
