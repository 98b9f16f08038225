"""Commit deltas: a commit writes what it changed; a load rebuilds exactly what was committed.

Every test runs on SQLite and on a real PostgreSQL (`location`).  The mirror tests drive
real workflows through the MCP server in memory and, after every commit, load the instance
back from the store and compare it with the live run: any change a delta missed (a state
value, a thread, a parallel group, a new state of an include) shows up at the commit that
lost it.
"""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from aromcp_workflows.instances.commits import MAX_DELTAS, encode, record_of, threads_for_run
from aromcp_workflows.instances.live import LiveCopies
from aromcp_workflows.instances.registry import InstanceRegistry
from aromcp_workflows.store import InstanceRecord, SqliteStore, StoreError, open_store
from aromcp_workflows.store.schema import MIGRATIONS
from tests.server.srv_helpers import ProtocolAgent, make_project, ok

RICH = """
name: rich
imports: ["kid.yaml"]
default_state:
  raw:
    big: "{{ Array.from({length: 2000}, (_, i) => 'item-' + i) }}"
    n: 0
    gone: "soon"
    notes: []
state_schema:
  computed:
    doubled:
      from: raw.n
      transform: "input * 2"
    odd:
      from: raw.n
      transform: "input % 2 === 1 ? 'odd' : undefined"
steps:
  - id: rounds
    type: while
    condition: "{{ n < 5 }}"
    max_iterations: 10
    body:
      - id: ask
        type: agent_prompt
        prompt: "round {{ n }} of {{ big.length }}, doubled {{ doubled }}"
        state_update:
          path: raw.notes
          operation: append
      - id: bump
        type: state_update
        path: raw.n
        operation: increment
  - id: drop
    type: state_update
    path: raw.gone
    operation: delete
  - id: inc
    type: include_workflow
    workflow: kid
    state_update:
      path: raw.kid_result
  - id: echo
    type: shell_command
    command: "echo {{ n }}"
    state_update:
      path: raw.echoed
  - id: fan
    type: parallel_foreach
    items: "{{ ['a', 'b', 'c'] }}"
    sub_agent_task: work
sub_agent_tasks:
  work:
    steps:
      - id: think
        type: agent_prompt
        prompt: "work on {{ item }}"
        state_update:
          path: raw.notes
          operation: append
"""
KID = """
name: kid
default_state:
  raw:
    greeting: ""
steps:
  - id: hello
    type: agent_prompt
    prompt: "say hello"
    state_update:
      path: raw.greeting
"""
LOOP = """
name: loop
inputs:
  items:
    type: array
default_state:
  raw:
    last: ""
steps:
  - id: each
    type: foreach
    items: "{{ inputs.items }}"
    steps:
      - id: look
        type: agent_prompt
        prompt: "file {{ item }}"
        state_update:
          path: raw.last
"""
FLAKY = """
name: flaky
default_state:
  raw:
    tries: []
steps:
  - id: fan
    type: parallel_foreach
    items: "{{ ['ok', 'bad', 'ok2', 'bad2'] }}"
    max_parallel: 2
    sub_agent_task: work
    on_sub_agent_error:
      strategy: retry_failed
      max_retries: 1
      collect_errors: true
      error_state_path: raw.errors
sub_agent_tasks:
  work:
    error_handling:
      cleanup_on_error:
        - type: state_update
          path: raw.tries
          operation: append
          value: "cleanup {{ item }}"
    steps:
      - id: try
        type: agent_prompt
        prompt: "try {{ item }}"
        state_update:
          path: raw.tries
          operation: append
      - id: check
        type: shell_command
        command: "test {{ item.startsWith('bad') ? 1 : 0 }} = 0"
"""


def stored_form(value: Any) -> Any:
    return json.loads(encode(value))


