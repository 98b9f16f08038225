"""Control flow on the machine: one instruction at a time, conditions and loops.

`execute` runs the instruction at the current frame's `pc` and returns None to keep
going, or what the caller must hand out (an agent step, a shell request, an answer).
Conditions are JavaScript (templates or bare expressions) evaluated by the engine with
JavaScript truthiness, so `[]` is true and `0` is false exactly as authors expect.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aromcp_workflows.expressions import ExpressionError, js_truthy
from aromcp_workflows.interpreter.program import (
    Break,
    Continue,
    Exit,
    Jump,
    JumpUnless,
    LoopEnter,
    LoopNext,
    Run,
)
from aromcp_workflows.interpreter.steps_exec import StepFailed
from aromcp_workflows.interpreter.thread import Frame, LoopFrame, Thread

if TYPE_CHECKING:
    from aromcp_workflows.interpreter.run import WorkflowRun


class ControlFlow:
    def execute(self: WorkflowRun, thread: Thread) -> Any:
        frame = thread.frames[-1]
        program = self.programs(frame.workflow)[frame.program]
        if frame.pc >= len(program.instructions):
            return self.frame_finished(thread)
        ins = program.instructions[frame.pc]
        try:
            if isinstance(ins, Run):
                return self.run_step(thread, frame, ins)
            if isinstance(ins, JumpUnless):
                if self.truthy(thread, frame, ins.condition, ins.step_id):
                    frame.pc += 1
                else:
                    frame.pc = ins.target
                    if ins.reason == "when":
                        self.record("step_skipped", self.delivered_id(frame, ins.step_id), self.task_of(thread),
                                    {"when": ins.condition})
            elif isinstance(ins, Jump):
                frame.pc = ins.target
            elif isinstance(ins, LoopEnter):
                self.enter_loop(thread, frame, ins)
            elif isinstance(ins, LoopNext):
                self.next_iteration(thread, frame, ins)
            elif isinstance(ins, Break):
                self.pop_loops(frame, ins.loop_id, inclusive=True)
                frame.pc = ins.target
            elif isinstance(ins, Continue):
                self.pop_loops(frame, ins.loop_id, inclusive=False)
                frame.pc = ins.target
            elif isinstance(ins, Exit):
                self.exit_frame(thread, frame, ins)
        except (ExpressionError, StepFailed) as exc:
            self.fail(thread, self.delivered_id(frame, ins.step_id), str(exc))
        return None

    # -- expressions ----------------------------------------------------------------
    def scope(self: WorkflowRun, thread: Thread, frame: Frame, extra: dict[str, Any] | None = None) -> Any:
        """What templates of this frame can read: state, loop, task and error variables."""
        variables: dict[str, Any] = {"workflow_id": self.workflow_id}
        if thread.context and frame.role in ("body", "cleanup") and frame.program.startswith(("task:", "cleanup:")):
            variables.update(thread.context)
        if frame.loops:
            variables.update(loop_variables(frame.loops[-1]))
        if thread.failing is not None and frame.role in ("on_failure", "cleanup"):
            variables["error"] = thread.failing
        if extra:
            variables.update(extra)
        return self.states[frame.state_key].scope(variables)

    def render(self: WorkflowRun, thread: Thread, frame: Frame, value: Any, origin: str,
               extra: dict[str, Any] | None = None, shell_quote: bool = False) -> Any:
        return self.engine.render(value, self.scope(thread, frame, extra), origin=origin,
                                  shell_quote=shell_quote)

    def render_command(self: WorkflowRun, thread: Thread, frame: Frame, fields: Any, command: str,
                       origin: str) -> tuple[Any, str]:
        """A step's fields and its shell-quoted command, rendered in one engine call."""
        rendered, quoted = self.engine.render_with_command(fields, command, self.scope(thread, frame), origin)
        return rendered, quoted

    def truthy(self: WorkflowRun, thread: Thread, frame: Frame, condition: Any, step_id: str) -> bool:
        origin = f"condition of step {step_id}"
        if isinstance(condition, str) and "{{" not in condition:
            value = self.engine.evaluate(condition, self.scope(thread, frame), origin=origin)
        else:
            value = self.render(thread, frame, condition, origin)
        return js_truthy(value)

    def delivered_id(self, frame: Frame, qualified_id: str) -> str:
        """Unique per delivery: `fix_loop.run_lint#2` in the loop's second iteration."""
        suffix = ".".join(str(loop.iteration) for loop in frame.loops)
        return f"{frame.id_prefix}{qualified_id}" + (f"#{suffix}" if suffix else "")

    # -- loops ------------------------------------------------------------------------
    def enter_loop(self: WorkflowRun, thread: Thread, frame: Frame, ins: LoopEnter) -> None:
        items = None
        if ins.kind == "foreach":
            items = self.render(thread, frame, ins.items, f"items of foreach {ins.step_id}")
            if isinstance(items, dict):
                items = list(items.values())
            if items is None:
                items = []
            if not isinstance(items, list):
                raise StepFailed(f"foreach {ins.step_id}: items must be a list, got {type(items).__name__}")
        frame.loops.append(LoopFrame(ins.loop_id, ins.kind, items))
        frame.pc += 1

    def next_iteration(self: WorkflowRun, thread: Thread, frame: Frame, ins: LoopNext) -> None:
        loop = frame.loops[-1]
        if ins.kind == "foreach":
            assert loop.items is not None
            if loop.index + 1 >= len(loop.items):
                return self.leave_loop(frame, ins.exit_target)
            loop.index += 1
            loop.iteration += 1
            frame.pc += 1
            return None
        limit = ins.max_iterations
        if loop.iteration >= limit:
            self.record("loop_limit", self.delivered_id(frame, ins.step_id), self.task_of(thread),
                        {"max_iterations": limit, "reason": f"while loop {ins.loop_id} stopped after "
                         f"{limit} iterations (max_iterations); the workflow continues after it"})
            return self.leave_loop(frame, ins.exit_target)
        loop.iteration += 1  # the condition sees the iteration it would start
        loop.index = loop.iteration - 1
        if not self.truthy(thread, frame, ins.condition, ins.step_id):
            loop.iteration -= 1
            return self.leave_loop(frame, ins.exit_target)
        frame.pc += 1
        return None

    def leave_loop(self, frame: Frame, target: int) -> None:
        frame.loops.pop()
        frame.pc = target

    def pop_loops(self, frame: Frame, loop_id: str, inclusive: bool) -> None:
        while frame.loops and frame.loops[-1].loop_id != loop_id:
            frame.loops.pop()
        if inclusive and frame.loops:
            frame.loops.pop()

    # -- frames -----------------------------------------------------------------------
    def exit_frame(self: WorkflowRun, thread: Thread, frame: Frame, ins: Exit) -> None:
        """`exit` ends the workflow (or the included child workflow it is in)."""
        message = str(self.render(thread, frame, ins.message, f"step {ins.step_id}")) if ins.message else None
        if message:
            thread.outbox.append(message)
        if ins.status == "failed":  # the error is the rendered message, as the user saw it
            self.fail(thread, self.delivered_id(frame, ins.step_id),
                      message or "the workflow exited with status failed", handled=False)
            return
        frame.pc = len(self.programs(frame.workflow)[frame.program].instructions)
        frame.loops.clear()
        if frame.role != "include":
            del thread.frames[1:]
            thread.frames[0].pc = len(self.programs(thread.frames[0].workflow)[thread.frames[0].program].instructions)
            thread.frames[0].loops.clear()

    def frame_finished(self: WorkflowRun, thread: Thread) -> None:
        frame = thread.frames.pop()
        if frame.role == "include" and thread.frames:
            parent = thread.frames[-1]
            child_state = self.states[frame.state_key]
            self.collect_traces(child_state, f"include {frame.id_prefix}")
            value = child_state.flattened()
            self.write(thread, parent, [(frame.result_path or "raw.included", "set", value)],
                       f"include_workflow {frame.id_prefix.rstrip('.')}")
            self.record("include_finished", frame.id_prefix.rstrip("."), self.task_of(thread))
        return None

    def task_of(self, thread: Thread) -> str | None:
        return None if thread.thread_id == "main" else thread.thread_id


def loop_variables(loop: LoopFrame) -> dict[str, Any]:
    info = {"index": loop.index, "iteration": loop.iteration, "first": loop.iteration == 1,
            "last": loop.items is not None and loop.index == len(loop.items) - 1}
    if loop.kind == "foreach" and loop.items is not None and 0 <= loop.index < len(loop.items):
        return {"item": loop.items[loop.index], "index": loop.index, "loop": info}
    return {"loop": info}
