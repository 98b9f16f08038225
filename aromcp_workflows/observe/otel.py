"""Spans from history events: the one module that imports OpenTelemetry's SDK.

`from_environment` configures the SDK from the standard variables (`OTEL_TRACES_EXPORTER`:
`console` writes to stderr — stdout is the stdio MCP channel —, `otlp` uses
`OTEL_EXPORTER_OTLP_*`; `OTEL_SERVICE_NAME`, sampling and batching as the SDK reads them)
and sets the global tracer provider, so the MCP SDK's span of each tool call
(`tools/call workflow_get_next_step`, a child of the `traceparent` the client sends in
`_meta`) is recorded too.

`Tracing.committed` hands one commit's events (and the trace context of the call that
made it) to a worker thread that turns them into spans, each with `workflow.name`,
`workflow.id`, `step.id`, `step.type` and `task.id`, and the events' own timestamps:

- a step handed out (`step_delivered`) or started (`step_started`) opens its step span,
  whose parent is the tool call that handed it out; `step_completed`, or the step's
  `error`, ends it — an agent step's span covers the time the agent worked on it;
- each run of a shell command is a `shell` span inside its step, with `process.exit.code`;
- a server-side step (a state update, a condition, a message, a skipped step, an include)
  is a span of its own;
- a recompute of computed fields (the `transform_trace` events of one V8 call) is a
  `recompute` span, inside the step that triggered it when that step's span is open.

No span carries a command, a value or an error message (they may hold secrets or command
output): ids, types, exit codes and statuses only.  Open step spans live in memory, keyed
by instance, task and step; a step completed in another process than the one that handed
it out gets a span that starts at its completion (`step.started_elsewhere`).  An instance
that ends closes its open spans.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import Span, Status, StatusCode

from aromcp_workflows import __version__
from aromcp_workflows.store import HistoryEvent

StepTypes = Callable[[str], str | None]  # delivered step id -> step type
Key = tuple[str, str | None, str]  # workflow id, task id, step id
log = logging.getLogger("aromcp_workflows")
DRAIN_S = 0.2  # how often the worker makes the spans of the commits queued since
MAX_OPEN = 10_000  # open step spans kept; beyond, the oldest is ended as abandoned
SERVER_SIDE = ("message_shown", "condition_checked", "step_skipped", "loop_limit")
ENDS = {"cancelled": StatusCode.UNSET, "failed": StatusCode.ERROR, "completed": StatusCode.UNSET}
TOOL_ATTRIBUTES = (("workflow_id", "workflow.id"), ("task_id", "task.id"), ("step_id", "step.id"))


def from_environment(environ: Mapping[str, str]) -> Tracing | None:
    """The SDK set up as the variables say; None (and a line on stderr) when no exporter loads."""
    exporters = [exporter for name in _exporter_names(environ) if (exporter := _exporter(name, environ))]
    if not exporters:
        return None
    provider = TracerProvider(resource=_resource(environ))
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return Tracing(provider)


def _exporter_names(environ: Mapping[str, str]) -> list[str]:
    names = [n.strip().lower() for n in environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",")]
    return [n for n in names if n and n != "none"]


def _exporter(name: str, environ: Mapping[str, str]) -> SpanExporter | None:
    """`console` on stderr; `otlp` by `OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL`; else an entry point."""
    if name == "console":
        return ConsoleSpanExporter(out=sys.stderr)
    if name == "otlp":
        protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get(
            "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        name = "otlp_proto_grpc" if protocol.strip() == "grpc" else "otlp_proto_http"
    from importlib.metadata import entry_points

    for point in entry_points(group="opentelemetry_traces_exporter", name=name):
        try:
            exporter: SpanExporter = point.load()()
            return exporter
        except Exception as exc:  # a broken exporter must not stop the server
            print(f"aromcp-workflows: the trace exporter {name!r} could not start ({exc}); it is off",
                  file=sys.stderr)
            return None
    print(f"aromcp-workflows: no trace exporter {name!r} is installed (OTEL_TRACES_EXPORTER); `console` and "
          "`otlp` come with pip install 'aromcp-workflows[otel]'", file=sys.stderr)
    return None


def _resource(environ: Mapping[str, str]) -> Resource:
    """The SDK's resource (it reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES); the
    service is `aromcp-workflows` unless those name it."""
    named = environ.get("OTEL_SERVICE_NAME") or "service.name=" in environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    ours = {"service.version": __version__} if named else {"service.name": "aromcp-workflows",
                                                            "service.version": __version__}
    return Resource.create(ours)


def _ns(timestamp: str) -> int:
    """An event's ISO-8601 timestamp as nanoseconds since the epoch."""
    return int(datetime.fromisoformat(timestamp).timestamp() * 1e9)


