"""The limits of one MCP server connection, in a module that imports nothing.

They are read where the SDK is not needed: the recipe's options print them in ``--help``
(``recipe/options.py``), and importing ``mcp/connection.py`` for two numbers would load the
MCP SDK (about half a second) into every ``ctxwright`` command, ``--version`` included.
``mcp/connection.py`` applies them.
"""

from __future__ import annotations

__all__ = ["DEFAULT_RESULT_CAP_MB", "DEFAULT_STARTUP_TIMEOUT_S", "DEFAULT_TIMEOUT_S"]

#: Seconds a tool call may take before it is answered with a timeout error.
DEFAULT_TIMEOUT_S = 60.0
#: Seconds a server has to start, answer ``initialize`` and list its tools.
DEFAULT_STARTUP_TIMEOUT_S = 30.0
#: Megabytes one message from a server may take (a tool result, a tool listing). The loop
#: keeps at most ``MAX_RESULT_CHARS`` (200,000) characters of a result and compaction far
#: fewer (the rest is saved for ``read_result``): 4 MB leaves room for JSON escaping (up to
#: six bytes a character) and a result sent twice (text and ``structuredContent``), and is
#: read in milliseconds.
DEFAULT_RESULT_CAP_MB = 4.0
