"""`parallel_foreach`: tasks, batches of `parallel_tasks` steps, waiting, and failure policy.

Items are evaluated once when the step starts; each becomes a task thread with its own
`task_id` and context.  The orchestrator receives batches of at most `max_parallel`
tasks; completing a batch before its tasks are finished answers with a `wait` step.  The
instruction's `pc` stays on the `parallel_foreach` until every batch is done, so a
restart simply re-delivers whatever is still open.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aromcp_workflows.interpreter.outcomes import Completion
from aromcp_workflows.interpreter.steps_exec import StepFailed
from aromcp_workflows.interpreter.thread import Frame, Pending, Thread

if TYPE_CHECKING:
    from aromcp_workflows.interpreter.run import WorkflowRun

WAIT_RETRY_MS = 2000
_DEFAULT_SUB_AGENT_PROMPT = (
    "You are a workflow sub-agent for workflow {workflow_id}, task {task_id}. Call "
    "workflow_get_next_step(workflow_id, task_id), do exactly what the step says, report it "
    "with workflow_step_complete(workflow_id, step_id, result, task_id) and continue with the "
    "next_step in that answer until it is null. Never decide control flow yourself."
)


def sub_agent_prompt_text(workflow_id: str) -> str:
    try:
        from aromcp_workflows.integrations.prompts import sub_agent_prompt

        return sub_agent_prompt(workflow_id=workflow_id)
    except Exception:
        return _DEFAULT_SUB_AGENT_PROMPT.replace("{workflow_id}", workflow_id)


class ParallelSteps:
    def run_parallel(self: WorkflowRun, thread: Thread, frame: Frame, step: Any, step_id: str) -> Any:
        group = self.groups.get(step_id)
        if group is None:
            group = self.create_group(thread, frame, step, step_id)
        if group["queue"]:
            return self.deliver_batch(thread, group, step)
        return self.finalize_group(thread, frame, step, group)

    def create_group(self: WorkflowRun, thread: Thread, frame: Frame, step: Any, step_id: str) -> dict[str, Any]:
        items = self.render(thread, frame, step.items, f"items of step {step_id}")
        if isinstance(items, dict):
            items = list(items.values())
        if not isinstance(items, list):
            raise StepFailed(f"parallel_foreach {step_id}: items must be a list, got {type(items).__name__}")
        task = self.bundle.get(frame.workflow).sub_agent_tasks[step.sub_agent_task]
        task_ids = []
        for index, item in enumerate(items):
            number = self.counters.get(step.sub_agent_task, 0)
            self.counters[step.sub_agent_task] = number + 1
            task_id = f"{step.sub_agent_task}_{number}"
            context = self.task_context(thread, frame, task, task_id, item, index, step_id)
            self.threads[task_id] = Thread(
                task_id, [Frame(frame.workflow, f"task:{step.sub_agent_task}", frame.state_key, f"{task_id}.")],
                status="pending", context=context, group=step_id)
            task_ids.append(task_id)
        group = {"step_id": step_id, "task_ids": task_ids, "queue": list(task_ids), "round": 0}
        self.groups[step_id] = group
        self.record("tasks_created", step_id, self.task_of(thread), {"task_ids": task_ids, "count": len(items)})
        return group

    def task_context(self: WorkflowRun, thread: Thread, frame: Frame, task: Any, task_id: str, item: Any,
                     index: int, step_id: str) -> dict[str, Any]:
        """`item`, `index` and `task` (inputs with defaults rendered over the item, `task_id`)."""
        defaults = {name: spec.default for name, spec in task.inputs.items()}
        extra = {"item": item, "index": index}
        rendered = self.render(thread, frame, {"inputs": defaults, "local": task.default_state},
                               f"inputs of task {task_id}", extra)
        context: dict[str, Any] = dict(rendered["local"] or {})
        context.update(item=item, index=index, task={**(rendered["inputs"] or {}), "task_id": task_id})
        return context

    def deliver_batch(self: WorkflowRun, thread: Thread, group: dict[str, Any], step: Any) -> Any:
        batch, group["queue"] = group["queue"][: step.max_parallel], group["queue"][step.max_parallel:]
        group["round"] += 1
        step_id = group["step_id"] if group["round"] == 1 else f"{group['step_id']}.batch{group['round']}"
        thread.pending = Pending(step_id, "parallel", messages=thread.outbox,
                                 data={"group": group["step_id"], "task_ids": batch})
        thread.outbox = []
        self.record("step_delivered", step_id, self.task_of(thread), {"type": "parallel_tasks", "task_ids": batch})
        return self.pending_answer(thread)

    def parallel_step(self: WorkflowRun, thread: Thread) -> dict[str, Any]:
        """The `parallel_tasks` step, listing only the tasks of the batch not yet finished."""
        pending = thread.pending
        assert pending is not None
        frame = thread.frames[-1]
        step = self.programs(frame.workflow)[frame.program].instructions[frame.pc].step
        open_ids = [t for t in pending.data["task_ids"] if not self.threads[t].done]
        tasks = [{"task_id": t, "status": self.threads[t].status,
                  "context": self.public_context(self.threads[t])} for t in open_ids]
        prompt = step.sub_agent_prompt_override or sub_agent_prompt_text(self.workflow_id)
        if tasks:
            text = (f"Start one sub-agent per task below, all at once, each with `sub_agent_prompt` "
                    f"(its {{task_id}} replaced by the task's task_id) and workflow_id {self.workflow_id}. "
                    "When all of them have finished, complete this step.")
        else:
            text = "Every task of this batch has finished; complete this step."
        return {"id": pending.step_id, "type": "parallel_tasks", "instructions": text,
                "definition": {"tasks": tasks, "sub_agent_prompt": prompt, "max_parallel": step.max_parallel}}

    def public_context(self: WorkflowRun, task: Thread) -> dict[str, Any]:
        return {"workflow_id": self.workflow_id, "task_id": task.thread_id, "item": task.context.get("item"),
                "index": task.context.get("index"), "inputs": {k: v for k, v in task.context.get("task", {}).items()
                                                                 if k != "task_id"}}

    def is_wait_of(self, pending: Pending, step_id: str) -> bool:
        return pending.kind == "parallel" and step_id == f"{pending.step_id}.wait"

    def complete_parallel(self: WorkflowRun, thread: Thread, pending: Pending) -> Completion:
        frame = thread.frames[-1]
        step = self.programs(frame.workflow)[frame.program].instructions[frame.pc].step
        unfinished = [t for t in pending.data["task_ids"] if not self.threads[t].done]
        if unfinished and step.wait_for_all:
            wait = {"id": f"{pending.step_id}.wait", "type": "wait",
                    "instructions": (f"{len(unfinished)} task(s) have not finished: {', '.join(unfinished)}. "
                                     f"Wait for their sub-agents to finish, then complete step {pending.step_id} again."),
                    "definition": {"reason": "sub-agent tasks still running", "task_ids": unfinished,
                                   "retry_after_ms": WAIT_RETRY_MS}}
            return Completion(False, f"tasks not finished yet: {', '.join(unfinished)}", wait, advance=False)
        thread.pending = None
        thread.remember_completed(pending.step_id)
        thread.remember_completed(f"{pending.step_id}.wait")
        self.record("step_completed", pending.step_id, self.task_of(thread), {"type": "parallel_tasks",
                                                                               "status": "success"})
        return Completion(True)

    def finalize_group(self: WorkflowRun, thread: Thread, frame: Frame, step: Any, group: dict[str, Any]) -> Any:
        policy = step.on_sub_agent_error
        failed = [t for t in group["task_ids"] if self.threads[t].status == "failed"]
        if failed and step.wait_for_all and policy.strategy == "retry_failed":
            retry = [t for t in failed if self.threads[t].retries < policy.max_retries]
            if retry:
                for task_id in retry:
                    self.reset_task(task_id, frame, step)
                group["queue"] = retry
                self.record("tasks_retried", group["step_id"], self.task_of(thread), {"task_ids": retry})
                return self.deliver_batch(thread, group, step)
        if failed and policy.collect_errors and policy.error_state_path:
            errors = [{"task_id": t, "error": self.threads[t].error, "item": self.threads[t].context.get("item")}
                      for t in failed]
            self.write(thread, frame, [(policy.error_state_path, "append", e) for e in errors],
                       f"step {group['step_id']}")
        self.record("tasks_finished", group["step_id"], self.task_of(thread),
                    {"failed": failed, "total": len(group["task_ids"])})
        if failed and step.wait_for_all and policy.strategy != "continue":
            detail = "; ".join(f"{t}: {self.threads[t].error}" for t in failed[:5])
            raise StepFailed(f"parallel_foreach {group['step_id']}: {len(failed)} of {len(group['task_ids'])} "
                             f"sub-agent tasks failed ({detail})")
        frame.pc += 1
        return None

    def reset_task(self: WorkflowRun, task_id: str, frame: Frame, step: Any) -> None:
        """Start a failed task again from its first step, in the frame that spawned it."""
        old = self.threads[task_id]
        retries = old.retries + 1  # new step ids: a late completion from the failed attempt is refused
        self.threads[task_id] = Thread(
            task_id, [Frame(frame.workflow, f"task:{step.sub_agent_task}", frame.state_key,
                            f"{task_id}.retry{retries}.")],
            status="pending", context=old.context, group=old.group, retries=retries)
