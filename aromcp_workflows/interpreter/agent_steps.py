"""Agent-side steps: what the agent is handed (the atomic step of docs/language.md) and how its answer is read.

`templated_fields` says which fields of a step hold templates, so the run can render a
whole step in one engine call; `atomic_step` wraps the rendered fields into the contract
shape with plain instructions; `accept_result` parses and validates what the agent
reported, returning the value to store or the problem to tell the agent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import jsonschema

from aromcp_workflows.definition import AgentShellCommandStep, AgentStep, McpCallStep, UserInputStep
from aromcp_workflows.interpreter.output import OutputFormatError, parse_output
from aromcp_workflows.safety import full_match

AGENT_TYPES = frozenset({"agent_shell_command", "mcp_call", "user_input", "agent_prompt", "apply_hints"})


def templated_fields(step: AgentStep) -> dict[str, Any]:
    """The fields of an agent step whose templates are rendered at delivery."""
    if step.type == "agent_shell_command":
        return {"reason": step.reason, "timeout": step.timeout, "working_dir": step.working_dir}
    if step.type == "mcp_call":
        return {"method": step.mcp.method, "params": step.mcp.params}
    if step.type == "user_input":
        fields: dict[str, Any] = {"prompt": step.prompt}
        if step.choices is not None:
            fields["choices"] = step.choices
        if step.default is not None:
            fields["default"] = step.default
        return fields
    if step.type == "agent_prompt":
        return {"prompt": step.prompt, "context": step.context}
    if step.type == "apply_hints":
        return {"prompt": step.prompt, "file": step.file, "hints": step.hints}
    raise ValueError(f"not an agent step: {step.type}")


def atomic_step(step: AgentStep, step_id: str, rendered: dict[str, Any], command: str | None = None) -> dict[str, Any]:
    """The atomic step handed to the agent: id, type, instructions, concrete definition."""
    if isinstance(step, AgentShellCommandStep):
        definition = {"command": command, "reason": rendered.get("reason"), "output_format": step.output_format,
                      "timeout": rendered.get("timeout"), "working_dir": rendered["working_dir"]}
        text = ("Run this shell command exactly as given, in the directory `working_dir` (an absolute path), "
                "and report its standard output as `result`. If it exits non-zero, complete the step with "
                "status \"failed\" and its error output as `error`.")
        return _atomic(step_id, "agent_shell_command", text, definition)
    if isinstance(step, McpCallStep):
        definition = {"method": rendered["method"], "params": rendered["params"]}
        text = f"Call the MCP tool `{rendered['method']}` with `params` as given; report its result as `result`."
        return _atomic(step_id, "mcp_call", text, definition)
    if isinstance(step, UserInputStep):
        definition = {"prompt": rendered["prompt"]}
        if "choices" in rendered:
            definition["choices"] = rendered["choices"]
        if "default" in rendered:
            definition["default"] = rendered["default"]
        if step.validation is not None:
            definition["validation"] = step.validation.model_dump(exclude_none=True)
        text = "Ask the user `prompt`" + (" (offer the `choices`)" if "choices" in rendered else "")
        text += "; report their answer, unchanged, as `result`."
        return _atomic(step_id, "user_input", text, definition)
    prompt, context = _prompt_parts(step, rendered)
    definition = {"prompt": prompt}
    if context is not None:
        definition["context"] = context
    schema = step.response_schema
    if schema is not None:
        definition["response_schema"] = schema
    text = "Do `prompt`" + (" using `context`" if context is not None else "")
    text += ("; report the outcome as `result`, JSON matching `response_schema`."
             if schema is not None else "; report the outcome as `result`.")
    return _atomic(step_id, "agent_prompt", text, definition)


def _prompt_parts(step: AgentStep, rendered: dict[str, Any]) -> tuple[str, Any]:
    if step.type == "apply_hints":
        prompt = rendered.get("prompt") or (
            f"Apply the coding hints in `context.hints` to the file {rendered['file']}, editing "
            "the file in place. Report the number of changes you made as `result`.")
        return prompt, {"file": rendered["file"], "hints": rendered["hints"]}
    return rendered["prompt"], rendered.get("context")


def _atomic(step_id: str, kind: str, instructions: str, definition: dict[str, Any]) -> dict[str, Any]:
    return {"id": step_id, "type": kind, "instructions": instructions, "definition": definition}


@dataclass
class Accepted:
    value: Any


@dataclass
class Rejected:
    problem: str


def accept_result(step: AgentStep, result: Any) -> Accepted | Rejected:
    """Parse and validate an agent's reported result for `step`."""
    if isinstance(step, AgentShellCommandStep):
        text = result["stdout"] if isinstance(result, dict) and "stdout" in result else result
        if not isinstance(text, str):
            return Accepted(text)  # already structured (e.g. an object the agent parsed itself)
        try:
            return Accepted(parse_output(text, step.output_format))
        except OutputFormatError as exc:
            return Rejected(f"the command output could not be read as {step.output_format}: {exc}")
    if isinstance(step, UserInputStep):
        return _accept_answer(step, result)
    value = _maybe_json(result)
    schema = None if isinstance(step, McpCallStep) else step.response_schema
    if schema is not None:
        try:
            jsonschema.validate(value, schema)
        except jsonschema.ValidationError as exc:
            where = "/".join(str(p) for p in exc.absolute_path) or "the result"
            return Rejected(f"{where} does not match response_schema: {exc.message}")
        except jsonschema.SchemaError as exc:
            return Rejected(f"the step's response_schema is not a valid JSON Schema: {exc.message}")
    return Accepted(value)


def _accept_answer(step: UserInputStep, result: Any) -> Accepted | Rejected:
    answer = result if isinstance(result, str) else json.dumps(result) if result is not None else ""
    answer = answer.strip()
    if step.choices is not None:
        choices = [c if isinstance(c, str) else json.dumps(c) for c in step.choices]
        if answer not in choices:
            return Rejected(f"the answer {answer!r} is not one of the choices: " + ", ".join(choices))
    validation = step.validation
    if validation is not None and validation.pattern and not full_match(validation.pattern, answer):
        message = validation.error_message or f"the answer must match {validation.pattern}"
        return Rejected(f"{message} (got {answer!r})")
    return Accepted(answer)


def _maybe_json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except (json.JSONDecodeError, ValueError):
            return value
    return value


def reissued(step: dict[str, Any], problem: str, attempt: int, max_attempts: int) -> dict[str, Any]:
    """The same atomic step again, with what was wrong stated in its instructions."""
    base = step.get("_base_instructions") or step["instructions"]
    copy = {**step, "instructions": f"Your last answer was not accepted: {problem}. "
                                    f"Attempt {attempt + 1} of {max_attempts}. {base}"}
    copy["_base_instructions"] = base
    return copy


def public(step: dict[str, Any] | None) -> dict[str, Any] | None:
    """The atomic step without internal bookkeeping keys."""
    if step is None:
        return None
    return {k: v for k, v in step.items() if not k.startswith("_")}
