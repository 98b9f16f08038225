"""Benchmarks of the budgets (README, "Performance") that concern expressions and state.

Counts V8 crossings as well as time (times drift on shared machines; crossings do not):

1. a step with only plain-path templates: 0 V8 calls
2. a step with 3 non-trivial templates: 1 V8 call
3. an update cascading through 4 computed fields over a 10,000-item list: 1 V8 call,
   <= 20 ms median
4. an update touching no computed field's dependencies: 0 transforms, 0 V8 calls
5. memory flat across 100,000 recomputes (RSS and V8 heap before/after)

Run:  .venv/bin/python benchmarks/bench_state.py [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from collections.abc import Callable
from typing import Any

from machine_info import machine, rss_mb_tree

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aromcp_workflows.expressions import ExpressionEngine
from aromcp_workflows.state import ComputedFieldSpec, StateTiers, Update

CASCADE = [
    ComputedFieldSpec("filtered_files", ["raw.file_list"], False,
                      "input.filter(f => !f.includes('node_modules') && !f.endsWith('.d.ts'))"),
    ComputedFieldSpec("file_batches", ["computed.filtered_files"], False, """
        input.reduce((batches, file, index) => {
          const b = Math.floor(index / 10);
          if (!batches[b]) batches[b] = [];
          batches[b].push(file);
          return batches;
        }, []).map((files, idx) => ({ id: `batch_${idx}`, files, status: 'pending' }))"""),
    ComputedFieldSpec("ready_batches", ["computed.file_batches", "raw.batch_status"], True,
                      "input[0].filter(b => (input[1][b.id] || 'pending') === 'pending')"),
    ComputedFieldSpec("summary", ["computed.ready_batches", "computed.filtered_files"], True,
                      "({ ready: input[0].length, files: input[1].length, "
                      "first: input[0][0] && input[0][0].id })"),
]


def rss_mb() -> float:
    return rss_mb_tree()  # this process and its V8 child process


def measure(fn: Callable[[], Any], engine: ExpressionEngine, n: int) -> tuple[float, float]:
    """(median ms, V8 calls per run)."""
    for _ in range(min(20, n)):
        fn()
    times = []
    calls0 = engine.stats.v8_calls
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), (engine.stats.v8_calls - calls0) / n


def bench_templates(engine: ExpressionEngine, n: int) -> dict[str, Any]:
    scope = {"item": "src/app/Button.tsx", "index": 3, "inputs": {"branch": "main"},
             "files": [f"src/f{i}.ts" for i in range(50)], "loop": {"iteration": 2},
             "file_results": {"src_app_Button_tsx": {"hints": ["use const"]}}}
    plain = {"command": "eslint {{ item }}", "branch": "{{ inputs.branch }}",
             "n": "{{ loop.iteration }}"}
    rich = {"command": "eslint {{ files.filter(f => f.endsWith('.ts')).slice(0, 5).join(' ') }}",
            "hints": "{{ file_results[item.replace(/[^A-Za-z0-9_-]+/g, '_')].hints }}",
            "more": "{{ index > 2 && files.length > 10 ? 'many' : 'few' }}"}
    plain_ms, plain_calls = measure(lambda: engine.render(plain, scope, shell_quote=True),
                                    engine, n)
    rich_ms, rich_calls = measure(lambda: engine.render(rich, scope, shell_quote=True),
                                  engine, n)
    return {"plain_paths_step_ms": plain_ms, "plain_paths_step_v8_calls": plain_calls,
            "three_templates_step_ms": rich_ms, "three_templates_step_v8_calls": rich_calls}


def bench_cascade(engine: ExpressionEngine, n: int) -> dict[str, Any]:
    store = StateTiers(engine, CASCADE)
    files = [f"src/pkg{i % 40}/file{i}.{'d.ts' if i % 7 == 0 else 'ts'}" for i in range(10_000)]
    store.initialize({"raw": {"file_list": files, "batch_status": {}, "other": 0}})
    counter = [0]
    ran: list[int] = []

    def cascade() -> None:
        counter[0] += 1
        # Replace one entry: every one of the 4 fields changes (ids shift / counts change).
        result = store.apply([Update("raw.file_list[0]", "set",
                                     f"src/x{counter[0]}.{'d.ts' if counter[0] % 2 else 'ts'}")],
                             trigger="bench")
        ran.append(len(result.recomputed))
        store.drain_traces()

    ms, calls = measure(cascade, engine, n)
    recomputed = 0

    def untouched() -> None:
        nonlocal recomputed
        counter[0] += 1
        recomputed += len(store.apply([Update("raw.other", "set", counter[0])]).recomputed)

    noop_ms, noop_calls = measure(untouched, engine, n)
    return {"cascade_4_fields_10k_ms": ms, "cascade_4_fields_10k_v8_calls": calls,
            "cascade_transforms_per_update": statistics.mean(ran),
            "unrelated_update_ms": noop_ms, "unrelated_update_v8_calls": noop_calls,
            "unrelated_update_transforms": recomputed}


def bench_memory(engine: ExpressionEngine, recomputes: int) -> dict[str, Any]:
    specs = [ComputedFieldSpec("a", ["raw.n"], False, "input + 1"),
             ComputedFieldSpec("b", ["computed.a"], False, "[input, input * 2]"),
             ComputedFieldSpec("c", ["computed.b"], False, "({ sum: input[0] + input[1] })"),
             ComputedFieldSpec("d", ["computed.c", "raw.tag"], True, "input[1] + input[0].sum")]
    store = StateTiers(engine, specs)
    store.initialize({"raw": {"n": 0, "tag": "t"}})
    updates = recomputes // len(specs)
    samples: list[float] = []
    transforms = 0
    t0 = time.perf_counter()
    for i in range(updates):
        transforms += len(store.apply([Update("raw.n", "set", i + 1)]).recomputed)
        if i % 1000 == 0:
            store.drain_traces()  # as the service does after persisting them
        if i % max(1, updates // 10) == 0 and i >= updates // 10:
            gc.collect()
            samples.append(rss_mb())
    gc.collect()
    samples.append(rss_mb())
    return {"memory_recomputes": transforms, "memory_updates": updates,
            "memory_rss_samples_mb": [round(x, 1) for x in samples],
            "memory_rss_after_warmup_mb": samples[0], "memory_rss_end_mb": samples[-1],
            "memory_rss_growth_mb": samples[-1] - samples[0],
            "memory_run_seconds": time.perf_counter() - t0}


def bench_reference(engine: ExpressionEngine, n: int) -> dict[str, Any]:
    """Same-run references: an empty V8 crossing, a JSON round trip of the 10k list."""
    files = [f"src/pkg{i % 40}/file{i}.ts" for i in range(10_000)]
    trivial_ms, _ = measure(lambda: engine.evaluate("a + 1", {"a": 1}), engine, n)
    t = []
    for _ in range(n):
        t0 = time.perf_counter()
        json.loads(json.dumps(files))
        t.append((time.perf_counter() - t0) * 1000)
    return {"ref_trivial_v8_call_ms": trivial_ms, "ref_json_roundtrip_10k_ms": statistics.median(t)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    n = 50 if args.quick else 300
    engine = ExpressionEngine()
    results: dict[str, Any] = {"machine": machine()}
    results["load_average_start"] = os.getloadavg()[0]
    results.update(bench_reference(engine, n))
    results.update(bench_templates(engine, n * 4))
    results.update(bench_cascade(engine, n))
    results.update(bench_memory(engine, 10_000 if args.quick else 100_000))
    results["v8_calls_total"] = engine.stats.v8_calls
    results["load_average_end"] = os.getloadavg()[0]
    m = results["machine"]
    print(f"machine: {m['nproc']} x {m['cpu']}, Python {m['python']}, "
          f"mini-racer {m['mini-racer']}; load average {results['load_average_start']:.1f} "
          f"-> {results['load_average_end']:.1f}")
    print(f"references (same run): empty V8 crossing {results['ref_trivial_v8_call_ms']:.3f} ms, "
          f"JSON round trip of a 10k list {results['ref_json_roundtrip_10k_ms']:.3f} ms")
    rows = [
        ("step, 3 plain-path templates", "plain_paths_step", "0 calls"),
        ("step, 3 non-trivial templates", "three_templates_step", "1 call"),
        ("update cascading 4 fields / 10k items", "cascade_4_fields_10k", "1 call, <= 20 ms"),
        ("update touching no dependency", "unrelated_update", "0 calls, 0 transforms"),
    ]
    print(f"{'case':40} {'median ms':>10} {'V8 calls':>9}  budget")
    for label, key, budget in rows:
        print(f"{label:40} {results[key + '_ms']:10.3f} {results[key + '_v8_calls']:9.2f}  "
              f"{budget}")
    print(f"transforms per cascading update: {results['cascade_transforms_per_update']:.1f}; "
          f"transforms run by unrelated updates: {results['unrelated_update_transforms']}")
    ratio = results["cascade_4_fields_10k_ms"] / results["ref_json_roundtrip_10k_ms"]
    print(f"cascade / JSON round trip of the 10k list (same run): {ratio:.1f}x")
    print(f"memory over {results['memory_recomputes']:,} recomputes "
          f"({results['memory_updates']:,} updates, {results['memory_run_seconds']:.1f} s): "
          f"RSS after warm-up {results['memory_rss_after_warmup_mb']:.1f} MB, end "
          f"{results['memory_rss_end_mb']:.1f} MB (growth {results['memory_rss_growth_mb']:+.1f} "
          f"MB); samples {results['memory_rss_samples_mb']}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    engine.close()


if __name__ == "__main__":
    main()
