"""The program-counter machine: compile step lists, run threads, hand out atomic steps.

Knows nothing about MCP, storage or processes: `WorkflowRun` is plain data plus a loop
over the program counter whose handlers return effects as values; the instance layer
(`app/`) performs them — runs shell commands, appends history, commits.
"""

from aromcp_workflows.interpreter.claim import ShellClaim
from aromcp_workflows.interpreter.compiler import ProgramSet, listing, programs_for
from aromcp_workflows.interpreter.effects import Answer, Busy, Completion, Journal, RunError, ShellRequest
from aromcp_workflows.interpreter.inputs import InputError
from aromcp_workflows.interpreter.output import ShellResult
from aromcp_workflows.interpreter.run import WorkflowRun

__all__ = [
    "Answer",
    "Busy",
    "Completion",
    "InputError",
    "Journal",
    "ProgramSet",
    "RunError",
    "ShellClaim",
    "ShellRequest",
    "ShellResult",
    "WorkflowRun",
    "listing",
    "programs_for",
]
