"""Calls per second of two server replicas on one PostgreSQL vs one replica, over HTTP.

Run: ``.venv/bin/python benchmarks/bench_replicas.py [--instances 50] [--steps 20] [--rounds 4]``

What is compared, in one run, phases alternated round by round (a b c, a b c, …):

a. one replica (``serve --http``) on a PostgreSQL store: every call goes to it;
b. two replicas on the same PostgreSQL store: every call goes to a replica picked at
   random (a load balancer without affinity);
c. one replica on a SQLite store, for reference;
d. (``--sticky``) two replicas on PostgreSQL, each instance always on the same replica
   (affinity by instance): shows what b pays for instances reloaded after the other
   replica changed them.

Each phase starts ``--instances`` relay instances (workflow_start, not timed), then drives
them all at once: one client loop per instance, ``workflow_get_next_step`` once and
``workflow_step_complete`` ``--steps`` times.  Calls are MCP ``tools/call`` requests over
streamable HTTP, protocol 2026-07-28 (one POST per call, no session), sent by
``--client raw`` (default: `raw_mcp.py`, plain JSON-RPC on kept-alive connections, ~0.2 ms
of client CPU per call) or ``--client mcp`` (the SDK's `Client`, ~2.5 ms per call: on
2 cores shared with the servers it takes the CPU a second replica would use).  One
long-lived client per replica, shared by every loop.

Printed per phase (medians over rounds): calls/s, p50/p90 call latency, client-visible
errors (a tool error or a failed call; must be 0), and CPU milliseconds per call, read
from /proc before and after each phase: each replica's server process, its "children"
(the V8 child), PostgreSQL (postmaster, backends and their exited children), this client
process; plus how many cores our processes and the rest of the machine (other work)
kept busy.  From the CPU per call follows a ceiling: with C cores, no phase can exceed
C / (CPU per call of everything) calls per second, and one replica (one GIL) cannot
exceed 1 / (its server process's CPU per call).  PostgreSQL phases also count SQL
statements per call by kind (pg_stat_statements) and save conflicts (save statements
that did not move an instance's version; the server retries them inside, so the client
never sees them).

PostgreSQL is a throwaway cluster (`tests/store/pg_cluster.py`: initdb as the postgres
user, unix socket only, fsync=off); replicas start as in `tests/store/test_replicas.py`.
``--replica-cpu 0.5`` holds each replica to half a CPU with a cgroup quota
(`cpu_quota.py`, root only): on a machine with few cores, the replicas then have CPU
budgets of their own, as on hosts of their own, and the ratio says what the design scales
to rather than how many cores the client and PostgreSQL leave.
``--synchronous-commit off`` sets it for the store's connections (it barely matters with
fsync=off; the product's default is PostgreSQL's, ``on``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "store"), str(Path(__file__).resolve().parent)]

from cpu_quota import cpu_quota  # noqa: E402
from machine_info import machine  # noqa: E402
from pg_cluster import PgCluster, find_bin_dir  # noqa: E402
from proc_cpu import CpuMeter, Usage  # noqa: E402
from raw_mcp import RawClient  # noqa: E402
from test_replicas import TOKEN, Replica, replicas  # noqa: E402

PROTOCOL = "2026-07-28"
CALL_TIMEOUT_S = 120.0


class StatCluster(PgCluster):
    """The test cluster with pg_stat_statements loaded (to count statements per call)."""

    def start(self) -> StatCluster:
        if self.as_postgres:
            import shutil

            shutil.chown(self.root, "postgres")
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync")
        options = (f"-p {self.port} -k {self.root} -c listen_addresses='' -c fsync=off "
                   "-c full_page_writes=off -c max_connections=300 "
                   "-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all")
        self._run("pg_ctl", "-D", str(self.data), "-w", "-l", str(self.root / "log"), "-o", options, "start")
        return self

    def postmaster_pid(self) -> int:
        return int((self.data / "postmaster.pid").read_text().split()[0])


@dataclass
class Phase:
    """One measured run of every instance to its end against some replicas."""

    name: str
    calls: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    usage: Usage | None = None
    statements: dict[str, int] = field(default_factory=dict)
    conflicts: int = 0


class Router:
    """Sends each call to one of `clients`: at random, or always the same one per instance."""

    def __init__(self, clients: list[Any], sticky: bool, rng: random.Random) -> None:
        self.clients, self.sticky, self.rng = clients, sticky, rng
        self.phase = Phase("")
        self.assigned: dict[str, Any] = {}

    def pick(self, workflow_id: str | None) -> Any:
        if self.sticky and workflow_id is not None:  # instances dealt out in turn: an even split
            if workflow_id not in self.assigned:
                self.assigned[workflow_id] = self.clients[len(self.assigned) % len(self.clients)]
            return self.assigned[workflow_id]
        return self.rng.choice(self.clients)

    async def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any] | None:
        """The structured answer; None (and an error recorded) for anything a client would see as one."""
        client = self.pick(args.get("workflow_id"))
        began = time.perf_counter()
        try:
            result = await asyncio.wait_for(client.call_tool(tool, args), CALL_TIMEOUT_S)
        except Exception as exc:  # a failed call is a client-visible error too
            self.phase.errors.append(f"{tool}: {type(exc).__name__}: {exc}")
            return None
        self.phase.latencies.append(time.perf_counter() - began)
        self.phase.calls += 1
        if result.is_error:
            text = " ".join(getattr(block, "text", "") for block in result.content or [])
            self.phase.errors.append(f"{tool}({args.get('workflow_id')}): {text}")
            return None
        return dict(result.structured_content or {})


async def drive(router: Router, workflow_id: str, steps: int) -> None:
    """One agent: where am I, then complete each prompt until the instance ends."""
    answer = await router.call("workflow_get_next_step", {"workflow_id": workflow_id})
    step = answer["step"] if answer else None
    for _ in range(steps + 1):
        if step is None:
            return
        reply = await router.call("workflow_step_complete", {"workflow_id": workflow_id, "step_id": step["id"],
                                                             "result": f"did: {step['definition']['prompt']}"})
        if reply is None:
            return
        step = reply["next_step"]
    router.phase.errors.append(f"{workflow_id}: did not end after {steps} steps")


async def run_phase(name: str, router: Router, meter: CpuMeter, instances: int, steps: int,
                    stats: PgStats | None) -> Phase:
    router.phase = Phase(name)
    ids = []
    for n in range(instances):
        inputs = {"rounds": steps, "tag": f"i{n}"}
        started = await router.call("workflow_start", {"workflow": "relay", "inputs": inputs})
        if started is None:
            raise RuntimeError(f"{name}: workflow_start failed: {router.phase.errors}")
        ids.append(started["workflow_id"])
    phase = router.phase = Phase(name)
    if stats:
        stats.reset(ids)
    before = meter.read()
    began = time.perf_counter()
    await asyncio.gather(*(drive(router, wid, steps) for wid in ids))
    phase.seconds = time.perf_counter() - began
    phase.usage = meter.read() - before
    if stats:
        phase.statements = stats.counts()
        phase.conflicts = max(0, phase.statements.get("save", 0) - stats.versions_moved(ids))
    return phase


class PgStats:
    """Statement counts (pg_stat_statements) and version moves in the store's database."""

    KINDS = (  # statement text prefix -> what it is for (store/postgres.py)
        ("SELECT version FROM instances", "version check"),
        ("SELECT status, current_steps, error, version", "check + deltas since"),
        ("SELECT workflow_id, workflow, project_dir, status, definition", "full load"),
        ("UPDATE instances SET status", "save"),
        ("WITH base AS (UPDATE instances SET status", "save"),
        ("INSERT INTO instances", "create"),
        ("WITH base AS (INSERT INTO instances", "create"),
    )

    def __init__(self, url: str) -> None:
        import psycopg

        self.conn = psycopg.connect(url, autocommit=True)
        self.conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        self.versions_at_reset = 0

    def _version_sum(self, ids: list[str]) -> int:
        row = self.conn.execute("SELECT COALESCE(SUM(version), 0) FROM instances WHERE workflow_id = ANY(%s)",
                                (ids,)).fetchone()
        return int(row[0]) if row else 0

    def reset(self, ids: list[str]) -> None:
        self.versions_at_reset = self._version_sum(ids)
        self.conn.execute("SELECT pg_stat_statements_reset()")

    def versions_moved(self, ids: list[str]) -> int:
        """Successful saves since `reset`: each moves its instance's version by one."""
        return self._version_sum(ids) - self.versions_at_reset

    def counts(self) -> dict[str, int]:
        rows = self.conn.execute(
            "SELECT query, calls FROM pg_stat_statements WHERE dbid = "
            "(SELECT oid FROM pg_database WHERE datname = current_database())").fetchall()
        counts: dict[str, int] = {}
        for query, calls in rows:
            if "pg_stat_statements" in query or "SUM(version)" in query:
                continue  # this class's own
            kind = next((k for prefix, k in self.KINDS if query.startswith(prefix)), query.split()[0].lower())
            counts[kind] = counts.get(kind, 0) + int(calls)
        return counts

    def close(self) -> None:
        self.conn.close()


