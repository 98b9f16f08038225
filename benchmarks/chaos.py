"""The fault campaign: many concurrent instances of every workflow, faults at random moments,
then a checker that reads the histories and holds them to what the server promises.

Run: ``.venv/bin/python benchmarks/chaos.py [--seed N] [--faults N] [--rounds R] [--setups sqlite,replicas]``

Each round starts a setup fresh and keeps `--concurrency` instances running (every shipped
workflow and the stress workflows of `chaoslib/workload.py`, in turn) while it injects
`--faults` faults at random moments, then lets the running instances finish (`--drain`
seconds at most), stops the servers and checks (`chaoslib/checker.py`) against a
fault-free run of the same plans (`chaoslib/reference.py`).

Setups and faults (`chaoslib/setups.py`):

- ``sqlite``: one server over stdio on SQLite — SIGKILL of the server (the client starts
  another and sends its lost calls again), a full filesystem under the store (a 256 MB
  tmpfs filled to the last byte for 0.5-2.5 s; needs root to mount).
- ``replicas``: two HTTP replicas on one PostgreSQL 15, each on a host of its own (a pid
  namespace) — SIGKILL of a replica, SIGSTOP then SIGCONT 1-4 s later, `pg_ctl restart -m
  immediate`, and the death of a replica's host (every process of it, commands included).

The schedule of a round (when, what, which replica) follows from its seed, so a failure is
rerun with the command printed for it; the servers' own timing is not the harness's to
fix, so a rerun meets the same faults at about the same moments, not the same
interleaving.  Exit status 1 when any anomaly was found.  ``--json FILE`` writes every
round's figures and anomalies.
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import json
import random
import secrets
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def _server_tree(argv: list[str]) -> Path | None:
    """`--server-tree DIR`, read before the package is imported: the reference run and the
    checker's reads then use the servers' own code, and editing this checkout while a campaign
    runs cannot mix two versions of the package in the harness."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--server-tree")
    tree = pre.parse_known_args(argv)[0].server_tree
    return Path(tree).resolve() if tree else None


if (_TREE := _server_tree(sys.argv[1:])) is not None:
    sys.path.insert(0, str(_TREE))

from chaoslib.agent import Agent, CallLog, Outcome  # noqa: E402
from chaoslib.checker import Findings, Side, check  # noqa: E402
from chaoslib.reference import Reference  # noqa: E402
from chaoslib.setups import SERVER_TREE, FaultLog, ReplicaSetup, SqliteSetup  # noqa: E402
from chaoslib.workload import Answers, Plan, plans  # noqa: E402

SETUPS = ("sqlite", "replicas")


@dataclass
class Round:
    setup: str
    seed: int
    faults: dict[str, int] = field(default_factory=dict)
    findings: Findings = field(default_factory=Findings)
    calls: int = 0
    lost: int = 0
    resent: int = 0
    impatient: int = 0  # instances whose client gave up on calls (`--impatient`)
    gave_up: int = 0  # calls those clients gave up on (each sent again)
    seconds: float = 0.0
    disk: str = ""
    hosts_apart: bool = False
    phases: dict[str, float] = field(default_factory=dict)  # seconds: start, faults, drain, reference, check

    def lap(self, phase: str, since: float) -> float:
        now = time.monotonic()
        self.phases[phase] = round(now - since, 1)
        return now

    def rerun(self, args: argparse.Namespace) -> str:
        tree = f" --server-tree {args.server_tree}" if args.server_tree else ""
        return (f".venv/bin/python benchmarks/chaos.py --setups {self.setup} --seed {self.seed} --rounds 1 "
                f"--faults {args.faults} --concurrency {args.concurrency} --gap {args.gap}{tree}")


def _dump_tasks() -> None:
    """`kill -USR2 <pid>`: where every task of the campaign waits (for a round that hangs)."""
    for task in asyncio.all_tasks():
        task.print_stack(limit=6, file=sys.stderr)


