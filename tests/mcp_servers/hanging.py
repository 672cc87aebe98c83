"""An MCP server (the SDK's ``MCPServer``) whose ``hang`` tool never answers; ``ping``
answers normally."""

from __future__ import annotations

import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("hanging")


@server.tool()
def ping() -> str:
    """Answer pong."""
    return "pong"


@server.tool()
def hang() -> str:
    """Never return (the process blocks, as a stuck server does)."""
    while True:
        time.sleep(60)


if __name__ == "__main__":
    server.run()
