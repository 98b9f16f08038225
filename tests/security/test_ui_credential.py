"""The web view answers no read and opens no event stream without a credential.

The attack (issue 31): with `serve --http --ui`, `/mcp` answered 401 but
`/ui/api/instances/ID` and its `/state` answered 200 to anyone who could reach the port,
and `ui --host 0.0.0.0` started without any credential and served every project in the
store.  Now every API read and every event stream needs either a session cookie
(`HttpOnly`, `SameSite=Strict`), got by opening a one-time login URL, or (under `serve
--http`, or `ui --auth-token-file`) the bearer token.  The page's own files (HTML, CSS,
JS: no data) stay open, so a browser can show how to sign in.  `ui` bound beyond loopback
does not start without a token file.  One login is all a person needs: actions (still
switched on by `--actions` / `--ui-actions`) use the same session, with its own
anti-forgery token the page sends back.  Event streams are capped per client and in all.

Real `serve --http` and `ui` subprocesses, real HTTP.
"""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import httpx2
import pytest
from srv_helpers import PYTHON, TOKEN, make_project, server_env, serving_http
from ui_helpers import get, log_in, login_file, running_ui, start_instance

pytestmark = pytest.mark.slow
READS = ("/api/instances", "/api/instances/{wid}", "/api/instances/{wid}/state", "/api/instances/{wid}/traces",
         "/api/config")
BEARER = {"Authorization": f"Bearer {TOKEN}"}


def reads(base: str, wid: str) -> list[str]:
    return [base + path.format(wid=wid) for path in READS]


def test_serve_ui_reads_need_a_credential(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    with serving_http(tmp_path, project, "--ui") as server:
        wid = start_instance(tmp_path, project)
        base = f"http://127.0.0.1:{server.port}/ui"
        for url in [*reads(base, wid), f"{base}/api/instances/{wid}/events"]:
            refused = get(url)
            assert refused.status_code == 401, (url, refused.status_code, refused.text[:200])
            assert "log in" in refused.json()["error"] and wid not in refused.text
            assert get(url, headers={"Authorization": "Bearer wrong-token-0123456789"}).status_code == 401
        for url in reads(base, wid):
            assert get(url, headers=BEARER).status_code == 200, url
        page = get(base + "/")
        assert page.status_code == 200 and "static/app.js" in page.text  # the page itself holds no data


def test_serve_ui_one_time_login_url_gives_a_strict_httponly_cookie(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    with serving_http(tmp_path, project, "--ui") as server:
        wid = start_instance(tmp_path, project)
        path = login_file(server.stderr())
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        login_url = path.read_text().strip()
        answer = httpx2.get(login_url, follow_redirects=False, timeout=30)
        assert answer.status_code == 303 and answer.headers["location"] == "/ui/", answer.headers
        cookie = answer.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/ui" in cookie, cookie
        cookies = answer.cookies
        for url in reads(f"http://127.0.0.1:{server.port}/ui", wid):
            assert get(url, cookies=cookies).status_code == 200, url
        again = httpx2.get(login_url, follow_redirects=False, timeout=30)
        assert again.status_code == 401 and "already used" in again.text, again.text
        fresh = path.read_text().strip()
        assert fresh != login_url and log_in(fresh)  # a new one-time URL waits in the file


def test_ui_alone_reads_need_a_credential_and_it_prints_its_login_url_on_its_terminal(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    wid = start_instance(tmp_path, project)
    with running_ui(tmp_path, terminal=True) as ui:
        for url in [*reads(ui.base, wid), f"{ui.base}/api/instances/{wid}/events"]:
            assert get(url).status_code == 401, url
        login_url = next(word for word in ui.output.split() if "/login?code=" in word)
        cookies = log_in(login_url)
        for url in reads(ui.base, wid):
            assert get(url, cookies=cookies).status_code == 200, url


def test_ui_beyond_loopback_needs_a_token_file(tmp_path: Path) -> None:
    project, store = make_project(tmp_path / "project"), tmp_path / "store.sqlite3"
    (tmp_path / "home").mkdir()
    done = subprocess.run([PYTHON, "-m", "aromcp_workflows", "--project-dir", str(project), "ui", "--store", str(store),
                           "--host", "0.0.0.0", "--port", "0"], cwd=project, capture_output=True, text=True,
                          env=server_env(tmp_path / "home", store, AROMCP_HTTP_TOKEN=TOKEN), timeout=60)
    assert done.returncode == 2 and done.stdout == "", (done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1 and "--auth-token-file" in done.stderr and "Traceback" not in done.stderr
    token_file = tmp_path / "ui.token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    wid = start_instance(tmp_path, project)
    with running_ui(tmp_path, "--auth-token-file", str(token_file), host="0.0.0.0") as ui:
        for url in reads(ui.base, wid):
            assert get(url).status_code == 401 and get(url, headers=BEARER).status_code == 200, url


def test_one_login_is_enough_for_actions_and_actions_stay_switched(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    for actions in (False, True):
        with running_ui(tmp_path / str(actions), *(["--actions"] if actions else [])) as ui:
            wid = start_instance(tmp_path / str(actions), project)
            cookies = log_in(login_file(ui.output).read_text().strip())
            config = get(f"{ui.base}/api/config", cookies=cookies).json()
            assert config["actions"] is actions and len(config["csrf"]) >= 20
            cancel, origin = f"{ui.base}/api/instances/{wid}/cancel", {"Origin": ui.base}
            forged = httpx2.post(cancel, cookies=cookies, headers=origin, timeout=30)  # no anti-forgery token
            assert forged.status_code == 403, forged.text
            done = httpx2.post(cancel, cookies=cookies, headers=origin | {"X-Aromcp-Token": config["csrf"]}, timeout=30)
            assert done.status_code == (200 if actions else 403), done.text
            assert httpx2.post(cancel, timeout=30).status_code == 401


def test_event_streams_are_capped_per_client_and_in_all(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    with serving_http(tmp_path, project, "--ui", host="0.0.0.0", AROMCP_UI_STREAMS_PER_CLIENT="2",
                      AROMCP_UI_MAX_STREAMS="3") as server:
        wid = start_instance(tmp_path, project)
        events = f"http://127.0.0.1:{server.port}/ui/api/instances/{wid}/events"
        clients = [httpx2.Client(timeout=30, headers=BEARER, transport=httpx2.HTTPTransport(local_address=source))
                   for source in ("127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.2", "127.0.0.2")]
        opened, answers = [], []
        try:
            for client in clients:
                stream = client.stream("GET", events)
                response = stream.__enter__()
                opened.append(stream)
                answers.append((response.status_code, response.read().decode() if response.status_code != 200
                                else ""))
            assert [status for status, _ in answers] == [200, 200, 429, 200, 503], answers
            assert "AROMCP_UI_STREAMS_PER_CLIENT" in answers[2][1] and "AROMCP_UI_MAX_STREAMS" in answers[4][1]
        finally:
            for stream in opened:
                stream.__exit__(None, None, None)
            for client in clients:
                client.close()
