"""The headless agent's protocol loop: perform atomic steps over one MCP client session.

`HeadlessAgent` speaks only the MCP tools (README, "MCP interface"), the economical way (each
`workflow_step_complete` answer carries the next step and the messages), runs
`agent_shell_command` locally, answers from an `AnswerBook` (or a terminal), and runs the
tasks of a `parallel_tasks` step as concurrent sub-agents (asyncio tasks on one session).
`runner.py` starts the server and builds the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import threading
from pathlib import Path
from typing import Any

from aromcp_workflows.runner.answers import AnswerBook, ScriptedAnswer, shell_answer
from aromcp_workflows.runner.report import (
    Printer,
    RunOutcome,
    TranscriptEntry,
    id_list,
    is_command_wait,
    result_summary,
    short,
    step_summary,
)
from aromcp_workflows.runner.tracing import RunTrace
from aromcp_workflows.safety import command_environment

MAX_REDELIVERIES = 250  # > user_input's max_attempts limit (100): only a server bug gets here
DEFAULT_SHELL_TIMEOUT_MS = 10 * 60 * 1000  # as the server's shell_command default
AGENT_STEP_TYPES = ("mcp_call", "user_input", "agent_prompt")


SDK_ERROR_PREFIX = re.compile(r"^(?:Error executing tool [\w.-]+:\s*)+")


def tool_error_text(content: list[Any]) -> str:
    """A tool error as the user should read it: the server's own message, without the
    SDK's ``Error executing tool <name>:`` wrapper (an internal detail)."""
    text = " ".join(getattr(c, "text", "") for c in content).strip()
    return SDK_ERROR_PREFIX.sub("", text)


class Abort(Exception):
    """The runner cannot go on (no answer for a step, a tool error): the run stops."""


