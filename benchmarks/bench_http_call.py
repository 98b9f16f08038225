"""What a plain MCP call over HTTP costs, this tree against an earlier commit, in one run; and
what tokenless clients cost the server.

Run: ``.venv/bin/python benchmarks/bench_http_call.py [--before REF] [--calls N] [--rounds R]``

A. Two ``serve --http`` servers on loopback, one from ``REF`` (``git archive``, default
   ``main``) and one from this tree, same Python and packages, each with its bearer token.
   Each round times ``N`` sequential calls on each server, the order alternating round by
   round, over one keep-alive connection, as Claude Code 2.1.328 sends them (protocol
   2026-07-28: every request stands alone): ``tools/call workflow_list`` (the service's
   plainest call) and ``tools/list``.  Printed: medians per call and the ratio this/before.
B. 40 connections without a token, each sending all but the last byte of a 4 MiB body (the
   attack of issue 31), against each server: its VmRSS before and at the peak.
C. In process, what the checks in front of the app cost one request with a valid token:
   the credential gate alone (`http.gate`, the MCP bearer admission), and with the access
   log and the Host/Origin rule around it, against the Host/Origin rule alone.

Absolute times drift on shared machines; the ratio is the figure to read.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx2

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine_info import machine  # noqa: E402

TOKEN = "bench-http-call-token-0123456789abcdef"
MODERN = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
           "Authorization": f"Bearer {TOKEN}", "MCP-Protocol-Version": MODERN}
FOUR_MIB = 4 * 1024 * 1024


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Server:
    """`serve --http` from the source tree `root`, in its own project and store."""

    def __init__(self, name: str, root: Path, work: Path):
        self.name, self.port = name, free_port()
        project, home = work / name / "project", work / name / "home"
        (project / ".aromcp" / "workflows").mkdir(parents=True)
        home.mkdir(parents=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AROMCP_")}
        env.update(HOME=str(home), PYTHONPATH=str(root), AROMCP_HTTP_TOKEN=TOKEN,
                   AROMCP_WORKFLOWS_STORE=str(work / name / "store.sqlite3"), XDG_DATA_HOME=str(home / "data"))
        self.proc = subprocess.Popen([sys.executable, "-m", "aromcp_workflows", "--project-dir", str(project),
                                      "serve", "--http", "--port", str(self.port)], cwd=root, env=env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.http = httpx2.Client(timeout=60, headers=HEADERS)
        self._wait()

    def _wait(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                answer = self.call("tools/list", {})
                if answer.status_code == 200:
                    return
                raise SystemExit(f"{self.name}: {answer.status_code} {answer.text[:300]}")
            except httpx2.HTTPError:
                time.sleep(0.1)
        raise SystemExit(f"{self.name}: the server did not answer")

    def call(self, method: str, params: dict[str, Any]) -> Any:
        """One request as a 2026-07-28 client sends it (the routing headers repeat the body's method and name)."""
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": META}}
        routing = {"Mcp-Method": method} | ({"Mcp-Name": params["name"]} if "name" in params else {})
        return self.http.post(self.url, json=body, headers=routing)

    def stop(self) -> None:
        self.http.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def timed(server: Server, method: str, params: dict[str, Any], calls: int) -> list[float]:
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        answer = server.call(method, params)
        times.append((time.perf_counter() - started) * 1000)
        assert answer.status_code == 200, answer.text[:200]
    return times


def bench_calls(servers: list[Server], calls: int, rounds: int) -> None:
    work = {"tools/call workflow_list": ("tools/call", {"name": "workflow_list",
                                                        "arguments": {"include_global": False}}),
            "tools/list": ("tools/list", {})}
    for label, (method, params) in work.items():
        seen: dict[str, list[float]] = {server.name: [] for server in servers}
        for server in servers:
            timed(server, method, params, 200)  # warm: the service, the store, the allocator
        for round_ in range(rounds):
            for server in servers if round_ % 2 == 0 else reversed(servers):
                seen[server.name] += timed(server, method, params, calls)
        medians = {name: statistics.median(values) for name, values in seen.items()}
        before, after = medians[servers[0].name], medians[servers[1].name]
        print(f"A. {label}: before {before:.3f} ms, this tree {after:.3f} ms (median of {calls * rounds} each); "
              f"ratio {after / before:.3f}")


def tokenless_attack(server: Server) -> tuple[float, float]:
    """40 tokenless connections, each sending all but the last byte of a 4 MiB body."""
    before, peak = rss_mb(server.proc.pid), 0.0
    head = (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {FOUR_MIB}\r\n\r\n").encode()

    def send() -> None:
        try:
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
                sock.sendall(head + b"x" * (FOUR_MIB - 1))
                sock.settimeout(4)
                sock.recv(1)
        except OSError:
            pass

    senders = [threading.Thread(target=send) for _ in range(40)]
    for sender in senders:
        sender.start()
    while any(sender.is_alive() for sender in senders):
        peak = max(peak, rss_mb(server.proc.pid))
        time.sleep(0.02)
    return before, max(peak, rss_mb(server.proc.pid))


def bench_checks(requests: int = 20000) -> None:
    """C: the front checks on one request, in process (no socket, no app work)."""
    import asyncio

    from aromcp_workflows.http import AccessLog, CredentialGate, HostGuard, HostRule
    from aromcp_workflows.server.http_auth import BearerAdmission, HttpOptions, resolve_auth

    auth = resolve_auth(HttpOptions(), environ={"AROMCP_HTTP_TOKEN": TOKEN})

    async def app(scope: Any, receive: Any, send: Any) -> None:
        return None

    gate = CredentialGate(app, [("", BearerAdmission(auth))], FOUR_MIB)
    rule = HostRule.for_bind("127.0.0.1")
    headers = [(b"host", b"127.0.0.1:8765"), (b"content-type", b"application/json"), (b"content-length", b"200"),
               (b"accept", b"application/json, text/event-stream"), (b"mcp-protocol-version", MODERN.encode()),
               (b"authorization", f"Bearer {TOKEN}".encode())]

    async def run() -> None:
        for label, front in (("Host/Origin rule alone", HostGuard(app, rule)), ("credential gate", gate),
                             ("access log + Host/Origin + gate", AccessLog(HostGuard(gate, rule)))):
            started = time.perf_counter()
            for _ in range(requests):
                await front({"type": "http", "method": "POST", "path": "/mcp", "headers": headers,
                             "client": ("127.0.0.1", 5555), "state": {}, "query_string": b""}, None, None)
            print(f"C. {label}: {(time.perf_counter() - started) / requests * 1e6:.1f} µs per request")

    asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="main", help="the commit to compare with (default main)")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", args.before], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout.strip()
    print(machine())
    bench_checks()
    with tempfile.TemporaryDirectory(prefix="bench-http-call-") as folder:
        work = Path(folder)
        old = work / "before-tree"
        old.mkdir()
        archive = subprocess.run(["git", "archive", commit], cwd=REPO, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
        servers = [Server(f"before-{commit}", old, work), Server("this-tree", REPO, work)]
        try:
            bench_calls(servers, args.calls, args.rounds)
            for server in servers:
                before, peak = tokenless_attack(server)
                print(f"B. {server.name}: 40 tokenless 4 MiB bodies: VmRSS {before:.0f} -> {peak:.0f} MB "
                      f"(+{peak - before:.0f} MB)")
        finally:
            for server in servers:
                server.stop()


if __name__ == "__main__":
    main()
