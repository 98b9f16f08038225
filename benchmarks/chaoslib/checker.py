"""Reading the histories after a campaign: every promise, checked against the fault-free run.

Anomalies (each is a failure of the server, with the instance it concerns):

- `lost_ack`: an acknowledged answer whose effect is not in the history (a completed step
  with no `step_completed`, a handed-out step with no `step_delivered`, a start with no
  instance);
- `lost_instance` / `duplicate_instance`: a start key with no instance, or an instance no
  start key accounts for (a resent start that made a second one);
- `final_state`: the final state or status differs from the fault-free run's;
- `two_outstanding`: one thread with two steps handed out and not completed at once, or a
  step handed out again after it was completed (a step given to two agents);
- `wrong_resume`: the steps a thread completed, in order, differ from the fault-free
  run's (a resume that landed on another loop iteration or parallel item);
- `ran_twice`: a command that ran more often than in the fault-free run, except a run cut
  short on a host that died (then counted in `reruns_after_host_death`);
- `tool_error`: a tool error a client saw where none may be (any but the store's own
  "disk full" refusals on SQLite, which take no effect and are counted apart);
- `unfinished`: an instance that did not finish by the end of the drain.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaoslib.agent import CallLog, Outcome
from chaoslib.workload import EFFECTS, Plan

UNORDERED = {"chaos:fanout": ("shared", "effects")}  # appended by concurrent tasks: order is timing
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?")
_WORKFLOW_ID = re.compile(r"wf_[0-9a-f]{12}")
STEP_EVENTS = ("step_delivered", "step_started", "step_completed")


BEFORE_CLAIM = "before the command's claim was committed"  # app/driver.py's ADOPTED_BY_NAME says it


@dataclass
class Findings:
    anomalies: list[tuple[str, str, str]] = field(default_factory=list)  # (kind, key, detail)
    acks_checked: int = 0
    instances: int = 0
    steps: int = 0
    store_refusals: int = 0  # "disk full" tool errors on SQLite: refused, nothing taken
    reruns_after_host_death: int = 0
    effects_checked: int = 0
    adopted_before_claim: int = 0  # commands a killed server started before their claim was committed

    def add(self, kind: str, key: str, detail: str) -> None:
        self.anomalies.append((kind, key, detail[:4000]))

    def counts(self) -> dict[str, int]:
        return dict(Counter(kind for kind, _, _ in self.anomalies))


@dataclass
class Side:
    """One run's view: its store, project and agent outcomes."""

    store: str
    project: Path
    outcomes: dict[str, Outcome]


@dataclass
class InstanceView:
    workflow_id: str
    status: str
    state: Any
    history: list[Any]


def read_side(side: Side, plans: list[Plan]) -> tuple[dict[str, InstanceView], list[str]]:
    """Each plan's instance (by its start key) and every instance id of the project."""
    from aromcp_workflows.app.service import WorkflowService
    from aromcp_workflows.store import open_store

    store = open_store(side.store)
    service = WorkflowService(project_dir=side.project, store_path=side.store, home=side.project.parent / "home")
    views: dict[str, InstanceView] = {}
    try:
        for plan in plans:
            found = store.started_by(str(side.project), plan.key)
            outcome = side.outcomes.get(plan.key)
            workflow_id = found[0] if found else (outcome.workflow_id if outcome else "")  # started without a key
            if not workflow_id:
                continue
            record = store.load(workflow_id)
            state = service.state_read(workflow_id).state
            views[plan.key] = InstanceView(workflow_id, record.status, state, store.history(workflow_id))
        every = [s.workflow_id for s in store.list_instances(project_dir=str(side.project))]
    finally:
        store.close()
        service.instances.store.close()
    return views, every


def normalized(workflow: str, state: Any) -> str:
    """The state as compared: times and instance ids blanked, lists filled by concurrent
    tasks sorted, keys sorted."""
    state = json.loads(_WORKFLOW_ID.sub("<wf>", _TIME.sub("<time>", json.dumps(state))))
    for key in UNORDERED.get(workflow, ()):
        if isinstance(state, dict) and isinstance(state.get(key), list):
            state[key] = sorted(state[key], key=json.dumps)
    return json.dumps(state, sort_keys=True)


def differences(got: Any, want: Any, path: str = "", found: list[str] | None = None) -> list[str]:
    """Where two JSON values differ: `path: got != want`, the first few."""
    found = [] if found is None else found
    if len(found) >= 5:
        return found
    if isinstance(got, dict) and isinstance(want, dict):
        for key in sorted(set(got) | set(want)):
            differences(got.get(key, "<missing>"), want.get(key, "<missing>"), f"{path}.{key}", found)
    elif isinstance(got, list) and isinstance(want, list) and len(got) == len(want):
        for n, (a, b) in enumerate(zip(got, want, strict=True)):
            differences(a, b, f"{path}[{n}]", found)
    elif got != want:
        found.append(f"{path or '.'}: {json.dumps(got)[:200]} != {json.dumps(want)[:200]}")
    return found


