"""Moving a live instance onto an edited definition, or saying exactly what stands in the way.

An instance runs the definition it started with.  `plan_move` works out whether it can go
on under a new one (`WorkflowBundle` of the edited files, positions included) from where it
stands; `apply_move` does it.  It can when:

- every thread's place exists in the new definition: each step on its path (the step it
  waits on, the `include_workflow` steps it is inside), the loops around it (of the same
  kind, a `while` not past its new `max_iterations`), its sub-agent task, and the step it
  waits on is of the same type; no server-side command is running;
- every input the new definition adds has a default;
- every state name the steps still to run read is in the instance's state, in the new
  `default_state` (added now), a computed field, or written by one of those steps;
- the new computed fields compute on the instance's state (they are recomputed now).

Otherwise each reason is a `MoveBlocker` naming the step and the new file's `file:line`, for
example `step fix_files.apply is gone from standards:fix.yaml (the loop at line 88 no longer
holds it)`.  Planning changes nothing: state is rebuilt on copies.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aromcp_workflows.definition import LoadedWorkflow, ParallelForeachStep, WorkflowBundle
from aromcp_workflows.expressions import ExpressionError
from aromcp_workflows.interpreter.compiler import Program, programs_for, step_places
from aromcp_workflows.interpreter.machine import Machine, computed_specs
from aromcp_workflows.interpreter.migration_reads import unknown_reads
from aromcp_workflows.interpreter.program import Instruction, JumpUnless, LoopEnter, Run
from aromcp_workflows.interpreter.thread import Frame, Thread
from aromcp_workflows.state import StateError, StateTiers

Place = tuple[str, str]  # workflow, program key


@dataclass(frozen=True)
class MoveBlocker:
    """One reason the instance cannot move, pointing into the new file."""

    message: str
    file: str | None = None
    line: int | None = None


@dataclass
class Move:
    """What moving an instance takes: new positions, inputs and state, or the blockers."""

    blockers: list[MoveBlocker] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # the plan, one line each, for people
    pcs: dict[tuple[str, int], int] = field(default_factory=dict)  # (thread id, frame index) -> new pc
    inputs: dict[str, Any] = field(default_factory=dict)
    states: dict[str, StateTiers] = field(default_factory=dict)


class _New:
    """The new bundle, with what planning asks of it: programs, step places, file and line."""

    def __init__(self, bundle: WorkflowBundle):
        self.bundle = bundle
        self.programs = {name: programs_for(w.definition) for name, w in bundle.workflows.items()}
        self.places = {name: step_places(w.definition) for name, w in bundle.workflows.items()}

    def loaded(self, workflow: str) -> LoadedWorkflow | None:
        return self.bundle.workflows.get(workflow)

    def program(self, workflow: str, key: str) -> Program | None:
        programs = self.programs.get(workflow)
        return None if programs is None else programs.programs.get(key)

    def line(self, workflow: str, path: tuple[Any, ...]) -> int | None:
        loaded = self.loaded(workflow)
        return None if loaded is None else loaded.positions.locate(path)[0]

    def blocker(self, workflow: str, message: str, path: tuple[Any, ...] = ()) -> MoveBlocker:
        loaded = self.loaded(workflow) or self.bundle.main
        return MoveBlocker(message, loaded.file, loaded.positions.locate(path)[0] if path else None)

    def file_name(self, workflow: str) -> str:
        return Path((self.loaded(workflow) or self.bundle.main).file).name


def plan_move(run: Machine, bundle: WorkflowBundle) -> Move:
    """Whether and how `run` can go on under `bundle` (nothing of `run` changes)."""
    new, move = _New(bundle), Move()
    for thread in run.threads.values():
        if not thread.done:
            _place_thread(run, new, thread, move)
    _move_inputs(run, new, move)
    if not move.blockers:
        _move_states(run, new, move)
    if not move.blockers:
        _check_reads(run, new, move)
    return move


# -- where each thread stands ---------------------------------------------------------------------
def _place_thread(run: Machine, new: _New, thread: Thread, move: Move) -> None:
    who = "the main thread" if thread.thread_id == "main" else f"task {thread.thread_id}"
    if thread.pending is not None and thread.pending.kind == "shell":
        move.blockers.append(MoveBlocker(f"{who} is running the command of step {thread.pending.step_id} now; "
                                     "migrate once it has finished"))
        return
    for index, frame in enumerate(thread.frames):
        top = index == len(thread.frames) - 1
        pc = _frame_place(run, new, frame, top, move, not_started=thread.status == "pending")
        if pc is None:
            continue
        move.pcs[(thread.thread_id, index)] = pc
        _check_loops(new, frame, pc, move)
        if top and thread.pending is not None:
            _check_pending(run, new, frame, pc, move)
    if not move.blockers and thread.frames:
        frame = thread.frames[-1]
        new_pc = move.pcs[(thread.thread_id, len(thread.frames) - 1)]
        ins = new.programs[frame.workflow][frame.program].instructions
        where = ins[new_pc].step_id if new_pc < len(ins) else "its end"
        move.notes.append(f"{who}: goes on at {where}" + _at_line(new, frame, where))


def _frame_place(run: Machine, new: _New, frame: Frame, top: bool, move: Move, not_started: bool) -> int | None:
    """The frame's pc in the new program (None, and a blocker, when its place is gone).

    The top frame stands on the instruction it runs next; a frame below it (an include's
    parent) has already moved past the `include_workflow` step it waits on; a task not
    started yet begins at its first step, whatever that is now."""
    old = run.programs(frame.workflow)[frame.program]
    program = new.program(frame.workflow, frame.program)
    if program is None:
        move.blockers.append(_program_gone(new, frame))
        return None
    if not_started:
        return 0
    anchor = frame.pc if top else frame.pc - 1
    if anchor >= len(old.instructions):
        return len(program.instructions)
    found = _find(program, old.instructions[anchor])
    if found is None:
        move.blockers.append(_step_gone(new, frame, old.instructions[anchor].step_id))
        return None
    return found if top else found + 1


def _find(program: Program, ins: Instruction) -> int | None:
    """The same instruction in another program: same kind, step and role."""
    for index, other in enumerate(program.instructions):
        if type(other) is type(ins) and other.step_id == ins.step_id and _role(other) == _role(ins):
            return index
    return None


def _role(ins: Instruction) -> Any:
    return ins.reason if isinstance(ins, JumpUnless) else getattr(ins, "kind", None)


def _program_gone(new: _New, frame: Frame) -> MoveBlocker:
    file = new.file_name(frame.workflow)
    if new.loaded(frame.workflow) is None:
        return new.blocker(frame.workflow, f"workflow {frame.workflow} is no longer part of "
                                           f"{new.file_name(new.bundle.main.name)} (nothing includes it)")
    task = frame.program.split(":", 1)[-1]
    return new.blocker(frame.workflow, f"sub-agent task {task} is gone from {file}", ("sub_agent_tasks",))


def _step_gone(new: _New, frame: Frame, qid: str) -> MoveBlocker:
    """`step fix_files.apply is gone from standards:fix.yaml (the loop at line 88 no longer holds it)`."""
    places = new.places[frame.workflow]
    file = new.file_name(frame.workflow)
    holder = qid.rsplit(".", 1)[0] if "." in qid else None
    while holder is not None and (frame.program, holder) not in places:
        holder = holder.rsplit(".", 1)[0] if "." in holder else None
    if holder is not None:
        place = places[(frame.program, holder)]
        what = {"while": "the loop", "foreach": "the loop", "conditional": "the conditional"}.get(
            place.step.type, f"step {holder}")
        line = new.line(frame.workflow, place.path)
        return new.blocker(frame.workflow, f"step {qid} is gone from {file} ({what} at line {line} no longer "
                                           "holds it)", place.path)
    moved = [p for p in places.values() if p.qid.rsplit(".", 1)[-1] == qid.rsplit(".", 1)[-1]]
    if moved:
        return new.blocker(frame.workflow, f"step {qid} is gone from {file} (a step {moved[0].qid} is at line "
                                           f"{new.line(frame.workflow, moved[0].path)}: an instance cannot move "
                                           "to a step in another place)", moved[0].path)
    return new.blocker(frame.workflow, f"step {qid} is gone from {file}")


def _check_loops(new: _New, frame: Frame, pc: int, move: Move) -> None:
    program = new.programs[frame.workflow][frame.program]
    for loop in frame.loops:
        enter = next((i for i in program.instructions if isinstance(i, LoopEnter) and i.loop_id == loop.loop_id), None)
        place = new.places[frame.workflow].get((frame.program, loop.loop_id))
        path = place.path if place is not None else ()
        if enter is None or enter.kind != loop.kind:
            move.blockers.append(new.blocker(frame.workflow, f"the {loop.kind} loop {loop.loop_id} this instance is "
                                             f"inside is gone from {new.file_name(frame.workflow)}", path))
        elif loop.kind == "while" and loop.iteration > enter.max_iterations:
            move.blockers.append(new.blocker(frame.workflow, f"while loop {loop.loop_id} is at iteration "
                                             f"{loop.iteration}, past its new max_iterations ({enter.max_iterations})",
                                             (*path, "max_iterations")))


def _check_pending(run: Machine, new: _New, frame: Frame, pc: int, move: Move) -> None:
    """The step the thread waits on is still a step of the same type (it keeps the text it
    was delivered with; its answer is stored as the new definition says)."""
    old = run.instruction(frame)
    now = new.programs[frame.workflow][frame.program].instructions[pc]
    if not isinstance(old, Run) or not isinstance(now, Run):
        return
    place = new.places[frame.workflow].get((frame.program, now.step_id))
    path = place.path if place is not None else ()
    if old.step.type != now.step.type:
        move.blockers.append(new.blocker(frame.workflow, f"step {now.step_id} waits for its answer as type "
                                         f"{old.step.type}, but {new.file_name(frame.workflow)} makes it type "
                                         f"{now.step.type}", path))
    elif (isinstance(now.step, ParallelForeachStep) and isinstance(old.step, ParallelForeachStep)
          and now.step.sub_agent_task != old.step.sub_agent_task):
        move.blockers.append(new.blocker(frame.workflow, f"step {now.step_id} runs task {old.step.sub_agent_task}, "
                                         f"but {new.file_name(frame.workflow)} makes it run "
                                         f"{now.step.sub_agent_task}", path))


def _at_line(new: _New, frame: Frame, qid: str) -> str:
    place = new.places[frame.workflow].get((frame.program, qid))
    line = new.line(frame.workflow, place.path) if place is not None else None
    return f" (line {line})" if line else ""


# -- inputs and state -------------------------------------------------------------------------------
def _json(value: Any) -> str:
    """A value as the workflow's author writes it (JSON: null, true, "text"), not as Python prints it."""
    return json.dumps(value, ensure_ascii=False, default=str)


