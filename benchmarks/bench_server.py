"""Server budgets (README, "Performance"), each printed next to a reference measured in the same run.

Run: ``.venv/bin/python benchmarks/bench_server.py [--steps N] [--rounds R] [--dir DIR] [--only A,B,...]``

A. server time per step, in process (`WorkflowService.next_step` + `step_complete`), for a
   step with 3 non-trivial templates and for a plain-path-only step (also inside a
   5,000-item loop: a bigger instance), with V8 crossings per step
   (`engine.stats.v8_calls`); reference: one instance commit alone (JSON + SQLite + fsync),
   on disk and on a tmpfs store.
B. `workflow_get_next_step` round trip over stdio vs trivial tools: `workflow_list
   (include_global=false)` on the same server, and a bare MCPServer's no-op tool
   (`benchmarks/minimal_server.py`), interleaved call by call.
C. stdio start → first `tools/list` answer vs the bare MCPServer, alternating runs (and the
   same server started without the CLI module, to show what the CLI's imports cost).
D. RSS of a server process with 100 live instances (VmRSS from /proc) vs just started.
E. tool calls for standards:fix with an economical agent vs the seed protocol, against
   the budget N + T + 2.
F. 50 concurrent sub-agent loops over one stdio connection (1,050 calls) vs one sub-agent
   on the same workflow: throughput and per-call latency as the instance grows.

Absolute times drift on shared machines; compare the figures of one run with each other.
Stores live in ``--dir`` (default: a temp dir under the current directory, a real disk).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from typing import Any

from machine_info import machine, rss_mb_tree

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
PYTHON = sys.executable

BENCH_STEP = """
name: bench-step
description: "one agent step per item, its prompt with 3 non-trivial templates"
inputs:
  items:
    type: array
    default: []
default_state:
  raw:
    cfg: {mode: "fast", level: 3}
    nums: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    last: ""
steps:
  - id: loop
    type: foreach
    items: "{{ inputs.items }}"
    steps:
      - id: templ
        type: agent_prompt
        prompt: >-
          File {{ item.toUpperCase() }}: {{ nums.filter(n => n > cfg.level).length }} checks,
          mode {{ cfg.mode === 'fast' ? 'quick' : 'full' }}
        state_update:
          path: raw.last
"""
PLAIN_STEP = """
name: bench-plain
description: "one agent step per item, its prompt with plain paths only"
inputs:
  items:
    type: array
    default: []
  name:
    type: string
    default: "bench"
default_state:
  raw:
    cfg: {mode: "fast"}
    last: ""
steps:
  - id: loop
    type: foreach
    items: "{{ inputs.items }}"
    steps:
      - id: plain
        type: agent_prompt
        prompt: "File {{ item }}: mode {{ cfg.mode }} for {{ inputs.name }}"
        state_update:
          path: raw.last
"""

FANOUT = """
name: bench-fanout
inputs:
  items:
    type: array
    default: []
  per_task:
    type: integer
    default: 20
default_state:
  raw:
    shared: []
steps:
  - id: fan
    type: parallel_foreach
    items: "{{ inputs.items }}"
    max_parallel: 50
    sub_agent_task: work
sub_agent_tasks:
  work:
    steps:
      - id: each
        type: foreach
        items: "{{ Array.from({length: inputs.per_task}, (_, i) => i) }}"
        steps:
          - id: think
            type: agent_prompt
            prompt: "Work on {{ item }}"
            state_update:
              path: raw.shared
              operation: append
