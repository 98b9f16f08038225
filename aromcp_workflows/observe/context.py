"""An instance's trace context, kept in the store: the one trace all its spans share.

Every span of an instance — tool calls, steps, commands, recomputes, sub-agent tasks, in
whichever server process or replica, before and after a restart — is in one trace whose
root span is the instance (`workflow <name>`).  What makes that possible across processes
is a few bytes kept with the instance: the W3C `traceparent` of its root span (its trace
id and span id), written when the instance is created, in the run's own JSON
(`WorkflowRun.trace_context`; no schema change, and a store written before it is read as
it was).  Any process that handles the instance parents its spans on that span context
(`NonRecordingSpan(SpanContext(...))` in `otel.py`), and the tool-call middleware
(`server/trace_calls.py`) makes the MCP SDK's span of a call its child.

An instance created while tracing was off has no trace context; it gets one derived from
its workflow id (the same in every process, so nothing needs writing).

Plain text and hashing only: nothing here imports OpenTelemetry, so the instance layer and
the tool layer use it whether or not tracing is on (nor the store package, which a stdio
server imports on its first tool call, not at start).
"""

from __future__ import annotations

import functools
import hashlib
import re
import secrets
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(?:-.*)?$")
ROOT_ENDS = ("completed", "failed", "cancelled", "interrupted")  # the first of these ends the root span


@dataclass(frozen=True)
class SpanIds:
    """A span's identity as W3C writes it: 32 and 16 lowercase hex digits."""

    trace_id: str
    span_id: str
    sampled: bool = True

    @property
    def traceparent(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{'01' if self.sampled else '00'}"


def parse(traceparent: object) -> SpanIds | None:
    """A W3C `traceparent` header's ids, or None when it is not a valid one (version ff,
    all-zero ids, anything malformed)."""
    if not isinstance(traceparent, str):
        return None
    return _parsed(traceparent)


@functools.lru_cache(maxsize=4096)
def _parsed(traceparent: str) -> SpanIds | None:
    """`parse`, remembered: every commit of an instance reads the same kept root."""
    text = traceparent.strip()
    found = TRACEPARENT.match(text)
    if found is None:
        return None
    version, trace_id, span_id, flags = found.groups()
    if version == "ff" or trace_id == "0" * 32 or span_id == "0" * 16 or (version == "00" and len(text) > 55):
        return None
    return SpanIds(trace_id, span_id, bool(int(flags, 16) & 1))


def new_root() -> SpanIds:
    """The ids of a new instance's root span: a new trace."""
    return SpanIds(secrets.token_hex(16), secrets.token_hex(8))


def derived_root(workflow_id: str) -> SpanIds:
    """The root of an instance that has no trace context kept (created while tracing was
    off, or by a release before it): derived from its id, so every process agrees."""
    digest = hashlib.sha256(f"aromcp-workflows trace {workflow_id}".encode()).hexdigest()
    return SpanIds(digest[:32], digest[32:48])


@dataclass(frozen=True)
class InstanceTrace:
    """What tracing is told of an instance with each of its commits."""

    workflow_id: str
    workflow: str
    root: SpanIds  # the instance's root span
    started: str  # when the root span starts
    status: str = "running"
    link: SpanIds | None = None  # the caller's span that started the instance, if it sent one
    ended_at: str | None = None  # set on the one commit that ends the root span


def instance_trace(workflow_id: str, workflow: str, kept: dict[str, Any] | None, created_at: str, status: str,
                   ends: bool = False) -> InstanceTrace:
    """The instance's trace as its kept context (`WorkflowRun.trace_context`) says; its root
    starts when the context says (the call that created it arrived), else at `created_at`."""
    kept = kept or {}
    root = parse(kept.get("traceparent")) or derived_root(workflow_id)
    return InstanceTrace(workflow_id, workflow, root, str(kept.get("started") or created_at), status,
                         parse(kept.get("link")), str(kept["ended"]) if ends and kept.get("ended") else None)


def ended(kept: dict[str, Any] | None, workflow_id: str) -> dict[str, Any]:
    """The kept context of an instance whose root span ends now (the first time it stops)."""
    from aromcp_workflows.store import utc_now  # here: the server starts without the store package

    base = kept if kept and parse(kept.get("traceparent")) else {"traceparent": derived_root(workflow_id).traceparent}
    return {**(kept or {}), **base, "ended": utc_now()}


def root_ends(kept: dict[str, Any] | None, status: str) -> bool:
    """Whether a commit leaving an instance in `status` ends its root span: it stops for the
    first time (a resumed or retried instance's later spans stay under the ended root)."""
    return status in ROOT_ENDS and not (kept or {}).get("ended")


@dataclass(frozen=True)
class CallTrace:
    """What the tool-call middleware learned of one call, for the spans the call makes:
    `planned` is the root a `workflow_start` call's span was made under (the instance it
    creates takes it), `caller` the span the client sent in `_meta` when the call's span
    was put under the instance's root instead (it becomes a link)."""

    planned: SpanIds | None = None
    caller: SpanIds | None = None
    since: str | None = None  # when the call arrived (a root planned here starts then)


CALL: ContextVar[CallTrace | None] = ContextVar("aromcp_call_trace", default=None)
