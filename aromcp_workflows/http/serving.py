"""Serving an app of ours over HTTP: the checks every surface puts in front, and uvicorn's
configuration with the connection limits (`serve --http` and `aromcp-workflows ui` alike).

In front of the app, outermost first: the access log (`http.access`), the Host/Origin rule
(`http.hosts`: a refused request is not even read), the credential (`http.gate`: from the
headers, before the body), then the body within its deadline.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.types import ASGIApp

from aromcp_workflows.http.access import AccessLog
from aromcp_workflows.http.connections import ConnectionBook, guarded_protocol
from aromcp_workflows.http.gate import Admission, BodyDeadline, CredentialGate
from aromcp_workflows.http.hosts import HostGuard, HostRule
from aromcp_workflows.http.limits import read_limits

if TYPE_CHECKING:
    import uvicorn


MAX_BODY_BYTES = 4 * 1024 * 1024  # as the MCP SDK's own limit
CONNECTION_LIMITS = {  # variable: (default, what it bounds)
    "AROMCP_HTTP_MAX_CONNECTIONS": (512, "connections open at once"),
    "AROMCP_HTTP_MAX_UNAUTHENTICATED": (64, "connections open at once that have not shown a valid credential"),
    "AROMCP_HTTP_BODY_TIMEOUT_S": (30, "seconds a request body may take to arrive"),
    "AROMCP_HTTP_HEADER_TIMEOUT_S": (10, "seconds a request's headers may take to arrive"),
}


@dataclass(frozen=True)
class ConnectionLimits:
    max_connections: int
    max_unauthenticated: int
    body_timeout_s: float
    header_timeout_s: float
    max_body_bytes: int = MAX_BODY_BYTES

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> ConnectionLimits:
        """Each from its variable or its default; `LimitError` names a bad one."""
        values = read_limits(CONNECTION_LIMITS, environ)
        return cls(int(values["AROMCP_HTTP_MAX_CONNECTIONS"]), int(values["AROMCP_HTTP_MAX_UNAUTHENTICATED"]),
                   values["AROMCP_HTTP_BODY_TIMEOUT_S"], values["AROMCP_HTTP_HEADER_TIMEOUT_S"])


def guarded(app: ASGIApp, rule: HostRule, admissions: Sequence[tuple[str, Admission]],
            limits: ConnectionLimits) -> ASGIApp:
    """`app` behind the access log, the Host/Origin rule, the credential and the body deadline."""
    body = BodyDeadline(app, limits.max_body_bytes, limits.body_timeout_s)
    return AccessLog(HostGuard(CredentialGate(body, admissions, limits.max_body_bytes), rule))


def uvicorn_config(app: ASGIApp, limits: ConnectionLimits, log_level: str, **more: Any) -> uvicorn.Config:
    """uvicorn's configuration for `app` with the connection limits (its own access log off:
    `http.access` writes ours)."""
    import uvicorn

    book = ConnectionBook(limits.max_connections, limits.max_unauthenticated)
    return uvicorn.Config(app, log_level=log_level.lower(), http=guarded_protocol(book, limits.header_timeout_s),
                          access_log=False, timeout_graceful_shutdown=1, **more)
