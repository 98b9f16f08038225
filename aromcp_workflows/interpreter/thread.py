"""Threads: where each line of execution stands, as plain JSON-serialisable data.

An instance has a main thread and one thread per sub-agent task.  A thread is a stack of
frames (the workflow, then any `include_workflow` child or error handler running inline),
each with its program key, `pc` and loop stack, plus the step it has delivered and is
waiting on.  Nothing here holds a Python object that cannot be written to JSON, which is
what lets an instance resume after a restart exactly where it stopped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

ThreadStatus = Literal["pending", "running", "waiting", "completed", "failed", "cancelled"]
TERMINAL = frozenset({"completed", "failed", "cancelled"})


@dataclass
class LoopFrame:
    loop_id: str
    kind: str
    items: list[Any] | None = None
    index: int = -1
    iteration: int = 0


@dataclass
class Frame:
    workflow: str  # definition name inside the bundle
    program: str  # program key: main, on_failure, task:<name>, cleanup:<name>
    state_key: str  # which StateStore this frame reads and writes
    id_prefix: str = ""  # prepended to delivered step ids (task id, include step)
    pc: int = 0
    loops: list[LoopFrame] = field(default_factory=list)
    result_path: str | None = None  # include_workflow: where the child's state lands
    role: str = "body"  # body | include | cleanup | on_failure


@dataclass
class Pending:
    """A step handed out and not yet completed (agent step, parallel batch, or shell run)."""

    step_id: str
    kind: Literal["agent", "parallel", "shell"]
    step: dict[str, Any] | None = None  # the atomic step as delivered
    messages: list[str] = field(default_factory=list)
    attempts: int = 0
    state_path: str | None = None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Thread:
    thread_id: str
    frames: list[Frame]
    status: ThreadStatus = "running"
    pending: Pending | None = None
    outbox: list[str] = field(default_factory=list)  # messages not yet attached to a step
    final_messages: list[str] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)  # task vars: item, index, task
    error: str | None = None
    failing: dict[str, Any] | None = None  # error being handled by cleanup/on_failure
    completed_ids: list[str] = field(default_factory=list)
    group: str | None = None  # parallel group of a task thread
    retries: int = 0
    failed_at: list[dict[str, Any]] | None = None  # frames when it failed (on_resume: retry_failed_steps)

    @property
    def done(self) -> bool:
        return self.status in TERMINAL

    def remember_completed(self, step_id: str, keep: int = 200) -> None:
        """Recent completed ids, so completing a step twice is recognised and harmless."""
        self.completed_ids.append(step_id)
        del self.completed_ids[:-keep]

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict; shares (does not copy) lists and values, because the caller
        serialises it at once and `dataclasses.asdict`'s deep copy was most of a step's cost."""
        data = dict(vars(self))
        data["frames"] = [frame_json(frame) for frame in self.frames]
        data["pending"] = None if self.pending is None else dict(vars(self.pending))
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Thread:
        frames = [frame_from_json(f) for f in data["frames"]]
        pending = Pending(**data["pending"]) if data.get("pending") else None
        return cls(**{**data, "frames": frames, "pending": pending})


def frame_json(frame: Frame) -> dict[str, Any]:
    return {**vars(frame), "loops": [vars(loop) for loop in frame.loops]}


def frame_from_json(data: dict[str, Any]) -> Frame:
    return Frame(**{**data, "loops": [LoopFrame(**lf) for lf in data.get("loops", [])]})
