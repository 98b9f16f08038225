"""JSON Schema of the workflow language, for editors (`# yaml-language-server: $schema=`).

Generated from the pydantic models so it cannot drift from what the loader accepts; the
accepted aliases (`then_steps`, `else_steps`, top-level `method`/`params`) are added,
because pydantic's schema only names the primary spelling.
"""

from __future__ import annotations

import copy
from typing import Any

from aromcp_workflows.definition.workflow import NAME_PATTERN, SECRET_HELP, WorkflowDefinition

SCHEMA_ID = "https://aromcp.dev/schemas/workflow.schema.json"


def workflow_json_schema() -> dict[str, Any]:
    """A draft 2020-12 schema accepting a workflow, a `workflow:` wrapper or a `workflows:` list."""
    body = WorkflowDefinition.model_json_schema(by_alias=True, mode="validation")
    defs = body.pop("$defs", {})
    _add_aliases(defs)
    _add_checks(body, defs)
    body = _without_titles(body)
    defs = {name: _without_titles(schema) for name, schema in defs.items()}
    defs["WorkflowDefinition"] = body
    ref = {"$ref": "#/$defs/WorkflowDefinition"}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "aromcp-workflows workflow",
        "anyOf": [
            ref,
            {"type": "object", "properties": {"workflow": ref}, "required": ["workflow"],
             "additionalProperties": False},
            {"type": "object", "properties": {"workflows": {"type": "array", "items": ref}},
             "required": ["workflows"], "additionalProperties": False},
        ],
        "$defs": defs,
    }


def _add_aliases(defs: dict[str, Any]) -> None:
    conditional = defs.get("ConditionalStep", {}).get("properties", {})
    if "then" in conditional:
        conditional["then_steps"] = copy.deepcopy(conditional["then"])
    if "else" in conditional:
        conditional["else_steps"] = copy.deepcopy(conditional["else"])
    mcp = defs.get("McpCallStep")
    if mcp is not None:
        mcp["properties"]["method"] = {"type": "string"}
        mcp["properties"]["params"] = {"type": "object"}
        mcp["required"] = [r for r in mcp.get("required", []) if r != "mcp"] + []
        mcp.setdefault("anyOf", [{"required": ["mcp"]}, {"required": ["method"]}])
    parallel = defs.get("ParallelForeachStep")
    if parallel is not None:
        policy = parallel["properties"]["on_sub_agent_error"]
        parallel["properties"]["on_sub_agent_error"] = {
            "anyOf": [policy, {"enum": ["retry_failed", "continue", "fail_all"]}]}
    task = defs.get("SubAgentTask")
    if task is not None:
        inputs = task["properties"]["inputs"]
        inputs["additionalProperties"] = {"anyOf": [inputs["additionalProperties"],
                                                    {"not": {"type": "object"}}]}


def _add_checks(body: dict[str, Any], defs: dict[str, Any]) -> None:
    """Rules the models enforce in validators, which pydantic cannot export by itself."""
    body["properties"]["name"]["pattern"] = NAME_PATTERN.pattern
    schema = defs.get("StateSchema")
    if schema is not None:  # `name: type`, or a mapping that may say `secret: true`
        declared = {"description": "a declared field: its type (`files: array`) or a mapping such as "
                                   "`{type: string, secret: true}`",
                    "properties": {"type": {"type": "string"}, "description": {"type": "string"},
                                   "secret": {"type": "boolean", "description": SECRET_HELP}}}
        for tier in ("raw", "state"):
            schema["properties"][tier]["additionalProperties"] = declared
    update = defs.get("StateUpdateStep")
    if update is not None:  # `path` or `updates`, exactly one
        update["oneOf"] = [{"required": ["path"]}, {"required": ["updates"]}]


def _without_titles(node: Any) -> Any:
    """Pydantic's auto titles bloat the file and add nothing for editors."""
    if isinstance(node, dict):
        return {k: _without_titles(v) for k, v in node.items() if k != "title" or not isinstance(v, str)}
    if isinstance(node, list):
        return [_without_titles(v) for v in node]
    return node
