"""The web view's instances page with many instances in the store.

Run: ``.venv/bin/python benchmarks/bench_ui.py [--instances 10000] [--rounds 20] [--store URL] [--json]``

Fills a fresh SQLite store (or the PostgreSQL database ``--store`` names, which must be
empty) with N instances — records shaped like a real waiting instance (definition
snapshot, state, threads), spread over 4 workflows, 5 projects and every status — then
starts the real ``aromcp-workflows ui`` process on it and times, over HTTP, what the
browser asks for: the first page of ``/api/instances`` (50 rows, newest first, with the
total and the filter counts), a page deep in the list, a filtered first page, and the
stalled filter (which reads every running or waiting instance to know).  The first
request after start is reported on its own (cold: the store opens then).  Medians
and p90 of ``--rounds`` requests each; the same run also times a 1-instance store as the
reference, so the ratio says how the page grows with the store.  Target: the first page
in at most 500 ms with 10,000 instances.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine_info import machine

ROOT = Path(__file__).resolve().parents[1]
STATUSES = ["running", "waiting", "completed", "failed", "cancelled"]


def fill(store_location: str, n: int) -> None:
    """N instance records written straight to the store (what N `workflow_start`s would leave)."""
    from aromcp_workflows.store import InstanceRecord, open_store

    store = open_store(store_location)
    definition = {"main": "bench", "definitions": {"bench": {"definition": {"name": "bench", "steps": [
        {"id": "ask", "type": "agent_prompt", "prompt": "Say hello"}]}, "file": "/x/bench.yaml", "source": "project"}}}
    for i in range(n):
        store.create(InstanceRecord(
            workflow_id=f"wf_{i:012x}", workflow=f"bench:w{i % 4}", project_dir=f"/home/dev/project{i % 5}",
            status=STATUSES[i % len(STATUSES)],  # type: ignore[arg-type]
            definition=definition, inputs={"who": "world"},
            state={"states": {"main": {"raw": {"greeting": "hello", "files": ["a.py", "b.md"]}, "state": {},
                                       "computed": {"py_files": ["a.py"]}}}},
            threads={"main": {"thread_id": "main", "frames": [{"pc": 0, "loops": []}], "pending": None}},
            current_steps=["ask"], created_at=f"2026-01-01T00:00:{i % 60:02d}.{i:06d}+00:00"))
    store.close()


TOKEN = "bench-ui-token-0123456789abcdef"  # every read needs a credential: the page also takes a token


def start_ui(store_location: str, workdir: Path) -> tuple[subprocess.Popen[str], str]:
    token_file = workdir / "ui.token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    process = subprocess.Popen([sys.executable, "-m", "aromcp_workflows", "ui", "--port", "0", "--store",
                                store_location, "--auth-token-file", str(token_file)], cwd=workdir,
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    return process, line.rsplit(" ", 1)[-1].strip().rstrip("/")


def get_ms(url: str) -> float:
    started = time.perf_counter()
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        body = json.loads(reply.read())
    assert "rows" in body
    return (time.perf_counter() - started) * 1000


def measure(store_location: str, workdir: Path, rounds: int) -> dict[str, Any]:
    process, base = start_ui(store_location, workdir)
    try:
        cold = get_ms(f"{base}/api/instances")
        out: dict[str, Any] = {"first request after start (ms)": round(cold, 1)}
        for name, query in (("first page", ""), ("page 100", "?page=100"),
                            ("first page, status=failed, workflow=bench:w1", "?status=failed&workflow=bench:w1"),
                            ("first page, stalled", "?status=stalled")):
            times = [get_ms(f"{base}/api/instances{query}") for _ in range(rounds)]
            out[name] = {"median_ms": round(statistics.median(times), 1),
                         "p90_ms": round(sorted(times)[int(len(times) * 0.9) - 1], 1)}
        return out
    finally:
        process.terminate()
        process.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--store", help="an empty PostgreSQL database URL (default: a new SQLite file)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        reference = str(workdir / "one.sqlite3")
        fill(reference, 1)
        location = args.store or str(workdir / "many.sqlite3")
        started = time.perf_counter()
        fill(location, args.instances)
        filled_s = time.perf_counter() - started
        result = {"machine": machine(), "instances": args.instances, "filled in (s)": round(filled_s, 1),
                  "reference (1 instance)": measure(reference, workdir, args.rounds),
                  f"{args.instances} instances": measure(location, workdir, args.rounds)}
    many = result[f"{args.instances} instances"]["first page"]["median_ms"]
    one = result["reference (1 instance)"]["first page"]["median_ms"]
    result["first page ratio (N / 1)"] = round(many / one, 2) if one else None
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
