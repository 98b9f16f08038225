"""The headless runner's spans, in the trace of the instance it drives (when OTEL_* ask for traces).

`aromcp-workflows run` honours the same variables as `serve` (docs/observability.md): its
server is started with them, and the runner makes spans of its own with its own tracer
provider (never the global one, which would make the MCP SDK's client span of every
call too).  The server announces the instance's root span in the `_meta` of its
`workflow_start` and `workflow_resume` replies; from then on each step the runner
performs is a span `perform <step id>` under that root, and the calls it makes for the
step carry the span in `_meta` (the W3C propagator reads the current span whatever the
provider), so the server's span of the call is its child: runner and server in one
trace, whose root is the instance.  Nothing here imports OpenTelemetry unless tracing is on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from aromcp_workflows.observe import Observer, parse
from aromcp_workflows.observe import start as start_tracing

RUNNER_SERVICE = "aromcp-workflows-run"


def start(environ: Mapping[str, str]) -> Observer | None:
    """The runner's tracing as `environ` (the server's too) asks for it, or None."""
    return start_tracing(environ, service=RUNNER_SERVICE, make_global=False)


def console_asked(environ: Mapping[str, str]) -> bool:
    """Whether spans are to be written to stderr (the server's stderr is then let through)."""
    names = environ.get("OTEL_TRACES_EXPORTER", "").lower().split(",")
    return "console" in (name.strip() for name in names) and environ.get("OTEL_SDK_DISABLED", "").lower() != "true"


class RunTrace:
    """The runner's spans; every method does nothing while tracing is off or before the
    server announced the instance's root."""

    def __init__(self, tracing: Observer | None) -> None:
        self.tracing = tracing
        self._root: Any = None  # the context of the instance's root span

    def join(self, meta: Mapping[str, Any] | None) -> None:
        """The server's reply announced the instance's root span: the runner's spans go under it."""
        ids = parse((meta or {}).get("traceparent"))
        if self.tracing is None or ids is None:
            return
        from aromcp_workflows.observe import parent_context

        self._root = parent_context(ids)

    @contextlib.contextmanager
    def step(self, workflow_id: str, step: Mapping[str, Any], task_id: str | None) -> Iterator[Any]:
        """A span for performing one step and reporting it; it is the current span meanwhile."""
        tracer = getattr(self.tracing, "tracer", None)
        if tracer is None or self._root is None:
            yield None
            return
        attributes = {"workflow.id": workflow_id, "step.id": str(step.get("id")), "step.type": str(step.get("type"))}
        if task_id:
            attributes["task.id"] = task_id
        with tracer.start_as_current_span(f"perform {step.get('id')}", context=self._root,
                                          attributes=attributes) as span:
            yield span

    @staticmethod
    def failed(span: Any, error: str | None) -> None:
        """The step was reported failed (its error is not an attribute: it may quote output)."""
        if span is not None and error is not None:
            from opentelemetry.trace import Status, StatusCode

            span.set_status(Status(StatusCode.ERROR, "the step failed"))
