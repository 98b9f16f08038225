"""`aromcp-workflows run` honours the OTEL_* variables as `serve` does: with
`OTEL_TRACES_EXPORTER=console` the spans of the runner (`perform <step>`) and of its server
reach stderr — the server's stderr is no longer swallowed — in the one trace of the
instance, whose root is the instance; stdout keeps the transcript only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.observe.test_console_stdio import ROOT, spans_in

pytestmark = pytest.mark.slow  # the CLI and its server as processes

WORKFLOW = """\
name: "trace:run"
steps:
  - {id: local, type: agent_shell_command, command: "echo runner side"}
  - {id: remote, type: shell_command, command: "echo server side"}
  - id: fan
    type: parallel_foreach
    items: "{{ ['a', 'b'] }}"
    sub_agent_task: work
sub_agent_tasks:
  work:
    steps:
      - {id: act, type: agent_shell_command, command: "echo {{ item }}"}
"""


def test_run_prints_the_runner_and_server_spans_of_one_trace(tmp_path: Path):
    project = tmp_path / "project"
    (project / ".aromcp" / "workflows").mkdir(parents=True)
    (project / ".aromcp" / "workflows" / "trace:run.yaml").write_text(WORKFLOW)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AROMCP_"))}
    env.update(OTEL_TRACES_EXPORTER="console", OTEL_BSP_SCHEDULE_DELAY="50", HOME=str(tmp_path),
               PYTHONPATH=str(ROOT), AROMCP_WORKFLOWS_STORE=str(tmp_path / "s.sqlite3"))
    done = subprocess.run([sys.executable, "-m", "aromcp_workflows", "--project-dir", str(project), "run",
                           "trace:run"], capture_output=True, text=True, env=env, timeout=180,
                          stdin=subprocess.DEVNULL, cwd=project)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "status: completed" in done.stdout and "trace_id" not in done.stdout

    spans = [s for s in spans_in(done.stderr)
             if s["name"].startswith(("tools/call ", "step ", "shell", "workflow ", "perform "))]
    services = {s["resource"]["attributes"]["service.name"] for s in spans}
    assert services == {"aromcp-workflows", "aromcp-workflows-run"}, services
    assert len({s["context"]["trace_id"] for s in spans}) == 1
    (root,) = [s for s in spans if s["parent_id"] is None]
    assert root["name"] == "workflow trace:run" and root["attributes"]["workflow.status"] == "completed"
    by_id = {s["context"]["span_id"]: s for s in spans}
    assert all(s["parent_id"] in by_id for s in spans if s is not root)

    performed = {s["name"] for s in spans if s["name"].startswith("perform ")}
    assert performed == {"perform local", "perform fan", "perform work_0.act", "perform work_1.act"}
    completions = [s for s in spans if s["name"] == "tools/call workflow_step_complete"]
    assert completions and all(by_id[s["parent_id"]]["name"].startswith("perform ") for s in completions)
    assert {"step local", "step remote", "shell", "step work_0.act"} <= {s["name"] for s in spans}


def test_a_run_stopped_by_its_closed_output_ends_the_root_span_as_interrupted(tmp_path: Path):
    """The runner marks the instance interrupted itself (its server is gone by then): its
    tracing makes the instance's root span, in the trace the server's spans are in."""
    project = tmp_path / "project"
    (project / ".aromcp" / "workflows").mkdir(parents=True)
    (project / ".aromcp" / "workflows" / "trace:slow.yaml").write_text(
        'name: "trace:slow"\nsteps:\n  - id: many\n    type: foreach\n    items: "{{ [1, 2, 3, 4, 5, 6, 7, 8] }}"\n'
        '    steps:\n      - {id: tick, type: agent_shell_command, command: "sleep 0.2; echo tick"}\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AROMCP_"))}
    env.update(OTEL_TRACES_EXPORTER="console", OTEL_BSP_SCHEDULE_DELAY="50", HOME=str(tmp_path),
               PYTHONPATH=str(ROOT), AROMCP_WORKFLOWS_STORE=str(tmp_path / "s.sqlite3"))
    proc = subprocess.Popen([sys.executable, "-m", "aromcp_workflows", "--project-dir", str(project), "run",
                             "trace:slow"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            stdin=subprocess.DEVNULL, cwd=project)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith("run ")
    proc.stdout.close()  # `| head -1`
    try:
        stderr = proc.stderr.read()
        assert proc.wait(timeout=120) == 141, stderr
    finally:
        if proc.poll() is None:
            proc.kill()
    spans = [s for s in spans_in(stderr) if s["name"].startswith(("tools/call ", "step ", "workflow ", "perform "))]
    (root,) = [s for s in spans if s["parent_id"] is None]
    assert root["name"] == "workflow trace:slow" and root["attributes"]["workflow.status"] == "interrupted"
    assert root["resource"]["attributes"]["service.name"] == "aromcp-workflows-run"
    assert {s["context"]["trace_id"] for s in spans} == {root["context"]["trace_id"]}
    assert any(s["resource"]["attributes"]["service.name"] == "aromcp-workflows" for s in spans)
