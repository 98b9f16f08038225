"""Reactive workflow state: tiers, updates, computed fields, dependency graph, traces.

Public API: `StateStore`, `ComputedFieldSpec`, `Update`, `UpdateResult`, `StateError`
(see docs/architecture.md).  Knows nothing about steps or MCP.
"""

from .computed import ComputedFieldSpec, ComputedGraph
from .errors import StateError
from .paths import format_path, parse_path, parse_write_path
from .store import StateStore
from .updates import OPERATIONS, Update, UpdateResult

__all__ = [
    "OPERATIONS",
    "ComputedFieldSpec",
    "ComputedGraph",
    "StateError",
    "StateStore",
    "Update",
    "UpdateResult",
    "format_path",
    "parse_path",
    "parse_write_path",
]
