"""The plugin's first start: the launcher answers the client at once while it installs.

From an empty plugin data folder the launcher answers through `plugin/server/proxy.py`
until the install is done, then hands the session to the real server. The install is held
up by taking the launcher's install lock (as another launcher's slow install would), so
"answered at once" needs no timing: the answers come while nothing is installed.

- `answers.json` is what the real server answers (recorded afresh and compared);
- raw JSON-RPC: the proxy's answers equal the real server's, request by request, in both
  protocol generations, and a failed install answers held requests with what to do;
- `mcp.Client` in `mode="legacy"` and `mode="auto"`: the handshake and `tools/list` while
  installing, a held tool call that hears "installing…" progress and then runs on the real
  server, with the server's own progress and its user_input form passed through.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp_types import ElicitResult
from plugin_helpers import (
    ANSWERS,
    PLUGIN,
    RawClient,
    install_held,
    launcher_env,
    modern_meta,
    start_launcher,
    tool_text,
)
from plugin_snapshot import LISTS, UNKNOWN_VERSION, record

SLOW_THEN_ASK = """
name: slow-then-ask
description: "A shell step that takes a while, then a question"
version: "1.0.0"
steps:
  - id: build
    type: shell_command
    command: "sleep 1; echo built"
  - id: ask
    type: user_input
    prompt: "Your name?"
    state_update: {path: raw.name}
  - id: after
    type: agent_prompt
    prompt: "say done"
