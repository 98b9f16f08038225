"""The web view in a real browser: headless Chromium (Debian's package) driven by Playwright,
against the real `aromcp-workflows ui` process, with the instances changed by this test
process through the service — another process than the web view's, as an agent's server
would be.  Each test logs in as a person does: it opens the one-time login URL the ui
wrote to its private file, and the browser keeps the session cookie.  Slow tier: each
test starts the ui process and a browser page.

The screenshots in docs/img/ are made here (`shoot`), so docs/ui.md shows what these
tests see: `AROMCP_UI_SCREENSHOTS=1 pytest tests/web/test_browser.py` writes them there
(otherwise they go to a temporary folder, and a test run leaves the tree as it was).
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect
from web_helpers import SECRET, Project, Site, fan_out_midway, finish_task

pytestmark = pytest.mark.slow
DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"  # with AROMCP_UI_SCREENSHOTS=1
LIVE_S = 2.0  # a change by another process shows within this long


@pytest.fixture
def site(project: Project) -> Iterator[Site]:
    running = Site.start(project, "--actions")
    yield running
    running.stop()


def log_in(page: Any, site: Site) -> None:
    """Open the one-time login URL: the ui sets its session cookie and sends the browser on."""
    page.goto(site.login_url())
    expect(page).to_have_url(site.base + "/")


def shoot(page: Any, project: Project, name: str, selector: str | None = None) -> None:
    """A small PNG of what the test sees, for docs/ui.md (else beside the test's project:
    tests running side by side never write one file)."""
    folder = DOCS_IMG if os.environ.get("AROMCP_UI_SCREENSHOTS") else project.root.parent / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    target = page.locator(selector) if selector else page
    target.screenshot(path=str(folder / name), **({} if selector else {"full_page": False}))


def test_instances_list_filters_and_links(project: Project, site: Site, page: Any) -> None:
    service = project.service()
    failed = service.start("watch-fail").workflow_id
    service.next_step(failed)
    fan, _ = fan_out_midway(service)
    done = service.start("watch-fail", {"marker": ".aromcp/workflows/watch-fail.yaml"}).workflow_id  # exists: passes
    service.next_step(done)
    log_in(page, site)
    rows = page.locator("table.instances tbody tr")
    rows.first.wait_for()
    assert [rows.nth(i).get_attribute("data-id") for i in range(rows.count())] == [done, fan, failed]
    assert [rows.nth(i).locator(".pill").inner_text() for i in range(3)] == ["completed", "running", "failed"]
    assert "1–3 of 3, newest first" in page.inner_text(".pager")
    shoot(page, project, "instances.png")
    page.select_option("select[name=status]", "failed")
    expect(rows).to_have_count(1)
    assert rows.first.get_attribute("data-id") == failed and "status=failed" in page.url
    page.select_option("select[name=status]", "")
    page.select_option("select[name=workflow]", "watch-fan")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-id", fan)
    rows.first.locator("a").click()
    page.wait_for_selector(".graph svg")
    assert page.url.endswith(f"/instances/{fan}")


def test_instance_page_in_the_middle_of_a_fan_out(project: Project, site: Site, page: Any) -> None:
    service = project.service()
    wid, tasks = fan_out_midway(service)
    log_in(page, site)
    page.goto(f"{site.base}/instances/{wid}")
    page.wait_for_selector(".graph svg")
    fan = page.locator("g.node[data-step='fan']").first
    assert fan.get_attribute("data-mark") == "current" and "1 of 3 tasks done" in (fan.text_content() or "")
    assert page.locator("g.node[data-step='warm_up']").first.get_attribute("data-mark") == "done"
    assert page.locator("g.node[data-step='report']").get_attribute("data-mark") == "not_reached"
    lanes = {tid: page.locator(f".lane[data-task='{tid}'] .pill").inner_text() for tid in tasks}
    assert lanes == {tasks[0]: "completed", tasks[1]: "running", tasks[2]: "pending"}
    assert "Fixing 3 files" in page.inner_text(".messages")
    shoot(page, project, "instance-fanout.png")
    tick = page.locator(".timeline tr.selectable", has_text="warm_up.tick").first
    tick.click()  # the state as it was after the first tick, its change highlighted
    page.wait_for_selector(".tree .row.changed[data-path='raw.rounds']")
    assert "rounds: 1" in page.inner_text(".tree .row.changed[data-path='raw.rounds']")
    shoot(page, project, "state-history.png", "#history-and-state")


def test_a_change_by_another_process_shows_without_a_reload(project: Project, site: Site, page: Any) -> None:
    service = project.service()
    wid, tasks = fan_out_midway(service)
    log_in(page, site)
    page.goto(f"{site.base}/instances/{wid}")
    page.wait_for_selector("#live.on")
    page.evaluate("window.__marker = 'same page'")  # gone if the page reloaded
    lane = page.locator(f".lane[data-task='{tasks[1]}'] .pill")
    assert lane.inner_text() == "running"
    started = time.monotonic()
    finish_task(service, wid, tasks[1])  # this process, not the ui's
    expect(lane).to_have_text("completed", timeout=LIVE_S * 1000)
    seen_after = time.monotonic() - started
    assert seen_after < LIVE_S and page.evaluate("window.__marker") == "same page"
    assert "2 of 3 tasks done" in (page.locator("g.node[data-step='fan']").first.text_content() or "")


def test_the_secret_is_in_no_html_and_no_response(project: Project, site: Site, page: Any) -> None:
    service = project.service()
    wid, tasks = fan_out_midway(service)
    finish_task(service, wid, tasks[1])
    bodies: list[str] = []
    page.on("response", lambda response: bodies.append(_text(response)))
    log_in(page, site)
    page.wait_for_selector("table.instances")
    page.goto(f"{site.base}/instances/{wid}")
    page.wait_for_selector(".graph svg")
    page.click("text=Show the transform traces")
    page.wait_for_selector(".traces table")
    values = [option.get_attribute("value") or "" for option in page.locator("select[name=state-at] option").all()]
    assert len(values) > 5
    for value in values[1:]:
        page.select_option("select[name=state-at]", value)
        expect(page.locator("select[name=state-at]")).to_have_value(value)
    page.wait_for_timeout(300)
    assert len(bodies) > 8
    assert "calling with ***" in page.content()
    for text in [page.content(), *bodies, *_every_api_answer(site, wid, _session_cookie(page))]:
        assert SECRET not in text


def test_without_a_login_the_page_shows_nothing_but_how_to_log_in(project: Project, site: Site, page: Any) -> None:
    """Opened without a login, the page reads nothing (every API answer is 401) and says how
    to log in; the login URL lets the browser in, and its Cancel works with that one login."""
    service = project.service()
    wid, _ = fan_out_midway(service)
    statuses: list[int] = []
    page.on("response", lambda response: statuses.append(response.status) if "/api/" in response.url else None)
    page.goto(f"{site.base}/instances/{wid}")
    page.wait_for_selector(".login-panel")
    assert "one-time login URL" in page.inner_text(".login-panel") and wid not in page.content()
    assert page.locator("input[name=token]").count() == 0  # this ui takes no token: no form for one
    assert statuses and set(statuses) == {401}
    shoot(page, project, "login.png")
    login = site.login_url()
    page.goto(login)
    page.goto(f"{site.base}/instances/{wid}")
    page.wait_for_selector(".graph svg")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("button:has-text('Cancel')")
    page.wait_for_selector(".head .pill.cancelled")
    assert service.status(wid).status == "cancelled"
    cookie = next(c for c in page.context.cookies() if c["name"].startswith("aromcp_ui_"))
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert page.evaluate("document.cookie") == ""  # no script of the page can read the session
    other = page.context.browser.new_context()
    try:
        again = other.new_page()
        again.goto(login)  # the same URL a second time: used up
        assert "already used" in again.inner_text("body")
    finally:
        other.close()


def test_the_bearer_token_pasted_in_the_page_logs_in(project: Project, page: Any, tmp_path: Path) -> None:
    """A ui started with --auth-token-file offers a token form; the token pasted there is
    traded for the same session cookie (it travels in a header, never in the address)."""
    token_file = tmp_path / "ui.token"
    token_file.write_text("browser-test-token-0123456789abcdef\n")
    token_file.chmod(0o600)
    wid = project.service().start("watch-fail").workflow_id
    site = Site.start(project, "--auth-token-file", str(token_file))
    try:
        page.goto(site.base + "/")
        page.fill("input[name=token]", "not-the-token-0123456789")
        page.click("button:has-text('Log in')")
        expect(page.locator("#login-note")).to_have_text("That token was not accepted.")
        page.fill("input[name=token]", "browser-test-token-0123456789abcdef")
        page.click("button:has-text('Log in')")
        expect(page.locator(f"table.instances tr[data-id='{wid}']")).to_have_count(1)
        assert "token" not in page.url
    finally:
        site.stop()


def test_repair_a_failed_run_from_the_page(project: Project, site: Site, page: Any) -> None:
    """A run fails at its shell check; the cause is fixed (the marker file made), Retry on
    the page puts it back at the failed step, and the agent's next call finishes it."""
    service = project.service()
    wid = service.start("watch-fail").workflow_id
    service.next_step(wid)
    log_in(page, site)
    page.goto(f"{site.base}/instances/{wid}")
    page.wait_for_selector(".failure")
    assert "watch-fail.yaml:" in page.inner_text(".failure .where")
    assert page.locator("g.node[data-step='check']").get_attribute("data-mark") == "failed"
    shoot(page, project, "failed-run.png")
    (project.root / "ready.flag").write_text("fixed\n")
    page.click("button:has-text('Retry')")
    page.wait_for_selector(".head .pill.running")
    service.next_step(wid)  # the agent (or `run --resume`) goes on
    page.wait_for_selector(".head .pill.completed", timeout=LIVE_S * 1000)
    assert page.locator("g.node[data-step='check']").get_attribute("data-mark") == "done"
    assert service.status(wid).status == "completed"


