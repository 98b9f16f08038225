"""A minimal JSON-RPC client over a server subprocess's stdio, for tests that must control
the process itself: kill it with SIGKILL mid-call, and see every byte it writes to stdout.

It speaks the handshake generation (`initialize`, then `notifications/initialized`) and
matches responses to requests by id, so many calls can be in flight at once.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
from pathlib import Path
from typing import Any

from srv_helpers import PYTHON, tool_text  # noqa: F401 - tool_text re-exported for tests

PROTOCOL_VERSION = "2025-11-25"


class ServerGone(Exception):
    """The server process died (or was killed) before answering."""


class RawToolError(Exception):
    def __init__(self, tool: str, text: str):
        super().__init__(f"{tool}: {text}")
        self.tool, self.text = tool, text


class RawServer:
    def __init__(self, args: list[str], env: dict[str, str], cwd: Path, stderr_path: Path):
        self.args, self.env, self.cwd, self.stderr_path = args, env, cwd, stderr_path
        self.proc: asyncio.subprocess.Process | None = None
        self.lines: list[bytes] = []  # every line the server wrote to stdout
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._stderr: Any = None
        self.gone = False

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def start(self) -> RawServer:
        self._stderr = open(self.stderr_path, "ab")  # noqa: SIM115 - closed in _finish()
        self.proc = await asyncio.create_subprocess_exec(
            PYTHON, *self.args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=self._stderr, env=self.env, cwd=str(self.cwd), limit=64 * 1024 * 1024)
        self._reader = asyncio.create_task(self._read())
        init = await self.request("initialize", {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                                                 "clientInfo": {"name": "rawstdio-test", "version": "0"}})
        assert init["protocolVersion"] == PROTOCOL_VERSION, init
        await self.notify("notifications/initialized")
        return self

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        try:
            while True:
                line = await self.proc.stdout.readline()
                if not line:
                    break
                self.lines.append(line)
                try:
                    message = json.loads(line)
                except ValueError:
                    continue  # recorded in self.lines; the stdout test reports it
                waiter = self._waiting.pop(message.get("id"), None) if isinstance(message, dict) else None
                if waiter is not None and not waiter.done():
                    waiter.set_result(message)
        finally:
            self.gone = True
            for waiter in self._waiting.values():
                if not waiter.done():
                    waiter.set_exception(ServerGone("server closed stdout"))
            self._waiting.clear()

    async def _send(self, message: dict[str, Any]) -> None:
        if self.gone or self.proc is None or self.proc.stdin is None:
            raise ServerGone("server is not running")
        try:
            self.proc.stdin.write(json.dumps(message).encode() + b"\n")
            await self.proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise ServerGone(str(exc)) from None

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        await self._send({"jsonrpc": "2.0", "method": method, **({"params": params} if params else {})})

    async def send_request(self, method: str, params: dict[str, Any]) -> asyncio.Future[dict[str, Any]]:
        """Send a request; the returned future resolves to the raw response message."""
        request_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        await self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return future

    async def request(self, method: str, params: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
        future = await self.send_request(method, params)
        message = await asyncio.wait_for(future, timeout)
        if "error" in message:
            raise RuntimeError(f"{method}: JSON-RPC error {message['error']}")
        return dict(message["result"])

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The tool's structured content; `RawToolError` when isError."""
        result = await self.request("tools/call", {"name": name, "arguments": arguments})
        if result.get("isError"):
            raise RawToolError(name, "\n".join(c.get("text", "") for c in result.get("content", [])))
        return dict(result["structuredContent"])

    async def kill(self) -> None:
        """SIGKILL: no shutdown, no flush, exactly like a crash."""
        if self.proc is not None and self.proc.returncode is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            await self.proc.wait()
        await self._finish()

    async def close(self) -> int | None:
        """Close stdin (the stdio way to ask a server to stop) and wait for it."""
        if self.proc is None:
            return None
        if self.proc.stdin is not None and not self.proc.stdin.is_closing():
            self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 10)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
        await self._finish()
        return self.proc.returncode

    async def _finish(self) -> None:
        if self._reader is not None:
            try:
                await asyncio.wait_for(self._reader, 5)
            except (TimeoutError, Exception):
                self._reader.cancel()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
