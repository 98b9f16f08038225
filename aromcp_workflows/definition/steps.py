"""Pydantic models of every step type of the workflow language (docs/language.md).

Steps are a discriminated union on `type`, so a typo in a step type or in a key is a
validation error with a position instead of a silently ignored field.  Accepted aliases
(`then_steps`/`else_steps`, top-level `method`/`params` on `mcp_call`) are normalised
here, once, so nothing downstream has to know about them.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

OutputFormat = Literal["text", "lines", "json", "key_value"]
UpdateOperation = Literal["set", "append", "increment", "merge", "delete"]
BoolOrTemplate = str | bool

MAX_ITERATIONS_LIMIT = 10_000
DEFAULT_MAX_ITERATIONS = 100
MAX_PARALLEL_LIMIT = 100


class Strict(BaseModel):
    """Base for every language model: unknown keys are errors, aliases are accepted."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class StateUpdateSpec(Strict):
    """Where a step's result goes: `path`, optional `value` (may use `result`)."""

    path: str
    value: Any = None
    operation: UpdateOperation = "set"


def _check_increment(operation: str, value: Any) -> None:
    """An `increment` by a literal that is no number (`value: "abc"`) can only fail when the
    step runs: said when the file is read.  A template may give a number, so it is left."""
    if operation != "increment" or value is None or (isinstance(value, str) and "{{" in value):
        return
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return
    raise PydanticCustomError(
        "increment_value", "operation 'increment' adds a number, but the value {value} is not one: write a "
        "number (value: 1, or -1 to count down) or a template that gives one (value: {example})",
        {"key": "value", "value": repr(value), "example": '"{{ step_size }}"'})


class UpdateItem(Strict):
    """One entry of a `state_update` step's `updates:` list."""

    path: str
    value: Any = None
    operation: UpdateOperation = "set"

    @model_validator(mode="after")
    def _number_to_add(self) -> UpdateItem:
        _check_increment(self.operation, self.value)
        return self


class ValidationSpec(Strict):
    """`user_input.validation`: a regular expression the answer must match."""

    pattern: str | None = None
    error_message: str | None = None


class StepBase(Strict):
    """Fields every step may carry."""

    id: str | None = None
    when: BoolOrTemplate | None = None
    description: str | None = None


class ResultStep(StepBase):
    """A step that produces a result which the server stores for the agent."""

    state_update: StateUpdateSpec | None = None
    error_state_update: StateUpdateSpec | None = None
    fallback_value: Any = None  # each kind declares it again, where its own fields list it


class ShellCommandStep(ResultStep):
    type: Literal["shell_command"]
    command: str
    output_format: OutputFormat = "text"
    working_dir: str | None = None
    timeout: int | None = Field(default=None, ge=1, description="milliseconds")
    env: dict[str, str] = Field(default_factory=dict)
    on_error: Literal["fail", "continue", "retry"] = "fail"
    retry_count: int = Field(default=3, ge=0, le=100)
    retry_delay: int = Field(default=1000, ge=0, description="milliseconds")
    fallback_value: Any = None

    @field_validator("env", mode="before")
    @classmethod
    def _scalar_env_values(cls, value: Any) -> Any:
        """`DEBUG: 1` and `VERBOSE: true` are what authors write; environments hold text."""
        if not isinstance(value, dict):
            return value
        return {k: _env_text(v) for k, v in value.items()}