# -- the world: cluster, replicas, clients --------------------------------------------------------------------------
@contextmanager
def cluster() -> Iterator[StatCluster]:
    bin_dir = find_bin_dir()
    if bin_dir is None:
        raise SystemExit("PostgreSQL is not installed (no pg_ctl; apt-get install -y postgresql)")
    pg = StatCluster(bin_dir).start()
    try:
        yield pg
    finally:
        pg.stop()


async def open_clients(stack: AsyncExitStack, group: list[Replica], kind: str) -> list[Any]:
    """One long-lived client per replica, shared by every loop: the SDK's, or `raw_mcp`'s."""
    if kind == "raw":
        clients = [RawClient(r.url, TOKEN) for r in group]
        for client in clients:
            stack.push_async_callback(client.close)
        return clients
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    http = await stack.enter_async_context(httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"},
                                                              timeout=httpx2.Timeout(30, read=300)))
    return [await stack.enter_async_context(Client(streamable_http_client(r.url, http_client=http), mode=PROTOCOL,
                                                   read_timeout_seconds=CALL_TIMEOUT_S))
            for r in group]


async def bench(args: argparse.Namespace, pg: StatCluster, workdir: Path) -> list[Phase]:
    url = pg.create_database()
    store_url = url
    if args.synchronous_commit:
        store_url += "&options=-c%20synchronous_commit%3D" + args.synchronous_commit
    (workdir / "pg").mkdir()
    (workdir / "lite").mkdir()
    rng = random.Random(args.seed)
    async with AsyncExitStack() as stack:
        pair = await stack.enter_async_context(replicas(workdir / "pg", store_url, 2))
        lite = await stack.enter_async_context(replicas(workdir / "lite", str(workdir / "lite.sqlite3"), 1))
        pg_clients = await open_clients(stack, pair, args.client)
        lite_clients = await open_clients(stack, lite, args.client)
        if args.replica_cpu:
            for replica in [*pair, *lite]:
                stack.enter_context(cpu_quota(replica.proc.pid, args.replica_cpu))
        meter = CpuMeter({"replica 1": [pair[0].proc.pid], "replica 2": [pair[1].proc.pid],
                          "sqlite replica": [lite[0].proc.pid], "postgres": [pg.postmaster_pid()]},
                         split=("replica 1", "replica 2", "sqlite replica"))
        stats = PgStats(url)
        stack.callback(stats.close)
        plan = [("a: 1 replica, PostgreSQL", Router(pg_clients[:1], False, rng), stats),
                ("b: 2 replicas, random", Router(pg_clients, False, rng), stats),
                ("c: 1 replica, SQLite", Router(lite_clients, False, rng), None)]
        if args.sticky:
            plan.append(("d: 2 replicas, sticky", Router(pg_clients, True, rng), stats))
        phases: list[Phase] = []
        for n in range(args.warmup + args.rounds):
            for name, router, phase_stats in plan:
                phase = await run_phase(name, router, meter, args.instances, args.steps, phase_stats)
                if n >= args.warmup:
                    phases.append(phase)
                print(f"  round {n + 1 - args.warmup}: {summary_line(phase)}", file=sys.stderr, flush=True)
        return phases


