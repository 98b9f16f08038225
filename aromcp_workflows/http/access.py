"""The access log: one line per request, its secrets masked, at INFO.

uvicorn's own access log is turned off where we serve (`access_log=False`): its formatter
unpacks `record.args` as a 5-tuple, which the log masking (every record masked and capped
at creation, `server.guard.install_log_masking`) cannot leave in place, so each request
wrote a 90-line "Logging error" instead.  This line is made whole here, with the values of
query parameters that carry a credential (`code`, `token`, any name that says secret)
masked; headers are never logged, so neither is a bearer token or a cookie.  The log
masking then masks what it knows on top.
"""

from __future__ import annotations

import logging
from urllib.parse import parse_qsl, quote

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aromcp_workflows.safety import MASK, is_sensitive

log = logging.getLogger("aromcp_workflows.access")
CREDENTIAL_PARAMETERS = frozenset({"code", "token", "access_token", "key", "auth", "authorization", "bearer"})


def masked_query(query: str) -> str:
    """The query string with the value of every credential-carrying parameter masked."""
    if not query:
        return ""
    pairs = parse_qsl(query, keep_blank_values=True)
    return "&".join(f"{quote(name)}={MASK if _credential(name) else quote(value)}" for name, value in pairs)


def _credential(name: str) -> bool:
    return name.lower() in CREDENTIAL_PARAMETERS or is_sensitive(name)


class AccessLog:
    """One line per HTTP request once its answer has started: client, request line, status."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not log.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return

        async def logged(message: Message) -> None:
            if message["type"] == "http.response.start":
                log.info(self.line(scope, int(message["status"])))
            await send(message)

        await self.app(scope, receive, logged)

    @staticmethod
    def line(scope: Scope, status: int) -> str:
        client = scope.get("client") or ("-", 0)
        query = masked_query(scope.get("query_string", b"").decode("latin-1"))
        target = scope.get("path", "") + (f"?{query}" if query else "")
        version = scope.get("http_version", "1.1")
        return f'{client[0]}:{client[1]} "{scope.get("method", "")} {target} HTTP/{version}" {status}'
