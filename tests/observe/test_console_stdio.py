"""Tracing as a user turns it on: `serve` over stdio with `OTEL_TRACES_EXPORTER=console`
writes its spans to stderr and never a byte of them to stdout (the MCP channel); the
calls about an instance are in its one trace, under its root span, and the `traceparent`
a client sends in `_meta` (another trace) is a link of each call's span.  Without the
variables the SDK is never imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow  # server subprocesses

ROOT = Path(__file__).resolve().parents[2]
TRACE_ID, PARENT_ID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
WORKFLOW = """
name: "trace:stdio"
default_state: {raw: {n: 1}}
steps:
  - {id: ask, type: agent_prompt, prompt: "n is {{ n }}"}
  - {id: echo, type: shell_command, command: "echo hello from the command"}
"""


class Stdio:
    """A JSON-RPC client over a server's stdin/stdout that keeps every stdout line."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc, self.lines, self.ids = proc, [], 0
        self.meta: dict[str, Any] | None = None  # the last reply's `_meta`

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.ids += 1
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params}) + "\n")
        self.proc.stdin.flush()
        while True:
            line = self.proc.stdout.readline()
            assert line, "the server closed stdout"
            self.lines.append(line)
            message = json.loads(line)
            if message.get("id") == self.ids:
                return dict(message["result"])

    def call(self, name: str, arguments: dict[str, Any], meta: dict[str, Any] | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"name": name, "arguments": arguments}
        if meta:
            params["_meta"] = meta
        result = self.request("tools/call", params)
        assert not result.get("isError"), result
        self.meta = result.get("_meta")
        return dict(result["structuredContent"])


def spans_in(text: str) -> list[dict[str, Any]]:
    """The JSON objects ConsoleSpanExporter wrote, one after another."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while (start := text.find("{\n", at)) >= 0:
        try:
            span, at = decoder.raw_decode(text, start)
        except ValueError:
            at = start + 1
            continue
        if isinstance(span, dict) and "context" in span:
            found.append(span)
    return found


def test_console_spans_go_to_stderr_and_stdout_stays_the_protocol(tmp_path: Path):
    project = tmp_path / "project"
    (project / ".aromcp" / "workflows").mkdir(parents=True)
    (project / ".aromcp" / "workflows" / "trace:stdio.yaml").write_text(WORKFLOW)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AROMCP_"))}
    env.update(OTEL_TRACES_EXPORTER="console", OTEL_SERVICE_NAME="traced-server", HOME=str(tmp_path),
               PYTHONPATH=str(ROOT))
    stderr = tmp_path / "stderr.txt"
    with stderr.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "aromcp_workflows", "--project-dir", str(project), "serve",
                                 "--store", str(tmp_path / "s.sqlite3")], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err, text=True, env=env)
        client = Stdio(proc)
        client.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                      "clientInfo": {"name": "otel-test", "version": "0"}})
        assert proc.stdin is not None
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
        meta = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}
        wid = client.call("workflow_start", {"workflow": "trace:stdio"}, meta)["workflow_id"]
        assert client.meta is not None
        _, root_trace, root_span, _ = client.meta["traceparent"].split("-")  # the instance's root, announced
        step = client.call("workflow_get_next_step", {"workflow_id": wid}, meta)["step"]
        done = client.call("workflow_step_complete", {"workflow_id": wid, "step_id": step["id"], "result": "ok"}, meta)
        assert done["status"] == "completed"
        proc.stdin.close()  # the stdio way to stop a server: it flushes its spans on the way out
        assert proc.wait(timeout=30) == 0
    assert proc.stdout is not None
    client.lines += proc.stdout.readlines()
    for line in client.lines:  # nothing but JSON-RPC messages on stdout
        assert json.loads(line)["jsonrpc"] == "2.0", line
    assert not any("trace_id" in line or "hello from the command" in line for line in client.lines)

    everything = spans_in(stderr.read_text())
    assert {span["name"] for span in everything} - {"initialize", "notifications/initialized"} == {
        span["name"] for span in everything if span["name"].startswith(("tools/call ", "step ", "shell", "workflow "))}
    spans = [span for span in everything if span["name"] not in ("initialize", "notifications/initialized")]
    names = {span["name"] for span in spans}
    assert {"tools/call workflow_start", "step ask", "step echo", "shell", "workflow trace:stdio"} <= names, names
    assert {span["context"]["trace_id"] for span in spans} == {f"0x{root_trace}"}  # one trace
    (root,) = [span for span in spans if span["parent_id"] is None]
    assert root["name"] == "workflow trace:stdio" and root["context"]["span_id"] == f"0x{root_span}"
    for span in spans:
        if span["name"].startswith("tools/call "):
            assert span["parent_id"] == f"0x{root_span}"
            assert [link["context"]["span_id"] for link in span["links"]] == [f"0x{PARENT_ID}"]
            assert span["resource"]["attributes"]["service.name"] == "traced-server"
    (shell,) = [s for s in spans if s["name"] == "shell"]
    assert shell["attributes"]["process.exit.code"] == 0 and shell["attributes"]["workflow.id"] == wid


CHECK = """
import asyncio, json, sys
from mcp import Client
from aromcp_workflows.app.service import WorkflowService
from aromcp_workflows.observe import start
from aromcp_workflows.server.mcp import build_server

observer = start()
service = WorkflowService(project_dir=sys.argv[1], store_path=sys.argv[2], observer=observer)

async def main():
    async with Client(build_server(lambda: service, observer=observer)) as client:
        started = await client.call_tool("workflow_start", {"workflow": "trace:stdio"})
        await client.call_tool("workflow_get_next_step", {"workflow_id": started.structured_content["workflow_id"]})

asyncio.run(main())
print(json.dumps({"on": observer is not None, "sdk": "opentelemetry.sdk" in sys.modules}))
"""


@pytest.mark.parametrize("variables,expected", [
    ({}, {"on": False, "sdk": False}),
    ({"OTEL_TRACES_EXPORTER": "none"}, {"on": False, "sdk": False}),
    ({"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}, {"on": False, "sdk": False}),
    ({"OTEL_TRACES_EXPORTER": "console"}, {"on": True, "sdk": True}),
])
def test_without_the_variables_the_sdk_is_never_imported(tmp_path: Path, variables, expected):
    project = tmp_path / "project"
    (project / ".aromcp" / "workflows").mkdir(parents=True)
    (project / ".aromcp" / "workflows" / "trace:stdio.yaml").write_text(WORKFLOW)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AROMCP_"))}
    env.update(variables, HOME=str(tmp_path), PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", CHECK, str(project), str(tmp_path / "s.sqlite3")],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == expected
