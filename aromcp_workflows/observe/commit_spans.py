"""One commit's history events turned into spans (`Tracing.flush` calls `TracedCommit` under its lock).

See `otel.py` for which span each event makes; this module holds the bookkeeping of one
commit: the step spans it opens and ends, the commands inside them, the recomputes it
gathers, the steps a finished instance or task leaves open.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from opentelemetry.context import Context
from opentelemetry.trace import Span, Status, StatusCode

from aromcp_workflows.store import HistoryEvent

StepTypes = Callable[[str], str | None]  # delivered step id -> step type
Key = tuple[str, str | None, str]  # workflow id, task id, step id
SERVER_SIDE = ("message_shown", "condition_checked", "step_skipped", "loop_limit")
ENDS = {"cancelled": StatusCode.UNSET, "failed": StatusCode.ERROR, "completed": StatusCode.UNSET}


class SpanBook(Protocol):
    """What a commit's spans are made with and kept in (`otel.Tracing`): the step spans open
    and the running commands, by instance, task and step."""

    _open: OrderedDict[Key, Span]
    _commands: dict[Key, Span]

    def _start(self, name: str, start: int, attributes: dict[str, Any], parent: Span | Context) -> Span:
        ...

    def _keep(self, key: Key, span: Span) -> None:
        ...


def ns(timestamp: str) -> int:
    """An event's ISO-8601 timestamp as nanoseconds since the epoch."""
    return int(datetime.fromisoformat(timestamp).timestamp() * 1e9)


@dataclass
class Recompute:
    """The fields one recompute evaluated (their traces share its start and trigger)."""

    parent: Span | Context
    fields: list[str] = field(default_factory=list)
    duration_ms: float = 0.0
    errors: list[str] = field(default_factory=list)


