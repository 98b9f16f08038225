"""Tool schemas as small as they can be while still saying everything a client checks.

An orchestrator model reads `tools/list` in every request, so every byte of it is paid
again and again.  pydantic's schemas repeat what a client does not need: titles that
echo the property names, `default: null`, `anyOf` pairs for optional values.  Input
schemas keep every property and constraint: the client builds calls from them.

Output schemas are not advertised.  Every tool still returns structured content (its
typed result, validated by the SDK against the result model before it leaves), and the
text content carries the same JSON; no client we serve reads an output schema (Claude
Code hands the model a tool's name, description and input schema, and the result's
JSON), while the schemas were a quarter of the list.  The result shapes are in
docs/mcp.md.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer


def compact_tool_schemas(mcp: MCPServer) -> None:
    """Every registered tool's input schema in its compact form, and no output schema in
    the listing (the tool's result model still shapes and checks its structured content)."""
    for tool in mcp._tool_manager.list_tools():
        tool.parameters = optional_without_null(strip(tool.parameters))
        tool.output_schema = None  # the listed schema only: `fn_metadata` keeps the result model


def strip(node: Any) -> Any:
    """The schema without titles, null defaults, `additionalProperties: true`, and with an
    optional simple type as `"type": [T, "null"]` instead of an `anyOf`."""
    if isinstance(node, dict):
        options = node.get("anyOf")
        if isinstance(options, list) and len(options) == 2 and {"type": "null"} in options:
            other = next(o for o in options if o != {"type": "null"})
            if set(other) <= {"type", "additionalProperties"} and isinstance(other.get("type"), str):
                node = {**{k: v for k, v in node.items() if k != "anyOf"}, "type": [other["type"], "null"]}
        return {k: strip(v) for k, v in node.items()
                if not (k == "title" and isinstance(v, str)) and not (k == "default" and v is None)
                and not (k == "additionalProperties" and v is True)}
    if isinstance(node, list):
        return [strip(v) for v in node]
    return node


def optional_without_null(schema: dict[str, Any]) -> dict[str, Any]:
    """An argument that may be left out needs no `null` in its type: leaving it out is how a
    client says "none" (the server still accepts an explicit null)."""
    required = set(schema.get("required", []))
    properties = {}
    for name, prop in schema.get("properties", {}).items():
        kind = prop.get("type")
        if name not in required and isinstance(kind, list) and "null" in kind:
            rest = [k for k in kind if k != "null"]
            prop = {**prop, "type": rest[0] if len(rest) == 1 else rest}
        properties[name] = prop
    return {**schema, "properties": properties} if "properties" in schema else schema
