"""A change made on a copy trusted without asking the store is still never wrong.

After `TRUST_AFTER` calls that found its copy current, a process stops asking the store
for the version before a change: the change's own compare-and-set says whether the copy
was current, and a call that changed nothing asks afterwards.  Two services on one store
(SQLite and PostgreSQL) take turns behind each other's back; every answer must be the one
a fresh copy gives.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aromcp_workflows.instances.live import TRUST_AFTER
from tests.server.srv_helpers import make_project

RELAY = """
name: relay
default_state:
  raw:
    answers: []
steps:
  - id: loop
    type: foreach
    items: "{{ Array.from({length: 40}, (_, i) => i) }}"
    steps:
      - id: think
        type: agent_prompt
        prompt: "round {{ item }}"
        state_update:
          path: raw.answers
          operation: append
"""


@pytest.fixture
def pair(tmp_path: Path, location: str) -> Iterator[tuple[Any, Any]]:
    from aromcp_workflows.app.service import WorkflowService

    project = make_project(tmp_path / "project", {"relay": RELAY})
    one, two = (WorkflowService(project_dir=project, store_path=location, home=tmp_path) for _ in range(2))
    yield one, two
    one.instances.store.close()
    two.instances.store.close()


def counting_versions(service: Any) -> list[str]:
    """Every question the service asks its store about an instance it holds a copy of:
    the version, the deltas since a version, a whole load."""
    asked: list[str] = []
    store = service.instances.store
    def counting(name: str, real: Any) -> Any:
        def counted(*args: Any) -> Any:
            asked.append(name)
            return real(*args)
        return counted

    for name in ("version", "deltas_since", "load"):
        setattr(store, name, counting(name, getattr(store, name)))
    return asked


def test_a_trusted_copy_skips_the_version_query_and_is_never_stale(pair: tuple[Any, Any]) -> None:
    one, two = pair
    asked = counting_versions(one)
    wid = one.start("relay").workflow_id
    step = one.next_step(wid).step
    for _ in range(TRUST_AFTER + 2):
        step = one.step_complete(wid, step["id"], result=step["definition"]["prompt"]).next_step
    before = len(asked)
    for _ in range(5):  # trusted now: a change asks nothing, its save checks the version
        step = one.step_complete(wid, step["id"], result=step["definition"]["prompt"]).next_step
    assert asked[before:] == [], "a trusted change still asked the store for the version"

    # the other service moves the instance on behind the first one's back
    theirs = two.next_step(wid).step
    assert theirs["id"] == step["id"]
    after = two.step_complete(wid, theirs["id"], result=theirs["definition"]["prompt"]).next_step
    # a call that changes nothing on the stale copy notices afterwards and answers currently
    assert one.next_step(wid).step["id"] == after["id"]
    # a change on a stale trusted copy: the compare-and-set fails inside, applied again
    two.step_complete(wid, after["id"], result=after["definition"]["prompt"])
    stale = one.step_complete(wid, after["id"], result="late")  # already done by the other
    assert stale.success is True  # completing twice is harmless ...
    answers = one.state_read(wid, ["raw.answers"]).state["raw.answers"]
    assert answers == [f"round {n}" for n in range(len(answers))]  # ... and changes nothing


def test_a_step_completed_on_a_trusted_copy_that_is_behind_is_not_refused(pair: tuple[Any, Any]) -> None:
    """The client got the next step from the other service; completing it here, where the
    trusted copy still waits on the previous one, must not be refused as 'not current'."""
    one, two = pair
    wid = one.start("relay").workflow_id
    step = one.next_step(wid).step
    for _ in range(TRUST_AFTER + 2):
        step = one.step_complete(wid, step["id"], result=step["definition"]["prompt"]).next_step
    newer = two.step_complete(wid, step["id"], result=step["definition"]["prompt"]).next_step
    done = one.step_complete(wid, newer["id"], result=newer["definition"]["prompt"])
    assert done.success is True and done.next_step is not None
    assert done.next_step["definition"]["prompt"] != newer["definition"]["prompt"]


def test_alternating_services_keep_every_answer_once(pair: tuple[Any, Any]) -> None:
    one, two = pair
    wid = one.start("relay").workflow_id
    services = [one] * (TRUST_AFTER + 3) + [two, one, one, two, two, one] * 5
    for service in services:
        step = service.next_step(wid).step
        if step is None:
            break
        service.step_complete(wid, step["id"], result=step["definition"]["prompt"])
    answers = two.state_read(wid, ["raw.answers"]).state["raw.answers"]
    assert answers == [f"round {n}" for n in range(40)]


def test_a_copy_behind_one_full_snapshot_catches_up_by_deltas(pair: tuple[Any, Any]) -> None:
    """A snapshot keeps the deltas since the previous one: a copy a hundred commits behind,
    across a full snapshot, applies them instead of loading the instance whole."""
    from aromcp_workflows.instances.commits import MAX_DELTAS

    one, two = pair
    wid = one.start("relay").workflow_id
    assert two.state_read(wid, ["raw.answers"]).state["raw.answers"] == []  # two holds a copy now
    for n in range(MAX_DELTAS + 3):
        one.state_update(wid, [{"path": "raw.n", "value": n}, {"path": "raw.answers", "operation": "append",
                                                              "value": n}][: 1 + (n < 3)])
    assert two.instances.store.load(wid).snapshot_version > 1, "no full snapshot was written"
    asked = counting_versions(two)
    assert two.state_read(wid, ["raw.n"]).state["raw.n"] == MAX_DELTAS + 2
    assert "load" not in asked and "deltas_since" in asked, asked
    # the caught-up copy writes on top of the other process's snapshot, not of its own old one
    two.state_update(wid, [{"path": "raw.answers", "operation": "append", "value": "from two"}])
    one.state_update(wid, [{"path": "raw.answers", "operation": "append", "value": "from one"}])
    for service in (one, two):
        service.instances.forget(wid)
        assert service.state_read(wid, ["raw.answers"]).state["raw.answers"] == [0, 1, 2, "from two", "from one"]


def test_a_copy_behind_two_full_snapshots_is_reloaded(pair: tuple[Any, Any]) -> None:
    """The deltas a lagging copy would need are gone once a second full snapshot was
    written: it is loaded afresh (this once looped forever, asking the store again and again)."""
    import threading

    from aromcp_workflows.instances.commits import MAX_DELTAS

    one, two = pair
    wid = one.start("relay").workflow_id
    assert two.state_read(wid, ["raw.answers"]).state["raw.answers"] == []  # two holds a copy now
    for n in range(2 * MAX_DELTAS + 5):
        one.state_update(wid, [{"path": "raw.n", "value": n}])
    asked = counting_versions(two)
    seen: list[Any] = []
    reader = threading.Thread(target=lambda: seen.append(two.state_read(wid, ["raw.n"])), daemon=True)
    reader.start()
    reader.join(30)
    assert seen and seen[0].state["raw.n"] == 2 * MAX_DELTAS + 4, "the lagging copy never caught up"
    assert "load" in asked, asked


def test_a_copy_behind_catches_up_in_one_trip_where_the_store_allows(pair: tuple[Any, Any]) -> None:
    """PostgreSQL answers "is this copy current?" and "what changed since?" in one
    statement, so a copy behind another replica's commit costs one round trip; SQLite asks
    the cheap version first (one SELECT in process) and reads the deltas only when behind."""
    one, two = pair
    wid = one.start("relay").workflow_id
    step = one.next_step(wid).step
    two.step_complete(wid, step["id"], result=step["definition"]["prompt"])  # one's copy is behind now
    asked = counting_versions(one)
    assert one.next_step(wid).step["definition"]["prompt"] == "round 1"
    expected = ["deltas_since"] if one.instances.store.check_with_deltas else ["version", "deltas_since"]
    assert asked == expected
    asked.clear()
    one.next_step(wid)  # current: one question, never a load
    assert asked == (["deltas_since"] if one.instances.store.check_with_deltas else ["version"])


def test_copies_catching_up_across_each_others_snapshots_keep_the_store_whole(pair: tuple[Any, Any]) -> None:
    """Each process catches up across a snapshot the other wrote, then commits on top of
    it: its copy must know which snapshot the store now holds (a copy that remembered its
    own older one once wrote it back, and a load applied the deltas in between twice)."""
    from aromcp_workflows.instances.commits import MAX_DELTAS

    one, two = pair
    wid = one.start("relay").workflow_id
    assert two.state_read(wid, ["raw.answers"]).state["raw.answers"] == []  # two holds a copy now
    expected: list[Any] = []
    for n in range(MAX_DELTAS + 3):  # one writes a snapshot on the way
        one.state_update(wid, [{"path": "raw.answers", "operation": "append", "value": n}])
        expected.append(n)
    for rounds in range(3):  # then they take turns, each catching up across the other's snapshot
        for name, service in (("two", two), ("one", one)):
            assert service.state_read(wid, ["raw.answers"]).state["raw.answers"] == expected  # caught up
            service.state_update(wid, [{"path": "raw.answers", "operation": "append", "value": f"{name}{rounds}"}])
            expected.append(f"{name}{rounds}")
    for service in (one, two):
        service.instances.forget(wid)
        assert service.state_read(wid, ["raw.answers"]).state["raw.answers"] == expected
    stored = one.instances.store.load(wid)
    assert stored.state["states"]["main"]["raw"]["answers"] == expected


@pytest.mark.parametrize("seed", range(4))
def test_two_processes_in_random_turns_across_many_snapshots(pair: tuple[Any, Any], seed: int,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Random turns of two processes — reads that catch up, appends, sets, copies
    forgotten — with a snapshot every 4 deltas, so copies keep catching up across each
    other's snapshots: every read, and a fresh load after each turn, gives the model's list."""
    import random

    from aromcp_workflows.instances import commits

    monkeypatch.setattr(commits, "MAX_DELTAS", 4)
    one, two = pair
    wid = one.start("relay").workflow_id
    pick, expected = random.Random(seed), []
    for turn in range(60):
        service = pick.choice((one, two))
        action = pick.choices(("read", "append", "set", "forget"), weights=(3, 5, 1, 1))[0]
        if action == "read":
            assert service.state_read(wid, ["raw.answers"]).state["raw.answers"] == expected, turn
        elif action == "append":
            service.state_update(wid, [{"path": "raw.answers", "operation": "append", "value": turn}])
            expected.append(turn)
        elif action == "set":
            expected = expected[-3:]
            service.state_update(wid, [{"path": "raw.answers", "value": expected}])
        else:
            service.instances.forget(wid)
        assert one.instances.store.load(wid).state["states"]["main"]["raw"]["answers"] == expected, turn
    for service in (one, two):
        assert service.state_read(wid, ["raw.answers"]).state["raw.answers"] == expected
