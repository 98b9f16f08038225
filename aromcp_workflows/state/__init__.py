"""Reactive workflow state: tiers, updates, computed fields, dependency graph, traces.

Public API: `StateTiers`, `ComputedFieldSpec`, `Update`, `UpdateResult`, `StateError`
(see docs/architecture.md).  Knows nothing about steps or MCP.
"""

from aromcp_workflows.state.computed import ComputedFieldSpec, ComputedGraph
from aromcp_workflows.state.errors import StateError
from aromcp_workflows.state.paths import format_path, parse_path, parse_write_path
from aromcp_workflows.state.tiers import StateTiers
from aromcp_workflows.state.updates import OPERATIONS, Update, UpdateResult, replay_writes

__all__ = [
    "OPERATIONS",
    "ComputedFieldSpec",
    "ComputedGraph",
    "StateError",
    "StateTiers",
    "Update",
    "UpdateResult",
    "format_path",
    "parse_path",
    "parse_write_path",
    "replay_writes",
]
