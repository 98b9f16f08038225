"""What the service answers: one typed result per operation.

`WorkflowService` returns these; the MCP tools return the very same objects (they are
the tools' output schemas and structured content), the CLI, the runner and the web view
read their attributes.  So a reader follows any tool into the application with "go to
definition", and the wire shape (README, "MCP interface") is written down once, here.

Free-form JSON stays `Json` where the contract carries it as such: an atomic step, a
state view, a definition.  Everything else has a field.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

Json = dict[str, Any]


class Result(BaseModel):
    """A service result.  Fields left at `None` are not part of the reply on the wire."""

    model_config = ConfigDict(extra="forbid")

    @model_serializer(mode="wrap")
    def _without_unset_optionals(self, handler: SerializerFunctionWrapHandler):  # type: ignore[no-untyped-def]
        """Drop an optional field (one whose default is None) that is None: a reply carries
        no empty extras.  A required field that may be null (`step` at the end) stays.
        (No return annotation on purpose: pydantic would take it as the serialized schema,
        and `Any` would erase every tool's output schema.)"""
        data = handler(self)
        for name, spec in type(self).model_fields.items():
            if spec.default is None and not spec.is_required() and data.get(name, 0) is None:
                del data[name]
        return data


# -- workflows ---------------------------------------------------------------------------
class WorkflowSummary(Result):
    name: str
    description: str
    version: str
    source: str
    path: str


class WorkflowList(Result):
    workflows: list[WorkflowSummary]


class WorkflowInfo(Result):
    name: str
    description: str
    version: str
    inputs: Json
    found_at: str
    source: str


class Problem(Result):
    """One validation error or warning, at `file:line:column`."""

    message: str
    file: str | None = None
    line: int | None = None
    column: int | None = None
    severity: str = "error"


class Validation(Result):
    valid: bool
    errors: list[Problem]
    warnings: list[Problem]


class DefinitionView(Result):
    name: str
    steps: list[Json]
    state_schema: Json
    sub_agent_tasks: Json
    loaded_from: str
    imports: dict[str, str]


class Plan(Result):
    workflow: str
    steps: list[Json]
    estimated_sub_agents: Json  # {total, by_step}
    required_tools: list[str]
    state_paths_written: list[str]
    program: dict[str, dict[str, list[str]]]  # workflow -> program key -> listing lines


# -- driving an instance ------------------------------------------------------------------
class Started(Result):
    workflow_id: str
    status: str
    state: Json


class NextStep(Result):
    """Where a thread stands: the atomic step to perform (None at the end) and the messages
    that come before it.  `user_answers`: what the user answered in forms during this call.
    `waiting_for`: set only when the call's budget (`AROMCP_CALL_BUDGET_S`) ran out while a
    server-side command runs — {kind: "command", step_id, command, for_s, instructions} —
    and `step` is then that command's `wait` step: complete it or call again."""

    workflow_id: str
    status: str
    step: Json | None
    messages: list[str]
    error: str | None = None
    user_answers: list[Json] | None = None
    waiting_for: Json | None = None


class StepCompleted(Result):
    """The answer to a step's result: accepted or not (`error` says why), then where the
    thread stands now (`next_step`, its messages)."""

    success: bool
    status: str
    messages: list[str]
    next_step: Json | None
    error: str | None = None
    user_answers: list[Json] | None = None
    waiting_for: Json | None = None  # as in `NextStep`


class StateView(Result):
    state: Json


class StateUpdated(Result):
    success: bool
    updated: list[str]
    computed_changed: Json


class Dependencies(Result):
    direct_deps: list[str]
    all_deps: list[str]
    dependents: list[str]


class CheckpointTaken(Result):
    checkpoint_id: str
    state_path: str


class CheckpointInfo(Result):
    checkpoint_id: str
    step_id: str | None
    reason: str
    timestamp: str


class Resumed(Result):
    workflow_id: str
    status: str
    state: Json
    last_checkpoint: CheckpointInfo | None


class Completed(Result):
    success: bool
    final_state: Json


class TaskCounts(Result):
    """How an instance's sub-agent tasks stand (`progress` on the wire)."""

    tasks_total: int
    tasks_completed: int
    tasks_failed: int
    tasks_running: int


class StepInHand(Result):
    """A step handed out and not done, and who it waits for: `agent` (the orchestrator or a
    sub-agent must do it; a task no sub-agent pulled yet waits for one too), `user` (a
    question), `command` (the server runs it), `task` (the orchestrator's fan-out waits for
    its sub-agents).  `since`: when it was handed out (ISO 8601), `for_s`: how long ago;
    `idle_s`: for an agent's step, how long since the agent last called for it; `stalled`:
    that is longer than `AROMCP_STALE_AFTER` (the one rule, applied here for every surface),
    or, for a command, its server is gone (nobody waits for it until an agent calls again)."""

    step_id: str
    task_id: str | None = None
    waiting_for: Literal["agent", "user", "command", "task"]
    since: str | None = None
    for_s: float | None = None
    idle_s: float | None = None
    stalled: bool | None = None
    question: str | None = None
    command: str | None = None
    tasks: list[str] | None = None


class InstanceStatus(Result):
    """One instance.  `definition_changed`: its workflow's file no longer holds the copy the
    instance runs (it keeps running that copy; `aromcp-workflows migrate` moves it).
    `steps_in_hand`: who each step handed out waits for; `stalled`: an agent holding a step
    has not called for longer than `AROMCP_STALE_AFTER` seconds (derived when read)."""

    workflow_id: str
    workflow: str
    status: str
    current_steps: list[str]
    progress: TaskCounts
    error: str | None = None
    version: int | None = None  # the commit the instance is at (a `fork --version` point)
    forked_from: ForkOrigin | None = None
    definition_changed: bool | None = None
    steps_in_hand: list[StepInHand] | None = None
    stalled: bool | None = None


class Answered(Result):
    """A question answered by the person (`aromcp-workflows answer`, the page): which, and
    what.  The agent's next `workflow_get_next_step` goes on past it."""

    workflow_id: str
    step_id: str
    task_id: str | None = None
    question: str
    answer: Any


class InstanceRow(Result):
    workflow_id: str
    workflow: str
    status: str
    current_steps: list[str]
    age_seconds: float
    updated_at: str
    error: str | None = None
    stalled: bool | None = None  # a running instance whose agent has not called for too long


class InstanceList(Result):
    instances: list[InstanceRow]
    store: str | None = None  # the store, when one was named (--store, AROMCP_WORKFLOWS_STORE) instead of the default


class StatusChanged(Result):
    workflow_id: str
    status: str


# -- repairing ----------------------------------------------------------------------------
class Retried(Result):
    """A failed instance going on from the step that failed (`retry`).  `restored_version`:
    the commit whose state it has again (the one that handed the step out); None when the
    step failed inside the server in the call that ran it, and the state is the one it
    failed with, before error handling wrote to it."""

    workflow_id: str
    status: str
    step_id: str
    restored_version: int | None = None


class ForkOrigin(Result):
    """Where a fork was made from: the instance, the version its state and threads are
    from, and the step or checkpoint named (if one was); the paths edited."""

    workflow_id: str
    version: int
    step_id: str | None = None
    checkpoint_id: str | None = None
    edits: list[str]


class Forked(Result):
    """A new instance made from a point of another (`fork`); the original is untouched."""

    workflow_id: str
    status: str
    forked_from: ForkOrigin
    current_steps: list[str]
    state: Json


# -- seeing inside ------------------------------------------------------------------------
class Traces(Result):
    traces: list[Json]


class DebugInfo(Result):
    """`definition_changed` as for `InstanceStatus`; `migrations`: each move onto an edited
    file, with the definition the instance ran before it."""

    current_step: str | None
    current_steps: dict[str, str | None]
    status: str
    error: str | None = None
    step_history: list[Json]
    state_size: Json
    performance: Json
    definition_changed: bool | None = None
    migrations: list[Json] | None = None


# -- testing and evolving a workflow --------------------------------------------------------
class BranchCoverage(Result):
    """One branch (`key` as test files name it, `label` for people) and whether it was taken.
    `line`: where the file writes it (None when the file no longer holds this copy)."""

    key: str
    label: str
    covered: bool
    line: int | None = None


class WorkflowCoverage(Result):
    workflow: str
    file: str
    branches: list[BranchCoverage]


class Coverage(Result):
    """The branches of an instance's workflow, and of each workflow it includes, it took."""

    workflow_id: str
    workflows: list[WorkflowCoverage]


class RecordedAnswer(Result):
    """An answer the agent gave for a delivered step (`status` failed: reported failed)."""

    step_id: str
    task_id: str | None = None
    status: str
    result: Any = None
    error: str | None = None


class RecordedCommand(Result):
    """A server-side command and what it gave back (`complete` False: output cut in the history)."""

    step_id: str
    command: str
    exit_code: int
    stdout: str
    stderr: str
    complete: bool


class Recording(Result):
    """A finished instance as a test case needs it: inputs, answers and command results to
    replay, and the outcome to expect.  `masked`: secret values were replaced by ***."""

    workflow_id: str
    workflow: str
    file: str
    inputs: Json
    answers: list[RecordedAnswer]
    commands: list[RecordedCommand]
    status: str
    error: str | None = None
    state: Json
    messages: list[str]
    masked: bool = False


class TransformTest(Result):
    success: bool
    output: Any = None
    error: str | None = None
    execution_time_ms: float


class Blocker(Result):
    """One reason an instance cannot move onto the edited file, at the new file's `file:line`."""

    message: str
    file: str | None = None
    line: int | None = None


class Migration(Result):
    """`migrate`: `outcome` is `moved`, `would_move` (a dry run that found it safe), `refused`
    (`blockers` say why; nothing was written) or `unchanged` (the file holds the copy the
    instance runs).  `plan`: what moving does (or did), one line each."""

    workflow_id: str
    workflow: str
    file: str
    outcome: str
    plan: list[str]
    blockers: list[Blocker]
