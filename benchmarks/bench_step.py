"""The per-step cost over stdio, as ratios to a trivial tool call on the same server (issue 13).

Run: ``.venv/bin/python benchmarks/bench_step.py [--calls N] [--store sqlite|postgresql|both] [--big N] [--before DIR]``

One real server (``aromcp-workflows serve`` over stdio, the CLI a client starts) and one
bare ``MCPServer`` (``benchmarks/minimal_server.py``) are driven by a blocking JSON-RPC
client (``bench_server.SyncStdio``), call by call: every round makes one call of each row
below, in a shuffled order, so load swings hit all rows alike.  Rows:

- ``workflow_list``: ``workflow_list(include_global=false)`` on the same server with a
  project holding only this benchmark's workflows — the trivial tool, the reference;
- ``noop (bare MCPServer)``: the bare server's no-op tool (a second reference);
- ``plain: get_next_step``: the pending plain ``agent_prompt`` step handed out again;
- ``plain: step_complete``: completing it, which delivers the next plain ``agent_prompt``
  step (the per-step cost of an economical agent).  The steps sit in one
  ``foreach`` (its items are stored once, beside the thread, so the loop's length does not
  weigh on a step);
- ``template + 2 increments``: ``step_complete`` that runs a ``user_message`` rendering a
  template (``{{ item }}``, ``{{ raw.done }}``, ``{{ raw.seen }}``) and a ``state_update``
  with two ``increment``s before it delivers the next plain step;
- ``10-item list`` / ``BIG-item list``: the plain ``step_complete`` on an instance whose
  state holds a list of 10 / ``--big`` (default 100,000) strings that no step touches;
- ``append: 10-item list`` / ``append: BIG-item list``: the same, but each step's answer
  is appended to that list (the delta stores the appended item, not the list).

Targets (issue 13): plain ≤ 1.1 × the trivial tool, template + 2 increments ≤ 1.3 ×,
big list ≤ 1.5 × the 10-item list.  After the timed rounds each instance makes
``--growth-steps`` more steps alone, and per step are printed: the store's growth — SQLite
file + WAL bytes and the logical size (page_count × page_size; a WAL file is reused after a
checkpoint, so both stay near 0 once the store is warm), or with ``--store postgresql``
``pg_total_relation_size`` of the instances, history and checkpoints tables on a throwaway
PostgreSQL 15 cluster (``tests/store/pg_cluster.py``) and the WAL it wrote (the insert
LSN's advance); the bytes the server process passed to write() (``/proc/PID/io``
wchar: store pages and WAL, plus the reply of about 1 KB); and history rows.

Absolute times drift on shared machines; read the ratios.  Medians and p90 are printed.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "store"))

from bench_server import SyncStdio, median_ms, minimal_command, our_command, p90_ms, server_env  # noqa: E402
from machine_info import machine  # noqa: E402

PLAIN = """
name: bench-step-plain
description: "a plain agent_prompt step per item; raw.big is a list no step touches"
inputs:
  items: {type: array, default: []}
default_state:
  raw:
    big: []
steps:
  - id: loop
    type: foreach
    items: "{{ inputs.items }}"
    steps:
      - id: plain
        type: agent_prompt
        prompt: "Review the next file and report what you found."
"""
TEMPLATE = """
name: bench-step-template
description: "per item: a user_message with a template, two increments, then a plain agent_prompt"
inputs:
  items: {type: array, default: []}
default_state:
  raw:
    done: 0
    seen: 0
steps:
  - id: loop
    type: foreach
    items: "{{ inputs.items }}"
    steps:
      - id: say
        type: user_message
        message: "File {{ item }}: {{ raw.done }} done, {{ raw.seen }} seen"
      - id: count
        type: state_update
        updates:
          - {path: raw.done, operation: increment}
          - {path: raw.seen, operation: increment, value: 2}
      - id: plain
        type: agent_prompt
        prompt: "Review the next file and report what you found."
