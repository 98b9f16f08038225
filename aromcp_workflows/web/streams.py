"""How many event streams the web view keeps open: per client and in all.

An open instance page holds one stream (server-sent events) that polls the store; each
costs the server a task and a store read every `POLL_S`.  One client (its session, or its
bearer token and address) may hold `AROMCP_UI_STREAMS_PER_CLIENT` at once (429 beyond),
all clients together `AROMCP_UI_MAX_STREAMS` (503 beyond); a stream counts from its answer
until it ends (the client leaves, or the stream's time is up and the browser reconnects).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from aromcp_workflows.http import read_limits

STREAM_LIMITS = {  # variable: (default, what it bounds)
    "AROMCP_UI_STREAMS_PER_CLIENT": (8, "event streams one client of the web view may hold open"),
    "AROMCP_UI_MAX_STREAMS": (64, "event streams of the web view open at once, all clients together"),
}


@dataclass
class StreamQuota:
    per_client: int
    total: int
    held: Counter[str] = field(default_factory=Counter)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> StreamQuota:
        """The caps from their variables (`LimitError`, a one-line ValueError, for a bad one)."""
        values = read_limits(STREAM_LIMITS, environ)
        return cls(int(values["AROMCP_UI_STREAMS_PER_CLIENT"]), int(values["AROMCP_UI_MAX_STREAMS"]))

    def take(self, client: str) -> tuple[int, str] | None:
        """Count a stream for `client`, or (status, why not)."""
        if self.held[client] >= self.per_client:
            return 429, (f"this client already has {self.per_client} event streams open, the most one client may "
                         "(AROMCP_UI_STREAMS_PER_CLIENT sets it): close a page of this view, or wait")
        if sum(self.held.values()) >= self.total:
            return 503, (f"the web view already has {self.total} event streams open, the most it keeps "
                         "(AROMCP_UI_MAX_STREAMS sets it): try again later")
        self.held[client] += 1
        return None

    def give_back(self, client: str) -> None:
        self.held[client] -= 1
        if self.held[client] <= 0:
            del self.held[client]


class CountedStream(StreamingResponse):
    """A stream that gives its place back however it ends (finished, client gone, cancelled)."""

    def __init__(self, content: Any, quota: StreamQuota, client: str, **kwargs: Any):
        super().__init__(content, **kwargs)
        self._quota, self._client = quota, client

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._quota.give_back(self._client)
