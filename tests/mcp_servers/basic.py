"""A normal MCP server over stdio, written with the SDK's own ``MCPServer``: a few tools,
one returning an image, one reporting an error (``isError``), one raising a protocol error.

Run by the tests as ``python tests/mcp_servers/basic.py``; ``--name NAME`` sets the server's
name (two copies of it are two sources of the same tool names).
"""

from __future__ import annotations

import base64
import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ImageContent, TextContent

NAME = sys.argv[sys.argv.index("--name") + 1] if "--name" in sys.argv else "basic"
server = MCPServer(NAME)


@server.tool()
def add(a: int, b: int) -> str:
    """Add two integers and return the sum."""
    return str(a + b)


@server.tool()
def echo(text: str) -> str:
    """Echo the text back, unchanged."""
    return text


@server.tool()
def picture() -> list[TextContent | ImageContent]:
    """Return a caption and a tiny PNG image."""
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 16).decode()
    return [TextContent(type="text", text="a red dot"), ImageContent(type="image", data=png, mimeType="image/png")]


@server.tool()
def fail(reason: str) -> str:
    """Always fails with the given reason (an isError result)."""
    raise ToolError(f"failed on purpose: {reason}")


@server.tool(name="dotted.name-tool")
def dotted() -> str:
    """A tool whose MCP name has a dot, which OpenAI function names do not allow."""
    return "dotted ok"


if __name__ == "__main__":
    server.run()