"""

BIG_ITEMS = 5000  # the same plain step inside a larger instance: every commit re-encodes all of it


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


def p90_ms(values: list[float]) -> float:
    return sorted(values)[int(len(values) * 0.9)] * 1000 if values else float("nan")


def make_project(root: Path) -> Path:
    target = root / ".aromcp" / "workflows"
    target.mkdir(parents=True, exist_ok=True)
    (target / "bench-step.yaml").write_text(BENCH_STEP)
    (target / "bench-plain.yaml").write_text(PLAIN_STEP)
    (target / "bench-fanout.yaml").write_text(FANOUT)
    return root


# -- A. in process ------------------------------------------------------------------------------
def bench_in_process(workdir: Path, steps: int, tmpfs: bool) -> dict[str, Any]:
    from aromcp_workflows.app.service import WorkflowService

    base = Path(tempfile.mkdtemp(dir="/dev/shm")) if tmpfs else workdir
    project = make_project(base / ("proj-shm" if tmpfs else "proj"))
    home = base / "home"
    home.mkdir(exist_ok=True)
    service = WorkflowService(project_dir=project, store_path=base / f"a-{tmpfs}.sqlite3", home=home)
    out: dict[str, Any] = {}
    small = [f"src/file_{i}.py" for i in range(steps + 30)]
    big = [f"src/file_{i}.py" for i in range(BIG_ITEMS)]
    for label, workflow, items in (("3 templates", "bench-step", small), ("plain paths", "bench-plain", small),
                                   (f"plain, {BIG_ITEMS:,}-item loop", "bench-plain", big)):
        workflow_id = service.start(workflow, {"items": items}).workflow_id
        engine = service.instances.engine
        step = service.next_step(workflow_id).step
        for _ in range(20):  # warm up (V8 compile cache, SQLite pages)
            step = service.step_complete(workflow_id, step["id"], result="ok").next_step
        seed, economical, deliveries = [], [], []
        v8_before = engine.stats.v8_calls
        for _ in range(steps // 2):
            t0 = time.perf_counter()
            again = service.next_step(workflow_id).step  # seed style: asks again
            t1 = time.perf_counter()
            step = service.step_complete(workflow_id, again["id"], result="ok").next_step
            t2 = time.perf_counter()
            seed.append(t2 - t0)
            deliveries.append(t1 - t0)
            economical.append(t2 - t1)
        v8_per_step = (engine.stats.v8_calls - v8_before) / (steps // 2)
        commits = []
        for _ in range(50):  # one commit alone: the record (JSON) and one history event, compare-and-set
            t0 = time.perf_counter()
            service.instances.transact(workflow_id, lambda run: run.machine.record("state_changed", data={}))
            commits.append(time.perf_counter() - t0)
        out[label] = {"seed_pair_ms": median_ms(seed), "seed_pair_p90_ms": p90_ms(seed),
                      "step_complete_ms": median_ms(economical), "redelivery_ms": median_ms(deliveries),
                      "commit_ms": median_ms(commits), "v8_calls_per_step": v8_per_step,
                      "prompt": step["definition"]["prompt"] if step else None}
    if tmpfs:
        shutil.rmtree(base, ignore_errors=True)
    return out


# -- stdio helpers ----------------------------------------------------------------------------------
def server_env(home: Path, store: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AROMCP_")}
    env.update(HOME=str(home), PYTHONPATH=str(REPO), AROMCP_WORKFLOWS_STORE=str(store),
               XDG_DATA_HOME=str(home / ".local" / "share"))
    return env


def our_command(project: Path, store: Path) -> list[str]:
    return [PYTHON, "-m", "aromcp_workflows", "--project-dir", str(project), "serve", "--store", str(store)]


def minimal_command() -> list[str]:
    return [PYTHON, str(REPO / "benchmarks" / "minimal_server.py")]


INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "bench", "version": "0"}}}


class SyncStdio:
    """Blocking JSON-RPC over a subprocess's stdio (no client library in the measurement)."""

    def __init__(self, command: list[str], env: dict[str, str], cwd: Path):
        self.t_spawn = time.perf_counter()
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env, cwd=str(cwd))
        self.next_id = 2

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def wait_for(self, request_id: int) -> dict[str, Any]:
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("server closed stdout")
            message = json.loads(line)
            if message.get("id") == request_id:
                return message

    def handshake(self) -> None:
        self.send(INIT)
        self.wait_for(1)
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        request_id, self.next_id = self.next_id, self.next_id + 1
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        message = self.wait_for(request_id)
        if "error" in message:
            raise RuntimeError(message["error"])
        return dict(message["result"])

    def tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result = self.request("tools/call", {"name": name, "arguments": arguments})
        if result.get("isError"):
            raise RuntimeError(result["content"])
        return dict(result["structuredContent"])

    def rss_mb(self) -> float:
        return rss_mb_tree(self.proc.pid)  # the server and its V8 child process

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# -- B. round trips -----------------------------------------------------------------------------------
def bench_round_trip(workdir: Path, calls: int) -> dict[str, Any]:
    project = make_project(workdir / "proj-rt")
    home = workdir / "home-rt"
    home.mkdir(exist_ok=True)
    store = workdir / "rt.sqlite3"
    ours = SyncStdio(our_command(project, store), server_env(home, store), project)
    bare = SyncStdio(minimal_command(), server_env(home, store), project)
    ours.handshake()
    bare.handshake()
    items = [f"f{i}" for i in range(calls + 50)]
    workflow_id = ours.tool("workflow_start", {"workflow": "bench-step", "inputs": {"items": items}})["workflow_id"]
    step = ours.tool("workflow_get_next_step", {"workflow_id": workflow_id})["step"]
    for _ in range(20):
        ours.tool("workflow_get_next_step", {"workflow_id": workflow_id})
        ours.tool("workflow_list", {"include_global": False})
        bare.tool("noop", {"x": 1})
    times: dict[str, list[float]] = {k: [] for k in ("get_next_step", "workflow_list", "noop (bare server)",
                                                    "step_complete (advancing)", "validate (error path)")}

    def timed(key: str, action: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        value = action()
        times[key].append(time.perf_counter() - t0)
        return value

    for _ in range(calls):
        timed("get_next_step", lambda: ours.tool("workflow_get_next_step", {"workflow_id": workflow_id}))
        timed("workflow_list", lambda: ours.tool("workflow_list", {"include_global": False}))
        timed("noop (bare server)", lambda: bare.tool("noop", {"x": 1}))
        timed("validate (error path)", lambda: ours.request("tools/call", {"name": "workflow_validate",
                                                                          "arguments": {}}))
        args = {"workflow_id": workflow_id, "step_id": step["id"], "result": "ok"}
        step = timed("step_complete (advancing)",
                     lambda args=args: ours.tool("workflow_step_complete", args))["next_step"]
    ours.close()
    bare.close()
    return {k: median_ms(v) for k, v in times.items()}


# -- C. start-up ----------------------------------------------------------------------------------------
def bench_startup(workdir: Path, rounds: int) -> dict[str, Any]:
    project = make_project(workdir / "proj-start")
    home = workdir / "home-start"
    home.mkdir(exist_ok=True)
    store = workdir / "start.sqlite3"
    direct = [PYTHON, "-c", "import sys; from aromcp_workflows.server.mcp import serve; "
              "serve(project_dir=sys.argv[1], store=sys.argv[2])", str(project), str(store)]
    commands = {"aromcp-workflows": our_command(project, store), "bare MCPServer": minimal_command(),
                "server.serve() without the CLI": direct}
    times: dict[str, list[float]] = {label: [] for label in commands}
    for n in range(rounds + 1):
        for label, command in commands.items():
            server = SyncStdio(command, server_env(home, store), project)
            server.send(INIT)
            server.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            server.send({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}})
            server.wait_for(2)
            elapsed = time.perf_counter() - server.t_spawn
            server.close()
            if n:  # the first round warms the OS file cache
                times[label].append(elapsed)
    return {k: median_ms(v) for k, v in times.items()}


