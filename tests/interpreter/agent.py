"""A scripted agent for in-process interpreter tests: performs atomic steps like a real
orchestrator would (answers from a script, concurrent sub-agents for parallel tasks)."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aromcp_workflows.app.driver import Driver

Answerer = Callable[[dict[str, Any]], Any]


@dataclass
class Transcript:
    steps: list[tuple[str, str, str]] = field(default_factory=list)  # (thread, type, id)
    messages: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_step(self, thread: str, step: dict[str, Any]) -> None:
        with self.lock:
            self.steps.append((thread, step["type"], step["id"]))

    def add_messages(self, messages: list[str]) -> None:
        with self.lock:
            self.messages.extend(messages)


class ScriptedAgent:
    """Economical protocol: act, then step_complete (whose answer carries the next step)."""

    def __init__(self, driver: Driver, answers: dict[str, Any] | None = None, cwd: Path | None = None,
                 answerer: Answerer | None = None):
        self.driver = driver
        self.answers = answers or {}
        self.cwd = cwd
        self.answerer = answerer
        self.transcript = Transcript()
        self.calls = 0

    def answer_for(self, step: dict[str, Any]) -> tuple[str, Any]:
        if self.answerer is not None:
            answer = self.answerer(step)
            if isinstance(answer, tuple):
                return answer
            return "success", answer
        definition = step["definition"]
        if step["type"] == "agent_shell_command":
            proc = subprocess.run(["bash", "-c", definition["command"]], cwd=self.cwd, capture_output=True, text=True)
            return ("success", proc.stdout) if proc.returncode == 0 else ("failed", proc.stderr)
        key = definition.get("method") if step["type"] == "mcp_call" else step["id"].split("#")[0].rsplit(".", 1)[-1]
        value = self.answers.get(step["id"], self.answers.get(key))
        if callable(value):
            value = value(step)
        return "success", value

    def run(self, task_id: str | None = None) -> Any:
        answer = self.driver.next_step(task_id)
        self.calls += 1
        self.transcript.add_messages(answer.messages)
        step = answer.step
        while step is not None:
            self.transcript.add_step(task_id or "main", step)
            if step["type"] == "parallel_tasks":
                self.run_sub_agents([t["task_id"] for t in step["definition"]["tasks"]])
                status, result = "success", None
            elif step["type"] == "wait":
                self.run_sub_agents(step["definition"]["task_ids"])
                step = {**step, "id": step["id"].removesuffix(".wait")}
                status, result = "success", None
            else:
                status, result = self.answer_for(step)
            reply = self.driver.complete(task_id, step["id"], status, result,
                                         error=result if status == "failed" else None)
            self.calls += 1
            self.transcript.add_messages(reply.messages)
            step = reply.next_step
        return self.driver.next_step(task_id) if task_id is None else None

    def run_sub_agents(self, task_ids: list[str]) -> None:
        errors: list[BaseException] = []

        def work(tid: str) -> None:
            try:
                self.run(tid)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(tid,)) for tid in task_ids]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
