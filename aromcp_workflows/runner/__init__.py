"""The headless agent: an MCP client that performs atomic steps without an LLM."""
