"""Tracing fixtures: the SDK's global tracer provider, set once for the test process (the MCP
SDK's span of each tool call comes from the global provider, and OpenTelemetry lets it be
set only once), exporting to an `InMemorySpanExporter` only while a test asks for spans."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class WhileAsked(SpanProcessor):
    """Hands ended spans to the in-memory exporter while `on` (other tests' spans are dropped)."""

    def __init__(self, exporter: InMemorySpanExporter) -> None:
        self.inner, self.on = SimpleSpanProcessor(exporter), False

    def on_end(self, span: ReadableSpan) -> None:
        if self.on:
            self.inner.on_end(span)


@pytest.fixture(scope="session")
def global_tracing() -> tuple[TracerProvider, InMemorySpanExporter, WhileAsked]:
    exporter = InMemorySpanExporter()
    gate = WhileAsked(exporter)
    provider = TracerProvider()
    provider.add_span_processor(gate)
    trace.set_tracer_provider(provider)
    assert trace.get_tracer_provider() is provider, "another global tracer provider was set first"
    return provider, exporter, gate


@pytest.fixture
def exporter(global_tracing: Any) -> Iterator[InMemorySpanExporter]:
    """The spans ended during the test."""
    _, memory, gate = global_tracing
    memory.clear()
    gate.on = True
    yield memory
    gate.on = False
    memory.clear()


@pytest.fixture
def tracing(global_tracing: Any) -> Iterator[Any]:
    """Tracing over the global provider; `tracing.flush()` makes the queued spans now."""
    from aromcp_workflows.observe.otel import Tracing

    made = Tracing(global_tracing[0])
    yield made
    made.stop()
