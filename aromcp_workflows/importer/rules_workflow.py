"""Rewrite rules for a whole workflow: inputs, state, computed fields, sub-agent tasks.

The order matters: state fields are collected first (so `this.x` can be sent to the tier
that holds `x`), inputs next (so a bare input name can become `inputs.x` unless a state
field of that name shadows it), then the steps of the workflow and of each task.
"""

from __future__ import annotations

from typing import Any

from ruamel.yaml.comments import CommentedMap

from aromcp_workflows.definition import json_type
from aromcp_workflows.importer.reading import delete_key, line_of, new_map
from aromcp_workflows.importer.report import Notes
from aromcp_workflows.importer.rules_steps import translate_steps
from aromcp_workflows.importer.scope import ImportScope

INPUT_TYPES = ("string", "number", "integer", "boolean", "array", "object")
TASK_CONTEXT = {"file_path": "item", "item": "item", "index": "index", "task_id": "task.task_id"}


def translate_workflow(doc: Any, notes: Notes) -> None:
    """Translate one AroMCP workflow document in place (refusals go to `notes`)."""
    if not isinstance(doc, CommentedMap) or "steps" not in doc:
        notes.refuse(1, "not a workflow: expected a mapping with 'name' and 'steps'")
        return
    _drop_top_level(doc, notes)
    fields = _state_fields(doc)
    names = _inputs(doc, notes, "inputs", task=False)
    names += _initial_inputs(doc, notes)
    scope = ImportScope(notes, inputs=frozenset(names), fields=fields)
    _state(doc, scope)
    doc["steps"] = translate_steps(doc["steps"], scope, line_of(doc, "steps"))
    tasks = doc.get("sub_agent_tasks")
    if isinstance(tasks, CommentedMap):
        for name in list(tasks):
            _task(tasks, name, scope)
    _add_fields(doc, scope.new_fields)


def _add_fields(doc: CommentedMap, fields: dict[str, Any]) -> None:
    """State fields the rules introduced (loop counters) get their initial value."""
    if not fields:
        return
    if not isinstance(doc.get("default_state"), CommentedMap):
        doc.insert(list(doc.keys()).index("steps"), "default_state", new_map())
    initial = doc["default_state"]
    if not isinstance(initial.get("state"), CommentedMap):
        initial["state"] = new_map()
    for name, value in fields.items():
        initial["state"].setdefault(name, value)


def _drop_top_level(doc: CommentedMap, notes: Notes) -> None:
    if "config" in doc:
        notes.rewrite(line_of(doc, "config"), f"config: {dict(doc['config'] or {})}", "(removed)",
                      "AroMCP's workflow-wide retries/timeout have no counterpart; set on_error/timeout per step")
        delete_key(doc, "config")
    schema = doc.get("state_schema")
    if isinstance(schema, CommentedMap) and "inputs" in schema:
        notes.rewrite(line_of(schema, "inputs"), "state_schema.inputs", "(removed)",
                      "inputs are declared under `inputs:`")
        delete_key(schema, "inputs")


def _initial_inputs(doc: CommentedMap, notes: Notes) -> list[str]:
    """`default_state.inputs` becomes each input's `default`: AroMCP's code starts the
    inputs tier from it (a declared input's own `default` is not applied there), and
    inputs are set at start here.  Returns the names of inputs it had to declare."""
    initial = doc.get("default_state")
    values = initial.get("inputs") if isinstance(initial, CommentedMap) else None
    if not isinstance(values, dict):
        if isinstance(initial, CommentedMap) and "inputs" in initial:
            notes.refuse(line_of(initial, "inputs"), "default_state.inputs must be a mapping of input names to "
                                                     "values; give each input a `default` instead")
        return []
    if not isinstance(doc.get("inputs"), CommentedMap):
        doc.insert(list(doc.keys()).index("default_state"), "inputs", new_map())
    declared, added = doc["inputs"], []
    for name, value in values.items():
        line = line_of(values, name, line_of(initial, "inputs"))
        spec = declared.get(name)
        if not isinstance(spec, CommentedMap):
            declared[name] = new_map(type=json_type(value), required=False, default=value)
            added.append(str(name))
            notes.rewrite(line, f"default_state.inputs.{name}", f"inputs.{name}: {{default: {value!r}}}",
                          "an input AroMCP starts from default_state; declared here, with that default")
            continue
        why = "AroMCP's code starts the input from default_state.inputs"
        if "default" in spec and spec["default"] != value:
            why += f" and does not apply its declared default ({spec['default']!r}); that one is replaced"
        spec["default"] = value
        if spec.get("required"):
            spec["required"] = False
        notes.rewrite(line, f"default_state.inputs.{name}", f"inputs.{name}.default: {value!r}", why)
    delete_key(initial, "inputs")
    if not initial:
        delete_key(doc, "default_state")
    return added


def _state_fields(doc: CommentedMap) -> dict[str, str]:
    """Every declared state field → its tier (raw, state or computed)."""
    fields: dict[str, str] = {}
    for section in ("default_state", "state_schema"):
        block = doc.get(section)
        if not isinstance(block, dict):
            continue
        for tier in ("state", "raw", "computed"):
            if isinstance(block.get(tier), dict):
                fields.update(dict.fromkeys(block[tier], tier))
    return fields