"""
# The plain workflow, each step's answer appended to raw.big.
APPEND = (PLAIN.replace("bench-step-plain", "bench-step-append")
          .replace("raw.big is a list no step touches", "each answer is appended to raw.big")
          + "        state_update: {path: raw.big, operation: append}\n")
TARGETS = {"plain: get_next_step": 1.1, "plain: step_complete": 1.1, "template + 2 increments": 1.3}
BIG_TARGET = 1.5


def make_project(root: Path) -> Path:
    target = root / ".aromcp" / "workflows"
    target.mkdir(parents=True, exist_ok=True)
    (target / "bench-step-plain.yaml").write_text(PLAIN)
    (target / "bench-step-template.yaml").write_text(TEMPLATE)
    (target / "bench-step-append.yaml").write_text(APPEND)
    return root


class Instance:
    """One workflow instance driven over stdio; `advance()` completes its pending step."""

    def __init__(self, server: SyncStdio, workflow: str, items: int, big: int | None = None):
        self.server = server
        started = server.tool("workflow_start", {"workflow": workflow,
                                                 "inputs": {"items": list(range(items))}})
        self.workflow_id: str = started["workflow_id"]
        if big is not None:
            server.tool("workflow_state_update", {"workflow_id": self.workflow_id, "updates": [
                {"path": "raw.big", "value": [f"item-{i:06d}" for i in range(big)]}]})
        self.step = server.tool("workflow_get_next_step", {"workflow_id": self.workflow_id})["step"]
        self.steps = 0

    def again(self) -> None:
        """The pending step handed out again (nothing changes, nothing is written)."""
        step = self.server.tool("workflow_get_next_step", {"workflow_id": self.workflow_id})["step"]
        assert step["id"] == self.step["id"], (step, self.step)

    def advance(self) -> None:
        reply = self.server.tool("workflow_step_complete", {"workflow_id": self.workflow_id,
                                                            "step_id": self.step["id"], "result": "ok"})
        self.step = reply["next_step"]
        if self.step is None or self.step["type"] != "agent_prompt":
            raise RuntimeError(f"expected a plain agent_prompt step next, got {self.step}; raise the item count")
        self.steps += 1


# -- store probes: bytes and history rows ---------------------------------------------------------
class SqliteProbe:
    def __init__(self, path: Path):
        self.path = path

    def sizes(self) -> dict[str, int]:
        wal = Path(f"{self.path}-wal")
        on_disk = self.path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
        with sqlite3.connect(f"file:{self.path}?mode=ro", uri=True) as conn:
            pages = _one(conn.execute("PRAGMA page_count")) * _one(conn.execute("PRAGMA page_size"))
        return {"file + WAL bytes": on_disk, "logical bytes (pages)": pages}

    def history_rows(self, workflow_id: str) -> int:
        with sqlite3.connect(f"file:{self.path}?mode=ro", uri=True) as conn:
            return int(_one(conn.execute("SELECT COUNT(*) FROM history WHERE workflow_id = ?", (workflow_id,))))


class PgProbe:
    TABLES = ("instances", "history", "checkpoints")

    def __init__(self, url: str):
        self.url = url

    def sizes(self) -> dict[str, int]:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            total = sum(int(_one(conn.execute("SELECT pg_total_relation_size(%s::regclass)", (t,))))
                        for t in self.TABLES)
            wal = int(_one(conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')")))
        return {"pg_total_relation_size bytes": total, "WAL bytes (insert LSN)": wal}

    def history_rows(self, workflow_id: str) -> int:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            return int(_one(conn.execute("SELECT COUNT(*) FROM history WHERE workflow_id = %s", (workflow_id,))))


def _one(cursor: Any) -> Any:
    """The single value of a one-row, one-column query."""
    row = cursor.fetchone()
    assert row is not None
    return row[0]


# -- the run ------------------------------------------------------------------------------------------
def timed_rounds(rows: dict[str, Callable[[], Any]], rounds: int, seed: int = 13) -> dict[str, list[float]]:
    """Each round calls every row once, in a shuffled order; wall time of each call."""
    times: dict[str, list[float]] = {key: [] for key in rows}
    order = list(rows)
    shuffle = random.Random(seed)
    for _ in range(rounds):
        shuffle.shuffle(order)
        for key in order:
            t0 = time.perf_counter()
            rows[key]()
            times[key].append(time.perf_counter() - t0)
    return times


def written(pid: int) -> int:
    """Bytes the process passed to write() so far (/proc/PID/io wchar: store writes and replies)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise RuntimeError(f"no wchar in /proc/{pid}/io")


def growth(probe: Any, server_pid: int, instances: dict[str, Instance], steps: int) -> dict[str, dict[str, float]]:
    """Store bytes, bytes written by the server and history rows per step, each instance stepping alone."""
    out: dict[str, dict[str, float]] = {}
    if steps <= 0:  # --growth-steps 0: round trips only
        return out
    for label, instance in instances.items():
        before, rows_before = probe.sizes(), probe.history_rows(instance.workflow_id)
        before["server write() bytes"] = written(server_pid)
        for _ in range(steps):
            instance.advance()
        after, rows_after = probe.sizes(), probe.history_rows(instance.workflow_id)
        after["server write() bytes"] = written(server_pid)
        out[label] = {key: (after[key] - before[key]) / steps for key in after}
        out[label]["history rows"] = (rows_after - rows_before) / steps
    return out


