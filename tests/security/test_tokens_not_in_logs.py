"""No working credential is printed where others read it: logs, or a browser's argv.

The attack (issue 31): `serve --http --ui --ui-actions` printed the web view's action token
in a URL on stderr, which a service manager keeps in its logs; `ui --actions --open`
handed the tokenized URL to the browser on its command line, which every local user sees
in `ps`.  Now: `serve --http --ui` writes a one-time login URL to a file only its user can
read and logs that file's path; `ui` prints its login URL only to a terminal (to a log it
writes the path of such a file); `--open` hands the browser a 0600 HTML file that
redirects to the login URL (as Jupyter does).  And at `AROMCP_LOG_LEVEL=INFO` the access
log is one line per request, its secrets masked, with no "Logging error" traceback (the
log masking had set `args=None`, which uvicorn's access formatter unpacks).

Real `serve --http` and `ui` subprocesses.
"""

from __future__ import annotations

import re
import stat
import time
from pathlib import Path

import httpx2
import pytest
from srv_helpers import TOKEN, make_project, serving_http
from ui_helpers import log_in, login_file, running_ui

pytestmark = pytest.mark.slow
CREDENTIAL_IN_URL = re.compile(r"[?&](token|code)=[^&\s]{8,}")


def test_serve_ui_logs_where_the_login_url_is_never_the_url(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    with serving_http(tmp_path, project, "--ui-actions") as server:
        logged = server.stderr()
        path = login_file(logged)
        login_url = path.read_text().strip()
        code = login_url.rsplit("=", 1)[-1]
        assert not CREDENTIAL_IN_URL.search(logged), logged
        assert code not in logged and TOKEN not in logged
        assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        log_in(login_url)
        time.sleep(0.2)
        assert code not in server.stderr()
    assert not path.exists(), "the login file outlived its server"


def test_ui_writes_its_login_url_to_a_private_file_when_its_output_is_not_a_terminal(tmp_path: Path) -> None:
    with running_ui(tmp_path, "--actions") as ui:
        assert not CREDENTIAL_IN_URL.search(ui.output), ui.output
        path = login_file(ui.output)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        log_in(path.read_text().strip())


def test_open_hands_the_browser_a_private_redirect_file_not_the_url(tmp_path: Path) -> None:
    recorder, seen = tmp_path / "browser.sh", tmp_path / "browser-argv.txt"
    recorder.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {seen}\n')
    recorder.chmod(0o755)
    with running_ui(tmp_path, "--actions", "--open", env={"BROWSER": str(recorder)}) as ui:
        for _ in range(100):
            if seen.exists() and seen.read_text():
                break
            time.sleep(0.05)
        argv = seen.read_text()
        assert not CREDENTIAL_IN_URL.search(argv) and not CREDENTIAL_IN_URL.search(ui.output), (argv, ui.output)
        opened = Path(argv.strip().removeprefix("file://"))
        assert opened.suffix == ".html" and stat.S_IMODE(opened.stat().st_mode) == 0o600
        target = re.search(r'url=([^"]+)"', opened.read_text())
        assert target, opened.read_text()
        login_url = target[1].replace("&amp;", "&")
        assert login_url.startswith(ui.base + "/login?code=")
        log_in(login_url)


def test_the_access_log_is_one_masked_line_per_request(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    with serving_http(tmp_path, project, "--ui", AROMCP_LOG_LEVEL="INFO") as server:
        base = f"http://127.0.0.1:{server.port}"
        login_url = login_file(server.stderr()).read_text().strip()
        code = login_url.rsplit("=", 1)[-1]
        started = len(server.stderr().splitlines())
        sent = [httpx2.get(f"{base}/ui/api/instances", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30),
                httpx2.get(f"{base}/ui/api/instances?token={TOKEN}", timeout=30),
                httpx2.get(login_url, follow_redirects=False, timeout=30),
                httpx2.post(f"{base}/mcp", content=b"{}", timeout=30)]
        assert [r.status_code for r in sent] == [200, 401, 303, 401]
        time.sleep(0.3)
        lines = server.stderr().splitlines()[started:]
        text = "\n".join(lines)
        assert "Logging error" not in text and "Traceback" not in text, text[:2000]
        access = [line for line in lines if '"GET /' in line or '"POST /' in line]
        assert len(access) == len(sent), text
        assert [line.rsplit(" ", 1)[-1] for line in access] == ["200", "401", "303", "401"], access
        assert TOKEN not in text and code not in text, text
