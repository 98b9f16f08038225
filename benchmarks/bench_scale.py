"""Many waiting instances in one server: memory per instance, and restart with a full store.

Run: ``.venv/bin/python benchmarks/bench_scale.py [--instances 100,1000,10000] [--window 16]
[--rounds 5] [--dir DIR] [--json]``

For each N of ``--instances``, on a fresh SQLite store, over the real stdio server
(``python -m aromcp_workflows serve``, the JSON-RPC client of ``bench_server.py``):

1. *started live*: start the server, warm it with one instance (V8 child up, store open),
   read the RSS of the server process and of its V8 child process(es) separately, then
   create N instances of a small workflow with ``workflow_start`` and park each at its
   first agent step with ``workflow_get_next_step`` (one call at a time by default;
   ``--window W`` keeps W in flight, which makes the server run calls concurrently and its
   V8 pool start up to 3 workers: they are started before the baseline), and read both
   RSS again.  KB per waiting instance = growth / N.
2. *reloaded live*: kill the server (SIGKILL), start it again on the same store, warm it
   the same way, then call ``workflow_get_next_step`` on every instance, which loads each
   one from the store (the path a restarted server takes), and read both RSS again.
3. *restart latency*: ``--rounds`` times, alternately on this store and on a reference
   store holding 1 instance, spawn the server and time spawn → first answer of
   ``tools/list``, and (another spawn) spawn → first answer of ``workflow_get_next_step``
   on one instance.  Printed as medians and as the ratio to the 1-instance store: start-up
   must not depend on how many instances the store holds.  A bare MCPServer (one no-op
   tool) spawned in the same rounds shows how loaded the machine is.

Every instance is created by the server under test over stdio (no in-process shortcut).
RSS is VmRSS from /proc; the server's allocator keeps freed memory, so the figures are
what the process costs, not only what is live.  The machine is shared: compare the
figures of one run with each other.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_server import INIT, SyncStdio, median_ms, minimal_command, our_command, p90_ms, server_env
from machine_info import machine, rss_mb_tree

WORKFLOW = """
name: scale-wait
description: "one agent step that waits for the agent (the benchmark's waiting instance)"
inputs:
  who:
    type: string
    default: "world"
default_state:
  raw:
    greeting: "hello"
    files: ["a.py", "b.md"]
state_schema:
  computed:
    py_files:
      from: raw.files
      transform: "input.filter(f => f.endsWith('.py'))"
steps:
  - id: ask
    type: agent_prompt
    prompt: "Say {{ greeting }} to {{ inputs.who }} about {{ py_files.length }} files"
  - id: done
    type: agent_prompt
    prompt: "done"
