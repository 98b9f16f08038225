"""The web view's HTTP API in process (Starlette's test client over the real app and a real
SQLite store, behind the very checks `aromcp-workflows ui` puts in front: the Host rule and
the credential): what each route answers to a logged-in client, that no response carries a
secret, that actions need --actions, the session's anti-forgery token and the page's own
Origin, and that a foreign Host is refused.  The browser tests (test_browser.py) drive the
same app through Chromium."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient
from web_helpers import SECRET, Project, fan_out_midway, finish_task

from aromcp_workflows.http import ConnectionLimits, HostRule, guarded
from aromcp_workflows.web.app import WebView
from aromcp_workflows.web.auth import WebAuth

BASE = "http://127.0.0.1:8780"  # in process (TestClient): no socket is bound
PORT = int(BASE.rsplit(":", 1)[1])


def client(project: Project, actions: bool = False, log_in: bool = True) -> tuple[TestClient, WebView, Any]:
    """The app behind the ui's checks; logged in (the client keeps the cookie) unless told not."""
    service = project.service()
    links: list[str] = []
    view = WebView(lambda: service, WebAuth(BASE, "", links.append, port=PORT), actions=actions)
    view.auth.start()
    app = guarded(view.app(), HostRule.for_bind("127.0.0.1"), [("", view.auth.admit)], ConnectionLimits.from_env())
    web = TestClient(app, base_url=BASE)
    if log_in:
        assert web.get(links[-1], follow_redirects=False).status_code == 303
    return web, view, service


def test_instances_page_newest_first_filtered_and_counted(project: Project) -> None:
    web, _, service = client(project)
    first = service.start("watch-fail").workflow_id
    fan, _ = fan_out_midway(service)
    service.complete(first, "cancelled")
    body = web.get("/api/instances").json()
    assert [r["workflow_id"] for r in body["rows"]] == [fan, first] and body["total"] == 2
    assert body["statuses"] == {"running": 1, "cancelled": 1}
    assert body["workflows"] == ["watch-fail", "watch-fan"] and body["projects"] == [str(project.root.resolve())]
    row = body["rows"][0]
    assert row["status"] == "running" and set(row["current_steps"]) == {"fan", "fix_file_1.fix"}
    assert row["duration_seconds"] >= 0 and row["created_at"] <= row["updated_at"]
    assert [r["workflow_id"] for r in web.get("/api/instances?status=cancelled").json()["rows"]] == [first]
    assert web.get("/api/instances?workflow=watch-fan&status=cancelled").json()["total"] == 0
    assert web.get("/api/instances?page=2&per_page=1").json()["rows"][0]["workflow_id"] == first


def test_instance_view_in_the_middle_of_a_fan_out(project: Project) -> None:
    web, _, service = client(project)
    wid, tasks = fan_out_midway(service)
    view = web.get(f"/api/instances/{wid}").json()
    nodes = {(n["scope"], n["step_id"], n["role"]): n for n in view["graph"]["nodes"]}
    fan = nodes[("main", "fan", "step")]
    assert fan["mark"] == "current" and fan["detail"] == "1 of 3 tasks done"
    loop = nodes[("main", "warm_up", "step")]
    assert loop["mark"] == "done" and loop["detail"].startswith("2 iterations")
    assert nodes[("main", "warm_up.tick", "step")]["runs"] == 2
    fix = nodes[("task:fix_file@fan", "fix", "step")]
    assert fix["mark"] == "current" and fix["runs"] == 2  # task 0 did it, task 1 is at it
    assert nodes[("main", "report", "step")]["mark"] == "not_reached"
    assert [(t["task_id"], t["status"], t.get("current_step")) for t in view["tasks"]] == [
        (tasks[0], "completed", None), (tasks[1], "running", f"{tasks[1]}.fix"), (tasks[2], "pending", None)]
    assert [m["message"] for m in view["messages"]] == ["Fixing 3 files"]
    assert view["state"]["computed"]["remaining"] == ["b.py", "c.py"]
    steps = [(e["step_id"], e["status"]) for e in view["timeline"]]
    assert (f"{tasks[0]}.fix", "success") in steps and (f"{tasks[1]}.fix", "running") in steps
    placed = view["graph"]
    for node in placed["nodes"]:
        assert node["x"] >= 0 and node["x"] + node["w"] <= placed["width"] and node["y"] + node["h"] <= placed["height"]


def test_state_after_any_step_with_its_change(project: Project) -> None:
    web, _, service = client(project)
    wid, tasks = fan_out_midway(service)
    points = web.get(f"/api/instances/{wid}").json()["state_points"]
    assert [p["kind"] for p in points][:1] == ["started"]
    ticks = [p for p in points if p["step_id"] and p["step_id"].startswith("warm_up.tick")]
    assert [p["changed"] for p in ticks] == [["raw.rounds"], ["raw.rounds"]]
    first = web.get(f"/api/instances/{wid}/state", params={"seq": ticks[0]["seq"]}).json()
    assert first["state"]["raw"]["rounds"] == 1 and first["changed"] == ["raw.rounds"] and first["complete"]
    recorded = next(p for p in points if p["task_id"] == tasks[0])
    after = web.get(f"/api/instances/{wid}/state", params={"seq": recorded["seq"]}).json()
    assert after["state"]["raw"]["done"] == ["a.py"] and after["state"]["computed"]["remaining"] == ["b.py", "c.py"]
    assert after["changed"] == ["raw.done", "computed.remaining"]
    start = web.get(f"/api/instances/{wid}/state", params={"seq": points[0]["seq"]}).json()
    assert start["state"]["raw"]["done"] == [] and start["state"]["raw"]["rounds"] == 0
    now = web.get(f"/api/instances/{wid}/state").json()["state"]
    view = web.get(f"/api/instances/{wid}").json()["state"]
    assert now == {"raw": view["raw"], "state": view["state"], "computed": view["computed"]}


