"""`serve --http --ui`: the web view at /ui beside /mcp on one port, over the tools' own
service; off unless asked for, and only with --http.  Slow tier (a server subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from web_helpers import Project

pytestmark = pytest.mark.slow


TOKEN = "serve-ui-test-token-0123456789abcdef"  # /mcp needs it, and the web view takes it too
BEARER = {"Authorization": f"Bearer {TOKEN}"}


def _serve(project: Project, *extra: str) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "HOME": str(project.home), "AROMCP_WORKFLOWS_STORE": project.store,
           "AROMCP_HTTP_TOKEN": TOKEN}
    process = subprocess.Popen([sys.executable, "-m", "aromcp_workflows", "--project-dir", str(project.root),
                                "serve", "--http", "--port", "0", *extra], cwd=project.root, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    for _ in range(4):
        line = process.stderr.readline()
        if "web view" in line and " at http://" in line:
            return process, line.split(" at ", 1)[1].split(": ", 1)[0]
    process.kill()
    raise AssertionError("serve --http --ui printed no web view URL")


def test_the_web_view_is_mounted_at_ui_beside_mcp(project: Project) -> None:
    wid = project.service().start("watch-fail").workflow_id
    process, url = _serve(project, "--ui")
    try:
        base = url.split("/ui/")[0]
        assert url.endswith("/ui/")  # no credential in the URL it prints
        with urllib.request.urlopen(urllib.request.Request(f"{base}/ui/api/instances", headers=BEARER)) as reply:
            assert [r["workflow_id"] for r in json.loads(reply.read())["rows"]] == [wid]
        with urllib.request.urlopen(f"{base}/ui/instances/{wid}") as reply:
            assert '<base href="/ui/">' in reply.read().decode()
        post = urllib.request.Request(f"{base}/ui/api/instances/{wid}/cancel", method="POST", headers=BEARER)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(post)
        assert refused.value.code == 403
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        for sent, expected in (({}, (401,)), ({"Authorization": f"Bearer {TOKEN}"}, (400, 406))):
            mcp = urllib.request.Request(f"{base}/mcp", method="POST", data=b"{}", headers=headers | sent)
            with pytest.raises(urllib.error.HTTPError) as answered:  # MCP is still served there (a bad request)
                urllib.request.urlopen(mcp)
            assert answered.value.code in expected
    finally:
        process.terminate()
        process.wait(10)


def test_ui_needs_http(project: Project) -> None:
    done = subprocess.run([sys.executable, "-m", "aromcp_workflows", "serve", "--ui"], capture_output=True,
                          text=True, cwd=project.root, timeout=60)
    assert done.returncode == 2 and "--ui needs --http" in done.stderr


def test_client_is_person_is_refused_over_http(project: Project) -> None:
    """Over HTTP every caller is an agent: the flag that lets `run`'s own client act as the
    user must not be silently dropped there (nor honoured)."""
    done = subprocess.run([sys.executable, "-m", "aromcp_workflows", "serve", "--http", "--client-is-person"],
                          capture_output=True, text=True, cwd=project.root, timeout=60)
    assert done.returncode == 2 and "--client-is-person is for stdio" in done.stderr and not done.stdout
