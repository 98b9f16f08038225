"""What tracing costs a step: the same plain step with tracing off and with OpenTelemetry's
SDK on and a no-op exporter, measured in one run (budget: ≤ 1.05 ×).

Run: ``.venv/bin/python benchmarks/bench_otel.py [--steps N] [--calls N]``

A. In process: two `WorkflowService`s, one without an observer (tracing off: what every
   server runs without the OTEL_* variables) and one with `observe.otel.Tracing` over a
   `TracerProvider` whose `BatchSpanProcessor` feeds an exporter that drops every span.
   Rounds alternate between them, step by step; rows are `step_complete` on a plain
   `agent_prompt` step in a `foreach` (it completes the step and hands out the next one:
   one step span ended, one started) and on the `template + 2 increments` step of
   `bench_step.py` (a message and a state update more: two server-side step spans).
B. Over stdio: three real servers, `aromcp-workflows serve` and the same server started
   by `benchmarks/traced_server.py` with `OTEL_TRACES_EXPORTER=noop`, where the MCP
   SDK's span of each tool call is recorded too — once with the workflow's spans, once
   with only the tool calls' (`BENCH_WORKFLOW_SPANS=off`); rounds call them all in a
   shuffled order.

Besides each call's wall time (the median: what a step waits for), the CPU a step costs
is printed: in process, the whole process's CPU over steps of one service alone (the
tracing worker, which makes the spans off the request path, included); over stdio, each
server process's CPU over the timed rounds.  The ratios (on / off) are what to read:
absolute times drift on shared machines.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_server import PYTHON, SyncStdio, median_ms, p90_ms, server_env  # noqa: E402
from bench_step import make_project, timed_rounds  # noqa: E402
from machine_info import machine  # noqa: E402
from proc_cpu import tree_cpu_s  # noqa: E402
from traced_server import NoopExporter  # noqa: E402

BUDGET = 1.05


class Stepper:
    """An instance whose pending step `advance()` completes (the next one comes back)."""

    def __init__(self, complete: Callable[[str, str], Any], start: Callable[[str, int], str],
                 first: Callable[[str], Any], workflow: str, items: int):
        self.complete = complete
        self.workflow_id = start(workflow, items)
        self.step_id = first(self.workflow_id)

    def advance(self) -> None:
        self.step_id = self.complete(self.workflow_id, self.step_id)


def in_process(workdir: Path, steps: int, warmup: int) -> dict[str, list[float]]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from aromcp_workflows.app.service import WorkflowService
    from aromcp_workflows.observe.otel import Tracing

    project = make_project(workdir / "proj")
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(NoopExporter()))
    services = {"off": WorkflowService(project_dir=project, store_path=workdir / "off.sqlite3", home=workdir),
                "on": WorkflowService(project_dir=project, store_path=workdir / "on.sqlite3", home=workdir,
                                      observer=Tracing(provider))}
    rows: dict[str, Callable[[], Any]] = {}
    for label, service in services.items():
        def complete(wid: str, step_id: str, service: Any = service) -> str:
            return str(service.step_complete(wid, step_id, result="ok").next_step["id"])

        def start(workflow: str, items: int, service: Any = service) -> str:
            return str(service.start(workflow, {"items": list(range(items))}).workflow_id)

        def first(wid: str, service: Any = service) -> str:
            return str(service.next_step(wid).step["id"])

        for workflow, row in (("bench-step-plain", "plain"), ("bench-step-template", "template + 2 increments")):
            rows[f"{row}, tracing {label}"] = Stepper(complete, start, first, workflow, 2 * steps + warmup + 5).advance
    timed_rounds(rows, warmup)
    times = timed_rounds(rows, steps)
    for label in ("off", "on"):  # CPU of the whole process (the tracing worker too), one service alone
        advance = rows[f"plain, tracing {label}"]
        cpu = time.process_time()
        for _ in range(steps):
            advance()
        if label == "on":
            services["on"].instances.observer.flush()  # type: ignore[union-attr]  # spans still queued
        times[f"CPU per plain step, tracing {label}"] = [(time.process_time() - cpu) / steps]
    provider.shutdown()
    return times


def over_stdio(workdir: Path, calls: int, warmup: int) -> dict[str, list[float]]:
    project = make_project(workdir / "proj-stdio")
    home = workdir / "home"
    home.mkdir(exist_ok=True)
    servers: dict[str, SyncStdio] = {}
    traced = [str(HERE / "traced_server.py")]
    for label, launcher, extra in (
            ("off", ["-m", "aromcp_workflows"], {}),
            ("on, tool-call spans only", traced, {"OTEL_TRACES_EXPORTER": "noop", "BENCH_WORKFLOW_SPANS": "off"}),
            ("on", traced, {"OTEL_TRACES_EXPORTER": "noop"})):
        store = workdir / f"stdio-{label}.sqlite3"
        env = {k: v for k, v in server_env(home, store).items() if not k.startswith("OTEL_")}
        env.update(extra)
        servers[label] = SyncStdio([PYTHON, *launcher, "--project-dir", str(project), "serve", "--store", str(store)],
                                   env, project)
    rows: dict[str, Callable[[], Any]] = {}
    try:
        for label, server in servers.items():
            server.handshake()

            def complete(wid: str, step_id: str, server: SyncStdio = server) -> str:
                reply = server.tool("workflow_step_complete", {"workflow_id": wid, "step_id": step_id, "result": "ok"})
                return str(reply["next_step"]["id"])

            def start(workflow: str, items: int, server: SyncStdio = server) -> str:
                return str(server.tool("workflow_start", {"workflow": workflow,
                                                          "inputs": {"items": list(range(items))}})["workflow_id"])

            def first(wid: str, server: SyncStdio = server) -> str:
                return str(server.tool("workflow_get_next_step", {"workflow_id": wid})["step"]["id"])

            rows[f"plain step_complete, tracing {label}"] = Stepper(complete, start, first, "bench-step-plain",
                                                                    calls + warmup + 5).advance
        timed_rounds(rows, warmup)
        cpu = {label: tree_cpu_s(server.proc.pid) for label, server in servers.items()}
        times = timed_rounds(rows, calls)
        for label, server in servers.items():  # the server's CPU per step (its worker threads too)
            times[f"server CPU per step, tracing {label}"] = [(tree_cpu_s(server.proc.pid) - cpu[label]) / calls]
        return times
    finally:
        for server in servers.values():
            server.close()


def report(title: str, times: dict[str, list[float]]) -> None:
    print(f"\n{title}")
    print(f"  {'row':50s} {'median ms':>9s} {'p90 ms':>8s} {'on / off':>9s}")
    for key, values in times.items():
        ratio = ""
        if "tracing on" in key:
            off = median_ms(times[key.split("tracing on")[0] + "tracing off"])
            value = median_ms(values) / off
            ratio = f"{value:9.3f}  (budget <= {BUDGET}: {'met' if value <= BUDGET else 'over'})"
        print(f"  {key:50s} {median_ms(values):9.3f} {p90_ms(values):8.3f} {ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000, help="in-process rounds (one step of each row)")
    parser.add_argument("--calls", type=int, default=400, help="stdio rounds")
    parser.add_argument("--warmup", type=int, default=100)
    args = parser.parse_args()
    print("machine:", ", ".join(f"{k}={v}" for k, v in machine().items()))
    with tempfile.TemporaryDirectory(prefix="bench-otel-", dir=os.environ.get("TMPDIR")) as tmp:
        workdir = Path(tmp)
        report(f"A. in process: step_complete (median of {args.steps} rounds, interleaved)",
               in_process(workdir, args.steps, args.warmup))
        report(f"B. over stdio: workflow_step_complete round trip (median of {args.calls} rounds, shuffled)",
               over_stdio(workdir, args.calls, args.warmup))


if __name__ == "__main__":
    main()
