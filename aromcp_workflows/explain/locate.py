"""Which line of which file a step of a running instance was written on.

An instance runs the definition snapshot taken when it started, which keeps the file it
came from but not positions, so a failed step is found again in the file as it is now:
the step's data path (`steps[2].body[0]`) follows from its qualified id by the compiler's
own naming rule (`local_step_id`), and the file's positions give its line.  When the file
changed since (that step reads differently now), the location says so.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from aromcp_workflows.definition.steps import child_step_lists
from aromcp_workflows.definition.workflow import WorkflowDefinition
from aromcp_workflows.interpreter.compiler import local_step_id
from aromcp_workflows.interpreter.program import Run

Path = tuple[Any, ...]
BRANCHES = {"then": "then_", "else": "else_"}  # the compiler's prefixes of generated ids in a conditional


@dataclass(frozen=True)
class Failure:
    """A failed thread: which step, of which workflow and program, and why."""

    task_id: str | None
    step_id: str | None  # the qualified id (`fix_loop.run_lint`)
    workflow: str
    program: str
    message: str


def failures(run: Any) -> list[Failure]:
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
        program = run.programs(frame["workflow"])[frame["program"]]
        ins = program.instructions[frame["pc"]] if frame["pc"] < len(program.instructions) else None
        found.append(Failure(None if tid == "main" else tid, ins.step_id if ins is not None else None,
                             frame["workflow"], frame["program"], message))
    return found


def step_of(run: Any, failure: Failure) -> Any:
    """The step model a failure names, from the instance's own definition (None if gone)."""
    if failure.step_id is None:
        return None
    for ins in run.programs(failure.workflow)[failure.program].instructions:
        if ins.step_id == failure.step_id and isinstance(ins, Run):
            return ins.step
    return None


def program_root(definition: WorkflowDefinition, program: str) -> tuple[Path, list[Any]]:
    """The data path and steps of a program (`main`, `on_failure`, `task:<n>`, `cleanup:<n>`)."""
    kind, _, name = program.partition(":")
    if kind == "task":
        return ("sub_agent_tasks", name, "steps"), definition.sub_agent_tasks[name].steps
    if kind == "cleanup":
        task = definition.sub_agent_tasks[name]
        return ("sub_agent_tasks", name, "error_handling", "cleanup_on_error"), task.error_handling.cleanup_on_error
    if kind == "on_failure":
        return ("error_handling", "on_failure"), definition.error_handling.on_failure
    return ("steps",), definition.steps


def step_path(definition: WorkflowDefinition, program: str, step_id: str) -> Path | None:
    """The data path of the step with this qualified id in `program`, or None."""
    try:
        root, steps = program_root(definition, program)
    except KeyError:
        return None
    prefix = {"on_failure": "on_failure.", "cleanup": "cleanup_on_error."}.get(program.partition(":")[0], "")
    for qid, path in _walk(steps, root, prefix, ""):
        if qid == step_id:
            return path
    return None


def _walk(steps: list[Any], root: Path, prefix: str, branch: str) -> Iterator[tuple[str, Path]]:
    for index, step in enumerate(steps):
        qid, path = f"{prefix}{local_step_id(step, index, branch)}", (*root, index)
        yield qid, path
        for key, children in child_step_lists(step):
            yield from _walk(children, (*path, key), f"{qid}.", BRANCHES.get(key, ""))


def where_now(definition: WorkflowDefinition, positions: Any, path: Path,
              step: Any) -> tuple[int | None, int | None, bool]:
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
