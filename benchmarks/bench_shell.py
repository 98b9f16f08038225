"""What a server-side `shell_command` step costs, next to a bare process spawn measured in the same run.

Run: ``.venv/bin/python benchmarks/bench_shell.py [--rounds R] [--steps N] [--dir DIR] [--json]``

Compared, interleaved round by round (every round measures every row once or more, so
load on a shared machine hits all rows alike):

a. the floor: a bare spawn from Python, `subprocess.run(["bash", "-c", "true"])`, and
   `os.posix_spawn` of `/bin/sh -c true` (and of `bash -c true`) + `waitpid`; plus the
   server's own `shell.runner.run_shell("true")` called directly (spawn + capture, no store),
   and `run_shell("[[ 1 ]]")`, a command that needs bash: `true` runs under dash
   (`shell.dialect`, unless AROMCP_SHELL_FAST=off), `[[ 1 ]]` always under bash.
b. a server-side `true` step through the real server over stdio (JSON-RPC over the
   server's stdin/stdout, the client of `bench_server.py`): a workflow whose `foreach`
   runs N `shell_command: "true"` steps between two agent steps.  The timed call is the
   `workflow_step_complete` of the first agent step, which runs the whole loop and answers
   with the second agent step.  Per shell step = (that call with N steps − the same call
   with 0 steps) / N.  The same loop with a `state_update` body instead of the command
   says how much of that is the loop and a commit rather than the command; the same loop
   with `[[ 1 ]]` gives the per-step cost of a command that needs bash.  The same
   figures in process (`WorkflowService.step_complete`, no stdio) are printed too.
   CPU time in process (this process's threads + the reaped commands, `getrusage`) per
   shell step and per bare spawn is printed as well: on a loaded machine wall times
   include queueing for a core, CPU times do not.
d. the classifier that picks dash (`shell.dialect.runs_same_under_sh`, texts cached),
   microseconds per call for a builtin, two programs and a pipe, with os.environ.
c. a 20-iteration server-side shell loop: the whole call, and its loop part (minus the
   0-step call).  (The issue compares this with AroMCP's 61 ms.)  And a 20-iteration
   server-side `while` whose body is one `true` and an `increment` of its counter: its loop
   part ÷ 20 bare spawns (budget 1.3 ×).

`--before DIR` measures another checkout's server (its `aromcp_workflows` package, e.g.
`git archive REV aromcp_workflows | tar -x -C DIR`) over stdio in the same rounds, next to
this tree's: the before/after table of docs/performance.md comes from one such run.

Printed: medians and p90s, and the ratio b ÷ a (`bash -c true` via subprocess.run).
Absolute times drift on shared machines; the ratios of one run are what to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_server import REPO, SyncStdio, our_command, server_env
from machine_info import machine

sys.path.insert(0, str(REPO))

SHELL_LOOP = """
name: bench-shell
description: "N server-side `true` commands between two agent steps"
inputs:
  n: {type: integer, default: 0}
steps:
  - id: before
    type: agent_prompt
    prompt: "start"
  - id: loop
    type: foreach
    items: "{{ Array.from({length: inputs.n}, (_, i) => i) }}"
    steps:
      - id: sh
        type: shell_command
        command: "true"
  - id: after
    type: agent_prompt
    prompt: "end"
"""
# The same loop without the command: what the loop and one commit per iteration cost.
PLAIN_LOOP = SHELL_LOOP.replace("bench-shell", "bench-noshell").replace(
    """      - id: sh
        type: shell_command
        command: "true"
""", """      - id: sh
        type: state_update
        path: raw.x
        value: 1
""")

# The same loop with a command that needs bash (`[[`): the step always runs under bash.
BASH_LOOP = SHELL_LOOP.replace("bench-shell", "bench-shellbash").replace('command: "true"', 'command: "[[ 1 ]]"')

# A server-side `while`: one `true` and the counter's increment per iteration.
WHILE_LOOP = """
name: bench-while
description: "a server-side while loop running one `true` per iteration"
inputs:
  n: {type: integer, default: 0}
default_state:
  raw: {i: 0}
