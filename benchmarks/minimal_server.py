"""The reference for server start-up and round-trip benchmarks: a bare `MCPServer` with one
no-op tool, served over stdio exactly as aromcp-workflows is."""

from mcp.server.mcpserver import MCPServer

mcp = MCPServer("minimal")


@mcp.tool()
def noop(x: int = 0) -> dict[str, int]:
    """Return its argument."""
    return {"x": x}


if __name__ == "__main__":
    mcp.run()
