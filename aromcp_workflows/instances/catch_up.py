"""Bringing a live instance up to date from the deltas another server process committed.

With replicas behind a load balancer, a call often lands on a process whose copy of the
instance is a commit or two behind (another replica served the previous call).
Reloading the whole instance made such a call cost what the instance holds.  Instead the
process reads the deltas committed since its version (`Store.deltas_since`) and applies
them to its live run — the same operations the store applies to a snapshot on load,
read back into the run's own objects.  When that cannot be done (a full snapshot was
written since, or anything about the deltas is unexpected) the caller reloads instead.
"""

from __future__ import annotations

import json
from typing import Any

from aromcp_workflows.definition import computed_specs
from aromcp_workflows.expressions import MISSING
from aromcp_workflows.instances.commits import LOOP_ITEMS, thread_for_run
from aromcp_workflows.interpreter import Thread, WorkflowRun
from aromcp_workflows.state import StateTiers

SECTIONS = ("state_workflows", "groups", "status", "error", "counters", "retries", "owners",  # run attributes
            "last_calls", "trace_context")


class CannotCatchUp(Exception):
    """A delta this process cannot apply to its live run: reload the instance instead."""


def apply_to_run(run: WorkflowRun, items: dict[str, Any], texts: list[str]) -> None:
    """Apply committed deltas to the live `run` (what `store.base.apply_deltas` does to a
    stored record, done to the run's own objects); `items` (the loop items the process holds) is
    updated too.  Loop items and sections go first: a new thread's loops and a new
    state's definition may refer to them."""
    ops = [op for text in texts for op in json.loads(text)]
    state_ops = [op for op in ops if op[1] == "state"]
    for op in state_ops:
        if op[2][0] == LOOP_ITEMS:
            _put(items, op[2][1], op)
    for op in state_ops:
        if op[2][0] in SECTIONS:
            _section(run, op)
    for op in state_ops:
        if op[2][0] == "states":
            _state(run, op)
        elif op[2][0] not in SECTIONS and op[2][0] != LOOP_ITEMS:
            raise CannotCatchUp(f"unexpected state path {op[2]!r}")
    for op in ops:
        if op[1] == "threads":
            _thread(run, items, op)


def _put(target: dict[str, Any], key: str, op: list[Any]) -> None:
    if op[0] == "s":
        target[key] = op[3]
    elif op[0] == "d":
        target.pop(key, None)
    else:
        raise CannotCatchUp(f"unexpected loop items operation {op[:3]!r}")


def _section(run: WorkflowRun, op: list[Any]) -> None:
    if op[0] != "s" or len(op[2]) != 1:
        raise CannotCatchUp(f"unexpected section operation {op[:3]!r}")
    setattr(run.machine, op[2][0], op[3])


def _state(run: WorkflowRun, op: list[Any]) -> None:
    """A whole state (new include or task) or one top-level value of one tier."""
    path = op[2]
    if len(path) == 2:
        if op[0] not in ("s", "d"):
            raise CannotCatchUp(f"unexpected state operation {op[:3]!r}")
        key = path[1]
        if op[0] == "d":
            run.states.pop(key, None)
            return
        definition = run.bundle.get(run.machine.state_workflows[key])
        run.states[key] = StateTiers.from_snapshot(run.machine.engine, computed_specs(definition), op[3])
        return
    if len(path) != 4 or path[1] not in run.states:
        raise CannotCatchUp(f"unexpected state path {path!r}")
    store = run.states[path[1]]
    if op[0] == "a":
        store.restore_value(path[2], path[3], _appended(store, path, op[3], op[4]))
    else:
        store.restore_value(path[2], path[3], op[3] if op[0] == "s" else MISSING)


def _appended(store: StateTiers, path: list[str], kept: int, items: list[Any]) -> list[Any]:
    """The list at `path` with `items` appended: a new list (the old one may be shared)."""
    tiers = {"raw": store.raw, "state": store.state}
    current = tiers[path[2]].get(path[3]) if path[2] in tiers else None
    if not isinstance(current, list) or len(current) != kept:
        raise CannotCatchUp(f"append to {path!r} after {kept} items does not fit this copy")
    return [*current, *items]


def _thread(run: WorkflowRun, items: dict[str, Any], op: list[Any]) -> None:
    tid = op[2][0]
    if op[0] not in ("s", "d"):
        raise CannotCatchUp(f"unexpected thread operation {op[:3]!r}")
    if op[0] == "d":
        run.threads.pop(tid, None)
        return
    try:
        run.threads[tid] = Thread.from_json(thread_for_run(op[3], items))
    except KeyError as exc:
        raise CannotCatchUp(f"thread {tid}: loop items {exc} are not known here") from None
