"""What the web view's pages read: one typed result per read of `WorkflowService` that only
the web view makes (the page of instances, an instance's graph, lanes, failures and
history, its state at a point of the history).  The MCP tools' results are in `results.py`.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from aromcp_workflows.app.results import Json, Result, StepInHand


class InstanceSummaryRow(Result):
    """One row of the instances page."""

    workflow_id: str
    workflow: str
    project_dir: str
    status: str
    current_steps: list[str]
    created_at: str
    updated_at: str
    duration_seconds: float  # start to last change when finished, start to now while it runs
    error: str | None = None
    stalled: bool | None = None  # running, and its agent has not called for `AROMCP_STALE_AFTER` seconds


class InstancePageView(Result):
    """One page of instances, newest started first, and what the filters can offer."""

    rows: list[InstanceSummaryRow]
    total: int
    page: int
    per_page: int
    workflows: list[str]
    projects: list[str]
    statuses: dict[str, int]


class GraphNode(Result):
    """A node of the workflow graph, where it is drawn and how far the instance got there:
    `mark` done | current | failed | skipped | not_reached, `runs` times it ran."""

    id: str
    lines: list[str]
    shape: str
    role: str
    step_id: str | None
    scope: str
    x: float
    y: float
    w: float
    h: float
    mark: str
    runs: int
    detail: str | None = None


class GraphEdge(Result):
    source: str
    target: str
    points: list[list[float]]
    label: str | None
    dotted: bool
    back: bool


class GraphBlock(Result):
    id: str
    title: str
    kind: str
    x: float
    y: float
    w: float
    h: float


class GraphView(Result):
    width: float
    height: float
    nodes: list[GraphNode]
    edges: list[GraphEdge]
    blocks: list[GraphBlock]


class TaskLane(Result):
    """A sub-agent task: its item, status and the step in hand."""

    task_id: str
    task: str
    fan_out: str | None
    item: Any = None
    index: int | None = None
    status: str
    retries: int
    current_step: str | None = None
    error: str | None = None
    started_at: str | None = None
    finished_at: str | None = None


class FailureView(Result):
    """A failed thread, the step it failed at and where that step is written."""

    task_id: str | None
    step_id: str | None
    message: str
    step_type: str | None = None
    file: str | None = None
    line: int | None = None
    column: int | None = None
    file_changed: bool = False  # the step reads differently in the file now than when the instance started


class PendingQuestion(Result):
    """A question the instance waits on, as it was asked: the prompt with its templates
    filled in, the choices, what an answer must match; the page answers it with `answer`."""

    step_id: str
    task_id: str | None = None
    prompt: str
    choices: list[Any] | None = None
    pattern: str | None = None
    pattern_hint: str | None = None
    default: Any = None


class InstanceView(Result):
    """Everything the instance page shows at once (the state history is `StateAt`)."""

    workflow_id: str
    workflow: str
    project_dir: str
    status: str
    version: int
    current_steps: list[str]
    created_at: str
    updated_at: str
    duration_seconds: float
    error: str | None = None
    graph: GraphView
    tasks: list[TaskLane]
    messages: list[Json]
    failures: list[FailureView]
    timeline: list[Json]
    state: Json  # raw, state, computed, inputs now
    state_points: list[Json]
    steps_in_hand: list[StepInHand] = Field(default_factory=list)  # who each step handed out waits for
    stalled: bool | None = None
    questions: list[PendingQuestion] = Field(default_factory=list)  # user_input steps waiting for an answer


class StateAt(Result):
    """The main state after history event `seq`, and what that event changed."""

    seq: int
    state: Json  # raw, state, computed
    changed: list[str]
    complete: bool
    note: str | None = None


class OutputSlice(Result):
    """Part of a command's stdout or stderr: `text` holds bytes `start`..`end` of what the
    command wrote; `cut`: bytes before `start` (that were asked for) are not kept.  After the
    command ended, offsets count the text the history kept."""

    text: str
    start: int
    end: int
    cut: bool


class CommandOutput(Result):
    """A server-side command's output (`WorkflowService.command_output`): live from its run
    directory while it runs on this machine, from the history once it ended.

    `source` says where it was read: `live`, `history`, `elsewhere` (it runs on another
    host: nothing to read here) or `none` (no such command)."""

    workflow_id: str
    step_id: str | None
    task_id: str | None = None
    running: bool
    source: str
    command: str | None = None
    exit_code: int | None = None
    stdout: OutputSlice
    stderr: OutputSlice
