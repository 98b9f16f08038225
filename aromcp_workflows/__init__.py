"""aromcp-workflows: an MCP server that runs YAML workflows for coding agents.

The server holds the program counter: it evaluates conditions, loops and data
transforms itself and hands the agent one atomic step at a time.
"""

__version__ = "0.1.0"