def test_fork_from_the_page_opens_the_new_instance(project: Project, site: Site, page: Any) -> None:
    service = project.service()
    wid, _ = fan_out_midway(service)
    log_in(page, site)
    page.goto(f"{site.base}/instances/{wid}")
    page.wait_for_selector(".graph svg")
    page.click("button:has-text('Fork')")
    expect(page).not_to_have_url(f"{site.base}/instances/{wid}")
    forked = page.url.rsplit("/", 1)[-1]
    page.wait_for_selector(".graph svg")
    assert forked != wid and service.status(forked).workflow == "watch-fan"
    assert service.status(wid).status == "running"  # the original is untouched


def _text(response: Any) -> str:
    try:
        return response.text()
    except Exception:  # a streamed answer (the event stream) has no body to read here
        return ""


def _session_cookie(page: Any) -> str:
    found = next(c for c in page.context.cookies() if c["name"].startswith("aromcp_ui_"))
    return f"{found['name']}={found['value']}"


def _every_api_answer(site: Site, wid: str, cookie: str) -> list[str]:
    """Every read route, fetched directly with the browser's session; and the first event of the stream."""
    def get(path: str) -> str:
        with urllib.request.urlopen(_request(path), timeout=10) as reply:
            return reply.read().decode()

    def _request(path: str) -> urllib.request.Request:
        return urllib.request.Request(site.base + path, headers={"Cookie": cookie})

    view = json.loads(get(f"/api/instances/{wid}"))
    texts = [get("/api/instances"), get(f"/api/instances/{wid}"), get(f"/api/instances/{wid}/traces"),
             get("/api/config"), get(f"/api/instances/{wid}/state")]
    texts += [get(f"/api/instances/{wid}/state?seq={p['seq']}") for p in view["state_points"]]
    with urllib.request.urlopen(_request(f"/api/instances/{wid}/events"), timeout=10) as stream:
        texts.append(stream.readline().decode() + stream.readline().decode() + stream.readline().decode())
    return texts