class Tracing:
    """Spans for commits and tool calls, from one tracer provider.

    A commit only queues its events with the trace context of the call that made it (a
    deque append: the tool call's own span gets its attributes at once, it ends with the
    call); a worker thread makes the spans every `DRAIN_S`, off the request path — about
    20 µs of SDK work per span that a step would otherwise wait for.  `flush` makes them
    now (tests, shutdown)."""

    def __init__(self, provider: Any, tracer: Any = None) -> None:
        self.provider = provider
        self.tracer = tracer or provider.get_tracer("aromcp_workflows", __version__)
        self._open: OrderedDict[Key, Span] = OrderedDict()  # step spans, oldest first
        self._commands: dict[Key, Span] = {}  # the running command of a step (a shell step's span inside it)
        self._queue: deque[Queued] = deque()
        self._lock = threading.Lock()  # one drain at a time, in commit order
        self._stop = threading.Event()
        self._worker = threading.Thread(target=self._work, name="aromcp-tracing", daemon=True)
        self._worker.start()

    # -- the tool layer --------------------------------------------------------------------
    def tool_call(self, name: str, arguments: Mapping[str, Any]) -> None:
        """The workflow's attributes on the current span: the MCP SDK's span of this call."""
        span = trace.get_current_span()
        if span.is_recording():
            span.set_attributes({attribute: value for argument, attribute in TOOL_ATTRIBUTES
                                 if isinstance(value := arguments.get(argument), str)})

    # -- the instance layer ----------------------------------------------------------------
    def committed(self, workflow_id: str, workflow: str, events: Sequence[HistoryEvent],
                  step_types: StepTypes) -> None:
        """Queue the spans one commit's events make (see the module's docstring)."""
        base = {"workflow.name": workflow, "workflow.id": workflow_id}
        current = trace.get_current_span()
        if current.is_recording():
            current.set_attributes(base)
        self._queue.append(Queued(base, events, step_types, otel_context.get_current()))

    def flush(self) -> None:
        """Make the spans of every commit queued so far, now."""
        with self._lock:
            while self._queue:
                queued = self._queue.popleft()
                commit = TracedCommit(self, queued.base, queued.step_types, queued.context)
                for event in queued.events:
                    commit.take(event)
                commit.close_recomputes()
                commit.close_completed()

    def _work(self) -> None:
        while not self._stop.wait(DRAIN_S):
            try:
                self.flush()
            except Exception:  # tracing must never take the server down; the next drain goes on
                log.exception("tracing: making spans failed")

    def stop(self) -> None:
        """Stop the worker, after it made the spans of every commit queued so far."""
        self._stop.set()
        self._worker.join()
        self.flush()

    def shutdown(self) -> None:
        """Make the queued spans, end the open ones and flush every exporter (at server exit)."""
        self.stop()
        with self._lock:
            spans = [*self._commands.values(), *self._open.values()]
            self._open, self._commands = OrderedDict(), {}
        for span in spans:
            span.set_attribute("step.open_at_exit", True)
            span.end()
        self.provider.shutdown()

    def _start(self, name: str, start: int, attributes: dict[str, Any], parent: Span | Context) -> Span:
        ctx = parent if isinstance(parent, Context) else trace.set_span_in_context(parent)
        return self.tracer.start_span(name, context=ctx, start_time=start, attributes=attributes)

    def _keep(self, key: Key, span: Span) -> None:
        self._open[key] = span
        while len(self._open) > MAX_OPEN:
            _, oldest = self._open.popitem(last=False)
            oldest.set_attribute("step.abandoned", True)
            oldest.end()
        while len(self._commands) > MAX_OPEN:
            self._commands.pop(next(iter(self._commands))).end()


@dataclass(frozen=True)
class Queued:
    """One commit waiting for its spans: its events and the trace context it was made in."""

    base: dict[str, Any]
    events: Sequence[HistoryEvent]
    step_types: StepTypes
    context: Context


@dataclass
class Recompute:
    """The fields one recompute evaluated (their traces share its start and trigger)."""

    parent: Span | Context
    fields: list[str] = field(default_factory=list)
    duration_ms: float = 0.0
    errors: list[str] = field(default_factory=list)


class TracedCommit:
    """One commit's events turned into spans, in order (called under `Tracing`'s lock)."""

    def __init__(self, tracing: Tracing, base: dict[str, Any], step_types: StepTypes, context: Context) -> None:
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
        key, start = self.key(event), _ns(event.timestamp)
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
        key, end = self.key(event), _ns(event.timestamp)
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
            command.end(end_time=_ns(event.timestamp))
        if step is None:
            return
        step.set_status(Status(StatusCode.ERROR, "the step failed"))  # its message may quote command output
        step.end(end_time=_ns(event.timestamp))

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
        key, at = self.key(event), _ns(event.timestamp)
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
        at = _ns(event.timestamp)
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
            start = _ns(stamp)
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
            self.commands.pop(key).end(end_time=_ns(event.timestamp))
        for key in [k for k in self.opened if k[0] == wid and (whole or k[1] == task) and k not in self.completed]:
            span = self.opened.pop(key)
            span.set_status(Status(ENDS[status]))
            span.end(end_time=_ns(event.timestamp))
