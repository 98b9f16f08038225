"""One HTTP client cannot fill the server's session table or hold its connections.

The attacks: (1) legacy (session-based) clients each cost the server a session task and
its buffers; the SDK allows 10,000 sessions, idle for 30 minutes, to all clients
together, so one client opening sessions in a loop filled the table in about two minutes
and every other client got 503 for half an hour.  (2) A request whose headers or body
trickle in (a byte now and then) was held open with no timeout at all.  Now each client
(token principal and address) has its own small cap (503 beyond it, other clients
unaffected), idle sessions end sooner, the headers must arrive within a deadline (the
connection is closed) and so must the body (408).

Real `serve --http` subprocesses; raw HTTP with httpx2 and raw sockets.  The limits are
lowered through their environment variables so the test runs in seconds.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import httpx2
import pytest
from srv_helpers import TOKEN, make_project, serving_http

pytestmark = pytest.mark.slow
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
           "Authorization": f"Bearer {TOKEN}"}
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                         "clientInfo": {"name": "greedy", "version": "1"}}}


def open_session(url: str, source: str = "127.0.0.1") -> httpx2.Response:
    """One `initialize` without a session id: a new legacy session when it answers 200."""
    with httpx2.Client(transport=httpx2.HTTPTransport(local_address=source), timeout=30) as http:
        return http.post(url, json=INITIALIZE, headers=HEADERS)


def test_one_client_cannot_take_every_session(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    with serving_http(tmp_path, project, AROMCP_HTTP_SESSIONS_PER_CLIENT="3") as server:
        mine = [open_session(server.url) for _ in range(3)]
        assert [r.status_code for r in mine] == [200, 200, 200]
        refused = open_session(server.url)
        assert refused.status_code == 503, refused.text[:200]
        assert "3 sessions" in refused.text and "AROMCP_HTTP_SESSIONS_PER_CLIENT" in refused.text, refused.text
        other = open_session(server.url, source="127.0.0.2")  # another client (another address)
        assert other.status_code == 200, other.text[:200]
        session = mine[0].headers["mcp-session-id"]
        closed = httpx2.delete(server.url, headers=HEADERS | {"Mcp-Session-Id": session}, timeout=30)
        assert closed.status_code == 200, closed.text
        assert open_session(server.url).status_code == 200, "a closed session makes room"
        assert open_session(server.url).status_code == 503


def test_idle_sessions_end_and_make_room(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    with serving_http(tmp_path, project, AROMCP_HTTP_SESSIONS_PER_CLIENT="2",
                      AROMCP_HTTP_SESSION_IDLE_S="1") as server:
        first = open_session(server.url)
        assert open_session(server.url).status_code == 200
        assert open_session(server.url).status_code == 503
        deadline = time.monotonic() + 30  # idle for 1 s, then swept: a loaded machine may take longer
        while (again := open_session(server.url)).status_code == 503 and time.monotonic() < deadline:
            time.sleep(0.2)  # a refused session is not opened: asking again takes no place
        assert again.status_code == 200, "idle sessions ended"
        gone = httpx2.post(server.url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                           headers=HEADERS | {"Mcp-Session-Id": first.headers["mcp-session-id"],
                                              "MCP-Protocol-Version": "2025-11-25"}, timeout=30)
        assert gone.status_code == 404


def test_a_body_that_trickles_in_is_cut_off(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    with serving_http(tmp_path, project, AROMCP_HTTP_BODY_TIMEOUT_S="1") as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            head = (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nContent-Type: application/json\r\n"
                    f"Accept: application/json, text/event-stream\r\nAuthorization: Bearer {TOKEN}\r\n"
                    "Content-Length: 400\r\n\r\n")
            sock.sendall(head.encode() + b'{"jsonrpc": ')
            started = time.monotonic()
            answer = b""
            for _ in range(8):  # a byte now and then, well within any per-read timeout
                time.sleep(0.4)
                try:
                    sock.sendall(b" ")
                except OSError:
                    break
            sock.settimeout(10)
            try:
                while chunk := sock.recv(4096):
                    answer += chunk
            except TimeoutError:
                pass
            took = time.monotonic() - started
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert took < 8, f"held for {took:.1f} s"
        assert b"AROMCP_HTTP_BODY_TIMEOUT_S" in answer


def test_headers_that_trickle_in_are_cut_off(tmp_path: Path) -> None:
    """uvicorn waits for request headers without a deadline; the server gives them one."""
    project = make_project(tmp_path / "project")
    with serving_http(tmp_path, project, AROMCP_HTTP_HEADER_TIMEOUT_S="1") as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n".encode())
            started, closed = time.monotonic(), False
            for _ in range(20):  # a header line every 0.4 s, never the blank line that ends them
                time.sleep(0.4)
                try:
                    sock.sendall(b"X-Slow: 1\r\n")
                    sock.settimeout(0.01)
                    closed = sock.recv(1) == b""
                except TimeoutError:
                    continue
                except OSError:
                    closed = True
                if closed:
                    break
            took = time.monotonic() - started
        assert closed and took < 5, f"still open after {took:.1f} s"
        in_time = httpx2.post(server.url, json=INITIALIZE, headers=HEADERS, timeout=30)
        assert in_time.status_code == 200, "a request in time is served"
