"""The one Host/Origin rule (`http/hosts.py`) at its edges, over real HTTP.

The DNS-rebinding tests (test_dns_rebinding.py) start the real commands; here the guard
stands in front of a small app on a real uvicorn in a thread (on `listening_socket`, as the
commands serve), and raw requests send exactly the Host and Origin a browser or an attacker
would: ports left out, letter case, a missing or malformed Host, a long one, an Origin of
another scheme or port, `null`.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from aromcp_workflows.http.hosts import HostEntryError, HostGuard, HostRule, listening_socket


async def ok(request: Any) -> PlainTextResponse:
    return PlainTextResponse("ok")


@contextmanager
def guarded(bind: str, *allowed: str) -> Iterator[int]:
    """`HostGuard(rule for bind and allowed)` in front of an app answering "ok", served by
    uvicorn on a free port of 127.0.0.1; the port."""
    import uvicorn

    app = HostGuard(Starlette(routes=[Route("/", ok, methods=["GET", "POST"])]), HostRule.for_bind(bind, allowed))
    sock = listening_socket("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def request(port: int, host: str | None, origin: str | None = None, version: str = "1.1") -> tuple[int, str]:
    """A raw GET with exactly these headers; (status, body)."""
    lines = [f"GET / HTTP/{version}", "Connection: close"]
    lines += [f"Host: {host}"] if host is not None else []
    lines += [f"Origin: {origin}"] if origin is not None else []
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    head, _, body = data.decode("latin-1").partition("\r\n\r\n")
    return int(head.split()[1]), body


def test_ports_case_and_schemes() -> None:
    with guarded("0.0.0.0", "proxy.internal:443", "mcp.internal") as port:
        for host, origin in [("LOCALHOST:8780", None), ("[::1]:1", "http://[::1]:1"), ("127.0.0.1", None),
                             ("proxy.internal", "https://proxy.internal"), ("proxy.internal:443", None),
                             ("mcp.internal", "http://mcp.internal:9/"), ("Mcp.Internal:1", "HTTPS://MCP.INTERNAL")]:
            assert request(port, host, origin) == (200, "ok"), (host, origin)
        for host in ("proxy.internal:8080", "0.0.0.0:80", "mcp.internal.evil.example", "localhost.:80"):
            status, body = request(port, host)
            assert status == 421 and f"Host '{host}'" in body and "--allowed-host" in body, (host, body)
        for origin in ("http://proxy.internal", "https://proxy.internal:8443", "http://evil.example", "null",
                       "file://", "http://user@mcp.internal"):
            status, body = request(port, "mcp.internal", origin)
            assert status == 403 and f"Origin {origin!r}" in body, (origin, body)


def test_the_refusal_says_what_to_write_and_shows_no_allowed_name() -> None:
    """The wording: which Host, which flag allows it.  Not the allowed names: with DNS
    rebinding the page is same-origin with its own name and reads the answer."""
    with guarded("127.0.0.5", "secret-name.internal") as port:
        status, body = request(port, "evil.example:8780")
        assert status == 421 and body == (
            "Host 'evil.example:8780' is not a name this server answers to: it answers only to loopback, the "
            "address it is bound to and the names given with --allowed-host (against DNS rebinding); if clients "
            "reach it by this name, start it with --allowed-host evil.example")
        status, body = request(port, "127.0.0.5:1", "http://evil.example:8780")
        assert status == 403 and body.startswith("Origin 'http://evil.example:8780' is a page of another host") \
            and body.endswith("if that page may call it, start it with --allowed-host evil.example")
        for sent in ("evil.example", "x" * 5000, "a b", "evil.example:99999"):
            status, body = request(port, sent)
            assert status == 421 and "secret-name" not in body and len(body) < 600, (sent[:20], body)
        assert request(port, "127.0.0.5:9") == (200, "ok") and request(port, "secret-name.internal") == (200, "ok")


def test_a_request_without_host_is_refused() -> None:
    with guarded("127.0.0.1") as port:
        status, body = request(port, None, version="1.0")  # HTTP/1.0 may leave Host out
        assert status == 421 and "no Host header" in body
        assert request(port, "127.0.0.1", version="1.0") == (200, "ok")


def test_a_websocket_of_a_foreign_host_is_closed_before_it_is_accepted() -> None:
    """uvicorn here has no websocket support, so no such scope arrives today; the guard
    refuses one all the same, should a websocket library ever be installed."""
    reached: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope["type"])

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.connect"}

    guard = HostGuard(app, HostRule.for_bind("127.0.0.1"))
    scope = {"type": "websocket", "path": "/", "headers": [(b"host", b"evil.example")]}
    anyio.run(guard, scope, receive, send)
    assert sent == [{"type": "websocket.close", "code": 1008}] and reached == []
    anyio.run(guard, {**scope, "headers": [(b"host", b"localhost:1")]}, receive, send)
    assert reached == ["websocket"]


@pytest.mark.parametrize("entry", ["http://mcp.internal", "mcp.internal:0", "mcp internal", "a/b", ""])
def test_an_allowed_host_entry_that_names_no_host_is_refused(entry: str) -> None:
    with pytest.raises(HostEntryError, match="is not a host name or address with an optional :PORT"):
        HostRule.for_bind("127.0.0.1", [entry])
