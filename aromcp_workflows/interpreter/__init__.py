"""The program-counter machine: compile step lists, run threads, hand out atomic steps.

Knows nothing about MCP, storage or processes: a `WorkflowRun` has its `Machine` (plain
data) and is the loop over the program counter, whose handlers return effects as values;
the instance layer (`instances/`, driven by `app/`) performs them — runs shell commands,
appends history, commits.
"""

from aromcp_workflows.interpreter.agent_steps import Accepted, Rejected, accept_result
from aromcp_workflows.interpreter.claim import ShellClaim
from aromcp_workflows.interpreter.compiler import (
    ProgramSet,
    StepPlace,
    listing,
    local_step_id,
    programs_for,
    step_places,
)
from aromcp_workflows.interpreter.effects import (
    EVENT_KINDS,
    Answer,
    Busy,
    Completion,
    Journal,
    Outcome,
    RunError,
    ShellRequest,
)
from aromcp_workflows.interpreter.inputs import InputError, check_inputs
from aromcp_workflows.interpreter.machine import Ctx, Machine
from aromcp_workflows.interpreter.migration import MoveBlocker, apply_move, plan_move
from aromcp_workflows.interpreter.output import ShellResult
from aromcp_workflows.interpreter.ownership import (
    UserAnswer,
    UserOwned,
    Writer,
    answers_in,
    owner_of,
    refusal,
    shown_question,
)
from aromcp_workflows.interpreter.program import Exit, JumpUnless, LoopEnter, Run
from aromcp_workflows.interpreter.run import WorkflowRun
from aromcp_workflows.interpreter.shell_steps import command_wait
from aromcp_workflows.interpreter.thread import Thread

__all__ = [
    "EVENT_KINDS",
    "Accepted",
    "Answer",
    "Busy",
    "Completion",
    "Ctx",
    "Exit",
    "InputError",
    "Journal",
    "JumpUnless",
    "LoopEnter",
    "Machine",
    "MoveBlocker",
    "Outcome",
    "ProgramSet",
    "Rejected",
    "Run",
    "RunError",
    "ShellClaim",
    "ShellRequest",
    "ShellResult",
    "StepPlace",
    "Thread",
    "UserAnswer",
    "UserOwned",
    "WorkflowRun",
    "Writer",
    "accept_result",
    "answers_in",
    "apply_move",
    "check_inputs",
    "command_wait",
    "listing",
    "local_step_id",
    "owner_of",
    "plan_move",
    "programs_for",
    "refusal",
    "shown_question",
    "step_places",
]
