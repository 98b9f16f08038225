"""Branch coverage of a workflow, read from an instance's history.

`branches(definition)` lists every branch a workflow has: each conditional's `then` and
`else`; each `when` guard run and skipped; each loop entered and skipped, and a `while`
left by its condition, by a `break` (when it holds one) and by its `max_iterations` (when
the file writes one); each `parallel_foreach` with no items, with some, and with a task
that failed; each sub-agent task run; each step `on_error`, task `cleanup_on_error` and
workflow `error_handling` path taken.  `covered(bundle, events)` says which of them one
instance took, from the events the interpreter records (`condition_checked` with its
branch, `step_skipped`, `loop_ended` with what ended it, `tasks_created`,
`task_started`, `step_error`, `error`, ...).  Nothing here runs a workflow.

A branch's `key` (`nothing_to_do:else`, `fix_batch/fix_files:skipped`) is what a test
file names under `coverage_ignore`; its `path` is the data path `Positions.locate` turns
into the line the report prints.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from aromcp_workflows.definition import (
    ConditionalStep,
    ForeachStep,
    IncludeWorkflowStep,
    ParallelForeachStep,
    ResultStep,
    WhileStep,
    WorkflowBundle,
    WorkflowDefinition,
)
from aromcp_workflows.interpreter import StepPlace, step_places

_LOOP_SUFFIX = re.compile(r"#\d+(?:\.\d+)*")  # `#2`, `#1.3`: which loop iteration delivered it
_RETRY = re.compile(r"^(?:attempt|retry)\d+\.")  # retry_workflow's and a retried task's id prefix


@dataclass(frozen=True)
class Branch:
    """One branch of one workflow: `key` names it in test files, `label` in reports."""

    workflow: str
    key: str
    label: str
    path: tuple[Any, ...]


def _key(place: StepPlace, outcome: str) -> str:
    owner = place.program.split(":", 1)[1] + "/" if place.program.startswith(("task:", "cleanup:")) else ""
    return f"{owner}{place.qid}:{outcome}"


def branches(definition: WorkflowDefinition) -> list[Branch]:
    """Every branch of one workflow, in the order of the file."""
    found: list[Branch] = []
    for place in step_places(definition).values():
        found += [Branch(definition.name, _key(place, outcome), label, place.path)
                  for outcome, label in _step_branches(place)]
    for name, task in definition.sub_agent_tasks.items():
        where = ("sub_agent_tasks", name)
        found.append(Branch(definition.name, f"{name}:ran", f"sub-agent task {name}: run", where))
        if task.error_handling.cleanup_on_error:
            found.append(Branch(definition.name, f"{name}:cleanup_on_error",
                                f"sub-agent task {name}: cleanup_on_error run (a step of it failed)",
                                (*where, "error_handling", "cleanup_on_error")))
    handling = definition.error_handling
    if handling.on_failure or handling.on_error != "checkpoint_and_fail":
        found.append(Branch(definition.name, "error_handling:taken",
                            f"error_handling ({handling.on_error}): a step failed", ("error_handling",)))
    return found


def _step_branches(place: StepPlace) -> Iterator[tuple[str, str]]:
    """(outcome, label) of each branch one step opens."""
    step, name = place.step, f"{place.step.type} {place.qid}"
    if step.when is not None:
        yield "run", f"{name}: when true, run"
        yield "skip", f"{name}: when false, skipped"
    if isinstance(step, ConditionalStep):
        yield "then", f"{name}: then"
        yield "else", f"{name}: else"
    elif isinstance(step, WhileStep | ForeachStep):
        yield "entered", f"{name}: entered"
        yield "skipped", f"{name}: skipped ({'condition false at once' if isinstance(step, WhileStep) else 'no items'})"
        if isinstance(step, WhileStep):
            yield from _while_exits(step, place.qid)
    elif isinstance(step, ParallelForeachStep):
        yield "no_items", f"{name}: no items"
        yield "some_items", f"{name}: some items"
        yield "task_failed", f"{name}: a task failed (on_sub_agent_error {step.on_sub_agent_error.strategy})"
    elif isinstance(step, ResultStep) and step.on_error != "fail":
        yield "on_error", f"{name}: failed, on_error {step.on_error} taken"


def _while_exits(step: WhileStep, qid: str) -> Iterator[tuple[str, str]]:
    name = f"while {qid}"
    yield "condition", f"{name}: left by its condition after an iteration"
    if _holds_break(step.body):
        yield "break", f"{name}: left by a break"
    if "max_iterations" in step.model_fields_set:
        yield "max_iterations", f"{name}: left at max_iterations ({step.max_iterations})"


def _holds_break(steps: list[Any]) -> bool:
    """Whether a loop body breaks out of this loop (a break in a nested loop leaves that one)."""
    for step in steps:
        if step.type == "break":
            return True
        if isinstance(step, ConditionalStep) and (_holds_break(step.then) or _holds_break(step.else_)):
            return True
    return False


# -- which branches an instance took -------------------------------------------------------------
Where = tuple[str, str, str]  # workflow, program, qualified step id


class _Locator:
    """Turns an event's delivered step id (and task) into the step of the bundle it ran."""

    def __init__(self, bundle: WorkflowBundle):
        self.bundle = bundle
        self.places = {name: step_places(loaded.definition) for name, loaded in bundle.workflows.items()}
        self.task_workflow: dict[str, str] = {}  # task id -> the workflow whose task it runs

    def where(self, step_id: str | None, task_id: str | None) -> Where | None:
        if not step_id:
            return None
        rest = _LOOP_SUFFIX.sub("", step_id)
        if task_id:
            workflow = self.task_workflow.get(task_id)
            if workflow is None or not rest.startswith(f"{task_id}."):
                return None
            rest = _RETRY.sub("", rest[len(task_id) + 1:])
            task = task_id.rsplit("_", 1)[0]
            program = f"cleanup:{task}" if rest.startswith("cleanup_on_error.") else f"task:{task}"
        else:
            workflow, rest = self.bundle.main.name, _RETRY.sub("", rest)
            program = "on_failure" if rest.startswith("on_failure.") else "main"
        return self._descend(workflow, program, rest)

    def _descend(self, workflow: str, program: str, rest: str) -> Where | None:
        """Into the included workflow an id runs in (`run_checks.check_lint.lint`)."""
        while (program, rest) not in self.places.get(workflow, {}):
            include = self._include_holding(workflow, program, rest)
            if include is None:
                return None
            workflow, program, rest = include.workflow, "main", rest[len(include.qid) + 1:]
        return workflow, program, rest

    def _include_holding(self, workflow: str, program: str, rest: str) -> _Include | None:
        for (prog, qid), place in self.places.get(workflow, {}).items():
            if prog == program and isinstance(place.step, IncludeWorkflowStep) and rest.startswith(f"{qid}."):
                return _Include(qid, place.step.workflow)
        return None


