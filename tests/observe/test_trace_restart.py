"""One trace per instance across real server processes: a server killed (SIGKILL) in the
middle of a run, then two servers on the same store taking calls in turn (replicas), all
with `OTEL_TRACES_EXPORTER=console`.  Every span of the instance, from the three
processes' stderr, is in one trace with one root — the instance's span, made by the
process whose commit ended the run, with the ids the first process kept in the store."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.observe.test_console_stdio import ROOT, Stdio, spans_in

pytestmark = pytest.mark.slow  # server subprocesses

WORKFLOW = """
name: "trace:restart"
default_state: {raw: {done: []}}
steps:
  - {id: ask, type: agent_prompt, prompt: "go"}
  - {id: echo, type: shell_command, command: "echo from the command"}
  - id: fan
    type: parallel_foreach
    items: "{{ ['a', 'b'] }}"
    sub_agent_task: work
  - {id: last, type: agent_prompt, prompt: "done?"}
sub_agent_tasks:
  work:
    steps:
      - {id: act, type: agent_prompt, prompt: "do {{ item }}", state_update: {path: raw.done, operation: append}}
"""
OURS = ("tools/call ", "step ", "shell", "recompute", "workflow ")


def serve(tmp_path: Path, name: str) -> tuple[subprocess.Popen[str], Stdio, Path]:
    project = tmp_path / "project"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AROMCP_"))}
    env.update(OTEL_TRACES_EXPORTER="console", OTEL_BSP_SCHEDULE_DELAY="50", HOME=str(tmp_path),
               PYTHONPATH=str(ROOT), OTEL_SERVICE_NAME=f"server-{name}")
    stderr = tmp_path / f"{name}.stderr"
    proc = subprocess.Popen([sys.executable, "-m", "aromcp_workflows", "--project-dir", str(project), "serve",
                             "--store", str(tmp_path / "s.sqlite3")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=stderr.open("w"), text=True, env=env)
    client = Stdio(proc)
    client.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                  "clientInfo": {"name": "restart-test", "version": "0"}})
    assert proc.stdin is not None
    proc.stdin.write('{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
    return proc, client, stderr


def exported(stderr: Path, name: str, timeout: float = 30) -> None:
    """Wait until the span `name` was written (the batch processor sends every 50 ms)."""
    deadline = time.monotonic() + timeout
    while f'"name": "{name}"' not in stderr.read_text():
        assert time.monotonic() < deadline, f"{name} never exported:\n{stderr.read_text()[-2000:]}"
        time.sleep(0.05)


def finish(servers: list[Any], wid: str) -> None:
    """The rest of the run, each call through the next server in turn."""
    calls = iter(servers * 20)
    answer = next(calls).call("workflow_step_complete", {"workflow_id": wid, "step_id": "ask", "result": "ok"})
    step = answer["next_step"]
    assert step["type"] == "parallel_tasks", step
    for task in step["definition"]["tasks"]:
        args = {"workflow_id": wid, "task_id": task["task_id"]}
        act = next(calls).call("workflow_get_next_step", args)["step"]
        assert next(calls).call("workflow_step_complete", {**args, "step_id": act["id"], "result": "x"})["success"]
    last = next(calls).call("workflow_step_complete", {"workflow_id": wid, "step_id": step["id"]})["next_step"]
    done = next(calls).call("workflow_step_complete", {"workflow_id": wid, "step_id": last["id"], "result": "y"})
    assert done["status"] == "completed", done


def test_a_killed_server_and_two_replicas_make_one_trace_with_one_root(tmp_path: Path):
    folder = tmp_path / "project" / ".aromcp" / "workflows"
    folder.mkdir(parents=True)
    (folder / "trace:restart.yaml").write_text(WORKFLOW)
    first, client, first_err = serve(tmp_path, "first")
    procs = [first]
    try:
        wid = client.call("workflow_start", {"workflow": "trace:restart"})["workflow_id"]
        assert client.meta is not None
        _, trace_id, root_id, _ = client.meta["traceparent"].split("-")
        assert client.call("workflow_get_next_step", {"workflow_id": wid})["step"]["id"] == "ask"
        exported(first_err, "tools/call workflow_get_next_step")
        first.send_signal(signal.SIGKILL)  # killed with the step in hand: its open spans die with it
        first.wait(timeout=30)
        replicas = [serve(tmp_path, name) for name in ("second", "third")]
        procs += [proc for proc, _, _ in replicas]
        finish([replica for _, replica, _ in replicas], wid)
        for proc, _, _ in replicas:
            assert proc.stdin is not None
            proc.stdin.close()  # the stdio way to stop: spans are flushed on the way out
            assert proc.wait(timeout=30) == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    by_process = {name: [s for s in spans_in((tmp_path / f"{name}.stderr").read_text())
                         if s["name"].startswith(OURS)] for name in ("first", "second", "third")}
    assert all(by_process.values()), {name: len(spans) for name, spans in by_process.items()}
    spans = [span for found in by_process.values() for span in found]
    assert {span["context"]["trace_id"] for span in spans} == {f"0x{trace_id}"}
    (root,) = [span for span in spans if span["parent_id"] is None]
    assert root["name"] == "workflow trace:restart" and root["context"]["span_id"] == f"0x{root_id}"
    assert root["attributes"]["workflow.status"] == "completed"
    ids = {span["context"]["span_id"] for span in spans}
    assert all(span["parent_id"] in ids for span in spans if span is not root)
    names = {span["name"] for span in spans}
    assert {"tools/call workflow_start", "step echo", "shell", "step work_0.act", "step work_1.act",
            "step last"} <= names, names
    (elsewhere,) = [span for span in spans if span["name"] == "step ask"]  # handed out by the killed server
    assert elsewhere["attributes"]["step.started_elsewhere"] is True
