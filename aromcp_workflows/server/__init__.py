"""The MCP surface: tools, prompts and resources (`mcp`), what leaves the server (`guard`), the
user asked directly (`elicit`), compact tool schemas (`schemas`), every stdio line answered
(`stdio_guard`)."""
