"""`parallel_foreach`: tasks, batches of `parallel_tasks` steps, waiting, and failure policy.

Items are evaluated once when the step starts; each becomes a task thread with its own
`task_id` and context.  The orchestrator receives batches of at most `max_parallel`
tasks; completing a batch before its tasks are finished answers with a `wait` step.  The
instruction's `pc` stays on the `parallel_foreach` until every batch is done, so a
restart simply re-delivers whatever is still open.  Under `on_sub_agent_error: fail_all`
the first failed task stops the fan-out at once: no further task is handed out, the
others are cancelled, and the workflow fails.
"""

from __future__ import annotations

import json
from typing import Any

from aromcp_workflows.definition import ParallelForeachStep
from aromcp_workflows.interpreter.effects import Answer, Completion, now_iso
from aromcp_workflows.interpreter.failures import Fail, fail
from aromcp_workflows.interpreter.machine import Ctx, Machine, StepFailed
from aromcp_workflows.interpreter.thread import Frame, Pending, Thread

WAIT_RETRY_MS = 2000


def run_parallel(ctx: Ctx, step: ParallelForeachStep, step_id: str) -> Answer | Fail | None:
    group = ctx.m.groups.get(step_id)
    if group is None:
        group = create_group(ctx, step, step_id)
    if group["queue"]:
        return deliver_batch(ctx, group, step)
    return finalize_group(ctx, step, group)


def create_group(ctx: Ctx, step: ParallelForeachStep, step_id: str) -> dict[str, Any]:
    m, frame = ctx.m, ctx.frame
    items = ctx.render(step.items, f"items of step {step_id}")
    if isinstance(items, dict):
        items = list(items.values())
    if not isinstance(items, list):
        raise StepFailed(f"parallel_foreach {step_id}: items must be a list, got {type(items).__name__}")
    task = m.bundle.get(frame.workflow).sub_agent_tasks[step.sub_agent_task]
    task_ids = []
    for index, item in enumerate(items):
        number = m.counters.get(step.sub_agent_task, 0)
        m.counters[step.sub_agent_task] = number + 1
        task_id = f"{step.sub_agent_task}_{number}"
        context = task_context(ctx, task, task_id, item, index)
        m.threads[task_id] = Thread(
            task_id, [Frame(frame.workflow, f"task:{step.sub_agent_task}", frame.state_key, f"{task_id}.")],
            status="pending", context=context, group=step_id, prompt=task_prompt(ctx, step, task_id, context))
        task_ids.append(task_id)
    group = {"step_id": step_id, "task_ids": task_ids, "queue": list(task_ids), "round": 0,
             "owner": ctx.thread.thread_id, "fail_all": step.on_sub_agent_error.strategy == "fail_all"}
    m.groups[step_id] = group
    ctx.record("tasks_created", step_id, {"task_ids": task_ids, "count": len(items)})
    if ctx.thread.thread_id == "main":  # many commits follow: `retry` and `fork` start again from here
        m.request_checkpoint(f"before parallel_foreach {step_id}")
    return group


def task_context(ctx: Ctx, task: Any, task_id: str, item: Any, index: int) -> dict[str, Any]:
    """What a task's steps can read: `item`, `index`, `task` (its inputs, defaults rendered
    over the item, and `task_id`), each input by its bare name, and `context` — the seed
    design's name for what the sub-agent was given (inputs, task_id, workflow_id, item)."""
    defaults = {name: spec.default for name, spec in task.inputs.items()}
    rendered = ctx.render({"inputs": defaults, "local": task.default_state}, f"inputs of task {task_id}",
                          {"item": item, "index": index})
    inputs = rendered["inputs"] or {}
    context: dict[str, Any] = dict(rendered["local"] or {})
    context.update(inputs)  # the seed's `{{ batch_id }}`: a task's inputs are names in its steps
    seen = {**inputs, "task_id": task_id, "workflow_id": ctx.m.workflow_id, "item": item, "index": index}
    context.update(item=item, index=index, task={**inputs, "task_id": task_id}, context=seen)
    return context


def task_prompt(ctx: Ctx, step: ParallelForeachStep, task_id: str, context: dict[str, Any]) -> str | None:
    """`sub_agent_prompt_override` rendered for one task, once, when the task is created:
    with its `item`, `index`, `task`, inputs and `context` over the state as it is then
    (the same moment `items` is evaluated, so a task's prompt and its item agree)."""
    if not step.sub_agent_prompt_override:
        return None
    rendered = ctx.render(step.sub_agent_prompt_override, f"sub_agent_prompt_override of task {task_id}", context)
    if rendered is None or isinstance(rendered, str):
        return rendered or ""
    return json.dumps(rendered, ensure_ascii=False)  # one whole template that gave a value: its JSON text


def deliver_batch(ctx: Ctx, group: dict[str, Any], step: ParallelForeachStep) -> Answer:
    thread = ctx.thread
    batch, group["queue"] = group["queue"][: step.max_parallel], group["queue"][step.max_parallel:]
    group["round"] += 1
    step_id = group["step_id"] if group["round"] == 1 else f"{group['step_id']}.batch{group['round']}"
    thread.pending = Pending(step_id, "parallel", messages=thread.outbox,
                             data={"group": group["step_id"], "task_ids": batch, "since": now_iso()})
    thread.outbox = []
    ctx.record("step_delivered", step_id, {"type": "parallel_tasks", "task_ids": batch})
    return ctx.m.answer(thread, parallel_step(ctx))