@pytest.fixture
def mirror(monkeypatch: pytest.MonkeyPatch) -> list[InstanceRecord]:
    """After every commit: the store, loaded afresh, holds exactly the live run."""
    loaded: list[InstanceRecord] = []
    commit = InstanceRegistry._commit

    def checked(self: InstanceRegistry, live: Any, deferred: bool = False) -> bool:
        saved = commit(self, live, deferred)
        current = live.record
        if live.unconfirmed is not None:  # sent and not waited for (a tool call on PostgreSQL): wait here
            pending, current = live.unconfirmed
            pending.result()
        expected = record_of(live.run, current)
        stored = self.store.load(live.run.workflow_id)
        assert stored.version == current.version
        assert stored.state == stored_form(expected.state), "state differs from the live run"
        assert stored.threads == stored_form(expected.threads), "threads differ from the live run"
        assert (stored.status, stored.error, stored.current_steps) == (
            expected.status, expected.error, expected.current_steps)
        assert threads_for_run(stored) == stored_form(live.run.to_json()["threads"]), "a reload resumes elsewhere"
        loaded.append(stored)
        return saved

    monkeypatch.setattr(InstanceRegistry, "_commit", checked)
    return loaded


@pytest.fixture
def service(tmp_path: Path, location: str) -> Iterator[Any]:
    """An in-process service on the store, closed afterwards (a PostgreSQL pool left open
    would be reaped by the garbage collector from one of its own threads)."""
    from aromcp_workflows.app.service import WorkflowService

    project = make_project(tmp_path / "project", {"rich": RICH, "kid": KID, "loop": LOOP})
    made = WorkflowService(project_dir=project, store_path=location, home=tmp_path)
    yield made
    made.instances.store.close()


def server_on(tmp_path: Path, location: str, extra: dict[str, str] | None = None) -> Any:
    from aromcp_workflows.app.service import WorkflowService
    from aromcp_workflows.server.mcp import build_server

    project = make_project(tmp_path / "project", {"rich": RICH, "kid": KID, **(extra or {})})
    return build_server(lambda: WorkflowService(project_dir=project, store_path=location, home=tmp_path))


async def run_to_end(server: Any, workflow: str, inputs: dict[str, Any] | None = None) -> dict[str, Any]:
    async with Client(server) as client:
        started = await ok(client, "workflow_start", {"workflow": workflow, "inputs": inputs or {}})
        final = await ProtocolAgent(client, started["workflow_id"]).run()
        state = await ok(client, "workflow_state_read", {"workflow_id": started["workflow_id"]})
        return {"final": final, "state": state["state"]}


def test_every_commit_of_a_rich_workflow_loads_back_exactly(tmp_path: Path, location: str,
                                                            mirror: list[InstanceRecord]) -> None:
    outcome = asyncio.run(run_to_end(server_on(tmp_path, location), "rich"))
    assert outcome["final"]["status"] == "completed", outcome["final"]
    state = outcome["state"]
    assert state["n"] == 5 and state["doubled"] == 10 and "gone" not in state and state["odd"] == "odd"
    assert len(state["notes"]) == 8 and state["echoed"].strip() == "5"
    assert any(r.deltas > 0 for r in mirror), "no commit was written as a delta"


def test_concurrent_sub_agents_commit_deltas_that_load_back(tmp_path: Path, location: str,
                                                            mirror: list[InstanceRecord]) -> None:
    outcome = asyncio.run(run_to_end(server_on(tmp_path, location), "fanout",
                                     {"items": [f"i{n}" for n in range(8)], "per_task": 3}))
    assert outcome["final"]["status"] == "completed", outcome["final"]
    assert outcome["state"]["count"] == 24 and len(outcome["state"]["shared"]) == 24
    assert max(r.deltas for r in mirror) > 5


def test_failing_and_retried_sub_agents_commit_deltas_that_load_back(tmp_path: Path, location: str,
                                                                     mirror: list[InstanceRecord]) -> None:
    """Failure, cleanup, retry and cancellation touch threads other than the caller's."""
    server = server_on(tmp_path, location, {"flaky": FLAKY})
    outcome = asyncio.run(run_to_end(server, "flaky"))
    assert outcome["final"]["status"] == "failed", outcome["final"]
    tries = outcome["state"]["tries"]
    assert tries.count("cleanup bad") == 2 and tries.count("did: try bad") == 2  # tried, retried once
    assert len(mirror) > 10


