"""Reactive workflow state: tiers, updates, computed fields, dependency graph, traces.

Public API: `StateTiers`, `ComputedFieldSpec`, `Update`, `UpdateResult`, `StateError`
(see docs/architecture.md).  Knows nothing about steps or MCP.
"""

from aromcp_workflows.state.computed import ComputedFieldSpec, ComputedGraph, shared_graph
from aromcp_workflows.state.errors import StateError
from aromcp_workflows.state.paths import format_path, parse_path, parse_write_path
from aromcp_workflows.state.tiers import StateTiers
from aromcp_workflows.state.updates import OPERATIONS, Operation, Update, UpdateResult, replay_writes

__all__ = [
    "OPERATIONS",
    "ComputedFieldSpec",
    "ComputedGraph",
    "Operation",
    "StateError",
    "StateTiers",
    "Update",
    "UpdateResult",
    "format_path",
    "parse_path",
    "parse_write_path",
    "replay_writes",
    "shared_graph",
]
