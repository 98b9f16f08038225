"""One question, one answer: answers sent at once (two tabs, a double click, the CLI beside
the page, the client's own form after the page's) are told the truth — exactly one is
recorded, and every other sender hears it was not.  Found by a person-at-the-page probe:
of 12 answers sent together, 2–4 were told "answered" while one was kept.  The same probe
found the page's cancel saying "done" for a run that had completed: pinned here too.

Each sender has a service of its own over one real SQLite file, as separate `ui`, `answer`
and server processes do; the page's route is driven through the real app.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from test_web_api import BASE, client
from web_helpers import Project

from aromcp_workflows.app import ServiceError

ASK_NAME = """name: ask-name
steps:
  - {id: think, type: agent_prompt, prompt: "think it over"}
  - id: name
    type: user_input
    prompt: "Release number?"
    validation: {pattern: "[0-9]+"}
    state_update: {path: raw.release}
"""


def at_question(service: Any, workflow: str = "watch-live") -> str:
    wid = service.start(workflow).workflow_id
    service.next_step(wid)
    assert service.step_complete(wid, "think", result="ok").next_step["type"] == "user_input"
    return str(wid)


def answer_at_once(project: Project, wid: str, values: list[str]) -> list[tuple[str, bool]]:
    """Each value answered from a service of its own, all released together."""
    services = [project.service() for _ in values]
    for service in services:
        service.status(wid)  # loaded before the race, so the answers meet at the store
    start, told = threading.Barrier(len(values)), []

    def send(service: Any, value: str) -> None:
        start.wait()
        try:
            service.answer(wid, value)
            told.append((value, True))
        except ServiceError as exc:
            assert exc.kind == "conflict", exc
            told.append((value, False))

    threads = [threading.Thread(target=send, args=pair) for pair in zip(services, values, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return told


def test_of_answers_sent_at_once_exactly_one_is_told_recorded_and_it_is_the_one_kept(project: Project) -> None:
    service = project.service()
    for _ in range(4):
        wid = at_question(service)
        told = answer_at_once(project, wid, ["yes", "no"] * 4)
        winners = [value for value, recorded in told if recorded]
        assert len(told) == 8 and len(winners) == 1, told
        assert service.state_read(wid).state["confirmed"] == winners[0]


def test_the_clients_form_answer_after_the_pages_is_refused_not_dropped_in_silence(project: Project) -> None:
    service = project.service()
    wid = at_question(service)
    service.answer(wid, "no")  # the person, at the page
    late = service.step_complete(wid, "confirm", result="yes", by="user")  # the client's own form, later
    assert late.success is False and "answered already" in (late.error or "")
    declined = service.step_complete(wid, "confirm", "failed", None, "declined", by="user")
    assert declined.success is False
    assert service.state_read(wid).state["confirmed"] == "no"
    assert service.step_complete(wid, "confirm", result="no").success  # the agent repeating itself stays harmless


def test_a_second_answer_from_the_page_is_409(project: Project) -> None:
    web, _, service = client(project, actions=True)
    wid = at_question(service)
    csrf = web.get("/api/config").json()["csrf"]
    headers = {"X-Aromcp-Token": csrf, "Origin": BASE}
    first = web.post(f"/api/instances/{wid}/answer", json={"value": "yes"}, headers=headers)
    second = web.post(f"/api/instances/{wid}/answer", json={"value": "no"}, headers=headers)
    assert (first.status_code, second.status_code) == (200, 409), (first.text, second.text)
    assert service.state_read(wid).state["confirmed"] == "yes"


def test_half_a_surrogate_pair_is_refused_in_words_by_the_page_and_the_service(project: Project) -> None:
    """A 500 from the page before (the store could not encode it); argv's undecodable bytes
    reach `aromcp-workflows answer` the same way."""
    (project.root / ".aromcp" / "workflows" / "ask-name.yaml").write_text(ASK_NAME)
    web, _, service = client(project, actions=True)
    wid = at_question(service, "ask-name")
    version = service.status(wid).version
    csrf = web.get("/api/config").json()["csrf"]
    refused = web.post(f"/api/instances/{wid}/answer", content=b'{"value": "12\\ud800"}',
                       headers={"X-Aromcp-Token": csrf, "Origin": BASE, "Content-Type": "application/json"})
    assert refused.status_code == 400, refused.text
    assert "half of a UTF-16 surrogate pair" in refused.json()["error"]
    with pytest.raises(ServiceError, match="nothing was recorded") as raised:
        service.answer(wid, "7\udcff")
    assert raised.value.kind == "invalid"
    assert service.status(wid).version == version  # nothing changed
    assert service.answer(wid, "12").answer == "12"


def test_the_reply_names_the_answer_as_it_was_recorded(project: Project) -> None:
    (project.root / ".aromcp" / "workflows" / "ask-name.yaml").write_text(ASK_NAME)
    service = project.service()
    wid = at_question(service, "ask-name")
    assert service.answer(wid, "  5\n").answer == "5"
    assert service.state_read(wid).state["release"] == "5"


def test_a_cancel_from_the_page_of_a_completed_run_is_refused_not_said_done(project: Project) -> None:
    """The page said "cancel: done" (200, success) while the run stayed completed."""
    web, _, service = client(project, actions=True)
    wid = service.start("watch-fail").workflow_id
    service.complete(wid, "success")
    csrf = web.get("/api/config").json()["csrf"]
    headers = {"X-Aromcp-Token": csrf, "Origin": BASE}
    refused = web.post(f"/api/instances/{wid}/cancel", headers=headers)
    assert refused.status_code == 409 and "has already completed" in refused.json()["error"]
    assert service.status(wid).status == "completed"
    other = service.start("watch-fail").workflow_id
    assert web.post(f"/api/instances/{other}/cancel", headers=headers).status_code == 200
    assert web.post(f"/api/instances/{other}/cancel", headers=headers).status_code == 200  # cancelled already: so be it
    assert service.status(other).status == "cancelled"