# -- report ---------------------------------------------------------------------------------------------------------
def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else float("nan")


def summary_line(phase: Phase) -> str:
    rate = phase.calls / phase.seconds if phase.seconds else 0.0
    return (f"{phase.name}: {rate:.0f} calls/s, p50 {pct(phase.latencies, 0.5):.1f} ms, "
            f"errors {len(phase.errors)}, conflicts {phase.conflicts}")


def report(phases: list[Phase], cores: int, replica_cpu: float | None = None) -> dict[str, Any]:
    """Medians over rounds per phase name, the b/a ratio, CPU per call and the ceilings."""
    out: dict[str, Any] = {}
    for name in dict.fromkeys(p.name for p in phases):
        mine = [p for p in phases if p.name == name]
        calls = sum(p.calls for p in mine)
        usage = [p.usage for p in mine if p.usage]
        cpu = {k: sum(u.groups[k] for u in usage) / calls * 1000 for k in usage[0].groups}
        cpu = {k: round(v, 3) for k, v in cpu.items() if v > 0.005}
        total_ms = sum(cpu.values())
        wall = sum(p.seconds for p in mine)
        out[name] = {
            "calls/s per round": [round(p.calls / p.seconds, 1) for p in mine],
            "calls/s (median)": round(statistics.median(p.calls / p.seconds for p in mine), 1),
            "p50 ms": round(statistics.median(pct(p.latencies, 0.5) for p in mine), 1),
            "p90 ms": round(statistics.median(pct(p.latencies, 0.9) for p in mine), 1),
            "client-visible errors": sum(len(p.errors) for p in mine),
            "error samples": [e for p in mine for e in p.errors][:3],
            "CPU ms per call": {**cpu, "total": round(total_ms, 3)},
            "cores busy (ours, other)": (round(sum(u.ours for u in usage) / wall, 2),
                                         round(sum(u.other for u in usage) / wall, 2)),
        }
        out[name].update(ceilings(cpu, total_ms, cores, sum(u.other for u in usage) / wall, replica_cpu))
        if mine[0].statements or name.startswith(("a", "b", "d")):
            stmts: dict[str, int] = {}
            for p in mine:
                for k, v in p.statements.items():
                    stmts[k] = stmts.get(k, 0) + v
            out[name]["SQL statements per call"] = {k: round(v / calls, 3) for k, v in sorted(stmts.items())}
            out[name]["save conflicts (retried inside)"] = sum(p.conflicts for p in mine)
    names = list(out)
    for other in [n for n in names if n.startswith(("b", "d"))]:
        key = f"{other[0]}/{names[0][0]}"
        if out[names[0]].get("ceiling calls/s"):
            out[f"ceiling ratio {key} (idle machine)"] = round(out[other]["ceiling calls/s"]
                                                              / out[names[0]]["ceiling calls/s"], 2)
        ratios = [b.calls / b.seconds / (a.calls / a.seconds)
                  for a, b in zip([p for p in phases if p.name == names[0]], [p for p in phases if p.name == other],
                                  strict=True)]
        out[f"ratio {key} per round"] = [round(r, 2) for r in ratios]
        out[f"ratio {key} (median)"] = round(statistics.median(ratios), 2)
    return out


