"""The instance layer, the only place that commits: live copies of instances, current and
locked, one transaction per change, catching up with what other processes committed.

The face: what other packages may use, each name loaded with its module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aromcp_workflows import lazy_face

if TYPE_CHECKING:
    from aromcp_workflows.instances.confirm import (
        CommitFailed,
        CommitLost,
        Confirmations,
        collecting,
        confirm_save,
        confirmed_quietly,
    )
    from aromcp_workflows.instances.errors import Hint, ServiceError, refusals
    from aromcp_workflows.instances.registry import InstanceRegistry

__all__ = [
    "CommitFailed",
    "CommitLost",
    "Confirmations",
    "Hint",
    "InstanceRegistry",
    "ServiceError",
    "collecting",
    "confirm_save",
    "confirmed_quietly",
    "refusals",
]
__getattr__ = lazy_face(
    __name__,
    {
        "Hint": "errors",
        "CommitFailed": "confirm",
        "CommitLost": "confirm",
        "Confirmations": "confirm",
        "collecting": "confirm",
        "confirmed_quietly": "confirm",
        "confirm_save": "confirm",
        "ServiceError": "errors",
        "refusals": "errors",
        "InstanceRegistry": "registry",
    },
)