# -- D. memory ----------------------------------------------------------------------------------------------
def bench_rss(workdir: Path, instances: int) -> dict[str, Any]:
    project = make_project(workdir / "proj-rss")
    home = workdir / "home-rss"
    home.mkdir(exist_ok=True)
    store = workdir / "rss.sqlite3"
    server = SyncStdio(our_command(project, store), server_env(home, store), project)
    server.handshake()
    server.request("tools/list", {})
    figures = {"started (tools/list answered)": server.rss_mb()}
    ids = []
    for n in range(instances):
        workflow_id = server.tool("workflow_start", {"workflow": "bench-step",
                                                     "inputs": {"items": ["a", "b", "c"]}})["workflow_id"]
        step = server.tool("workflow_get_next_step", {"workflow_id": workflow_id})["step"]
        server.tool("workflow_step_complete", {"workflow_id": workflow_id, "step_id": step["id"], "result": "x"})
        ids.append(workflow_id)
        if n == 0:
            figures["1 live instance (V8 and store open)"] = server.rss_mb()
    figures[f"{instances} live instances"] = server.rss_mb()
    listing = server.tool("workflow_status", {})
    assert len(listing["instances"]) == instances
    server.close()
    return figures


# -- E. tool calls for standards:fix ---------------------------------------------------------------------------
def standards_answer(step: dict[str, Any]) -> Any:
    if step["type"] == "mcp_call":
        return {"hints": ["x"]} if step["definition"]["method"] == "hints_for_file" else {"errors": 0}
    return 1