def run(workdir: Path, store: str, probe: Any, calls: int, warmup: int, big: int, growth_steps: int) -> dict[str, Any]:
    project = make_project(workdir / "proj")
    home = workdir / "home"
    home.mkdir(exist_ok=True)
    env = {**server_env(home, workdir), "AROMCP_WORKFLOWS_STORE": store}  # a path or a URL, as given
    ours = SyncStdio(our_command(project, store), env, project)  # type: ignore[arg-type]  # str() of it
    bare = SyncStdio(minimal_command(), env, project)
    try:
        ours.handshake()
        bare.handshake()
        items = calls + warmup + growth_steps + 10
        plain = Instance(ours, "bench-step-plain", items)
        template = Instance(ours, "bench-step-template", items)
        small = Instance(ours, "bench-step-plain", items, big=10)
        large = Instance(ours, "bench-step-plain", items, big=big)
        small_append = Instance(ours, "bench-step-append", items, big=10)
        large_append = Instance(ours, "bench-step-append", items, big=big)
        rows: dict[str, Callable[[], Any]] = {
            "workflow_list": lambda: ours.tool("workflow_list", {"include_global": False}),
            "noop (bare MCPServer)": lambda: bare.tool("noop", {"x": 1}),
            "plain: get_next_step": plain.again,
            "plain: step_complete": plain.advance,
            "template + 2 increments": template.advance,
            "10-item list": small.advance,
            f"{big:,}-item list": large.advance,
            "append: 10-item list": small_append.advance,
            f"append: {big:,}-item list": large_append.advance,
        }
        timed_rounds(rows, warmup)
        times = timed_rounds(rows, calls)
        stepping = {"plain": plain, "template + 2 increments": template, "10-item list": small,
                    f"{big:,}-item list": large, "append: 10-item list": small_append,
                    f"append: {big:,}-item list": large_append}
        grown = growth(probe, ours.proc.pid, stepping, growth_steps)
    finally:
        ours.close()
        bare.close()
    return {"median_ms": {k: median_ms(v) for k, v in times.items()},
            "p90_ms": {k: p90_ms(v) for k, v in times.items()}, "growth_per_step": grown, "big": big}


def run_side_by_side(workdir: Path, servers_of: dict[str, tuple[str, Path | None]], calls: int,
                     warmup: int) -> dict[str, Any]:
    """Several servers and the bare one, their rows interleaved call by call in every round, so
    each is compared with the first at the same moments.  `servers_of`: name -> (store, the
    checkout whose package it runs, None for this one).  `--store both`: this tree on SQLite
    and on PostgreSQL (the target: within 8 % of SQLite where even SQLite is above 1.15 x a
    trivial call); `--before DIR`: DIR's server and this tree's, each on a SQLite file of its own."""
    project = make_project(workdir / "proj")
    home = workdir / "home"
    home.mkdir(exist_ok=True)
    servers: dict[str, SyncStdio] = {}
    for name, (store, tree) in servers_of.items():
        env = {**server_env(home, workdir), "AROMCP_WORKFLOWS_STORE": store}
        if tree is not None:
            env["PYTHONPATH"] = str(tree)
        servers[name] = SyncStdio(our_command(project, store), env, project)  # type: ignore[arg-type]
    bare = SyncStdio(minimal_command(), server_env(home, workdir), project)
    try:
        rows: dict[str, Callable[[], Any]] = {"noop (bare MCPServer)": lambda: bare.tool("noop", {"x": 1})}
        bare.handshake()
        for name, server in servers.items():
            server.handshake()
            items = calls + warmup + 10
            plain = Instance(server, "bench-step-plain", items)
            template = Instance(server, "bench-step-template", items)
            rows.update({f"{name}: workflow_list": lambda s=server: s.tool("workflow_list", {"include_global": False}),
                         f"{name}: plain: get_next_step": plain.again, f"{name}: plain: step_complete": plain.advance,
                         f"{name}: template + 2 increments": template.advance})
        timed_rounds(rows, warmup)
        times = timed_rounds(rows, calls)
    finally:
        for server in [*servers.values(), bare]:
            server.close()
    return {"median_ms": {k: median_ms(v) for k, v in times.items()},
            "p90_ms": {k: p90_ms(v) for k, v in times.items()}, "servers": list(servers_of)}


