"""Step lists → flat `Program`s with resolved jump targets, once per definition.

`conditional`, `while`, `foreach`, `break`, `continue`, `when` guards and `exit` become
jumps and loop instructions; every other step becomes one `Run`.  Qualified step ids
(`fix_loop.run_lint`) name each instruction's step: the container's id, a dot, the
step's own id (or one generated from its position: `shell_command_2`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import weakref
from dataclasses import dataclass, field
from typing import Any

from aromcp_workflows.definition import (
    ConditionalStep,
    ForeachStep,
    Step,
    WhileStep,
    WorkflowDefinition,
    child_step_lists,
)
from aromcp_workflows.interpreter.program import (
    Break,
    Continue,
    Exit,
    Instruction,
    Jump,
    JumpUnless,
    LoopEnter,
    LoopNext,
    Program,
    Run,
)


def local_step_id(step: Step, index: int, branch: str = "") -> str:
    """A step's own id: the author's, or one made from its position (`shell_command_2`,
    `then_state_update_1` in a conditional's branch).  A qualified id is the container's
    id, a dot, and this."""
    return step.id or f"{branch}{step.type}_{index + 1}"


@dataclass
class _Loop:
    loop_id: str
    top: int
    breaks: list[int] = field(default_factory=list)


class _Compiler:
    def __init__(self, key: str):
        self.key = key
        self.code: list[Instruction] = []
        self.loops: dict[str, str] = {}

    def emit(self, instruction: Instruction) -> int:
        self.code.append(instruction)
        return len(self.code) - 1

    def patch(self, index: int, **changes: Any) -> None:
        self.code[index] = dataclasses.replace(self.code[index], **changes)

    def steps(self, steps: list[Any], prefix: str, loops: list[_Loop], branch: str = "") -> None:
        for index, step in enumerate(steps):
            self.step(step, f"{prefix}{local_step_id(step, index, branch)}", loops)

    def step(self, step: Step, qid: str, loops: list[_Loop]) -> None:
        guard = None
        if step.when is not None:
            guard = self.emit(JumpUnless(qid, step.when, -1, "when"))
        if isinstance(step, ConditionalStep):
            self.conditional(step, qid, loops)
        elif isinstance(step, (WhileStep, ForeachStep)):
            self.loop(step, qid, loops)
        elif step.type == "break":
            loops[-1].breaks.append(self.emit(Break(qid, loops[-1].loop_id, -1, loops[-1].top)))
        elif step.type == "continue":
            self.emit(Continue(qid, loops[-1].loop_id, loops[-1].top))
        elif step.type == "exit":
            self.emit(Exit(qid, step.status, step.message))
        else:
            self.emit(Run(qid, step))
        if guard is not None:
            self.patch(guard, target=len(self.code))

    def conditional(self, step: ConditionalStep, qid: str, loops: list[_Loop]) -> None:
        test = self.emit(JumpUnless(qid, step.condition, -1))
        self.steps(step.then, f"{qid}.", loops, "then_")
        if step.else_:
            skip_else = self.emit(Jump(qid, -1))
            self.patch(test, target=len(self.code))
            self.steps(step.else_, f"{qid}.", loops, "else_")
            self.patch(skip_else, target=len(self.code))
        else:
            self.patch(test, target=len(self.code))

    def loop(self, step: WhileStep | ForeachStep, qid: str, loops: list[_Loop]) -> None:
        self.loops[qid] = qid
        if isinstance(step, WhileStep):
            self.emit(LoopEnter(qid, qid, "while", None, step.limit))
            top = self.emit(LoopNext(qid, qid, "while", step.condition, max_iterations=step.limit,
                                     on_max_iterations=step.at_limit,
                                     implicit_limit=step.max_iterations is None))
            body = step.body
        else:
            self.emit(LoopEnter(qid, qid, "foreach", step.items, 0, step.variable_name, step.index_name))
            top = self.emit(LoopNext(qid, qid, "foreach", None))
            body = step.steps
        frame = _Loop(qid, top)
        self.steps(body, f"{qid}.", [*loops, frame])
        self.emit(Jump(qid, top))
        end = len(self.code)
        self.patch(top, exit_target=end)
        for index in frame.breaks:
            self.patch(index, target=end)


@dataclass(frozen=True)
class StepPlace:
    """Where one step of a definition is: its program, qualified id, data path in the file
    (for `Positions.locate`), its model, and the qualified id of the step that holds it."""

    program: str
    qid: str
    path: tuple[Any, ...]
    step: Step
    parent: str | None


def program_roots(definition: WorkflowDefinition) -> list[tuple[str, tuple[Any, ...], list[Any], str]]:
    """Each program's key, data path, step list and id prefix, as `ProgramSet` compiles them."""
    roots: list[tuple[str, tuple[Any, ...], list[Any], str]] = [
        ("main", ("steps",), definition.steps, ""),
        ("on_failure", ("error_handling", "on_failure"), definition.error_handling.on_failure, "on_failure.")]
    for name, task in definition.sub_agent_tasks.items():
        roots.append((f"task:{name}", ("sub_agent_tasks", name, "steps"), task.steps, ""))
        roots.append((f"cleanup:{name}", ("sub_agent_tasks", name, "error_handling", "cleanup_on_error"),
                      task.error_handling.cleanup_on_error, "cleanup_on_error."))
    return roots


def step_places(definition: WorkflowDefinition) -> dict[tuple[str, str], StepPlace]:
    """Every step of a definition by (program key, qualified id), named exactly as the
    compiler names them: what coverage and migration point at with `file:line`."""
    places: dict[tuple[str, str], StepPlace] = {}

    def walk(program: str, steps: list[Any], path: tuple[Any, ...], prefix: str, parent: str | None,
             branch: str = "") -> None:
        for index, step in enumerate(steps):
            qid = f"{prefix}{local_step_id(step, index, branch)}"
            places[(program, qid)] = StepPlace(program, qid, (*path, index), step, parent)
            for key, children in child_step_lists(step):
                walk(program, children, (*path, index, key), f"{qid}.", qid,
                     f"{key}_" if isinstance(step, ConditionalStep) else "")

    for program, path, steps, prefix in program_roots(definition):
        walk(program, steps, path, prefix, None)
    return places


def compile_steps(steps: list[Any], key: str, prefix: str = "") -> Program:
    compiler = _Compiler(key)
    compiler.steps(steps, prefix, [])
    return Program(key, tuple(compiler.code), compiler.loops)


class ProgramSet:
    """Every program of one workflow definition, compiled once and looked up by key.

    Keys: `main`, `on_failure`, `task:<name>`, `cleanup:<name>`.
    """

    def __init__(self, definition: WorkflowDefinition):
        self.definition = definition
        self.programs: dict[str, Program] = {
            key: compile_steps(steps, key, prefix) for key, _path, steps, prefix in program_roots(definition)}

    def __getitem__(self, key: str) -> Program:
        return self.programs[key]


# Held weakly: compiled programs live as long as an instance runs them, so a server that
# meets many definitions does not keep every one it ever compiled.
_CACHE: weakref.WeakValueDictionary[str, ProgramSet] = weakref.WeakValueDictionary()


def programs_for(definition: WorkflowDefinition) -> ProgramSet:
    """Compiled programs, cached by the definition's content (compilation happens once)."""
    digest = hashlib.sha256(
        json.dumps(definition.model_dump(mode="json", by_alias=True), sort_keys=True).encode()
    ).hexdigest()
    cached = _CACHE.get(digest)
    if cached is None:
        cached = _CACHE.setdefault(digest, ProgramSet(definition))
    return cached


def listing(program: Program) -> list[str]:
    """A disassembly: one line per instruction with its jump targets (explain_plan)."""
    lines = []
    for index, ins in enumerate(program.instructions):
        lines.append(f"{index:>4}  {_describe(ins)}")
    lines.append(f"{len(program.instructions):>4}  END")
    return lines


def _describe(ins: Instruction) -> str:
    if isinstance(ins, Run):
        return f"RUN          {ins.step.type:<20} {ins.step_id}"
    if isinstance(ins, JumpUnless):
        label = "WHEN" if ins.reason == "when" else "IF"
        return f"{label:<12} {_text(ins.condition)} else → {ins.target}   ({ins.step_id})"
    if isinstance(ins, Jump):
        return f"JUMP         → {ins.target}   ({ins.step_id})"
    if isinstance(ins, LoopEnter):
        detail = f"items {_text(ins.items)}" if ins.kind == "foreach" else f"max {ins.max_iterations}"
        return f"LOOP_ENTER   {ins.kind} {ins.loop_id} ({detail})"
    if isinstance(ins, LoopNext):
        test = f" while {_text(ins.condition)}" if ins.kind == "while" else " next item"
        return f"LOOP_NEXT    {ins.loop_id}{test}, done → {ins.exit_target}"
    if isinstance(ins, Break):
        return f"BREAK        {ins.loop_id} → {ins.target}   ({ins.step_id})"
    if isinstance(ins, Continue):
        return f"CONTINUE     {ins.loop_id} → {ins.target}   ({ins.step_id})"
    if isinstance(ins, Exit):
        return f"EXIT         {ins.status}   ({ins.step_id})"
    return type(ins).__name__


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."
