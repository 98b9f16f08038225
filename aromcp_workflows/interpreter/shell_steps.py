"""`shell_command`: what to run (a `ShellRequest` effect) and what its result does.

The machine never spawns a process: it renders the command, parks the thread on a
pending shell step and returns the request.  The instance layer runs it outside the lock
and hands the result back to `shell_finished`, which stores the output or applies the
step's `on_error` (retry, continue, fail).  A command that could not even be started
comes back as a failed result like any other, so `on_error` applies to it too.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aromcp_workflows.definition import AgentShellCommandStep, ShellCommandStep
from aromcp_workflows.expressions import ExpressionError
from aromcp_workflows.interpreter import tracking
from aromcp_workflows.interpreter.claim import FIELDS, ShellClaim
from aromcp_workflows.interpreter.effects import Busy, Outcome, ShellRequest, now_iso
from aromcp_workflows.interpreter.failures import Fail
from aromcp_workflows.interpreter.machine import Ctx, StepFailed
from aromcp_workflows.interpreter.output import OutputFormatError, ShellResult, parse_output, stderr_tail
from aromcp_workflows.interpreter.path_templates import path_template, path_value
from aromcp_workflows.interpreter.results import store_failure, store_result
from aromcp_workflows.interpreter.thread import Pending, Thread

HISTORY_OUTPUT_CAP = 64 * 1024  # characters of a stream the history keeps beyond its 500-character tail


def working_directory(project_dir: Path, given: Any, step_id: str) -> Path:
    """Where a shell step runs (the server's or the agent's): the project root, or its
    `working_dir` (rendered; relative to the root) — which must be an existing directory
    inside the project, symbolic links resolved, or the step fails before anything runs.
    The root is the resolved project directory the run was started with; a few system
    calls per step, none without a `working_dir`."""
    if given is None or str(given).strip() == "":
        return Path(project_dir)
    root = os.fspath(project_dir)
    target = os.path.realpath(os.path.join(root, str(given)))
    where = f"working_dir {str(given)!r} of step {step_id}"
    if not _inside(target, root) and not _inside(target, os.path.realpath(root)):
        raise StepFailed(f"{where} is outside the project ({target} is not in {root}); a shell step runs in the "
                         "project root or a directory inside it")
    if not os.path.isdir(target):
        problem = "is not a directory" if os.path.exists(target) else "does not exist"
        todo = "" if os.path.exists(target) else "; create it in an earlier step or fix the path"
        raise StepFailed(f"{where} {problem} ({target}){todo}")
    return Path(target)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def request_shell(ctx: Ctx, step: ShellCommandStep, step_id: str, attempt: int) -> ShellRequest:
    other, command = ctx.render_command(
        {"cwd": step.working_dir, "env": step.env,
         "path": path_template(step.state_update.path) if step.state_update else None},
        step.command, f"step {step_id}")
    cwd = working_directory(ctx.m.project_dir, other["cwd"], step_id)
    ctx.thread.pending = Pending(step_id, "shell", data={"attempt": attempt, "path": path_value(other["path"]),
                                                         "command": command, "since": now_iso()})
    ctx.record("step_started", step_id, {"type": "shell_command", "command": command, "attempt": attempt})
    delay = step.retry_delay if attempt > 0 else 0
    env = {k: str(v) for k, v in (other["env"] or {}).items()}
    return ShellRequest(ctx.thread.thread_id, step_id, command, cwd, env, step.timeout, delay)


def shell_finished(ctx: Ctx, request: ShellRequest, result: ShellResult) -> Outcome | Fail | None:
    """Store a finished command's output, or apply its `on_error` (retry, continue, fail)."""
    thread, frame = ctx.thread, ctx.frame
    pending = thread.pending
    step = ctx.m.step_as(frame, ShellCommandStep)
    attempt = pending.data["attempt"] if pending is not None else 0
    thread.pending = None
    problem, output = _problem(result, step.output_format)
    if problem is None:
        try:
            output = parse_output(result.stdout, step.output_format)
        except OutputFormatError as exc:
            problem = f"command output is not {step.output_format}: {exc}"
    ctx.record("step_completed", request.step_id,
               {"type": "shell_command", "exit_code": result.exit_code, "duration_ms": round(result.duration_ms, 1),
                "attempt": attempt, "status": "failed" if problem else "success",
                "stdout_tail": result.stdout[-500:], "stderr_tail": result.stderr[-500:],
                **_kept_output(result)})
    path = pending.data["path"] if pending is not None else None
    if problem is None:
        try:
            seen = output if _bare_result(step) else result.as_result(output)
            store_result(ctx, step, path, seen, output, request.step_id)
        except (StepFailed, ExpressionError) as exc:  # e.g. a `value` template that throws
            return store_failed(ctx, step, request.step_id, f"could not store the result: {exc}")
    elif step.on_error == "retry" and attempt < step.retry_count:
        tracking.step_retried(ctx.m, ctx.thread, request.step_id, attempt + 1)
        return request_shell(ctx, step, request.step_id, attempt + 1)
    elif step.on_error == "continue" or (step.on_error == "retry" and step.fallback_value is not None):
        store_failure(ctx, step, request.step_id, problem, output, result.as_result(output))
    else:
        return Fail(request.step_id, f"step {request.step_id} failed: {problem}")
    if problem is None:
        tracking.step_succeeded(ctx.m, thread, request.step_id)
    thread.remember_completed(request.step_id)
    frame.pc += 1
    return None


