"""Store latency: what durability costs per `save()`, and how the store behaves under threads.

Run: ``.venv/bin/python benchmarks/bench_store.py [--saves N] [--dir DIR]``

Prints the median (and p90) latency of one `save()` for synchronous=FULL vs NORMAL, with
and without history events, and with a small vs a large state; then the throughput of
20 threads saving to different instances through one shared store (one connection and a
lock, the design) vs 20 separate store objects (one connection each, SQLite's busy
handler arbitrating). Absolute times drift on shared machines; compare rows of one run.
The file lives in ``--dir`` (default: a temp dir under the current directory, so the
numbers reflect the real disk rather than a tmpfs).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

from aromcp_workflows.store import HistoryEvent, InstanceRecord, SqliteStore


def make_state(items: int) -> dict[str, object]:
    files = [f"src/pkg/module_{i}.py" for i in range(items)]
    return {"raw": {"files": files, "results": {f: {"ok": True} for f in files[:50]}}}


def bench_saves(path: Path, sync: str, events: int, items: int, saves: int) -> list[float]:
    store = SqliteStore(path, synchronous=sync)
    record = InstanceRecord("bench", "bench", "/p", state=make_state(items))
    store.create(record)
    times = []
    for i in range(saves):
        record.state["i"] = i
        batch = [
            HistoryEvent("step_completed", step_id=f"s{i}", data={"n": j}) for j in range(events)
        ]
        t0 = time.perf_counter()
        store.save(record, record.version, batch)
        times.append(time.perf_counter() - t0)
    store.close()
    return times


def bench_threads(path: Path, shared: bool, threads: int, saves: int) -> float:
    """Total saves per second with `threads` writers on different instances."""
    stores = [SqliteStore(path)] if shared else [SqliteStore(path) for _ in range(threads)]
    for s in stores:
        s.open()

    def work(n: int) -> None:
        store = stores[0] if shared else stores[n]
        record = InstanceRecord(f"t{n}", "bench", "/p", state=make_state(20))
        store.create(record)
        for i in range(saves):
            record.state["i"] = i
            store.save(record, record.version, [HistoryEvent("state_changed")])

    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - t0
    for s in stores:
        s.close()
    return threads * (saves + 1) / elapsed


def ms(values: list[float], q: float) -> float:
    return sorted(values)[int(q * (len(values) - 1))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saves", type=int, default=300)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir or ".", prefix="bench_store_") as tmp:
        base = Path(tmp)
        print(f"save() latency, {args.saves} saves each (file in {base})")
        print(f"{'synchronous':<12}{'events':>7}{'state items':>12}{'median ms':>11}{'p90 ms':>9}")
        for items in (20, 2000):
            for events in (0, 5):
                for sync in ("FULL", "NORMAL"):
                    path = base / f"{sync}-{events}-{items}.sqlite3"
                    times = bench_saves(path, sync, events, items, args.saves)
                    print(
                        f"{sync:<12}{events:>7}{items:>12}"
                        f"{statistics.median(times) * 1000:>11.3f}{ms(times, 0.9):>9.3f}"
                    )
        print("\nfirst use (lazy open: connect, WAL, migrations)")
        for label in ("new file", "existing file"):
            t0 = time.perf_counter()
            SqliteStore(base / "open.sqlite3").open()
            print(f"  {label:<14}{(time.perf_counter() - t0) * 1000:>8.2f} ms")
        print("\nload() latency")
        for items in (20, 2000):
            path = base / f"FULL-0-{items}.sqlite3"
            store = SqliteStore(path)
            store.load("bench")
            times = []
            for _ in range(args.saves):
                t0 = time.perf_counter()
                store.load("bench")
                times.append(time.perf_counter() - t0)
            store.close()
            print(f"  state items {items:>5}: median {statistics.median(times) * 1000:.3f} ms")
        print("\n20 threads, different instances, FULL, 1 event per save")
        for shared in (True, False):
            rate = bench_threads(base / f"threads-{shared}.sqlite3", shared, 20, 50)
            label = "one connection + lock" if shared else "one connection per thread"
            print(f"  {label:<28}{rate:>9.0f} saves/s")


if __name__ == "__main__":
    main()