def _differences(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in _differences(a.get(k), b.get(k), f"{path}.{k}")]
    return [] if a == b else [f"{path}: {str(a)[:200]} != {str(b)[:200]}"]


class TwoReplicas:
    """Two in-process servers on one store; every call goes to one picked at random, so
    each keeps catching up with what the other committed."""

    def __init__(self, clients: list[Any], seed: int) -> None:
        self.clients, self.random = clients, random.Random(seed)

    async def call_tool(self, name: str, args: dict[str, Any]) -> Any:
        return await self.random.choice(self.clients).call_tool(name, args)


class OneCallAtATime(ProtocolAgent):
    """Runs sub-agent tasks one after another: with one call in flight at a time, no
    commit lands between a catch-up and its check, so every catch-up is compared (and
    the seeded routing makes the run the same every time)."""

    async def act(self, task_id: str | None, step: dict[str, Any]) -> Any:
        if step["type"] in ("parallel_tasks", "wait"):
            tasks = step["definition"].get("tasks") or [{"task_id": t} for t in step["definition"]["task_ids"]]
            for task in tasks:
                await self.run(task["task_id"])
            return None
        return self.answerer(step)


@pytest.fixture
def verified_catch_up(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, location: str) -> Iterator[list[str]]:
    """After every catch-up: the live run is exactly what a fresh load of the store gives.
    Yields the kinds of delta operation ("s", "d", "a") of each verified catch-up."""
    from aromcp_workflows.app.service import WorkflowService

    caught: list[str] = []
    apply = LiveCopies._apply  # both ways of catching up (version check first, or in one trip) end here
    fresh = WorkflowService(project_dir=tmp_path, store_path=location, home=tmp_path, all_projects=True).instances

    def checked(self: LiveCopies, live: Any, progress: Any) -> bool:
        done = apply(self, live, progress)
        if done:
            fresh.forget(live.run.workflow_id)
            with fresh.copies.current(live.run.workflow_id) as reloaded:
                pass
            if reloaded.record.version != live.record.version:
                return done  # the other replica committed meanwhile: nothing to compare with
            mine, theirs = stored_form(live.run.to_json()), stored_form(reloaded.run.to_json())
            assert mine == theirs, ("caught up wrongly", _differences(mine, theirs))
            assert live.baseline.sections == reloaded.baseline.sections
            caught.append("".join(sorted({op[0] for text in progress.deltas for op in json.loads(text)})))
        return done

    monkeypatch.setattr(LiveCopies, "_apply", checked)
    yield caught
    fresh.store.close()


@pytest.mark.parametrize(("workflow", "inputs"), [("rich", {}), ("flaky", {}),
                                                  ("fanout", {"items": ["a", "b", "c", "d", "e", "f"], "per_task": 4})])
def test_a_replica_catches_up_by_deltas_with_what_the_other_committed(
        tmp_path: Path, location: str, verified_catch_up: list[str], workflow: str,
        inputs: dict[str, Any]) -> None:
    first, second = server_on(tmp_path, location, {"flaky": FLAKY}), server_on(tmp_path, location)

    async def drive() -> dict[str, Any]:
        async with Client(first) as one, Client(second) as two:
            both = TwoReplicas([one, two], seed=len(workflow))
            started = await ok(both, "workflow_start", {"workflow": workflow, "inputs": inputs})
            final = await OneCallAtATime(both, started["workflow_id"]).run()
            return {"final": final, "state": (await ok(both, "workflow_state_read",
                                                       {"workflow_id": started["workflow_id"]}))["state"]}

    outcome = asyncio.run(drive())
    assert outcome["final"]["status"] == ("failed" if workflow == "flaky" else "completed"), outcome["final"]
    if workflow == "fanout":
        assert outcome["state"]["count"] == 24 and len(outcome["state"]["shared"]) == 24
    if workflow == "rich":
        assert outcome["state"]["n"] == 5 and len(outcome["state"]["notes"]) == 8
        assert any("a" in kinds for kinds in verified_catch_up), "no catch-up applied an append"
    assert len(verified_catch_up) >= 3, "the replicas never caught up by deltas"


