"""`serve --http` runs commands only for a client that holds its bearer token.

The attack: any local process (another user, a container on the host network) connects to
the HTTP server, starts the built-in `ci:retry-tests` with `command` of its choosing and
asks for the next step: the server runs that command.  Now every request needs the token
(`--auth-token-file`, `AROMCP_HTTP_TOKEN`, or one the server makes on loopback and keeps
in a 0600 file); without it, or with a wrong one, the answer is 401 with
`WWW-Authenticate` and nothing runs.  A server bound beyond loopback without a token does
not start.  An operator with an identity provider plugs in its own verifier.

Real `serve --http` subprocesses, real HTTP (httpx2 and `mcp.Client`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest
from srv_helpers import (
    PYTHON,
    TOKEN,
    free_port,
    http_client,
    make_project,
    ok,
    serve_args,
    server_env,
    serving_http,
)

pytestmark = pytest.mark.slow
JSON_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                         "clientInfo": {"name": "attacker", "version": "1"}}}


def attack_args(marker: Path) -> dict[str, Any]:
    return {"workflow": "ci:retry-tests", "inputs": {"command": f"touch {marker}", "max_attempts": 1}}


async def try_attack(url: str, marker: Path, token: str | None, mode: str) -> None:
    """What an attacker does: start ci:retry-tests with its command, then ask for the next step."""
    async with http_client(url, token=token, mode=mode) as client:
        started = await client.call_tool("workflow_start", attack_args(marker))
        if not started.is_error:
            await client.call_tool("workflow_get_next_step", {"workflow_id": started.structured_content["workflow_id"]})


def post(url: str, body: dict[str, Any], token: str | None = None, **headers: str) -> httpx2.Response:
    sent = JSON_HEADERS | headers | ({"Authorization": f"Bearer {token}"} if token is not None else {})
    return httpx2.post(url, json=body, headers=sent, timeout=30)


def assert_refused(response: httpx2.Response) -> None:
    assert response.status_code == 401, (response.status_code, response.text[:300])
    assert response.headers["www-authenticate"].startswith("Bearer "), response.headers
    assert "mcp-session-id" not in response.headers


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_client_without_the_token_runs_nothing(tmp_path: Path, mode: str) -> None:
    project = make_project(tmp_path / "project")
    marker = tmp_path / "pwned"
    with serving_http(tmp_path, project) as server:
        for token in (None, "wrong-token", TOKEN[:-1], TOKEN + "x"):
            with pytest.raises(Exception):  # noqa: B017 - any failure to connect will do; what matters is below
                await try_attack(server.url, marker, token, mode)
            assert_refused(post(server.url, INITIALIZE, token))
        modern = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                  "params": {"name": "workflow_start", "arguments": attack_args(marker)}}
        assert_refused(post(server.url, modern, None, **{"MCP-Protocol-Version": "2026-07-28"}))
        assert not marker.exists(), "a client without the token ran a command"
        async with http_client(server.url, TOKEN, mode=mode) as client:  # the token holder is served
            started = await ok(client, "workflow_start", {"workflow": "messages"})
            assert started["status"] == "running"


async def test_on_loopback_without_a_token_the_server_makes_one_in_a_private_file(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    with serving_http(tmp_path, project, token=None) as server:
        log = server.stderr()
        [line] = [line for line in log.splitlines() if "token" in line.lower()]
        path = Path(line.split(" is in ")[1].split()[0])
        token = path.read_text().strip()
        assert len(token) >= 32 and token not in log, "the path is printed, never the token"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, oct(path.stat().st_mode)
        assert path.is_relative_to(tmp_path / "home"), path
        assert_refused(post(server.url, INITIALIZE))
        async with http_client(server.url, token) as client:
            assert len((await client.list_tools()).tools) == 20


async def test_token_from_a_file(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    token_file = tmp_path / "token"
    token_file.write_text("from-a-file-0123456789abcdef\n")
    token_file.chmod(0o600)
    with serving_http(tmp_path, project, "--auth-token-file", str(token_file), token=None) as server:
        assert_refused(post(server.url, INITIALIZE, TOKEN))
        async with http_client(server.url, "from-a-file-0123456789abcdef") as client:
            assert len((await client.list_tools()).tools) == 20


def serve_briefly(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`serve --http ARGS` that must refuse to start (a server that starts fails the timeout)."""
    project = make_project(tmp_path / "project")
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    store = tmp_path / "store.sqlite3"
    return subprocess.run([PYTHON, *serve_args(project, store, "--http", "--port", str(free_port()), *args)],
                          cwd=project, env=server_env(home, store, **env), capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


def test_beyond_loopback_without_a_token_it_refuses_to_start(tmp_path: Path) -> None:
    done = serve_briefly(tmp_path, "--host", "0.0.0.0")
    assert done.returncode == 2, done.stderr
    assert "--auth-token-file" in done.stderr and "AROMCP_HTTP_TOKEN" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_no_auth_is_for_loopback_only(tmp_path: Path) -> None:
    done = serve_briefly(tmp_path, "--host", "0.0.0.0", "--no-auth", AROMCP_HTTP_TOKEN=TOKEN)
    assert done.returncode == 2, done.stderr
    assert "--no-auth" in done.stderr and "loopback" in done.stderr


def test_a_token_file_that_is_missing_or_empty_is_refused(tmp_path: Path) -> None:
    missing = serve_briefly(tmp_path, "--auth-token-file", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "nope" in missing.stderr and "Traceback" not in missing.stderr
    (tmp_path / "empty").write_text("\n")
    empty = serve_briefly(tmp_path, "--auth-token-file", str(tmp_path / "empty"))
    assert empty.returncode == 2 and "empty" in empty.stderr


async def test_no_auth_on_loopback_serves_without_a_token(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    with serving_http(tmp_path, project, "--no-auth", token=None) as server:
        async with http_client(server.url, None) as client:
            assert len((await client.list_tools()).tools) == 20
        assert "--no-auth" in server.stderr() or "without authentication" in server.stderr()


IDP_VERIFIER = '''
"""A stand-in for an identity provider's verifier: HMAC-signed JSON claims."""
import base64, hashlib, hmac, json
from mcp.server.auth.provider import AccessToken

KEY = b"the-idp-key"

class IdpVerifier:
    async def verify_token(self, token):
        body, _, signature = token.rpartition(".")
        expected = hmac.new(KEY, body.encode(), hashlib.sha256).hexdigest()
        if not body or not hmac.compare_digest(signature, expected):
            return None
        claims = json.loads(base64.urlsafe_b64decode(body))
        return AccessToken(token=token, client_id=claims["sub"], subject=claims["sub"], scopes=claims["scopes"],
                           expires_at=claims["exp"], resource=claims["aud"])

def make():
    return IdpVerifier()
'''


def idp_token(audience: str, scopes: list[str], expires_in: float = 600, sub: str = "alice") -> str:
    claims = {"sub": sub, "aud": audience, "scopes": scopes, "exp": int(time.time() + expires_in)}
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode()
    return f"{body}.{hmac.new(b'the-idp-key', body.encode(), hashlib.sha256).hexdigest()}"


async def test_an_identity_providers_verifier_replaces_the_token(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "idp_verifier.py").write_text(IDP_VERIFIER)
    project = make_project(tmp_path / "project")
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    args = ("--token-verifier", "idp_verifier:make", "--auth-issuer-url", "https://idp.example.com",
            "--auth-resource-url", resource, "--auth-scope", "workflows")
    env = {"PYTHONPATH": f"{plugins}:{Path(__file__).resolve().parents[2]}"}
    with serving_http(tmp_path, project, *args, token=None, port=port, **env) as server:
        url = server.url
        good = idp_token(url, ["workflows"])
        async with http_client(url, good) as client:
            assert len((await client.list_tools()).tools) == 20
        for bad in (idp_token("http://elsewhere.example/mcp", ["workflows"]), idp_token(url, ["workflows"], -60),
                    TOKEN, good[:-2] + "00"):
            assert_refused(post(url, INITIALIZE, bad))
        assert post(url, INITIALIZE, idp_token(url, ["read"])).status_code == 403  # lacks the required scope
        challenge = post(url, INITIALIZE).headers["www-authenticate"]
        assert "resource_metadata=" in challenge, challenge
        metadata = httpx2.get(challenge.split('resource_metadata="')[1].rstrip('"'), timeout=30).json()
        assert metadata["authorization_servers"] == ["https://idp.example.com/"] or \
            metadata["authorization_servers"] == ["https://idp.example.com"]


def test_a_verifier_and_a_static_token_together_are_refused(tmp_path: Path) -> None:
    done = serve_briefly(tmp_path, "--token-verifier", "json:loads", "--auth-issuer-url", "https://idp.example.com",
                         AROMCP_HTTP_TOKEN=TOKEN)
    assert done.returncode == 2 and "--token-verifier" in done.stderr and "AROMCP_HTTP_TOKEN" in done.stderr, \
        done.stderr