def report_side_by_side(result: dict[str, Any], calls: int) -> None:
    med, p90 = result["median_ms"], result["p90_ms"]
    first = result["servers"][0]
    print(f"\nround trips over stdio, {' and '.join(result['servers'])} (median of {calls} rounds, "
          "interleaved call by call)")
    print(f"  {'row':40s} {'median ms':>9s} {'p90 ms':>8s} {'x list':>7s} {'x noop':>7s} {'x ' + first:>9s}")
    for key, value in med.items():
        name = key.split(":")[0]
        ref = med.get(f"{name}: workflow_list", value)
        twin = med.get(f"{first}:{key.split(':', 1)[1]}", value) if ":" in key else value
        print(f"  {key:40s} {value:9.3f} {p90[key]:8.3f} {value / ref:7.2f} {value / med['noop (bare MCPServer)']:7.2f}"
              f" {value / twin:9.2f}")


def report(result: dict[str, Any], calls: int) -> None:
    med, p90, big = result["median_ms"], result["p90_ms"], result["big"]
    ref, bare = med["workflow_list"], med["noop (bare MCPServer)"]
    print(f"\nround trips over stdio (median of {calls} rounds, interleaved call by call)")
    print(f"  {'row':26s} {'median ms':>9s} {'p90 ms':>8s} {'x list':>7s} {'x noop':>7s}  target")
    for key, value in med.items():
        target = TARGETS.get(key)
        verdict = "" if target is None else (f"<= {target}: {'met' if value / ref <= target else 'over'} vs list, "
                                             f"{'met' if value / bare <= target else 'over'} vs noop")
        print(f"  {key:26s} {value:9.3f} {p90[key]:8.3f} {value / ref:7.2f} {value / bare:7.2f}  {verdict}")
    big_key = f"{big:,}-item list"
    ratio = med[big_key] / med["10-item list"]
    print(f"\n  {big_key} / 10-item list: {ratio:.2f} x  (target <= {BIG_TARGET}: "
          f"{'met' if ratio <= BIG_TARGET else 'over'})")
    appended = med[f"append: {big_key}"] / med["append: 10-item list"]
    print(f"  append: {big_key} / append: 10-item list: {appended:.2f} x  (a step that appends to the list)")
    print("\nstore growth per step (each instance stepping alone)")
    for label, row in result["growth_per_step"].items():
        print(f"  {label:26s} " + " | ".join(f"{k} {v:,.0f}" if "bytes" in k else f"{k} {v:.2f}"
                                              for k, v in row.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 2)[2])
    parser.add_argument("--calls", type=int, default=200, help="timed rounds (each calls every row once)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed rounds first")
    parser.add_argument("--big", type=int, default=100_000, help="items of the big list in state")
    parser.add_argument("--growth-steps", type=int, default=20, help="steps per instance for store growth")
    parser.add_argument("--store", choices=("sqlite", "postgresql", "both"), default="sqlite",
                        help="SQLite file in --dir, a throwaway PostgreSQL 15 cluster, or both in one run")
    parser.add_argument("--dir", help="where the store and project are created (default: temp dir under cwd)")
    parser.add_argument("--before", help="another checkout (its aromcp_workflows package) served beside this "
                                         "tree's, both on SQLite, interleaved call by call")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON at the end")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-step-", dir=args.dir or ".")).resolve()
    info = machine()
    print("machine:", ", ".join(f"{k}={v}" for k, v in info.items()), f"| store={args.store}")
    cluster = None
    probe: SqliteProbe | PgProbe
    try:
        if args.store in ("postgresql", "both"):
            from pg_cluster import PgCluster, find_bin_dir  # type: ignore[import-not-found]

            bin_dir = find_bin_dir()
            if bin_dir is None:
                sys.exit("bench_step: no PostgreSQL found (pg_ctl on PATH or /usr/lib/postgresql/*/bin)")
            cluster = PgCluster(bin_dir).start()
            url = cluster.create_database()
            store, probe = url, PgProbe(url)
        side_by_side: dict[str, tuple[str, Path | None]] | None = None
        if args.store == "both":
            side_by_side = {"sqlite": (str(workdir / "step.sqlite3"), None), "postgresql": (url, None)}
        elif args.before:
            side_by_side = {"before": (str(workdir / "before.sqlite3"), Path(args.before).resolve()),
                            "after": (str(workdir / "after.sqlite3"), None)}
        if side_by_side is not None:
            both = run_side_by_side(workdir, side_by_side, args.calls, args.warmup)
            report_side_by_side(both, args.calls)
            if args.json:
                print(json.dumps({"machine": info, "store": args.store, **both}, indent=2))
            return
        if args.store == "sqlite":
            path = workdir / "step.sqlite3"
            store, probe = str(path), SqliteProbe(path)
        result = run(workdir, store, probe, args.calls, args.warmup, args.big, args.growth_steps)
        report(result, args.calls)
        if args.json:
            print(json.dumps({"machine": info, "store": args.store, **result}, indent=2))
    finally:
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
