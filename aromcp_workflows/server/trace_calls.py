"""Every tool call about an instance in that instance's one trace (installed only when tracing is on).

The MCP SDK makes a span for each call (`OpenTelemetryMiddleware`), whose parent is the
`traceparent` the client sent in `_meta`, else the current context: a new trace per call.
This middleware runs before it and sets what it reads — the current context, and the
`_meta` without the client's `traceparent` (`call_next(replace(ctx, meta=...))`, the SDK's
way to rewrite a request for the rest of the chain) — so that:

- `workflow_start`: the call's span goes under a root span planned here, which the
  instance it creates takes as its own (`observe.context.CALL`; a start resent with its
  idempotency key creates nothing, and its span stays under a root no instance took);
- a call naming a `workflow_id`: under the instance's root span, found in memory or, the
  first time this process sees the instance, in the store (`WorkflowService.trace_root`,
  in a worker thread) — unless the client's own span is already in that trace (the
  headless runner's are), which then stays the parent;
- a client span that was not kept as the parent becomes a link of the call's span
  (`Tracing.tool_call`).

The replies of `workflow_start` and `workflow_resume` carry the instance's root in `_meta`
(`traceparent`), so a client that traces (`aromcp-workflows run`) puts its own spans in
the instance's trace.  Only the OpenTelemetry middleware reads the rewritten `_meta`; the
tool gets the request's parameters as the client sent them.  Choosing the parent costs a
few tens of µs a call (`docs/observability.md`, "What it costs").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import anyio.to_thread

from aromcp_workflows.observe import CALL, CallTrace, Observer, SpanIds, new_root, parse
from aromcp_workflows.store import utc_now

if TYPE_CHECKING:
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext

    from aromcp_workflows.app import WorkflowService

ANNOUNCED = ("workflow_start", "workflow_resume")  # replies that carry the instance's traceparent in `_meta`


class InstanceTraces:
    """The middleware (see the module's docstring); `service` builds the service on first use."""

    def __init__(self, observer: Observer, service: Callable[[], WorkflowService]) -> None:
        self.observer = observer
        self.service = service

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        params = ctx.params
        if ctx.method != "tools/call" or not isinstance(params, Mapping):
            return await call_next(ctx)
        name, arguments = params.get("name"), params.get("arguments")
        workflow_id = arguments.get("workflow_id") if isinstance(arguments, Mapping) else None
        caller = parse((ctx.meta or {}).get("traceparent"))
        if name == "workflow_start":
            root: SpanIds | None = new_root()
            call = CallTrace(planned=root, caller=caller, since=utc_now())
        elif isinstance(workflow_id, str) and workflow_id:
            root = await self._root(workflow_id)
            if root is None or (caller is not None and caller.trace_id == root.trace_id):
                return self._announced(name, await call_next(ctx), root)  # already in its trace, or unknown
            call = CallTrace(caller=caller)
        else:
            return await call_next(ctx)
        assert root is not None
        result = await self._under(root, call, ctx, call_next, workflow_id if call.planned is None else None)
        if name == "workflow_start":
            started = _structured(result).get("workflow_id")
            root = await self._root(started) if isinstance(started, str) else None  # a resent start: its instance
        return self._announced(name, result, root)

    async def _under(self, root: SpanIds, call: CallTrace, ctx: ServerRequestContext[Any, Any],
                     call_next: CallNext, workflow_id: str | None) -> HandlerResult:
        """The rest of the chain with the instance's root span as the current context, which
        the SDK's span takes as its parent when `_meta` carries no `traceparent` (a client's
        is taken out: it becomes a link).  No W3C text is written or parsed again: the
        context is the one `Tracing.remember` keeps per instance."""
        from opentelemetry import context as otel_context

        from aromcp_workflows.observe import parent_context

        context = parent_context(root) if workflow_id is None else self.observer.remember(workflow_id, root)
        if call.caller is not None or (ctx.meta or {}).get("traceparent") is not None:
            meta: Any = {k: v for k, v in (ctx.meta or {}).items() if k not in ("traceparent", "tracestate")}
            ctx = replace(ctx, meta=meta)  # a RequestParamsMeta (a TypedDict)
        attached, token = otel_context.attach(context), CALL.set(call)
        try:
            return await call_next(ctx)
        finally:
            CALL.reset(token)
            otel_context.detach(attached)

    async def _root(self, workflow_id: str) -> SpanIds | None:
        """The instance's root span: from memory, else from the store (once per process and
        instance); None for an instance this server cannot serve (the call says why)."""
        root = self.observer.root_of(workflow_id)
        if root is not None:
            return root

        def look() -> SpanIds | None:
            try:
                return self.service().trace_root(workflow_id)
            except Exception:  # unknown, another project's, a store down: the call itself will say
                return None

        root = await anyio.to_thread.run_sync(look)
        if root is not None:
            self.observer.remember(workflow_id, root)
        return root

    @staticmethod
    def _announced(name: Any, result: HandlerResult, root: SpanIds | None) -> HandlerResult:
        """A start's or resume's reply with the instance's root in `_meta` (not an error's)."""
        if name not in ANNOUNCED or root is None or not isinstance(result, dict) or result.get("isError"):
            return result
        return {**result, "_meta": {**(result.get("_meta") or {}), "traceparent": root.traceparent}}


def _structured(result: HandlerResult) -> Mapping[str, Any]:
    data = result.get("structuredContent") if isinstance(result, dict) else None
    return data if isinstance(data, Mapping) else {}
