"""`workflow_test_transformation`: a transform run in the same engine, with the same limits,
as a computed field; nothing it does survives the call."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

from explain_helpers import REPO


def test_success_expression_and_function_body(service: Any) -> None:
    result = service.test_transformation("input.filter(f => !f.endsWith('.d.ts')).length",
                                         ["a.ts", "b.d.ts"]).model_dump()
    assert result == {"success": True, "output": 1, "execution_time_ms": result["execution_time_ms"]}
    assert result["execution_time_ms"] >= 0
    body = service.test_transformation("const out = {};\nfor (const f of input) out[path_to_key(f)] = 1;\nreturn out;",
                                       ["src/a.py"]).model_dump()
    assert body["success"] is True and len(body["output"]) == 1


def test_context_values_are_visible(service: Any) -> None:
    context = {"inputs": {"batch_size": 2}, "raw": {"k": 1}, "extra": 10, "k": 3}
    assert service.test_transformation("input.length / inputs.batch_size + raw.k + extra", [1, 2, 3, 4],
                                       context).output == 13
    assert service.test_transformation("this.k * 2", None, context).output == 6
    assert service.test_transformation("typeof extra", None, {}).output == "undefined"


def test_javascript_errors_are_results_not_exceptions(service: Any) -> None:
    thrown = service.test_transformation("throw new Error('custom ' + input)", "boom").model_dump()
    assert thrown["success"] is False and "Error: custom boom" in thrown["error"] and "output" not in thrown
    typed = service.test_transformation("input.missing.deeper", {}).model_dump()
    assert typed["success"] is False and "TypeError" in typed["error"]
    syntax = service.test_transformation("input.map(x => ", []).model_dump()
    assert syntax["success"] is False and syntax["error"]


def test_runaway_transform_is_stopped_within_the_engine_timeout(service: Any) -> None:
    timeout_ms = service.instances.engine.timeout_ms
    started = time.perf_counter()
    result = service.test_transformation("while (true) {}", None).model_dump()
    elapsed_ms = (time.perf_counter() - started) * 1000
    assert result["success"] is False and "time" in result["error"].lower()
    assert timeout_ms <= result["execution_time_ms"] < timeout_ms + 2000
    assert elapsed_ms < timeout_ms + 3000
    assert service.test_transformation("input + 1", 1).output == 2  # the engine still works


def test_gradual_memory_growth_is_stopped(service: Any) -> None:
    result = service.test_transformation("const a = []; while (true) a.push(new Array(1e5).fill(1));",
                                         None).model_dump()
    # stopped by whichever limit it reaches first (memory cap or time limit), never a crash
    assert result["success"] is False and ("memory" in result["error"] or "timed out" in result["error"])
    huge = service.test_transformation("'x'.repeat(5e7)", None).model_dump()
    assert huge["success"] is False and "too large" in huge["error"]
    assert service.test_transformation("input * 2", 21).output == 42


def test_no_side_effects(project: Any, service: Any) -> None:
    refused = service.test_transformation("globalThis.leak = 42; return 1", None).model_dump()
    assert refused["success"] is False  # the global object is frozen
    assert service.test_transformation("typeof leak", None).output == "undefined"
    context = {"ctx": {"items": []}}
    assert service.test_transformation("ctx.items.push(1); return ctx.items.length", None, context).output == 1
    assert context == {"ctx": {"items": []}}  # the caller's value is untouched
    assert service.test_transformation("ctx.items.length", None, context).output == 0  # and V8 kept nothing
    assert service.list_instances().instances == []


def test_single_huge_allocation_does_not_kill_the_process(tmp_path: Any) -> None:
    code = ("from aromcp_workflows.app.service import WorkflowService\n"
            f"s = WorkflowService(project_dir={str(tmp_path)!r}, store_path={str(tmp_path / 's.db')!r}, "
            f"home={str(tmp_path)!r})\n"
            "r = s.test_transformation(\"new Array(1e9).fill('x').join('')\", None, {}).model_dump()\n"
            "print(r['success'], s.test_transformation('input + 1', 1, {}).output)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO,
                          check=False)
    assert done.returncode == 0, done.stderr[-300:]
    assert done.stdout.split() == ["False", "2"]
