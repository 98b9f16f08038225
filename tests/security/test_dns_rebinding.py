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

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2
import pytest
from srv_helpers import PYTHON, TOKEN, free_port, make_project, server_env, serving_http, stop, wait_for_port

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


# -- the web view: the same rule as /mcp ----------------------------------------------------------
# The web view's reads need no token, so before the one guard a page that rebound its name to
# a server bound to 0.0.0.0 read every instance through /ui (the web view checked Host only
# on a loopback bind), while `--allowed-host` names were refused there on a loopback bind.
UI_PATHS = ("/ui/", "/ui/api/instances", "/ui/api/config", "/ui/static/app.js")


def get(url: str, host: str, origin: str | None = None) -> httpx2.Response:
    headers = {"Host": host, "Authorization": f"Bearer {TOKEN}"} | ({"Origin": origin} if origin is not None else {})
    return httpx2.get(url, headers=headers, timeout=30)


def assert_refused(response: httpx2.Response, status: int, named: str) -> None:
    """Refused with the status, a text naming what was refused and the flag that allows it."""
    assert response.status_code == status, (named, response.status_code, response.text[:300])
    assert named in response.text and "--allowed-host" in response.text, response.text


def test_the_web_view_beside_mcp_refuses_a_foreign_host_and_origin(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    with serving_http(tmp_path, project, "--ui", "--allowed-host", "mcp.internal", host="0.0.0.0") as server:
        port, base = server.port, f"http://127.0.0.1:{server.port}"
        evil, evil_origin = f"evil.example:{port}", f"http://evil.example:{port}"
        for path in UI_PATHS:
            assert_refused(get(base + path, evil, evil_origin), 421, f"'{evil}'")
            assert_refused(get(base + path, f"127.0.0.1:{port}", evil_origin), 403, f"'{evil_origin}'")
            for host in (f"mcp.internal:{port}", f"127.0.0.1:{port}", f"localhost:{port}"):
                allowed = get(base + path, host, f"http://{host}")
                assert allowed.status_code == 200, (path, host, allowed.status_code, allowed.text[:200])
        assert_refused(initialize(f"{base}/mcp", evil, evil_origin), 421, f"'{evil}'")  # one wording for both
        assert_refused(initialize(f"{base}/mcp", f"localhost:{port}", evil_origin), 403, f"'{evil_origin}'")


def test_an_allowed_host_reaches_the_web_view_on_a_loopback_bind(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    with serving_http(tmp_path, project, "--ui", "--allowed-host", "mcp.internal", host="127.0.0.2") as server:
        base = f"http://127.0.0.2:{server.port}"
        for path in UI_PATHS:
            allowed = get(base + path, f"mcp.internal:{server.port}")
            assert allowed.status_code == 200, (path, allowed.status_code, allowed.text[:200])
            assert_refused(get(base + path, f"evil.example:{server.port}"), 421, "'evil.example")


@contextmanager
def serving_ui(tmp_path: Path, host: str, *more: str) -> Iterator[int]:
    """`aromcp-workflows ui` (the web view alone) on a free port of `host`, taking the test
    token (`--auth-token-file`: needed beyond loopback); stopped on leaving."""
    project, port = make_project(tmp_path / "project"), free_port("127.0.0.1")
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    store = tmp_path / "store.sqlite3"
    token_file = tmp_path / "ui.token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    proc = subprocess.Popen([PYTHON, "-m", "aromcp_workflows", "--project-dir", str(project), "ui", "--store",
                             str(store), "--host", host, "--port", str(port), "--auth-token-file", str(token_file),
                             *more], cwd=project,
                            env=server_env(home, store), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc)
        yield port
    finally:
        stop(proc)


@pytest.mark.parametrize("bind", ["127.0.0.1", "0.0.0.0"])
def test_the_web_view_alone_keeps_the_same_rule(tmp_path: Path, bind: str) -> None:
    with serving_ui(tmp_path, bind, "--allowed-host", "ui.internal") as port:
        base = f"http://127.0.0.1:{port}"
        for path in ("/", "/api/instances", "/static/app.js"):
            assert_refused(get(base + path, f"evil.example:{port}"), 421, f"'evil.example:{port}'")
            assert_refused(get(base + path, f"127.0.0.1:{port}", "http://evil.example"), 403, "'http://evil.example'")
            for host in (f"ui.internal:{port}", f"127.0.0.1:{port}", f"localhost:{port}"):
                allowed = get(base + path, host, f"http://{host}")
                assert allowed.status_code == 200, (path, host, allowed.status_code, allowed.text[:200])


def test_a_bad_allowed_host_stops_the_web_view_alone_before_it_listens(tmp_path: Path) -> None:
    project, store = make_project(tmp_path / "project"), tmp_path / "store.sqlite3"
    (tmp_path / "home").mkdir()
    done = subprocess.run([PYTHON, "-m", "aromcp_workflows", "--project-dir", str(project), "ui", "--store", str(store),
                           "--port", "0", "--allowed-host", "http://ui.internal"], cwd=project, capture_output=True,
                          text=True, env=server_env(tmp_path / "home", store), timeout=60)
    assert done.returncode == 2 and done.stdout == "", (done.stdout, done.stderr)
    assert done.stderr == ("error: --allowed-host 'http://ui.internal' is not a host name or address with an optional "
                           ":PORT (e.g. mcp.internal, mcp.internal:8443, 10.0.0.5, [fd00::5])\n")