steps:
  - id: before
    type: agent_prompt
    prompt: "start"
  - id: loop
    type: while
    condition: "{{ i < inputs.n }}"
    max_iterations: 10000
    body:
      - id: sh
        type: shell_command
        command: "true"
      - type: state_update
        path: raw.i
        operation: increment
        value: 1
  - id: after
    type: agent_prompt
    prompt: "end"
"""
WORKFLOWS = ("bench-shell", "bench-noshell", "bench-shellbash", "bench-while")

BASH = shutil.which("bash") or "/bin/bash"


def make_project(root: Path) -> Path:
    target = root / ".aromcp" / "workflows"
    target.mkdir(parents=True, exist_ok=True)
    (target / "bench-shell.yaml").write_text(SHELL_LOOP)
    (target / "bench-noshell.yaml").write_text(PLAIN_LOOP)
    (target / "bench-shellbash.yaml").write_text(BASH_LOOP)
    (target / "bench-while.yaml").write_text(WHILE_LOOP)
    return root


def stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"median_ms": statistics.median(ordered) * 1000, "p90_ms": ordered[int(len(ordered) * 0.9)] * 1000}


def timed(action: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    action()
    return time.perf_counter() - t0


def cpu_now() -> float:
    """CPU seconds of this process (all threads) and of its reaped children (the commands)."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


# -- a. the floor ---------------------------------------------------------------------------------
def spawn_rows(project: Path) -> dict[str, Callable[[], Any]]:
    from aromcp_workflows.shell.runner import run_shell

    env = dict(os.environ)

    def posix_spawn(argv: list[str]) -> Callable[[], None]:
        def spawn() -> None:
            pid = os.posix_spawn(argv[0], argv, env)
            os.waitpid(pid, 0)
        return spawn

    def via_run_shell(command: str) -> Callable[[], None]:
        def call() -> None:
            result = run_shell(command, project)
            assert result.exit_code == 0, result
        return call

    return {
        "subprocess.run bash -c true": lambda: subprocess.run(["bash", "-c", "true"], check=True),
        "posix_spawn /bin/sh -c true": posix_spawn(["/bin/sh", "-c", "true"]),
        "posix_spawn bash -c true": posix_spawn([BASH, "-c", "true"]),
        "shell.runner.run_shell('true')": via_run_shell("true"),
        "shell.runner.run_shell('[[ 1 ]]') (needs bash)": via_run_shell("[[ 1 ]]"),
    }


# -- b/c. through the server ----------------------------------------------------------------------
class LoopCall:
    """Starts an instance of a loop workflow and times the call that runs its loop."""

    def __init__(self, start: Callable[[str, int], str], next_step: Callable[[str], dict[str, Any]],
                 complete: Callable[[str, str], dict[str, Any]], cpu: Callable[[], float] = lambda: cpu_now()):
        self.start, self.next_step, self.complete, self.cpu = start, next_step, complete, cpu

    def time(self, workflow: str, n: int) -> tuple[float, float]:
        """Wall time of the call that runs the loop, and the CPU time the server (this process
        in process, the server's process tree over stdio) and its commands spent in it."""
        workflow_id = self.start(workflow, n)
        step = self.next_step(workflow_id)
        assert step["id"] == "before", step
        c0, t0 = self.cpu(), time.perf_counter()
        answer = self.complete(workflow_id, step["id"])
        elapsed, cpu = time.perf_counter() - t0, self.cpu() - c0
        following = answer["next_step"]
        assert following is not None and following["id"] == "after", f"the loop did not run through: {answer}"
        return elapsed, cpu


def stdio_loop(server: SyncStdio) -> LoopCall:
    def start(workflow: str, n: int) -> str:
        return str(server.tool("workflow_start", {"workflow": workflow, "inputs": {"n": n}})["workflow_id"])

    from proc_cpu import tree_cpu_s

    return LoopCall(start, lambda wid: server.tool("workflow_get_next_step", {"workflow_id": wid})["step"],
                    lambda wid, sid: server.tool("workflow_step_complete",
                                                 {"workflow_id": wid, "step_id": sid, "result": "ok"}),
                    lambda: tree_cpu_s(server.proc.pid))


