"""An MCP server's command line, read in a module that imports no SDK.

The recipe checks ``--mcp`` values when it resolves options, which every command that takes
options does (``ctxwright proxy`` reads its telemetry settings that way). Reading a command
line is ``shlex``'s job; importing ``mcp/connection.py`` for it would load the MCP SDK and
pydantic (about a second of CPU) into commands that never start a server.
``mcp/connection.py`` uses the same function when it starts one.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from ctxwright.errors import McpServerError

__all__ = ["parse_command"]


def parse_command(spec: str | Sequence[str]) -> list[str]:
    """``argv`` of a server given as one string (split like a shell, ``shlex``) or a list."""
    argv = shlex.split(spec) if isinstance(spec, str) else [str(a) for a in spec]
    if not argv or not argv[0]:
        raise McpServerError(
            f"an MCP server command is empty ({spec!r}): give the command that starts it, e.g. "
            "--mcp 'python my_server.py' (library: mcp_servers=['python my_server.py'])"
        )
    return argv
