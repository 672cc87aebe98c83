"""An MCP server (the SDK's ``MCPServer``) whose process dies in the middle of a call to
``crash``; ``ping`` answers normally until then."""

from __future__ import annotations

import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("crashing")


@server.tool()
def ping() -> str:
    """Answer pong."""
    return "pong"


@server.tool()
def crash() -> str:
    """Kill this server's own process mid-call."""
    os._exit(3)


if __name__ == "__main__":
    server.run()