def in_process_loop(service: Any) -> LoopCall:
    return LoopCall(lambda workflow, n: service.start(workflow, {"n": n}).workflow_id,
                    lambda wid: service.next_step(wid).step,
                    lambda wid, sid: service.step_complete(wid, sid, result="ok").model_dump())


def run(workdir: Path, rounds: int, steps: int, before: Path | None = None) -> dict[str, Any]:
    from aromcp_workflows.app.service import WorkflowService

    project = make_project(workdir / "project")
    home = workdir / "home"
    home.mkdir()
    servers = {"stdio": SyncStdio(our_command(project, workdir / "stdio.sqlite3"),
                                  server_env(home, workdir / "stdio.sqlite3"), project)}
    if before is not None:
        env = {**server_env(home, workdir / "before.sqlite3"), "PYTHONPATH": str(before)}
        servers["stdio before"] = SyncStdio(our_command(project, workdir / "before.sqlite3"), env, project)
    for server in servers.values():
        server.handshake()
    service = WorkflowService(project_dir=project, store_path=workdir / "inproc.sqlite3", home=home)
    loops = {where: stdio_loop(server) for where, server in servers.items()}
    loops["in process"] = in_process_loop(service)
    spawns = spawn_rows(project)
    samples: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        samples.setdefault(key, []).append(value)

    for round_no in range(rounds + 2):  # the first two rounds warm up (V8 compile cache, pages)
        keep = round_no >= 2
        for _ in range(5):
            for label, spawn in spawns.items():
                c0 = cpu_now()
                elapsed = timed(spawn)
                if keep:
                    add(f"a {label}", elapsed)
                    add(f"cpu {label}", cpu_now() - c0)
        for where, loop in loops.items():
            for workflow in WORKFLOWS:
                for n in sorted({0, steps, 20}):
                    elapsed, cpu = loop.time(workflow, n)
                    if keep:
                        add(f"{where} {workflow} n={n}", elapsed)
                        add(f"cpu {where} {workflow} n={n}", cpu)
    for server in servers.values():
        server.close()
    return summarize(samples, steps, list(loops))


def per_step(samples: dict[str, list[float]], where: str, workflow: str, n: int) -> list[float]:
    """Per-iteration cost of each round: (call with n iterations − call with 0) / n."""
    return [(big - zero) / n for big, zero in zip(samples[f"{where} {workflow} n={n}"],
                                                   samples[f"{where} {workflow} n=0"], strict=True)]


def summarize(samples: dict[str, list[float]], steps: int, wheres: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"a spawn floor": {k[2:]: stats(v) for k, v in samples.items() if k.startswith("a ")}}
    bash_cpu = statistics.median(samples["cpu subprocess.run bash -c true"])
    for where in wheres:
        shell = per_step(samples, where, "bench-shell", steps)
        plain = per_step(samples, where, "bench-noshell", steps)
        needs_bash = per_step(samples, where, "bench-shellbash", steps)
        loop20 = per_step(samples, where, "bench-shell", 20)
        out[f"b {where}"] = {
            f"per shell step (N={steps})": stats(shell),
            f"per state_update step, same loop (N={steps})": stats(plain),
            f"per shell step '[[ 1 ]]' (needs bash; N={steps})": stats(needs_bash),
            "shell step minus state_update step": stats([s - p for s, p in zip(shell, plain, strict=True)]),
            "call with 0 steps": stats(samples[f"{where} bench-shell n=0"]),
        }
        out[f"c {where}"] = {
            "20-iteration shell loop, whole call": stats(samples[f"{where} bench-shell n=20"]),
            "20-iteration shell loop, loop part (minus 0-step call)": stats([v * 20 for v in loop20]),
            "20-iteration while (true + increment), loop part": stats(
                [v * 20 for v in per_step(samples, where, "bench-while", 20)]),
        }
    cpu_shell = per_step(samples, "cpu in process", "bench-shell", steps)
    out["cpu (this process + its commands; a load-robust view)"] = {
        "subprocess.run bash -c true": stats(samples["cpu subprocess.run bash -c true"]),
        "shell.runner.run_shell('true')": stats(samples["cpu shell.runner.run_shell('true')"]),
        f"in process: per shell step (N={steps})": stats(cpu_shell),
    }
    bash = out["a spawn floor"]["subprocess.run bash -c true"]["median_ms"]
    out["ratio b/a"] = {where: out[f"b {where}"][f"per shell step (N={steps})"]["median_ms"] / bash
                        for where in wheres}
    out["ratio b/a"]["cpu in process"] = statistics.median(cpu_shell) / bash_cpu
    for where in wheres:
        for label, workflow, n, spawns in (("true step", "bench-shell", steps, steps),
                                           ("needs bash", "bench-shellbash", steps, steps),
                                           ("while", "bench-while", 20, 20)):
            spent = sum(samples[f"cpu {where} {workflow} n={n}"]) - sum(samples[f"cpu {where} {workflow} n=0"])
            rounds = len(samples[f"cpu {where} {workflow} n={n}"])
            out["ratio b/a"][f"cpu {where}, {label}"] = spent / (rounds * spawns) / bash_cpu
    for where in wheres:
        out["ratio b/a"][f"{where}, needs bash"] = (
            out[f"b {where}"][f"per shell step '[[ 1 ]]' (needs bash; N={steps})"]["median_ms"] / bash)
        out["ratio b/a"][f"{where}, while"] = (
            out[f"c {where}"]["20-iteration while (true + increment), loop part"]["median_ms"] / (20 * bash))
    return out


