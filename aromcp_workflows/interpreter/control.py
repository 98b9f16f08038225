"""Control-flow handlers: jumps, loops, `exit`, and the end of a frame.

Each handler takes the explicit `Ctx` and the instruction and returns None (go on) or an
effect.  Conditions are JavaScript (templates or bare expressions) evaluated with
JavaScript truthiness, so `[]` is true and `0` is false exactly as authors expect.
"""

from __future__ import annotations

from typing import Any

from aromcp_workflows.interpreter.effects import Outcome
from aromcp_workflows.interpreter.failures import Fail
from aromcp_workflows.interpreter.machine import Ctx, StepFailed
from aromcp_workflows.interpreter.ownership import carry_up
from aromcp_workflows.interpreter.program import Break, Continue, Exit, Jump, JumpUnless, LoopEnter, LoopNext
from aromcp_workflows.interpreter.thread import Frame, LoopFrame

Effect = Outcome | Fail | None


def jump_unless(ctx: Ctx, ins: JumpUnless) -> Effect:
    """A conditional's test (history: its value and the branch taken) or a step's `when`
    guard (history: `run` when it holds, a `step_skipped` when not): branch coverage
    (`aromcp-workflows test --coverage`) reads both."""
    if ins.reason == "condition":
        taken = ctx.truthy(ins.condition, ins.step_id, ("then", "else"))
    else:
        taken = ctx.truthy(ins.condition, ins.step_id, ("run", "skip"), record_false=False)
    if taken:
        ctx.frame.pc += 1
        return None
    ctx.frame.pc = ins.target
    if ins.reason == "when":
        ctx.record("step_skipped", ctx.delivered_id(ins.step_id), {"when": ins.condition})
    return None


def jump(ctx: Ctx, ins: Jump) -> Effect:
    ctx.frame.pc = ins.target
    return None


def enter_loop(ctx: Ctx, ins: LoopEnter) -> Effect:
    """Push a loop frame; a foreach evaluates its items here, once."""
    items = None
    if ins.kind == "foreach":
        items = ctx.render(ins.items, f"items of foreach {ins.step_id}")
        if isinstance(items, dict):
            items = list(items.values())
        if items is None:
            items = []
        if not isinstance(items, list):
            raise StepFailed(f"foreach {ins.step_id}: items must be a list, got {type(items).__name__}")
    ctx.frame.loops.append(LoopFrame(ins.loop_id, ins.kind, items, item_name=ins.item_name,
                                     index_name=ins.index_name))
    ctx.frame.pc += 1
    return None


def next_iteration(ctx: Ctx, ins: LoopNext) -> Effect:
    """Top of every iteration: bind the next item, or test the while condition and its limit."""
    frame, loop = ctx.frame, ctx.frame.loops[-1]
    if ins.kind == "foreach":
        assert loop.items is not None
        if loop.index + 1 >= len(loop.items):
            loop_ended(ctx, "items")
            return leave_loop(frame, ins.exit_target)
        loop.index += 1
        loop.iteration += 1
        frame.pc += 1
        return None
    loop.iteration += 1  # the condition sees the iteration it would start
    loop.index = loop.iteration - 1
    if not ctx.truthy(ins.condition, ins.step_id, ("iterate", "exit"), own_loop=True):
        loop.iteration -= 1
        loop_ended(ctx, "condition", max_iterations=ins.max_iterations)
        return leave_loop(frame, ins.exit_target)
    if loop.iteration > ins.max_iterations:
        loop.iteration -= 1
        return loop_limit(ctx, ins)
    frame.pc += 1
    return None


