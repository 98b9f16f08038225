"""A hostile local user or web page against the credential of every HTTP surface
(`serve --http`, `serve --http --ui`, `aromcp-workflows ui`): 105 probes beyond issue 31's.

Each asserts what docs/security.md ("HTTP clients") and docs/ui.md promise, against real
server processes, with raw sockets where a client library would tidy the request: the
one-time login URL, cookies and tokens where they do not belong, bearer spellings, path
tricks, other methods, cross-site requests, slow and early refusals, the stream caps, and
secrets in answers and logs.  Six of them failed when first written, each fixed at its root:
the per-client caps keyed on the header's spelling (`bearer T` and `Bearer T` were two
clients: `http.client_key` keys on the token now), a logout a page on another port could
forge (it takes the anti-forgery token and Origin now, as actions do), an event stream that
outlived its session, and the server's own token and login codes unknown to the log masking.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from srv_helpers import PYTHON, TOKEN, http_client, make_project, server_env, serving_http
from ui_helpers import login_file, running_ui, start_instance

pytestmark = pytest.mark.slow
BEARER = {"Authorization": f"Bearer {TOKEN}"}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "p", "version": "1"}}}
INIT_BYTES = json.dumps(INIT).encode()
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
OTHER_PORT_ORIGIN = "http://127.0.0.1:9"  # a page on another port of this host: same *site*, other origin


# -- helpers -----------------------------------------------------------------------------------
def read_until(sock: socket.socket, within: float, stop_at_head: bool = False) -> bytes:
    sock.settimeout(0.2)
    data, deadline = b"", time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            break
        if not chunk:
            break
        data += chunk
        if stop_at_head and b"\r\n\r\n" in data:
            break
    return data


def raw(port: int, request: bytes, within: float = 4.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        return read_until(sock, within)


def req(method: str, target: str, port: int, headers: dict[str, str] | None = None, body: bytes = b"") -> bytes:
    lines = [f"{method} {target} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    if body or method == "POST":
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def status_of(answer: bytes) -> int:
    match = re.match(rb"HTTP/1\.[01] (\d{3})", answer)
    return int(match[1]) if match else 0


def cookie_pair(response: httpx2.Response) -> tuple[str, str]:
    set_cookie = response.headers["set-cookie"]
    name, _, rest = set_cookie.partition("=")
    return name, rest.split(";", 1)[0]


def login(url: str) -> tuple[httpx2.Response, dict[str, str]]:
    answer = httpx2.get(url, follow_redirects=False, timeout=30)
    assert answer.status_code == 303, (answer.status_code, answer.text)
    name, value = cookie_pair(answer)
    return answer, {name: value}


class Serve:
    """`serve --http --ui --ui-actions` at DEBUG, shared by the module's tests."""

    def __init__(self, server: Any, project: Path, wid: str):
        self.server, self.project, self.wid = server, project, wid
        self.port = server.port
        self.base = f"http://127.0.0.1:{server.port}"
        self.login_path = login_file(server.stderr())
        self.seen_secrets: set[str] = {TOKEN}

    def login_url(self) -> str:
        url = self.login_path.read_text().strip()
        self.seen_secrets.add(url.rsplit("=", 1)[-1])
        return url

    def session(self) -> dict[str, str]:
        _, cookies = login(self.login_url())
        self.seen_secrets.update(cookies.values())
        return cookies

    def csrf(self, cookies: dict[str, str]) -> str:
        token = httpx2.get(f"{self.base}/ui/api/config", cookies=cookies, timeout=30).json()["csrf"]
        self.seen_secrets.add(token)
        return token


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    tmp = tmp_path_factory.mktemp("serve")
    project = make_project(tmp / "project")
    with serving_http(tmp, project, "--ui", "--ui-actions", AROMCP_LOG_LEVEL="DEBUG",
                      AROMCP_UI_STREAMS_PER_CLIENT="2", AROMCP_UI_MAX_STREAMS="6") as server:
        wid = start_instance(tmp, project)
        yield Serve(server, project, wid)


def status(url: str, **kwargs: Any) -> int:
    return httpx2.get(url, timeout=30, **kwargs).status_code


# -- the one-time login URL ---------------------------------------------------------------------
def test_login_url_reused_after_the_cookie_was_issued_is_refused_and_issues_nothing(srv: Serve) -> None:
    url = srv.login_url()
    first, cookies = login(url)
    again = httpx2.get(url, follow_redirects=False, timeout=30)
    assert again.status_code == 401 and "set-cookie" not in again.headers, (again.status_code, again.headers)
    assert status(f"{srv.base}/ui/api/instances", cookies=cookies) == 200


