"""Leaf steps: server-side execution and agent-side delivery and completion.

Server-side steps (`state_update`, `user_message`, `shell_command`, `include_workflow`)
run here; agent-side steps are rendered (all templates in one engine call) into atomic
steps and parked as the thread's pending step until the agent completes them.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from aromcp_workflows.expressions import ExpressionError
from aromcp_workflows.interpreter.agent_steps import (
    AGENT_TYPES,
    Accepted,
    accept_result,
    atomic_step,
    public,
    reissued,
    templated_fields,
)
from aromcp_workflows.interpreter.inputs import InputError, check_inputs
from aromcp_workflows.interpreter.outcomes import Completion, ShellRequest
from aromcp_workflows.interpreter.program import Run
from aromcp_workflows.interpreter.shell import (
    OutputFormatError,
    ShellResult,
    parse_output,
    stderr_tail,
)
from aromcp_workflows.interpreter.thread import Frame, Pending, Thread
from aromcp_workflows.state import StateError, Update

if TYPE_CHECKING:
    from aromcp_workflows.interpreter.run import WorkflowRun


class StepFailed(Exception):
    """A step could not be carried out; the message says why (for the failure answer)."""


class StepExecution:
    def run_step(self: WorkflowRun, thread: Thread, frame: Frame, ins: Run) -> Any:
        step, step_id = ins.step, self.delivered_id(frame, ins.step_id)
        try:
            if step.type == "state_update":
                updates = self.render(thread, frame, [u.model_dump() for u in step.as_updates()], f"step {step_id}")
                self.write(thread, frame, [(u["path"], u["operation"], u["value"]) for u in updates], f"step {step_id}")
            elif step.type == "user_message":
                message = self.render(thread, frame, step.message, f"step {step_id}")
                thread.outbox.append("" if message is None else str(message))
            elif step.type == "shell_command":
                return self.request_shell(thread, frame, step, step_id, attempt=0)
            elif step.type == "include_workflow":
                self.enter_include(thread, frame, step, step_id)
                return None
            elif step.type == "parallel_foreach":
                return self.run_parallel(thread, frame, step, step_id)
            elif step.type in AGENT_TYPES:
                return self.deliver(thread, frame, step, step_id)
            frame.pc += 1
        except (StepFailed, ExpressionError) as exc:
            self.fail(thread, step_id, str(exc))
        return None

    # -- state --------------------------------------------------------------------
    def write(self: WorkflowRun, thread: Thread, frame: Frame, updates: list[tuple[str, str, Any]],
              trigger: str) -> None:
        """Apply updates atomically to the frame's state; a refusal fails the step."""
        store = self.states[frame.state_key]
        try:
            result = store.apply([Update(path=p, operation=o, value=v) for p, o, v in updates], trigger=trigger)
        except StateError as exc:
            self.collect_traces(store, trigger)
            raise StepFailed(str(exc)) from None
        self.collect_traces(store, trigger)
        self.record("state_changed", trigger.removeprefix("step "), self.task_of(thread),
                    {"paths": result.changed_paths, "computed_changed": sorted(result.computed_changed)})

    def store_result(self: WorkflowRun, thread: Thread, frame: Frame, step: Any, path: str | None,
                     result: Any, output: Any, step_id: str) -> None:
        spec = getattr(step, "state_update", None)
        if spec is None or path is None:
            return
        value = output
        if spec.value is not None:
            value = self.render(thread, frame, spec.value, f"state_update of step {step_id}", {"result": result})
        self.write(thread, frame, [(path, spec.operation, value)], f"step {step_id}")

    def store_failure(self: WorkflowRun, thread: Thread, frame: Frame, step: Any, step_id: str,
                      message: str, output: Any = None, result: Any = None) -> None:
        """`on_error: continue`: store `fallback_value` if given, else what the step's
        `state_update` would store (its `value` over `result`, or the parsed output);
        then apply `error_state_update`."""
        spec = getattr(step, "state_update", None)
        if spec is not None and (step.fallback_value is not None or result is not None or output is not None):
            path = self.render(thread, frame, spec.path, f"step {step_id}")
            if step.fallback_value is not None:
                value = step.fallback_value
            elif spec.value is not None and result is not None:
                value = self.render(thread, frame, spec.value, f"state_update of step {step_id}", {"result": result})
            else:
                value = output
            self.write(thread, frame, [(path, spec.operation, value)], f"step {step_id}")
        error_spec = getattr(step, "error_state_update", None)
        if error_spec is not None:
            error = {"message": message, "step_id": step_id}
            rendered = self.render(thread, frame, {"path": error_spec.path, "value": error_spec.value},
                                   f"error_state_update of step {step_id}", {"error": error})
            value = rendered["value"] if error_spec.value is not None else error
            self.write(thread, frame, [(rendered["path"], error_spec.operation, value)], f"step {step_id}")
        self.record("step_error", step_id, self.task_of(thread), {"message": message, "handled": "continue"})

    # -- shell ----------------------------------------------------------------------
    def request_shell(self: WorkflowRun, thread: Thread, frame: Frame, step: Any, step_id: str,
                      attempt: int) -> ShellRequest:
        other, command = self.render_command(
            thread, frame, {"cwd": step.working_dir, "env": step.env,
                            "path": step.state_update.path if step.state_update else None},
            step.command, f"step {step_id}")
        rendered = {"command": command}
        cwd = self.project_dir / other["cwd"] if other["cwd"] else self.project_dir
        thread.pending = Pending(step_id, "shell", data={"attempt": attempt, "path": other["path"],
                                                         "command": rendered["command"], "owner_pid": os.getpid()})
        self.record("step_started", step_id, self.task_of(thread), {"type": "shell_command",
                                                                     "command": rendered["command"], "attempt": attempt})
        delay = step.retry_delay if attempt > 0 else 0
        return ShellRequest(thread.thread_id, step_id, rendered["command"], cwd,
                            {k: str(v) for k, v in (other["env"] or {}).items()}, step.timeout, delay)

    def shell_finished(self: WorkflowRun, thread: Thread, request: ShellRequest, result: ShellResult) -> Any:
        """Store a finished command's output, or apply its `on_error` (retry, continue, fail)."""
        pending = thread.pending
        if pending is None or pending.kind != "shell" or pending.step_id != request.step_id:
            return None  # stale result (the instance moved on, e.g. cancelled)
        frame = thread.frames[-1]
        ins = self.programs(frame.workflow)[frame.program].instructions[frame.pc]
        step, attempt = ins.step, pending.data["attempt"]
        thread.pending = None
        problem, output = None, None
        if result.exit_code != 0:
            problem = f"command exited with code {result.exit_code}: {stderr_tail(result.stderr) or '(no stderr)'}"
        try:
            output = parse_output(result.stdout, step.output_format)
        except OutputFormatError as exc:
            problem = problem or f"command output is not {step.output_format}: {exc}"
        self.record("step_completed", request.step_id, self.task_of(thread),
                    {"type": "shell_command", "exit_code": result.exit_code, "duration_ms": round(result.duration_ms, 1),
                     "attempt": attempt, "status": "failed" if problem else "success",
                     "stdout_tail": result.stdout[-500:], "stderr_tail": result.stderr[-500:]})
        try:
            if problem is None:
                self.store_result(thread, frame, step, pending.data["path"], result.as_result(output), output,
                                  request.step_id)
            elif step.on_error == "retry" and attempt < step.retry_count:
                return self.request_shell(thread, frame, step, request.step_id, attempt + 1)
            elif step.on_error == "continue" or (step.on_error == "retry" and step.fallback_value is not None):
                self.store_failure(thread, frame, step, request.step_id, problem, output, result.as_result(output))
            else:
                raise StepFailed(f"step {request.step_id} failed: {problem}")
        except StepFailed as exc:
            self.fail(thread, request.step_id, str(exc))
            return None
        thread.remember_completed(request.step_id)
        frame.pc += 1
        return None

    # -- include --------------------------------------------------------------------
    def enter_include(self: WorkflowRun, thread: Thread, frame: Frame, step: Any, step_id: str) -> None:
        child = self.bundle.get(step.workflow)
        rendered = self.render(thread, frame, {"inputs": step.inputs,
                                               "path": step.state_update.path if step.state_update else None},
                               f"step {step_id}")
        try:
            inputs = check_inputs(child.name, child.inputs, rendered["inputs"] or {})
        except InputError as exc:
            raise StepFailed(f"include_workflow {step_id}: {exc}") from None
        key = f"{frame.state_key}/{step_id}"
        self.states[key] = self.new_state(child, inputs, f"include {step_id}")
        self.state_workflows[key] = child.name
        local = step_id.rsplit(".", 1)[-1].split("#", 1)[0]
        frame.pc += 1
        thread.frames.append(Frame(child.name, "main", key, f"{step_id}.", result_path=rendered["path"] or f"raw.{local}",
                                   role="include"))
        self.record("include_started", step_id, self.task_of(thread), {"workflow": child.name, "inputs": inputs})

    # -- agent steps ------------------------------------------------------------------
    def deliver(self: WorkflowRun, thread: Thread, frame: Frame, step: Any, step_id: str) -> Any:
        """Render an agent step (one engine call) and park it as the thread's pending step."""
        fields = templated_fields(step)
        fields["_path"] = step.state_update.path if step.state_update else None
        command = None
        if step.type == "agent_shell_command":
            rendered, command = self.render_command(thread, frame, fields, step.command, f"step {step_id}")
        else:
            rendered = self.render(thread, frame, fields, f"step {step_id}")
        atomic = atomic_step(step, step_id, rendered, command)
        thread.pending = Pending(step_id, "agent", atomic, thread.outbox, state_path=rendered["_path"])
        thread.outbox = []
        self.record("step_delivered", step_id, self.task_of(thread), {"type": atomic["type"]})
        return self.pending_answer(thread)

    def complete_agent_step(self: WorkflowRun, thread: Thread, pending: Pending, status: str,
                            result: Any, error: str | None) -> Completion:
        frame = thread.frames[-1]
        step = self.programs(frame.workflow)[frame.program].instructions[frame.pc].step
        if status != "success":
            return self.agent_step_failed(thread, frame, step, pending, error or f"the agent reported status {status!r}")
        verdict = accept_result(step, result)
        if not isinstance(verdict, Accepted):
            pending.attempts += 1
            limit = getattr(step, "max_attempts", 1)
            self.record("step_rejected", pending.step_id, self.task_of(thread),
                        {"problem": verdict.problem, "attempt": pending.attempts})
            if pending.attempts >= limit:
                return self.agent_step_failed(thread, frame, step, pending,
                                              f"no valid answer after {limit} attempts: {verdict.problem}",
                                              rejected=True)
            pending.step = reissued(pending.step or {}, verdict.problem, pending.attempts, limit)
            return Completion(False, verdict.problem, public(pending.step), advance=False)
        try:
            self.store_result(thread, frame, step, pending.state_path, verdict.value, verdict.value, pending.step_id)
        except StepFailed as exc:
            thread.pending = None
            self.fail(thread, pending.step_id, str(exc))
            return Completion(True)
        self.finish_pending(thread, frame, pending)
        return Completion(True)

    def agent_step_failed(self: WorkflowRun, thread: Thread, frame: Frame, step: Any, pending: Pending,
                          message: str, rejected: bool = False) -> Completion:
        """The step failed (reported failed, or no valid answer in `max_attempts`): apply its
        `on_error`. The completion is unsuccessful when the agent's last answer was rejected."""
        thread.pending = None
        outcome = Completion(not rejected, message if rejected else None)
        if getattr(step, "on_error", "fail") == "continue":
            try:
                self.store_failure(thread, frame, step, pending.step_id, message)
            except StepFailed as exc:
                self.fail(thread, pending.step_id, str(exc))
                return outcome
            self.finish_pending(thread, frame, pending, "failed")
            return outcome
        self.fail(thread, pending.step_id, f"step {pending.step_id} failed: {message}")
        return outcome

    def finish_pending(self: WorkflowRun, thread: Thread, frame: Frame, pending: Pending,
                       status: str = "success") -> None:
        thread.pending = None
        thread.remember_completed(pending.step_id)
        frame.pc += 1
        self.record("step_completed", pending.step_id, self.task_of(thread),
                    {"type": (pending.step or {}).get("type"), "status": status,
                     "attempts": pending.attempts + 1})
