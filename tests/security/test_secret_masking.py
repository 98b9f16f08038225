"""Issue 10 item 9: secrets never leave in a reply or a log line.

A secret is a value under a sensitive key (`api_token`, `password`, …) of an instance's
inputs or state.  It used to come back in `workflow_step_complete` error replies and in the
HTTP server's debug log.  Replies now pass one choke point in `server/mcp.py` that masks
them with the instance's masker (the step handed to the agent excepted: it must carry the
values the agent is asked to use), and the server's log handlers carry a filter that
masks known secrets and sensitive keys.  (Store file permissions are another change.)
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from mcp import Client
from srv_helpers import (
    PYTHON,
    TOKEN,
    free_port,
    http_client,
    make_project,
    ok,
    serve_args,
    server_env,
    stop,
    tool_text,
    wait_for_port,
)

SECRET = "sk-live-7f3a9c1e5b2d4680"
LEAKY = """name: leaky
inputs:
  api_token: {type: string, required: true}
default_state:
  raw:
    n: 0
steps:
  - id: ask
    type: agent_prompt
    prompt: "Say something"
    response_schema:
      type: object
      required: [answer]
  - id: bump
    type: state_update
    path: raw.n
    value: "{{ inputs.api_token.length }}"
"""


async def test_step_complete_errors_are_masked(make_server):
    server, _ = make_server({"leaky": LEAKY})
    async with Client(server) as client:
        started = await ok(client, "workflow_start", {"workflow": "leaky", "inputs": {"api_token": SECRET}})
        workflow_id = started["workflow_id"]
        step = await ok(client, "workflow_get_next_step", {"workflow_id": workflow_id})
        replies = []
        for args in ({"step_id": "nope", "result": SECRET},
                     {"step_id": step["step"]["id"], "result": f"token is {SECRET}"},
                     {"step_id": step["step"]["id"], "status": "failed", "error": f"401 for {SECRET}"},
                     {"step_id": step["step"]["id"], "result": {"answer": SECRET, "extra": [SECRET] * 3}}):
            result = await client.call_tool("workflow_step_complete", {"workflow_id": workflow_id, **args})
            replies.append(tool_text(result) + json.dumps(result.structured_content))
        state = await client.call_tool("workflow_state_update", {
            "workflow_id": workflow_id, "updates": [{"path": "inputs.api_token", "value": SECRET}]})
        replies.append(tool_text(state))
        status = await ok(client, "workflow_status", {"workflow_id": workflow_id})
        replies.append(json.dumps(status))
    leaks = [reply[:300] for reply in replies if SECRET in reply]
    assert not leaks, leaks


async def test_start_errors_mask_the_secrets_of_their_own_inputs(make_server):
    server, _ = make_server({"leaky": LEAKY})
    async with Client(server) as client:
        result = await client.call_tool("workflow_start", {"workflow": "leaky", "inputs": {
            "api_token": SECRET, "nope": {"password": SECRET}}})
    assert result.is_error and SECRET not in tool_text(result), tool_text(result)


@pytest.mark.slow  # starts a subprocess
async def test_http_debug_log_never_shows_a_secret(tmp_path: Path):
    project = make_project(tmp_path / "project", {"leaky": LEAKY})
    home, store, port = tmp_path / "home", tmp_path / "s.sqlite3", free_port()
    home.mkdir()
    stderr_path = tmp_path / "http.stderr"
    with open(stderr_path, "wb") as stderr:
        proc = subprocess.Popen([PYTHON, *serve_args(project, store, "--http", "--port", str(port))], cwd=project,
                                env=server_env(home, store, AROMCP_LOG_LEVEL="DEBUG", AROMCP_HTTP_TOKEN=TOKEN),
                                stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            wait_for_port(port, proc)
            async with http_client(f"http://127.0.0.1:{port}/mcp", mode="legacy") as client:
                started = await ok(client, "workflow_start", {"workflow": "leaky", "inputs": {"api_token": SECRET}})
                workflow_id = started["workflow_id"]
                step = await ok(client, "workflow_get_next_step", {"workflow_id": workflow_id})
                await client.call_tool("workflow_step_complete", {"workflow_id": workflow_id,
                                                                  "step_id": step["step"]["id"],
                                                                  "result": {"answer": f"use {SECRET}"}})
        finally:
            stop(proc)
    log = stderr_path.read_text(errors="replace")
    assert "DEBUG" in log, "the server should have logged at DEBUG"
    assert SECRET not in log, [line[:300] for line in log.splitlines() if SECRET in line][:5]
    assert TOKEN not in log, "the bearer token never reaches the log"