"""


def make_project(root: Path) -> Path:
    target = root / ".aromcp" / "workflows"
    target.mkdir(parents=True, exist_ok=True)
    (target / "scale-wait.yaml").write_text(WORKFLOW)
    return root


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            out.extend(int(c) for c in (task / "children").read_text().split())
    except OSError:
        pass
    return out


def _status_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def memory(server: SyncStdio) -> dict[str, float]:
    """RSS in MB of the server process alone and of its child processes (the V8 workers);
    `server_file_mb`: the part of the server's RSS that is mapped files (SQLite's -shm)."""
    children = _children(server.proc.pid)
    child_mb = sum(rss_mb_tree(c) for c in children)
    pid = server.proc.pid
    return {"server_mb": rss_mb_tree(pid) - child_mb, "v8_mb": child_mb, "v8_children": len(children),
            "server_file_mb": _status_mb(pid, "RssFile") + _status_mb(pid, "RssShmem")}


def pipelined(server: SyncStdio, calls: Iterable[tuple[str, dict[str, Any]]], window: int) -> list[dict[str, Any]]:
    """Tool calls over the one connection with up to `window` in flight; results in call order."""
    assert server.proc.stdout is not None
    pending: dict[int, int] = {}  # request id -> position
    results: list[dict[str, Any]] = []
    todo = iter(calls)

    def read_one() -> None:
        line = server.proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise RuntimeError("server closed stdout")
        message = json.loads(line)
        position = pending.pop(message.get("id"), None)
        if position is None:
            return  # a notification
        result = message.get("result") or {}
        if "error" in message or result.get("isError"):
            raise RuntimeError(f"call {position} failed: {message.get('error') or result.get('content')}")
        results[position] = result["structuredContent"]

    for name, arguments in todo:
        while len(pending) >= window:
            read_one()
        request_id, server.next_id = server.next_id, server.next_id + 1
        pending[request_id] = len(results)
        results.append({})
        server.send({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                     "params": {"name": name, "arguments": arguments}})
    while pending:
        read_one()
    return results


def spawn(project: Path, store: Path, home: Path) -> SyncStdio:
    server = SyncStdio(our_command(project, store), server_env(home, store), project)
    server.handshake()
    return server


def kill(server: SyncStdio) -> None:
    """SIGKILL, as a crash would; the V8 child leaves when its pipe closes."""
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait()


def warm(server: SyncStdio, workflow_id: str) -> None:
    server.request("tools/list", {})
    server.tool("workflow_get_next_step", {"workflow_id": workflow_id})


def per_instance(before: dict[str, float], after: dict[str, float], n: int) -> dict[str, float]:
    return {"server_kb": (after["server_mb"] - before["server_mb"]) * 1024 / n,
            "v8_kb": (after["v8_mb"] - before["v8_mb"]) * 1024 / n}


def fill(workdir: Path, n: int, window: int) -> dict[str, Any]:
    """Phases 1 and 2: RSS per waiting instance, started live and reloaded live."""
    project, home, store = make_project(workdir / f"proj-{n}"), workdir / "home", workdir / f"scale-{n}.sqlite3"
    home.mkdir(exist_ok=True)
    server = spawn(project, store, home)
    first = server.tool("workflow_start", {"workflow": "scale-wait"})["workflow_id"]
    warm(server, first)
    if window > 1:  # concurrency makes the V8 pool start its other workers: before the baseline
        warm_ids = [r["workflow_id"] for r in pipelined(server, [("workflow_start", {"workflow": "scale-wait"})]
                                                        * (4 * window), window)]
        pipelined(server, [("workflow_get_next_step", {"workflow_id": i}) for i in warm_ids], window)
    before = memory(server)
    t0 = time.perf_counter()
    started = pipelined(server, [("workflow_start", {"workflow": "scale-wait"})] * n, window)
    ids = [r["workflow_id"] for r in started]
    steps = pipelined(server, [("workflow_get_next_step", {"workflow_id": i}) for i in ids], window)
    create_s = time.perf_counter() - t0
    assert all(s["step"] and s["step"]["id"] == "ask" for s in steps), "every instance waits at step ask"
    after = memory(server)
    kill(server)

    server = spawn(project, store, home)
    warm(server, first)
    reload_before = memory(server)
    t0 = time.perf_counter()
    steps = pipelined(server, [("workflow_get_next_step", {"workflow_id": i}) for i in ids], window)
    reload_s = time.perf_counter() - t0
    assert all(s["step"]["id"] == "ask" for s in steps), "a reloaded instance still waits at step ask"
    reload_after = memory(server)
    kill(server)
    return {"n": n, "ids": ids, "first": first, "project": project, "store": store, "home": home,
            "create_s": create_s, "reload_s": reload_s,
            "started": {"before": before, "after": after, "per_instance": per_instance(before, after, n)},
            "reloaded": {"before": reload_before, "after": reload_after,
                         "per_instance": per_instance(reload_before, reload_after, n)}}


def first_answer(project: Path, store: Path, home: Path, message: dict[str, Any], bare: bool = False) -> float:
    """Seconds from spawn to the answer of `message` (sent right after the handshake)."""
    command = minimal_command() if bare else our_command(project, store)
    server = SyncStdio(command, server_env(home, store), project)
    server.send(INIT)
    server.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    server.send({**message, "jsonrpc": "2.0", "id": 2})
    answer = server.wait_for(2)
    elapsed = time.perf_counter() - server.t_spawn
    if "error" in answer or answer["result"].get("isError"):
        raise RuntimeError(f"first call failed: {answer}")
    server.close()
    return elapsed


def restart_latency(filled: dict[str, Any], workdir: Path, rounds: int) -> dict[str, dict[str, float]]:
    """Phase 3: spawn → first answer on the full store and on a 1-instance store, alternating."""
    project, home = filled["project"], filled["home"]
    ref_store = workdir / f"ref-{filled['n']}.sqlite3"
    server = spawn(project, ref_store, home)
    ref_id = server.tool("workflow_start", {"workflow": "scale-wait"})["workflow_id"]
    server.tool("workflow_get_next_step", {"workflow_id": ref_id})
    server.close()
    stores = {f"{filled['n']} instances": (filled["store"], filled["ids"][len(filled["ids"]) // 2]),
              "1 instance (reference)": (ref_store, ref_id)}
    times: dict[str, list[float]] = {}
    for n in range(rounds + 1):
        for label, (store, workflow_id) in stores.items():
            calls = {"tools/list": {"method": "tools/list", "params": {}},
                     "workflow_get_next_step": {"method": "tools/call", "params": {
                         "name": "workflow_get_next_step", "arguments": {"workflow_id": workflow_id}}}}
            for call, message in calls.items():
                elapsed = first_answer(project, store, home, message)
                if n:  # the first round warms the OS file cache
                    times.setdefault(f"{call}, store with {label}", []).append(elapsed)
        elapsed = first_answer(project, ref_store, home, {"method": "tools/list", "params": {}}, bare=True)
        if n:
            times.setdefault("tools/list, bare MCPServer (machine load)", []).append(elapsed)
    return {k: {"median_ms": median_ms(v), "p90_ms": p90_ms(v)} for k, v in times.items()}


def report(filled: dict[str, Any], latency: dict[str, dict[str, float]]) -> None:
    n = filled["n"]
    print(f"\nN = {n}: created over stdio in {filled['create_s']:.1f} s "
          f"(workflow_start + workflow_get_next_step each); reloaded after SIGKILL in {filled['reload_s']:.1f} s")
    for phase in ("started", "reloaded"):
        row = filled[phase]
        b, a, k = row["before"], row["after"], row["per_instance"]
        print(f"  {phase:9s} server {b['server_mb']:7.1f} -> {a['server_mb']:7.1f} MB = "
              f"{k['server_kb']:6.1f} KB/instance | V8 child(ren) x{a['v8_children']} "
              f"{b['v8_mb']:6.1f} -> {a['v8_mb']:6.1f} MB = "
              f"{k['v8_kb']:5.1f} KB/instance | total {k['server_kb'] + k['v8_kb']:6.1f} KB/instance"
              f" | server RSS in mapped files {b['server_file_mb']:.1f} -> {a['server_file_mb']:.1f} MB")
    ref = {call: latency[f"{call}, store with 1 instance (reference)"]["median_ms"]
           for call in ("tools/list", "workflow_get_next_step")}
    print("  (the bare MCPServer row shows the machine's load: the same spawn of a server with one no-op tool)")
    print("  restart: spawn -> first answer (median, p90)")
    for key, row in latency.items():
        call = key.split(",")[0]
        print(f"    {key:58s} {row['median_ms']:7.1f} ms (p90 {row['p90_ms']:7.1f})"
              f"  {row['median_ms'] / ref[call]:.2f} x the 1-instance store")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="See the module docstring for what is compared.")
    parser.add_argument("--instances", default="100,1000,10000", help="comma-separated N (default 100,1000,10000)")
    parser.add_argument("--window", type=int, default=1,
                        help="requests in flight on the stdio connection (default 1; more makes the server run "
                             "calls concurrently and its V8 pool start up to 3 workers, started before the baseline)")
    parser.add_argument("--rounds", type=int, default=5, help="restarts timed per store and call")
    parser.add_argument("--dir", help="where stores are created (default: temp dir under cwd)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON at the end")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-scale-", dir=args.dir or ".")).resolve()
    figures: dict[str, Any] = {"machine": machine()}
    print("machine:", ", ".join(f"{k}={v}" for k, v in figures["machine"].items()))
    try:
        for n in (int(x) for x in args.instances.split(",")):
            filled = fill(workdir, n, args.window)
            latency = restart_latency(filled, workdir, args.rounds)
            report(filled, latency)
            figures[str(n)] = {k: v for k, v in filled.items() if k in ("create_s", "reload_s", "started", "reloaded")}
            figures[str(n)]["restart"] = latency
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
