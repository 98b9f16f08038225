"""What the machine hands back to its caller: answers, shell requests, completions.

Kept apart from `run.py` so the mixins that build them (step execution, parallel steps,
failures) can import them without a cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aromcp_workflows.definition.workflow import WorkflowDefinition
from aromcp_workflows.state import ComputedFieldSpec


@dataclass
class Answer:
    """What a thread's caller gets: the next atomic step (or None) and its messages."""

    status: str
    step: dict[str, Any] | None
    messages: list[str] = field(default_factory=list)
    error: str | None = None
    thread_id: str = "main"


@dataclass
class ShellRequest:
    """A server-side command to run outside the lock, then hand to `finish_shell`."""

    thread_id: str
    step_id: str
    command: str
    cwd: Path
    env: dict[str, str]
    timeout_ms: int | None
    delay_ms: int = 0


@dataclass
class Busy:
    """The thread is running a server-side command for another caller; ask again shortly."""

    thread_id: str


@dataclass
class Completion:
    """The answer to `complete` before the thread advances (success, or why not)."""

    success: bool
    error: str | None = None
    step: dict[str, Any] | None = None  # a re-issued or `wait` step when not successful
    advance: bool = True


class RunError(Exception):
    """A request the run cannot serve (unknown task or step id): a tool error."""


def computed_specs(definition: WorkflowDefinition) -> list[ComputedFieldSpec]:
    """The state store's view of a definition's computed fields."""
    return [
        ComputedFieldSpec(name=name, sources=spec.sources, source_is_list=isinstance(spec.from_, list),
                          transform=spec.transform, on_error=spec.on_error,
                          fallback=spec.fallback, validate=spec.validate_)
        for name, spec in definition.state_schema.computed.items()
    ]


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