def _kept_output(result: ShellResult) -> dict[str, Any]:
    """The whole output, when it is longer than the tails (up to `HISTORY_OUTPUT_CAP` a
    stream): `test --record` turns it back into the command's stub."""
    kept: dict[str, Any] = {}
    for name, text in (("stdout", result.stdout), ("stderr", result.stderr)):
        if len(text) > 500:
            kept[name] = text[:HISTORY_OUTPUT_CAP]
            kept[f"{name}_cut"] = len(text) > HISTORY_OUTPUT_CAP or None
    return {k: v for k, v in kept.items() if v is not None}


def _bare_result(step: ShellCommandStep) -> bool:
    """`value: "{{ result }}"` on a shell step means its output, as the seed design writes it
    (`result.stdout`, `result.exit_code` and `result.output` stay available)."""
    value = step.state_update.value if step.state_update is not None else None
    return isinstance(value, str) and re.fullmatch(r"\{\{\s*result\s*\}\}", value.strip()) is not None


def store_failed(ctx: Ctx, step: ShellCommandStep | AgentShellCommandStep, step_id: str,
                 problem: str) -> Fail | None:
    """The command ran but its result could not be stored: the step's `on_error` decides."""
    if step.on_error == "continue" or (step.on_error == "retry" and step.fallback_value is not None):
        store_failure(ctx, step, step_id, problem)
        ctx.thread.remember_completed(step_id)
        ctx.frame.pc += 1
        return None
    return Fail(step_id, f"step {step_id} failed: {problem}")


def _problem(result: ShellResult, output_format: str) -> tuple[str | None, Any]:
    if result.spawn_error:
        return f"command could not be started: {result.spawn_error}", None
    if result.exit_code != 0:
        output = None
        try:
            output = parse_output(result.stdout, output_format)
        except OutputFormatError:
            pass
        return f"command exited with code {result.exit_code}: {stderr_tail(result.stderr) or '(no stderr)'}", output
    return None, None


def command_wait(thread_id: str, step_id: str, command: str, for_s: float | None) -> dict[str, Any]:
    """The `wait` step a call answers with when its budget ran out while the thread's
    server-side command runs (`AROMCP_CALL_BUDGET_S`): a step, not `null`, so an agent that
    loops until `step: null` (the orchestrator's and the sub-agents' prompts) goes on.
    Completing it waits for the command (`waited_on`), as calling `workflow_get_next_step`
    again does."""
    running = "" if for_s is None else f" for {for_s:.1f} s" if for_s < 10 else f" for {for_s:.0f} s"
    where = f"workflow_get_next_step(workflow_id{', task_id' if thread_id != 'main' else ''})"
    return {"id": f"{step_id}.wait", "type": "wait",
            "instructions": (f"Step {step_id}'s command is still running on the server{running}; it is not "
                             f"run again. Complete this step (no result needed), or call {where} again: the "
                             "answer waits for the command and brings the step after it."),
            "definition": {"reason": f"the server-side command of step {step_id} is still running{running}",
                           "task_ids": [], "retry_after_ms": 0, "command": command}}


def waited_on(thread: Thread, step_id: str) -> bool:
    """Whether `step_id` is a command's `wait` step (`command_wait`) of this thread: its
    command still pending, or done since (completing the wait late is harmless)."""
    base = step_id.removesuffix(".wait")
    if base == step_id:
        return False
    return _pending_shell(thread, base) is not None or base in thread.completed_ids


# -- who runs a pending command: stored for the instance layer, never judged here ------------------
def busy(thread: Thread) -> Busy:
    """A thread parked on a command: wait for it, with the claim the runner left."""
    pending = thread.pending
    assert pending is not None and pending.kind == "shell"
    return Busy(thread.thread_id, pending.step_id, claim_of(pending), str(pending.data.get("command", "")))


def claim_of(pending: Pending) -> ShellClaim:
    return ShellClaim.from_data(pending.data)


def _pending_shell(thread: Thread, step_id: str) -> Pending | None:
    pending = thread.pending
    if pending is None or pending.kind != "shell" or pending.step_id != step_id:
        return None
    return pending


def _store(pending: Pending, claim: ShellClaim) -> None:
    for key in FIELDS:
        pending.data.pop(key, None)
    pending.data.update(claim.to_data())


def claim(thread: Thread, step_id: str, claim: ShellClaim) -> bool:
    """Record who runs the command now (the caller that is about to run it)."""
    pending = _pending_shell(thread, step_id)
    if pending is None:
        return False
    _store(pending, claim)
    return True


def renew(thread: Thread, step_id: str, owner: Mapping[str, Any], lease_until: float) -> bool:
    """Extend the claim of `owner`; False when the command is no longer its own (released
    and claimed by another runner, or the thread moved on)."""
    pending = _pending_shell(thread, step_id)
    if pending is None or claim_of(pending).owner != owner:
        return False
    pending.data["lease_until"] = lease_until
    return True


def adopt(thread: Thread, step_id: str, expected: ShellClaim, claim: ShellClaim) -> bool:
    """Make `claim` the command's claim if its claim is still `expected` (the one judged
    abandoned): its new runner adopts the running command, not a new run of it."""
    pending = releasable(thread, step_id, expected)
    if pending is None:
        return False
    _store(pending, claim)
    return True


def claimed_by(thread: Thread, step_id: str, owner: Mapping[str, Any]) -> bool:
    """Whether `owner` still holds the claim on the pending command (no claim: anybody does)."""
    pending = _pending_shell(thread, step_id)
    if pending is None:
        return False
    held = claim_of(pending).owner
    return held is None or held == owner


def releasable(thread: Thread, step_id: str, expected: ShellClaim | None) -> Pending | None:
    """The pending command to release, if it is still the one judged abandoned: with
    `expected`, only while its claim is unchanged (a renewal in between keeps it)."""
    pending = _pending_shell(thread, step_id)
    if pending is None or (expected is not None and claim_of(pending) != expected):
        return None
    return pending
