"""`aromcp-workflows` with `OTEL_TRACES_EXPORTER=noop` meaning the SDK on and an exporter that
drops every span: what tracing costs the server, without the cost of sending spans anywhere.
`bench_otel.py` serves with it (`traced_server.py --project-dir P serve --store S`);
`BENCH_WORKFLOW_SPANS=off` keeps only the MCP SDK's span of each tool call, to tell the two
costs apart."""

import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from aromcp_workflows.observe import otel


class NoopExporter(SpanExporter):
    """Takes every batch and keeps nothing."""

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


_real = otel._exporter


def _exporter(name: str, environ: Mapping[str, str]) -> Any:
    return NoopExporter() if name == "noop" else _real(name, environ)


otel._exporter = _exporter
if os.environ.get("BENCH_WORKFLOW_SPANS") == "off":  # only the MCP SDK's span of each tool call
    otel.Tracing.committed = lambda *args: None  # type: ignore[method-assign]
    otel.Tracing.tool_call = lambda *args: None  # type: ignore[method-assign]

if __name__ == "__main__":
    from aromcp_workflows.cli.entry import main

    sys.exit(main())
