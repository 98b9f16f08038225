"""Result models of the MCP tools (README, "MCP interface"): they give each tool an `outputSchema`
and make the SDK send `structuredContent`.  Kept deliberately loose where the contract
carries free-form JSON (atomic steps, state), so the whole `tools/list` stays small.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

Json = dict[str, Any]


class _Result(BaseModel):
    model_config = ConfigDict(extra="allow")


class WorkflowListResult(_Result):
    workflows: list[Json]


class WorkflowInfoResult(_Result):
    name: str
    description: str
    version: str
    inputs: Json
    found_at: str
    source: str


class ValidateResult(_Result):
    valid: bool
    errors: list[Json]
    warnings: list[Json]


class StartResult(_Result):
    workflow_id: str
    status: str
    state: Json


class NextStepResult(_Result):
    workflow_id: str
    status: str
    step: Json | None
    messages: list[str]
    error: str | None = None


class StepCompleteResult(_Result):
    success: bool
    status: str
    messages: list[str]
    next_step: Json | None
    error: str | None = None


class StateReadResult(_Result):
    state: Json


class StateUpdateResult(_Result):
    success: bool
    updated: list[str]
    computed_changed: Json


class DependenciesResult(_Result):
    direct_deps: list[str]
    all_deps: list[str]
    dependents: list[str]


class CheckpointResult(_Result):
    checkpoint_id: str
    state_path: str


class ResumeResult(_Result):
    workflow_id: str
    status: str
    state: Json
    last_checkpoint: Json | None


class CompleteResult(_Result):
    success: bool
    final_state: Json


class StatusResult(_Result):
    """One instance (workflow_id given) or `instances` (no id)."""


class DefinitionResult(_Result):
    name: str
    steps: list[Json]
    state_schema: Json
    sub_agent_tasks: Json
    loaded_from: str


class TracesResult(_Result):
    traces: list[Json]


class DebugInfoResult(_Result):
    current_step: Any
    step_history: list[Json]
    state_size: Json
    performance: Json


class TestTransformationResult(_Result):
    success: bool
    output: Any = None
    error: str | None = None
    execution_time_ms: float


class ExplainPlanResult(_Result):
    steps: list[Json]
    estimated_sub_agents: Any
    required_tools: list[str]
    program: Any
