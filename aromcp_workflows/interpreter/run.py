"""`WorkflowRun`: the loop over the program counter, and the API the instance layer drives.

`advance` runs one thread: it looks up the instruction at the frame's `pc`, calls its
handler from `HANDLERS` with an explicit `Ctx`, and stops at the first effect the caller
must perform (`Answer`: hand a step out; `ShellRequest`: run a command; `Busy`: another
caller is running this thread's command).  A `Fail` returned (or raised) by a handler is
applied on the spot by `failures.fail`.  The rest of what a call did — history events,
checkpoints — waits in the machine's `Journal` for the instance layer's commit.

Everything a run holds serialises to JSON (`to_json`/`from_json`), so a restarted server
continues exactly where it was.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from aromcp_workflows.definition import WorkflowBundle, computed_specs
from aromcp_workflows.expressions import ExpressionEngine, ExpressionError
from aromcp_workflows.interpreter import control, delivery, ownership, parallel, rewind, shell_steps, steps, tracking
from aromcp_workflows.interpreter.claim import ShellClaim
from aromcp_workflows.interpreter.effects import (
    Answer,
    Busy,
    Completion,
    Journal,
    Outcome,
    RunError,
    ShellRequest,
    now_iso,
)
from aromcp_workflows.interpreter.failures import Fail, fail
from aromcp_workflows.interpreter.inputs import check_inputs
from aromcp_workflows.interpreter.machine import Ctx, Machine, StepFailed
from aromcp_workflows.interpreter.output import ShellResult
from aromcp_workflows.interpreter.ownership import Writer
from aromcp_workflows.interpreter.program import Break, Continue, Exit, Jump, JumpUnless, LoopEnter, LoopNext, Run
from aromcp_workflows.interpreter.rewind import FailedStep
from aromcp_workflows.interpreter.thread import Thread, ThreadTable, frame_from_json
from aromcp_workflows.safety import Masker
from aromcp_workflows.state import StateTiers, Update, UpdateResult

MAX_INSTRUCTIONS_PER_ADVANCE = 200_000
InstructionHandler = Callable[[Ctx, Any], control.Effect]

HANDLERS: dict[type, InstructionHandler] = {
    Run: steps.run,
    JumpUnless: control.jump_unless,
    Jump: control.jump,
    LoopEnter: control.enter_loop,
    LoopNext: control.next_iteration,
    Break: control.break_,
    Continue: control.continue_,
    Exit: control.exit_,
}


class WorkflowRun:
    """A running (or finished) workflow instance: its `machine` (the data, and what every
    handler may do to it, `machine.py`) driven by the loop over the program counter here.

    The run *has* its machine.  What a caller looks at (its id, definition, status, error,
    states, threads) reads straight through; the rest is `run.machine`'s."""

    def __init__(self, machine: Machine):
        self.machine = machine

    @property
    def workflow_id(self) -> str:
        return self.machine.workflow_id

    @property
    def bundle(self) -> WorkflowBundle:
        return self.machine.bundle

    @property
    def status(self) -> str:
        return self.machine.status

    @property
    def error(self) -> str | None:
        return self.machine.error

    @property
    def states(self) -> dict[str, StateTiers]:
        return self.machine.states

    @property
    def threads(self) -> ThreadTable:
        return self.machine.threads

    @property
    def finished(self) -> bool:
        return self.machine.finished

    def masker(self) -> Masker:
        return self.machine.masker()

    def take_journal(self) -> Journal:
        return self.machine.take_journal()

    def set_status(self, status: str, error: str | None = None) -> None:
        self.machine.set_status(status, error)

    @classmethod
    def start(cls, workflow_id: str, bundle: WorkflowBundle, engine: ExpressionEngine, project_dir: Path,
              inputs: dict[str, Any] | None = None, sub_agent_prompt: str | None = None) -> WorkflowRun:
        """A new run: inputs checked (every problem at once), default state evaluated."""
        main = bundle.main.definition
        values = check_inputs(main.name, main.inputs, inputs or {})
        machine = Machine(workflow_id, bundle, engine, project_dir, values, sub_agent_prompt)
        machine.begin()
        return cls(machine)

    # -- the loop -----------------------------------------------------------------------
    def advance(self, thread_id: str | None = None) -> Outcome:
        """Run server-side instructions until the thread needs the agent, a shell, or ends."""
        thread = self.machine.thread(thread_id)
        if thread.status == "pending":
            thread.status = "running"
            self.machine.record("task_started", task_id=thread.thread_id)
        for _ in range(MAX_INSTRUCTIONS_PER_ADVANCE):
            if thread.done:
                if thread.status == "failed" and thread.group:
                    parallel.task_failed(self.machine, thread)
                return self.machine.final_answer(thread)
            if thread.pending is not None:
                return self.pending_outcome(thread)
            if not thread.frames:
                self.machine.thread_finished(thread)
                continue
            outcome = self.execute(thread)
            if outcome is not None:
                return outcome
        self.fail_with(thread, Fail(None, f"advanced {MAX_INSTRUCTIONS_PER_ADVANCE} instructions without reaching "
                                          "an agent step; the workflow seems to loop forever on server-side steps"))
        return self.machine.final_answer(thread)

    def execute(self, thread: Thread) -> Outcome | None:
        """One instruction: its handler's effect, with a failure applied on the spot."""
        frame = thread.frames[-1]
        ctx = Ctx(self.machine, thread, frame)
        program = self.machine.programs(frame.workflow)[frame.program]
        if frame.pc >= len(program.instructions):
            return self.run_handler(ctx, None, lambda: control.frame_finished(ctx))
        ins = program.instructions[frame.pc]
        return self.run_handler(ctx, ctx.delivered_id(ins.step_id), lambda: HANDLERS[type(ins)](ctx, ins))

    def run_handler(self, ctx: Ctx, step_id: str | None, action: Callable[[], control.Effect]) -> Outcome | None:
        try:
            effect = action()
        except (ExpressionError, StepFailed) as exc:
            effect = Fail(step_id, str(exc))
        if isinstance(effect, Fail):
            self.fail_with(ctx.thread, effect)
            return None
        return effect

    def fail_with(self, thread: Thread, failure: Fail) -> None:
        fail(self.machine, thread, failure)

    def pending_outcome(self, thread: Thread) -> Outcome:
        """What a thread that is waiting on a step answers: the step again, or Busy."""
        pending = thread.pending
        assert pending is not None
        if pending.kind == "shell":
            return shell_steps.busy(thread)
        if pending.kind == "parallel":
            return self.machine.answer(thread, parallel.parallel_step(Ctx(self.machine, thread, thread.frames[-1])))
        return self.machine.answer(thread, pending.step)

    def note_call(self, thread_id: str | None) -> None:
        """An agent called for this thread now (its steps are in hand): what `status` judges a
        stalled run by.  Kept in memory, and stored only with a commit that writes anyway
        (`instances.commits`): a call that changes nothing writes nothing."""
        self.machine.last_calls[thread_id or "main"] = now_iso()

    # -- results from outside -----------------------------------------------------------------
    def finish_shell(self, request: ShellRequest, result: ShellResult,
                     owner: Mapping[str, Any] | None = None) -> Outcome:
        """A command's result: stored (or its `on_error` applied), then the thread goes on.
        With `owner`, only while that runner still holds the command's claim (another adopted
        it after its lease ran out: its result, of the same run, is the one kept)."""
        thread = self.machine.thread(request.thread_id)
        pending = thread.pending
        if (pending is None or pending.kind != "shell" or pending.step_id != request.step_id
                or (owner is not None and not shell_steps.claimed_by(thread, request.step_id, owner))):
            return self.advance(thread.thread_id)  # stale result (the instance moved on, e.g. cancelled)
        ctx = Ctx(self.machine, thread, thread.frames[-1])
        follow_up = self.run_handler(ctx, request.step_id, lambda: shell_steps.shell_finished(ctx, request, result))
        return follow_up if follow_up is not None else self.advance(thread.thread_id)

    def busy_shell(self, thread_id: str | None) -> Busy | None:
        """The thread's server-side command in flight, with its claim (None: it waits on none)."""
        thread = self.machine.thread(thread_id)
        return shell_steps.busy(thread) if thread.pending is not None and thread.pending.kind == "shell" else None

    def shells_in_flight(self) -> list[Busy]:
        """Every thread's server-side command in flight, with its claim (cancel stops them)."""
        return [shell_steps.busy(thread) for thread in self.threads.values()
                if thread.pending is not None and thread.pending.kind == "shell"]

    def claim_shell(self, thread_id: str, step_id: str, claim: ShellClaim) -> bool:
        """Record who runs a pending command (owner, lease): the instance layer's data."""
        return shell_steps.claim(self.machine.thread(thread_id), step_id, claim)

    def renew_shell(self, thread_id: str, step_id: str, owner: Mapping[str, Any], lease_until: float) -> bool:
        """Extend the lease of the runner that still owns the command; False if it does not."""
        return shell_steps.renew(self.machine.thread(thread_id), step_id, owner, lease_until)

    def adopt_shell(self, thread_id: str, step_id: str, expected: ShellClaim, claim: ShellClaim,
                    reason: str) -> bool:
        """Adopt a command whose runner is gone (or whose lease ran out) without running it
        again: `claim` names the new runner.  Only while its claim is still `expected`."""
        thread = self.machine.thread(thread_id)
        if not shell_steps.adopt(thread, step_id, expected, claim):
            return False
        self.machine.record("shell_adopted", step_id, None if thread_id == "main" else thread_id,
                    {"reason": f"{reason}; its result is taken from where it still runs (it does not run again)"})
        return True

    def release_shell(self, thread_id: str, step_id: str, reason: str = "the process running the command is gone",
                      expected: ShellClaim | None = None) -> bool:
        """Forget a shell step whose command is running nowhere (its runner died): it will run
        again.  With `expected`, only if its claim is still the one judged abandoned."""
        thread = self.machine.thread(thread_id)
        if shell_steps.releasable(thread, step_id, expected) is None:
            return False
        thread.pending = None
        self.machine.record("shell_released", step_id, None if thread_id == "main" else thread_id,
                    {"reason": f"{reason}; it runs again (at least once)"})
        return True

    def complete(self, thread_id: str | None, step_id: str, status: str = "success",
                 result: Any = None, error: str | None = None, may_answer_user: bool = True,
                 by: Writer = "agent") -> Completion:
        """Record the agent's result for the step it was given; say whether it was accepted.

        `may_answer_user=False`: the server asks the user this caller's `user_input`
        questions itself, so a result for one is the agent answering for the user: refused.
        `by`: who gave the result (an answer to a question is kept as theirs: ownership.py)."""
        thread = self.machine.thread(thread_id)
        pending = thread.pending
        if pending is None or (pending.step_id != step_id and not parallel.is_wait_of(pending, step_id)):
            if by in ("user", "person") and step_id in thread.completed_ids:  # a question answered already
                return Completion(False, f"step {step_id} was answered already; this answer was not recorded")
            if step_id in thread.completed_ids or shell_steps.waited_on(thread, step_id):
                return Completion(True)  # the agent completing twice, or a command's wait step, is harmless
            if thread.done:
                who = "the workflow" if thread.thread_id == "main" else f"task {thread.thread_id}"
                return Completion(False, f"{who} is already {thread.status}; step {step_id} was not recorded "
                                         "and there is nothing more to do")
            return self.unknown_step(thread, step_id)
        ctx = Ctx(self.machine, thread, thread.frames[-1])
        if pending.kind == "parallel":
            return parallel.complete_parallel(ctx, pending)
        if pending.kind == "shell":
            return Completion(False, f"step {step_id} is a server-side command that is still running; "
                              "call workflow_get_next_step again in a moment", advance=False)
        if delivery.asks_user(pending) and (not may_answer_user or (by == "agent" and delivery.in_form(pending))):
            return delivery.user_is_asked(pending)
        return delivery.complete(ctx, pending, status, result, error, by)

    def asking_user(self, thread_id: str | None, step_id: str, asking: bool = True) -> bool:
        """The question `step_id` is put to the user in a form now: from here on only their
        answer (or a person's) completes it, whichever session an agent calls from."""
        pending = self.machine.thread(thread_id).pending
        return pending is not None and pending.step_id == step_id and delivery.note_in_form(pending, asking)

    def unknown_step(self, thread: Thread, step_id: str) -> Completion:
        where = "the main thread" if thread.thread_id == "main" else f"task {thread.thread_id}"
        current = thread.pending.step_id if thread.pending else None
        if current is None:
            raise RunError(f"step_id {step_id!r} was never delivered to {where} of workflow "
                           f"{self.machine.workflow_id}; call workflow_get_next_step to get the current step")
        raise RunError(f"step_id {step_id!r} is not the current step of {where}; the current step is "
                       f"{current!r}: complete that one (workflow_get_next_step shows it)", kind="conflict")

    def agent_update(self, task_id: str | None, updates: list[Update], by: Writer = "agent",
                     trigger: str = "workflow_state_update") -> UpdateResult:
        """`workflow_state_update`: state written from outside the steps (same rules as steps).
        The agent never writes a path the user decided (`ownership.UserOwned`); the person at
        the CLI or the page may.  `trigger` names the road (`fork` for a fork's edits)."""
        key = self.state_key(task_id)
        if by == "agent":
            ownership.refuse_agent_writes(self.machine.owners, key, updates)
        store = self.machine.states[key]
        result = store.apply(updates, trigger=trigger)
        self.machine.collect_traces(store, trigger)
        self.machine.state_changed(None, task_id, result, key, by="agent" if trigger == "workflow_state_update"
                                   else trigger)
        return result

    def state_for(self, task_id: str | None) -> StateTiers:
        """The state a thread reads and writes (a task shares its workflow's state)."""
        return self.machine.states[self.state_key(task_id)]

    def state_key(self, task_id: str | None) -> str:
        """Which state a thread reads and writes: its innermost frame's (an include has its own)."""
        if task_id is None:
            return "main"
        thread = self.machine.thread(task_id)
        return thread.frames[-1].state_key if thread.frames else "main"

    def retry_failed(self) -> bool:
        """`on_resume: retry_failed_steps`: a failed instance goes back to the step that failed
        (its failed sub-agent tasks queued again); completed steps are not run again."""
        main = self.machine.threads["main"]
        if self.machine.status != "failed" or not main.failed_at:
            return False
        main.frames = [frame_from_json(f) for f in main.failed_at]
        main.failing = main.error = main.failed_at = None
        main.pending, main.status = None, "running"
        frame = main.frames[-1]
        ins = self.machine.instruction(frame)
        if isinstance(ins, Run) and ins.step.type == "parallel_foreach":  # failed tasks run again
            group = self.machine.groups.get(Ctx(self.machine, main, frame).delivered_id(ins.step_id))
            failed = [t for t in (group or {}).get("task_ids", [])
                      if self.machine.threads[t].status in ("failed", "cancelled")]
            for task_id in failed:
                parallel.reset_task(self.machine, task_id, frame, ins.step)
            if group is not None and failed:
                group["queue"], group["stopped"] = failed, False
        if self.machine.bundle.main.definition.on_resume.reset_error_counts:
            tracking.reset_counts(self.machine, main)
        self.machine.record("workflow_retry", None, None, {"reason": "on_resume: retry_failed_steps"})
        self.machine.set_status("running")
        return True

    # -- repairing: retry and fork (rewind.py) ---------------------------------------------
    def rewind(self, step_id: str) -> str:
        """The thread whose pending step is `step_id` put back before it (its id); RunError
        when no thread has that step handed out."""
        for thread in self.machine.threads.values():
            if thread.pending is not None and thread.pending.step_id == step_id:
                rewind.rewind(self.machine, thread)
                return thread.thread_id
        raise RunError(f"step {step_id!r} is not handed out in workflow {self.machine.workflow_id}")

    def rewind_agent_steps(self) -> list[str]:
        return rewind.rewind_agent_steps(self.machine)

    def failed_step(self) -> FailedStep | None:
        return rewind.failed_step(self.machine)

    def reopen_failed(self, states: dict[str, StateTiers] | None = None) -> None:
        rewind.reopen_failed(self.machine, states)

    def rename(self, workflow_id: str) -> None:
        rewind.renamed(self.machine, workflow_id)

    def cancel(self, status: str = "cancelled") -> None:
        main = self.machine.threads["main"]
        main.pending, main.frames = None, []
        main.status = "cancelled" if status == "cancelled" else status  # type: ignore[assignment]
        for thread in self.machine.threads.values():
            if not thread.done:
                thread.status, thread.pending, thread.frames = "cancelled", None, []
        self.machine.set_status(status)

    # -- persistence --------------------------------------------------------------------------
    def to_json(self, threads: bool = True) -> dict[str, Any]:
        """Everything the run holds, as JSON-ready data; `threads=False` leaves the threads
        out (the commit layer builds those itself, only the ones that changed)."""
        data: dict[str, Any] = {
            "workflow_id": self.machine.workflow_id,
            "project_dir": str(self.machine.project_dir),
            "inputs": self.machine.inputs,
            "states": {key: store.snapshot() for key, store in self.machine.states.items()},
            "state_workflows": self.machine.state_workflows,
            "groups": self.machine.groups,
            "status": self.machine.status,
            "error": self.machine.error,
            "counters": self.machine.counters,
            "retries": self.machine.retries,
            "owners": self.machine.owners,
            "last_calls": self.machine.last_calls,
        }
        if self.machine.forked_from is not None:
            data["forked_from"] = self.machine.forked_from
        if self.machine.trace_context is not None:
            data["trace_context"] = self.machine.trace_context
        if threads:
            data["threads"] = {tid: thread.to_json() for tid, thread in self.machine.threads.quiet_items()}
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any], bundle: WorkflowBundle, engine: ExpressionEngine,
                  sub_agent_prompt: str | None = None) -> WorkflowRun:
        run = Machine(data["workflow_id"], bundle, engine, Path(data["project_dir"]), data["inputs"], sub_agent_prompt)
        run.state_workflows = data["state_workflows"]
        for key, snapshot in data["states"].items():
            definition = bundle.get(run.state_workflows[key])
            run.states[key] = StateTiers.from_snapshot(engine, computed_specs(definition), snapshot)
        run.threads = ThreadTable({tid: Thread.from_json(t) for tid, t in data["threads"].items()})
        run.groups = data["groups"]
        run.status, run.error = data["status"], data["error"]
        run.counters, run.retries = data["counters"], data["retries"]
        run.forked_from = data.get("forked_from")
        run.owners = data.get("owners") or {}  # instances of older releases recorded none
        run.last_calls = data.get("last_calls") or {}
        run.trace_context = data.get("trace_context")
        return cls(run)



__all__ = ["Answer", "Busy", "Completion", "RunError", "ShellRequest", "WorkflowRun"]