class TracedCommit:
    """One commit's events turned into spans, in order (called under `Tracing`'s lock)."""

    def __init__(self, tracing: SpanBook, base: dict[str, Any], step_types: StepTypes, context: Context) -> None:
        self.tracing, self.base, self.step_types, self.context = tracing, base, step_types, context
        self.opened = tracing._open
        self.completed: dict[Key, tuple[int, bool]] = {}  # steps completed: end time, failed
        self.commands = tracing._commands
        self.recomputes: dict[tuple[str, str], Recompute] = {}  # (start, trigger) -> its fields

    def key(self, event: HistoryEvent) -> Key:
        return (self.base["workflow.id"], event.task_id, event.step_id or "")

    def attributes(self, event: HistoryEvent, step_type: str | None) -> dict[str, Any]:
        found = {**self.base, "step.id": event.step_id or ""}
        if step_type:
            found["step.type"] = step_type
        if event.task_id:
            found["task.id"] = event.task_id
        return found

    def take(self, event: HistoryEvent) -> None:
        kind = event.kind
        if kind in ("step_delivered", "step_started"):
            self.opening(event)
        elif kind == "step_completed":
            self.completion(event)
        elif kind in ("error", "step_error") and event.step_id:
            self.failure(event)
        elif kind in ("include_started", "include_finished"):
            self.include(event)
        elif kind in SERVER_SIDE or (kind == "state_changed" and event.step_id and event.data.get("by") is None):
            self.server_side(event)
        elif kind == "transform_trace":
            self.recompute(event)
        elif kind in ("finished", "task_finished", "status_changed"):
            self.ended(event)

    def opening(self, event: HistoryEvent) -> None:
        key, start = self.key(event), ns(event.timestamp)
        self.completed.pop(key, None)  # a command started again (on_error: retry): the same step goes on
        step = self.opened.get(key)
        if step is None:
            kind = event.data.get("type") or self.step_types(event.step_id or "")
            step = self.tracing._start(f"step {event.step_id}", start, self.attributes(event, kind), self.context)
            self.tracing._keep(key, step)
        if event.kind == "step_started":
            attributes = {**self.attributes(event, "shell_command"), "shell.attempt": event.data.get("attempt", 0)}
            self.commands[key] = self.tracing._start("shell", start, attributes, step)

    def completion(self, event: HistoryEvent) -> None:
        key, end = self.key(event), ns(event.timestamp)
        failed = event.data.get("status") == "failed"
        command = self.commands.pop(key, None)
        if "exit_code" in event.data:
            if command is None:  # started in another commit: its span starts when the command did
                start = end - int(float(event.data.get("duration_ms") or 0) * 1e6)
                command = self.tracing._start("shell", start, self.attributes(event, "shell_command"),
                                              self.opened.get(key) or self.context)
            command.set_attribute("process.exit.code", int(event.data["exit_code"]))
            if failed:
                command.set_status(Status(StatusCode.ERROR, f"exit code {event.data['exit_code']}"))
            command.end(end_time=end)
        self.completed[key] = (end, failed)

    def failure(self, event: HistoryEvent) -> None:
        key = self.key(event)
        step = self.opened.pop(key, None)
        self.completed.pop(key, None)
        command = self.commands.pop(key, None)
        if command is not None:  # the step failed while its command ran (nothing came back)
            command.end(end_time=ns(event.timestamp))
        if step is None:
            return
        step.set_status(Status(StatusCode.ERROR, "the step failed"))  # its message may quote command output
        step.end(end_time=ns(event.timestamp))

    def close_completed(self) -> None:
        """End the steps this commit completed (after all its events: a retry restarts one)."""
        for key, (end, failed) in self.completed.items():
            step = self.opened.pop(key, None)
            if step is None:  # handed out by another process: a span at its completion
                step = self.tracing._start(f"step {key[2]}", end, {**self.base, "step.id": key[2],
                                                                   "step.started_elsewhere": True}, self.context)
            if failed:
                step.set_status(Status(StatusCode.ERROR))
            step.end(end_time=end)

    def include(self, event: HistoryEvent) -> None:
        key, at = self.key(event), ns(event.timestamp)
        if event.kind == "include_started":
            self.tracing._keep(key, self.tracing._start(f"step {event.step_id}", at,
                                                        self.attributes(event, "include_workflow"), self.context))
        elif (span := self.opened.pop(key, None)) is not None:
            span.end(end_time=at)

    def server_side(self, event: HistoryEvent) -> None:
        """A step the server ran in this commit, at the moment it recorded it; a step's own
        result (stored as the step completes) is part of that step's span."""
        key = self.key(event)
        if key in self.opened or key in self.completed:
            return
        at = ns(event.timestamp)
        kind = event.data.get("type") or self.step_types(event.step_id or "")
        self.tracing._start(f"step {event.step_id}", at, self.attributes(event, kind), self.context).end(end_time=at)

    def recompute(self, event: HistoryEvent) -> None:
        """One field's trace, gathered with the others of its recompute (same start, same
        trigger: one V8 call); `close_completed` makes the span."""
        data = event.data
        stamp, trigger = str(data.get("timestamp") or event.timestamp), str(data.get("trigger") or "")
        group = self.recomputes.get((stamp, trigger))
        if group is None:
            parent = self.opened.get((self.base["workflow.id"], event.task_id, trigger.removeprefix("step ")))
            group = self.recomputes[(stamp, trigger)] = Recompute(parent or self.context)
        group.fields.append(str(data.get("field", "")))
        group.duration_ms += float(data.get("duration_ms") or 0)
        if data.get("error"):  # the field's name only: a transform's error may quote state values
            group.errors.append(str(data.get("field", "")))

    def close_recomputes(self) -> None:
        for (stamp, trigger), group in self.recomputes.items():
            start = ns(stamp)
            attributes = {**self.base, "transform.fields": group.fields, "transform.trigger": trigger}
            span = self.tracing._start("recompute", start, attributes, group.parent)
            if group.errors:
                span.set_status(Status(StatusCode.ERROR, f"transform failed: {', '.join(group.errors)}"))
            span.end(end_time=start + int(group.duration_ms * 1e6))

    def ended(self, event: HistoryEvent) -> None:
        """A finished task or instance: its step spans still open end with it."""
        status = str(event.data.get("to") or event.data.get("status") or "")
        if status not in ENDS:
            return
        wid, task = self.base["workflow.id"], event.task_id
        whole = event.kind != "task_finished"
        for key in [k for k in self.commands if k[0] == wid and (whole or k[1] == task)]:
            self.commands.pop(key).end(end_time=ns(event.timestamp))
        for key in [k for k in self.opened if k[0] == wid and (whole or k[1] == task) and k not in self.completed]:
            span = self.opened.pop(key)
            span.set_status(Status(ENDS[status]))
            span.end(end_time=ns(event.timestamp))