def ceilings(cpu_ms: dict[str, float], total_ms: float, cores: int, other_cores: float,
             replica_cpu: float | None = None) -> dict[str, Any]:
    """The most calls/s the CPU allows: all cores / CPU per call of everything, and each
    server process (one GIL) at most one core (or its `--replica-cpu` quota): that / its
    CPU per call.  Also with only the cores other work left us during the run."""
    if not total_ms:
        return {}
    servers = [v for k, v in cpu_ms.items() if "replica" in k and not k.endswith("children")]
    gil = min(1.0, replica_cpu or 1.0) * 1000 / max(servers) if servers else float("inf")
    return {"ceiling calls/s": round(min(cores * 1000 / total_ms, gil), 1),
            "ceiling calls/s on the cores other work left": round(min((cores - other_cores) * 1000 / total_ms, gil),
                                                                  1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--instances", type=int, default=50, help="concurrent instances (client loops) per phase")
    parser.add_argument("--steps", type=int, default=20, help="agent steps per instance")
    parser.add_argument("--rounds", type=int, default=4, help="measured rounds of a, b, c (alternated)")
    parser.add_argument("--warmup", type=int, default=1, help="rounds run first and not counted")
    parser.add_argument("--sticky", action="store_true", help="also run d: two replicas with affinity per instance")
    parser.add_argument("--synchronous-commit", choices=["on", "off"], help="for the store's connections")
    parser.add_argument("--client", choices=["mcp", "raw"], default="raw",
                        help="mcp: the SDK's Client; raw: benchmarks/raw_mcp.py, same requests, far less client CPU")
    parser.add_argument("--replica-cpu", type=float, metavar="CORES",
                        help="hold each replica (and its children) to this many CPUs with a cgroup quota "
                             "(root only; benchmarks/cpu_quota.py): a CPU budget of its own, as on its own host")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="bench-replicas-") as tmp, cluster() as pg:
        phases = asyncio.run(bench(args, pg, Path(tmp)))
    result = {"machine": machine(), "settings": {k: str(v) for k, v in vars(args).items()},
              "results": report(phases, cores, args.replica_cpu)}
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