async def run_round(setup_name: str, seed: int, args: argparse.Namespace, workdir: Path) -> Round:
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR2, _dump_tasks)
    this = asyncio.current_task()
    assert this is not None
    loop.add_signal_handler(signal.SIGTERM, this.cancel)  # stopped from outside: clean up on the way out
    rng = random.Random(seed)  # the fault schedule: when, which kind, which replica, how long
    root = workdir / f"{setup_name}-{seed}"
    started = time.monotonic()
    setup: Any
    if setup_name == "sqlite":
        setup = SqliteSetup(root / "chaos")
    else:  # the balancer draws from a generator of its own: the schedule must not depend on the calls
        setup = ReplicaSetup(root / "chaos", None if args.no_auth else secrets.token_hex(16),
                             random.Random(seed * 7919 + 1))
    result = Round(setup_name, seed, disk=getattr(setup, "disk", ""), hosts_apart=getattr(setup, "hosts_apart", False))
    answers, log, faults = Answers(), CallLog(), FaultLog()
    try:
        await setup.start()
        result.lap("start", started)
        outcomes, used = await _drive(setup, rng, args, answers, log, faults, seed, setup_name, result)
    except BaseException:  # stopped or broken: leave no server, cluster, mount or namespace behind
        try:
            await asyncio.shield(setup.close())
        finally:
            setup.cleanup()
        raise
    await setup.close()
    try:
        lap = time.monotonic()
        reference = Reference(root / "reference")
        ref_outcomes = await reference.run(used, answers)
        lap = result.lap("reference", lap)
        result.findings = check(used, Side(setup.store_location, setup.project, outcomes),
                                Side(str(reference.store), reference.project, ref_outcomes), log,
                                setup.dead_hosts, expect_refusals=setup_name == "sqlite")
        result.lap("check", lap)
    finally:
        setup.cleanup()
        if result.findings.anomalies:
            (root / "anomalies.json").write_text(json.dumps({"anomalies": result.findings.anomalies,
                                                             "faults": faults.events}, indent=2))
            print(f"    kept for a look: {root}", flush=True)
        elif not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    result.faults, result.calls, result.lost, result.resent = faults.count(), log.calls, log.lost, log.resent
    result.gave_up = log.gave_up
    result.seconds = round(time.monotonic() - started, 1)
    return result


async def _drive(setup: Any, rng: random.Random, args: argparse.Namespace, answers: Answers, log: CallLog,
                 faults: FaultLog, seed: int, prefix: str, result: Round) -> tuple[dict[str, Outcome], list[Plan]]:
    """Keep `concurrency` instances running while the faults are injected, then drain."""
    pool = iter(plans(seed, 100_000, prefix))
    used: list[Plan] = []
    agents: dict[asyncio.Task[Outcome], Agent] = {}
    outcomes: dict[str, Outcome] = {}
    injecting = asyncio.create_task(_inject(setup, rng, args, faults))

    def more() -> None:
        plan = next(pool)
        used.append(plan)
        patient = not impatient(plan.key, args.impatient)
        result.impatient += not patient
        agent = Agent(setup.transport, plan, answers, log, float("inf"), use_key=not args.no_keys,
                      patience=None if patient else PATIENCE_S)
        agents[asyncio.create_task(agent.run())] = agent

    try:
        return await _keep_going(agents, injecting, more, outcomes, args, prefix, result), used
    except BaseException:  # stopped from outside: the agents give up instead of resending forever
        for agent in agents.values():
            agent.deadline = 0.0
        for task in [*agents, injecting]:
            task.cancel()
        raise


PATIENCE_S = 0.15  # an impatient client's read timeout: shorter than many of the workload's commands


def impatient(key: str, share: float) -> bool:
    """Whether the plan's client gives up on calls (drawn from its key: the same in a rerun)."""
    import hashlib

    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF < share