def test_a_step_writes_what_it_changed_not_the_big_list(service: Any) -> None:
    """The store grows by the change: each commit's delta is small next to a 2,000-item
    list it does not touch, and a full snapshot comes only after MAX_DELTAS deltas."""
    wid = service.start("rich").workflow_id
    step = service.next_step(wid).step
    sizes = []
    store = service.instances.store
    for _ in range(4):
        step = service.step_complete(wid, step["id"], result="x").next_step
        record = store.load(wid)
        sizes.append((record.deltas, record.delta_bytes, record.body_bytes))
    assert [d for d, _, _ in sizes] == [2, 3, 4, 5]  # the first delivery was delta 1
    body = sizes[-1][2]
    assert body > 20_000  # the list is in the snapshot ...
    assert all(b / d < 2_000 for d, b, _ in sizes), sizes  # ... and in no delta


def test_an_append_to_a_long_list_writes_the_new_item_not_the_list(service: Any) -> None:
    """`append` to a 2,000-item list stores the appended item; a batch that only appends
    stores what it appended; a `set` after appends stores the list whole.  A reload gives
    the exact list every time."""
    wid = service.start("rich").workflow_id
    store = service.instances.store

    def grows_by(*updates: dict[str, Any]) -> int:
        before = store.load(wid).delta_bytes
        service.state_update(wid, list(updates))
        return store.load(wid).delta_bytes - before

    one = grows_by({"path": "raw.big", "operation": "append", "value": "one more"})
    two = grows_by({"path": "raw.big", "operation": "append", "value": "a"},
                   {"path": "raw.big", "operation": "append", "value": "b"})
    assert one < 300 and two < 300, (one, two)
    replaced = grows_by({"path": "raw.big", "operation": "append", "value": "c"},
                        {"path": "raw.big[0]", "value": "first"})
    assert replaced > 20_000, replaced  # not appends only: the list is written whole
    expected = ["first", *[f"item-{i}" for i in range(1, 2000)], "one more", "a", "b", "c"]
    assert store.load(wid).state["states"]["main"]["raw"]["big"] == expected
    service.instances.forget(wid)
    assert service.state_read(wid, ["raw.big"]).state["raw.big"] == expected


def test_an_append_delta_that_does_not_fit_the_stored_list_is_refused(location: str) -> None:
    store = open_store(location)
    record = InstanceRecord(workflow_id="wf_app", workflow="w", project_dir="/p", state={"l": [1, 2]},
                            threads={})
    store.create(record)
    store.save(record, 1, delta=encode([["a", "state", ["l"], 2, [3, 4]]]))
    assert store.load("wf_app").state == {"l": [1, 2, 3, 4]}
    store.save(record, 2, delta=encode([["a", "state", ["l"], 2, [5]]]))  # the store holds 4 items
    with pytest.raises(StoreError, match=r"appends to \['l'\] after 2 items, but the store holds 4 items"):
        store.load("wf_app")
    store.close()


def test_a_step_inside_a_long_foreach_does_not_rewrite_its_items(service: Any) -> None:
    """A foreach's items are stored once when the loop starts, not with every step's thread."""
    items = [f"a-fairly-long-item-name-{n}" for n in range(5000)]
    wid = service.start("loop", {"items": items}).workflow_id
    step = service.next_step(wid).step
    store = service.instances.store
    before = store.load(wid)
    for _ in range(5):
        step = service.step_complete(wid, step["id"], result="r").next_step
    after = store.load(wid)
    assert after.deltas - before.deltas == 5
    assert (after.delta_bytes - before.delta_bytes) / 5 < 1_000, after.delta_bytes - before.delta_bytes
    assert len(encode(items)) > 100_000  # what each step's thread used to carry
    service.instances.forget(wid)  # a reload puts the items back under the loop
    assert service.next_step(wid).step["definition"]["prompt"] == "file a-fairly-long-item-name-5"


