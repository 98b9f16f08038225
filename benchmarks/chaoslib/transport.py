"""How the campaign's clients reach the servers, and what they see when a fault hits.

A call ends in a `Reply` (a tool's structured answer, or a tool error) or raises `Lost`:
the answer never came (the connection died, the server was killed or stopped past the
call's timeout).  A lost call may or may not have taken effect; the agent sends it again.

- `StdioTransport`: one server process over stdio, many calls in flight on it (JSON-RPC
  ids).  When the process dies every call in flight is lost; the next call starts a new
  server, as an MCP client restarts the server it launched.
- `HttpTransport`: replicas behind a load balancer without affinity: each call goes to a
  replica drawn at random among those the balancer believes up (a killed replica is
  taken out until it is back; a stopped one is not: its calls time out).  An optional
  bearer token goes with every request (`HttpTransport(token=...)`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import random
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from raw_mcp import RawClient

PROTOCOL = "2025-11-25"


class Lost(Exception):
    """The call's answer never came: the agent does not know whether it took effect."""


@dataclass
class Reply:
    ok: bool  # False: the tool answered with isError
    data: dict[str, Any]
    text: str = ""


# -- stdio ---------------------------------------------------------------------------------
@dataclass
class _Generation:
    """One server process and the calls waiting on it."""

    proc: asyncio.subprocess.Process
    waiting: dict[int, asyncio.Future[dict[str, Any]]] = field(default_factory=dict)
    gone: bool = False
    reader: asyncio.Task[None] | None = None


class StdioTransport:
    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path, stderr: Path) -> None:
        self.argv, self.env, self.cwd, self.stderr_path = argv, env, cwd, stderr
        self.current: _Generation | None = None
        self.starts = 0
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()
        self._stderr = stderr.open("ab")

    @property
    def pid(self) -> int | None:
        current = self.current
        return None if current is None or current.gone else current.proc.pid

    async def _ensure(self) -> _Generation:
        """The live server, started if there is none (one start for all waiting callers)."""
        async with self._lock:
            current = self.current
            if current is not None and not current.gone:
                return current
            proc = await asyncio.create_subprocess_exec(
                *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=self._stderr,
                env=self.env, cwd=str(self.cwd), limit=64 * 1024 * 1024)
            generation = _Generation(proc)
            generation.reader = asyncio.create_task(self._read(generation))
            self.current = generation
            self.starts += 1
            try:
                await self._request(generation, "initialize", {
                    "protocolVersion": PROTOCOL, "capabilities": {},
                    "clientInfo": {"name": "chaos", "version": "0"}}, 60)
                self._send(generation, {"jsonrpc": "2.0", "method": "notifications/initialized"})
            except Lost:
                pass  # killed while starting: the caller finds it gone and asks again
            return generation

    async def _read(self, generation: _Generation) -> None:
        stdout = generation.proc.stdout
        assert stdout is not None
        try:
            while line := await stdout.readline():
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                waiter = generation.waiting.pop(message.get("id"), None) if isinstance(message, dict) else None
                if waiter is not None and not waiter.done():
                    waiter.set_result(message)
        finally:
            generation.gone = True
            for waiter in generation.waiting.values():
                if not waiter.done():
                    waiter.set_exception(Lost("the server closed its stdout"))
            generation.waiting.clear()
            await generation.proc.wait()

    def _send(self, generation: _Generation, message: dict[str, Any]) -> None:
        stdin = generation.proc.stdin
        if generation.gone or stdin is None or stdin.is_closing():
            raise Lost("the server is not running")
        try:
            stdin.write(json.dumps(message).encode() + b"\n")
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise Lost(str(exc)) from None

    async def _request(self, generation: _Generation, method: str, params: dict[str, Any],
                       timeout: float) -> dict[str, Any]:
        request_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        generation.waiting[request_id] = future
        try:
            self._send(generation, {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        except Lost:
            generation.waiting.pop(request_id, None)  # nobody will await it: no "exception never retrieved"
            raise
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            generation.waiting.pop(request_id, None)
            with contextlib.suppress(Lost):  # as the MCP SDK's client does when its read timeout expires
                self._send(generation, {"jsonrpc": "2.0", "method": "notifications/cancelled",
                                        "params": {"requestId": request_id, "reason": "read timeout"}})
            raise Lost(f"no answer to {method} in {timeout:g} s") from None

    async def call(self, tool: str, args: dict[str, Any], timeout: float = 120) -> Reply:
        generation = await self._ensure()
        message = await self._request(generation, "tools/call", {"name": tool, "arguments": args}, timeout)
        if "error" in message:
            return Reply(False, {}, f"JSON-RPC error {message['error']}")
        result = message["result"]
        text = " ".join(c.get("text", "") for c in result.get("content", []) if isinstance(c, dict))
        return Reply(not result.get("isError"), result.get("structuredContent") or {}, text)

    def kill(self) -> int | None:
        """SIGKILL the server (a crash); its pid, or None when none was running."""
        pid = self.pid
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
        return pid

    async def close(self) -> None:
        current = self.current
        if current is not None and not current.gone and current.proc.stdin is not None:
            current.proc.stdin.close()
            try:
                await asyncio.wait_for(current.proc.wait(), 15)
            except TimeoutError:
                current.proc.kill()
                await current.proc.wait()
        self._stderr.close()


# -- HTTP replicas --------------------------------------------------------------------------
@dataclass
class Endpoint:
    """One replica slot as the balancer sees it."""

    name: str
    url: str = ""
    up: bool = False
    client: RawClient | None = None


class HttpTransport:
    def __init__(self, endpoints: list[Endpoint], rng: random.Random, token: str | None = None) -> None:
        self.endpoints, self.rng, self.token = endpoints, rng, token

    def set_up(self, endpoint: Endpoint, url: str) -> None:
        endpoint.url, endpoint.client, endpoint.up = url, RawClient(url, self.token), True

    async def call(self, tool: str, args: dict[str, Any], timeout: float = 15) -> Reply:
        live = [e for e in self.endpoints if e.up and e.client is not None]
        if not live:
            await asyncio.sleep(0.2)
            raise Lost("no replica is up")
        endpoint = self.rng.choice(live)
        assert endpoint.client is not None
        try:
            result = await asyncio.wait_for(endpoint.client.call_tool(tool, args), timeout)
        except (OSError, asyncio.IncompleteReadError, TimeoutError, RuntimeError) as exc:
            raise Lost(f"{endpoint.name}: {type(exc).__name__}: {exc}") from None
        text = " ".join(getattr(block, "text", "") for block in result.content)
        if result.is_error and text.startswith(f"{tool}: HTTP "):
            raise Lost(f"{endpoint.name}: {text[:200]}")  # the replica did not process it as a call
        return Reply(not result.is_error, result.structured_content or {}, text)

    async def close(self) -> None:
        for endpoint in self.endpoints:
            if endpoint.client is not None:
                await endpoint.client.close()
