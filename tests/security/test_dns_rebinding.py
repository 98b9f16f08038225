"""Host and Origin are checked whatever address the HTTP server is bound to.

The attack (DNS rebinding): a web page on evil.example makes its name resolve to the
server's address, and the browser sends the page's requests to the server with
`Host: evil.example` and `Origin: http://evil.example`.  The SDK checks those headers only
when the server is bound to 127.0.0.1, localhost or ::1: bound to 127.0.0.2, 0.0.0.0 or a
private address, a foreign Host and Origin got 200.  Now the allowed hosts are always the
bind address, the names given with `--allowed-host`, and loopback; anything else gets 421
(Host) or 403 (Origin) before the request is read.

Real `serve --http` subprocesses, raw requests with httpx2 (which sends the Host and
Origin given).  The token is sent, so only the header check can refuse.
"""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest
from srv_helpers import TOKEN, make_project, serving_http

pytestmark = pytest.mark.slow
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                         "clientInfo": {"name": "browser", "version": "1"}}}


def initialize(url: str, host: str, origin: str | None = None, modern: bool = False) -> httpx2.Response:
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
               "Authorization": f"Bearer {TOKEN}", "Host": host}
    if origin is not None:
        headers["Origin"] = origin
    if modern:
        headers["MCP-Protocol-Version"] = "2026-07-28"
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "browser", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}}}}
    else:
        body = INITIALIZE
    return httpx2.post(url, json=body, headers=headers, timeout=30)


@pytest.mark.parametrize("bind", ["127.0.0.2", "0.0.0.0"])
def test_a_foreign_host_or_origin_is_refused_on_any_bind(tmp_path: Path, bind: str) -> None:
    project = make_project(tmp_path / "project")
    with serving_http(tmp_path, project, "--allowed-host", "mcp.internal", host=bind) as server:
        port = server.port
        url = f"http://{'127.0.0.1' if bind == '0.0.0.0' else bind}:{port}/mcp"
        for modern in (False, True):
            foreign = initialize(url, f"evil.example:{port}", f"http://evil.example:{port}", modern)
            assert foreign.status_code == 421, (bind, modern, foreign.status_code, foreign.text[:200])
            origin = initialize(url, f"{'127.0.0.1' if bind == '0.0.0.0' else bind}:{port}",
                                f"http://evil.example:{port}", modern)
            assert origin.status_code == 403, (bind, modern, origin.status_code, origin.text[:200])
        for host in ([f"{bind}:{port}"] if bind != "0.0.0.0" else []) + [
                f"mcp.internal:{port}", f"127.0.0.1:{port}", f"localhost:{port}"]:
            allowed = initialize(url, host, f"http://{host}")
            assert allowed.status_code == 200, (host, allowed.status_code, allowed.text[:200])
        assert initialize(url, f"mcp.internal:{port}").status_code == 200  # no Origin: not a browser


def test_an_allowed_host_with_a_port_allows_that_port_only(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    with serving_http(tmp_path, project, "--allowed-host", "proxy.internal:443", host="127.0.0.2") as server:
        url = f"http://127.0.0.2:{server.port}/mcp"
        assert initialize(url, "proxy.internal:443", "https://proxy.internal").status_code == 200
        assert initialize(url, "proxy.internal:8080").status_code == 421