def test_a_full_snapshot_replaces_the_deltas_after_max_deltas(service: Any) -> None:
    from aromcp_workflows.state import Update

    wid = service.start("rich").workflow_id
    for n in range(MAX_DELTAS + 5):
        service.state_update(wid, [Update(path="raw.counter", value=n).__dict__])
    record = service.instances.store.load(wid)
    assert record.version == MAX_DELTAS + 6
    assert record.snapshot_version == MAX_DELTAS + 2 and record.deltas == 4
    assert record.state["states"]["main"]["raw"]["counter"] == MAX_DELTAS + 4
    service.instances.forget(wid)  # the next call reloads from snapshot + deltas
    assert service.state_read(wid, ["raw.counter"]).state["raw.counter"] == MAX_DELTAS + 4


def test_a_version_1_sqlite_store_migrates_and_loads_the_same(tmp_path: Path) -> None:
    """A store written before deltas (schema 1: the whole body in the instance row) opens,
    migrates, and its instances load exactly as they were, then take deltas."""
    path = tmp_path / "old.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)")
    for sql in MIGRATIONS[0][1]:
        conn.execute(sql)
    conn.execute("INSERT INTO schema_version VALUES (1, 'then')")
    state = {"states": {"main": {"raw": {"a": [1, 2, 3]}}}}
    conn.execute("INSERT INTO instances VALUES ('wf_old', 'w', '/p', 'waiting', '{\"d\":1}', '{}', ?, ?, "
                 "'[\"s1\"]', NULL, 7, 't0', 't1')", (json.dumps(state), json.dumps({"main": {"x": 1}})))
    conn.commit()
    conn.close()
    store = SqliteStore(path)
    assert store.migrate() == (1, MIGRATIONS[-1][0])
    record = store.load("wf_old")
    assert (record.state, record.threads, record.version, record.definition) == (
        state, {"main": {"x": 1}}, 7, {"d": 1})
    assert (record.snapshot_version, record.deltas) == (7, 0)
    record.state["states"]["main"]["raw"]["a"] = [4]
    store.save(record, 7, delta=encode([["s", "state", ["states", "main", "raw", "a"], [4]]]))
    again = store.load("wf_old")
    assert again.state == {"states": {"main": {"raw": {"a": [4]}}}} and again.deltas == 1
    store.close()


def test_store_applies_set_and_delete_operations_in_order(location: str) -> None:
    store = open_store(location)
    record = InstanceRecord(workflow_id="wf_ops", workflow="w", project_dir="/p", state={"a": {"b": 1}, "c": 2},
                            threads={"main": {"pc": 0}})
    store.create(record)
    ops = [["s", "state", ["a", "b"], 5], ["d", "state", ["c"]], ["s", "state", ["new", "deep"], [1]],
           ["s", "threads", ["t1"], {"pc": 3}], ["d", "threads", ["main"]]]
    store.save(record, 1, delta=encode(ops))
    loaded = store.load("wf_ops")
    assert loaded.state == {"a": {"b": 5}, "new": {"deep": [1]}}
    assert loaded.threads == {"t1": {"pc": 3}}
    assert (loaded.version, loaded.deltas, loaded.snapshot_version) == (2, 1, 1)
    store.save(loaded, 2)  # a full snapshot absorbs the delta
    final = store.load("wf_ops")
    assert (final.state, final.threads, final.deltas, final.snapshot_version) == (
        loaded.state, loaded.threads, 0, 3)
    store.close()


