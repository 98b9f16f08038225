"""A live run on the page, in a real browser (Debian's Chromium through Playwright): who it
waits for, a stalled run marked, its question answered from the page, and its command's
output shown as it comes.

As in test_browser.py, the real `aromcp-workflows ui` process serves the page and this test
process changes the instances through the service, as an agent's server would.  The ui
runs with `AROMCP_STALE_AFTER=1`, so "stalled" takes a second, not ten minutes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect
from test_browser import log_in, shoot
from web_helpers import Project, Site

pytestmark = pytest.mark.slow


@pytest.fixture
def site(project: Project, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    monkeypatch.setenv("AROMCP_STALE_AFTER", "1")  # the ui process reads it
    running = Site.start(project, "--actions")
    yield running
    running.stop()


def at_question(service: Any) -> str:
    """A watch-live instance past its agent step, waiting on its question."""
    wid = service.start("watch-live", {"target": "staging"}).workflow_id
    service.next_step(wid)
    done = service.step_complete(wid, "think", result="ok")
    assert done.next_step["id"] == "confirm"
    return wid


def test_a_stalled_run_is_marked_in_the_list_and_on_its_page(project: Project, site: Site, page: Any) -> None:
    service = project.service()
    quiet = service.start("watch-live").workflow_id
    service.next_step(quiet)  # the agent took `think` and went away
    asking = at_question(service)
    time.sleep(1.5)
    log_in(page, site)
    row = page.locator(f"table.instances tr[data-id='{quiet}']")
    expect(row.locator(".pill.stalled")).to_have_count(1)
    asking_row = page.locator(f"table.instances tr[data-id='{asking}'] .pill.stalled")
    expect(asking_row).to_have_count(0)  # a person is awaited
    page.select_option("select[name=status]", "stalled")
    expect(page.locator("table.instances tbody tr")).to_have_count(1)
    expect(page.locator("table.instances tbody tr").first).to_have_attribute("data-id", quiet)
    page.goto(f"{site.base}/instances/{quiet}")
    expect(page.locator(".head .pill.stalled")).to_have_count(1)
    waits = page.locator("#waiting li")
    expect(waits).to_have_count(1)
    assert waits.first.get_attribute("data-waiting") == "agent"
    assert "waiting for the agent (think)" in waits.first.inner_text() and "idle" in waits.first.inner_text()
    shoot(page, project, "stalled.png", "#waiting")


def test_the_question_is_shown_as_asked_and_answered_from_the_page(project: Project, site: Site, page: Any) -> None:
    service = project.service()
    wid = at_question(service)
    log_in(page, site)
    page.goto(f"{site.base}/instances/{wid}")
    question = page.locator("#questions .question[data-step='confirm']")
    expect(question.locator(".prompt")).to_have_text("Deploy to staging?")  # its template filled in
    assert "expects one of: yes, no" in question.inner_text()
    assert "waiting for the user: Deploy to staging?" in page.inner_text("#waiting")
    assert [o.inner_text() for o in question.locator("select option").all()] == ["yes", "no"]
    shoot(page, project, "question.png", "#questions")
    question.locator("select").select_option("no")
    question.locator("button:has-text('Answer')").click()
    expect(page.locator("#questions")).to_have_count(0)  # answered: the page follows, nothing is asked any more
    assert service.state_read(wid).state["confirmed"] == "no"
    step = service.next_step(wid).step  # the agent's next call goes past the question (and runs the build)
    assert step["id"] == "done"


def test_a_wrong_answer_from_the_page_changes_nothing(project: Project, site: Site, page: Any) -> None:
    service = project.service()
    wid = at_question(service)
    version = service.status(wid).version
    log_in(page, site)
    page.goto(f"{site.base}/instances/{wid}")
    page.wait_for_selector("#questions")
    answered = page.evaluate("""async (id) => {
        const config = await (await fetch("api/config")).json();
        const reply = await fetch(`api/instances/${id}/answer`, { method: "POST",
            headers: { "X-Aromcp-Token": config.csrf, "Content-Type": "application/json" },
            body: JSON.stringify({ value: "maybe", step_id: "confirm" }) });
        return [reply.status, (await reply.json()).error];
    }""", wid)
    assert answered[0] == 400 and "Deploy to staging?" in answered[1] and "nothing was recorded" in answered[1]
    assert service.status(wid).version == version


def test_a_commands_output_shows_while_it_runs(project: Project, site: Site, page: Any) -> None:
    service = project.service()
    wid = at_question(service)
    service.answer(wid, "yes")
    log_in(page, site)
    runner = threading.Thread(target=lambda: service.next_step(wid), daemon=True)  # runs the build here
    runner.start()
    deadline = time.monotonic() + 20
    while not any(h.waiting_for == "command" for h in service.status(wid).steps_in_hand or []):
        assert time.monotonic() < deadline, "the build did not start"
        time.sleep(0.1)
    page.goto(f"{site.base}/instances/{wid}")
    stdout = page.locator("#commands pre.stdout")
    expect(stdout).to_contain_text("building part 1", timeout=5000)
    early = stdout.inner_text()
    assert "building part 6" not in early  # seen while it runs, not afterwards
    assert "command running" in page.inner_text("#waiting")
    shoot(page, project, "command-output.png", "#commands")
    expect(stdout).to_contain_text("building part 6", timeout=15000)
    expect(page.locator("#commands pre.stderr")).to_contain_text("warning: slow disk", timeout=15000)
    runner.join(30)
    assert service.status(wid).current_steps == ["done"]