class HeadlessAgent:
    """Drives one workflow instance over an MCP client session."""

    def __init__(self, client: Any, answers: AnswerBook, project_dir: Path, printer: Printer,
                 interactive: bool = False, complete_parallel_early: bool = False, seed_style: bool = False,
                 trace: RunTrace | None = None):
        self.client = client
        self.trace = trace or RunTrace(None)  # the runner's spans (runner/tracing.py), when tracing is on
        self.answers = answers
        self.project_dir = project_dir
        self.printer = printer
        self.interactive = interactive
        self.complete_parallel_early = complete_parallel_early
        self.seed_style = seed_style
        self.outcome: RunOutcome | None = None
        self.workflow_id = ""
        self.sub_agents: dict[str, asyncio.Task[dict[str, Any]]] = {}
        self.tasks_done = 0
        self.ask_lock = asyncio.Lock()

    # -- protocol -----------------------------------------------------------------
    async def call(self, tool: str, args: dict[str, Any], who: str = "main", loop: bool = True) -> dict[str, Any]:
        assert self.outcome is not None
        self.outcome.tool_calls += 1
        self.outcome.loop_calls += int(loop)

        async def progress(done: float, total: float | None, message: str | None) -> None:
            self.printer.progress(who, done, total, message)

        result = await self.client.call_tool(tool, args, progress_callback=progress)
        if result.is_error:
            raise Abort(tool_error_text(result.content) or f"{tool} failed without a message")
        if tool in ("workflow_start", "workflow_resume"):
            self.trace.join(result.meta)  # the instance's root span, when the server traces
        data = result.structured_content
        if not isinstance(data, dict):
            raise Abort(f"{tool} answered without structured content: {short(result.content, 200)}")
        return data

    def show(self, messages: list[str]) -> None:
        assert self.outcome is not None
        for message in messages or []:
            self.outcome.messages.append(message)
            self.printer.message(message)

    # -- the run --------------------------------------------------------------------
    async def run(self, workflow: str, inputs: dict[str, Any]) -> RunOutcome:
        self.outcome = outcome = RunOutcome(workflow=workflow, workflow_id=None, status="not_started")
        try:
            started = await self.call("workflow_start", {"workflow": workflow, "inputs": inputs})
        except Abort as exc:
            outcome.error = str(exc)
            return outcome
        self.workflow_id = outcome.workflow_id = started["workflow_id"]
        outcome.status = started.get("status", "running")
        self.printer.detail(f"run {workflow}: workflow_id {self.workflow_id} (project {self.project_dir})")
        return await self.drive()

    async def resume(self, workflow_id: str, checkpoint_id: str | None = None) -> RunOutcome:
        """Go on with an instance stopped earlier (interrupted, or rolled back to a checkpoint)."""
        self.outcome = outcome = RunOutcome(workflow="", workflow_id=workflow_id, status="not_started")
        args = {"workflow_id": workflow_id} | ({"checkpoint_id": checkpoint_id} if checkpoint_id else {})
        try:
            resumed = await self.call("workflow_resume", args)
            outcome.workflow = str((await self.call("workflow_status", {"workflow_id": workflow_id},
                                                    loop=False)).get("workflow", ""))
        except Abort as exc:
            outcome.error = str(exc)
            return outcome
        self.workflow_id = workflow_id
        outcome.status = resumed.get("status", "running")
        self.printer.detail(f"resume {outcome.workflow}: workflow_id {workflow_id} ({outcome.status})")
        if outcome.status in ("completed", "failed", "cancelled"):
            await self.read_final_state()
            return outcome
        return await self.drive()

    async def drive(self) -> RunOutcome:
        """From the current step to the end (the loop of `run` and `resume`)."""
        assert self.outcome is not None
        outcome = self.outcome
        try:
            first = await self.call("workflow_get_next_step", {"workflow_id": self.workflow_id})
            self.show(first.get("messages", []))
            last = await self.loop(None, first.get("step"), first)
            outcome.status, outcome.error = last.get("status", "failed"), last.get("error")
        except Abort as exc:
            outcome.status, outcome.error = "aborted", str(exc)
            await self.cancel_sub_agents()
            await self.give_up()
        except BaseException:
            await self.cancel_sub_agents()  # the session is going away: stop every sub-agent
            raise
        await self.read_final_state()
        return outcome

    async def loop(self, task_id: str | None, step: dict[str, Any] | None, last: dict[str, Any]) -> dict[str, Any]:
        """Perform steps until the server answers with no next step; return that answer."""
        assert self.outcome is not None
        who = task_id or "main"
        parallel_id: str | None = None
        seen: dict[str, int] = {}
        while step is not None:
            step_id, kind = str(step["id"]), str(step["type"])
            seen[step_id] = seen.get(step_id, 0) + (0 if is_command_wait(step) else 1)  # a long command: many
            if seen[step_id] > MAX_REDELIVERIES:
                raise Abort(f"the server delivered step {step_id} of {who} {MAX_REDELIVERIES} times; giving up")
            parallel_id = step_id if kind == "parallel_tasks" else parallel_id
            with self.trace.step(self.workflow_id, step, task_id) as span:
                entry, reply, result, error = await self.perform_and_report(step, task_id, parallel_id)
                self.trace.failed(span, error)
            self.outcome.transcript.append(entry)
            shown = "waiting" if (not entry.accepted and kind == "parallel_tasks") or is_command_wait(step) else \
                result_summary(entry.status, result, error)
            self.printer.step(entry, shown)
            if self.seed_style and reply.get("success", True):
                reply = await self.next_step_again(task_id, reply)
            self.show(reply.get("messages", []))
            step, last = reply.get("next_step"), reply
        return last

    async def perform_and_report(self, step: dict[str, Any], task_id: str | None, parallel_id: str | None
                                 ) -> tuple[TranscriptEntry, dict[str, Any], Any, str | None]:
        """Perform one step and report it with `workflow_step_complete`: the transcript entry,
        the reply, and the result and error reported."""
        assert self.outcome is not None
        report_id, result, error = await self.act(step, task_id, parallel_id)
        entry = TranscriptEntry(task_id, str(step["id"]), str(step["type"]), step_summary(step),
                                "success" if error is None else "failed", error=error)
        args: dict[str, Any] = {"workflow_id": self.workflow_id, "step_id": report_id, "status": entry.status}
        if result is not None:
            args["result"] = result
        if error is not None:
            args["error"] = error
        if task_id is not None:
            args["task_id"] = task_id
        reply = await self.call("workflow_step_complete", args, task_id or "main")
        self.outcome.agent_steps += 1
        if not reply.get("success", True):
            entry.accepted, entry.error = False, reply.get("error")
        return entry, reply, result, error

    async def next_step_again(self, task_id: str | None, reply: dict[str, Any]) -> dict[str, Any]:
        """Seed style: ignore step_complete's answer and ask workflow_get_next_step, which
        must hand out the same next step and messages (docs/language.md, the atomic step); a
        difference is an error.  Not after a command's wait step: the command may have ended
        in between, and this call then brings the step after it."""
        args = {"workflow_id": self.workflow_id} | ({"task_id": task_id} if task_id else {})
        again = await self.call("workflow_get_next_step", args, task_id or "main")
        step, expected = again.get("step"), reply.get("next_step")
        if is_command_wait(expected or {}):
            return {**again, "success": True, "next_step": step}
        if (step or {}).get("id") != (expected or {}).get("id") or again.get("messages") != reply.get("messages"):
            raise Abort(f"workflow_get_next_step after step_complete answered step {(step or {}).get('id')} with "
                        f"messages {again.get('messages')}, but step_complete answered "
                        f"{(expected or {}).get('id')} with {reply.get('messages')}")
        return {**reply, "next_step": step, "messages": again.get("messages", [])}

    async def act(self, step: dict[str, Any], task_id: str | None,
                  parallel_id: str | None) -> tuple[str, Any, str | None]:
        """Perform one step; return the step id to report, the result and the error (if failed)."""
        step_id, kind = str(step["id"]), str(step["type"])
        if kind == "parallel_tasks":
            await self.run_parallel(step)
            return step_id, None, None
        if is_command_wait(step):
            return step_id, None, None  # completing it waits on the command and brings the step after it
        if kind == "wait":
            waiting = [str(t) for t in step["definition"].get("task_ids", [])]
            if all(t in self.sub_agents and self.sub_agents[t].done() for t in waiting):
                # our sub-agents ended but the server says the tasks did not: pull them again
                await asyncio.sleep(min(float(step["definition"].get("retry_after_ms") or 0), 200) / 1000)
                self.start_sub_agents(waiting, step_id)
            await self.wait_for(waiting)
            return parallel_id or step_id.removesuffix(".wait"), None, None  # complete the parallel step again
        answer = await self.perform(step, task_id)
        if answer.status == "failed":
            return step_id, answer.result, answer.error or "failed"
        return step_id, answer.result, None

    # -- sub-agents -----------------------------------------------------------------
    async def run_parallel(self, step: dict[str, Any]) -> None:
        definition = step["definition"]
        tasks = definition.get("tasks", [])
        task_ids = [str(t["task_id"]) for t in tasks]
        for task in tasks:
            self.brief(str(task["task_id"]), task.get("prompt"), str(definition.get("sub_agent_prompt") or ""))
        self.start_sub_agents(task_ids, str(step["id"]))
        if not self.complete_parallel_early:
            await self.wait_for(task_ids)

    def brief(self, task_id: str, own: str | None, shared: str) -> None:
        """The prompt a sub-agent is started with, as an orchestrator builds it: the task's own
        `prompt` (a workflow's `sub_agent_prompt_override`, rendered for this task), else
        the shared `sub_agent_prompt` with the ids filled in.  Kept in the outcome; a
        workflow's own prompt is printed, the standard one is not."""
        assert self.outcome is not None
        prompt = own if own is not None else \
            shared.replace("{workflow_id}", self.workflow_id).replace("{task_id}", task_id)
        self.outcome.sub_agent_prompts[task_id] = prompt
        if own is not None:
            self.printer.detail(f"  {task_id}: prompt: {short(own, 90)}")

    def start_sub_agents(self, task_ids: list[str], step_id: str) -> None:
        """One sub-agent per listed task that has none running: new tasks, tasks the server
        reset for a retry (`retry_failed`), tasks started before this runner (resume)."""
        idle = [t for t in task_ids if t not in self.sub_agents or self.sub_agents[t].done()]
        if idle:
            self.printer.detail(f"  {step_id}: starting {len(idle)} sub-agent(s): {id_list(idle)}")
        for task_id in idle:
            self.sub_agents[task_id] = asyncio.create_task(self.sub_agent(task_id), name=task_id)

    async def wait_for(self, task_ids: list[str]) -> None:
        self.start_sub_agents([t for t in task_ids if t not in self.sub_agents], "wait")
        tasks = [self.sub_agents[t] for t in task_ids]
        if not tasks:
            return
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            if task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
        await asyncio.gather(*tasks)

    async def sub_agent(self, task_id: str) -> dict[str, Any]:
        assert self.outcome is not None
        self.outcome.tasks += 1
        first = await self.call("workflow_get_next_step", {"workflow_id": self.workflow_id, "task_id": task_id},
                                task_id)
        self.show(first.get("messages", []))
        last = await self.loop(task_id, first.get("step"), first)
        status = last.get("status", "?")
        self.printer.detail(f"  {task_id}: task {status}" + (f": {last['error']}" if last.get("error") else ""))
        self.tasks_done += 1
        self.printer.progress("main", self.tasks_done, len(self.sub_agents), "sub-agent tasks finished")
        return last

    async def cancel_sub_agents(self) -> None:
        running = [t for t in self.sub_agents.values() if not t.done()]
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    # -- performing one step ---------------------------------------------------------
    async def perform(self, step: dict[str, Any], task_id: str | None) -> ScriptedAnswer:
        scripted = self.answers.take(step, task_id)
        if scripted is not None:
            return scripted
        if step["type"] == "agent_shell_command":
            return await self.run_shell(step)
        if step["type"] not in AGENT_STEP_TYPES:
            raise Abort(f"step {step['id']} has type {step['type']!r}, which this runner cannot perform; "
                        f"script its result in the answers file under `{step['id']}:`")
        if self.interactive:
            return await self.ask(step, task_id)
        raise Abort(f"no answer for step {step['id']} ({step_summary(step)}) of "
                    f"{task_id or 'the main thread'}: {self.answers.missing_hint(step, task_id)}")

    async def run_shell(self, step: dict[str, Any]) -> ScriptedAnswer:
        """Run the command in the step's `working_dir` (the instance's project, or a directory
        in it: never the runner's own directory), as the step asks."""
        definition = step["definition"]
        timeout_ms = definition.get("timeout") or DEFAULT_SHELL_TIMEOUT_MS
        cwd = Path(definition.get("working_dir") or self.project_dir)  # a server before working_dir: the project
        if not cwd.is_dir():
            return ScriptedAnswer("shell", "failed", None, f"working_dir {cwd} is not a directory (any more); "
                                                           "nothing was run")
        spawning = asyncio.ensure_future(asyncio.create_subprocess_exec(
            "bash", "-c", str(definition.get("command") or ""), cwd=str(cwd), env=command_environment(),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True))
        try:
            proc = await asyncio.shield(spawning)
        except asyncio.CancelledError:
            await _stop_when_started(spawning)
            raise
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout_ms / 1000)
        except TimeoutError:
            await _stop_group(proc)
            return ScriptedAnswer("shell", "failed", None, f"timed out after {timeout_ms} ms")
        except asyncio.CancelledError:
            await _stop_group(proc)
            raise
        return shell_answer(int(proc.returncode or 0), out.decode(errors="replace"), err.decode(errors="replace"))

    async def ask(self, step: dict[str, Any], task_id: str | None) -> ScriptedAnswer:
        definition = step["definition"]
        async with self.ask_lock:
            if step["type"] == "user_input":
                keys: tuple[str, ...] = ("choices", "validation")
                self.printer.write(f"\n{step['id']}: {definition.get('prompt')}")
            else:
                keys = ("prompt", "method", "params", "context", "response_schema")
                self.printer.write(f"\n{step['id']} ({step['type']}): {step['instructions']}")
            for key in keys:
                if key in definition:
                    value = definition[key]
                    self.printer.write(f"  {key}: {value if isinstance(value, str) else json.dumps(value)}")
            self.printer.write("answer >" if step["type"] == "user_input" else
                               "result (JSON or text; `!error TEXT` reports the step as failed) >")
            try:
                line = await _read_line()
            except EOFError:
                raise Abort(f"no answer for step {step['id']}: standard input closed") from None
        if line.startswith("!error"):
            return ScriptedAnswer("terminal", "failed", None, line[len("!error"):].strip() or "failed by the user")
        if step["type"] == "user_input":
            return ScriptedAnswer("terminal", "success", line)
        try:
            return ScriptedAnswer("terminal", "success", json.loads(line))
        except ValueError:
            return ScriptedAnswer("terminal", "success", line)

    # -- the end --------------------------------------------------------------------
    async def give_up(self) -> None:
        """Cancel the instance after an abort so it is not left running in the store."""
        with contextlib.suppress(Exception):  # best effort: must not hide the outcome
            await self.call("workflow_complete", {"workflow_id": self.workflow_id, "status": "cancelled"},
                            loop=False)

    async def read_final_state(self) -> None:
        assert self.outcome is not None
        with contextlib.suppress(Exception):  # best effort: must not hide the outcome
            data = await self.call("workflow_state_read", {"workflow_id": self.workflow_id}, loop=False)
            self.outcome.final_state = data.get("state")


