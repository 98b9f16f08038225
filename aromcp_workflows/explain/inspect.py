"""Reading an instance's history: transform traces and debug info.

Both are built from the append-only history the store keeps (not from counters kept
on the side), so they tell the same story after a restart as before it.  Every value
passes through the masker on its way out.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from aromcp_workflows.safety import Masker, secret_values

if TYPE_CHECKING:
    from aromcp_workflows.definition import WorkflowBundle
    from aromcp_workflows.interpreter import WorkflowRun
    from aromcp_workflows.store import HistoryEvent


def transform_traces(events: Iterable[HistoryEvent], field: str | None, include_timing: bool,
                     masker: Masker) -> list[dict[str, Any]]:
    """The MCP tool `workflow_trace_transformations` (README, "MCP interface"), oldest first.

    A computed field that is secret whole (named like one, `auth_token`; declared; or fed by
    a secret) has its input and output masked whole, and every value it ever had is masked
    wherever else it appears: the current state only knows its latest value, the history
    knows them all."""
    events = [e for e in events if e.kind == "transform_trace"]
    past = set()
    for event in events:
        if masker.masks_whole(_field_name(event.data)):
            past |= secret_values({"secret": [event.data.get("input"), event.data.get("output")]})
    masker = masker.with_secrets(past)
    traces = []
    for event in events:
        data = event.data
        name = _field_name(data)
        if field is not None and name != field.removeprefix("computed."):
            continue
        trace = {"field": name, "timestamp": data.get("timestamp") or event.timestamp,
                 "trigger": data.get("trigger"), "input": data.get("input"), "output": data.get("output")}
        if masker.masks_whole(name):
            trace["input"], trace["output"] = masker.mask_all(trace["input"]), masker.mask_all(trace["output"])
        if include_timing:
            trace["duration_ms"] = data.get("duration_ms")
        if data.get("error"):
            trace["error"] = data["error"]
        traces.append(trace)
    return list(masker(traces))  # one scan of every trace's text, not one per trace


def _field_name(data: dict[str, Any]) -> str:
    return str(data.get("field", "")).removeprefix("computed.")


def debug_info(run: WorkflowRun, events: list[HistoryEvent], masker: Masker) -> dict[str, Any]:
    """The MCP tool `workflow_debug_info`, plus `current_steps` per thread, status and error."""
    current = {tid: (t.pending.step_id if t.pending else None) for tid, t in run.threads.items() if not t.done}
    main_pending = run.threads["main"].pending if "main" in run.threads else None
    return {
        "current_step": main_pending.step_id if main_pending else None,
        "current_steps": current,
        "status": run.status,
        "error": masker(run.error) if run.error else None,
        "step_history": masker(step_history(events, step_types(run))),  # one scan for the whole history
        "state_size": _state_size(run, events),
        "performance": _performance(events),
    }


def step_types(run: WorkflowRun) -> dict[str, str]:
    """Step id -> step type, from the compiled programs (history events of skipped and
    server-side steps do not carry the type)."""
    return bundle_step_types(run.bundle)


def bundle_step_types(bundle: Any) -> dict[str, str]:
    """Qualified step id -> step type for every workflow of a bundle (kept per bundle: a
    bundle is shared by the instances of one definition and never changes)."""
    hit = _TYPES.get(id(bundle))
    if hit is not None and hit[0] is bundle:
        return hit[1]
    from aromcp_workflows.interpreter import Exit, JumpUnless, LoopEnter, Run, programs_for

    types: dict[str, str] = {}
    for loaded in bundle.workflows.values():
        for program in programs_for(loaded.definition).programs.values():
            for ins in program.instructions:
                if isinstance(ins, Run):
                    types.setdefault(ins.step_id, str(ins.step.type))
                elif isinstance(ins, LoopEnter):
                    types.setdefault(ins.step_id, ins.kind)
                elif isinstance(ins, JumpUnless) and ins.reason == "condition":
                    types[ins.step_id] = "conditional"  # its own test, after any `when` guard
                elif isinstance(ins, Exit):
                    types.setdefault(ins.step_id, "exit")
    if len(_TYPES) >= 256:
        _TYPES.clear()
    _TYPES[id(bundle)] = (bundle, types)
    return types


_TYPES: dict[int, tuple[Any, dict[str, str]]] = {}


def step_type(bundle: WorkflowBundle, step_id: str) -> str | None:
    """The type of a delivered step (`fix_1.retry1.files.apply#2` → `agent_prompt`): its
    loop iterations dropped, then its task, include and attempt prefixes one by one."""
    return _type_in(bundle_step_types(bundle), step_id)


def _type_in(types: dict[str, str], step_id: str) -> str | None:
    """A run's step id looked up in `types`: every loop iteration dropped (`#2`, and `#2.1`
    in nested loops), then its task, include and attempt prefixes one by one."""
    parts = step_id.split("#", 1)[0].split(".")
    for start in range(len(parts)):
        found = types.get(".".join(parts[start:]))
        if found is not None:
            return found
    return None


def step_history(events: list[HistoryEvent], types: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """One entry per step run: started (delivered) and completed times, final status.

    Agent steps open at `step_delivered` and close at `step_completed`; shell commands at
    `step_started`; a `user_message` gives one entry with its text; every `conditional`
    and `while` check gives one entry with the condition's value and the branch taken
    (`then`/`else`, `iterate`/`exit`); every loop's end gives one entry with what ended it
    (`ended_by`: condition, items, break, max_iterations) and its `iterations`;
    a `when` guard that was false gives a `skipped` entry; a server-side
    step that only changed state (`state_update`) gives one entry at its `state_changed`;
    `step_error` and `error` mark the step `failed` with the message."""
    types = types or {}

    def kind_of(step_id: str | None, data: dict[str, Any]) -> str | None:
        return data.get("type") or _type_in(types, step_id or "")

    open_steps: dict[tuple[str | None, str], dict[str, Any]] = {}
    last: dict[tuple[str | None, str], dict[str, Any]] = {}
    history: list[dict[str, Any]] = []

    def add(key: tuple[str | None, str], entry: dict[str, Any]) -> dict[str, Any]:
        history.append(entry)
        last[key] = entry
        return entry

    for event in events:
        key = (event.task_id, event.step_id or "")
        base = {"step_id": event.step_id, "task_id": event.task_id, "type": kind_of(event.step_id, event.data)}
        instant = _instant_entry(event, base)
        if instant is not None:
            add(key, instant)
        elif event.kind in ("step_delivered", "step_started"):
            if key in open_steps:
                continue  # a retry of a shell command or a re-delivery keeps its first start
            open_steps[key] = add(key, {**base, "started_at": event.timestamp, "completed_at": None,
                                        "status": "running"})
        elif event.kind == "step_completed":
            entry = open_steps.pop(key, None) or add(key, {**base, "started_at": event.timestamp})
            entry.update(completed_at=event.timestamp, status=event.data.get("status", "success"))
            if "duration_ms" in event.data:
                entry["duration_ms"] = event.data["duration_ms"]
            if "answered_by" in event.data:  # a question: who answered it (the answer is theirs)
                entry["answered_by"] = event.data["answered_by"]
        elif event.kind == "state_changed" and event.step_id and key not in open_steps and key not in last:
            add(key, {**base, "started_at": event.timestamp, "completed_at": event.timestamp, "status": "success"})
        elif event.kind in ("step_error", "error") and event.step_id:
            entry = open_steps.pop(key, {}) or last.get(key) or add(key, {**base, "started_at": event.timestamp})
            entry.update(status="failed", error=event.data.get("message"))
            entry["completed_at"] = entry.get("completed_at") or event.timestamp
            if event.data.get("handled"):
                entry["handled"] = event.data["handled"]
    return history


def _instant_entry(event: Any, base: dict[str, Any]) -> dict[str, Any] | None:
    """The entry of an event that is a whole step run by itself (it starts and ends at
    once: a message shown, a condition checked, a loop's end, a skipped step), or None."""
    data = event.data
    at = {"started_at": event.timestamp, "completed_at": event.timestamp, "status": "success"}
    if event.kind == "message_shown":
        return {**base, **at, "type": "user_message", "message": data.get("message")}
    if event.kind == "condition_checked":
        return {**base, **at, "value": data.get("value"), "branch": data.get("branch")}
    if event.kind == "loop_ended":
        return {**base, **at, "type": data.get("loop"), "ended_by": data.get("ended_by"),
                "iterations": data.get("iterations")}
    if event.kind == "step_skipped":
        return {**base, **at, "status": "skipped", "reason": f"when {data.get('when')} was false"}
    return None


def _state_size(run: WorkflowRun, events: list[HistoryEvent]) -> dict[str, Any]:
    scope = run.states["main"].scope({})
    def size(tier: str) -> int:
        try:
            return len(json.dumps(scope[tier], default=str))
        except KeyError:
            return 0
    return {"raw_bytes": size("raw"), "state_bytes": size("state"), "computed_bytes": size("computed"),
            "total_transformations": sum(1 for e in events if e.kind == "transform_trace")}


def _performance(events: list[HistoryEvent]) -> dict[str, Any]:
    durations: dict[str, list[float]] = defaultdict(list)
    for event in events:
        if event.kind == "transform_trace" and event.data.get("duration_ms") is not None:
            durations[str(event.data.get("field"))].append(float(event.data["duration_ms"]))
    every = [d for values in durations.values() for d in values]
    slowest: list[dict[str, Any]] = sorted(
        ({"field": f, "avg_ms": round(sum(v) / len(v), 3), "count": len(v)} for f, v in durations.items()),
        key=lambda r: -float(r["avg_ms"]))
    return {"avg_transformation_time": round(sum(every) / len(every), 3) if every else 0.0,
            "slowest_transformations": slowest[:5]}
