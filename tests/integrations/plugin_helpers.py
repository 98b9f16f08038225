"""Helpers for the plugin launcher tests: plugin folders as an update lands them, the
launcher run as Claude Code runs it, and a raw JSON-RPC client over its stdio.

The raw client sees every line on the wire (what the proxy answers before the real server
exists, progress notifications, requests from the server), which `mcp.Client` hides.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import pwd
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "plugin"
LAUNCHER = PLUGIN / "server" / "launch.py"
ANSWERS = PLUGIN / "server" / "answers.json"
META_VERSION = "io.modelcontextprotocol/protocolVersion"
MODERN = "2026-07-28"
HANDSHAKE = "2025-11-25"
SYSTEM_PYTHON = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or "python3"


def plugin_copy(root: Path) -> Path:
    """The plugin in a folder of its own, as a plugin update lands it (Claude Code copies the
    new version into a new folder); the package links point at this checkout."""
    server = root / "plugin" / "server"
    server.mkdir(parents=True)
    for item in (PLUGIN / "server").iterdir():
        if item.is_symlink():
            (server / item.name).symlink_to(item.resolve())
        elif item.is_file():
            shutil.copy2(item, server / item.name)
    return root / "plugin"


def launcher_env(data: Path, **extra: str) -> dict[str, str]:
    """Claude Code's environment for the plugin's server: its data folder, a store inside it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLAUDE", "AROMCP"))}
    env.update(CLAUDE_PLUGIN_DATA=str(data), AROMCP_WORKFLOWS_STORE=str(data / "workflows.sqlite"), **extra)
    return env


def prepare(plugin: Path, data: Path, user: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """`launch.py --prepare`: make the plugin's venv (or find it ready), then exit. As another
    user, with the system's Python (this one may live in root's home)."""
    python = sys.executable if user is None else SYSTEM_PYTHON
    return subprocess.run([python, str(plugin / "server" / "launch.py"), "--prepare"], capture_output=True,
                          text=True, env=launcher_env(data, **env), timeout=900, user=user)


def other_user() -> str | None:
    """Who to run the launcher as so that root-owned files really are out of its reach:
    `nobody` when the tests run as root (root ignores permission bits), else the tester."""
    return "nobody" if os.geteuid() == 0 else None


def give_to(path: Path, user: str | None) -> None:
    """Make `path` (a directory) writable by `user` (None: the current user already owns it)."""
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chown(path, entry.pw_uid, entry.pw_gid)


def venv_of(pid: int) -> Path:
    """The venv a running server was started from (its argv[0] is `<venv>/bin/python`)."""
    argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0].decode()
    return Path(argv0).parents[1]


def wait_until_ready(data: Path, timeout: float = 600) -> Path:
    """The venv a launcher is installing in the background, once it is ready."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready = [marker.parent for marker in (data / "venvs").glob("*/aromcp-workflows-plugin.json")]
        if ready:
            with open(data / "install.lock", "a") as lock:  # the installer has let go of it
                import fcntl

                fcntl.flock(lock, fcntl.LOCK_EX)
            return ready[0]
        time.sleep(0.5)
    raise AssertionError(f"no venv became ready under {data} in {timeout} s")


@contextlib.contextmanager
def install_held(data: Path) -> Iterator[None]:
    """Hold the launcher's install lock: an install (here, another launcher's) is under way,
    so a launcher that needs the venv waits for it, as on a slow network."""
    import fcntl

    data.mkdir(parents=True, exist_ok=True)
    with open(data / "install.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


class RawClient:
    """JSON-RPC over a process's stdio, one line per message; every line is kept."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path) -> None:
        self.stderr = tempfile.NamedTemporaryFile("w+", dir=cwd, prefix="stderr-", suffix=".log", delete=False)  # noqa: SIM115
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                                     env=env, cwd=str(cwd))
        self.started = time.perf_counter()
        self.received: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.seen: list[dict[str, Any]] = []  # everything received, in order
        self._ids = itertools.count(1)
        threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True).start()

    def _read(self, stream: IO[bytes]) -> None:
        for line in stream:
            self.received.put(json.loads(line))
        self.received.put(None)

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps({"jsonrpc": "2.0", **message}) + "\n").encode())
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any] | None = None, timeout: float = 60,
                request_id: Any = None) -> dict[str, Any]:
        """Send a request and wait for its response (other messages are kept in `seen`)."""
        request_id = next(self._ids) if request_id is None else request_id
        self.send({"id": request_id, "method": method, **({} if params is None else {"params": params})})
        return self.wait_for(lambda m: m.get("id") == request_id and "method" not in m, timeout)

    def wait_for(self, wanted: Any, timeout: float = 60) -> dict[str, Any]:
        for message in self.seen:
            if wanted(message):
                return message
        deadline = time.monotonic() + timeout
        while True:
            try:
                message = self.received.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"nothing wanted arrived in {timeout} s; seen {self.seen}") from None
            if message is None:
                raise AssertionError(f"the process closed stdout; stderr: {self.stderr_text()[-3000:]}")
            self.seen.append(message)
            if wanted(message):
                return message

    def handshake(self, version: str = HANDSHAKE) -> dict[str, Any]:
        answer = self.request("initialize", {"protocolVersion": version, "capabilities": {},
                                             "clientInfo": {"name": "plugin-test", "version": "0"}})
        self.send({"method": "notifications/initialized"})
        return answer

    def stderr_text(self) -> str:
        if not self.stderr.closed:
            self.stderr.flush()
        return Path(self.stderr.name).read_text()

    def close(self, timeout: float = 30) -> int:
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.stderr.close()
        return code

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def modern_meta(version: str = MODERN, **extra: Any) -> dict[str, Any]:
    """The `_meta` envelope a 2026-07-28 client puts in every request."""
    return {META_VERSION: version, "io.modelcontextprotocol/clientInfo": {"name": "plugin-test", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": {}, **extra}


def start_launcher(plugin: Path, data: Path, cwd: Path, *args: str, **env: str) -> RawClient:
    return RawClient([sys.executable, str(plugin / "server" / "launch.py"), *args], launcher_env(data, **env), cwd)


def tool_text(answer: dict[str, Any]) -> str:
    return "\n".join(block.get("text", "") for block in answer["result"].get("content", []))