async def _stop_when_started(spawning: asyncio.Future[asyncio.subprocess.Process]) -> None:
    """Stopped (Ctrl-C) while the command was still being started: let the start finish,
    then kill the command's whole group.  The start's own clean-up would kill only the
    shell and then wait for its pipes to close, which a background child holds open: the
    run hung for as long as that child lived, and the child outlived the run."""
    try:
        proc = await spawning
    except Exception:  # it never started (no bash, a bad directory): nothing to stop
        return
    await _stop_group(proc)


GROUP_GONE_S = 5.0  # how long a killed group's pipes may stay open (a child that left the group holds them)


async def _stop_group(proc: asyncio.subprocess.Process) -> None:
    """Kill the command's whole group and reap it.  Waiting is bounded: asyncio's wait
    also waits for the pipes, and a child that left the group (`setsid`) keeps them open."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(proc.wait(), GROUP_GONE_S)


async def _read_line() -> str:
    """A line of standard input, read on a daemon thread: a run stopped (Ctrl-C) while it
    waits for an answer exits at once instead of waiting for Enter."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[str] = loop.create_future()

    def resolve(line: str | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(line or "")

    def read() -> None:
        try:
            line = input()
        except BaseException as exc:  # EOFError (stdin closed) included
            loop.call_soon_threadsafe(resolve, None, exc)
            return
        loop.call_soon_threadsafe(resolve, line, None)

    threading.Thread(target=read, name="stdin", daemon=True).start()
    return await future
