"""Putting threads back before a step: what `retry` and `fork` need of the machine.

A step handed out (an agent step, a `parallel_tasks` batch) or started (a shell command)
is the thread's pending step; the thread's `pc` stays on it until it completes.
Rewinding a thread forgets that it was handed out: the next advance runs the step again,
its templates rendered anew from the state as it is then (after a fork's edits, say).
The messages that came before it go back to the thread's outbox, so they are shown with
it again.  A fan-out rewound at its first batch forgets the tasks it created too: their
items are evaluated again.

A failed instance keeps where its main thread failed (`failed_at`: the frames) and the
state as it was when the step failed, before any error handling wrote to it
(`failed_state`); `reopen_failed` puts both back.  All of it is plain data: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aromcp_workflows.interpreter.machine import Machine, computed_specs
from aromcp_workflows.interpreter.program import Exit
from aromcp_workflows.interpreter.thread import Thread, frame_from_json
from aromcp_workflows.state import StateTiers


@dataclass(frozen=True)
class FailedStep:
    """Where a failed instance's main thread failed."""

    step_id: str | None  # the delivered id (`fix_loop.run_lint#2`); None: not a step's failure
    by_exit: bool  # the workflow's own `exit` step with status failed: running it again exits again
    has_state: bool  # the state at the failure was kept (instances failed by older servers did not)


def rewind(m: Machine, thread: Thread) -> str | None:
    """Put `thread` back before its pending step, as if it had never been handed out;
    the step's id, or None when nothing was pending."""
    pending = thread.pending
    if pending is None:
        return None
    if pending.kind == "parallel":
        _rewind_batch(m, pending.data)
    thread.outbox = [*pending.messages, *thread.outbox]
    thread.pending = None
    if thread.status == "waiting":
        thread.status = "running"
    return pending.step_id


def _rewind_batch(m: Machine, data: dict[str, Any]) -> None:
    """A `parallel_tasks` batch back in its fan-out's queue; the first batch takes the whole
    fan-out with it (its tasks had not started: they are made again from the items)."""
    group = m.groups.get(data["group"])
    if group is None:
        return
    if group["round"] > 1:
        group["queue"] = [*data["task_ids"], *group["queue"]]
        group["round"] -= 1
        return
    for task_id in group["task_ids"]:
        task = m.threads.pop(task_id, None)
        name = task_id.rsplit("_", 1)[0]
        if task is not None and m.counters.get(name, 0) > 0:
            m.counters[name] -= 1
    del m.groups[data["group"]]


def rewind_agent_steps(m: Machine) -> list[str]:
    """Every thread back before its pending agent step or command (a fan-out's batch stays
    handed out: its tasks may be under way); the ids rewound."""
    rewound = []
    for thread in m.threads.values():
        if thread.pending is not None and thread.pending.kind != "parallel" and not thread.done:
            step_id = rewind(m, thread)
            if step_id is not None:
                rewound.append(step_id)
    return rewound


def failed_step(m: Machine) -> FailedStep | None:
    """Where the failed instance's main thread failed, or None when it is not failed there."""
    main = m.threads.get("main")
    if m.status != "failed" or main is None or not main.failed_at:
        return None
    frames = [frame_from_json(f) for f in main.failed_at]
    frame = frames[-1]
    program = m.programs(frame.workflow)[frame.program]
    instruction = program.instructions[frame.pc] if frame.pc < len(program.instructions) else None
    step_id = (main.failing or {}).get("step_id")
    return FailedStep(step_id, isinstance(instruction, Exit), main.failed_state is not None)


def reopen_failed(m: Machine, states: dict[str, StateTiers] | None = None) -> None:
    """The main thread back at the step that failed, with `states` (default: the state kept
    when it failed), the failure forgotten and the instance running.  A failed fan-out
    runs whole again: its state is that of before the step, so none of its tasks' work is in it."""
    main = m.threads["main"]
    assert main.failed_at is not None
    if states is None:
        states = {key: _restored(m, key, snap) for key, snap in (main.failed_state or {}).items()}
    m.states = states
    main.frames = [frame_from_json(f) for f in main.failed_at]
    group = m.groups.pop(str((main.failing or {}).get("step_id")), None)
    for task_id in (group or {}).get("task_ids", []):  # a fan-out that failed starts afresh
        m.threads.pop(task_id, None)
    main.failing = main.error = main.failed_at = main.failed_state = None
    main.pending, main.status = None, "running"
    m.set_status("running")


def _restored(m: Machine, key: str, snapshot: dict[str, Any]) -> StateTiers:
    definition = m.bundle.get(m.state_workflows[key])
    return StateTiers.from_snapshot(m.engine, computed_specs(definition), snapshot)


def renamed(m: Machine, workflow_id: str) -> None:
    """The run under a new id (a fork): its tasks' `context.workflow_id` follows."""
    old = m.workflow_id
    m.workflow_id = workflow_id
    for thread in m.threads.values():
        seen = thread.context.get("context")
        if isinstance(seen, dict) and seen.get("workflow_id") == old:
            thread.context = {**thread.context, "context": {**seen, "workflow_id": workflow_id}}
