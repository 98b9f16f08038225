"""Testing workflows offline: test files, cases run in process, coverage, recording.

`aromcp-workflows test` and the pytest plugin (`pytest_plugin.py`) are thin callers of
`WorkflowService`: a case starts its workflow, plays the agent from its answers and stubs,
and compares the end with its expectations (docs/testing.md).

The face: what other packages may use, each name loaded with its module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aromcp_workflows import lazy_face

if TYPE_CHECKING:
    from aromcp_workflows.testing.command import register

__all__ = ["register"]
__getattr__ = lazy_face(
    __name__,
    {
        "register": "command",
    },
)
