"""Reading an instance's history: transform traces and debug info.

Both are built from the append-only history the store keeps (not from counters kept
on the side), so they tell the same story after a restart as before it.  Every value
passes through the masker on its way out.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from aromcp_workflows.explain.masking import Masker


def transform_traces(events: Iterable[Any], field: str | None, include_timing: bool,
                     masker: Masker) -> list[dict[str, Any]]:
    traces = []
    for event in events:
        if event.kind != "transform_trace":
            continue
        data = event.data
        name = str(data.get("field", "")).removeprefix("computed.")
        if field is not None and name != field.removeprefix("computed."):
            continue
        trace = {"field": name, "timestamp": data.get("timestamp") or event.timestamp,
                 "trigger": data.get("trigger"), "input": data.get("input"), "output": data.get("output")}
        if include_timing:
            trace["duration_ms"] = data.get("duration_ms")
        if data.get("error"):
            trace["error"] = data["error"]
        traces.append(masker(trace))
    return traces


def debug_info(run: Any, events: list[Any], masker: Masker) -> dict[str, Any]:
    current = {tid: (t.pending.step_id if t.pending else None) for tid, t in run.threads.items() if not t.done}
    main_pending = run.threads["main"].pending if "main" in run.threads else None
    return {
        "current_step": main_pending.step_id if main_pending else None,
        "current_steps": current,
        "status": run.status,
        "error": masker(run.error) if run.error else None,
        "step_history": [masker(entry) for entry in _step_history(events)],
        "state_size": _state_size(run, events),
        "performance": _performance(events),
    }


def _step_history(events: list[Any]) -> list[dict[str, Any]]:
    """One entry per step delivery: started (delivered) and completed times, final status."""
    open_steps: dict[tuple[str | None, str], dict[str, Any]] = {}
    history: list[dict[str, Any]] = []
    for event in events:
        key = (event.task_id, event.step_id or "")
        if event.kind in ("step_delivered", "step_started"):
            if key in open_steps:
                continue  # a retry of a shell command or a re-delivery keeps its first start
            entry = {"step_id": event.step_id, "task_id": event.task_id, "type": event.data.get("type"),
                     "started_at": event.timestamp, "completed_at": None, "status": "running"}
            open_steps[key] = entry
            history.append(entry)
        elif event.kind == "step_completed":
            entry = open_steps.pop(key, None)
            if entry is None:
                entry = {"step_id": event.step_id, "task_id": event.task_id, "type": event.data.get("type"),
                         "started_at": event.timestamp}
                history.append(entry)
            entry.update(completed_at=event.timestamp, status=event.data.get("status", "success"))
            if "duration_ms" in event.data:
                entry["duration_ms"] = event.data["duration_ms"]
        elif event.kind == "step_skipped":
            history.append({"step_id": event.step_id, "task_id": event.task_id, "type": event.data.get("type"),
                            "started_at": event.timestamp, "completed_at": event.timestamp, "status": "skipped"})
        elif event.kind == "error" and key in open_steps:
            entry = open_steps.pop(key)
            entry.update(completed_at=event.timestamp, status="failed", error=event.data.get("message"))
    return history


def _state_size(run: Any, events: list[Any]) -> dict[str, Any]:
    scope = run.states["main"].scope({})
    def size(tier: str) -> int:
        try:
            return len(json.dumps(scope[tier], default=str))
        except KeyError:
            return 0
    return {"raw_bytes": size("raw"), "state_bytes": size("state"), "computed_bytes": size("computed"),
            "total_transformations": sum(1 for e in events if e.kind == "transform_trace")}


def _performance(events: list[Any]) -> dict[str, Any]:
    durations: dict[str, list[float]] = defaultdict(list)
    for event in events:
        if event.kind == "transform_trace" and event.data.get("duration_ms") is not None:
            durations[str(event.data.get("field"))].append(float(event.data["duration_ms"]))
    every = [d for values in durations.values() for d in values]
    slowest = sorted(({"field": f, "avg_ms": round(sum(v) / len(v), 3), "count": len(v)}
                      for f, v in durations.items()), key=lambda r: -r["avg_ms"])
    return {"avg_transformation_time": round(sum(every) / len(every), 3) if every else 0.0,
            "slowest_transformations": slowest[:5]}
