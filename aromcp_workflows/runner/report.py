"""What the headless runner prints: transcript lines, messages, the final summary.

Pure formatting over plain data (atomic steps, results, the outcome); no I/O besides
writing to the stream it is given.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from signal import SIGHUP, SIGPIPE
from typing import Any, TextIO

from aromcp_workflows.safety import Masker, secret_values

WIDTH = 110


@dataclass
class TranscriptEntry:
    """One step the runner performed: who, which step, what it did, how the server took it."""

    task_id: str | None
    step_id: str
    type: str
    summary: str
    status: str = "success"  # what the runner reported: success | failed
    accepted: bool = True  # False when the server re-issued the step (invalid answer)
    error: str | None = None  # the runner's reported error, or the server's rejection


@dataclass
class RunOutcome:
    """The result of a headless run (`run_workflow`)."""

    workflow: str
    workflow_id: str | None
    status: str  # completed | failed | cancelled | aborted (runner stopped) | interrupted (Ctrl-C) | not_started
    error: str | None = None
    messages: list[str] = field(default_factory=list)
    final_state: dict[str, Any] | None = None
    tool_calls: int = 0  # every MCP tool call the runner made
    loop_calls: int = 0  # the calls that drove the workflow (start, get_next_step, step_complete)
    agent_steps: int = 0  # N: steps the runner performed and reported
    tasks: int = 0  # T: sub-agent tasks the runner pulled
    transcript: list[TranscriptEntry] = field(default_factory=list)
    sub_agent_prompts: dict[str, str] = field(default_factory=dict)  # task_id -> the prompt it was started with
    signal: int | None = None  # interrupted: the signal that stopped the run (SIGPIPE: its output was closed)

    @property
    def budget(self) -> int:
        """DESIGN §7: at most N + T + 2 agent tool calls."""
        return self.agent_steps + self.tasks + 2

    @property
    def exit_code(self) -> int:
        if self.status == "completed":
            return 0
        if self.status == "interrupted":  # as a shell reports a command stopped by the signal
            return 128 + self.signal if self.signal in (SIGHUP, SIGPIPE) else 130  # SIGINT and SIGTERM: 130
        return 2 if self.status == "not_started" else 1

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(budget=self.budget, exit_code=self.exit_code)
        return data


COMMAND_LINE = re.compile(r"(?P<status>step (?P<step>\S+): command running for [0-9.]+ s): (?P<line>.+)$", re.S)


def command_line(message: str | None) -> tuple[str | None, str | None, str | None]:
    """(step id, the latest output line, the message without it) of a progress message about
    a running command; (None, None, message) for any other."""
    found = COMMAND_LINE.match(message or "")
    return (found["step"], found["line"].strip(), found["status"]) if found else (None, None, message)


def short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def step_summary(step: dict[str, Any]) -> str:
    """What the step asks, in a few words."""
    definition = step.get("definition") or {}
    kind = step.get("type")
    if kind == "agent_shell_command":
        return f"$ {short(definition.get('command'), 70)}"
    if kind == "mcp_call":
        return f"{definition.get('method')}({short(definition.get('params') or {}, 60)})"
    if kind == "user_input":
        choices = definition.get("choices")
        return short(definition.get("prompt"), 60) + (f" {short(choices, 40)}" if choices else "")
    if kind == "agent_prompt":
        return short(definition.get("prompt"), 70)
    if kind == "parallel_tasks":
        ids = [t.get("task_id") for t in definition.get("tasks", [])]
        return f"{len(ids)} task(s): {id_list(ids)}"
    if is_command_wait(step):
        return short(definition.get("reason"), 70)
    if kind == "wait":
        return f"wait for {id_list(definition.get('task_ids', []))}"
    return short(step.get("instructions"), 70)


def is_command_wait(step: dict[str, Any]) -> bool:
    """A `wait` step on a server-side command that outlived the call's budget (no tasks):
    completing it waits on the command."""
    return step.get("type") == "wait" and not (step.get("definition") or {}).get("task_ids")


def id_list(ids: list[Any], limit: int = 6) -> str:
    names = [str(i) for i in ids]
    return ", ".join(names) if len(names) <= limit else ", ".join(names[:limit]) + f", ... ({len(names)} in all)"


def result_summary(status: str, result: Any, error: str | None) -> str:
    if status == "failed":
        return f"FAILED: {short(error, 70)}"
    if result is None:
        return "done"
    if result == "":
        return "(no output)"
    return short(result, 60)


class Printer:
    """Writes the transcript (unless quiet) and messages (always) to one stream.

    Progress of long server-side steps: on a terminal one status line rewritten in place
    (`\\r`), with the last `TAIL_LINES` lines a running command printed under it (a live
    tail, redrawn in place), all cleared before anything else is printed; otherwise a line at
    most every `PROGRESS_EVERY_S` seconds of the step, and each new output line the server
    reports, indented under the step.  The server reports the latest line about once a
    second: lines in between are not seen here (`aromcp-workflows debug ID` has them all).

    A stream that fails (a pipe whose reader left, `| head`; a terminal gone) is not
    written to again: `on_lost` hears of it once (the run stops), and the final lines go
    to stderr instead, when that is another stream."""

    PROGRESS_EVERY_S = 5.0
    TAIL_LINES = 4

    def __init__(self, stream: TextIO | None, quiet: bool = False,
                 on_lost: Callable[[OSError], None] | None = None):
        self.stream = stream
        self.quiet = quiet
        self.on_lost = on_lost
        self.lost = False
        self.live = bool(stream is not None and getattr(stream, "isatty", lambda: False)())
        self._status_line = False
        self._region = 0  # lines of the live region (status line and tail) on the terminal now
        self._last_progress: dict[str, float] = {}
        self._tails: dict[str, list[str]] = {}  # step id -> the latest output lines reported

    def _emit(self, text: str) -> None:
        """Write and flush; a failing stream is dropped (and said once to `on_lost`)."""
        if self.stream is None or self.lost:
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError) as exc:  # EPIPE, EIO; a closed file
            self.lost = True
            if self.on_lost is not None:
                self.on_lost(exc if isinstance(exc, OSError) else BrokenPipeError(str(exc)))

    def write(self, text: str = "") -> None:
        self._clear_region()
        self._emit(text + "\n")

    def _clear_region(self) -> None:
        """Take the live region (status line and tail) off the terminal."""
        if self._status_line:
            self._emit("\r\x1b[K" if self._region <= 1 else f"\x1b[{self._region - 1}F\x1b[J")
            self._status_line, self._region = False, 0

    def progress(self, who: str, done: float, total: float | None, message: str | None) -> None:
        """A progress notification of the server (or a task count) for `who`."""
        if self.quiet or self.stream is None:
            return
        step, line, status = command_line(message)
        text = f"  ... {status or f'working ({done:.0f})'}" + (f" [{done:.0f}/{total:.0f}]" if total else "")
        text += f" ({who})"
        fresh = step is not None and line is not None and self._tail(step, line)
        if self.live:
            self._draw(text, self._tails.get(step or "", []))
            return
        if fresh and line is not None:
            self.write(f"    | {line[:WIDTH - 6]}")
        last = self._last_progress.get(who)
        if last is None or done < last or done - last >= self.PROGRESS_EVERY_S:
            self._last_progress[who] = done
            self.write(text)

    def _tail(self, step: str, line: str) -> bool:
        """Keep `line` as the step's latest output; whether it is new."""
        tail = self._tails.setdefault(step, [])
        if tail and tail[-1] == line:
            return False
        tail.append(line)
        del tail[: -self.TAIL_LINES]
        return True

    def _draw(self, status: str, tail: list[str]) -> None:
        """The status line, the output's last lines under it, in place of what was there."""
        lines = [status[:WIDTH], *(f"    | {line}"[:WIDTH] for line in tail)]
        up = f"\x1b[{self._region - 1}F" if self._region > 1 else "\r"
        self._emit(up + "\x1b[J" + "\n".join(lines))
        self._status_line, self._region = True, len(lines)

    def detail(self, text: str) -> None:
        if not self.quiet:
            self.write(text)

    def message(self, text: str) -> None:
        self.write(text)

    def step(self, entry: TranscriptEntry, outcome: str) -> None:
        # a task's step ids start with its task_id, so the id alone says who did the step
        self.detail(f"  {entry.step_id}  {entry.type}  {entry.summary} -> {outcome}")
        if not entry.accepted and entry.type in ("parallel_tasks", "wait"):
            self.detail(f"    {entry.error}: waiting for them")
        elif not entry.accepted:
            self.detail(f"    not accepted: {entry.error}")

    def final(self, outcome: RunOutcome) -> None:
        if self.lost and self.stream is not sys.stderr:  # the status and the way to resume still reach someone
            self.stream, self.lost, self.live, self._status_line = sys.stderr, False, False, False
        self.write(f"status: {outcome.status}" + (f" ({outcome.workflow_id})" if outcome.workflow_id else ""))
        if outcome.error:
            self.write(f"error: {outcome.error}")
        if self.quiet or outcome.workflow_id is None or outcome.status == "not_started":
            return
        if outcome.final_state is not None:
            masker = Masker(secret_values(outcome.final_state))  # never print tokens or passwords
            state = masker(dict(outcome.final_state))
            inputs = state.pop("inputs", None)
            self.write("final state:" if state or inputs else "final state: (empty)")
            for key, value in state.items():
                self.write(f"  {key} = {short(value, WIDTH - len(key) - 5)}")
            if inputs:
                self.write(f"  inputs = {short(inputs, WIDTH - 11)}")
        extra = outcome.tool_calls - outcome.loop_calls
        self.write(f"tool calls: {outcome.loop_calls} to run the workflow for {outcome.agent_steps} agent step(s) "
                   f"and {outcome.tasks} sub-agent task(s) (budget N+T+2 = {outcome.budget})"
                   + (f", plus {extra} to read the final state" if extra else ""))