def test_a_snapshot_with_its_delta_keeps_the_deltas_since_the_previous_one(location: str) -> None:
    """Catching up across one snapshot: the deltas after the previous snapshot stay, the
    snapshot's own delta is stored, and the next snapshot drops those before it."""
    store = open_store(location)
    record = InstanceRecord(workflow_id="wf_keep", workflow="w", project_dir="/p", state={"n": 0}, threads={})
    store.create(record)

    def step(version: int, n: int, snapshot: bool = False) -> None:
        record.state = {"n": n}
        store.save(record, version, delta=encode([["s", "state", ["n"], n]]), snapshot=snapshot)

    step(1, 1)
    step(2, 2)
    step(3, 3, snapshot=True)  # version 4: a snapshot with its delta
    loaded = store.load("wf_keep")
    assert (loaded.state, loaded.snapshot_version, loaded.deltas) == ({"n": 3}, 4, 0)
    behind = store.deltas_since("wf_keep", 1)  # a copy at version 1 catches up across the snapshot
    assert behind is not None and [json.loads(d) for d in behind.deltas] == [
        [["s", "state", ["n"], n]] for n in (1, 2, 3)]
    step(4, 4)
    step(5, 5, snapshot=True)  # version 6: the deltas up to the previous snapshot (4) go
    assert store.deltas_since("wf_keep", 1) is None  # gone: load it whole
    assert [json.loads(d)[0][3] for d in store.deltas_since("wf_keep", 4).deltas] == [4, 5]  # type: ignore[union-attr]
    assert store.load("wf_keep").state == {"n": 5}
    store.save(record, 6)  # a snapshot without a delta: nothing to catch up by
    assert store.deltas_since("wf_keep", 5) is None and store.load("wf_keep").state == {"n": 5}
    store.close()


RELAY = """\
name: relay
description: "a computed field over a computed field, its inputs answered on two replicas"
default_state:
  raw: {items: "", marks: {}}
state_schema:
  computed:
    listed:
      from: raw.items
      transform: "input.split(',').filter(x => x && x !== 'skip')"
    summary:
      from: ["computed.listed", "raw.marks"]
      transform: "({count: input[0].length, marks: Object.keys(input[1]).length})"
steps:
  - id: items
    type: user_input
    prompt: "Which items?"
    state_update: {path: raw.items}
  - id: mark
    type: user_input
    prompt: "A mark?"
    state_update: {path: raw.marks.first}
  - id: report
    type: user_message
    message: "{{ summary.count }} items, {{ summary.marks }} marks"
"""


def test_a_replica_that_caught_up_recomputes_from_the_caught_up_values(tmp_path: Path, location: str) -> None:
    """The first replica computes `listed` as [] at the start; the second answers the items;
    the first catches up (by deltas) and recomputes `summary` when the mark comes. It must
    read `listed` as caught up, not the [] its V8 still held (the fault campaign's CI-sized
    seed 5 ended `standards:fix` with `summary.files: 0` that way)."""
    first = server_on(tmp_path, location, {"relay": RELAY})
    second = server_on(tmp_path, location)

    async def drive() -> tuple[dict[str, Any], dict[str, Any]]:
        async with Client(first) as one, Client(second) as two:
            started = await ok(one, "workflow_start", {"workflow": "relay"})
            wid = started["workflow_id"]
            asked = await ok(one, "workflow_get_next_step", {"workflow_id": wid})
            assert asked["step"]["id"] == "items", asked
            await ok(two, "workflow_step_complete", {"workflow_id": wid, "step_id": "items",
                                                     "result": "a,skip,b"})
            marked = await ok(one, "workflow_step_complete", {"workflow_id": wid, "step_id": "mark", "result": "yes"})
            state = await ok(two, "workflow_state_read", {"workflow_id": wid})
            return marked, state["state"]

    marked, state = asyncio.run(drive())
    assert state["listed"] == ["a", "b"]
    assert state["summary"] == {"count": 2, "marks": 1}, state
    assert "2 items, 1 marks" in json.dumps(marked), marked
