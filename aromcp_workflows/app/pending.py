"""What the driver hands between its steps: the transaction it runs in, the effect it must
perform outside the lock (`PendingEffect`), and which commands this process runs now (`InFlight`).
Shared by the driver (`app.driver`), adoption (`app.adoption`) and calls (`app.calls`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from aromcp_workflows.interpreter import Answer, Busy, ShellRequest, WorkflowRun
from aromcp_workflows.shell import RunDir

if TYPE_CHECKING:
    from aromcp_workflows.app.launch import Launch

T = TypeVar("T")
class Transact(Protocol):
    """One change to an instance under its lock, committed or nothing (`InstanceRegistry.transact`):
    what `change` returned; `defer` says of it whether its save may be confirmed later."""

    def __call__(self, workflow_id: str, change: Callable[[WorkflowRun], T],
                 defer: Callable[[T], bool] | None = None) -> T: ...

class InFlight:
    """The shell commands this process is running now, each with an event set when it ends."""

    def __init__(self) -> None:
        self._events: dict[tuple[str, str, str], threading.Event] = {}
        self._guard = threading.Lock()

    def start(self, key: tuple[str, str, str]) -> None:
        """Mark a command as run (or waited for) here; marking it again changes nothing."""
        with self._guard:
            self._events.setdefault(key, threading.Event())

    def end(self, key: tuple[str, str, str]) -> None:
        with self._guard:
            event = self._events.pop(key, None)
        if event is not None:
            event.set()

    def event(self, key: tuple[str, str, str]) -> threading.Event | None:
        with self._guard:
            return self._events.get(key)


IN_FLIGHT = InFlight()


@dataclass
class PendingEffect:
    """An effect the driver must perform outside the lock for `workflow_id`: run a command
    (`ShellRequest`, in the run directory its claim names) or wait for the one another call
    runs (`Busy`)."""

    workflow_id: str
    effect: ShellRequest | Busy
    run_dir: RunDir | None = None
    launch: Launch | None = None  # the command, when it started before its claim was committed


Claimed = Answer | PendingEffect