@dataclass(frozen=True)
class _Include:
    qid: str
    workflow: str


def covered(bundle: WorkflowBundle, events: Iterable[Any]) -> set[tuple[str, str]]:
    """The branches (workflow, key) one instance took, from its history (commit order)."""
    locator = _Locator(bundle)
    taken: set[tuple[str, str]] = set()
    for event in events:
        if event.kind == "tasks_created":
            found = locator.where(event.step_id, event.task_id)
            for task_id in event.data.get("task_ids") or []:
                locator.task_workflow[str(task_id)] = found[0] if found else bundle.main.name
        found = locator.where(event.step_id, event.task_id)
        taken |= _evidence(event, found, locator)
    return taken


def _evidence(event: Any, found: Where | None, locator: _Locator) -> set[tuple[str, str]]:
    """The branches one event shows were taken."""
    out: set[tuple[str, str]] = set()
    if event.task_id and event.kind == "task_started":
        workflow = locator.task_workflow.get(event.task_id, locator.bundle.main.name)
        out.add((workflow, f"{event.task_id.rsplit('_', 1)[0]}:ran"))
    if event.kind == "error" and event.step_id and not event.task_id:
        out.add((locator.bundle.main.name, "error_handling:taken"))
    if found is None:
        return out
    workflow, program, qid = found
    place = locator.places[workflow][(program, qid)]
    outcome = _outcome(event, place)
    if outcome is not None:
        out.add((workflow, _key(place, outcome)))
    if program.startswith("cleanup:"):
        out.add((workflow, f"{program.split(':', 1)[1]}:cleanup_on_error"))
    out |= {(workflow, _key(locator.places[workflow][(program, outer)], "entered"))
            for outer in _enclosing_loops(locator.places[workflow], program, qid)}
    return out


def _outcome(event: Any, place: StepPlace) -> str | None:
    """Which of the step's branches this event shows (None: none of them)."""
    kind, data = event.kind, event.data
    if kind == "condition_checked":
        return {"then": "then", "else": "else", "run": "run", "iterate": "entered"}.get(str(data.get("branch")))
    if kind == "step_skipped":
        return "skip"
    if kind == "loop_ended":
        if int(data.get("iterations") or 0) == 0:
            return "skipped"
        ends = {"condition": "condition", "break": "break", "max_iterations": "max_iterations"}
        return ends.get(str(data.get("ended_by")), "entered")
    if kind == "loop_limit":  # histories written before loop_ended recorded the limit
        return "max_iterations"
    if kind == "tasks_created":
        return "some_items" if data.get("count") else "no_items"
    if kind in ("tasks_finished", "tasks_stopped") and (data.get("failed") or kind == "tasks_stopped"):
        return "task_failed"
    if kind == "step_error" or (kind == "step_started" and int(data.get("attempt") or 0) > 0):
        return "on_error"
    return None


def _enclosing_loops(places: dict[tuple[str, str], StepPlace], program: str, qid: str) -> Iterator[str]:
    """The loops a step runs inside: any event of a step in a loop's body shows it was entered."""
    parent = places[(program, qid)].parent
    while parent is not None:
        holder = places[(program, parent)]
        if isinstance(holder.step, WhileStep | ForeachStep):
            yield parent
        parent = holder.parent
