"""Answer the MCP client at once while the plugin's first start installs the dependencies.

Claude Code gives a server 30 s to answer its handshake, and an install from an empty pip
cache can take longer. Until the real server runs, this proxy answers what does not depend
on it from the real server's own recorded answers (``answers.json``: the handshake, in both
protocol generations — ``initialize`` up to 2025-11-25, ``server/discover`` in 2026-07-28 —
and the tool, prompt and resource lists; a test checks them against the server). Tool calls
and every other request wait; a waiting call that asked for progress hears "installing…"
every few seconds.

When the install is done, the real server starts, the client's ``initialize`` (if any) is
replayed to it (its answer was already given and is dropped), the waiting messages follow in
their order, and from then on every line passes through unchanged both ways: progress,
requests from the server (elicitation), notifications. If the install fails, waiting and
later calls get an error that says what failed and how to fix it.

Standard library only: it runs before the venv exists.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
SUBSCRIPTION_KEY = "io.modelcontextprotocol/subscriptionId"
ACKNOWLEDGED = "notifications/subscriptions/acknowledged"
LIST_EVENTS = ("toolsListChanged", "promptsListChanged", "resourcesListChanged")
REPLAY_ID = "aromcp-launcher-replayed-initialize"
TICK = 2.0  # seconds between "installing" progress notifications
SERVER_START = 120.0  # seconds the real server may take to answer the replayed initialize
PREFIX = "aromcp-workflows plugin: "
INSTALLING = "aromcp-workflows is installing its dependencies (first start only, about a minute): {} s so far"


def key(value: Any) -> str:
    """A dict key for a JSON-RPC id or progress token (1 and "1" are different ids)."""
    return json.dumps(value)


def parse(line: bytes) -> dict[str, Any] | None:
    try:
        message = json.loads(line)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def params_of(message: dict[str, Any]) -> dict[str, Any]:
    params = message.get("params")
    return params if isinstance(params, dict) else {}


def meta_of(message: dict[str, Any]) -> dict[str, Any]:
    meta = params_of(message).get("_meta")
    return meta if isinstance(meta, dict) else {}


class Answers:
    """The real server's answers to the requests that do not depend on its state."""

    def __init__(self, recorded: dict[str, Any]) -> None:
        self.handshake = recorded["handshake"]
        self.modern = recorded["modern"]

    def answer(self, message: dict[str, Any], initialized: bool) -> dict[str, Any] | None:
        """The response to a request, or None when only the real server can give it."""
        method, params = message["method"], params_of(message)
        version = meta_of(message).get(VERSION_KEY)
        if params.get("cursor"):
            return None  # a later page: the recorded lists are single pages
        if version is not None:
            return self.modern_answer(message, version)
        if method == "initialize":
            result = self.initialize(params.get("protocolVersion"))
        else:
            result = self.handshake["results"].get(method) if initialized else None
        return None if result is None else {"jsonrpc": "2.0", "id": message["id"], "result": result}

    def initialize(self, requested: Any) -> dict[str, Any] | None:
        """The server's `initialize` result: the client's version when the server speaks it,
        else the server's latest (the client then decides whether it can go on)."""
        if not isinstance(requested, str):
            return None
        result = dict(self.handshake["initialize"])
        if requested in self.handshake["versions"]:
            result["protocolVersion"] = requested
        return result

    def modern_answer(self, message: dict[str, Any], version: Any) -> dict[str, Any] | None:
        """A 2026-07-28 request: every one names its version and stands alone."""
        if version not in self.modern["versions"]:
            error = {**self.modern["unsupported"], "data": {"supported": self.modern["versions"], "requested": version}}
            return {"jsonrpc": "2.0", "id": message["id"], "error": error}
        result = self.modern["results"].get(message["method"])
        return None if result is None else {"jsonrpc": "2.0", "id": message["id"], "result": result}

    def acknowledge(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """The first frame of a `subscriptions/listen` stream, which Claude Code awaits before
        it goes on: what the server honours of the requested events (every requested kind,
        as the SDK's ListenHandler does). None when the request is not one to acknowledge."""
        requested = params_of(message).get("notifications")
        version = meta_of(message).get(VERSION_KEY)
        if message["method"] != "subscriptions/listen" or not isinstance(requested, dict) \
                or version not in self.modern["versions"]:
            return None
        honored: dict[str, Any] = {name: True for name in LIST_EVENTS if requested.get(name)}
        uris = requested.get("resourceSubscriptions")
        if isinstance(uris, list) and uris:
            honored["resourceSubscriptions"] = list(uris)
        return {"jsonrpc": "2.0", "method": ACKNOWLEDGED,
                "params": {"_meta": {SUBSCRIPTION_KEY: message["id"]}, "notifications": honored}}

    def failure(self, message: dict[str, Any], problem: str) -> dict[str, Any]:
        """What a request gets when the server cannot start: a tool error for a tool call (the
        model reads it and can tell the user), a JSON-RPC error for anything else."""
        if message.get("method") != "tools/call":
            return {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32603, "message": problem}}
        result: dict[str, Any] = {"content": [{"type": "text", "text": problem}], "isError": True}
        if VERSION_KEY in meta_of(message):
            result.update(resultType="complete", _meta=self.modern["results"]["server/discover"].get("_meta", {}))
        return {"jsonrpc": "2.0", "id": message["id"], "result": result}