def test_login_url_used_twice_at_once_gives_one_session(srv: Serve) -> None:
    url = srv.login_url()
    results: list[int] = []
    barrier = threading.Barrier(6)

    def use() -> None:
        barrier.wait()
        results.append(httpx2.get(url, follow_redirects=False, timeout=30).status_code)

    threads = [threading.Thread(target=use) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(results) == [303, 401, 401, 401, 401, 401], results


@pytest.mark.parametrize("variant", ["prefix", "suffix", "upper", "empty", "spaces", "other-name"])
def test_a_wrong_code_neither_logs_in_nor_uses_up_the_current_one(srv: Serve, variant: str) -> None:
    url = srv.login_url()
    base, code = url.rsplit("=", 1)
    wrong = {"prefix": code[:-1], "suffix": code + "A", "upper": code.swapcase(), "empty": "",
             "spaces": f"%20{code}%20", "other-name": code}[variant]
    target = f"{base}={wrong}" if variant != "other-name" else f"{base.removesuffix('code')}Code={wrong}"
    answer = httpx2.get(target, follow_redirects=False, timeout=30)
    assert answer.status_code == 401 and "set-cookie" not in answer.headers, (variant, answer.status_code)
    login(url)  # still the current one


def test_login_code_is_not_accepted_as_a_bearer_token_nor_as_a_cookie(srv: Serve) -> None:
    code = srv.login_url().rsplit("=", 1)[-1]
    api = f"{srv.base}/ui/api/instances"
    assert status(api, headers={"Authorization": f"Bearer {code}"}) == 401
    assert status(api, cookies={f"aromcp_ui_{srv.port}": code}) == 401
    assert status(f"{api}?code={code}") == 401


# -- the cookie and the token where they do not belong -------------------------------------------
def test_the_ui_cookie_does_not_open_mcp(srv: Serve) -> None:
    cookies = srv.session()
    answer = httpx2.post(f"{srv.base}/mcp", json=INIT, headers=MCP_HEADERS, cookies=cookies, timeout=30)
    assert answer.status_code == 401, (answer.status_code, answer.text[:200])


def test_the_cookie_of_another_port_name_is_not_accepted(srv: Serve) -> None:
    cookies = srv.session()
    (value,) = cookies.values()
    assert status(f"{srv.base}/ui/api/instances", cookies={"aromcp_ui_1": value}) == 401
    assert status(f"{srv.base}/ui/api/instances", cookies={"aromcp_ui_0": value}) == 401


def test_a_forged_or_tampered_cookie_is_refused(srv: Serve) -> None:
    cookies = srv.session()
    ((name, value),) = cookies.items()
    for forged in (value[:-1], value + "x", value.upper(), "", " " + value, f'"{value}"'):
        assert status(f"{srv.base}/ui/api/instances", cookies={name: forged}) in (401,), forged


@pytest.mark.parametrize("header", [
    f"Bearer {TOKEN[:-1]}", f"Bearer {TOKEN}x", f"Bearer {TOKEN[:16]}", f"Basic {TOKEN}", f"Token {TOKEN}",
    f"{TOKEN}", "Bearer", "Bearer ", f"Bearer\t{TOKEN}", f"Bearer {TOKEN.upper()}", f"Bearer {TOKEN} extra",
])
def test_bearer_variants_that_are_not_the_token_are_refused_everywhere(srv: Serve, header: str) -> None:
    for method, path in (("POST", "/mcp"), ("GET", "/ui/api/instances"), ("GET", f"/ui/api/instances/{srv.wid}")):
        answer = raw(srv.port, req(method, path, srv.port, {"Authorization": header, **MCP_HEADERS},
                                   INIT_BYTES if method == "POST" else b""))
        assert status_of(answer) == 401, (header, path, answer[:300])


@pytest.mark.parametrize("header", [f"bearer {TOKEN}", f"BEARER {TOKEN}", f"Bearer {TOKEN}   "])
def test_scheme_case_and_trailing_space_are_one_consistent_answer(srv: Serve, header: str) -> None:
    """RFC 7235: the scheme is case-insensitive; what matters is that /mcp and /ui agree and nothing crashes."""
    got = []
    for method, path in (("POST", "/mcp"), ("GET", "/ui/api/instances")):
        answer = raw(srv.port, req(method, path, srv.port, {"Authorization": header, **MCP_HEADERS},
                                   INIT_BYTES if method == "POST" else b""))
        got.append(status_of(answer))
    assert got[0] in (200, 401) and got[1] == got[0], got


def test_two_authorization_headers_wrong_then_right(srv: Serve) -> None:
    for first, second in (("Bearer wrong-token-0123456789", f"Bearer {TOKEN}"),
                          (f"Bearer {TOKEN}", "Bearer wrong-token-0123456789")):
        text = (f"GET /ui/api/instances HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\nConnection: close\r\n"
                f"Authorization: {first}\r\nAuthorization: {second}\r\n\r\n").encode()
        answer = raw(srv.port, text)
        assert status_of(answer) in (200, 400, 401), answer[:300]
        body = answer.split(b"\r\n\r\n", 1)[-1]
        mcp = raw(srv.port, (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\nConnection: close\r\n"
                             f"Authorization: {first}\r\nAuthorization: {second}\r\nContent-Type: application/json\r\n"
                             f"Accept: application/json, text/event-stream\r\nContent-Length: {len(INIT_BYTES)}\r\n\r\n"
                             ).encode() + INIT_BYTES)
        assert status_of(mcp) in (200, 400, 401) and b"Traceback" not in body, mcp[:300]


def test_token_in_query_or_cookie_is_not_a_credential(srv: Serve) -> None:
    api = f"{srv.base}/ui/api/instances"
    for url in (f"{api}?access_token={TOKEN}", f"{api}?token={TOKEN}", f"{api}?authorization=Bearer%20{TOKEN}"):
        assert status(url) == 401, url
    assert status(api, cookies={"Authorization": f"Bearer {TOKEN}"}) == 401
    mcp = httpx2.post(f"{srv.base}/mcp?access_token={TOKEN}", json=INIT, headers=MCP_HEADERS, timeout=30)
    assert mcp.status_code == 401


# -- path tricks (raw: no client normalisation) --------------------------------------------------
PRIVATE_TARGETS = [
    ("POST", "/ui/../mcp"), ("POST", "/ui/instances/../../mcp"), ("POST", "/ui/instances/..%2F..%2Fmcp"),
    ("POST", "//mcp"), ("POST", "/mcp/"), ("POST", "/MCP"), ("POST", "/mcp%2F"), ("POST", "/%6dcp"),
    ("POST", "/.well-known/../mcp"), ("POST", "/.well-known/%2e%2e/mcp"), ("POST", "/mcp?x=/ui/"),
    ("POST", "/mcp;/ui/"), ("POST", "/mcp#/ui/"), ("POST", "http://127.0.0.1/mcp"), ("POST", "/ui/login/../../mcp"),
    ("GET", "/ui//api/instances"), ("GET", "/ui/api//instances"), ("GET", "/ui/api/instances/"),
    ("GET", "/ui/%61pi/instances"), ("GET", "/ui/api%2Finstances"), ("GET", "/ui/static/../api/instances"),
    ("GET", "/ui/static/..%2F..%2Fapi%2Finstances"), ("GET", "/ui/instances/../api/instances"),
    ("GET", "/ui/instances/%2e%2e/api/instances"), ("GET", "/ui/instances/x/../../api/instances"),
    ("GET", "/UI/api/instances"), ("GET", "/ui/api/instances;x"), ("GET", "/ui/api/instances%00"),
    ("GET", "/ui/./api/instances"), ("GET", "/ui/api/./instances"), ("GET", "/ui/login/../api/instances"),
    ("GET", "/ui/api/login/../instances"), ("GET", "/ui/instances/{wid}/../../api/instances/{wid}"),
    ("GET", "/ui/api/instances/{wid}/events/"), ("GET", "/ui/static/%2e%2e/%2e%2e/api/config"),
    ("GET", "/ui/api/config?/static/"), ("GET", "http://127.0.0.1/ui/api/instances"),
    ("POST", "/ui/api/login/../instances/{wid}/cancel"), ("POST", "/ui/api/login/..%2Finstances%2F{wid}%2Fcancel"),
    ("GET", "/ui/api/instances/{wid}/state?seq=0"), ("GET", "/ui/static/../../mcp"),
]


@pytest.mark.parametrize(("method", "target"), PRIVATE_TARGETS)
def test_path_tricks_without_a_credential_read_nothing(srv: Serve, method: str, target: str) -> None:
    target = target.replace("{wid}", srv.wid)
    headers = dict(MCP_HEADERS) if method == "POST" else {}
    answer = raw(srv.port, req(method, target, srv.port, headers, INIT_BYTES if method == "POST" else b""))
    code = status_of(answer)
    body = answer.split(b"\r\n\r\n", 1)[-1]
    assert code != 0, answer
    assert srv.wid.encode() not in body, (code, answer[:400])
    assert b'"rows"' not in body and b'"result"' not in body and b'"csrf"' not in body, (code, answer[:400])
    assert not 200 <= code < 300 or b"<!doctype html" in body.lower() or b"aromcp" in body.lower(), (code,
                                                                                                   answer[:400])
    # the instance was not cancelled by a POST trick
    state = httpx2.get(f"{srv.base}/ui/api/instances/{srv.wid}", headers=BEARER, timeout=30).json()
    assert state["status"] != "cancelled", (target, state["status"])


@pytest.mark.parametrize("method", ["HEAD", "OPTIONS", "PUT", "DELETE", "PATCH", "TRACE", "PROPFIND", "get"])
def test_other_methods_without_a_credential_get_401(srv: Serve, method: str) -> None:
    for path in ("/ui/api/instances", f"/ui/api/instances/{srv.wid}/events", "/mcp", "/ui/api/config"):
        answer = raw(srv.port, req(method, path, srv.port))
        assert status_of(answer) in (400, 401), (method, path, answer[:300])
        assert srv.wid.encode() not in answer.split(b"\r\n\r\n", 1)[-1]


# -- cross-site ----------------------------------------------------------------------------------
def test_no_cors_headers_on_api_events_or_mcp(srv: Serve) -> None:
    cookies = srv.session()
    origin = {"Origin": OTHER_PORT_ORIGIN}
    responses = [
        httpx2.get(f"{srv.base}/ui/api/instances", cookies=cookies, headers=origin, timeout=30),
        httpx2.get(f"{srv.base}/ui/api/config", cookies=cookies, headers=origin, timeout=30),
        httpx2.request("OPTIONS", f"{srv.base}/ui/api/instances", cookies=cookies, timeout=30,
                       headers=origin | {"Access-Control-Request-Method": "POST",
                                         "Access-Control-Request-Headers": "x-aromcp-token"}),
        httpx2.request("OPTIONS", f"{srv.base}/mcp", headers=origin | BEARER | {
            "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"}, timeout=30),
        httpx2.post(f"{srv.base}/mcp", json=INIT, headers=MCP_HEADERS | origin | BEARER, timeout=30),
    ]
    with httpx2.Client(timeout=30, cookies=cookies) as client, client.stream(
            "GET", f"{srv.base}/ui/api/instances/{srv.wid}/events", headers=origin) as stream:
        responses.append(stream)
        for response in responses:
            lowered = {k.lower() for k in response.headers}
            assert not any(k.startswith("access-control-") for k in lowered), (response.url, response.headers)


def test_csrf_action_from_a_page_on_another_port(srv: Serve) -> None:
    """Same site (SameSite=Strict lets the cookie through from 127.0.0.1:OTHER), other origin."""
    cookies = srv.session()
    csrf = srv.csrf(cookies)
    other = srv.session()
    other_csrf = srv.csrf(other)
    cancel = f"{srv.base}/ui/api/instances/{srv.wid}/cancel"
    attempts = {
        "foreign origin, right token": {"Origin": OTHER_PORT_ORIGIN, "X-Aromcp-Token": csrf},
        "no origin, referer only": {"Referer": f"{srv.base}/ui/", "X-Aromcp-Token": csrf},
        "origin null": {"Origin": "null", "X-Aromcp-Token": csrf},
        "origin with path": {"Origin": f"{srv.base}/ui", "X-Aromcp-Token": csrf},
        "origin localhost name": {"Origin": f"http://localhost:{srv.port}", "X-Aromcp-Token": csrf},
        "another session's token": {"Origin": srv.base, "X-Aromcp-Token": other_csrf},
        "simple form, no header": {"Origin": srv.base, "Content-Type": "application/x-www-form-urlencoded"},
        "token in lowercase header value": {"Origin": srv.base, "X-Aromcp-Token": csrf.swapcase()},
        "https origin": {"Origin": f"https://127.0.0.1:{srv.port}", "X-Aromcp-Token": csrf},
    }
    answers = {}
    for what, headers in attempts.items():
        body = f"x-aromcp-token={csrf}".encode() if "form" in what else b""
        answer = httpx2.post(cancel, cookies=cookies, headers=headers, content=body, timeout=30)
        answers[what] = answer.status_code
    assert all(code == 403 for code in answers.values()), answers
    answer = httpx2.post(f"{srv.base}/ui/api/instances/{srv.wid}/answer", cookies=cookies, timeout=30,
                         headers={"Origin": OTHER_PORT_ORIGIN, "Content-Type": "text/plain"},
                         content=b'{"value": "x"}')
    assert answer.status_code == 403
    state = httpx2.get(f"{srv.base}/ui/api/instances/{srv.wid}", headers=BEARER, timeout=30).json()
    assert state["status"] != "cancelled"


def test_no_get_changes_state(srv: Serve) -> None:
    cookies = srv.session()
    for action in ("cancel", "retry", "fork", "answer"):
        assert status(f"{srv.base}/ui/api/instances/{srv.wid}/{action}", cookies=cookies) in (404, 405)
    assert status(f"{srv.base}/ui/api/logout", cookies=cookies) in (404, 405)
    assert status(f"{srv.base}/ui/api/instances", cookies=cookies) == 200  # the session survived the GETs
    state = httpx2.get(f"{srv.base}/ui/api/instances/{srv.wid}", headers=BEARER, timeout=30).json()
    assert state["status"] != "cancelled"


def test_logout_cannot_be_forged_by_a_page_on_another_port(srv: Serve) -> None:
    """POST /api/logout is a state change: a same-site page (another port of 127.0.0.1, whose
    requests carry the SameSite=Strict cookie) should not be able to end the session."""
    cookies = srv.session()
    forged = httpx2.post(f"{srv.base}/ui/api/logout", cookies=cookies, timeout=30,
                         headers={"Origin": OTHER_PORT_ORIGIN, "Content-Type": "text/plain"})
    still = status(f"{srv.base}/ui/api/instances", cookies=cookies)
    assert still == 200, f"a cross-origin simple POST ended the session: logout answered {forged.status_code}"


def test_api_login_does_not_trade_a_cookie_or_nothing_for_a_session(srv: Serve) -> None:
    cookies = srv.session()
    for kwargs in ({}, {"cookies": cookies}, {"headers": {"Origin": OTHER_PORT_ORIGIN}}):
        answer = httpx2.post(f"{srv.base}/ui/api/login", timeout=30, **kwargs)
        assert answer.status_code == 401 and "set-cookie" not in answer.headers, (kwargs, answer.status_code)


def test_bearer_cannot_be_used_for_a_state_change_from_a_cookie_only_request(srv: Serve) -> None:
    """A wrong Authorization next to a good cookie: refused (the header wins)."""
    cookies = srv.session()
    answer = httpx2.get(f"{srv.base}/ui/api/instances", cookies=cookies, timeout=30,
                        headers={"Authorization": "Bearer nope-nope-nope-nope"})
    assert answer.status_code == 401


# -- logout and open streams ---------------------------------------------------------------------
def test_logout_ends_the_session_and_its_open_event_stream(srv: Serve) -> None:
    cookies = srv.session()
    csrf = srv.csrf(cookies)
    events = f"{srv.base}/ui/api/instances/{srv.wid}/events"
    ended = threading.Event()
    got: list[str] = []

    def follow() -> None:
        try:
            with httpx2.Client(timeout=httpx2.Timeout(30, read=15), cookies=cookies) as client, \
                    client.stream("GET", events) as stream:
                got.append(str(stream.status_code))
                for chunk in stream.iter_text():
                    got.append(chunk)
        except Exception as exc:  # read timeout: the stream stayed open
            got.append(f"error {type(exc).__name__}")
        ended.set()

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    time.sleep(1.0)
    assert got and got[0] == "200", got
    out = httpx2.post(f"{srv.base}/ui/api/logout", cookies=cookies, timeout=30,
                      headers={"Origin": srv.base, "X-Aromcp-Token": csrf})
    assert out.status_code == 200
    assert status(f"{srv.base}/ui/api/instances", cookies=cookies) == 401
    assert status(events, cookies=cookies) == 401
    closed_in_time = ended.wait(8)
    assert closed_in_time, f"the event stream of a logged-out session is still open 8 s after logout: {got[:3]}"


@contextlib.contextmanager
def held_streams(url: str, clients: list[Any]) -> Iterator[list[int]]:
    """One event stream per entry of `clients` (a client may come more than once), all held
    open at once: their status codes; every stream and client closed after."""
    with contextlib.ExitStack() as stack:
        for client in dict.fromkeys(clients):
            stack.enter_context(client)
        yield [stack.enter_context(client.stream("GET", url)).status_code for client in clients]


def bearer_clients(*schemes: str) -> list[Any]:
    return [httpx2.Client(timeout=30, headers={"Authorization": f"{scheme} {TOKEN}"}) for scheme in schemes]


def test_session_stream_cap_per_client(srv: Serve) -> None:
    """per client 2, in all 6 (the fixture's settings)."""
    client = httpx2.Client(timeout=30, cookies=srv.session())
    with held_streams(f"{srv.base}/ui/api/instances/{srv.wid}/events", [client] * 4) as codes:
        assert codes == [200, 200, 429, 429], codes


def test_bearer_stream_cap_not_bypassed_by_scheme_case(srv: Serve) -> None:
    """One client = its token and address: writing `bearer`/`BEARER` is the same token."""
    clients = bearer_clients("Bearer", "bearer", "BEARER", "BeArEr")
    with held_streams(f"{srv.base}/ui/api/instances/{srv.wid}/events", clients) as codes:
        assert codes.count(200) <= 2, f"per-client cap 2, one token and address, streams answered {codes}"


def test_stream_cap_not_bypassed_by_minting_sessions_with_the_bearer(srv: Serve) -> None:
    """Informational: a token holder may mint sessions; the total cap must hold regardless."""
    clients = []
    for _ in range(8):
        minted = httpx2.post(f"{srv.base}/ui/api/login", headers=BEARER, timeout=30)
        assert minted.status_code == 200
        name, value = cookie_pair(minted)
        clients.append(httpx2.Client(timeout=30, cookies={name: value}))
    with held_streams(f"{srv.base}/ui/api/instances/{srv.wid}/events", clients) as codes:
        assert codes.count(200) <= 6 and 503 in codes, codes


# -- slow / early refusals -------------------------------------------------------------------------
def test_expect_100_continue_without_a_token_gets_401_and_no_continue(srv: Serve) -> None:
    head = (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\nContent-Type: application/json\r\n"
            f"Expect: 100-continue\r\nContent-Length: {1024 * 1024}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
        sock.sendall(head)
        started = time.monotonic()
        answer = read_until(sock, 3, stop_at_head=True)
        took = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 401"), answer[:300]
    assert took < 2, took


def test_chunked_body_without_a_token_gets_401_at_once(srv: Serve) -> None:
    for path in ("/mcp", "/ui/api/instances", f"/ui/api/instances/{srv.wid}/cancel", "/ui/api/login"):
        head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\nContent-Type: application/json\r\n"
                "Transfer-Encoding: chunked\r\n\r\n").encode()
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
            sock.sendall(head + b"10\r\n{\"jsonrpc\": \"2.0\r\n")
            started = time.monotonic()
            answer = read_until(sock, 3)
            took = time.monotonic() - started
        assert status_of(answer) in (401, 411), (path, answer[:300])
        assert took < 2.5, (path, took)


def test_public_login_with_a_large_declared_body_is_refused_at_once(srv: Serve) -> None:
    head = (f"POST /ui/api/login HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {64 * 1024}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
        sock.sendall(head)
        answer = read_until(sock, 3, stop_at_head=True)
    assert status_of(answer) == 413, answer[:300]


def test_a_foreign_host_with_a_huge_body_is_answered_at_once_and_closed(srv: Serve) -> None:
    head = (f"POST /mcp HTTP/1.1\r\nHost: evil.example\r\nContent-Type: application/json\r\n"
            f"Content-Length: {64 * 1024 * 1024}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
        sock.sendall(head + b"x" * 1000)
        started = time.monotonic()
        answer = read_until(sock, 3, stop_at_head=True)
        assert status_of(answer) == 421, answer[:300]
        assert time.monotonic() - started < 2
        # the connection should not be kept waiting for 64 MiB that the app never reads
        sock.settimeout(0.2)
        closed, deadline = False, time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                if sock.recv(4096) == b"":
                    closed = True
                    break
            except TimeoutError:
                continue
            except OSError:
                closed = True
                break
        assert closed, "a refused foreign-Host request's connection stayed open 15 s"


# -- secrets in logs and answers -----------------------------------------------------------------
def test_no_secret_in_the_debug_log_or_in_refusals(tmp_path: Path) -> None:
    """Normal use and refusals at DEBUG: neither answers nor the log hold the token, a login code,
    a cookie, the anti-forgery token or a workflow's secret input."""
    project = make_project(tmp_path / "project")
    secret_value = "sk-live-0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c"
    with serving_http(tmp_path, project, "--ui", "--ui-actions", AROMCP_LOG_LEVEL="DEBUG") as server:
        base = f"http://127.0.0.1:{server.port}"
        path = login_file(server.stderr())

        async def drive() -> str:
            async with http_client(f"{base}/mcp") as client:
                result = await client.call_tool("workflow_start", {"workflow": "secrets",
                                                                   "inputs": {"api_token": secret_value}})
                assert not result.is_error, result
                wid = result.structured_content["workflow_id"]
                await client.call_tool("workflow_get_next_step", {"workflow_id": wid})
                return wid

        wid = asyncio.run(drive())
        codes = [path.read_text().strip().rsplit("=", 1)[-1]]
        _, cookies = login(f"{base}/ui/login?code={codes[0]}")
        codes.append(path.read_text().strip().rsplit("=", 1)[-1])
        csrf = httpx2.get(f"{base}/ui/api/config", cookies=cookies, timeout=30).json()["csrf"]
        answers = [
            httpx2.get(f"{base}/ui/api/instances", headers={"Authorization": f"Bearer {TOKEN}x"}, timeout=30),
            httpx2.post(f"{base}/mcp", json=INIT, headers=MCP_HEADERS | {"Authorization": f"Bearer {TOKEN}x"},
                        timeout=30),
            httpx2.get(f"{base}/ui/login?code={codes[0]}", timeout=30),  # used
            httpx2.get(f"{base}/ui/login?code={codes[1]}x", timeout=30),  # wrong
            httpx2.get(f"{base}/ui/api/instances", cookies=cookies, timeout=30),
            httpx2.get(f"{base}/ui/api/instances/{wid}", cookies=cookies, timeout=30),
            httpx2.get(f"{base}/ui/api/instances/{wid}/state", cookies=cookies, timeout=30),
            httpx2.get(f"{base}/ui/api/instances/{wid}/traces", cookies=cookies, timeout=30),
            httpx2.post(f"{base}/ui/api/instances/{wid}/answer", cookies=cookies, json={"value": "x"}, timeout=30,
                        headers={"Origin": base, "X-Aromcp-Token": csrf}),
            httpx2.post(f"{base}/ui/api/instances/{wid}/cancel", cookies=cookies, timeout=30,
                        headers={"Origin": OTHER_PORT_ORIGIN, "X-Aromcp-Token": csrf}),
        ]
        for answer in answers:
            for secret in (TOKEN, secret_value, *codes, *cookies.values()):
                assert secret not in answer.text, (answer.url, answer.status_code, answer.text[:300])
        time.sleep(0.5)
        log = server.stderr()
    assert " DEBUG " in log and '"GET /ui/api/instances' in log, "the log was not at DEBUG: the probe saw nothing"
    found = {name: value for name, value in [("bearer token", TOKEN), ("anti-forgery token", csrf),
                                             ("workflow secret", secret_value), ("used login code", codes[0]),
                                             ("current login code", codes[1]),
                                             *[("cookie", v) for v in cookies.values()]] if value in log}
    assert not found, (sorted(found), [line for line in log.splitlines()
                                       if any(v in line for v in found.values())][:10])


def test_log_masking_knows_the_servers_own_token_and_login_code(srv: Serve) -> None:
    """Defence in depth (docs: the access log masks credential parameters, "the log masking then
    masks what it knows on top"): a client that puts the server's own bearer token or the current
    login code somewhere else in a URL (a parameter not named `token`/`code`, a path) should
    not see it written verbatim to the server's log."""
    code = srv.login_url().rsplit("=", 1)[-1]
    start = len(srv.server.stderr())
    httpx2.get(f"{srv.base}/ui/api/instances?q={TOKEN}&c={code}", timeout=30)
    httpx2.get(f"{srv.base}/ui/api/instances?auth={TOKEN}&password={TOKEN}&bearer={TOKEN}", timeout=30)
    httpx2.get(f"{srv.base}/ui/api/instances/{code}", headers=BEARER, timeout=30)
    time.sleep(0.4)
    lines = [line for line in srv.server.stderr()[start:].splitlines() if TOKEN in line or code in line]
    assert not lines, "\n".join(lines)


def test_answers_with_credentials_or_data_are_not_cached_nor_referred(srv: Serve) -> None:
    url = srv.login_url()
    first = httpx2.get(url, follow_redirects=False, timeout=30)
    used = httpx2.get(url, follow_redirects=False, timeout=30)
    for answer in (first, used):
        assert answer.headers.get("cache-control") == "no-store", answer.headers
        assert answer.headers.get("referrer-policy") == "no-referrer", answer.headers
    name, value = cookie_pair(first)
    cookie = first.headers["set-cookie"]
    assert "Domain" not in cookie and "Max-Age" not in cookie and "Expires" not in cookie and len(value) >= 40, cookie
    for path in ("/ui/api/instances", f"/ui/api/instances/{srv.wid}", "/ui/api/config",
                 f"/ui/api/instances/{srv.wid}/state"):
        answer = httpx2.get(srv.base + path, cookies={name: value}, timeout=30)
        assert answer.headers.get("cache-control") == "no-store", (path, answer.headers)


# -- `ui` alone ----------------------------------------------------------------------------------
@pytest.mark.parametrize("host", ["::", "[::]", "0", "::ffff:0.0.0.0", "0.0.0.0"])
def test_ui_beyond_loopback_without_a_token_file_does_not_start(tmp_path: Path, host: str) -> None:
    project, store = make_project(tmp_path / "project"), tmp_path / "store.sqlite3"
    (tmp_path / "home").mkdir()
    try:
        done = subprocess.run([PYTHON, "-m", "aromcp_workflows", "--project-dir", str(project), "ui", "--store",
                               str(store), "--host", host, "--port", "0"], cwd=project, capture_output=True, text=True,
                              env=server_env(tmp_path / "home", store, AROMCP_HTTP_TOKEN=TOKEN), timeout=20)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"ui --host {host} started without a token file: {exc.stdout!r}")
    assert done.returncode == 2, (host, done.returncode, done.stdout, done.stderr)


def test_ui_static_bearer_stream_cap_not_bypassed_by_scheme_case(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    token_file = tmp_path / "ui.token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    wid = start_instance(tmp_path, project)
    with running_ui(tmp_path, "--auth-token-file", str(token_file),
                    env={"AROMCP_UI_STREAMS_PER_CLIENT": "2", "AROMCP_UI_MAX_STREAMS": "10"}) as ui:
        clients = bearer_clients("Bearer", "Bearer", "bearer", "BEARER", "bEARER")
        with held_streams(f"{ui.base}/api/instances/{wid}/events", clients) as codes:
            assert codes.count(200) <= 2, f"per-client cap 2 for one token and address; streams answered {codes}"


def test_ui_without_token_file_refuses_any_bearer_and_login_api(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    wid = start_instance(tmp_path, project)
    with running_ui(tmp_path, "--actions", env={"AROMCP_HTTP_TOKEN": TOKEN}) as ui:
        assert status(f"{ui.base}/api/instances/{wid}", headers=BEARER) == 401
        assert httpx2.post(f"{ui.base}/api/login", headers=BEARER, timeout=30).status_code == 401
        url = login_file(ui.output).read_text().strip()
        _, cookies = login(url)
        # cookie path / for `ui` alone; still no CORS, still CSRF
        csrf = httpx2.get(f"{ui.base}/api/config", cookies=cookies, timeout=30).json()["csrf"]
        forged = httpx2.post(f"{ui.base}/api/instances/{wid}/cancel", cookies=cookies, timeout=30,
                             headers={"Origin": OTHER_PORT_ORIGIN, "X-Aromcp-Token": csrf})
        assert forged.status_code == 403
        # the printed output (a log here: not a terminal) has no code
        code = url.rsplit("=", 1)[-1]
        assert code not in ui.output and TOKEN not in ui.output


def test_ui_login_url_printed_on_terminal_is_one_time(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    wid = start_instance(tmp_path, project)
    with running_ui(tmp_path, terminal=True) as ui:
        url = next(word for word in ui.output.split() if "/login?code=" in word)
        _, cookies = login(url)
        again = httpx2.get(url, follow_redirects=False, timeout=30)
        assert again.status_code == 401 and "set-cookie" not in again.headers
        assert status(f"{ui.base}/api/instances/{wid}", cookies=cookies) == 200


def test_serve_http_no_auth_beyond_loopback_refused(tmp_path: Path) -> None:
    project, store = make_project(tmp_path / "project"), tmp_path / "store.sqlite3"
    (tmp_path / "home").mkdir()
    for host in ("::", "0.0.0.0"):
        try:
            done = subprocess.run([PYTHON, "-m", "aromcp_workflows", "--project-dir", str(project), "serve",
                                   "--store", str(store), "--http", "--host", host, "--port", "0", "--no-auth"],
                                  cwd=project, capture_output=True, text=True,
                                  env=server_env(tmp_path / "home", store), timeout=20)
        except subprocess.TimeoutExpired:
            pytest.fail(f"serve --http --no-auth --host {host} started")
        assert done.returncode != 0, (host, done.stderr)


def test_mcp_session_cap_not_bypassed_by_scheme_case(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    with serving_http(tmp_path, project, AROMCP_HTTP_SESSIONS_PER_CLIENT="2") as server:
        codes = []
        for scheme in ("Bearer", "Bearer", "Bearer", "bearer", "BEARER", "bEaReR"):
            answer = httpx2.post(server.url, json=INIT, timeout=30,
                                 headers=MCP_HEADERS | {"Authorization": f"{scheme} {TOKEN}"})
            codes.append(answer.status_code)
        assert codes[:3] == [200, 200, 503], codes
        assert codes[3:] == [503, 503, 503], f"same token and address, per-client cap 2: {codes}"


def test_the_public_login_path_cannot_hold_connections(tmp_path: Path) -> None:
    """Connections trickling a small body to POST /ui/api/login (open, no credential): they stay
    unauthenticated, so only MAX_UNAUTHENTICATED are kept, and a token holder is served."""
    project = make_project(tmp_path / "project")
    with serving_http(tmp_path, project, "--ui", AROMCP_HTTP_MAX_UNAUTHENTICATED="3") as server:
        socks = []
        for _ in range(10):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            sock.sendall((f"POST /ui/api/login HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
                          "Content-Type: application/json\r\nContent-Length: 4000\r\n\r\n{").encode())
            socks.append(sock)
            time.sleep(0.05)
        time.sleep(0.5)
        open_ = 0
        for sock in socks:
            sock.settimeout(0.05)
            try:
                open_ += sock.recv(1) != b""
            except TimeoutError:
                open_ += 1
            except OSError:
                pass
        served = httpx2.post(server.url, json=INIT, headers=MCP_HEADERS | BEARER, timeout=30)
        for sock in socks:
            sock.close()
        assert open_ <= 3, open_
        assert served.status_code == 200