def _inputs(doc: CommentedMap, notes: Notes, key: str, *, task: bool) -> list[str]:
    """Translate input declarations; returns the input names."""
    inputs = doc.get(key)
    if not isinstance(inputs, dict):
        return []
    if isinstance(inputs.get("required"), list) or isinstance(inputs.get("optional"), dict):
        notes.refuse(line_of(doc, key), "inputs written as `required: [...]`/`optional: {...}` (AroMCP's later "
                                        "Temporal dialect) cannot be translated; declare each input as "
                                        "`name: {type, required, default}`")
        return []
    for name in list(inputs):
        line = line_of(inputs, name)
        spec = inputs[name]
        if not isinstance(spec, dict):
            inputs[name] = spec = new_map(type=str(spec), required=not task)
            notes.rewrite(line, f"{name}: {spec['type']}",
                          f"{name}: {{type: {spec['type']}, required: {str(not task).lower()}}}",
                          "AroMCP's short form; its inputs are required unless they say otherwise")
        _input_spec(name, spec, line, notes, task=task)
    return list(inputs)


def _input_spec(name: str, spec: CommentedMap, line: int, notes: Notes, *, task: bool) -> None:
    if spec.get("type", "string") not in INPUT_TYPES:
        notes.refuse(line, f"input '{name}' has type {spec.get('type')!r}; use one of {', '.join(INPUT_TYPES)}")
    if "validation" in spec:
        notes.rewrite(line_of(spec, "validation"), f"{name}.validation", "(removed)",
                      "input validation rules are not checked here")
        delete_key(spec, "validation")
    if task:
        _task_input(name, spec, line, notes)
    elif "required" not in spec and "default" not in spec:
        spec["required"] = True
        notes.rewrite(line, f"{name} (required not given)", "required: true", "AroMCP's default is required")


def _task_input(name: str, spec: CommentedMap, line: int, notes: Notes) -> None:
    """AroMCP fills a task's `file_path` (and inputs named like item/index/task_id) from the item."""
    if name in TASK_CONTEXT and "default" not in spec:
        spec["default"] = "{{ " + TASK_CONTEXT[name] + " }}"
        notes.rewrite(line, f"task input {name}", f"default: {spec['default']}",
                      "AroMCP fills this input from the task's item")
    if spec.get("required"):
        spec["required"] = False
        notes.rewrite(line_of(spec, "required", line), f"{name}.required: true", "required: false",
                      "AroMCP does not check a task's inputs")


def _state(doc: CommentedMap, scope: ImportScope) -> None:
    schema = doc.get("state_schema")
    computed = schema.get("computed") if isinstance(schema, dict) else None
    if not isinstance(computed, dict):
        return
    for name in list(computed):
        spec = computed[name]
        line = line_of(computed, name)
        if not isinstance(spec, CommentedMap):
            scope.notes.refuse(line, f"computed field '{name}' is a bare type; AroMCP computes nothing for it: "
                                     "give it `from` and `transform`, or move it to state")
            continue
        _computed(name, spec, line, scope)


def _computed(name: str, spec: CommentedMap, line: int, scope: ImportScope) -> None:
    sources = spec.get("from")
    if isinstance(sources, str):
        new = scope.source(sources, line_of(spec, "from", line))
        if new is not None:
            spec["from"] = new
    elif isinstance(sources, list):
        for i, path in enumerate(sources):
            new = scope.source(str(path), line_of(sources, i, line))
            if new is not None:
                sources[i] = new
    if isinstance(spec.get("transform"), str):
        spec["transform"] = scope.transform(spec["transform"], line_of(spec, "transform", line), f"computed {name}")
    if "on_error" not in spec:
        spec["on_error"] = "use_fallback"
        scope.notes.rewrite(line, f"computed {name} (on_error not given)", "on_error: use_fallback",
                            "AroMCP's default: a failing transform gives the fallback (null) instead of failing")


def _task(tasks: CommentedMap, name: str, outer: ImportScope) -> None:
    task = tasks[name]
    line = line_of(tasks, name)
    if not isinstance(task, CommentedMap):
        outer.notes.refuse(line, f"sub-agent task '{name}' must be a mapping with steps")
        return
    for key, why in (("prompt_template", "the server's own sub-agent prompt is used here"),
                     ("context_template", "tasks get item, index and task inputs here"),
                     ("default_state", "AroMCP's loader ignores a task's default_state; `this.x` in a task "
                                       "reads the workflow's state"),
                     ("state_schema", "AroMCP's loader ignores a task's state_schema (its computed fields "
                                      "never exist); `this.x` in a task reads the workflow's state")):
        if key in task:
            outer.notes.rewrite(line_of(task, key, line), f"sub_agent_tasks.{name}.{key}", "(removed)", why)
            delete_key(task, key)
    names = _inputs(task, outer.notes, "inputs", task=True)
    scope = outer.inner(task_inputs=frozenset(names))
    if "steps" not in task:
        outer.notes.refuse(line, f"sub-agent task '{name}' has no steps (a prompt-only task); "
                                 "write the task's work as steps")
        return
    task["steps"] = translate_steps(task["steps"], scope, line_of(task, "steps", line))