def report(figures: dict[str, Any], rounds: int) -> None:
    wheres = [k[2:] for k in figures if k.startswith("b ")]
    print(f"(medians of {rounds} rounds; p90 in brackets)")
    for section, rows in figures.items():
        if section == "ratio b/a":
            continue
        print(f"\n{section}")
        for label, row in rows.items():
            print(f"  {label:58s} {row['median_ms']:8.3f} ms  [{row['p90_ms']:.3f}]")
    ratios = figures["ratio b/a"]
    print("\nratios to subprocess.run(bash -c true), this run:")
    print(f"  {'':22s} {'true step (<=1.2)':>18s} {'[[ 1 ]] (<=1.3)':>16s} {'20-it. while (<=1.3)':>21s}")
    for where in wheres:
        print(f"  {where:22s} {ratios[where]:18.2f} {ratios[f'{where}, needs bash']:16.2f} "
              f"{ratios[f'{where}, while']:21.2f}")
    print("CPU ratios (server and its commands ÷ this process and its child for the bare spawn; summed over "
          "the rounds, robust to load):")
    for where in wheres:
        print(f"  {where:22s} {ratios[f'cpu {where}, true step']:18.2f} {ratios[f'cpu {where}, needs bash']:16.2f} "
              f"{ratios[f'cpu {where}, while']:21.2f}")


CLASSIFIED = ["true", "echo \"$HOME\"", "ls -l | wc -l >/dev/null 2>&1", "[[ 1 ]]"]


def classifier_cost(project: Path) -> dict[str, float]:
    """Microseconds per `runs_same_under_sh` call (warm caches), best of 5 runs of 20000 calls."""
    import timeit

    from aromcp_workflows.shell.dialect import runs_same_under_sh

    def one(command: str) -> float:
        calls = timeit.repeat(lambda: runs_same_under_sh(command, os.environ, project), number=20000, repeat=5)
        return min(calls) / 20000 * 1e6

    return {command: one(command) for command in CLASSIFIED}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20, help="measured rounds (after 2 warm-up rounds)")
    parser.add_argument("--steps", type=int, default=50, help="N: shell steps in the measured loop")
    parser.add_argument("--dir", help="where the stores are created (default: a temp dir under cwd)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON at the end")
    parser.add_argument("--before", help="another checkout's package directory, measured over stdio beside this one")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-shell-", dir=args.dir or ".")).resolve()
    info = machine()
    print("machine:", ", ".join(f"{k}={v}" for k, v in info.items()))
    try:
        figures = run(workdir, args.rounds, args.steps, Path(args.before).resolve() if args.before else None)
        cost = classifier_cost(workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report(figures, args.rounds)
    print("\nd classifier, µs per call (warm): " + ", ".join(f"{c!r} {us:.2f}" for c, us in cost.items()))
    if args.json:
        print(json.dumps({"machine": info, **figures}, indent=2))


if __name__ == "__main__":
    main()
