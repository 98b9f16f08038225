"""Helpers for the server tests: a project with the test workflows, tool-call assertions,
and a scripted agent that speaks only the MCP protocol (in memory or over stdio).

Everything here goes through `mcp.Client.call_tool` (or the raw JSON-RPC client in
`rawstdio.py`): the tests see exactly what a client sees on the wire.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
WORKFLOWS = HERE / "workflows"
PYTHON = sys.executable


def make_project(root: Path, extra: dict[str, str] | None = None) -> Path:
    """A project directory whose `.aromcp/workflows` holds the test workflows (+ `extra`)."""
    target = root / ".aromcp" / "workflows"
    target.mkdir(parents=True, exist_ok=True)
    for source in WORKFLOWS.glob("*.yaml"):
        shutil.copy(source, target / source.name)
    for name, text in (extra or {}).items():
        (target / f"{name}.yaml").write_text(text, encoding="utf-8")
    return root


def tool_text(result: Any) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content or [])


async def ok(client: Any, name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    """Call a tool that must succeed; return its structured content."""
    result = await client.call_tool(name, args or {})
    assert not result.is_error, f"{name}({args}) failed: {tool_text(result)}"
    assert isinstance(result.structured_content, dict), f"{name}: no structured content"
    return result.structured_content


async def fails(client: Any, name: str, args: dict[str, Any] | None = None) -> str:
    """Call a tool that must fail with isError; return the error text."""
    result = await client.call_tool(name, args or {})
    assert result.is_error, f"{name}({args}) should have failed, got {result.structured_content}"
    text = tool_text(result)
    assert text, f"{name}: isError without a message"
    return text


def answer_for(step: dict[str, Any]) -> Any:
    """A deterministic answer for any atomic step (what a scripted agent reports)."""
    kind, definition = step["type"], step["definition"]
    if kind == "agent_shell_command":
        proc = subprocess.run(["bash", "-c", definition["command"]], capture_output=True, text=True, check=False)
        return proc.stdout
    if kind == "mcp_call":
        return {"method": definition["method"], "params": definition["params"], "ok": True}
    if kind == "user_input":
        choices = definition.get("choices")
        return choices[0] if choices else "main"
    if kind == "agent_prompt":
        return f"did: {definition['prompt']}"
    raise AssertionError(f"no scripted answer for step type {kind}")


@dataclass
class AgentLog:
    messages: list[str] = field(default_factory=list)
    steps: list[tuple[str, str, str]] = field(default_factory=list)  # (task, type, id)
    calls: dict[str, int] = field(default_factory=dict)

    def count(self, tool: str) -> None:
        self.calls[tool] = self.calls.get(tool, 0) + 1

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())


Answerer = Callable[[dict[str, Any]], Any]


class ProtocolAgent:
    """Drives a workflow through MCP tools only.

    `economical=True`: act, then step_complete, whose answer carries the next step.
    `economical=False` (seed style): get_next_step → act → step_complete (answer ignored) →
    get_next_step.  Sub-agents (parallel_tasks) run as concurrent asyncio tasks over the
    same client connection, each pulling its own task_id.
    """

    def __init__(self, client: Any, workflow_id: str, economical: bool = True,
                 answerer: Answerer = answer_for, log: AgentLog | None = None):
        self.client = client
        self.workflow_id = workflow_id
        self.economical = economical
        self.answerer = answerer
        self.log = log or AgentLog()

    async def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        self.log.count(tool)
        return await ok(self.client, tool, args)

    async def next_step(self, task_id: str | None) -> dict[str, Any]:
        args: dict[str, Any] = {"workflow_id": self.workflow_id}
        if task_id:
            args["task_id"] = task_id
        return await self.call("workflow_get_next_step", args)

    async def complete(self, task_id: str | None, step: dict[str, Any], result: Any) -> dict[str, Any]:
        args: dict[str, Any] = {"workflow_id": self.workflow_id, "step_id": step["id"], "result": result}
        if task_id:
            args["task_id"] = task_id
        return await self.call("workflow_step_complete", args)

    async def act(self, task_id: str | None, step: dict[str, Any]) -> Any:
        if step["type"] == "parallel_tasks":
            await asyncio.gather(*(self.run(t["task_id"]) for t in step["definition"]["tasks"]))
            return None
        if step["type"] == "wait":
            await asyncio.gather(*(self.run(t) for t in step["definition"]["task_ids"]))
            return None
        return self.answerer(step)

    async def run(self, task_id: str | None = None) -> dict[str, Any]:
        """Run one thread to its end; return the last answer (step null)."""
        answer = await self.next_step(task_id)
        self.log.messages.extend(answer["messages"])
        step = answer["step"]
        while step is not None:
            self.log.steps.append((task_id or "main", step["type"], step["id"]))
            result = await self.act(task_id, step)
            target = step
            if step["type"] == "wait":  # complete the parallel_tasks step again
                target = {**step, "id": step["id"].removesuffix(".wait")}
            reply = await self.complete(task_id, target, result)
            if self.economical:
                self.log.messages.extend(reply["messages"])
                if reply["next_step"] is None:
                    return {"status": reply["status"], "step": None, "error": reply.get("error")}
                step = reply["next_step"]
            else:
                answer = await self.next_step(task_id)
                self.log.messages.extend(answer["messages"])
                step = answer["step"]
        return answer


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


TOKEN = "test-token-7c1f0e9a2b4d6e8f0a1c3e5b7d9f1a3c"  # what HTTP test servers get in AROMCP_HTTP_TOKEN


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 30, host: str = "127.0.0.1") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode} before listening")
        with socket.socket() as sock:
            if sock.connect_ex((host, port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listening on {host}:{port} after {timeout}s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGINT (the server stops its commands and leaves), SIGKILL if it does not."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@dataclass
class HttpServer:
    """A `serve --http` subprocess: where it listens and what it wrote to stderr."""

    proc: subprocess.Popen[bytes]
    host: str
    port: int
    stderr_path: Path

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/mcp"

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")


@contextmanager
def serving_http(tmp_path: Path, project: Path, *more: str, token: str | None = TOKEN, host: str = "127.0.0.1",
                 store: Path | None = None, port: int | None = None, **env: str) -> Iterator[HttpServer]:
    """`serve --http` on `port` (a free one) of `host`, with `token` in AROMCP_HTTP_TOKEN (None:
    no token given), a tmp HOME and store; stopped on leaving."""
    home, port = tmp_path / "home", port or free_port(host)
    home.mkdir(exist_ok=True)
    store = store or tmp_path / "store.sqlite3"
    extra = dict(env) | ({"AROMCP_HTTP_TOKEN": token} if token is not None else {})
    stderr_path = tmp_path / f"http-{port}.stderr"
    with open(stderr_path, "wb") as stderr:
        proc = subprocess.Popen([PYTHON, *serve_args(project, store, "--http", "--host", host, "--port", str(port),
                                                     *more)],
                                cwd=project, env=server_env(home, store, **extra), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        wait_for_port(port, proc, host=host)
        server = HttpServer(proc, host, port, stderr_path)
        deadline = time.monotonic() + 30
        while "serving MCP" not in server.stderr() and time.monotonic() < deadline:  # it binds before it says so
            time.sleep(0.05)
        yield server
    finally:
        stop(proc)


@asynccontextmanager
async def http_client(url: str, token: str | None = TOKEN, mode: str = "legacy", **kwargs: Any) -> AsyncIterator[Any]:
    """An `mcp.Client` over streamable HTTP that sends `Authorization: Bearer <token>`."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode, **kwargs) as client:
            yield client


def server_env(home: Path, store: Path | None = None, **extra: str) -> dict[str, str]:
    """Environment for a server subprocess: tmp HOME and store, never the user's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AROMCP_")}
    env.update(HOME=str(home), PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
    env["XDG_DATA_HOME"] = str(home / ".local" / "share")
    if store is not None:
        env["AROMCP_WORKFLOWS_STORE"] = str(store)
    env.update(extra)
    return env


def serve_args(project: Path, store: Path, *more: str) -> list[str]:
    return ["-m", "aromcp_workflows", "--project-dir", str(project), "serve", "--store", str(store), *more]


def pretty(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False)


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 10.0, every: float = 0.05) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(every)
