"""What a person at the page trips over, in a real browser (Debian's Chromium through
Playwright), against the real `aromcp-workflows ui` process: an answer half typed while the
run changes elsewhere, a double click on Answer, clocks that must move on an open page, an
agent going silent while the page is open, a finished command's output after a reload, a
command's colour escapes, and a window 400 px wide.

As in test_browser_live.py, this test process changes the instances through the service, as
an agent's server would.  The ui runs with `AROMCP_STALE_AFTER=3`: "stalled" takes three
seconds, not ten minutes.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect
from test_browser import log_in, shoot
from web_helpers import Project, Site

pytestmark = pytest.mark.slow
STALE_AFTER_S = 3

# Two small workflows of this file's own: a free-text question, and a command given as input.
FLOWS = {
    "person-ask.yaml": """\
name: person-ask
description: "An agent step, a free-text question, an agent step"
version: "1.0.0"
steps:
  - id: think
    type: agent_prompt
    prompt: "think it over"
  - id: ask
    type: user_input
    prompt: "What should the release be called?"
    state_update: {path: raw.answer}
  - id: done
    type: agent_prompt
    prompt: "say done"
""",
    "person-cmd.yaml": """\
name: person-cmd
description: "One server-side command given as input, then an agent step"
version: "1.0.0"
inputs:
  cmd: {type: string, default: "echo hi"}
steps:
  - id: think
    type: agent_prompt
    prompt: "think it over"
  - id: build
    type: shell_command
    command: "{{ inputs.cmd | raw }}"
    on_error: continue
  - id: done
    type: agent_prompt
    prompt: "say done"
