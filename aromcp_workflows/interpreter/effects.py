"""What the machine hands back: the effects its caller must perform, as plain values.

The interpreter never performs I/O.  When it needs the outside world it says so with a
value: hand this step to the agent (`Answer`), run this shell command (`ShellRequest`),
someone else is running this thread's command (`Busy`), and — collected in a `Journal`
for the instance layer to perform at its single commit — write these history events and
take this checkpoint.  State changes stay in memory until the instance layer commits them;
a commit that fails discards them, so a call either commits or changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aromcp_workflows.errors import ErrorKind, KindedError
from aromcp_workflows.interpreter.claim import ShellClaim


@dataclass
class Answer:
    """What a thread's caller gets: the next atomic step (or None) and its messages."""

    status: str
    step: dict[str, Any] | None
    messages: list[str] = field(default_factory=list)
    error: str | None = None
    thread_id: str = "main"
    waiting_for: dict[str, Any] | None = None  # a command still running when the call's budget ran out


@dataclass
class ShellRequest:
    """A server-side command to run outside the lock, then hand to `finish_shell`."""

    thread_id: str
    step_id: str
    command: str
    cwd: Path
    env: dict[str, str]
    timeout_ms: int | None
    delay_ms: int = 0


@dataclass
class Busy:
    """The thread's server-side command is running for another caller; wait for it.

    `claim` is what the pending step stored about who runs it, as the instance layer
    wrote it: the interpreter neither fills it in nor judges it."""

    thread_id: str
    step_id: str
    claim: ShellClaim = field(default_factory=ShellClaim)
    command: str = ""  # the command as it was rendered (shown to a caller that stops waiting)


Outcome = Answer | ShellRequest | Busy


@dataclass
class Completion:
    """The answer to `complete` before the thread advances (success, or why not)."""

    success: bool
    error: str | None = None
    step: dict[str, Any] | None = None  # a re-issued or `wait` step when not successful
    advance: bool = True


# Every kind of history event an instance writes: the vocabulary of `workflow_debug_info`,
# traces and the runner's report.  The store accepts any kind; `Machine.record` accepts these.
EVENT_KINDS: frozenset[str] = frozenset({
    "started", "finished", "status_changed", "workflow_retry", "error",  # the instance
    "task_started", "task_finished", "tasks_created", "tasks_retried", "tasks_finished", "tasks_stopped",
    "step_delivered", "step_started", "step_completed", "step_rejected", "step_reported", "step_error",
    "step_skipped",
    "message_shown", "condition_checked", "loop_ended", "shell_released", "shell_adopted",  # steps, control flow
    "include_started", "include_finished",  # composition
    "state_changed", "transform_trace",  # state
    "rolled_back",  # written by the instance layer
    "forked",  # the first event of a fork (`aromcp-workflows fork`, `workflow_fork`)
    "migrated",  # moved onto an edited definition (the one it ran before is kept in the event)
})


@dataclass(frozen=True)
class Event:
    """One history event to append at commit."""

    kind: str
    step_id: str | None
    task_id: str | None
    timestamp: str
    data: dict[str, Any]


@dataclass(frozen=True)
class CheckpointRequest:
    """Keep the instance as committed now (error handling's `checkpoint_and_fail`)."""

    reason: str


@dataclass
class Journal:
    """The effects a call produced that only the instance layer can perform."""

    events: list[Event] = field(default_factory=list)
    checkpoints: list[CheckpointRequest] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.events or self.checkpoints)


class RunError(KindedError):
    """A request the run cannot serve (unknown task or step id: `not_found`; a step that is not
    the current one: `conflict`): a tool error."""

    kind: ErrorKind = "not_found"


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
