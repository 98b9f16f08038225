"""What a finished instance did, read back from its history: the stuff of a test case.

`aromcp-workflows test --record ID` turns a real run into a case that replays it offline:
the inputs it started with, every answer its agent gave (in order, per delivered step id),
every server-side command's result, and the messages it showed.  The interpreter keeps
what this needs in its events: `started` (inputs), `step_completed` (the agent's result,
or a command's exit code and output), `step_rejected` (an answer it refused),
`step_reported` (a step the agent reported failed), `step_started` (the command run) and
`message_shown`.  Nothing here runs anything.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

MESSAGE_KEPT = 500  # `message_shown` keeps this many characters of a message


@dataclass
class GivenAnswer:
    """One answer the agent gave for one delivered step."""

    step_id: str
    task_id: str | None
    status: str  # success | failed
    result: Any = None
    error: str | None = None


@dataclass
class Command:
    """One run of a server-side command and what it gave back."""

    step_id: str
    command: str
    exit_code: int
    stdout: str
    stderr: str
    complete: bool = True  # False when the history kept only part of the output


@dataclass
class Replay:
    """An instance's history, as the answers and command results that replay it."""

    inputs: dict[str, Any] = field(default_factory=dict)
    answers: list[GivenAnswer] = field(default_factory=list)
    commands: list[Command] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)


def replay_of(events: Iterable[Any]) -> Replay:
    """Read a history (commit order) into what replays it."""
    replay, started = Replay(), False
    running: dict[tuple[str | None, str], str] = {}  # (task, step) -> the command that step runs now
    for event in events:
        kind, data = event.kind, event.data
        if kind == "started" and not started:
            replay.inputs, started = dict(data.get("inputs") or {}), True
        elif kind == "step_started" and data.get("type") == "shell_command":
            running[(event.task_id, event.step_id)] = str(data.get("command", ""))
        elif kind == "step_completed" and data.get("type") == "shell_command":
            command = running.pop((event.task_id, event.step_id), None)
            if command is not None:
                replay.commands.append(_command(event.step_id, command, data))
        elif kind in ("step_completed", "step_rejected", "step_reported"):
            answer = _answer(event)
            if answer is not None:
                replay.answers.append(answer)
        elif kind == "message_shown":
            text = str(data.get("message", ""))
            if len(text) <= MESSAGE_KEPT:  # a longer one was cut short: it cannot be expected as it is
                replay.messages.append(text)
    return replay


def _command(step_id: str, command: str, data: dict[str, Any]) -> Command:
    stdout = data.get("stdout", data.get("stdout_tail", ""))
    stderr = data.get("stderr", data.get("stderr_tail", ""))
    return Command(step_id, command, int(data.get("exit_code", 0)), str(stdout), str(stderr),
                   not (data.get("stdout_cut") or data.get("stderr_cut")))


def _answer(event: Any) -> GivenAnswer | None:
    """The answer an agent step's event holds (None: not an agent's answer)."""
    data = event.data
    if event.kind == "step_reported":
        return GivenAnswer(event.step_id, event.task_id, "failed", data.get("result"), data.get("error"))
    if event.kind == "step_rejected" or (data.get("status") == "success" and "result" in data):
        return GivenAnswer(event.step_id, event.task_id, "success", data.get("result"))
    return None