def test_a_failure_names_its_step_and_line(project: Project) -> None:
    web, _, service = client(project)
    wid = service.start("watch-fail").workflow_id
    service.next_step(wid)
    view = web.get(f"/api/instances/{wid}").json()
    assert view["status"] == "failed"
    failure = view["failures"][0]
    text = (project.root / ".aromcp" / "workflows" / "watch-fail.yaml").read_text().splitlines()
    assert failure["step_id"] == "check" and failure["step_type"] == "shell_command"
    assert text[failure["line"] - 1].strip() == "- id: check" and not failure["file_changed"]
    assert failure["file"].endswith("watch-fail.yaml") and "exited with code 1" in failure["message"]
    marks = {n["step_id"]: n["mark"] for n in view["graph"]["nodes"] if n["role"] == "step"}
    assert marks["prepare"] == "done" and marks["check"] == "failed"


def test_no_response_carries_the_secret(project: Project) -> None:
    """The secret input, and its copy inside another string in raw.note, are masked in
    every answer: list, view, state at every point, traces, errors."""
    web, _, service = client(project)
    wid, tasks = fan_out_midway(service)
    finish_task(service, wid, tasks[1])
    bodies = [web.get("/api/instances"), web.get(f"/api/instances/{wid}"), web.get(f"/api/instances/{wid}/traces"),
              web.get("/api/config"), web.get("/"), web.get(f"/instances/{wid}")]
    for point in bodies[1].json()["state_points"]:
        bodies.append(web.get(f"/api/instances/{wid}/state", params={"seq": point["seq"]}))
    assert len(bodies) > 8
    for response in bodies:
        assert response.status_code == 200 and SECRET not in response.text
    view = bodies[1].json()
    assert view["state"]["inputs"]["api_token"] == "***" and view["state"]["raw"]["note"] == "calling with ***"
    assert service.state_read(wid).state["note"] == f"calling with {SECRET}"  # the store holds it: the view masks it


@pytest.mark.parametrize("actions", [False, True])
def test_actions_need_the_flag_the_token_and_the_origin(project: Project, actions: bool) -> None:
    web, view, service = client(project, actions=actions)
    wid, _ = fan_out_midway(service)
    before = service.instance_version(wid)
    url = f"/api/instances/{wid}/cancel"
    csrf = web.get("/api/config").json()["csrf"]
    refused = [web.post(url), web.post(url, headers={"X-Aromcp-Token": "wrong", "Origin": BASE}),
               web.post(url, headers={"X-Aromcp-Token": csrf}),  # no Origin
               web.post(url, headers={"X-Aromcp-Token": csrf, "Origin": "http://evil.example"})]
    for response in refused[: 1 if not actions else 4]:
        assert response.status_code == 403, response.text
    assert service.status(wid).status == "running" and service.instance_version(wid) == before
    done = web.post(url, headers={"X-Aromcp-Token": csrf, "Origin": BASE})
    if not actions:
        assert done.status_code == 403 and "read-only" in done.json()["error"]
        assert service.status(wid).status == "running"
        return
    assert done.status_code == 200 and service.status(wid).status == "cancelled"


def test_without_a_login_only_the_pages_own_files_answer(project: Project) -> None:
    web, _, service = client(project, log_in=False)
    wid, _ = fan_out_midway(service)
    for path in ("/api/instances", f"/api/instances/{wid}", f"/api/instances/{wid}/state", "/api/config",
                 f"/api/instances/{wid}/events", f"/api/instances/{wid}/traces"):
        refused = web.get(path)
        assert refused.status_code == 401 and "log in first" in refused.json()["error"], (path, refused.text)
    assert web.post(f"/api/instances/{wid}/cancel").status_code == 401
    for path in ("/", f"/instances/{wid}", "/static/app.js"):
        assert web.get(path).status_code == 200, path
    assert web.get("/login?code=guessed").status_code == 401


def test_a_foreign_host_and_an_unknown_instance(project: Project) -> None:
    web, _, _ = client(project)
    foreign = web.get("/api/instances", headers={"Host": "attacker.example:8780"})
    assert foreign.status_code == 421 and "--allowed-host attacker.example" in foreign.text
    missing = web.get("/api/instances/wf_nope")
    assert missing.status_code == 404 and "No workflow instance with id 'wf_nope'" in missing.json()["error"]
    page = web.get("/")
    assert page.status_code == 200 and "static/app.js" in page.text and "script-src 'self'" in page.headers[
        "content-security-policy"]
