"""Instances of one definition share its parsed bundle, snapshot, programs and computed graph.

A server with thousands of waiting instances must not hold a parsed copy of the workflow
per instance (definition/shared.py, state/computed.py `shared_graph`).  Real service, real
SQLite file, real V8: instances are started, dropped from memory and loaded again from
the store, exactly as a restarted server loads them.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest

from aromcp_workflows.app.service import WorkflowService
from aromcp_workflows.definition.loader import SHARED_BUNDLES, WorkflowBundle
from aromcp_workflows.definition.shared import SharedBundles, content_key
from aromcp_workflows.state import ComputedFieldSpec, StateError
from aromcp_workflows.state.computed import shared_graph

WAITING = """
name: waiting
description: "one agent step that waits"
default_state:
  raw:
    files: ["a.py", "b.md"]
state_schema:
  computed:
    py_files:
      from: raw.files
      transform: "input.filter(f => f.endsWith('.py'))"
steps:
  - id: ask
    type: agent_prompt
    prompt: "PROMPT about {{ py_files.length }} file(s)"
  - id: done
    type: agent_prompt
    prompt: "done"
"""


def write(project: Path, prompt: str) -> None:
    folder = project / ".aromcp" / "workflows"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "waiting.yaml").write_text(WAITING.replace("PROMPT", prompt))


@pytest.fixture
def service(tmp_path: Path) -> WorkflowService:
    project = tmp_path / "project"
    write(project, "Version one")
    home = tmp_path / "home"
    home.mkdir()
    return WorkflowService(project_dir=project, store_path=tmp_path / "s.sqlite3", home=home)


def live(service: WorkflowService, workflow_id: str) -> Any:
    return service.instances.copies._live[workflow_id]


def reload_all(service: WorkflowService, ids: list[str]) -> None:
    """Drop every live copy and load each instance from the store again (as after a restart)."""
    for workflow_id in ids:
        service.instances.forget(workflow_id)
    gc.collect()
    for workflow_id in ids:
        service.next_step(workflow_id)


def test_instances_of_one_definition_share_bundle_snapshot_programs_and_graph(service: WorkflowService) -> None:
    ids = [service.start("waiting").workflow_id for _ in range(3)]
    for workflow_id in ids:
        assert service.next_step(workflow_id).step["definition"]["prompt"] == "Version one about 1 file(s)"
    runs = [live(service, i).run for i in ids]
    records = [live(service, i).record for i in ids]
    assert runs[0].bundle is runs[1].bundle is runs[2].bundle
    assert records[0].definition is records[1].definition is runs[0].bundle.snapshot()
    assert runs[0].machine.programs("waiting") is runs[1].machine.programs("waiting")
    assert runs[0].states["main"].graph is runs[2].states["main"].graph

    builds = SHARED_BUNDLES.builds
    reload_all(service, ids)
    reloaded = [live(service, i) for i in ids]
    assert reloaded[0].run is not runs[0]  # really loaded again from the store
    assert reloaded[0].run.bundle is reloaded[1].run.bundle is reloaded[2].run.bundle
    assert reloaded[0].record.definition is reloaded[2].record.definition
    assert reloaded[0].run.states["main"].graph is reloaded[1].run.states["main"].graph
    assert SHARED_BUNDLES.builds - builds <= 1, "three reloads of one definition parse it at most once"
    assert service.next_step(ids[1]).step["definition"]["prompt"] == "Version one about 1 file(s)"


def test_a_changed_definition_gets_its_own_bundle_and_old_instances_keep_theirs(service: WorkflowService) -> None:
    old = service.start("waiting").workflow_id
    write(service.project_dir, "Version two")
    new = service.start("waiting").workflow_id
    assert live(service, old).run.bundle is not live(service, new).run.bundle
    assert live(service, old).record.definition != live(service, new).record.definition
    reload_all(service, [old, new])
    assert live(service, old).run.bundle is not live(service, new).run.bundle
    assert service.next_step(old).step["definition"]["prompt"] == "Version one about 1 file(s)"
    assert service.next_step(new).step["definition"]["prompt"] == "Version two about 1 file(s)"
    step = service.next_step(old).step
    done = service.step_complete(old, step["id"], result="ok")
    assert done.next_step is not None and done.next_step["definition"]["prompt"] == "done"
    assert service.next_step(new).step["id"] == "ask", "completing one instance leaves the other where it was"


def test_shared_bundles_are_weak_beyond_the_recent_ones() -> None:
    built: list[dict[str, Any]] = []

    class Box:
        def __init__(self, data: dict[str, Any]) -> None:
            built.append(data)
            self.data = data

    cache: SharedBundles[Box] = SharedBundles(Box, keep=1)
    first = cache.get({"a": 1, "b": [1, 2]})
    assert cache.get({"b": [1, 2], "a": 1}) is first, "key order does not make another bundle"
    assert cache.get({"a": 2}) is not first and cache.builds == 2
    del first
    gc.collect()
    assert len(cache) == 1, "a bundle no instance uses (and not among the `keep` recent) is freed"
    cache.get({"a": 1, "b": [1, 2]})
    assert cache.builds == 3
    assert content_key({"x": 1}) != content_key({"x": 1.5})


def test_parse_snapshot_round_trips_the_loader_bundle(service: WorkflowService) -> None:
    from aromcp_workflows.definition import load_valid_bundle

    loaded = load_valid_bundle("waiting", service.loader)
    parsed = WorkflowBundle.parse_snapshot(loaded.snapshot())
    assert parsed.main.definition == loaded.main.definition
    assert parsed.snapshot() == loaded.snapshot()


def spec(name: str, transform: str = "input.length", sources: list[str] | None = None) -> ComputedFieldSpec:
    return ComputedFieldSpec(name=name, sources=sources or ["raw.items"], transform=transform)


def test_shared_graph_is_one_object_per_distinct_spec_list() -> None:
    one = shared_graph([spec("n")])
    assert shared_graph([spec("n")]) is one
    assert shared_graph([spec("n", "input.length + 1")]) is not one
    assert shared_graph([spec("n", sources=["raw.other"])]) is not one
    assert one.names == frozenset({"n"})
    with pytest.raises(StateError, match="cycle"):
        shared_graph([spec("a", "b", ["computed.b"]), spec("b", "a", ["computed.a"])])
    with pytest.raises(StateError, match="cycle"):  # a refused spec list is never kept
        shared_graph([spec("a", "b", ["computed.b"]), spec("b", "a", ["computed.a"])])