def loop_limit(ctx: Ctx, ins: LoopNext) -> Effect:
    """The condition still holds after the limit.  A `max_iterations` the author wrote is a
    normal end (the loop exits, the workflow goes on); the implicit limit — or
    `on_max_iterations: fail` — fails the workflow.  Recorded either way."""
    limit, policy = ins.max_iterations, ins.on_max_iterations
    loop_ended(ctx, "max_iterations", max_iterations=limit, on_max_iterations=policy, implicit=ins.implicit_limit)
    if policy == "continue":
        return leave_loop(ctx.frame, ins.exit_target)
    step_id = ctx.delivered_id(ins.step_id, outer_only=True)
    if ins.implicit_limit:
        return Fail(step_id, f"while loop {ins.loop_id} reached max_iterations ({limit}, the default: it sets "
                             "none) with its condition still true; fix the condition, or write "
                             "max_iterations: N to make N iterations a normal end of the loop")
    return Fail(step_id, f"while loop {ins.loop_id} reached max_iterations ({limit}) with its condition still "
                         "true, and on_max_iterations is fail; raise max_iterations or fix the condition "
                         "(without on_max_iterations: fail, reaching max_iterations ends the loop and the "
                         "workflow goes on)")


def loop_ended(ctx: Ctx, ended_by: str, **details: Any) -> None:
    """History: the innermost loop ends, and why (`condition`, `items`, `break` or
    `max_iterations`), named by the loop's own id (with its outer loops' iterations)."""
    loop = ctx.frame.loops[-1]
    ctx.record("loop_ended", ctx.delivered_id(loop.loop_id, outer_only=True),
               {"loop": loop.kind, "ended_by": ended_by, "iterations": loop.iteration, **details})


def leave_loop(frame: Frame, target: int) -> Effect:
    frame.loops.pop()
    frame.pc = target
    return None


def break_(ctx: Ctx, ins: Break) -> Effect:
    _pop_loops(ctx.frame, ins.loop_id, inclusive=False)
    if ctx.frame.loops:
        loop_ended(ctx, "break", **_limit_of(ctx, ins))
        ctx.frame.loops.pop()
    ctx.frame.pc = ins.target
    return None


def _limit_of(ctx: Ctx, ins: Break) -> dict[str, Any]:
    """`max_iterations` of the while loop a break leaves (for its end event)."""
    top = ctx.m.programs(ctx.frame.workflow)[ctx.frame.program].instructions[ins.top]
    return {"max_iterations": top.max_iterations} if isinstance(top, LoopNext) and top.kind == "while" else {}


def continue_(ctx: Ctx, ins: Continue) -> Effect:
    _pop_loops(ctx.frame, ins.loop_id, inclusive=False)
    ctx.frame.pc = ins.target
    return None


def _pop_loops(frame: Frame, loop_id: str, inclusive: bool) -> None:
    while frame.loops and frame.loops[-1].loop_id != loop_id:
        frame.loops.pop()
    if inclusive and frame.loops:
        frame.loops.pop()


def exit_(ctx: Ctx, ins: Exit) -> Effect:
    """`exit` ends the workflow (or the included child workflow it is in)."""
    thread, frame = ctx.thread, ctx.frame
    message = str(ctx.render(ins.message, f"step {ins.step_id}")) if ins.message else None
    if message:
        thread.outbox.append(message)
    if ins.status == "failed":  # the error is the rendered message, as the user saw it
        return Fail(ctx.delivered_id(ins.step_id), message or "the workflow exited with status failed",
                    handled=False)
    frame.pc = len(ctx.m.programs(frame.workflow)[frame.program].instructions)
    frame.loops.clear()
    if frame.role != "include":
        del thread.frames[1:]
        base = thread.frames[0]
        base.pc = len(ctx.m.programs(base.workflow)[base.program].instructions)
        base.loops.clear()
    return None


def frame_finished(ctx: Ctx) -> Effect:
    """The frame ran past its last instruction: pop it; an include hands its state up."""
    thread = ctx.thread
    frame = thread.frames.pop()
    if frame.role == "include" and thread.frames:
        child_state = ctx.m.states[frame.state_key]
        ctx.m.collect_traces(child_state, f"include {frame.id_prefix}")
        value: Any = child_state.flattened()
        parent = Ctx(ctx.m, thread, thread.frames[-1])
        parent.write([(frame.result_path or "raw.included", "set", value)],
                     f"include_workflow {frame.id_prefix.rstrip('.')}")
        carry_up(ctx.m.owners, frame.state_key, parent.frame.state_key, frame.result_path or "raw.included")
        ctx.record("include_finished", frame.id_prefix.rstrip("."))
    return None