def thread_of(event: Any) -> str:
    return event.task_id or "main"


def completed_sequences(history: list[Any]) -> dict[str, list[str]]:
    """Per thread, the steps completed, in order."""
    found: dict[str, list[str]] = {}
    for event in history:
        if event.kind == "step_completed" and event.step_id:
            found.setdefault(thread_of(event), []).append(event.step_id)
    return found


def check_outstanding(key: str, history: list[Any], findings: Findings) -> None:
    """No thread holds two handed-out steps at once; no step is handed out after it was completed."""
    open_step: dict[str, str | None] = {}
    done: dict[str, set[str]] = {}
    for event in history:
        if event.kind not in STEP_EVENTS or not event.step_id:
            continue
        thread, step = thread_of(event), event.step_id
        if event.kind == "step_started" and (event.data or {}).get("attempt", 0) > 0:
            continue  # a shell step's retry after its failed attempt: the same step again, on purpose
        if event.kind in ("step_delivered", "step_started"):
            current = open_step.get(thread)
            if current is not None and current != step:
                findings.add("two_outstanding", key, f"thread {thread}: {step} handed out while {current} was open")
            if step in done.get(thread, set()):
                findings.add("two_outstanding", key, f"thread {thread}: {step} handed out again after it completed")
            open_step[thread] = step
        else:
            done.setdefault(thread, set()).add(step)
            if open_step.get(thread) == step:
                open_step[thread] = None


def check_acks(log: CallLog, views: dict[str, InstanceView], findings: Findings) -> None:
    for ack in log.acks:
        findings.acks_checked += 1
        view = views.get(ack.key)
        if view is None:
            findings.add("lost_ack", ack.key, f"{ack.tool} was answered, but the store holds no instance for it")
            continue
        events = [e for e in view.history if thread_of(e) == ack.thread]
        if ack.tool == "workflow_step_complete" and ack.success and not any(
                e.kind == "step_completed" and e.step_id == ack.step_id for e in events):
            findings.add("lost_ack", ack.key, f"step {ack.step_id} ({ack.thread}) acknowledged as completed, "
                                                  "no step_completed in the history")
        handed = ack.next_step
        if handed and ack.next_type != "wait" and not any(
                e.kind in ("step_delivered",) and e.step_id == handed for e in view.history):
            findings.add("lost_ack", ack.key, f"step {handed} ({ack.thread}) handed out by {ack.tool}, "
                                              "no step_delivered in the history")


@dataclass
class Run:
    """One run of a command, as its side-effect lines tell: the host it ran on, whether it ended."""

    host: str
    ended: bool


def effect_runs(project: Path, key: str) -> dict[str, list[Run]]:
    """Per label, the runs of a key's commands in order (a `start` line opens one, an `end` line
    from the same host closes it); `<retry>` holds the runs of the retried test command."""
    found: dict[str, list[Run]] = {}
    log = project / EFFECTS / f"{key}.log"
    for line in log.read_text().splitlines() if log.exists() else []:
        mark, label, host = (line.split(" ") + ["", ""])[:3]
        runs = found.setdefault(label, [])
        if mark == "start":
            runs.append(Run(host, False))
        else:
            opened = [run for run in runs if run.host == host and not run.ended]
            if opened:
                opened[-1].ended = True
    retry = project / EFFECTS / f"{key}.retry"
    if retry.exists():
        found["<retry>"] = [Run(line.partition(" ")[2], True) for line in retry.read_text().splitlines()]
    return found


def check_effects(key: str, chaos: Path, reference: Path, dead_hosts: set[str], findings: Findings) -> bool:
    """A command runs as often as in the fault-free run, and every run ends.  Only a run on a
    host that died (a run cut short, or whose result died with its host before it was
    stored) may be followed by another, after the lease: those are counted as reruns after
    a host death.  True when there was such a rerun — or, for the retried test command of
    `ci:retry-tests` (which counts its own runs, so a rerun moves where it passes and its
    count alone cannot tell), when one of its runs was on a host that died."""
    got, want = effect_runs(chaos, key), effect_runs(reference, key)
    rerun = any(run.host in dead_hosts for run in got.get("<retry>", []))
    for label in sorted(set(got) | set(want)):
        findings.effects_checked += 1
        runs, expected = got.get(label, []), len(want.get(label, []))
        earlier, last = runs[:max(0, len(runs) - expected)], runs[max(0, len(runs) - expected):]
        unexplained = [run for run in earlier if run.host not in dead_hosts]
        cut = [run for run in last if not run.ended and run.host not in dead_hosts]
        if unexplained or cut or len(last) < expected:
            findings.add("ran_twice", key, f"command {label} ran {len(runs)} times ({expected} without faults): "
                                           + ", ".join(f"on {r.host or '?'} {'to its end' if r.ended else 'cut short'}"
                                                       for r in runs) + f"; hosts that died: {sorted(dead_hosts)}")
        elif earlier:
            findings.reruns_after_host_death += len(earlier)
            rerun = True
    return rerun


