"""What a legacy (session-based) HTTP session costs the server, and how fast one client can
open them: the figures behind the session limits of docs/security.md.

Run: ``.venv/bin/python benchmarks/bench_http_sessions.py [--sessions N] [--concurrency C]``

One ``aromcp-workflows serve --http`` on loopback (its token in ``AROMCP_HTTP_TOKEN``, the
per-client cap raised to ``N`` so that the cost can be measured).  One client opens ``N``
sessions as a real 2025-11-25 client does (``initialize``, then
``notifications/initialized``), ``C`` at a time, and keeps them open.  Printed: sessions
opened per second; the server's resident memory (VmRSS) per open session; at that rate,
the time one client needs to fill the whole session table and to reach the per-client
cap; and, on a second server with the default limits, how many sessions one client
actually gets before the server answers 503.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine_info import machine  # noqa: E402

TOKEN = "bench-token-0123456789abcdef0123456789abcdef"
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
           "Authorization": f"Bearer {TOKEN}"}
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                         "clientInfo": {"name": "bench", "version": "1"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def start_server(work: Path, **env: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    project = work / "project"
    project.mkdir(exist_ok=True)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AROMCP_")}
    environ.update(HOME=str(work), PYTHONPATH=str(REPO), AROMCP_HTTP_TOKEN=TOKEN, **env)
    proc = subprocess.Popen([sys.executable, "-m", "aromcp_workflows", "--project-dir", str(project), "serve",
                             "--store", str(work / "s.sqlite3"), "--http", "--port", str(port)],
                            env=environ, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return proc, f"http://127.0.0.1:{port}/mcp"
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the server did not listen")


async def open_one(http: httpx2.AsyncClient, url: str) -> int:
    """Open one session the way a client does; the status of the initialize answer."""
    answer = await http.post(url, json=INITIALIZE, headers=HEADERS)
    session = answer.headers.get("mcp-session-id")
    if answer.status_code == 200 and session:
        await http.post(url, json=INITIALIZED, headers=HEADERS | {"Mcp-Session-Id": session,
                                                                    "MCP-Protocol-Version": "2025-11-25"})
    return answer.status_code


async def open_many(url: str, count: int, concurrency: int) -> tuple[list[int], float]:
    limits = httpx2.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx2.AsyncClient(timeout=60, limits=limits) as http:
        gate = asyncio.Semaphore(concurrency)

        async def one() -> int:
            async with gate:
                return await open_one(http, url)

        started = time.perf_counter()
        statuses = await asyncio.gather(*(one() for _ in range(count)))
        return list(statuses), time.perf_counter() - started


def measure_cost(work: Path, sessions: int, concurrency: int) -> None:
    proc, url = start_server(work / "cost", AROMCP_HTTP_SESSIONS_PER_CLIENT=str(sessions + 10),
                             AROMCP_HTTP_MAX_SESSIONS=str(sessions + 10))
    try:
        asyncio.run(open_many(url, 20, concurrency))  # warm up: imports, first allocations
        time.sleep(0.5)
        before = rss_kb(proc.pid)
        statuses, took = asyncio.run(open_many(url, sessions, concurrency))
        time.sleep(0.5)
        after = rss_kb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(10)
    opened = statuses.count(200)
    rate = opened / took
    per_session = (after - before) / max(opened, 1)
    print(f"opened {opened} of {sessions} sessions in {took:.2f} s: {rate:.0f} sessions/s "
          f"(concurrency {concurrency}); other answers: {sorted(set(statuses) - {200})}")
    print(f"server VmRSS {before / 1024:.1f} MB -> {after / 1024:.1f} MB: {per_session:.1f} KB per open session")
    for label, cap in (("the SDK's default table (10,000)", 10_000), ("our whole table (1,000)", 1_000),
                       ("our per-client cap (32)", 32)):
        print(f"  one client fills {label} in {cap / rate:.1f} s, holding {cap * per_session / 1024:.1f} MB")


def measure_defaults(work: Path, concurrency: int) -> None:
    proc, url = start_server(work / "defaults")
    try:
        statuses, _ = asyncio.run(open_many(url, 200, concurrency))
    finally:
        proc.terminate()
        proc.wait(10)
    print(f"default limits: one client got {statuses.count(200)} of 200 sessions; then "
          f"{statuses.count(503)} answers 503")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    print(machine())
    with tempfile.TemporaryDirectory(prefix="bench-http-") as tmp:
        work = Path(tmp)
        (work / "cost").mkdir()
        (work / "defaults").mkdir()
        measure_cost(work, args.sessions, args.concurrency)
        measure_defaults(work, args.concurrency)


if __name__ == "__main__":
    main()