"""


def test_the_recorded_answers_are_the_servers() -> None:
    """What the proxy answers from is what the server answers now; if this fails, the
    tools, prompts, instructions or version changed: run tests/integrations/plugin_snapshot.py."""
    assert json.loads(ANSWERS.read_text()) == record()


def both_sessions(folder: Path, name: str) -> tuple[RawClient, RawClient]:
    """A real server and a launcher whose install is held (so the proxy answers)."""
    (folder / "server").mkdir(exist_ok=True)
    server = RawClient([sys.executable, "-m", "aromcp_workflows", "serve"],
                       launcher_env(folder / "server"), folder)
    proxy = start_launcher(PLUGIN, folder / name, folder)
    return server, proxy


def same(method: str, params: dict[str, Any] | None, *clients: RawClient) -> None:
    server, proxy = (client.request(method, params) for client in clients)
    assert proxy == server, (method, params)


@pytest.mark.parametrize("version", [*json.loads(ANSWERS.read_text())["handshake"]["versions"],
                                     "2099-01-01", UNKNOWN_VERSION])
def test_the_proxy_answers_the_handshake_era_as_the_server_does(tmp_path: Path, version: str) -> None:
    with install_held(tmp_path / "data"):
        server, proxy = both_sessions(tmp_path, "data")
        with server, proxy:
            assert proxy.handshake(version) == server.handshake(version)
            for method in (*LISTS, "ping"):
                same(method, None, server, proxy)


def test_the_proxy_answers_the_2026_era_as_the_server_does(tmp_path: Path) -> None:
    with install_held(tmp_path / "data"):
        server, proxy = both_sessions(tmp_path, "data")
        with server, proxy:
            for method in ("server/discover", *LISTS):
                same(method, {"_meta": modern_meta()}, server, proxy)
                same(method, {"_meta": modern_meta(UNKNOWN_VERSION)}, server, proxy)
            for number, events in enumerate(({"toolsListChanged": True, "promptsListChanged": True,
                                              "resourcesListChanged": True},
                                             {"toolsListChanged": True, "promptsListChanged": False},
                                             {"resourceSubscriptions": ["workflow://x"]}, {})):
                acks = []
                for client in (server, proxy):  # the stream's first frame, which Claude Code waits for
                    client.send({"id": f"listen:{number}", "method": "subscriptions/listen",
                                 "params": {"_meta": modern_meta(), "notifications": events}})
                    acks.append(client.wait_for(lambda m, n=number: m.get("params", {}).get("_meta", {}).get(
                        "io.modelcontextprotocol/subscriptionId") == f"listen:{n}"))
                assert acks[0] == acks[1], events


def test_a_failed_install_answers_held_requests_with_what_to_do(tmp_path: Path) -> None:
    """pip finds nothing (no index): the held tool call gets a tool error naming the
    problem, the log and the fix; another held request gets a JSON-RPC error; a cancelled
    one gets nothing; later calls fail at once; the lists are still answered."""
    data, empty = tmp_path / "data", tmp_path / "no-wheels"
    empty.mkdir()
    pip = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(empty), "PIP_CONFIG_FILE": os.devnull}
    with install_held(data):
        proxy = start_launcher(PLUGIN, data, tmp_path, **pip)
        proxy.handshake()
        proxy.send({"id": 5, "method": "tools/call",
                    "params": {"name": "workflow_list", "arguments": {}, "_meta": {"progressToken": "t"}}})
        proxy.send({"id": 6, "method": "tools/call", "params": {"name": "workflow_list", "arguments": {}}})
        proxy.send({"id": 7, "method": "prompts/get", "params": {"name": "workflow"}})
        proxy.send({"method": "notifications/cancelled", "params": {"requestId": 6}})
        installing = proxy.wait_for(lambda m: m.get("method") == "notifications/progress")
        assert "installing its dependencies" in installing["params"]["message"]
    with proxy:
        held = proxy.wait_for(lambda m: m.get("id") == 5, timeout=300)
        text = tool_text(held)
        assert held["result"]["isError"] is True
        assert "pip could not install the dependencies" in text and str(data / "install.log") in text, text
        assert "reconnect the server with /mcp" in text
        assert "Traceback" not in text
        assert proxy.wait_for(lambda m: m.get("id") == 7)["error"]["message"] == text
        later = proxy.request("tools/call", {"name": "workflow_list", "arguments": {}})
        assert later["result"]["isError"] is True and tool_text(later) == text
        assert proxy.request("tools/list")["result"]["tools"]
        assert not [m for m in proxy.seen if m.get("id") == 6]  # cancelled while held: never answered
    assert "Traceback" not in proxy.stderr_text()


def start_instance(project: Path, store: Path) -> str:
    """A running instance in the store the plugin's server will use, so that the held call
    can be one that runs a shell step and asks a question."""
    from aromcp_workflows.app.service import WorkflowService

    return str(WorkflowService(project_dir=project, store_path=store).start("slow-then-ask", {}).workflow_id)


async def reference_tools(tmp_path: Path, mode: str) -> list[dict[str, Any]]:
    from aromcp_workflows.app.service import WorkflowService
    from aromcp_workflows.server.mcp import build_server

    server = build_server(lambda: WorkflowService(project_dir=tmp_path, store_path=tmp_path / "ref.sqlite"))
    async with Client(server, mode=mode) as client:  # type: ignore[arg-type]
        return [tool.model_dump() for tool in (await client.list_tools()).tools]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_first_start_connects_at_once_and_serves_once_installed(tmp_path: Path, mode: str) -> None:
    data, project = tmp_path / "data", tmp_path / "project"
    (project / ".aromcp" / "workflows").mkdir(parents=True)
    (project / ".aromcp" / "workflows" / "slow-then-ask.yaml").write_text(SLOW_THEN_ASK)
    workflow_id = start_instance(project, data / "workflows.sqlite")
    env = launcher_env(data, CLAUDE_PROJECT_DIR=str(project), AROMCP_PROGRESS_INTERVAL="0.2")
    params = StdioServerParameters(command=sys.executable, args=[str(PLUGIN / "server" / "launch.py")],
                                   cwd=str(project), env=env)
    progress: list[tuple[float, str | None]] = []
    installing = asyncio.Event()
    forms: list[str] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, message))
        if message and "installing" in message:
            installing.set()

    async def user(context: Any, request: Any) -> ElicitResult:
        forms.append(request.message)
        return ElicitResult(action="accept", content={"answer": "ada"})

    lock = open(data / "install.lock", "a")  # noqa: SIM115 - released mid-test, closed below
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        with tempfile.TemporaryFile("w+") as errlog:
            async with Client(stdio_client(params, errlog=errlog), mode=mode, elicitation_callback=user) as client:
                tools = [tool.model_dump() for tool in (await client.list_tools()).tools]
                assert tools == await reference_tools(tmp_path, mode)  # answered while nothing is installed
                assert not list((data / "venvs").glob("*/aromcp-workflows-plugin.json"))
                call = asyncio.create_task(client.call_tool("workflow_get_next_step", {"workflow_id": workflow_id},
                                                            progress_callback=on_progress))
                await asyncio.wait_for(installing.wait(), 60)
                lock.close()  # the install may go on now
                result = await asyncio.wait_for(call, 600)
                assert not result.is_error, result.content
                assert result.structured_content["step"]["id"] == "after"
                assert result.structured_content["user_answers"][0]["answer"] == "ada"
                assert (await client.list_tools()).tools  # now from the real server
    finally:
        lock.close()
    assert forms == ["Your name?"]  # the server's form reached the client through the proxy
    values = [value for value, _ in progress]
    assert values == sorted(values) and len(set(values)) == len(values), progress  # rising, as MCP requires
    assert any(message and message.startswith("step build: command running") for _, message in progress), progress

