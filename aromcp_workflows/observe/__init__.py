"""Tracing with OpenTelemetry: off unless asked for; then spans made from what the server
already records.

Asked for means: the standard variables name an exporter (`OTEL_TRACES_EXPORTER` other
than `none`, or an `OTEL_EXPORTER_OTLP_ENDPOINT`) and `OTEL_SDK_DISABLED` is not true.
Otherwise nothing here imports OpenTelemetry's SDK and the server pays nothing: the
instance layer holds no observer and the tool layer makes no call.  The SDK comes with
the `otel` extra (`pip install 'aromcp-workflows[otel]'`); asked for without it, one
line on stderr says so and tracing stays off.

When on, `otel.Tracing` turns each commit's history events into spans — the interpreter
does no I/O and an agent step spans two tool calls, so the events (with their
timestamps) are where a step's start and end are known — and the MCP SDK's own span of
each tool call gets the workflow's attributes.  Every span of an instance is in the one
trace its kept trace context names (`context.py`), whose root span is the instance.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from aromcp_workflows import lazy_face

if TYPE_CHECKING:  # the server's start imports this package: only what `start` needs
    from opentelemetry.context import Context

    from aromcp_workflows.observe.context import InstanceTrace, SpanIds
    from aromcp_workflows.store import HistoryEvent

EXPORTER_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


class Observer(Protocol):
    """What the instance and tool layers tell tracing: a new instance, a commit's events, a
    tool call; and what they ask it: the root span an instance's calls go under."""

    def new_trace(self, origin: SpanIds | None = None, since: str | None = None) -> dict[str, Any]:
        ...

    def committed(self, instance: InstanceTrace, events: Sequence[HistoryEvent],
                  step_types: Callable[[str], str | None]) -> None:
        ...

    def root_of(self, workflow_id: str) -> SpanIds | None:
        ...

    def remember(self, workflow_id: str, root: SpanIds) -> Context:
        ...

    def tool_call(self, name: str, arguments: Mapping[str, Any]) -> None:
        ...

    def shutdown(self) -> None:
        ...


def wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the standard OTEL_* variables ask for traces (no import, a few lookups)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporters:
        return any(name.strip() not in ("", "none") for name in exporters.split(","))
    return any(environ.get(name) for name in EXPORTER_VARIABLES)


def start(environ: Mapping[str, str] = os.environ, service: str = "aromcp-workflows",
          make_global: bool = True) -> Observer | None:
    """Tracing as the environment asks for it, or None.  The server's sets the global
    tracer provider (the MCP SDK's spans use it); the runner's keeps its own."""
    if not wanted(environ):
        return None
    if importlib.util.find_spec("opentelemetry.sdk") is None:
        print("aromcp-workflows: OTEL_* variables ask for traces, but the OpenTelemetry SDK is not installed "
              "(pip install 'aromcp-workflows[otel]'); tracing is off", file=sys.stderr)
        return None
    from aromcp_workflows.observe.otel import from_environment

    return from_environment(environ, service, make_global)


if TYPE_CHECKING:
    from aromcp_workflows.observe.context import CALL, CallTrace, ended, instance_trace, new_root, parse, root_ends
    from aromcp_workflows.observe.otel import parent_context

__all__ = ["CALL", "CallTrace", "InstanceTrace", "Observer", "SpanIds", "ended", "instance_trace", "new_root",
           "parent_context", "parse", "root_ends", "start", "wanted"]
# The trace context (plain text, no SDK) and what needs the SDK, loaded on first use: the
# server's start imports this package for `start` alone.
__getattr__ = lazy_face(__name__, {
    "CALL": "context", "CallTrace": "context", "InstanceTrace": "context", "SpanIds": "context", "ended": "context",
    "instance_trace": "context", "new_root": "context", "parse": "context", "root_ends": "context",
    "parent_context": "otel",
})