def _env_text(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return value


class AgentShellCommandStep(ResultStep):
    type: Literal["agent_shell_command"]
    command: str
    reason: str | None = None
    output_format: OutputFormat = "text"
    working_dir: str | None = None
    timeout: int | None = Field(default=None, ge=1, description="milliseconds")
    on_error: Literal["fail", "continue"] = "fail"
    fallback_value: Any = None


class McpSpec(Strict):
    method: str
    params: dict[str, Any] = Field(default_factory=dict)


class McpCallStep(ResultStep):
    type: Literal["mcp_call"]
    mcp: McpSpec
    on_error: Literal["fail", "continue"] = "fail"
    fallback_value: Any = None
    timeout: int | None = Field(default=None, ge=1, description="milliseconds")

    @model_validator(mode="before")
    @classmethod
    def _accept_top_level_method(cls, data: Any) -> Any:
        """The seed also writes `method:`/`params:` beside `type`; fold them into `mcp`."""
        if isinstance(data, dict) and "mcp" not in data and "method" in data:
            data = dict(data)
            data["mcp"] = {"method": data.pop("method"), "params": data.pop("params", {})}
        elif isinstance(data, dict) and "mcp" not in data and "params" in data:
            raise PydanticCustomError(
                "mcp_method", "an mcp_call step with top-level 'params' needs a top-level "
                "'method' too (or write both under 'mcp:')", {"key": "params"})
        return data


class UserMessageStep(StepBase):
    type: Literal["user_message"]
    message: str


class UserInputStep(ResultStep):
    type: Literal["user_input"]
    prompt: str
    validation: ValidationSpec | None = None
    choices: list[Any] | None = None
    default: Any = None
    max_attempts: int = Field(default=3, ge=1, le=100)
    on_error: Literal["fail", "continue"] = "fail"
    fallback_value: Any = None


class AgentPromptStep(ResultStep):
    type: Literal["agent_prompt"]
    prompt: str
    context: Any = None
    response_schema: dict[str, Any] | None = None
    max_attempts: int = Field(default=3, ge=1, le=100)
    on_error: Literal["fail", "continue"] = "fail"
    fallback_value: Any = None


class ApplyHintsStep(ResultStep):
    """The seed's specialised agent prompt: apply `hints` to `file`."""

    type: Literal["apply_hints"]
    file: str
    hints: Any
    prompt: str | None = None
    response_schema: dict[str, Any] | None = None
    max_attempts: int = Field(default=3, ge=1, le=100)
    on_error: Literal["fail", "continue"] = "fail"
    fallback_value: Any = None


class ConditionalStep(StepBase):
    type: Literal["conditional"]
    condition: BoolOrTemplate
    then: list[Step] = Field(default_factory=list, validation_alias=AliasChoices("then", "then_steps"))
    else_: list[Step] = Field(
        default_factory=list, alias="else", validation_alias=AliasChoices("else", "else_steps")
    )


class WhileStep(StepBase):
    """A loop that runs while `condition` holds, at most `limit` times.

    A bound the author wrote (`max_iterations: N`) is a normal end, as in the seed design
    and AroMCP: the loop exits and the workflow goes on.  Without one, the implicit limit
    is a safety net, and reaching it fails the workflow.  `on_max_iterations` overrides
    either; both keys stay None when not written, so a stored definition keeps the
    difference."""

    type: Literal["while"]
    condition: BoolOrTemplate
    max_iterations: int | None = Field(
        default=None, ge=1, le=MAX_ITERATIONS_LIMIT,
        description=f"the most iterations; reaching it ends the loop and the workflow goes on "
        f"(without it: {DEFAULT_MAX_ITERATIONS}, and reaching that fails the workflow)")
    on_max_iterations: Literal["fail", "continue"] | None = Field(
        default=None, description="what reaching the limit does: continue after the loop (the "
        "default with max_iterations) or fail the workflow (the default without it)")
    body: list[Step]

    @property
    def limit(self) -> int:
        return DEFAULT_MAX_ITERATIONS if self.max_iterations is None else self.max_iterations

    @property
    def at_limit(self) -> Literal["fail", "continue"]:
        """What reaching `limit` does."""
        if self.on_max_iterations is not None:
            return self.on_max_iterations
        return "fail" if self.max_iterations is None else "continue"


# Names a foreach may not give its element or index: they mean something else already.
LOOP_NAME_RESERVED = frozenset({"inputs", "raw", "state", "computed", "this", "loop", "task", "context",
                                "result", "error", "workflow_id", "input", "output", "undefined", "null",
                                "true", "false", "now", "uuid", "path_to_key"})
_LOOP_NAME = re.compile(r"[A-Za-z_$][\w$]*")


class ForeachStep(StepBase):
    """Runs `steps` once per element of `items`, as `item`/`index`.  `variable_name` and
    `index_name` also give them names of the author's; an inner loop's `item` hides an
    outer one, but a named element stays visible in every loop nested inside."""

    type: Literal["foreach"]
    items: Any
    steps: list[Step]
    variable_name: str | None = Field(default=None, description="another name for the current element "
                                      "(visible in loops nested inside, unlike `item`)")
    index_name: str | None = Field(default=None, description="another name for the current index")

    @field_validator("variable_name", "index_name")
    @classmethod
    def _a_free_name(cls, value: str | None) -> str | None:
        if value is None or value in ("item", "index"):
            return value
        if not _LOOP_NAME.fullmatch(value):
            raise PydanticCustomError("loop_name", "'{value}' is not a JavaScript name (letters, digits, _ "
                                      "and $, not starting with a digit)", {"value": value})
        if value in LOOP_NAME_RESERVED:
            raise PydanticCustomError("loop_name", "'{value}' already means something in templates; "
                                      "choose another name", {"value": value})
        return value


class SubAgentErrorPolicy(Strict):
    strategy: Literal["retry_failed", "continue", "fail_all"] = "fail_all"
    max_retries: int = Field(default=2, ge=0, le=20)
    collect_errors: bool = False
    error_state_path: str | None = None


class ParallelForeachStep(StepBase):
    type: Literal["parallel_foreach"]
    items: Any
    sub_agent_task: str
    max_parallel: int = Field(default=10, ge=1, le=MAX_PARALLEL_LIMIT)
    wait_for_all: bool = True
    sub_agent_prompt_override: str | None = None
    on_sub_agent_error: SubAgentErrorPolicy = Field(default_factory=SubAgentErrorPolicy)

    @model_validator(mode="before")
    @classmethod
    def _accept_strategy_string(cls, data: Any) -> Any:
        """`on_sub_agent_error: continue` is shorthand for `{strategy: continue}`."""
        if isinstance(data, dict) and isinstance(data.get("on_sub_agent_error"), str):
            data = dict(data)
            data["on_sub_agent_error"] = {"strategy": data["on_sub_agent_error"]}
        return data


class BreakStep(StepBase):
    type: Literal["break"]


class ContinueStep(StepBase):
    type: Literal["continue"]


class IncludeWorkflowStep(StepBase):
    type: Literal["include_workflow"]
    workflow: str
    inputs: dict[str, Any] = Field(default_factory=dict)
    state_update: StateUpdateSpec | None = None


class ExitStep(StepBase):
    type: Literal["exit"]
    status: Literal["completed", "failed"] = "completed"
    message: str | None = None


class StateUpdateStep(StepBase):
    """Server-side state change: one `path`/`value`/`operation`, or an `updates` list."""

    type: Literal["state_update"]
    path: str | None = None
    value: Any = None
    operation: UpdateOperation = "set"
    updates: list[UpdateItem] | None = None

    @model_validator(mode="after")
    def _one_form(self) -> StateUpdateStep:
        """Exactly one form; the error names the key to look at (`ctx.key` positions it)."""
        if self.updates is None and self.path is None:
            raise PydanticCustomError(
                "state_update_form",
                "a state_update step needs 'path' (with 'value' and 'operation') or an "
                "'updates' list", {"key": "type"})
        if self.updates is not None and self.path is not None:
            raise PydanticCustomError(
                "state_update_form",
                "a state_update step takes either 'path' or an 'updates' list, not both; "
                "move this update into the list", {"key": "path"})
        _check_increment(self.operation, self.value)
        return self

    def as_updates(self) -> list[UpdateItem]:
        """Both forms as one list, so the interpreter handles a single shape."""
        if self.updates is not None:
            return list(self.updates)
        return [UpdateItem(path=self.path or "", value=self.value, operation=self.operation)]


Step = Annotated[
    ShellCommandStep
    | AgentShellCommandStep
    | StateUpdateStep
    | McpCallStep
    | UserMessageStep
    | UserInputStep
    | AgentPromptStep
    | ApplyHintsStep
    | ConditionalStep
    | WhileStep
    | ForeachStep
    | ParallelForeachStep
    | BreakStep
    | ContinueStep
    | IncludeWorkflowStep
    | ExitStep,
    Field(discriminator="type"),
]


AgentStep = AgentShellCommandStep | McpCallStep | UserInputStep | AgentPromptStep | ApplyHintsStep  # handed out
LoopStep = WhileStep | ForeachStep


STEP_TYPES: tuple[str, ...] = (
    "shell_command",
    "agent_shell_command",
    "state_update",
    "mcp_call",
    "user_message",
    "user_input",
    "agent_prompt",
    "apply_hints",
    "conditional",
    "while",
    "foreach",
    "parallel_foreach",
    "break",
    "continue",
    "include_workflow",
    "exit",
)

SERVER_SIDE_TYPES = frozenset(
    {"shell_command", "state_update", "conditional", "while", "foreach", "break", "continue",
     "include_workflow", "exit"}
)

for _model in (ConditionalStep, WhileStep, ForeachStep):
    _model.model_rebuild()


def child_step_lists(step: StepBase) -> list[tuple[str, list[Step]]]:
    """The nested step lists of a container step, labelled by the key that holds them."""
    if isinstance(step, ConditionalStep):
        return [("then", step.then), ("else", step.else_)]
    if isinstance(step, WhileStep):
        return [("body", step.body)]
    if isinstance(step, ForeachStep):
        return [("steps", step.steps)]
    return []
