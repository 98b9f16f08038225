"""Transports: streamable HTTP on 127.0.0.1, and a stdio channel that carries only JSON-RPC.

Both start the real CLI (`python -m aromcp_workflows ... serve`) as a subprocess with a
tmp HOME and store.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from mcp import Client
from rawstdio import PROTOCOL_VERSION, RawServer, RawToolError
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
    wait_for_port,
)

pytestmark = pytest.mark.slow
BUDGET_BYTES = 12 * 1024


def listening_addresses(port: int) -> list[str]:
    """Local addresses (hex, as in /proc/net/tcp*) with a socket listening on `port`."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            address, hex_port = fields[1].split(":")
            if int(hex_port, 16) == port and fields[3] == "0A":  # 0A = LISTEN
                found.append(address)
    return found


async def test_http_binds_localhost_lists_tools_and_starts_a_workflow(tmp_path):
    project = make_project(tmp_path / "project")
    home, store, port = tmp_path / "home", tmp_path / "store.sqlite3", free_port()
    home.mkdir()
    stderr = open(tmp_path / "http.stderr", "wb")  # noqa: SIM115 - closed in finally
    stdout = open(tmp_path / "http.stdout", "wb")  # noqa: SIM115 - closed in finally
    proc = subprocess.Popen(
        [PYTHON, *serve_args(project, store, "--http", "--port", str(port))], cwd=project,
        env=server_env(home, store, AROMCP_HTTP_TOKEN=TOKEN), stdin=subprocess.DEVNULL, stdout=stdout,
        stderr=stderr)
    try:
        wait_for_port(port, proc)
        addresses = listening_addresses(port)
        assert addresses == ["0100007F"], f"should listen on 127.0.0.1 only, found {addresses}"
        async with http_client(f"http://127.0.0.1:{port}/mcp", mode="legacy") as client:
            tools = await client.list_tools()
            assert len(tools.tools) == 20
            started = await ok(client, "workflow_start", {"workflow": "messages", "inputs": {"who": "http"}})
            step = await ok(client, "workflow_get_next_step", {"workflow_id": started["workflow_id"]})
            assert step["messages"] == ["m1 hello http", "m2"] and step["step"]["id"] == "ask"
        async with http_client(f"http://127.0.0.1:{port}/mcp", mode="auto") as client:  # the 2026 generation
            status = await ok(client, "workflow_status", {"workflow_id": started["workflow_id"]})
            assert status["current_steps"] == ["ask"]
        assert store.exists(), "the --store given was used"
        assert not (home / ".local").exists() or not any((home / ".local").rglob("*.sqlite3*"))
    finally:
        stop(proc)
        stderr.close()
        stdout.close()
    assert "127.0.0.1" in (tmp_path / "http.stderr").read_text(), "start-up logging reaches stderr"


async def test_http_server_logs_nothing_to_stdout_at_the_default_level(tmp_path):
    project = make_project(tmp_path / "project")
    home, store, port = tmp_path / "home", tmp_path / "store.sqlite3", free_port()
    home.mkdir()
    out_path = tmp_path / "http.stdout"
    with open(out_path, "wb") as stdout:
        proc = subprocess.Popen(
            [PYTHON, *serve_args(project, store, "--http", "--port", str(port))], cwd=project,
            env=server_env(home, store, AROMCP_HTTP_TOKEN=TOKEN), stdin=subprocess.DEVNULL, stdout=stdout,
            stderr=subprocess.DEVNULL)
        try:
            wait_for_port(port, proc)
            async with http_client(f"http://127.0.0.1:{port}/mcp", mode="legacy") as client:
                await client.list_tools()
        finally:
            stop(proc)
    assert out_path.read_bytes() == b""


async def test_stdio_stdout_carries_only_json_rpc(tmp_path):
    """Logs (DEBUG here), shell commands' output and errors never reach stdout."""
    project = make_project(tmp_path / "project")
    home, store = tmp_path / "home", tmp_path / "store.sqlite3"
    home.mkdir()
    stderr_path = tmp_path / "stdio.stderr"
    server = await RawServer(serve_args(project, store), server_env(home, store, AROMCP_LOG_LEVEL="DEBUG"),
                             project, stderr_path).start()
    try:
        listing = await server.request("tools/list", {})
        assert len(listing["tools"]) == 20
        failing = await server.call_tool("workflow_start", {"workflow": "failing"})
        answer = await server.call_tool("workflow_get_next_step", {"workflow_id": failing["workflow_id"]})
        assert answer["status"] == "failed"  # its shell command printed to stdout and stderr
        with pytest.raises(RawToolError, match="no-such"):
            await server.call_tool("workflow_start", {"workflow": "no-such"})
        with pytest.raises(RawToolError):
            await server.call_tool("workflow_state_update", {"workflow_id": failing["workflow_id"],
                                                             "updates": [{"path": "computed.x", "value": 1}]})
        await server.call_tool("workflow_test_transformation", {"transform": "console.log('hi'); input", "input": 1})
    finally:
        code = await server.close()
    assert code == 0, "closing stdin stops the server cleanly"
    assert server.lines, "the server answered"
    for line in server.lines:
        message = json.loads(line)  # every stdout line is one JSON-RPC message (shell output would not parse)
        assert message.get("jsonrpc") == "2.0", line
        assert line.endswith(b"\n") and b"\n" not in line[:-1]
    text = b"".join(server.lines)
    log = stderr_path.read_text()
    assert log.strip(), "DEBUG logging goes to stderr"
    # the tools/list answer on the wire
    [wire] = [line for line in server.lines if b'"tools"' in line and b'"inputSchema"' in line]
    print(f"tools/list JSON-RPC response: {len(wire)} bytes")
    assert len(json.dumps(json.loads(wire)["result"]["tools"], separators=(",", ":")).encode()) <= BUDGET_BYTES
    assert PROTOCOL_VERSION in text.decode()


async def test_stdio_with_the_2026_protocol_generation(tmp_path):
    """`mode="auto"` over a real stdio subprocess (server/discover instead of initialize)."""
    from mcp import StdioServerParameters

    project = make_project(tmp_path / "project")
    home, store = tmp_path / "home", tmp_path / "store.sqlite3"
    home.mkdir()
    params = StdioServerParameters(command=PYTHON, args=serve_args(project, store), cwd=str(project),
                                   env=server_env(home, store))
    async with Client(params, mode="auto") as client:
        assert client.protocol_version > "2025-11-25"
        assert len((await client.list_tools()).tools) == 20
        workflow_id = (await ok(client, "workflow_start", {"workflow": "messages"}))["workflow_id"]
        answer = await ok(client, "workflow_get_next_step", {"workflow_id": workflow_id})
        assert answer["step"]["id"] == "ask" and answer["messages"] == ["m1 hello world", "m2"]
        prompt = await client.get_prompt("sub_agent", {"workflow_id": workflow_id, "task_id": "t_1"})
        assert workflow_id in prompt.messages[0].content.text
