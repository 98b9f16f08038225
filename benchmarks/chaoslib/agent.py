"""The campaign's agent: it runs one instance as a real client would, through faults.

It starts the instance with its plan's key as `idempotency_key`, performs every step the
server hands out (answers from `workload.Answers`), runs one sub-agent per parallel task,
and when a call's answer is lost it sends the same call again (the same arguments: a
resend, not a new answer) until one comes.  A tool error that asks for a retry (the store
could not save) is retried the same way; any other tool error is recorded and the agent
asks where its thread stands.  Every acknowledged answer is logged for the checker.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from chaoslib.transport import Lost, Reply
from chaoslib.workload import Answers, Plan

RETRY_PAUSE_S = (0.05, 1.0)
IMPATIENT_TOOLS = ("workflow_get_next_step", "workflow_step_complete")  # the calls that wait on commands


class Transport(Protocol):
    async def call(self, tool: str, args: dict[str, Any], timeout: float = ...) -> Reply: ...


class GaveUp(Exception):
    """The campaign's drain deadline passed before the instance finished."""


@dataclass
class Ack:
    """One acknowledged answer, as the checker reads it."""

    key: str
    thread: str  # "main" or the task id
    tool: str
    step_id: str | None  # the step a completion named
    success: bool | None  # step_complete's `success`
    next_step: str | None  # the step the answer handed out (None: the end, or not a step answer)
    next_type: str | None = None
    workflow_id: str = ""


@dataclass
class CallLog:
    acks: list[Ack] = field(default_factory=list)
    lost: int = 0
    errors: list[tuple[str, str, str]] = field(default_factory=list)  # (key, tool, text)
    resent: int = 0
    calls: int = 0
    gave_up: int = 0  # calls an impatient client gave up on (counted in `lost` too)


@dataclass
class Outcome:
    key: str
    workflow_id: str = ""
    status: str = ""
    problem: str = ""


class Agent:
    def __init__(self, transport: Transport, plan: Plan, answers: Answers, log: CallLog, deadline: float,
                 use_key: bool = True, patience: float | None = None) -> None:
        """`patience`: an impatient client, which gives up on a step call after that many
        seconds (its transport tells the server: `notifications/cancelled` over stdio) and
        sends it again, as a client behind a short read timeout does."""
        self.transport, self.plan, self.answers, self.log = transport, plan, answers, log
        self.deadline, self.use_key, self.patience = deadline, use_key, patience
        self.workflow_id = ""
        self.subs: dict[str, asyncio.Task[str]] = {}
        self.given: dict[tuple[str, str], int] = {}  # (thread, step id) -> answers chosen

    async def run(self) -> Outcome:
        outcome = Outcome(self.plan.key)
        args: dict[str, Any] = {"workflow": self.plan.workflow, "inputs": self.plan.inputs}
        if self.use_key:
            args["idempotency_key"] = self.plan.key
        try:
            started = await self.call("main", "workflow_start", args)
            self.workflow_id = outcome.workflow_id = started["workflow_id"]
            outcome.status = await self.thread(None)
        except GaveUp as exc:
            outcome.problem = f"gave up: {exc}"
        except Exception as exc:  # a checker finding, not a harness crash
            outcome.problem = f"{type(exc).__name__}: {exc}"
        finally:
            for task in self.subs.values():
                task.cancel()
        return outcome

    async def call(self, thread: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        """The tool's answer, however many times the call must be sent for one to come."""
        sends = 0
        while True:
            if time.monotonic() > self.deadline:
                raise GaveUp(f"{tool} still unanswered after {sends} sends")
            self.log.calls += 1
            self.log.resent += sends > 0
            sends += 1
            sent = time.monotonic()
            try:
                if self.patience is not None and tool in IMPATIENT_TOOLS:
                    reply = await self.transport.call(tool, args, timeout=self.patience)
                else:
                    reply = await self.transport.call(tool, args)
            except Lost:
                self.log.lost += 1
                impatient = self.patience is not None and tool in IMPATIENT_TOOLS
                self.log.gave_up += impatient and time.monotonic() - sent >= self.patience
                await asyncio.sleep(min(RETRY_PAUSE_S[1], RETRY_PAUSE_S[0] * sends))
                continue
            if reply.ok:
                self._acknowledged(thread, tool, args, reply.data)
                return reply.data
            self.log.errors.append((self.plan.key, tool, reply.text[:300]))
            if not retryable(reply.text):
                raise ToolFailed(reply.text)
            await asyncio.sleep(min(RETRY_PAUSE_S[1], RETRY_PAUSE_S[0] * sends))

    def _acknowledged(self, thread: str, tool: str, args: dict[str, Any], data: dict[str, Any]) -> None:
        step = data.get("next_step") if tool == "workflow_step_complete" else data.get("step")
        handed = step if isinstance(step, dict) else {}
        self.log.acks.append(Ack(self.plan.key, thread, tool, args.get("step_id"), data.get("success"),
                                 handed.get("id"), handed.get("type"), data.get("workflow_id") or self.workflow_id))

    async def thread(self, task_id: str | None) -> str:
        """Drive one thread (main, or a task) to its end; its final status."""
        label = task_id or "main"
        base: dict[str, Any] = {"workflow_id": self.workflow_id, **({"task_id": task_id} if task_id else {})}
        answer = await self.call(label, "workflow_get_next_step", base)
        step, status = answer.get("step"), answer.get("status", "")
        while step is not None:
            if step["type"] == "parallel_tasks":
                await self._fan_out(step)
                answer = await self.call(label, "workflow_step_complete", {**base, "step_id": step["id"]})
                step, status = answer.get("next_step"), answer.get("status", "")
            elif step["type"] == "wait":
                await asyncio.sleep(min(1.0, (step["definition"].get("retry_after_ms") or 200) / 1000))
                answer = await self.call(label, "workflow_get_next_step", base)
                step, status = answer.get("step"), answer.get("status", "")
            else:
                done = self.given.get((label, step["id"]), 0)
                self.given[(label, step["id"])] = done + 1
                result_status, result = self.answers.answer(self.plan.key, step, task_id, done)
                answer = await self.call(label, "workflow_step_complete",
                                         {**base, "step_id": step["id"], "status": result_status, "result": result})
                step, status = answer.get("next_step"), answer.get("status", "")
        return str(status)

    async def _fan_out(self, step: dict[str, Any]) -> None:
        """One sub-agent per task listed (one only, however often the batch is handed out);
        wait for those of this batch."""
        batch = [t["task_id"] for t in step["definition"]["tasks"]]
        for task_id in batch:
            if task_id not in self.subs:
                self.subs[task_id] = asyncio.create_task(self.thread(task_id))
        await asyncio.gather(*(self.subs[t] for t in batch))


class ToolFailed(Exception):
    """A tool error that no resend can fix."""


def retryable(text: str) -> bool:
    """Whether a tool error says the call took no effect and may be sent again."""
    lowered = text.lower()
    return any(word in lowered for word in ("retry", "could not save", "store error", "disk", "database"))