def _move_inputs(run: Machine, new: _New, move: Move) -> None:
    """The instance's inputs under the new declarations: new ones take their defaults."""
    from aromcp_workflows.interpreter.inputs import InputError, check_inputs

    main = new.bundle.main.definition
    kept = {name: value for name, value in run.inputs.items() if name in main.inputs}
    for name in sorted(set(run.inputs) - set(main.inputs)):
        move.notes.append(f"input {name}: no longer declared, dropped")
    for name, spec in main.inputs.items():
        if name in run.inputs:
            continue
        if spec.default is None and spec.required:
            move.blockers.append(new.blocker(main.name, f"input {name} is new and has no default: this instance "
                                             "cannot be given a value for it; add `default:`", ("inputs", name)))
        else:
            move.notes.append(f"input {name}: new, takes its default {_json(spec.default)}")
    try:
        move.inputs = check_inputs(main.name, main.inputs, kept)
    except InputError as exc:
        if not move.blockers:
            move.blockers.append(new.blocker(main.name, f"this instance's inputs do not fit the new declarations: "
                                             f"{exc}", ("inputs",)))


def _move_states(run: Machine, new: _New, move: Move) -> None:
    """Each state under the new definition: new default_state names added, every computed
    field recomputed (on new objects; the run keeps its own until `apply_move`)."""
    for key, tiers in run.states.items():
        definition = new.bundle.get(run.state_workflows[key])
        snap = tiers.snapshot()
        inputs = move.inputs if key == "main" else snap.get("inputs") or {}
        specs = computed_specs(definition)
        try:
            fresh = StateTiers(run.engine, specs, inputs)
            fresh.initialize(definition.default_state.model_dump())
            raw, state = dict(snap.get("raw") or {}), dict(snap.get("state") or {})
            for tier, values, defaults in (("raw", raw, fresh.raw), ("state", state, fresh.state)):
                for name in sorted(set(defaults) - set(values)):
                    values[name] = defaults[name]
                    move.notes.append(f"state {tier}.{name}: new in default_state, set to {_json(defaults[name])}")
            moved = StateTiers.from_snapshot(run.engine, specs, {"raw": raw, "state": state, "inputs": inputs})
            moved.recompute_all("migration")
        except (StateError, ExpressionError) as exc:
            move.blockers.append(new.blocker(definition.name, f"the new state_schema does not compute on this "
                                             f"instance's state: {exc}", ("state_schema",)))
            continue
        move.states[key] = moved
    fields = sorted(spec.name for spec in computed_specs(new.bundle.main.definition))
    if fields:
        move.notes.append(f"computed fields recomputed: {', '.join(fields)}")