async def count_calls(project: Path, workdir: Path, economical: bool) -> dict[str, int]:
    from mcp import Client

    from aromcp_workflows.app.service import WorkflowService
    from aromcp_workflows.server.mcp import build_server

    home = workdir / "home-calls"
    home.mkdir(exist_ok=True)
    store = workdir / f"calls-{economical}.sqlite3"
    server = build_server(lambda: WorkflowService(project_dir=project, store_path=store,
                                                  home=home))
    counts = {"calls": 0, "agent_steps": 0, "tasks": 0}
    async with Client(server, mode="legacy") as client:
        async def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
            counts["calls"] += 1
            result = await client.call_tool(name, args)
            assert not result.is_error, result.content
            return dict(result.structured_content or {})

        workflow_id = (await call("workflow_start", {"workflow": "standards:fix", "inputs": {"batch_size": 2}}))[
            "workflow_id"]

        async def run(task_id: str | None) -> None:
            base = {"workflow_id": workflow_id} | ({"task_id": task_id} if task_id else {})
            step = (await call("workflow_get_next_step", base))["step"]
            while step is not None:
                counts["agent_steps"] += 1
                result = None
                if step["type"] == "parallel_tasks":
                    counts["tasks"] += len(step["definition"]["tasks"])
                    await asyncio.gather(*(run(t["task_id"]) for t in step["definition"]["tasks"]))
                else:
                    result = standards_answer(step)
                reply = await call("workflow_step_complete", {**base, "step_id": step["id"], "result": result})
                step = reply["next_step"] if economical else (await call("workflow_get_next_step", base))["step"]

        await run(None)
    return counts


def bench_calls(workdir: Path) -> dict[str, Any]:
    project = workdir / "repo"
    project.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    subprocess.run(["git", "-c", "user.email=b@b", "-c", "user.name=b", "commit", "-q", "--allow-empty", "-m", "i"],
                   cwd=project, check=True)
    for i in range(6):
        (project / f"mod_{i}.py").write_text("x=1\n")
    economical = asyncio.run(count_calls(project, workdir, True))
    seed = asyncio.run(count_calls(project, workdir, False))
    n, t = economical["agent_steps"], economical["tasks"]
    return {"N (agent-performed steps)": n, "T (sub-agent tasks)": t, "budget N+T+2": n + t + 2,
            "economical agent": economical["calls"], "seed protocol": seed["calls"]}


# -- F. many sub-agents on one connection ----------------------------------------------------------------------
async def fan_out(project: Path, store: Path, home: Path, tasks: int, per_task: int) -> dict[str, float]:
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=PYTHON, args=our_command(project, store)[1:], cwd=str(project),
                                   env=server_env(home, store))
    latencies: list[float] = []
    async with Client(params, mode="legacy") as client:
        async def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
            t0 = time.perf_counter()
            result = await client.call_tool(name, args)
            latencies.append(time.perf_counter() - t0)
            assert not result.is_error, result.content
            return dict(result.structured_content or {})

        workflow_id = (await call("workflow_start", {"workflow": "bench-fanout", "inputs": {
            "items": [f"i{n}" for n in range(tasks)], "per_task": per_task}}))["workflow_id"]
        step = (await call("workflow_get_next_step", {"workflow_id": workflow_id}))["step"]
        latencies.clear()

        async def sub_agent(task_id: str) -> None:
            base = {"workflow_id": workflow_id, "task_id": task_id}
            current = (await call("workflow_get_next_step", base))["step"]
            while current is not None:
                current = (await call("workflow_step_complete", {**base, "step_id": current["id"],
                                                                  "result": "ok"}))["next_step"]

        began = time.perf_counter()
        await asyncio.gather(*(sub_agent(t["task_id"]) for t in step["definition"]["tasks"]))
        elapsed = time.perf_counter() - began
        await call("workflow_step_complete", {"workflow_id": workflow_id, "step_id": step["id"]})
        state = await call("workflow_state_read", {"workflow_id": workflow_id, "paths": ["raw.shared"]})
        assert len(state["state"]["raw.shared"]) == tasks * per_task
    calls = tasks * (per_task + 1)
    return {"calls": calls, "seconds": elapsed, "calls_per_s": calls / elapsed,
            "median_call_ms": median_ms(latencies), "p90_call_ms": p90_ms(latencies)}


