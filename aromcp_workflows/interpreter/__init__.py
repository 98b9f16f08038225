"""The program-counter machine: compile step lists, run threads, hand out atomic steps.

Knows nothing about MCP or storage formats: `WorkflowRun` is plain data plus methods,
`Driver` runs its advance/shell loop with whatever lock and commit hook the caller gives.
"""

from aromcp_workflows.interpreter.compiler import ProgramSet, listing, programs_for
from aromcp_workflows.interpreter.driver import Driver, StepCompleteAnswer
from aromcp_workflows.interpreter.inputs import InputError
from aromcp_workflows.interpreter.outcomes import Answer, RunError
from aromcp_workflows.interpreter.run import WorkflowRun

__all__ = [
    "Answer",
    "Driver",
    "InputError",
    "ProgramSet",
    "RunError",
    "StepCompleteAnswer",
    "WorkflowRun",
    "listing",
    "programs_for",
]