# -- what the steps still to run read ---------------------------------------------------------------
def _check_reads(run: Machine, new: _New, move: Move) -> None:
    """Every name a step still to run reads must exist when it runs."""
    for workflow, place, name in unknown_reads(run, new.bundle, new.programs, new.places, move.pcs, move.states):
        move.blockers.append(new.blocker(workflow, f"step {place.qid} reads {name}, which this instance's "
                                         "state does not hold and neither default_state nor a step still to "
                                         "run sets", place.path))


# -- doing it ---------------------------------------------------------------------------------------
def apply_move(run: Machine, bundle: WorkflowBundle, move: Move, old_file: str) -> None:
    """Put `run` on `bundle` as `move` planned (it must have no blockers); the history keeps
    the definition it ran before (`migrated`), for `debug`."""
    assert not move.blockers, "apply_move needs a move without blockers"
    old = run.bundle.snapshot()
    for thread in run.threads.values():
        for index, frame in enumerate(thread.frames):
            if (thread.thread_id, index) in move.pcs:
                frame.pc = move.pcs[(thread.thread_id, index)]
    run.bundle, run.inputs = bundle, move.inputs
    run.reset_definitions()
    for key, tiers in move.states.items():
        run.states[key] = tiers
        run.collect_traces(tiers, "migration")
    run.record("migrated", data={"file": bundle.main.file, "from_file": old_file, "plan": move.notes,
                                 "old_definition": old})