class Proxy:
    """The session between the client (our stdin/stdout) and the server once it runs."""

    def __init__(self, answers: Answers, out: IO[bytes]) -> None:
        self.answers = answers
        self.out = out
        self.out_lock = threading.Lock()  # one writer at a time on the client's channel
        self.lock = threading.Lock()  # the state below
        self.state = "installing"  # then "ready" or "failed"
        self.problem = ""
        self.held: list[tuple[str | None, bytes]] = []  # (request id key, line) for the server, in order
        self.waiting: dict[str, dict[str, Any]] = {}  # held requests by id key
        self.initialize: dict[str, Any] | None = None  # the client's, replayed to the server
        self.initialized = False
        self.progress: dict[str, float] = {}  # last progress value sent, by token key
        self.acknowledged: set[str] = set()  # listen streams the proxy acknowledged, by id key
        self.server: subprocess.Popen[bytes] | None = None
        self.replayed = threading.Event()
        self.client_gone = False
        self.started = time.monotonic()

    def write(self, message: dict[str, Any]) -> None:
        self.write_line(json.dumps(message, separators=(",", ":")).encode() + b"\n")

    def write_line(self, line: bytes) -> None:
        with self.out_lock:
            try:
                self.out.write(line)
                self.out.flush()
            except (OSError, ValueError):
                pass  # the client has gone; stdin's end will tell the main thread

    def from_client(self, line: bytes) -> None:
        """One line from the client: to the server once it runs, else answered or held."""
        with self.lock:
            if self.state == "ready":
                self.to_server(line)
                return
            message = parse(line)
            if message is None:
                self.hold(None, line)
            elif "id" in message and isinstance(message.get("method"), str):
                self.request(line, message)
            else:
                self.notification(line, message)

    def request(self, line: bytes, message: dict[str, Any]) -> None:
        answer = self.answers.answer(message, self.initialize is not None)
        acknowledgement = self.answers.acknowledge(message)
        if answer is not None:
            if message["method"] == "initialize":
                self.initialize = message
            self.write(answer)
        elif acknowledgement is not None:  # a stream that stays open: the server takes it over
            self.write(acknowledgement)
            self.acknowledged.add(key(message["id"]))
            self.hold(key(message["id"]), line)
        elif self.state == "failed":
            self.write(self.answers.failure(message, self.problem))
        else:
            self.hold(key(message["id"]), line)
            self.waiting[key(message["id"])] = message
            self.send_progress(message)

    def notification(self, line: bytes, message: dict[str, Any]) -> None:
        """`initialized` is replayed after the replayed `initialize`; a cancelled request that
        is still held is dropped with its cancellation; the rest waits for the server."""
        method = message.get("method")
        cancelled = key(params_of(message).get("requestId"))
        if method == "notifications/initialized":
            self.initialized = True
        elif method == "notifications/cancelled" and any(request == cancelled for request, _ in self.held):
            self.waiting.pop(cancelled, None)
            self.acknowledged.discard(cancelled)
            self.held = [(request, held) for request, held in self.held if request != cancelled]
        else:
            self.hold(None, line)

    def hold(self, request: str | None, line: bytes) -> None:
        if self.state == "installing":
            self.held.append((request, line))

    def send_progress(self, request: dict[str, Any]) -> None:
        """Tell a waiting call that asked for progress what is going on; its values rise
        by one, and the server's own later values for the same token continue above them."""
        token = meta_of(request).get("progressToken")
        if token is None:
            return
        value = self.progress.get(key(token), 0.0) + 1
        self.progress[key(token)] = value
        message = INSTALLING.format(int(time.monotonic() - self.started))
        self.write({"jsonrpc": "2.0", "method": "notifications/progress",
                    "params": {"progressToken": token, "progress": value, "message": message}})

    def tick(self) -> None:
        """Progress for every waiting call, every TICK seconds, while installing."""
        while True:
            time.sleep(TICK)
            with self.lock:
                if self.state != "installing":
                    return
                for request in self.waiting.values():
                    self.send_progress(request)

    def fail(self, problem: str) -> None:
        """The server cannot start: answer every waiting request with `problem` (lock held)."""
        self.state, self.problem = "failed", problem
        for request in self.waiting.values():
            self.write(self.answers.failure(request, problem))
        self.waiting.clear()
        self.held.clear()

    def to_server(self, line: bytes) -> None:
        assert self.server is not None and self.server.stdin is not None
        try:
            self.server.stdin.write(line)
            self.server.stdin.flush()
        except OSError:
            pass  # the server has gone; pump() ends the process with its exit code

    def install(self, command: Sequence[str]) -> str | None:
        """Run the install in a process of its own session, so that it finishes even when
        the client goes away (the next start then finds the venv ready). Its lines go to our
        stderr; the last one is the problem when it fails. None when it succeeded."""
        try:
            proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            return f"cannot run {command[0]} ({exc.strerror})"
        assert proc.stderr is not None
        last = ""
        for raw in proc.stderr:
            text = raw.decode("utf-8", "replace")
            try:
                sys.stderr.write(text)
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            last = text.strip() or last
        code = proc.wait()
        return None if code == 0 else (last.removeprefix(PREFIX) or f"the install exited with code {code}")

    def start(self, command: Sequence[str], pass_fds: Sequence[int]) -> None:
        """Start the real server and hand it the session: the replayed handshake, then the
        held messages in order; from then on lines pass straight through."""
        with self.lock:
            try:
                self.server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                               pass_fds=tuple(pass_fds))
            except OSError as exc:
                self.fail(f"{PREFIX}cannot start the server {command[0]} ({exc.strerror}); reconnect with /mcp")
                return
            threading.Thread(target=self.pump, daemon=True).start()
            if self.initialize is not None:
                self.to_server(json.dumps({**self.initialize, "id": REPLAY_ID}).encode() + b"\n")
                if not self.replayed.wait(SERVER_START) or self.server.poll() is not None:
                    self.fail(f"{PREFIX}the server stopped before it answered (exit {self.server.poll()}); its "
                              "error is in the MCP log (claude --debug), then reconnect with /mcp")
                    return
                if self.initialized:
                    self.to_server(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
            for _request, line in self.held:
                self.to_server(line)
            self.held.clear()
            self.waiting.clear()
            self.state = "ready"

    def pump(self) -> None:
        """Server to client, line by line. What the client already had from the proxy is
        dropped (the answer to the replayed handshake, a second acknowledgement of a listen
        stream); progress for a token the proxy already used is raised above its values.
        When the server ends, so does the proxy, with the server's exit code."""
        assert self.server is not None and self.server.stdout is not None
        for line in self.server.stdout:
            if not self.replayed.is_set() or self.progress or self.acknowledged:
                message = parse(line)
                if self.already_sent(message):
                    continue
                line = self.raised(line, message)
            self.write_line(line)
        code = self.server.wait()
        self.replayed.set()
        if self.state == "ready" and not self.client_gone:
            os._exit(code)

    def already_sent(self, message: dict[str, Any] | None) -> bool:
        if message is None:
            return False
        if message.get("id") == REPLAY_ID and "method" not in message:
            self.replayed.set()
            return True
        stream = key(meta_of(message).get(SUBSCRIPTION_KEY))
        if message.get("method") == ACKNOWLEDGED and stream in self.acknowledged:
            self.acknowledged.discard(stream)
            return True
        return False

    def raised(self, line: bytes, message: dict[str, Any] | None) -> bytes:
        if message is None or message.get("method") != "notifications/progress":
            return line
        params = params_of(message)
        offset = self.progress.get(key(params.get("progressToken")))
        if offset is None or not isinstance(params.get("progress"), (int, float)):
            return line
        params["progress"] += offset
        return json.dumps(message, separators=(",", ":")).encode() + b"\n"

    def client_closed(self) -> int:
        """stdin ended: a running server gets its stdin closed and we wait for it; an
        install goes on without us."""
        with self.lock:
            self.client_gone = True
            server, state = self.server, self.state
        if state != "ready" or server is None:
            return 0 if state == "installing" else 1
        assert server.stdin is not None
        try:
            server.stdin.close()
        except OSError:
            pass
        return server.wait()


def run(answers: Path, install: Sequence[str], server: Sequence[str], pass_fds: Sequence[int]) -> int:
    """Serve the client on stdin/stdout until it closes stdin (or the server ends)."""
    proxy = Proxy(Answers(json.loads(answers.read_text(encoding="utf-8"))), sys.stdout.buffer)

    def install_then_start() -> None:
        problem = proxy.install(install)
        if problem is None:
            proxy.start(server, pass_fds)
        else:
            with proxy.lock:
                proxy.fail(f"{PREFIX}{problem}")

    threading.Thread(target=install_then_start, daemon=True).start()
    threading.Thread(target=proxy.tick, daemon=True).start()
    for line in sys.stdin.buffer:
        if line.strip():
            proxy.from_client(line)
    return proxy.client_closed()
