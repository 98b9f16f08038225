"""Stdio serving where every line gets an answer.

The SDK's stdio transport hands a line it cannot parse to the server as an exception item,
and the server drops it: a request nested 250 deep, one with a lone surrogate, a truncated
line, or JSON that is no JSON-RPC message got no reply, and the client waited forever.
`AnsweringReader` sits between the transport and the server: such an item is answered on
the spot with a JSON-RPC error (-32700 parse error, -32600 invalid request), carrying the
request's id whenever Python's own JSON reader can still find it, and reading continues.

The end of the input is the client gone (`aromcp-workflows run` stopped by Ctrl-C, an
editor closed): the shell commands this server runs for it are stopped then, as on
SIGTERM (no half-run result is stored; resuming runs them again), instead of going on,
recording results and starting the next command while the client's transport waits a
grace period before it sends that SIGTERM.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from mcp.shared.message import SessionMessage
from mcp_types import ErrorData, JSONRPCError
from pydantic import ValidationError

log = logging.getLogger("aromcp_workflows")
PARSE_ERROR, INVALID_REQUEST = -32700, -32600


class AnsweringReader:
    """A read stream that answers unparseable items instead of passing them on."""

    def __init__(self, inner: Any, write_stream: Any) -> None:
        self.inner = inner
        self.write_stream = write_stream

    @property
    def last_context(self) -> Any:
        return getattr(self.inner, "last_context", None)

    async def __aenter__(self) -> AnsweringReader:
        await self.inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self.inner.__aexit__(*exc)

    def __aiter__(self) -> AnsweringReader:
        return self

    async def __anext__(self) -> Any:
        while True:
            try:
                item = await self.inner.__anext__()
            except StopAsyncIteration:
                await client_gone()
                raise
            if not isinstance(item, Exception):
                return item
            await self.answer(item)

    async def receive(self) -> Any:
        """The next message (an answered bad line is skipped)."""
        return await self.__anext__()

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def answer(self, error: Exception) -> None:
        """Reply to a line that could not be read as a JSON-RPC message."""
        code, message, request_id = describe(error)
        reply = JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=message))
        try:
            await self.write_stream.send(SessionMessage(reply))
        except Exception:  # the connection is closing: nobody is left to answer
            log.debug("could not answer an unreadable line", exc_info=True)


def describe(error: Exception) -> tuple[int, str, str | int | None]:
    """(code, message, id or None) for an item the transport could not parse."""
    if not isinstance(error, ValidationError) or not error.errors():
        return PARSE_ERROR, f"Parse error: {type(error).__name__}", None
    first = error.errors()[0]
    raw = first.get("input")
    if first.get("type") == "json_invalid":
        reason = str(first.get("ctx", {}).get("error", "not valid JSON"))[:200]
        return (PARSE_ERROR, f"Parse error: {reason}; send one JSON-RPC message per line (UTF-8 JSON, "
                             "no lone surrogates, nested less than 200 levels deep)", _recover_id(raw))
    return (INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 request, notification or response "
                             "(it needs \"jsonrpc\": \"2.0\", and \"method\" or \"result\"/\"error\")", _id_of(raw))


def _recover_id(raw: Any) -> str | int | None:
    """The id of a line pydantic's JSON reader refused, if Python's (more lenient) can read it."""
    if not isinstance(raw, (str, bytes)):
        return None
    try:
        return _id_of(json.loads(raw))
    except (ValueError, RecursionError, MemoryError):
        return None


def _id_of(data: Any) -> str | int | None:
    request_id = data.get("id") if isinstance(data, dict) else None
    if isinstance(request_id, bool) or not isinstance(request_id, (str, int)):
        return None
    return request_id if not isinstance(request_id, str) else request_id[:200]


async def client_gone() -> None:
    """Stdin ended: stop the commands running for the client that left (see the module's
    docstring), off the event loop (a command gets a second to end after SIGTERM)."""
    import sys

    import anyio.to_thread

    runner = sys.modules.get("aromcp_workflows.shell.runner")
    if runner is None:  # no command was ever started here (and its import would cost the exit)
        return
    stopped = await anyio.to_thread.run_sync(runner.stop_all_commands)
    if stopped:
        log.warning("the client closed the connection: stopped %d running command(s)", stopped)
