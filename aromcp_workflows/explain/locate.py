"""Which line of which file a step of a running instance was written on.

An instance runs the definition snapshot taken when it started, which keeps the file it
came from but not positions, so a failed step is found again in the file as it is now:
the step's data path (`steps[2].body[0]`) follows from its qualified id by the compiler's
own naming rule (`step_places`), and the file's positions give its line.  When the file
changed since (that step reads differently now), the location says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aromcp_workflows.definition import NodePath, Positions, Step, WorkflowDefinition
from aromcp_workflows.interpreter import Run, step_places

if TYPE_CHECKING:
    from aromcp_workflows.interpreter import WorkflowRun



@dataclass(frozen=True)
class Failure:
    """A failed thread: which step, of which workflow and program, and why."""

    task_id: str | None
    step_id: str | None  # the qualified id (`fix_loop.run_lint`)
    workflow: str
    program: str
    message: str


def failures(run: WorkflowRun) -> list[Failure]:
    """Every failed thread of `run` with the step it failed at (`failed_at`: its frames then)."""
    found = []
    for tid, thread in run.threads.items():
        if thread.status != "failed" and not (tid == "main" and run.status == "failed"):
            continue
        message = thread.error or (run.error if tid == "main" else None) or "failed"
        frame = (thread.failed_at or [None])[-1]
        if frame is None:
            found.append(Failure(None if tid == "main" else tid, None, run.bundle.main.name, "main", message))
            continue
        program = run.machine.programs(frame["workflow"])[frame["program"]]
        ins = program.instructions[frame["pc"]] if frame["pc"] < len(program.instructions) else None
        found.append(Failure(None if tid == "main" else tid, ins.step_id if ins is not None else None,
                             frame["workflow"], frame["program"], message))
    return found


def step_of(run: WorkflowRun, failure: Failure) -> Step | None:
    """The step model a failure names, from the instance's own definition (None if gone)."""
    if failure.step_id is None:
        return None
    for ins in run.machine.programs(failure.workflow)[failure.program].instructions:
        if ins.step_id == failure.step_id and isinstance(ins, Run):
            return ins.step
    return None


def step_path(definition: WorkflowDefinition, program: str, step_id: str) -> NodePath | None:
    """The data path of the step with this qualified id in `program`, or None."""
    place = step_places(definition).get((program, step_id))
    return None if place is None else place.path


def where_now(definition: WorkflowDefinition, positions: Positions, path: NodePath,
              step: Step) -> tuple[int | None, int | None, bool]:
    """Line and column of the step at `path` in a file as it reads now (`definition` and
    its `positions`), and whether that step differs from `step`, the one the instance runs."""
    line, column = positions.locate(path)
    node: Any = definition.model_dump(mode="json", by_alias=True)
    for key in path:
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            return line, column, True
    return line, column, node != step.model_dump(mode="json", by_alias=True)
