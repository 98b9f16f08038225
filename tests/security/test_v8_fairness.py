"""Issue 10 item 12: runaway transforms cannot hold up another instance's trivial step.

Ten `while (true) {}` transforms (five-second limits) run concurrently through
`workflow_test_transformation`; meanwhile another instance asks for its next step, whose
message needs V8.  Through one shared V8 lock that step used to wait for all ten time
limits.  It must now answer well before even one of them could have expired, while the
runaways are still reported as timeouts and the pool stays within its size.

The bound is behavioural (the step does not wait for the runaways' limits), with a wide
margin for a loaded two-core machine.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
from srv_helpers import make_project, ok

LIMIT_MS = 5000
RUNAWAYS = 10

TRIVIAL = """
name: trivial
description: "One message that needs V8"
version: "1.0.0"
inputs:
  items:
    type: array
    default: [1, 2, 3]
steps:
  - type: user_message
    message: "{{ inputs.items.filter(x => x > 1).length }} big items"
"""


@pytest.fixture
def service_and_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    from aromcp_workflows.app.service import WorkflowService
    from aromcp_workflows.server.mcp import build_server

    monkeypatch.setenv("AROMCP_V8_ISOLATION", "process")
    monkeypatch.setenv("AROMCP_V8_TIMEOUT_MS", str(LIMIT_MS))
    monkeypatch.delenv("AROMCP_V8_POOL_SIZE", raising=False)
    project = make_project(tmp_path / "project", {"trivial": TRIVIAL})
    (tmp_path / "home").mkdir()
    service = WorkflowService(project_dir=project, store_path=tmp_path / "s.sqlite3", home=tmp_path / "home")
    return service, build_server(lambda: service)


def test_a_trivial_step_answers_while_ten_runaways_hit_their_limits(service_and_server: tuple[Any, Any]) -> None:
    service, server = service_and_server
    pool_sizes: list[int] = []

    async def scenario() -> tuple[float, list[dict[str, Any]], str]:
        async with Client(server, mode="legacy") as client:
            started = await ok(client, "workflow_start", {"workflow": "trivial"})
            runaways = [asyncio.create_task(ok(client, "workflow_test_transformation",
                                               {"transform": f"let i = {n}; while (true) {{ i++; }}"}))
                        for n in range(RUNAWAYS)]
            await asyncio.sleep(0.8)  # the runaways hold every V8 there is
            assert not any(task.done() for task in runaways)
            pool_sizes.append(len(service.instances.engine._rt.child_pids()))
            t0 = time.monotonic()
            step = await ok(client, "workflow_get_next_step", {"workflow_id": started["workflow_id"]})
            elapsed = time.monotonic() - t0
            pool_sizes.append(len(service.instances.engine._rt.child_pids()))
            return elapsed, list(await asyncio.gather(*runaways)), str(step)

    elapsed, results, step = asyncio.run(scenario())
    assert "2 big items" in step
    assert elapsed < LIMIT_MS / 1000 / 2, f"the trivial step waited {elapsed:.2f} s behind the runaways"
    assert all(r["success"] is False and "timed out" in r["error"] for r in results), results
    assert max(pool_sizes) <= 3  # the pool's default size: memory stays bounded
    # the engine is healthy afterwards and no V8 child is left running a loop
    assert service.test_transformation("input + 1", 1).output == 2


def test_a_preempted_transform_runs_again_and_returns_its_own_value() -> None:
    from aromcp_workflows.expressions import ExpressionEngine

    engine = ExpressionEngine(timeout_ms=LIMIT_MS, isolation="process", pool_size=2)
    busy = "const t = Date.now(); while (Date.now() - t < 700) {} return input * 10"
    results: dict[int, Any] = {}

    def work(n: int) -> None:
        results[n] = engine.test_transform(busy, n, origin=f"field {n}")

    try:
        engine.test_transform("1", None)
        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert results == {0: 0, 1: 10, 2: 20, 3: 30}
        assert engine.stats.preemptions >= 1  # two V8 processes, four calls: some were taken back
        assert engine.stats.timeouts == 0
        assert len(engine._rt.child_pids()) <= 2
    finally:
        engine.close()
