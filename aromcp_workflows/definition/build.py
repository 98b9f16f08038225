"""Plain YAML data → `WorkflowDefinition`, with pydantic's errors turned into positioned,
actionable problems ("unknown step type 'shel_command' (did you mean 'shell_command'?)").
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from aromcp_workflows.definition import steps as step_models
from aromcp_workflows.definition.errors import DefinitionError, DefinitionProblem, did_you_mean
from aromcp_workflows.definition.workflow import WorkflowDefinition
from aromcp_workflows.definition.yaml_source import NodePath, Positions

STEP_MODELS: dict[str, type[BaseModel]] = {
    model.model_fields["type"].annotation.__args__[0]: model
    for model in step_models.Step.__origin__.__args__  # type: ignore[attr-defined]
}


STEP_LIST_KEYS = frozenset({"steps", "then", "else", "then_steps", "else_steps", "body",
                            "on_failure", "cleanup_on_error"})
TYPE_WORDS = {
    "string_type": "a string",
    "bool_type": "a boolean (true or false)",
    "bool_parsing": "a boolean (true or false)",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
}
RANGE_KINDS = ("greater_than_equal", "less_than_equal", "greater_than", "less_than")


@dataclass
class _Found:
    """One pydantic error translated, with what is needed to merge it with its siblings."""

    path: NodePath
    message: str
    kind: str = "other"          # "missing" | "extra" | "type" | "other"
    key: str | None = None
    suggestion: str | None = None
    expected: list[str] = field(default_factory=list)
    subject: str = ""
    given: Any = None

# Keys the seed design's snippets omit ("# Steps if true", "# Retry logic"): say what
# a real workflow needs there.
SEED_PLACEHOLDERS = {
    "mcp": "a step that runs names its tool (mcp: {method: ..., params: ...})",
    "command": "a step that runs needs the command",
    "steps": "a sub-agent task needs the steps it runs",
}


def build_definition(data: Any, positions: Positions) -> WorkflowDefinition:
    """Validate one workflow document; every problem in it is reported at once."""
    if not isinstance(data, dict):
        raise DefinitionError([positions.problem(
            (), "a workflow must be a mapping of keys (name, steps, ...), not " + describe(data))])
    try:
        return WorkflowDefinition.model_validate(data)
    except ValidationError as exc:
        found = [_translate(dict(err), data) for err in exc.errors()]
        problems = [positions.problem(f.path, f.message) for f in _merged(found)]
        problems.sort(key=lambda p: (p.line or 0, p.column or 0))
        raise DefinitionError(_dedupe(problems)) from None


def describe(value: Any) -> str:
    """How a wrong value reads in a message: `the string 'x'`, `the number 3`, `a list`."""
    if value is None:
        return "empty (null)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"the string {shown!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _translate(err: dict[str, Any], data: Any) -> _Found:
    path, node, owner, label = _walk(data, err["loc"])
    kind = err["type"]
    where = f" in {label}" if label else ""
    key = str(path[-1]) if path else ""
    if kind == "union_tag_invalid":
        tag = err["ctx"]["tag"]
        message = f"unknown step type {tag!r}{did_you_mean(tag, step_models.STEP_TYPES)}"
        return _Found((*path, "type"), message)
    if kind == "union_tag_not_found":
        return _Found(path, "step has no 'type' (one of: " + ", ".join(step_models.STEP_TYPES) + ")")
    if kind == "extra_forbidden":
        key = str(err["loc"][-1])
        allowed = _field_names(owner) if owner else []
        hint = did_you_mean(key, allowed)
        suggestion = hint.split("'")[1] if hint else None
        if not hint and owner is not None and owner.__name__ in ("DefaultState", "StateSchema"):
            hint = f" (state values go under a tier: raw.{key} or state.{key})"
        return _Found(path, f"unknown key {key!r}{where}{hint}", "extra", key, suggestion)
    if kind == "missing":
        hint = " (or top-level 'method')" if key == "mcp" else ""
        seed = SEED_PLACEHOLDERS.get(str(key), "") if key != "steps" or "sub-agent task" in where else ""
        seed = f"; the seed design's snippets leave it out as a placeholder, but {seed}" if seed else ""
        return _Found(path[:-1], f"missing required key {key!r}{hint}{where}{seed}", "missing", key)
    subject = _subject(path, owner, where)
    if kind in TYPE_WORDS:
        return _Found(path, "", "type", key, expected=[TYPE_WORDS[kind]], subject=subject,
                      given=err.get("input"))
    if kind in RANGE_KINDS:
        return _Found(path, f"{subject} must be {_range_text(owner, key, err)}, not {err.get('input')!r}")
    if kind == "literal_error":
        values = _literal_values(_field_annotation(owner, key) if owner else None)
        given = err.get("input")
        choices = ", ".join(repr(v) for v in values) or err["ctx"].get("expected", "")
        hint = did_you_mean(str(given), [str(v) for v in values])
        return _Found(path, f"{subject} must be one of {choices}, not {given!r}{hint}")
    # our own validators' messages are complete sentences; `ctx.key` says where to point
    message = str(err["msg"]).removeprefix("Value error, ")
    ctx_key = (err.get("ctx") or {}).get("key")
    if ctx_key and isinstance(node, dict) and ctx_key in node:
        return _Found((*path, ctx_key), message)
    if kind == "value_error" or ctx_key:
        return _Found(path, message)
    return _Found(path, f"{subject}: {message.removeprefix('Input should be ')}")


def _subject(path: NodePath, owner: type[BaseModel] | None, where: str) -> str:
    """What a type or range message is about: `'max_parallel' in parallel_foreach step`."""
    if not path:
        return "the document"
    last = path[-1]
    parent = path[-2] if len(path) > 1 else None
    if isinstance(last, int):
        if parent in STEP_LIST_KEYS:
            return "a step"
        return f"item {last} of {parent!r}" if parent is not None else f"item {last}"
    if owner is not None and str(last) in _field_names(owner):
        return f"{last!r}{where}"
    return repr(format_path(path[-2:]) if parent is not None else str(last))


def _merged(found: list[_Found]) -> list[_Found]:
    """One message per mistake.

    A misspelt required key yields both "unknown key 'comand'" and "missing 'command'";
    only the first is useful.  A value that fits no member of a union (`when: 3`) yields
    one error per member; they become one "must be a string or true or false".
    """
    typos = {(f.path[:-1], f.suggestion) for f in found if f.kind == "extra"}
    merged: list[_Found] = []
    by_path: dict[NodePath, _Found] = {}
    for item in found:
        if item.kind == "missing" and (item.path, item.key) in typos:
            continue
        if item.kind == "type":
            if item.path in by_path:
                first = by_path[item.path]
                first.expected += [e for e in item.expected if e not in first.expected]
                continue
            by_path[item.path] = item
        merged.append(item)
    for item in by_path.values():
        item.message = f"{item.subject} must be {' or '.join(item.expected)}, not {describe(item.given)}"
        item.message += _type_hint(item)
    return merged


def _type_hint(item: _Found) -> str:
    if item.subject == "a step":
        if isinstance(item.given, str) and item.given in step_models.STEP_TYPES:
            return f" (did you mean '- type: {item.given}'?)"
        return " with a 'type' key"
    if item.key in ("state_update", "error_state_update") and isinstance(item.given, str):
        return f" (write {item.key}: {{path: {item.given}}})"
    if item.expected[0] == "a string" and isinstance(item.given, (bool, int, float)):
        return " (put it in quotes to make it text)"
    if "a list" in item.expected and isinstance(item.given, str):
        return " (write one '- item' per line, or [a, b])"
    return ""


def _range_text(owner: type[BaseModel] | None, key: str, err: dict[str, Any]) -> str:
    low = high = None
    info = owner.model_fields.get(key) if owner is not None else None
    for constraint in (info.metadata if info is not None else []):
        low = getattr(constraint, "ge", None) if getattr(constraint, "ge", None) is not None else low
        high = getattr(constraint, "le", None) if getattr(constraint, "le", None) is not None else high
    if low is not None and high is not None:
        return f"between {low} and {high}"
    ctx = err.get("ctx") or {}
    if "ge" in ctx:
        return f"at least {ctx['ge']}"
    if "le" in ctx:
        return f"at most {ctx['le']}"
    return str(err["msg"]).replace("Input should be ", "")


def _literal_values(annotation: Any) -> list[Any]:
    if typing.get_origin(annotation) is typing.Literal:
        return list(typing.get_args(annotation))
    values: list[Any] = []
    for arg in typing.get_args(annotation):
        values += _literal_values(arg)
    return values


def format_path(path: NodePath) -> str:
    """`steps[2].body[0].command`: how authors read a position in a document."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "document"


def _walk(data: Any, loc: tuple[Any, ...]) -> tuple[NodePath, Any, type[BaseModel] | None, str | None]:
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
    entry: str | None = None  # the dict key that selected `model` (input 'branch')
    owner_entry: str | None = None
    for part in loc:
        if isinstance(part, str) and part in STEP_MODELS and not (isinstance(node, dict) and part in node):
            model = owner = STEP_MODELS[part]
            owner_entry = None
            continue
        key = _data_key(model, part)
        if model is not None:
            owner, owner_entry = model, entry
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
            model, entry = _single_model(annotation), None
        else:  # a list index or a dict key: the element type
            annotation = _element_annotation(annotation)
            model = _single_model(annotation)
            entry = key if isinstance(key, str) else None
    label = _label(owner)
    if label and owner_entry:
        label = f"{label} {owner_entry!r}"
    return tuple(path), node, owner, label


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


def _dedupe(problems: list[DefinitionProblem]) -> list[DefinitionProblem]:
    seen, unique = set(), []
    for problem in problems:
        key = (problem.message, problem.line, problem.column)
        if key not in seen:
            seen.add(key)
            unique.append(problem)
    return unique
