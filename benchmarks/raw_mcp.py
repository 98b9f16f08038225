"""A deliberately cheap MCP tool caller for load benchmarks: JSON-RPC ``tools/call`` as
HTTP/1.1 POSTs on kept-alive asyncio connections, protocol 2026-07-28 (every request
stands alone: no initialize, no session).

Why not the `mcp` package's `Client`: on a 2-core machine where the client, the server
replicas and PostgreSQL share the cores, its per-call CPU (~2.5 ms, mostly pydantic
models and anyio streams) is most of what one replica spends, so it caps what a second
replica can add.  This caller sends the same request the SDK sends — the headers and the
``_meta`` envelope keys the server requires — and reads the plain JSON answer; it costs a
few tenths of a millisecond.  It handles only what these benchmarks need: JSON (not
server-sent event) answers with a Content-Length.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

PROTOCOL = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": PROTOCOL, "io.modelcontextprotocol/clientCapabilities": {}}


@dataclass
class ToolResult:
    """The parts of a `CallToolResult` the benchmarks read (same names as the SDK's)."""

    is_error: bool
    content: list[Any]
    structured_content: dict[str, Any] | None


class _TextBlock:
    def __init__(self, text: str) -> None:
        self.text = text


class RawClient:
    """Tool calls to one ``http://host:port/path`` endpoint; one kept-alive connection per
    concurrent caller (idle ones are reused)."""

    def __init__(self, url: str, token: str | None = None) -> None:
        self.auth = f"authorization: Bearer {token}\r\n" if token else ""
        parts = urlsplit(url)
        self.host, self.port, self.path = parts.hostname or "127.0.0.1", parts.port or 80, parts.path or "/"
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._ids = itertools.count(1)

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        body = json.dumps({"jsonrpc": "2.0", "id": next(self._ids), "method": "tools/call",
                           "params": {"name": name, "arguments": arguments, "_meta": META}}).encode()
        head = (f"POST {self.path} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\n"
                "content-type: application/json\r\naccept: application/json, text/event-stream\r\n"
                f"mcp-protocol-version: {PROTOCOL}\r\nmcp-method: tools/call\r\nmcp-name: {name}\r\n"
                f"{self.auth}content-length: {len(body)}\r\n\r\n").encode()
        while True:
            reused = bool(self._idle)
            reader, writer = self._idle.pop() if reused else await asyncio.open_connection(self.host, self.port)
            try:
                writer.write(head + body)
                status, payload, keep = await _read_response(reader)
                break
            except (asyncio.IncompleteReadError, ConnectionError) as exc:
                writer.close()
                if not (reused and _nothing_read(exc)):
                    raise
                # The server closed this idle kept-alive connection (uvicorn does after 5 s)
                # before reading our request: it was never processed; send it on another,
                # as every HTTP client does.
            except BaseException:
                writer.close()
                raise
        if keep:
            self._idle.append((reader, writer))
        else:
            writer.close()
        return _result(name, status, payload)

    async def close(self) -> None:
        while self._idle:
            _, writer = self._idle.pop()
            writer.close()


def _nothing_read(exc: BaseException) -> bool:
    return not isinstance(exc, asyncio.IncompleteReadError) or not exc.partial


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    """Status, body and whether the connection stays open, of one HTTP/1.1 response."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    if "content-length" not in headers:
        raise RuntimeError(f"answer without content-length (streamed?): {head!r}")
    payload = await reader.readexactly(int(headers["content-length"]))
    return status, payload, headers.get("connection", "").lower() != "close"


def _result(name: str, status: int, payload: bytes) -> ToolResult:
    """The tool result, or an error result for an HTTP or JSON-RPC error (client-visible)."""
    try:
        message = json.loads(payload)
    except ValueError:
        message = {}
    result = message.get("result") if isinstance(message, dict) else None
    if status != 200 or not isinstance(result, dict):
        return ToolResult(True, [_TextBlock(f"{name}: HTTP {status}: {payload[:300]!r}")], None)
    content = [_TextBlock(b.get("text", "")) for b in result.get("content", []) if isinstance(b, dict)]
    return ToolResult(bool(result.get("isError")), content, result.get("structuredContent"))