async def _keep_going(agents: dict[asyncio.Task[Outcome], Agent], injecting: asyncio.Task[None],
                      more: Callable[[], None], outcomes: dict[str, Outcome], args: argparse.Namespace, prefix: str,
                      result: Round) -> dict[str, Outcome]:
    """Start instances as others finish while the faults go on, then give the last ones
    until the drain deadline; every instance's outcome by its plan's key."""
    driving = time.monotonic()
    for _ in range(args.concurrency):
        more()
    while not injecting.done():
        done, _ = await asyncio.wait(list(agents) + [injecting], return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is injecting:
                continue
            outcome = task.result()
            outcomes[agents.pop(task).plan.key] = outcome
            if outcome.problem:
                print(f"  [{prefix}] {outcome.key}: {outcome.problem[:300]}", file=sys.stderr, flush=True)
            if not injecting.done():
                more()
    injecting.result()
    lap = result.lap("faults", driving)
    drain_until = time.monotonic() + args.drain
    for agent in agents.values():
        agent.deadline = drain_until
    for task, agent in list(agents.items()):
        outcomes[agent.plan.key] = await task
    result.lap("drain", lap)
    return outcomes


async def _inject(setup: Any, rng: random.Random, args: argparse.Namespace, faults: FaultLog) -> None:
    low, high = (float(x) for x in args.gap.split(","))
    kinds = list(setup.kinds)
    weights = [setup.kinds[k] for k in kinds]
    await asyncio.sleep(rng.uniform(low, high) + 1.0)  # let the first instances get going
    while len(faults.events) < args.faults:
        await setup.inject(rng.choices(kinds, weights)[0], rng, faults)
        await asyncio.sleep(rng.uniform(low, high))


# -- the report --------------------------------------------------------------------------------
def totals(rounds: list[Round]) -> dict[str, Any]:
    faults: dict[str, int] = {}
    for r in rounds:
        for kind, n in r.faults.items():
            faults[f"{r.setup}:{kind}"] = faults.get(f"{r.setup}:{kind}", 0) + n
    anomalies: dict[str, int] = {}
    for r in rounds:
        for kind, n in r.findings.counts().items():
            anomalies[kind] = anomalies.get(kind, 0) + n
    sums = {name: sum(getattr(r.findings, name) for r in rounds)
            for name in ("instances", "steps", "acks_checked", "effects_checked", "store_refusals",
                         "reruns_after_host_death", "adopted_before_claim")}
    return {"rounds": len(rounds), "faults": faults, "faults_total": sum(faults.values()), **sums,
            "calls": sum(r.calls for r in rounds), "lost_answers": sum(r.lost for r in rounds),
            "resent": sum(r.resent for r in rounds), "anomalies": anomalies,
            "impatient_instances": sum(r.impatient for r in rounds),
            "calls_given_up": sum(r.gave_up for r in rounds),
            "host_deaths": sum(r.faults.get("host_death", 0) for r in rounds),
            "seconds": round(sum(r.seconds for r in rounds), 1)}


def print_report(rounds: list[Round], args: argparse.Namespace) -> None:
    for r in rounds:
        f = r.findings
        verdict = "ok" if not f.anomalies else f"{len(f.anomalies)} ANOMALIES"
        print(f"[{r.setup} seed {r.seed}] {r.seconds:.0f} s, faults {r.faults}, {f.instances} instances, "
              f"{f.steps} steps, {f.acks_checked} acknowledged answers checked, {r.lost} answers lost "
              f"({r.resent} resends), {r.impatient} impatient clients gave up on {r.gave_up} calls, "
              f"{f.store_refusals} store refusals, {f.reruns_after_host_death} reruns after "
              f"{r.faults.get('host_death', 0)} host deaths: {verdict}; phases {r.phases}", flush=True)
        for kind, key, detail in f.anomalies[:20]:
            print(f"    {kind} {key}: {detail[:400]}")
        if f.anomalies:
            print(f"    rerun: {r.rerun(args)}")
    t = totals(rounds)
    print(f"\ntotal: {t['rounds']} rounds, {t['faults_total']} faults {t['faults']}, {t['instances']} instances, "
          f"{t['steps']} steps, {t['acks_checked']} acknowledged answers checked, {t['effects_checked']} commands "
          f"checked ({t['adopted_before_claim']} taken from a server killed before their claim was committed), "
          f"anomalies {t['anomalies'] or 'none'} ({t['seconds']} s)")


def markdown(reports: list[dict[str, Any]]) -> str:
    """The results table of docs/reliability.md, from the `--json` reports of a campaign (one, or one
    per setup when the setups ran as processes of their own)."""
    by_setup: dict[str, dict[str, Any]] = {}
    for r in [r for report in reports for r in report["rounds"]]:
        row = by_setup.setdefault(r["setup"], {"rounds": 0, "faults": {}, "instances": 0, "steps": 0, "acks": 0,
                                               "commands": 0, "lost": 0, "resent": 0, "refusals": 0, "reruns": 0,
                                               "anomalies": 0, "seconds": 0.0})
        f = r["findings"]
        row["rounds"] += 1
        for kind, n in r["faults"].items():
            row["faults"][kind] = row["faults"].get(kind, 0) + n
        for key, name in (("instances", "instances"), ("steps", "steps"), ("acks", "acks_checked"),
                          ("commands", "effects_checked"), ("refusals", "store_refusals"),
                          ("reruns", "reruns_after_host_death")):
            row[key] += f[name]
        row["lost"] += r["lost"]
        row["resent"] += r["resent"]
        row["anomalies"] += len(f["anomalies"])
        row["seconds"] += r["seconds"]
    lines = ["| | " + " | ".join(by_setup) + " | total |", "|---|" + "---|" * (len(by_setup) + 1)]

    def add(label: str, values: list[str], total: str) -> None:
        lines.append(f"| {label} | " + " | ".join(values) + f" | {total} |")

    rows = list(by_setup.values())
    kinds = sorted({kind for row in rows for kind in row["faults"]})
    add("rounds", [str(r["rounds"]) for r in rows], str(sum(r["rounds"] for r in rows)))
    for kind in kinds:
        add(f"faults: `{kind}`", [f"{r['faults'].get(kind, 0):,}" if kind in r["faults"] else "—" for r in rows],
            f"{sum(r['faults'].get(kind, 0) for r in rows):,}")
    add("faults in all", [f"{sum(r['faults'].values()):,}" for r in rows],
        f"{sum(sum(r['faults'].values()) for r in rows):,}")
    for label, key in (("instances", "instances"), ("steps completed", "steps"),
                       ("acknowledged answers checked", "acks"), ("command runs checked", "commands"),
                       ("answers lost with a fault (then sent again)", "lost"), ("calls sent again", "resent"),
                       ("store refusals while the disk was full (nothing kept)", "refusals"),
                       ("reruns after a host death", "reruns"), ("anomalies", "anomalies")):
        add(label, [f"{r[key]:,}" for r in rows], f"{sum(r[key] for r in rows):,}")
    add("time (the rounds' own)", [f"{r['seconds'] / 60:.0f} min" for r in rows],
        f"{sum(r['seconds'] for r in rows) / 60:.0f} min")
    return "\n".join(lines) + "\n"


def main() -> int:
    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 <pid>`: where every thread of the harness stands
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 2)[2])
    parser.add_argument("--seed", type=int, default=1, help="seed of the first round (round n: seed + n)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds per setup")
    parser.add_argument("--faults", type=int, default=20, help="faults per round")
    parser.add_argument("--setups", default=",".join(SETUPS), help="sqlite, replicas, or both")
    parser.add_argument("--concurrency", type=int, default=12, help="instances running at once")
    parser.add_argument("--gap", default="0.3,1.5", help="seconds between faults: MIN,MAX")
    parser.add_argument("--drain", type=float, default=90.0, help="seconds the last instances get to finish")
    parser.add_argument("--no-keys", action="store_true", help="start without idempotency keys (shows why they exist)")
    parser.add_argument("--impatient", type=float, default=0.25,
                        help="share of the instances whose client gives up on a call after 0.15 s (a read timeout: "
                             "notifications/cancelled over stdio, a closed request over HTTP) and sends it again")
    parser.add_argument("--no-auth", action="store_true", help="no bearer token for the HTTP replicas")
    parser.add_argument("--server-tree", metavar="DIR", help="run the servers, the fault-free reference and the "
                        "checker's reads on the package of another checkout (an earlier commit, to see what the "
                        "campaign finds there; or a frozen copy, so that editing this one cannot disturb a run)")
    parser.add_argument("--dir", help="where rounds run (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep each round's directory")
    parser.add_argument("--json", metavar="FILE", help="write the figures and anomalies as JSON")
    parser.add_argument("--markdown", metavar="JSON", nargs="+",
                        help="only print the results table of --json reports (several: one table)")
    args = parser.parse_args()
    if args.markdown:
        print(markdown([json.loads(Path(name).read_text()) for name in args.markdown]), end="")
        return 0
    if _TREE is not None:
        SERVER_TREE[0] = _TREE
    workdir = Path(args.dir or tempfile.mkdtemp(prefix="aromcp-chaos-")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    rounds: list[Round] = []
    for n in range(args.rounds):
        for name in args.setups.split(","):
            rounds.append(asyncio.run(run_round(name, args.seed + n, args, workdir)))
            print_report(rounds[-1:], args)
    print_report(rounds, args)
    if args.json:
        Path(args.json).write_text(json.dumps({"totals": totals(rounds), "rounds": [
            {"setup": r.setup, "seed": r.seed, "seconds": r.seconds, "faults": r.faults, "disk": r.disk,
             "hosts_apart": r.hosts_apart, "phases": r.phases, "calls": r.calls, "lost": r.lost, "resent": r.resent,
             "findings": {**{k: v for k, v in vars(r.findings).items() if k != "anomalies"},
                          "anomalies": r.findings.anomalies},
             "rerun": r.rerun(args)} for r in rounds]}, indent=2))
    if not args.dir and not args.keep and not any(r.findings.anomalies for r in rounds):
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if any(r.findings.anomalies for r in rounds) else 0


if __name__ == "__main__":
    sys.exit(main())
