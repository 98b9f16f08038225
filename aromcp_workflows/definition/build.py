"""Plain YAML data → `WorkflowDefinition`, with pydantic's errors turned into positioned,
actionable problems ("unknown step type 'shel_command' (did you mean 'shell_command'?)").
"""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from aromcp_workflows.definition import steps as step_models
from aromcp_workflows.definition.errors import DefinitionError, Problem, did_you_mean
from aromcp_workflows.definition.workflow import WorkflowDefinition
from aromcp_workflows.definition.yaml_source import Path, Positions

STEP_MODELS: dict[str, type[BaseModel]] = {
    model.model_fields["type"].annotation.__args__[0]: model  # type: ignore[union-attr]
    for model in step_models.Step.__origin__.__args__  # type: ignore[attr-defined]
}


def build_definition(data: Any, positions: Positions) -> WorkflowDefinition:
    """Validate one workflow document; every problem in it is reported at once."""
    if not isinstance(data, dict):
        kind = "empty" if data is None else type(data).__name__
        raise DefinitionError([positions.problem((), f"a workflow must be a mapping, not {kind}")])
    try:
        return WorkflowDefinition.model_validate(data)
    except ValidationError as exc:
        problems = [_problem(err, data, positions) for err in exc.errors()]
        problems.sort(key=lambda p: (p.line or 0, p.column or 0))
        raise DefinitionError(_dedupe(problems)) from None


def _problem(err: dict[str, Any], data: Any, positions: Positions) -> Problem:
    path, node, owner, label = _walk(data, err["loc"])
    kind = err["type"]
    where = f" in {label}" if label else ""
    if kind == "union_tag_invalid":
        tag = err["ctx"]["tag"]
        message = f"unknown step type {tag!r}{did_you_mean(tag, step_models.STEP_TYPES)}"
        return positions.problem((*path, "type"), message)
    if kind == "union_tag_not_found":
        return positions.problem(path, "step has no 'type' (one of: " + ", ".join(step_models.STEP_TYPES) + ")")
    if kind == "extra_forbidden":
        key = str(err["loc"][-1])
        allowed = _field_names(owner) if owner else []
        return positions.problem(path, f"unknown key {key!r}{where}{did_you_mean(key, allowed)}")
    if kind == "missing":
        key = path[-1] if path else str(err["loc"][-1])
        hint = " (or top-level 'method')" if key == "mcp" else ""
        return positions.problem(path[:-1], f"missing required key {key!r}{hint}{where}")
    message = err["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, "):]
    return positions.problem(path, f"{format_path(path)}: {message}")


def format_path(path: Path) -> str:
    """`steps[2].body[0].command`: how authors read a position in a document."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "document"


def _walk(data: Any, loc: tuple[Any, ...]) -> tuple[Path, Any, type[BaseModel] | None, str | None]:
    """Follow pydantic's `loc` through the data and the model tree together.

    Union tags that are not keys (`shell_command` in `("steps", 0, "shell_command", ...)`)
    are skipped in the data but select the step model.  Returns the data path, the node
    there, the model that owns the last key, and a label for messages.
    """
    path: list[str | int] = []
    node: Any = data
    model: type[BaseModel] | None = WorkflowDefinition
    owner: type[BaseModel] | None = WorkflowDefinition
    annotation: Any = None
    for part in loc:
        if isinstance(part, str) and part in STEP_MODELS and not (isinstance(node, dict) and part in node):
            model = owner = STEP_MODELS[part]
            continue
        key = _data_key(model, part)
        if model is not None:
            owner = model
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        elif model is not None and key in _field_names(model):
            pass  # a missing key: keep walking the model only
        else:
            continue  # a pydantic-internal label (function-after, literal[...]): skip
        path.append(key)
        if model is not None and isinstance(part, str) and key in _field_names(model):
            annotation = _field_annotation(model, key)
            model = _single_model(annotation)
        else:  # a list index or a dict key: the element type
            annotation = _element_annotation(annotation)
            model = _single_model(annotation)
    return tuple(path), node, owner, _label(owner)


def _data_key(model: type[BaseModel] | None, part: Any) -> Any:
    if model is not None and isinstance(part, str) and part in model.model_fields:
        return model.model_fields[part].alias or part
    return part


def _field_annotation(model: type[BaseModel], key: str) -> Any:
    for name, info in model.model_fields.items():
        if (info.alias or name) == key:
            return info.annotation
    return None


def _element_annotation(annotation: Any) -> Any:
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if origin in (list, tuple):
        return args[0] if args else None
    if origin is dict:
        return args[1] if len(args) == 2 else None
    for arg in args:  # Optional[list[X]] and friends
        inner = _element_annotation(arg)
        if inner is not None:
            return inner
    return None


def _single_model(annotation: Any) -> type[BaseModel] | None:
    """The one BaseModel an annotation stands for (through Optional/Annotated), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (list, dict, tuple):
        return None
    found = [m for m in map(_single_model, typing.get_args(annotation)) if m is not None]
    return found[0] if len(found) == 1 else None


def _label(model: type[BaseModel] | None) -> str | None:
    if model is None or model is WorkflowDefinition:
        return None
    for tag, step_model in STEP_MODELS.items():
        if step_model is model:
            return f"{tag} step"
    return SECTION_LABELS.get(model.__name__, model.__name__)


SECTION_LABELS = {
    "SubAgentTask": "sub-agent task",
    "InputSpec": "input",
    "ComputedFieldSpecModel": "computed field",
    "StateSchema": "state_schema",
    "DefaultState": "default_state",
    "WorkflowErrorHandling": "error_handling",
    "TaskErrorHandling": "task error_handling",
    "OnResume": "on_resume",
    "ValidationSpec": "validation",
    "StateUpdateSpec": "state_update",
    "UpdateItem": "update",
    "McpSpec": "mcp",
    "SubAgentErrorPolicy": "on_sub_agent_error",
    "ErrorCollection": "error_collection",
}


def _field_names(model: type[BaseModel]) -> list[str]:
    return [info.alias or name for name, info in model.model_fields.items()]


def _dedupe(problems: list[Problem]) -> list[Problem]:
    seen, unique = set(), []
    for problem in problems:
        key = (problem.message, problem.line, problem.column)
        if key not in seen:
            seen.add(key)
            unique.append(problem)
    return unique
