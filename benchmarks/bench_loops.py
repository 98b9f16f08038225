"""What one iteration of a server-side `while` costs, next to its floors measured in the same run.

Run: ``.venv/bin/python benchmarks/bench_loops.py [--rounds R] [--n N] [--dir DIR] [--json]``

Two loops, each between two agent steps (the timed call is the `workflow_step_complete`
of the first agent step: it runs the whole loop and answers with the second):

- **plain**: `while: "{{ n < inputs.n }}"` whose body increments `raw.n`; a computed
  field `left` (`inputs.n - n`) is recomputed on every increment and the condition of a
  `conditional` in the body reads it, as a real loop's bookkeeping would.
- **shell**: the same loop whose body also runs `shell_command: "true"`.

Per iteration = (the call with N iterations − the call with 0) / N.  The floors, measured
interleaved round by round: a trivial tool call on the same server over stdio
(`workflow_list`), and a bare spawn of `bash -c true` from this process
(`subprocess.run`).  Targets: a plain iteration ≤ 0.2 × the trivial call; a shell
iteration ≤ 1.5 × the bare spawn.  In-process figures (`WorkflowService`, no stdio) are
printed too.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_server import REPO, SyncStdio, our_command, server_env
from bench_shell import in_process_loop, stdio_loop
from machine_info import machine

sys.path.insert(0, str(REPO))

PLAIN = """
name: bench-while
description: "a server-side while loop between two agent steps"
inputs:
  n: {type: integer, default: 0}
default_state:
  raw: {n: 0, odd: 0}
state_schema:
  computed:
    left:
      from: raw.n
      transform: "inputs.n - input"
steps:
  - id: before
    type: agent_prompt
    prompt: "start"
  - id: loop
    type: while
    condition: "{{ n < inputs.n }}"
    max_iterations: 10000
    body:
      - type: state_update
        path: raw.n
        operation: increment
        value: 1
      - type: conditional
        condition: "{{ left % 2 === 1 }}"
        then:
          - type: state_update
            path: raw.odd
            operation: increment
            value: 1
  - id: after
    type: agent_prompt
    prompt: "end"
"""
SHELL = PLAIN.replace("bench-while", "bench-while-shell").replace("""    body:
""", """    body:
      - type: shell_command
        command: "true"
""")


def make_project(root: Path) -> Path:
    target = root / ".aromcp" / "workflows"
    target.mkdir(parents=True, exist_ok=True)
    (target / "bench-while.yaml").write_text(PLAIN)
    (target / "bench-while-shell.yaml").write_text(SHELL)
    return root


def timed(action: Any) -> float:
    t0 = time.perf_counter()
    action()
    return time.perf_counter() - t0


def run(workdir: Path, rounds: int, n: int) -> dict[str, float]:
    from aromcp_workflows.app.service import WorkflowService

    project = make_project(workdir / "project")
    home = workdir / "home"
    home.mkdir()
    store = workdir / "stdio.sqlite3"
    server = SyncStdio(our_command(project, store), server_env(home, store), project)
    server.handshake()
    service = WorkflowService(project_dir=project, store_path=workdir / "inproc.sqlite3", home=home)
    loops = {"stdio": stdio_loop(server), "in process": in_process_loop(service)}
    samples: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        samples.setdefault(key, []).append(value)

    for round_no in range(rounds + 2):  # two warm-up rounds (V8 compile cache, pages)
        row: dict[str, float] = {}
        for where, loop in loops.items():
            for kind, workflow in (("plain", "bench-while"), ("shell", "bench-while-shell")):
                empty, _ = loop.time(workflow, 0)
                full, _ = loop.time(workflow, n)
                row[f"{kind} iteration ({where})"] = (full - empty) / n
        row["trivial tool call (workflow_list, stdio)"] = statistics.median(
            timed(lambda: server.tool("workflow_list", {"include_global": False})) for _ in range(20))
        row["bare spawn (subprocess.run bash -c true)"] = statistics.median(
            timed(lambda: subprocess.run(["bash", "-c", "true"], check=True)) for _ in range(20))
        if round_no >= 2:
            for key, value in row.items():
                add(key, value)
    server.close()
    return {key: statistics.median(values) * 1000 for key, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--n", type=int, default=200, help="iterations of each loop")
    parser.add_argument("--dir", help="where stores are created (default: a temp dir)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        figures = run(Path(tmp), args.rounds, args.n)
    trivial = figures["trivial tool call (workflow_list, stdio)"]
    spawn = figures["bare spawn (subprocess.run bash -c true)"]
    if args.json:
        print(json.dumps({"machine": machine(), "ms": figures}, indent=2))
        return
    print(f"{args.rounds} rounds, {args.n} iterations per loop; medians in ms")
    for key, value in figures.items():
        note = ""
        if key.startswith("plain"):
            note = f"  = {value / trivial:.3f} x the trivial call (target <= 0.2)"
        elif key.startswith("shell"):
            note = f"  = {value / spawn:.2f} x the bare spawn (target <= 1.5)"
        print(f"  {key:<45} {value:8.3f}{note}")


if __name__ == "__main__":
    main()
