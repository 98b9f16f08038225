"""The MCP surface: tools, prompts and resources (`mcp`) and their pydantic shapes (`models`)."""
