"""Tool schemas as small as they can be while still saying everything a client checks.

An orchestrator model reads `tools/list` in every request, so every byte of it is paid
again and again.  pydantic's schemas repeat what a client does not need: titles that
echo the property names, `default: null`, `anyOf` pairs for optional values, and, in the
output schemas, the full shape of nested results.  Input schemas keep every property
and constraint (the client builds calls from them); output schemas keep the top-level
fields and their JSON types, which is what a client validates `structuredContent`
against (nested objects are `{"type": "object"}`, which every reply still meets).
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer

JSON_TYPES = {"object", "array", "string", "number", "integer", "boolean", "null"}


def compact_tool_schemas(mcp: MCPServer) -> None:
    """Rewrite every registered tool's input and output schema in their compact forms."""
    for tool in mcp._tool_manager.list_tools():
        tool.parameters = strip(tool.parameters)
        if tool.output_schema is not None:
            tool.output_schema = shallow_output(tool.output_schema)


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


def shallow_output(schema: dict[str, Any]) -> dict[str, Any]:
    """An object schema with each top-level property reduced to its JSON type(s)."""
    properties = {name: _json_type(prop) for name, prop in schema.get("properties", {}).items()}
    shallow: dict[str, Any] = {"type": "object", "properties": properties}
    if schema.get("required"):
        shallow["required"] = schema["required"]
    return shallow


def _json_type(prop: dict[str, Any]) -> dict[str, Any]:
    """`{"type": T}` or `{"type": [T, "null"]}` for a property; `{}` when it may be anything."""
    types: list[str] = []
    for option in prop.get("anyOf", [prop]):
        if "$ref" in option:
            kind: Any = "object"
        else:
            kind = option.get("type")
        for name in kind if isinstance(kind, list) else [kind]:
            if name not in JSON_TYPES:
                return {}  # a property that may hold any value says so by saying nothing
            if name not in types:
                types.append(name)
    return {"type": types[0] if len(types) == 1 else types}
