"""The instruction set of the program-counter machine.

A step list compiles to a flat tuple of these; control flow is jumps to indexes, so a
running thread is just `(program, pc, loop stack)` — plain data that survives a restart.
Each instruction keeps the qualified id of the step it came from, for step ids, errors
and the explain listing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from aromcp_workflows.definition import Step


@dataclass(frozen=True)
class Instruction:
    step_id: str  # qualified step id: "fix_loop.run_lint"


@dataclass(frozen=True)
class Run(Instruction):
    """Perform one leaf step (server-side or agent-side); `step` is its pydantic model."""

    step: Step


@dataclass(frozen=True)
class JumpUnless(Instruction):
    """Evaluate `condition`; go to `target` when it is falsy (conditionals and `when`)."""

    condition: Any
    target: int
    reason: Literal["condition", "when"] = "condition"


@dataclass(frozen=True)
class Jump(Instruction):
    target: int


@dataclass(frozen=True)
class LoopEnter(Instruction):
    """Push a loop frame; a foreach evaluates its items here, once."""

    loop_id: str
    kind: Literal["while", "foreach"]
    items: Any = None
    max_iterations: int = 0
    item_name: str | None = None  # a foreach's own names for `item` and `index`
    index_name: str | None = None


@dataclass(frozen=True)
class LoopNext(Instruction):
    """Top of every iteration: test the loop, bind `item`/`loop`, or leave to `exit_target`."""

    loop_id: str
    kind: Literal["while", "foreach"]
    condition: Any = None
    exit_target: int = -1
    max_iterations: int = 0  # while loops: the limit tested at the top of every iteration
    on_max_iterations: Literal["fail", "continue"] = "fail"
    implicit_limit: bool = False  # the limit is the default one: the author wrote no max_iterations


@dataclass(frozen=True)
class Break(Instruction):
    """Pop loop frames up to and including `loop_id`, then go to `target` (`top`: its `LoopNext`)."""

    loop_id: str
    target: int
    top: int = -1


@dataclass(frozen=True)
class Continue(Instruction):
    """Pop loop frames above `loop_id`, then go to its `LoopNext` at `target`."""

    loop_id: str
    target: int


@dataclass(frozen=True)
class Exit(Instruction):
    status: Literal["completed", "failed"] = "completed"
    message: str | None = None


@dataclass(frozen=True)
class Program:
    """One compiled step list: the workflow's steps, a task's steps, or a handler."""

    key: str
    instructions: tuple[Instruction, ...]
    loops: dict[str, str] = field(default_factory=dict)  # loop_id -> qualified step id

    def __len__(self) -> int:
        return len(self.instructions)
