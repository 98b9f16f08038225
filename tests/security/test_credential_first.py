"""`serve --http` checks the credential from the headers before it reads a byte of the body.

The attack (issue 31): the body was read and buffered (up to 4 MiB, for up to 30 s) before
the bearer token was looked at, and nothing capped connections, so 40 tokenless
connections raised the server from 73 to 284 MB; a declared 64 MiB body got no answer at
all (the server read 4 MiB, answered and closed at once, and the reset lost the answer).
Now the headers decide: no valid token, 401 at once (the body is never kept); a declared
body over the limit, 413 at once; each refusal is complete on the wire before the
connection closes.  Connections are capped in all (503 beyond) and unauthenticated ones
apart (the oldest is closed to make room), so a client without the token holds nothing.

Real `serve --http` subprocesses; raw sockets, so the test controls what is sent when.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import httpx2
import pytest
from srv_helpers import TOKEN, make_project, serving_http

pytestmark = pytest.mark.slow
FOUR_MIB = 4 * 1024 * 1024
INITIALIZE = (b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", '
              b'"capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}')


def head(port: int, length: int, token: str | None = None, path: str = "/mcp") -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Accept: application/json, text/event-stream\r\n{auth}Content-Length: {length}\r\n\r\n").encode()


def answer_of(sock: socket.socket, within: float) -> bytes:
    """What the server sent, read until it closed or `within` seconds passed."""
    sock.settimeout(within)
    data = b""
    deadline = time.monotonic() + within
    try:
        while time.monotonic() < deadline and b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return data


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.parametrize("path", ["/mcp", "/elsewhere", "/ui/api/instances"])
def test_without_the_token_the_answer_is_401_before_the_body(tmp_path: Path, path: str) -> None:
    """A tokenless POST declaring 4 MiB, of which it sends a few bytes: 401 at once (the
    server does not wait for the rest), whatever the path, and the connection closes."""
    project = make_project(tmp_path / "project")
    with serving_http(tmp_path, project, "--ui") as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(head(server.port, FOUR_MIB, path=path) + b'{"jsonrpc": ')
            started = time.monotonic()
            answer = answer_of(sock, 3)
            took = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 401"), (path, answer[:300])
    assert took < 2, f"answered after {took:.1f} s"
    assert b"connection: close" in answer.lower()
    if path == "/mcp":
        assert b"www-authenticate: bearer" in answer.lower()


def test_a_wrong_token_is_refused_as_early(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    with serving_http(tmp_path, project) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(head(server.port, FOUR_MIB, token="not-the-token-0123456789"))
            answer = answer_of(sock, 3)
    assert answer.startswith(b"HTTP/1.1 401"), answer[:300]


@pytest.mark.parametrize("token", [TOKEN, None])
def test_a_declared_64_mib_body_gets_its_answer_at_once(tmp_path: Path, token: str | None) -> None:
    """Over the limit by its Content-Length: 413 with the token, 401 without, before any
    of it is sent; and a client that goes on sending still gets the answer whole."""
    project = make_project(tmp_path / "project")
    expected = b"HTTP/1.1 413" if token else b"HTTP/1.1 401"
    with serving_http(tmp_path, project) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(head(server.port, 64 * 1024 * 1024, token=token))
            started = time.monotonic()
            answer = answer_of(sock, 3)
            assert answer.startswith(expected), answer[:300]
            assert time.monotonic() - started < 2
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sender = threading.Thread(target=_blast, args=(sock, head(server.port, 64 * 1024 * 1024, token=token)))
            sender.start()
            answer = answer_of(sock, 5)
            sender.join(20)
        assert answer.startswith(expected), answer[:300]


def _blast(sock: socket.socket, first: bytes) -> None:
    """Send the headers and then as much body as the server takes (errors when it closes)."""
    try:
        sock.sendall(first)
        chunk = b"x" * 65536
        for _ in range(1024):
            sock.sendall(chunk)
    except OSError:
        pass


def test_forty_tokenless_connections_cost_the_server_nothing(tmp_path: Path) -> None:
    """The measured attack: 40 connections without a token, each sending all but the last
    byte of a 4 MiB body, so the server waits for the rest.  Before, it kept every body
    (73 -> 284 MB); now each is refused at its headers and nothing of it is kept."""
    project = make_project(tmp_path / "project")
    with serving_http(tmp_path, project) as server:
        httpx2.post(server.url, content=INITIALIZE, headers={"Authorization": f"Bearer {TOKEN}",
                    "Content-Type": "application/json", "Accept": "application/json, text/event-stream"}, timeout=30)
        before = rss_mb(server.proc.pid)
        socks = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(40)]
        senders = [threading.Thread(target=_send_body, args=(sock, head(server.port, FOUR_MIB)))
                   for sock in socks]
        for sender in senders:
            sender.start()
        peak = before
        while any(sender.is_alive() for sender in senders):
            peak = max(peak, rss_mb(server.proc.pid))
            time.sleep(0.02)
        peak = max(peak, rss_mb(server.proc.pid))
        for sock in socks:
            sock.close()
        assert peak - before < 25, f"the server grew from {before:.0f} to {peak:.0f} MB"
        assert server.proc.poll() is None


def _send_body(sock: socket.socket, first: bytes) -> None:
    try:
        sock.sendall(first + b"x" * (FOUR_MIB - 1))
        sock.settimeout(4)
        sock.recv(1)
    except OSError:
        pass


def test_unauthenticated_connections_are_capped_oldest_first(tmp_path: Path) -> None:
    """Ten connections that send nothing: at most the cap stay open (the oldest are closed
    to make room), and a client with the token is still served at once."""
    project = make_project(tmp_path / "project")
    with serving_http(tmp_path, project, AROMCP_HTTP_MAX_UNAUTHENTICATED="3") as server:
        idle = []
        for _ in range(10):
            idle.append(socket.create_connection(("127.0.0.1", server.port), timeout=10))
            time.sleep(0.05)
        time.sleep(0.5)
        closed = [_is_closed(sock) for sock in idle]
        assert sum(not c for c in closed) <= 3 and all(closed[:7]), closed
        served = httpx2.post(server.url, content=INITIALIZE, timeout=30, headers={
            "Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream"})
        assert served.status_code == 200, served.text[:200]
        for sock in idle:
            sock.close()


def test_connections_are_capped_in_all(tmp_path: Path) -> None:
    """Authenticated keep-alive connections up to the cap; one more gets a one-line 503
    naming the variable, and is closed."""
    project = make_project(tmp_path / "project")
    with serving_http(tmp_path, project, AROMCP_HTTP_MAX_CONNECTIONS="4") as server:
        held = []
        for _ in range(4):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            sock.sendall(head(server.port, 2, token=TOKEN) + b"{}")
            assert answer_of(sock, 5).startswith(b"HTTP/1.1 "), "served"
            held.append(sock)
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as extra:
            extra.sendall(head(server.port, 2, token=TOKEN) + b"{}")
            answer = answer_of(extra, 3) + answer_of(extra, 1)
        assert answer.startswith(b"HTTP/1.1 503"), answer[:300]
        assert b"AROMCP_HTTP_MAX_CONNECTIONS" in answer and answer.count(b"\n", answer.index(b"\r\n\r\n") + 4) <= 1
        for sock in held:
            sock.close()


def _is_closed(sock: socket.socket) -> bool:
    sock.settimeout(0.05)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True