def parallel_step(ctx: Ctx) -> dict[str, Any]:
    """The `parallel_tasks` step, listing only the tasks of the batch not yet finished."""
    m, pending = ctx.m, ctx.thread.pending
    assert pending is not None
    step = m.step_as(ctx.frame, ParallelForeachStep)
    open_ids = [t for t in pending.data["task_ids"] if not m.threads[t].done]
    tasks = [task_entry(m, m.threads[t]) for t in open_ids]
    if not tasks:
        text = "Every task of this batch has finished; complete this step."
    elif step.sub_agent_prompt_override:
        text = (f"Start one sub-agent per task below, all at once, each with workflow_id {m.workflow_id}, its "
                "task_id and the task's own `prompt`. When all of them have finished, complete this step.")
    else:
        text = (f"Start one sub-agent per task below, all at once, each with `sub_agent_prompt` "
                f"(its {{task_id}} replaced by the task's task_id) and workflow_id {m.workflow_id}. "
                "When all of them have finished, complete this step.")
    return {"id": pending.step_id, "type": "parallel_tasks", "instructions": text,
            "definition": {"tasks": tasks, "sub_agent_prompt": m.sub_agent_prompt, "max_parallel": step.max_parallel}}


def task_entry(m: Machine, task: Thread) -> dict[str, Any]:
    """One task of a `parallel_tasks` step; `prompt` only when the workflow overrides the
    sub-agent prompt (then it replaces `sub_agent_prompt` for this task)."""
    entry = {"task_id": task.thread_id, "status": task.status, "context": public_context(m, task)}
    if task.prompt is not None:
        entry["prompt"] = task.prompt
    return entry


def public_context(m: Machine, task: Thread) -> dict[str, Any]:
    inputs = {k: v for k, v in task.context.get("task", {}).items() if k != "task_id"}
    return {"workflow_id": m.workflow_id, "task_id": task.thread_id, "item": task.context.get("item"),
            "index": task.context.get("index"), "inputs": inputs}


def is_wait_of(pending: Pending, step_id: str) -> bool:
    return pending.kind == "parallel" and step_id == f"{pending.step_id}.wait"


def complete_parallel(ctx: Ctx, pending: Pending) -> Completion:
    m, thread = ctx.m, ctx.thread
    step = m.step_as(ctx.frame, ParallelForeachStep)
    unfinished = [t for t in pending.data["task_ids"] if not m.threads[t].done]
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
    ctx.record("step_completed", pending.step_id, {"type": "parallel_tasks", "status": "success"})
    return Completion(True)


def finalize_group(ctx: Ctx, step: ParallelForeachStep, group: dict[str, Any]) -> Fail | Answer | None:
    m = ctx.m
    policy = step.on_sub_agent_error
    failed = [t for t in group["task_ids"] if m.threads[t].status == "failed"]
    if failed and step.wait_for_all and policy.strategy == "retry_failed":
        retry = [t for t in failed if m.threads[t].retries < policy.max_retries]
        if retry:
            for task_id in retry:
                reset_task(m, task_id, ctx.frame, step)
            group["queue"] = retry
            ctx.record("tasks_retried", group["step_id"], {"task_ids": retry})
            return deliver_batch(ctx, group, step)
    if failed and policy.collect_errors and policy.error_state_path:
        errors = [{"task_id": t, "error": m.threads[t].error, "item": m.threads[t].context.get("item")}
                  for t in failed]
        ctx.write([(policy.error_state_path, "append", e) for e in errors], f"step {group['step_id']}")
    ctx.record("tasks_finished", group["step_id"], {"failed": failed, "total": len(group["task_ids"])})
    if failed and step.wait_for_all and policy.strategy != "continue":
        detail = "; ".join(f"{t}: {m.threads[t].error}" for t in failed[:5])
        return Fail(group["step_id"], f"parallel_foreach {group['step_id']}: {len(failed)} of "
                                      f"{len(group['task_ids'])} sub-agent tasks failed ({detail})")
    ctx.frame.pc += 1
    return None


def reset_task(m: Machine, task_id: str, frame: Frame, step: ParallelForeachStep) -> None:
    """Start a failed task again from its first step, in the frame that spawned it."""
    old = m.threads[task_id]
    retries = old.retries + 1  # new step ids: a late completion from the failed attempt is refused
    m.threads[task_id] = Thread(
        task_id, [Frame(frame.workflow, f"task:{step.sub_agent_task}", frame.state_key, f"{task_id}.retry{retries}.")],
        status="pending", context=old.context, group=old.group, retries=retries, prompt=old.prompt)


def task_failed(m: Machine, task: Thread) -> None:
    """`fail_all`: the first failed task stops its fan-out now — nothing more is handed out,
    the group's other tasks are cancelled, and the thread that started it fails."""
    group = m.groups.get(task.group or "")
    if group is None or not group.get("fail_all") or group.get("stopped"):
        return
    group["stopped"], group["queue"] = True, []
    cancelled = [t for t in group["task_ids"] if not m.threads[t].done]
    for task_id in cancelled:
        other = m.threads[task_id]
        other.status, other.pending, other.frames = "cancelled", None, []
    owner = m.threads.get(group.get("owner", "main"))
    m.record("tasks_stopped", group["step_id"], None, {"failed": task.thread_id, "cancelled": cancelled})
    if owner is not None and not owner.done:
        fail(m, owner, Fail(group["step_id"], f"parallel_foreach {group['step_id']}: task {task.thread_id} failed "
                                              f"({task.error}); on_sub_agent_error is fail_all, so the remaining "
                                              f"{len(cancelled)} task(s) were cancelled"))
