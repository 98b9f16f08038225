"""Pydantic models of a whole workflow file: inputs, state, tasks, error handling.

Step models live in `steps.py`; this module assembles them into `WorkflowDefinition`,
the object every later stage (compiler, service, explain) starts from.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator

from aromcp_workflows.definition.resolver import name_problem
from aromcp_workflows.definition.steps import StateUpdateSpec, Step, Strict

NAME_PATTERN = re.compile(r"^[A-Za-z0-9_\-][A-Za-z0-9_:\-]*$")
SECRET_HELP = ("the value is a secret: masked (***) in every reply, error, trace and log line, and so is "
               "every computed field fed by it")
InputType = Literal["string", "number", "integer", "boolean", "array", "object"]


class InputSpec(Strict):
    """A declared workflow (or sub-agent task) input."""

    type: InputType = "string"
    required: bool = False
    default: Any = None
    description: str | None = None
    secret: bool | None = Field(default=None, description=SECRET_HELP)  # None: not declared (left out of dumps)


class ComputedFieldSpecModel(Strict):
    """A computed field: `from` paths, a JS `transform`, and what to do when it fails."""

    from_: str | list[str] | None = Field(default=None, alias="from")
    transform: str
    on_error: Literal["propagate", "use_fallback", "ignore"] = "propagate"
    fallback: Any = None
    validate_: str | None = Field(default=None, alias="validate")
    description: str | None = None
    secret: bool | None = Field(default=None, description=SECRET_HELP)  # None: not declared (left out of dumps)

    @property
    def sources(self) -> list[str]:
        """`from` as a list, whatever form the author used."""
        if self.from_ is None:
            return []
        return [self.from_] if isinstance(self.from_, str) else list(self.from_)


class StateSchema(Strict):
    """Declared raw/state fields (documentation and validation) and computed fields.

    A raw/state field is declared by its type (`files: array`) or by a mapping
    (`session: {type: string, secret: true}`); `secret: true` makes it a secret."""

    raw: dict[str, Any] = Field(default_factory=dict)
    state: dict[str, Any] = Field(default_factory=dict)
    computed: dict[str, ComputedFieldSpecModel] = Field(default_factory=dict)

    @field_validator("raw", "state")
    @classmethod
    def _secret_is_a_flag(cls, fields: dict[str, Any]) -> dict[str, Any]:
        for name, spec in fields.items():
            if isinstance(spec, dict) and "secret" in spec and not isinstance(spec["secret"], bool):
                raise ValueError(f"field {name!r}: secret must be true or false, not {spec['secret']!r}")
        return fields


class DefaultState(Strict):
    """Initial values, evaluated once at start (templates may read `inputs`)."""

    raw: dict[str, Any] = Field(default_factory=dict)
    state: dict[str, Any] = Field(default_factory=dict)


class TaskErrorHandling(Strict):
    return_on_error: bool = True
    cleanup_on_error: list[Step] = Field(default_factory=list)


class SubAgentTask(Strict):
    """The steps one sub-agent performs for one item of a `parallel_foreach`."""

    description: str | None = None
    inputs: dict[str, InputSpec] = Field(default_factory=dict)
    default_state: dict[str, Any] = Field(default_factory=dict)
    steps: list[Step]
    error_handling: TaskErrorHandling = Field(default_factory=TaskErrorHandling)

    @field_validator("inputs", mode="before")
    @classmethod
    def _accept_plain_values(cls, value: Any) -> Any:
        """The seed writes `inputs: {param: "value"}`: a plain value is the default."""
        if not isinstance(value, dict):
            return value
        return {
            key: spec if _looks_like_input_spec(spec) else {"type": json_type(spec), "default": spec}
            for key, spec in value.items()
        }


class ErrorCollection(Strict):
    enabled: bool = True
    state_path: str | None = None
    include_stack_traces: bool = False


class WorkflowErrorHandling(Strict):
    on_error: Literal["checkpoint_and_fail", "continue", "retry_workflow"] = "checkpoint_and_fail"
    max_retries: int = Field(default=1, ge=0, le=10)
    error_collection: ErrorCollection | None = None
    on_failure: list[Step] = Field(default_factory=list)


class OnResume(Strict):
    retry_failed_steps: bool = True
    skip_completed_steps: bool = True
    reset_error_counts: bool = False
    load_from_checkpoint: list[str] = Field(default_factory=list)
    exclude: list[str] = Field(default_factory=list)


class OnHighContextUsage(Strict):
    """The seed's orchestrator hook: steps for an orchestrator whose context runs high.

    Accepted and validated, never run by the server: the server cannot see an agent's
    context usage.  The orchestrator prompt tells the agent to checkpoint and resume
    instead (see docs/language.md, "Coming from the seed design")."""

    steps: list[Step] = Field(default_factory=list)


class WorkflowDefinition(Strict):
    """One workflow, as written by its author (aliases normalised)."""

    name: str
    description: str = ""
    version: str = "1.0.0"
    imports: list[str] = Field(default_factory=list)
    inputs: dict[str, InputSpec] = Field(default_factory=dict)
    secrets: list[str] = Field(
        default_factory=list, description="fields whose values are secrets, as `inputs.x`, `raw.x`, `state.x`, "
        "`computed.x` (or a bare name: that field in every tier); the same as `secret: true` on each")
    default_state: DefaultState = Field(default_factory=DefaultState)
    state_schema: StateSchema = Field(default_factory=StateSchema)
    steps: list[Step]
    sub_agent_tasks: dict[str, SubAgentTask] = Field(default_factory=dict)
    error_handling: WorkflowErrorHandling = Field(default_factory=WorkflowErrorHandling)
    on_resume: OnResume = Field(default_factory=OnResume)
    orchestrator_behavior: list[str] | str | None = Field(
        default=None, description="the seed's notes on how the orchestrator behaves; "
        "documentation only (not run, not sent to agents)")
    on_high_context_usage: OnHighContextUsage | None = Field(
        default=None, description="the seed's orchestrator hook; validated, not run by the "
        "server (it cannot see an agent's context)")

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        reason = name_problem(value)
        if reason and NAME_PATTERN.match(value):  # a name the pattern allows but lookups refuse
            raise ValueError(f"workflow name {value!r} cannot be looked up: {reason}")
        if reason:
            example = re.sub(r"[^A-Za-z0-9_:\-]+", "-", value.replace("/", ":")).strip("-")
            hint = f" (for example {example!r})" if NAME_PATTERN.match(example or "!") else ""
            raise ValueError(
                f"workflow name {value!r} may use only letters, digits, '-', '_' and ':'{hint}"
            )
        return value

    @field_validator("version", mode="before")
    @classmethod
    def _version_as_text(cls, value: Any) -> Any:
        """`version: 1.0` is a YAML float; keep what the author meant."""
        return str(value) if isinstance(value, (int, float)) else value


def _looks_like_input_spec(spec: Any) -> bool:
    return isinstance(spec, dict) and bool(spec) and set(spec) <= set(InputSpec.model_fields)


def json_type(value: Any) -> str:
    """The input type a plain value has (`3` is an integer, `[]` an array)."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "string"


__all__ = [
    "ComputedFieldSpecModel",
    "DefaultState",
    "InputSpec",
    "OnHighContextUsage",
    "OnResume",
    "StateSchema",
    "StateUpdateSpec",
    "SubAgentTask",
    "WorkflowDefinition",
    "WorkflowErrorHandling",
    "json_type",
]