""",
}


@pytest.fixture
def site(project: Project, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    for name, text in FLOWS.items():
        (project.root / ".aromcp" / "workflows" / name).write_text(text)
    monkeypatch.setenv("AROMCP_STALE_AFTER", str(STALE_AFTER_S))  # the ui process reads it
    running = Site.start(project, "--actions")
    yield running
    running.stop()


def asking(service: Any) -> str:
    """A person-ask instance past its agent step, waiting on its free-text question."""
    wid = service.start("person-ask").workflow_id
    service.next_step(wid)
    service.step_complete(wid, "think", result="ok")
    return wid


def running_command(service: Any, command: str) -> tuple[str, threading.Thread]:
    """A person-cmd instance whose command runs (in a thread of this process, as in an agent's server)."""
    wid = service.start("person-cmd", {"cmd": command}).workflow_id
    service.next_step(wid)
    runner = threading.Thread(target=lambda: service.step_complete(wid, "think", result="ok"), daemon=True)
    runner.start()
    deadline = time.monotonic() + 20
    while not any(h.waiting_for == "command" for h in service.status(wid).steps_in_hand or []):
        assert time.monotonic() < deadline, "the command did not start"
        time.sleep(0.05)
    return wid, runner


def seconds(text: str) -> float:
    """The first duration in a text ("900 ms", "5.6 s", "1 m 3 s"), in seconds."""
    found = re.search(r"(?:(\d+) m )?(\d+(?:\.\d+)?) (ms|s)\b", text)
    assert found, text
    minutes, value, unit = found.groups()
    return int(minutes or 0) * 60 + float(value) / (1000 if unit == "ms" else 1)


def test_a_half_typed_answer_survives_a_change_elsewhere_in_the_run(project: Project, site: Site, page: Any) -> None:
    service = project.service()
    wid = asking(service)
    log_in(page, site)
    page.goto(f"{site.base}/instances/{wid}")
    field = page.locator("#questions input[name=answer]")
    field.click()
    page.keyboard.type("Release Halcyon")
    for _ in range(4):
        page.keyboard.press("ArrowLeft")  # the caret before "cyon"
    version = service.status(wid).version
    service.state_update(wid, [{"path": "raw.progress", "value": "indexing"}])  # the agent writes meanwhile
    expect(page.locator(".head .facts")).to_contain_text(f"version {version + 1}")  # the page has redrawn
    expect(page.locator(".tree .row[data-path='raw.progress']")).to_contain_text("indexing")
    page.keyboard.type("-")
    expect(field).to_have_value("Release Hal-cyon")  # the text, the caret and the focus kept
    assert page.evaluate("() => document.activeElement && document.activeElement.name") == "answer"
    page.keyboard.press("Enter")
    expect(page.locator("#questions")).to_have_count(0)
    assert service.state_read(wid).state["answer"] == "Release Hal-cyon"


def test_a_double_click_on_answer_sends_one_answer(project: Project, site: Site, page: Any) -> None:
    service = project.service()
    wid = asking(service)
    log_in(page, site)
    page.goto(f"{site.base}/instances/{wid}")
    held: list[Any] = []
    page.route("**/answer", lambda route: held.append(route))  # each answer waits here until let through
    field = page.locator("#questions input[name=answer]")
    button = page.locator("#questions button:has-text('Answer')")
    field.fill("first")
    button.dblclick()
    page.wait_for_timeout(500)
    assert len(held) == 1, f"{len(held)} answers sent by a double click"
    expect(button).to_be_disabled()  # while it is in flight
    expect(field).to_be_disabled()
    held.pop().fulfill(status=503, content_type="application/json", body='{"error": "the store is busy"}')
    expect(page.locator("#questions .note.error")).to_have_text("not answered: the store is busy")
    expect(button).to_be_enabled()  # refused: the person may send it again
    expect(field).to_be_enabled()
    expect(field).to_have_value("first")
    page.unroute("**/answer")
    button.click()
    expect(page.locator("#questions")).to_have_count(0)
    assert service.state_read(wid).state["answer"] == "first"


def test_an_open_pages_clocks_move_and_a_command_is_never_stalled(project: Project, site: Site, page: Any) -> None:
    service = project.service()
    wid, runner = running_command(service, "for i in $(seq 1 14); do echo tick $i; sleep 0.5; done")
    log_in(page, site)
    page.goto(f"{site.base}/instances/{wid}")
    line = page.locator("#waiting li[data-waiting=command]")
    expect(line).to_contain_text("command running")
    first, head = seconds(line.inner_text()), seconds(page.inner_text(".head .facts").split("duration", 1)[1])
    page.wait_for_timeout(2000 + STALE_AFTER_S * 1000)  # past AROMCP_STALE_AFTER, no reload, no new version
    later, head_later = seconds(line.inner_text()), seconds(page.inner_text(".head .facts").split("duration", 1)[1])
    assert later >= first + 4, f"the command's clock: {first} s, then {later} s five seconds later"
    assert head_later >= head + 4, f"the run's duration: {head} s, then {head_later} s five seconds later"
    expect(page.locator("#main .pill.stalled")).to_have_count(0)  # a command at work is not a silent agent
    runner.join(30)


def test_an_agent_going_silent_shows_stalled_on_the_open_page(project: Project, site: Site, page: Any) -> None:
    service = project.service()
    quiet = service.start("person-ask").workflow_id
    service.next_step(quiet)  # the agent took `think` and goes silent
    asked = asking(service)  # and a question, as old: a person is awaited, never "stalled"
    log_in(page, site)
    page.goto(f"{site.base}/instances/{quiet}")
    agent = page.locator("#waiting li[data-waiting=agent]")
    expect(agent).to_contain_text("idle")
    assert seconds(agent.inner_text()) < STALE_AFTER_S
    expect(page.locator(".head .pill.stalled")).to_have_count(0)
    page.evaluate("window.__marker = 'same page'")  # gone if the page reloaded
    expect(page.locator(".head .pill.stalled")).to_have_count(1, timeout=(STALE_AFTER_S + 2) * 1000)
    expect(agent.locator(".pill.stalled")).to_have_count(1)
    expect(page.locator("#waiting .note.error")).to_contain_text("Stalled")
    assert seconds(agent.inner_text()) >= STALE_AFTER_S
    assert page.evaluate("window.__marker") == "same page"
    page.goto(f"{site.base}/instances/{asked}")
    expect(page.locator("#waiting li[data-waiting=user]")).to_have_count(1)
    page.wait_for_timeout(1500)  # the page's clock has ticked since
    expect(page.locator("#main .pill.stalled")).to_have_count(0)


def test_a_finished_commands_output_is_shown_after_a_reload(project: Project, site: Site, page: Any) -> None:
    service = project.service()
    command = "echo 'build step A42 ok'; echo 'step B43 FAILED' >&2; exit 3"
    wid = service.start("person-cmd", {"cmd": command}).workflow_id
    service.next_step(wid)
    service.step_complete(wid, "think", result="ok")  # runs the command to its end here
    assert service.status(wid).current_steps == ["done"]
    log_in(page, site)
    page.goto(f"{site.base}/instances/{wid}")  # opened after it ended: it was never seen running
    command = page.locator("#commands .command")
    expect(command.locator("pre.stdout")).to_contain_text("build step A42 ok")
    expect(command.locator("pre.stderr")).to_contain_text("step B43 FAILED")
    expect(command.locator(".pill")).to_have_text("done")
    expect(command).to_contain_text("exit code 3")
    page.reload()
    expect(page.locator("#commands pre.stderr")).to_contain_text("step B43 FAILED")


def test_a_commands_colour_escapes_are_not_shown(project: Project, site: Site, page: Any) -> None:
    service = project.service()
    command = ("printf '\\033[31mred1\\033[0m <b>bold</b> \\033]0;a title\\007done1\\n'; sleep 4; "
               "printf '\\033[1;32mgreen2\\033[0m\\033[K\\n'")
    log_in(page, site)
    wid, runner = running_command(service, command)
    page.goto(f"{site.base}/instances/{wid}")
    stdout = page.locator("#commands pre.stdout")
    expect(stdout).to_contain_text("red1", timeout=5000)
    live = stdout.inner_text()
    assert "green2" not in live  # seen while it runs
    assert live.startswith("red1 <b>bold</b> done1"), repr(live)  # the escapes gone, the text (HTML too) kept as text
    assert page.locator("#commands b").count() == 0
    runner.join(30)
    expect(stdout).to_contain_text("green2", timeout=5000)
    shown = stdout.inner_text()
    assert "\x1b" not in shown and "[31m" not in shown and "[0m" not in shown and "a title" not in shown, repr(shown)
    assert "green2\n" in shown + "\n"


def test_a_400_px_window(project: Project, site: Site, page: Any) -> None:
    service = project.service()
    wid = asking(service)
    page.set_viewport_size({"width": 400, "height": 800})
    log_in(page, site)
    page.wait_for_selector("table.instances tbody tr")
    assert page.evaluate("document.documentElement.scrollWidth") <= 400, "the list scrolls sideways"
    shoot(page, project, "narrow-list.png")
    page.goto(f"{site.base}/instances/{wid}")
    page.wait_for_selector("#questions input")
    page.wait_for_selector(".timeline table")
    assert page.evaluate("document.documentElement.scrollWidth") <= 400, "the instance page scrolls sideways"
    for selector in (".actions button.danger", "#questions button", "#questions input", ".head h1"):
        box = page.locator(selector).bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 400, f"{selector} is cut off: {box}"
    widths = page.evaluate("[...document.querySelectorAll('#main .panel')].map((p) => p.getBoundingClientRect().right)")
    assert max(widths) <= 400, f"a panel reaches past the window: {widths}"
    shoot(page, project, "narrow-instance.png")
    page.screenshot(path=str(project.root.parent / "screenshots" / "narrow-instance-full.png"), full_page=True)


def test_after_the_ui_restarts_an_open_page_asks_to_log_in_again(project: Project, site: Site, page: Any) -> None:
    """A restarted `ui` has forgotten the session: the page said "reconnecting" until the
    person acted (and then dropped what they did); it now shows the login panel by itself."""
    service = project.service()
    wid = asking(service)
    log_in(page, site)
    page.goto(f"{site.base}/instances/{wid}")
    expect(page.locator("#live")).to_have_text("live")
    port = site.base.rsplit(":", 1)[1]
    site.stop()
    again = Site.start(project, "--actions", "--port", port)  # the same address, a new process
    try:
        expect(page.locator(".login-panel")).to_be_visible(timeout=15_000)
        assert "one-time login URL" in page.inner_text(".login-panel")
    finally:
        again.stop()
