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
    item_name: str | None = None  # a foreach's `variable_name` and `index_name`
    index_name: str | None = None


@dataclass
class Frame:
    workflow: str  # definition name inside the bundle
    program: str  # program key: main, on_failure, task:<name>, cleanup:<name>
    state_key: str  # which StateTiers this frame reads and writes
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
    prompt: str | None = None  # a task's sub_agent_prompt_override, rendered for it when it was created
    failed_state: dict[str, Any] | None = None  # the main thread's state snapshots when it failed (retry)

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


class ThreadTable(dict[str, Thread]):
    """A run's threads by id, noting which ones were reached since the commit last asked.

    A commit encodes and compares only the threads a call could have changed: with 500
    sub-agent tasks, re-encoding every thread at every step made a step's cost grow with
    the fan-out.  A thread can only be changed through its object, and the object is only
    reachable through this table (`[]`, `get`, or walking it, which counts as reaching
    all), so what was not reached is unchanged.  Conservative by design: any doubt marks
    the whole table."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._reached: set[str] | None = None  # None: all of them

    def __getitem__(self, key: str) -> Thread:
        self._reach(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self._reach(key)
        return super().get(key, default)

    def __setitem__(self, key: str, value: Thread) -> None:
        self._reach(key)
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        self._reach(key)
        super().__delitem__(key)

    def __iter__(self) -> Any:
        self._reached = None
        return super().__iter__()

    def values(self) -> Any:
        self._reached = None
        return super().values()

    def items(self) -> Any:
        self._reached = None
        return super().items()

    def copy(self) -> dict[str, Thread]:
        self._reached = None
        return dict(super().items())

    def pop(self, *args: Any) -> Any:
        self._reached = None
        return super().pop(*args)

    def popitem(self) -> tuple[str, Thread]:
        self._reached = None
        return super().popitem()

    def setdefault(self, key: str, default: Any = None) -> Any:
        self._reached = None
        return super().setdefault(key, default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        self._reached = None
        super().update(*args, **kwargs)

    def _reach(self, key: str) -> None:
        if self._reached is not None:
            self._reached.add(key)

    def take_reached(self) -> set[str] | None:
        """The ids reached since the last call (None: possibly all); starts afresh."""
        reached, self._reached = self._reached, set()
        return reached

    def quiet_items(self) -> Any:
        """The threads, without counting as reaching them (for the commit's own reading)."""
        return super().items()


def frame_json(frame: Frame) -> dict[str, Any]:
    return {**vars(frame), "loops": [vars(loop) for loop in frame.loops]}


def frame_from_json(data: dict[str, Any]) -> Frame:
    return Frame(**{**data, "loops": [LoopFrame(**lf) for lf in data.get("loops", [])]})
