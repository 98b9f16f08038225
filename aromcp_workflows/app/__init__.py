"""The application layer: the typed service API every surface calls (MCP tools, CLI, page, runner, tests).

The face: what other packages may use, each name loaded with its module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aromcp_workflows import lazy_face

if TYPE_CHECKING:
    from aromcp_workflows.app.driver import default_shell_runner
    from aromcp_workflows.app.repair import ConsentNeeded
    from aromcp_workflows.app.results import (
        Answered,
        CheckpointTaken,
        Completed,
        Coverage,
        DebugInfo,
        DefinitionView,
        Dependencies,
        Forked,
        InstanceStatus,
        NextStep,
        Plan,
        RecordedAnswer,
        RecordedCommand,
        Recording,
        Result,
        Resumed,
        Retried,
        Started,
        StateUpdated,
        StateView,
        StepCompleted,
        StepInHand,
        Traces,
        TransformTest,
        Validation,
        WorkflowInfo,
        WorkflowList,
    )
    from aromcp_workflows.app.service import WorkflowService
    from aromcp_workflows.app.statuses import stale_after
    from aromcp_workflows.instances import ServiceError

__all__ = [
    "Answered",
    "CheckpointTaken",
    "Completed",
    "ConsentNeeded",
    "Coverage",
    "DebugInfo",
    "DefinitionView",
    "Dependencies",
    "Forked",
    "InstanceStatus",
    "NextStep",
    "Plan",
    "RecordedAnswer",
    "RecordedCommand",
    "Recording",
    "Result",
    "Resumed",
    "Retried",
    "ServiceError",
    "Started",
    "StateUpdated",
    "StateView",
    "StepCompleted",
    "StepInHand",
    "Traces",
    "TransformTest",
    "Validation",
    "WorkflowInfo",
    "WorkflowList",
    "WorkflowService",
    "default_shell_runner",
    "stale_after",
]
__getattr__ = lazy_face(
    __name__,
    {
        "stale_after": "statuses",
        "Answered": "results",
        "StepInHand": "results",
        "ConsentNeeded": "repair",
        "default_shell_runner": "driver",
        "CheckpointTaken": "results",
        "Completed": "results",
        "Coverage": "results",
        "DebugInfo": "results",
        "DefinitionView": "results",
        "Dependencies": "results",
        "Forked": "results",
        "InstanceStatus": "results",
        "NextStep": "results",
        "Plan": "results",
        "RecordedAnswer": "results",
        "RecordedCommand": "results",
        "Recording": "results",
        "Result": "results",
        "Resumed": "results",
        "Retried": "results",
        "Started": "results",
        "StateUpdated": "results",
        "StateView": "results",
        "StepCompleted": "results",
        "Traces": "results",
        "TransformTest": "results",
        "Validation": "results",
        "WorkflowInfo": "results",
        "WorkflowList": "results",
        "WorkflowService": "service",
        "ServiceError": "aromcp_workflows.instances.errors",
    },
)
