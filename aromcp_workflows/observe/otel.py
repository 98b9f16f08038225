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

One trace per instance (`context.py`): a commit made outside a call of the instance's
trace (a page's action, a command finishing on its own, the runner marking a run
interrupted) has the instance's root span as parent; the root span itself (`workflow
<name>`, from the instance's creation to the first time it stops) is made, with the ids
kept in the store, by the process whose commit stops it (`ForcedIds`).
"""

from __future__ import annotations

import logging
import sys
import threading
from collections import OrderedDict, deque
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanContext, Status, StatusCode, TraceFlags

from aromcp_workflows import __version__
from aromcp_workflows.observe.commit_spans import Key, StepTypes, TracedCommit, ns
from aromcp_workflows.observe.context import CALL, InstanceTrace, SpanIds, new_root
from aromcp_workflows.store import HistoryEvent, utc_now

log = logging.getLogger("aromcp_workflows")
DRAIN_S = 0.2  # how often the worker makes the spans of the commits queued since
MAX_OPEN = 10_000  # open step spans kept; beyond, the oldest is ended as abandoned
MAX_ROOTS = 10_000  # instances whose root span context is kept in memory (the store has them all)
TOOL_ATTRIBUTES = (("workflow_id", "workflow.id"), ("task_id", "task.id"), ("step_id", "step.id"))


def from_environment(environ: Mapping[str, str], service: str = "aromcp-workflows",
                     make_global: bool = True) -> Tracing | None:
    """The SDK set up as the variables say; None (and a line on stderr) when no exporter loads.
    `make_global`: the server sets the global tracer provider, so the MCP SDK's span of
    each call is recorded too; the runner keeps its own (its spans are its steps)."""
    exporters = [exporter for name in _exporter_names(environ) if (exporter := _exporter(name, environ))]
    if not exporters:
        return None
    provider = TracerProvider(resource=_resource(environ, service))
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    if make_global:
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


def _resource(environ: Mapping[str, str], service: str = "aromcp-workflows") -> Resource:
    """The SDK's resource (it reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES); the
    service is `service` unless those name it."""
    named = environ.get("OTEL_SERVICE_NAME") or "service.name=" in environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    ours = {"service.version": __version__} if named else {"service.name": service, "service.version": __version__}
    return Resource.create(ours)


def span_context(ids: SpanIds) -> SpanContext:
    """A span made elsewhere (or later: an instance's root) as a parent or a link."""
    flags = TraceFlags(TraceFlags.SAMPLED if ids.sampled else TraceFlags.DEFAULT)
    return SpanContext(int(ids.trace_id, 16), int(ids.span_id, 16), is_remote=True, trace_flags=flags)


def parent_context(ids: SpanIds) -> Context:
    """A context whose current span is `ids` (kept in the store): what children are made in."""
    return trace.set_span_in_context(NonRecordingSpan(span_context(ids)))


class ForcedIds(IdGenerator):
    """The tracer's id generator, which makes the next span with the ids it is given while
    `forcing`: an instance's root span has the ids its children were made under, kept in
    the store since it was created, whichever process makes it."""

    def __init__(self, inner: IdGenerator) -> None:
        self.inner = inner
        self._local = threading.local()

    @contextmanager
    def forcing(self, ids: SpanIds) -> Iterator[None]:
        self._local.ids = ids
        try:
            yield
        finally:
            self._local.ids = None

    def generate_trace_id(self) -> int:
        ids = getattr(self._local, "ids", None)
        return int(ids.trace_id, 16) if ids is not None else self.inner.generate_trace_id()

    def generate_span_id(self) -> int:
        ids = getattr(self._local, "ids", None)
        return int(ids.span_id, 16) if ids is not None else self.inner.generate_span_id()

    def is_trace_id_random(self) -> bool:
        return self.inner.is_trace_id_random()


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
        inner = getattr(self.tracer, "id_generator", None)  # an SDK tracer's (of this Tracing alone)
        self._ids = ForcedIds(inner) if isinstance(inner, IdGenerator) else None
        if self._ids is not None:
            self.tracer.id_generator = self._ids
        self._roots: OrderedDict[str, tuple[SpanIds, Context]] = OrderedDict()  # workflow id -> its root
        self._open: OrderedDict[Key, Span] = OrderedDict()  # step spans, oldest first
        self._commands: dict[Key, Span] = {}  # the running command of a step (a shell step's span inside it)
        self._queue: deque[Queued] = deque()
        self._lock = threading.Lock()  # one drain at a time, in commit order
        self._stop = threading.Event()
        self._worker = threading.Thread(target=self._work, name="aromcp-tracing", daemon=True)
        self._worker.start()

    # -- the tool layer --------------------------------------------------------------------
    def tool_call(self, name: str, arguments: Mapping[str, Any]) -> None:
        """The workflow's attributes on the current span: the MCP SDK's span of this call;
        the client's own span, when the call was put under the instance's root instead, is
        a link."""
        span = trace.get_current_span()
        if span.is_recording():
            span.set_attributes({attribute: value for argument, attribute in TOOL_ATTRIBUTES
                                 if isinstance(value := arguments.get(argument), str)})
            call = CALL.get()
            if call is not None and call.caller is not None:
                span.add_link(span_context(call.caller), {"link.kind": "caller"})

    def root_of(self, workflow_id: str) -> SpanIds | None:
        """The instance's root span, if this process has seen the instance (else the caller
        asks the store: `WorkflowService.trace_root`, then `remember`)."""
        found = self._roots.get(workflow_id)
        return None if found is None else found[0]

    def remember(self, workflow_id: str, root: SpanIds) -> Context:
        """Keep the instance's root span (its context for children); the least recently
        remembered are forgotten past `MAX_ROOTS`."""
        found = self._roots.get(workflow_id)
        if found is not None and found[0] == root:
            self._roots.move_to_end(workflow_id)
            return found[1]
        context = parent_context(root)
        self._roots[workflow_id] = (root, context)
        while len(self._roots) > MAX_ROOTS:
            self._roots.popitem(last=False)
        return context

    # -- the instance layer ----------------------------------------------------------------
    def new_trace(self, origin: SpanIds | None = None, since: str | None = None) -> dict[str, Any]:
        """A new instance's trace context, kept with it: the root a `workflow_start` call was
        made under (`CALL`), else a new trace; a link to the span that started it — a fork's
        origin, or the client's span in the call's `_meta` — when there is one.  The root
        starts when that call arrived, or at `since` (its first event), whichever is first."""
        call = CALL.get()
        root = call.planned if call is not None and call.planned is not None else new_root()
        link = origin or (call.caller if call is not None else None)
        times = [t for t in (call.since if call is not None else None, since) if t]
        kept = {"traceparent": root.traceparent, "started": min(times, key=ns) if times else utc_now()}
        return kept | ({"link": link.traceparent} if link is not None else {})

    def committed(self, instance: InstanceTrace, events: Sequence[HistoryEvent], step_types: StepTypes) -> None:
        """Queue the spans one commit's events make (see the module's docstring): inside the
        call that made the commit when that call is in the instance's trace, else under the
        instance's root span."""
        base = {"workflow.name": instance.workflow, "workflow.id": instance.workflow_id}
        root = self.remember(instance.workflow_id, instance.root)
        current = trace.get_current_span()
        context = root
        if current.get_span_context().trace_id == int(instance.root.trace_id, 16):
            context = otel_context.get_current()
            if current.is_recording():
                current.set_attributes(base)
        self._queue.append(Queued(base, events, step_types, context, instance if instance.ended_at else None))

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
                if queued.ending is not None:
                    self._end_root(queued.ending)

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

    def _end_root(self, instance: InstanceTrace) -> None:
        """The instance's root span, from its creation to now that it stopped, with the ids
        its children were made under (without an SDK tracer to force them, none is made)."""
        if self._ids is None or instance.ended_at is None:
            return
        attributes = {"workflow.name": instance.workflow, "workflow.id": instance.workflow_id,
                      "workflow.status": instance.status}
        links = [Link(span_context(instance.link), {"link.kind": "caller"})] if instance.link is not None else []
        with self._ids.forcing(instance.root):
            span = self.tracer.start_span(f"workflow {instance.workflow}", context=Context(),
                                          start_time=ns(instance.started), attributes=attributes, links=links)
        if instance.status == "failed":
            span.set_status(Status(StatusCode.ERROR, "the workflow failed"))
        span.end(end_time=ns(instance.ended_at))

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
    ending: InstanceTrace | None = None  # the commit stopped the instance: its root span ends