def check(plans: list[Plan], chaos: Side, reference: Side, log: CallLog, dead_hosts: set[str],
          expect_refusals: bool) -> Findings:
    findings = Findings()
    views, every = read_side(chaos, plans)
    ref_views, _ = read_side(reference, plans)
    findings.instances = len(every)
    accounted = {view.workflow_id for view in views.values()}
    for stray in sorted(set(every) - accounted):
        findings.add("duplicate_instance", stray, "an instance no start key accounts for (a start made twice)")
    for plan in plans:
        _check_plan(plan, chaos, reference, views, ref_views, dead_hosts, findings)
    check_acks(log, views, findings)
    for key, tool, text in log.errors:
        refusal = expect_refusals and ("disk" in text.lower() or "full" in text.lower())
        if refusal:
            findings.store_refusals += 1
        else:
            findings.add("tool_error", key, f"{tool}: {text}")
    return findings


def _check_plan(plan: Plan, chaos: Side, reference: Side, views: dict[str, InstanceView],
                ref_views: dict[str, InstanceView], dead_hosts: set[str], findings: Findings) -> None:
    key, outcome = plan.key, chaos.outcomes.get(plan.key)
    if outcome is None:
        return  # never started by the campaign
    view, ref = views.get(key), ref_views.get(key)
    if outcome.problem:
        findings.add("unfinished", key, outcome.problem)
    if view is None:
        if outcome.workflow_id:
            findings.add("lost_instance", key, f"started as {outcome.workflow_id}, no instance under its key")
        return
    if outcome.workflow_id and outcome.workflow_id != view.workflow_id:
        findings.add("duplicate_instance", key, f"the agent drove {outcome.workflow_id}, the key names "
                                                f"{view.workflow_id}")
    findings.steps += sum(1 for e in view.history if e.kind == "step_completed")
    findings.adopted_before_claim += sum(1 for e in view.history if e.kind == "shell_adopted" and BEFORE_CLAIM
                                         in (e.data or {}).get("reason", ""))
    check_outstanding(key, view.history, findings)
    if ref is None or outcome.problem:
        return
    before = len(findings.anomalies)
    rerun = check_effects(key, chaos.project, reference.project, dead_hosts, findings)
    if len(findings.anomalies) > before:  # say what the history knows of the commands
        findings.add("ran_twice", key, "its commands in the history: " + "; ".join(
            f"{e.seq} {e.timestamp[11:23]} {e.kind} {e.step_id} {e.task_id or ''} {json.dumps(e.data)[:160]}"
            for e in view.history if e.kind in ("step_started", "shell_released", "shell_adopted")
            or (e.kind == "step_completed" and (e.data or {}).get("type") == "shell_command")))
    got_state, want_state = normalized(plan.workflow, view.state), normalized(plan.workflow, ref.state)
    got, want = completed_sequences(view.history), completed_sequences(ref.history)
    same = view.status == ref.status and got_state == want_state and got == want
    if not same and rerun and plan.workflow == "ci:retry-tests":
        findings.reruns_after_host_death += 1  # its test command counts its own runs: a rerun moves where it stops
        return
    if view.status != ref.status or got_state != want_state:
        diff = differences(json.loads(got_state), json.loads(want_state))
        findings.add("final_state", key, f"status {view.status} (fault-free: {ref.status}){why_failed(view)}; "
                                         "state differs at " + "; ".join(diff))
    if got != want:
        wrong = sorted(t for t in set(got) | set(want) if got.get(t) != want.get(t))
        thread = wrong[0]
        findings.add("wrong_resume", key, f"thread {thread}: completed {got.get(thread)} vs {want.get(thread)}")


def why_failed(view: InstanceView) -> str:
    """What the history says made an instance fail (its last event of a failure), to read in the report."""
    if view.status != "failed":
        return ""
    failures = [e for e in view.history if "fail" in e.kind or (e.data or {}).get("error")]
    if not failures:
        return ", no failure in its history"
    last = failures[-1]
    return f", failed at {last.step_id}: {last.kind} {json.dumps(last.data)[:300]}"
