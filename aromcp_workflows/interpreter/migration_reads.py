"""What the steps an instance still has to run read that it will not hold (`migration`).

Moving a live instance onto an edited definition is refused when a step still to run reads
a state name that nothing gives it: not the instance's state, not the new `default_state`
or computed fields, not a step still to run (nor an `include_workflow` in progress, when
its child finishes).  The steps still to run are each thread's from where it will stand
(the whole body of a loop it is in), the tasks its parallel steps will start, and the
main workflow's `on_failure` steps.
"""

from __future__ import annotations

from typing import Any

from aromcp_workflows.definition import (
    ConditionalStep,
    ForeachStep,
    LoadedWorkflow,
    ParallelForeachStep,
    WhileStep,
    WorkflowBundle,
    names_read,
    sites,
    written_paths,
)
from aromcp_workflows.interpreter.compiler import ProgramSet, StepPlace
from aromcp_workflows.interpreter.machine import Machine, computed_specs
from aromcp_workflows.interpreter.program import Run
from aromcp_workflows.state import StateTiers


def unknown_reads(run: Machine, bundle: WorkflowBundle, programs: dict[str, ProgramSet],
                  places: dict[str, dict[tuple[str, str], StepPlace]], pcs: dict[tuple[str, int], int],
                  states: dict[str, StateTiers]) -> list[tuple[str, StepPlace, str]]:
    """(workflow, step, name) for each name a step still to run reads that the moved
    instance will not hold: `bundle` the new definition with its `programs` and step
    `places`, `pcs` where each thread's frames will stand, `states` the moved state."""
    coming = _include_results(run)
    found: list[tuple[str, StepPlace, str]] = []
    for (workflow, program, state_key), qids in _remaining(run, bundle, programs, pcs).items():
        chosen = [places[workflow][(program, q)] for q in qids if (program, q) in places[workflow]]
        tiers = states[state_key]
        declared = {spec.name for spec in computed_specs(bundle.get(run.state_workflows[state_key]))}
        known = set(tiers.raw) | set(tiers.state) | declared | _written(chosen) | coming.get(state_key, set())
        found += [(workflow, place, name)
                  for place, name in _unknown_reads(bundle.workflows[workflow], program, chosen, known)]
    return found


def _remaining(run: Machine, bundle: WorkflowBundle, programs: dict[str, ProgramSet],
               pcs: dict[tuple[str, int], int]) -> dict[tuple[str, str, str], set[str]]:
    """The steps still to run, by (workflow, program, state key): each thread's from where it
    stands on (the whole body of a loop it is in), the tasks its parallel steps will start,
    and the main workflow's `on_failure` steps."""
    found: dict[tuple[str, str, str], set[str]] = {}
    for thread in run.threads.values():
        for index, frame in enumerate(thread.frames if not thread.done else []):
            program = programs[frame.workflow][frame.program]
            pc = pcs[(thread.thread_id, index)]
            qids = found.setdefault((frame.workflow, frame.program, frame.state_key), set())
            qids |= {ins.step_id for ins in program.instructions[pc:]}
            qids |= {ins.step_id for ins in program.instructions for loop in frame.loops
                     if ins.step_id == loop.loop_id or ins.step_id.startswith(f"{loop.loop_id}.")}
            for ins in program.instructions[pc:]:
                if isinstance(ins, Run) and isinstance(ins.step, ParallelForeachStep):
                    task = programs[frame.workflow][f"task:{ins.step.sub_agent_task}"]
                    found.setdefault((frame.workflow, task.key, frame.state_key), set()).update(
                        i.step_id for i in task.instructions)
    main = bundle.main.name
    found.setdefault((main, "on_failure", "main"), set()).update(
        i.step_id for i in programs[main]["on_failure"].instructions)
    return found


def _include_results(run: Machine) -> dict[str, set[str]]:
    """Names an `include_workflow` in progress will write into the state it was started
    from when its child finishes (its `result_path`), by that state's key."""
    found: dict[str, set[str]] = {}
    for thread in run.threads.values():
        for below, frame in zip(thread.frames, thread.frames[1:], strict=False):
            if frame.role == "include" and frame.result_path:
                head = frame.result_path.split(".")
                if len(head) > 1:
                    found.setdefault(below.state_key, set()).add(head[1].split("[", 1)[0])
    return found


def _written(places: list[StepPlace]) -> set[str]:
    """Top-level state names the given steps write."""
    names: set[str] = set()
    for place in places:
        for path in written_paths(place.step.model_dump(mode="json", by_alias=True)):
            head = path.split(".", 2)
            if len(head) > 1 and head[0] in ("raw", "state"):
                names.add(head[1].split("[", 1)[0].split("{", 1)[0])
        if place.step.type == "include_workflow" and place.step.state_update is None:
            names.add(place.qid.rsplit(".", 1)[-1])
    return names


def _unknown_reads(loaded: LoadedWorkflow, program: str, places: list[StepPlace],
                   known: set[str]) -> list[tuple[StepPlace, str]]:
    """(step, name) for each name a chosen step reads that is not known (each name once)."""
    by_path = {place.path: place for place in places}
    seen: set[str] = set()
    found: list[tuple[StepPlace, str]] = []
    for site in sites(loaded.definition.model_dump(mode="json", by_alias=True)):
        place = _owner(site.path, by_path)
        if place is None or _in_child(site.path, place):
            continue
        for name in sorted(names_read(site) - site.scope.variables - known - seen):
            seen.add(name)
            found.append((place, name))
    return found


def _owner(path: tuple[Any, ...], by_path: dict[tuple[Any, ...], StepPlace]) -> StepPlace | None:
    """The innermost chosen step whose data path holds `path`."""
    for size in range(len(path), 0, -1):
        place = by_path.get(path[:size])
        if place is not None:
            return place
    return None


def _in_child(path: tuple[Any, ...], place: StepPlace) -> bool:
    """Whether `path` lies in a step list nested in `place` (a step of its own, judged on its own)."""
    rest = path[len(place.path):]
    kinds = (ConditionalStep, WhileStep, ForeachStep)
    return isinstance(place.step, kinds) and len(rest) > 1 and rest[0] in ("then", "else", "body", "steps")