def bench_fan_out(workdir: Path) -> dict[str, Any]:
    project = make_project(workdir / "proj-fan")
    home = workdir / "home-fan"
    home.mkdir(exist_ok=True)
    return {"1 sub-agent x 20 steps": asyncio.run(fan_out(project, workdir / "fan1.sqlite3", home, 1, 20)),
            "50 sub-agents x 20 steps": asyncio.run(fan_out(project, workdir / "fan50.sqlite3", home, 50, 20))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=400, help="steps measured in process (A)")
    parser.add_argument("--calls", type=int, default=200, help="round trips per tool over stdio (B)")
    parser.add_argument("--rounds", type=int, default=8, help="start-ups per server (C)")
    parser.add_argument("--instances", type=int, default=100, help="live instances for RSS (D)")
    parser.add_argument("--dir", help="where stores are created (default: temp dir under cwd)")
    parser.add_argument("--only", default="A,B,C,D,E,F", help="sections to run, e.g. A,C")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON at the end")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-server-", dir=args.dir or ".")).resolve()
    sections = set(args.only.upper().split(","))
    figures: dict[str, Any] = {"machine": machine()}
    print("machine:", ", ".join(f"{k}={v}" for k, v in figures["machine"].items()))
    try:
        if "A" in sections:
            for label, tmpfs in (("disk", False), ("tmpfs", True)):
                result = bench_in_process(workdir, args.steps, tmpfs)
                figures[f"A in-process ({label} store)"] = result
                print(f"\nA. server time per step, in process, store on {label} (median of {args.steps // 2})")
                for kind, row in result.items():
                    print(f"  {kind:24s} next_step+step_complete {row['seed_pair_ms']:7.3f} ms "
                          f"(p90 {row['seed_pair_p90_ms']:.3f}) | step_complete alone {row['step_complete_ms']:7.3f} ms"
                          f" | re-delivery {row['redelivery_ms']:.3f} ms | reference: one commit "
                          f"{row['commit_ms']:.3f} ms | V8 crossings/step {row['v8_calls_per_step']:.2f}")
        if "B" in sections:
            result = bench_round_trip(workdir, args.calls)
            figures["B stdio round trip"] = result
            print(f"\nB. stdio round trip (median of {args.calls}, interleaved)")
            ref = result["noop (bare server)"]
            for key, value in result.items():
                print(f"  {key:28s} {value:7.3f} ms  ({value / ref:.2f} x bare no-op, "
                      f"{value / result['workflow_list']:.2f} x workflow_list)")
        if "C" in sections:
            result = bench_startup(workdir, args.rounds)
            figures["C start-up"] = result
            ref = result["bare MCPServer"]
            print(f"\nC. spawn -> first tools/list answer (median of {args.rounds})")
            for key, value in result.items():
                print(f"  {key:32s} {value:7.1f} ms  ({value / ref:.2f} x bare)")
        if "D" in sections:
            result = bench_rss(workdir, args.instances)
            figures["D RSS"] = result
            print("\nD. server RSS (VmRSS)")
            for key, value in result.items():
                print(f"  {key:38s} {value:6.1f} MB")
        if "E" in sections:
            result = bench_calls(workdir)
            figures["E tool calls"] = result
            print("\nE. tool calls for standards:fix (6 changed files, batch_size 2)")
            for key, value in result.items():
                print(f"  {key:28s} {value}")
        if "F" in sections:
            result = bench_fan_out(workdir)
            figures["F sub-agents over one stdio connection"] = result
            print("\nF. sub-agents over one stdio connection (economical loops, one shared list)")
            for key, row in result.items():
                print(f"  {key:26s} {row['calls']:5d} calls in {row['seconds']:6.2f} s = {row['calls_per_s']:6.0f} "
                      f"calls/s; per call median {row['median_call_ms']:.2f} ms (p90 {row['p90_call_ms']:.2f})")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
