"""One MCP server over stdio, driven by the official ``mcp`` SDK from synchronous code.

Why a thread of its own: the SDK is async (anyio) and its ``Client`` must be entered and
left in one task, while ctxwright's agent loop is synchronous and runs each tool call in a
worker thread. Each :class:`McpConnection` owns an event loop on a dedicated daemon thread;
one long-lived task there holds the ``Client`` open (the subprocess, the initialize
handshake, the stdio pipes) until :meth:`McpConnection.close`, and every list or call is
submitted to that loop and waited for with a deadline. On POSIX the pipes are ctxwright's own
transport (``mcp/transport.py``: linear-time reading, a cap on one message, invalid lines
counted, the server's process group ended on every exit path, ctxwright's death included);
elsewhere the SDK's ``stdio_client``. Closing ends that task, which closes the server's
stdin, waits, then kills its process group -- so no server outlives the harness.

The handshake is the ``initialize`` one (``mode="legacy"``), the protocol revision every
deployed server speaks; on it a server announces a changed tool list with
``notifications/tools/list_changed`` on the same pipe, which :meth:`McpConnection.changed`
reports.

Failures, each in words that name the server's command:

* the command does not exist, exits before answering, or does not answer ``initialize`` in
  time: :class:`~ctxwright.errors.McpServerError` from the constructor, with the last lines
  of its stderr;
* a call that takes longer than the timeout, an error response, a server that exited
  mid-call, an answer over the size cap or not valid JSON-RPC (failed at once, the
  connection reads on): :class:`~ctxwright.errors.McpToolError`, which the tool registry
  turns into a tool error the model reads. After an exit every later call fails at once
  with the same cause; the other servers and tools are not affected.

The SDK's loggers get a ``NullHandler``: without one, Python's last-resort handler printed
a traceback to stderr for each line a server wrote that was not JSON-RPC. What a server
wrote that way is counted instead (:attr:`McpConnection.lines`), and said once, in one line.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import os
import shlex
import tempfile
import threading
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Any, TextIO, cast

import mcp.types as mt
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

from ctxwright.errors import McpServerError, McpToolError
from ctxwright.mcp.command import parse_command
from ctxwright.mcp.limits import DEFAULT_RESULT_CAP_MB, DEFAULT_STARTUP_TIMEOUT_S, DEFAULT_TIMEOUT_S
from ctxwright.mcp.lines import LineStats
from ctxwright.mcp.transport import DROPPED, stdio_transport

__all__ = [
    "DEFAULT_RESULT_CAP_MB",
    "DEFAULT_STARTUP_TIMEOUT_S",
    "DEFAULT_TIMEOUT_S",
    "McpConnection",
    "parse_command",
]

logging.getLogger("mcp").addHandler(logging.NullHandler())

#: Most pages of ``tools/list`` followed: a server whose cursor never ends cannot hang startup.
MAX_LIST_PAGES = 1000
#: Seconds :meth:`McpConnection.close` waits for the transport's shutdown (stdin close, 2 s
#: grace, SIGTERM, 2 s, SIGKILL) before it gives up on the loop.
_CLOSE_WAIT_S = 10.0
_STDERR_TAIL_BYTES = 4096


class McpConnection:
    """A started, initialized MCP server and its tool listing; see the module docstring.

    Args:
        command: the server's command line: a string (split like a shell) or an argv list.
        timeout: seconds each ``tools/call`` may take (default :data:`DEFAULT_TIMEOUT_S`).
        startup_timeout: seconds to start, initialize and list the tools.
        env: extra environment variables for the server, over the SDK's safe default set
            (``PATH``, ``HOME``, ``USER``, ...; the SDK does not pass the whole environment).
        cwd: the server's working directory.
        on_change: called (on the connection's thread) when the server sends
            ``notifications/tools/list_changed``.
        result_cap_mb: megabytes one message from the server may take; a call answered
            with more fails (``mcp_result_too_large``) and the connection goes on.
    """

    def __init__(
        self,
        command: str | Sequence[str],
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT_S,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        on_change: Callable[[McpConnection], None] | None = None,
        result_cap_mb: float = DEFAULT_RESULT_CAP_MB,
    ) -> None:
        if timeout <= 0 or startup_timeout <= 0:
            raise McpServerError(f"MCP timeouts must be positive seconds, got {timeout!r} and {startup_timeout!r}")
        if not result_cap_mb > 0:
            raise McpServerError(f"the MCP result cap must be positive megabytes, got {result_cap_mb!r}")
        self.result_cap = int(result_cap_mb * 1_000_000)
        #: what the server wrote that was not a JSON-RPC message (counted, not logged)
        self.lines = LineStats()
        self.argv = parse_command(command)
        self.command = shlex.join(self.argv)
        self.timeout = timeout
        self._on_change = on_change
        self._changed = threading.Event()
        self._dead: str | None = None
        self._closed = False
        self._client: Client | None = None
        self.server_name = ""
        self.server_version = ""
        self.tools: list[mt.Tool] = []
        # the server's stderr: kept out of the terminal, read back to explain a failure
        # (append mode: the child writes at the end whatever this side last read)
        self._stderr = cast(TextIO, tempfile.TemporaryFile(mode="a+", encoding="utf-8", errors="replace"))  # noqa: SIM115
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"mcp-{self.argv[0]}", daemon=True)
        self._thread.start()
        self._stop: asyncio.Event | None = None
        self._ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._main = asyncio.run_coroutine_threadsafe(self._hold(env, cwd, startup_timeout), self._loop)
        # a harness never closed (a script that forgot close()) still stops its servers at exit
        atexit.register(self.close)
        try:
            self._ready.result(timeout=startup_timeout + 5.0)
        except concurrent.futures.TimeoutError:
            self.close()
            raise McpServerError(
                self._startup_failure(f"did not answer initialize within {startup_timeout:g} s")
            ) from None
        except McpServerError:
            self.close()
            raise

    # -- the connection's own task ----------------------------------------------------------
    def _transport(self, env: dict[str, str] | None, cwd: str | None) -> Any:
        if os.name != "posix":  # the SDK's, with its Windows job objects; no cap, no supervisor
            params = StdioServerParameters(command=self.argv[0], args=self.argv[1:], env=env, cwd=cwd)
            return stdio_client(params, errlog=self._stderr)
        return stdio_transport(
            self.argv, env=env, cwd=cwd, errlog=self._stderr, max_message_bytes=self.result_cap, stats=self.lines
        )

    async def _hold(self, env: dict[str, str] | None, cwd: str | None, startup_timeout: float) -> None:
        """Open the client, list the tools, then keep the connection until :meth:`close`."""
        self._stop = asyncio.Event()
        try:
            client = Client(
                self._transport(env, cwd),
                mode="legacy",
                read_timeout_seconds=startup_timeout,
                message_handler=self._on_message,
                client_info=mt.Implementation(name="ctxwright", version=_version()),
                cache=None,
            )
            async with client:
                info = client.server_info
                self.server_name = info.name if info is not None else ""
                self.server_version = info.version if info is not None else ""
                self.tools = await self._list_all(client)
                self._client = client
                self._ready.set_result(None)
                await self._stop.wait()
        except asyncio.CancelledError:
            if not self._ready.done():
                self._ready.set_exception(McpServerError(self._startup_failure("was stopped while starting")))
            raise
        except BaseException as exc:
            if not self._ready.done():
                self._ready.set_exception(McpServerError(self._startup_failure(_start_cause(exc))))
            elif self._dead is None:
                self._dead = f"its connection failed ({_describe(exc)})"
        finally:
            self._client = None

    async def _list_all(self, client: Client) -> list[mt.Tool]:
        tools: list[mt.Tool] = []
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(MAX_LIST_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None or cursor in seen:  # a cursor seen before would loop for ever
                return tools
            seen.add(cursor)
        return tools

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, Exception):  # a line the SDK's own transport could not parse
            self.lines.invalid += 1
            return
        if isinstance(message, mt.ToolListChangedNotification):
            self._changed.set()
            if self._on_change is not None:
                self._on_change(self)

    # -- used from any thread -----------------------------------------------------------
    @property
    def dead(self) -> str | None:
        """Why the server can no longer be called (it exited, the connection broke), or ``None``."""
        return self._dead

    def changed(self) -> bool:
        """True once per ``notifications/tools/list_changed`` received since the last call."""
        if self._changed.is_set():
            self._changed.clear()
            return True
        return False

    def list_tools(self) -> list[mt.Tool]:
        """The server's tools now (every page); :class:`McpToolError` if it cannot answer."""
        client = self._live("list its tools")
        return self._wait(self._list_all(client), "tools/list")

    def call(self, name: str, arguments: dict[str, Any]) -> mt.CallToolResult:
        """Call the server's tool ``name`` (its own name, not ctxwright's); the result as the
        server sent it, ``isError`` included. :class:`McpToolError` for a timeout, an error
        response or a server that has exited."""
        client = self._live(f"call {name}")
        coro = client.call_tool(name, arguments, read_timeout_seconds=self.timeout)
        return self._wait(coro, f"tools/call {name}")

    def _live(self, what: str) -> Client:
        client = self._client
        if self._dead is not None or client is None:
            cause = self._dead or "it was closed"
            raise McpToolError(
                f"cannot {what}: the MCP server `{self.command}` is not running ({cause})",
                error_type="mcp_server_gone",
                hint="This server's tools are unavailable for the rest of the session; use other tools, "
                "or tell the user the server stopped.",
            )
        return client

    def _wait(self, coro: Any, what: str) -> Any:
        seen = (self.lines.invalid, self.lines.oversized)
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            # the SDK's own deadline answers first; this one only guards against a stuck loop
            return future.result(timeout=self.timeout + 5.0)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise _timeout(self, what, seen) from None
        except MCPError as exc:
            if exc.code == mt.REQUEST_TIMEOUT:
                raise _timeout(self, what, seen) from None
            dropped = exc.data.get(DROPPED) if isinstance(exc.data, dict) else None
            if dropped is not None:
                raise _dropped(self, what, exc.message, too_large=dropped == "too_large") from None
            if exc.code == mt.CONNECTION_CLOSED and exc.message == "Connection closed":
                self._dead = "it exited" + self._stderr_note()
                raise McpToolError(
                    f"the MCP server `{self.command}` exited during {what}{self._stderr_note()}",
                    error_type="mcp_server_crashed",
                    hint="This server's tools are unavailable for the rest of the session; use other tools, "
                    "or tell the user the server stopped.",
                ) from None
            raise McpToolError(
                f"the MCP server `{self.command}` answered {what} with error {exc.code}: {exc.message}",
                error_type="mcp_error",
                hint="Read the server's message; fix the arguments and retry, or use another tool.",
                external=True,
            ) from None
        except concurrent.futures.CancelledError:
            raise McpToolError(
                f"{what} was cancelled: the MCP server `{self.command}` is shutting down",
                error_type="mcp_server_gone",
                hint="This server's tools are unavailable now; use other tools.",
            ) from None
        except (OSError, RuntimeError, ValueError) as exc:  # a broken pipe, an SDK refusal
            raise McpToolError(
                f"{what} on the MCP server `{self.command}` failed: {_describe(exc)}",
                error_type="mcp_error",
                hint="Retry once; if it fails again, use another tool.",
            ) from None

    # -- shutdown -----------------------------------------------------------------------
    def close(self) -> None:
        """Stop the server (its stdin is closed, then its process group terminated) and the
        thread. Idempotent; waits at most a few seconds."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        stop = self._stop
        if stop is not None:
            self._loop.call_soon_threadsafe(stop.set)
        try:
            self._main.result(timeout=_CLOSE_WAIT_S)
        except concurrent.futures.TimeoutError:  # the SDK's shutdown is bounded; this is a last resort
            self._main.cancel()
            with suppress(BaseException):
                self._main.result(timeout=_CLOSE_WAIT_S)
        except BaseException:
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=_CLOSE_WAIT_S)
        if not self._thread.is_alive():
            self._loop.close()
        self._stderr.close()

    # -- messages -----------------------------------------------------------------------
    def stderr_tail(self, lines: int = 3) -> str:
        """The last ``lines`` non-empty lines the server wrote to stderr."""
        try:
            self._stderr.flush()
            size = self._stderr.seek(0, os.SEEK_END)
            self._stderr.seek(max(0, size - _STDERR_TAIL_BYTES))
            text = self._stderr.read()
        except (OSError, ValueError):
            return ""
        kept = [ln.strip() for ln in text.splitlines() if ln.strip()]
        return " | ".join(kept[-lines:])

    def _stderr_note(self) -> str:
        tail = self.stderr_tail()
        return f"; its stderr ends: {tail}" if tail else ""

    def _startup_failure(self, cause: str) -> str:
        wrote = self.lines.summary()
        if wrote:
            first = f" (the first: {self.lines.first!r})" if self.lines.first else ""
            cause += f"; its stdout had {wrote}{first}"
        return (
            f"the MCP server `{self.command}` {cause}{self._stderr_note()}. Check that the command starts an MCP "
            "server speaking stdio (run it by hand: it should wait for input), or drop it (--mcp / mcp_servers=)"
        )

    def __repr__(self) -> str:
        state = "closed" if self._closed else (f"dead: {self._dead}" if self._dead else "running")
        return f"McpConnection({self.command!r}, server={self.server_name!r}, {state})"


def _timeout(conn: McpConnection, what: str, seen: tuple[int, int]) -> McpToolError:
    """A call not answered in time; if the server wrote lines that were dropped meanwhile
    (one may have been the answer, naming no request), say so."""
    invalid, oversized = conn.lines.invalid - seen[0], conn.lines.oversized - seen[1]
    note = ""
    if invalid or oversized:
        note = "; meanwhile it wrote " + LineStats(invalid=invalid, oversized=oversized).summary() + ", dropped"
    return McpToolError(
        f"the MCP server `{conn.command}` did not answer {what} within {conn.timeout:g} s{note}",
        error_type="timeout",
        hint="The server may be hung or the request too large; try a smaller request, or another tool.",
    )


def _dropped(conn: McpConnection, what: str, why: str, *, too_large: bool) -> McpToolError:
    """A call whose answer the transport dropped (``mcp/transport.py``), failed at once."""
    if too_large:
        return McpToolError(
            f"the MCP server `{conn.command}` answered {what}, but {why}",
            error_type="mcp_result_too_large",
            hint="Ask for less (a narrower query, a page, a range), or use another tool; the server still "
            "answers other calls.",
        )
    return McpToolError(
        f"the MCP server `{conn.command}` answered {what}, but {why}",
        error_type="mcp_invalid_reply",
        hint="The server is broken for this request; retry once, or use another tool.",
        external=True,  # it quotes the server's line
    )


def _start_cause(exc: BaseException) -> str:
    """Why a server did not start, from what the SDK raised."""
    inner = exc
    while isinstance(inner, BaseExceptionGroup) and len(inner.exceptions) == 1:
        inner = inner.exceptions[0]
    if isinstance(inner, FileNotFoundError):
        return "cannot be started: the command was not found (is it installed and on PATH?)"
    if isinstance(inner, PermissionError):
        return "cannot be started: permission denied (is the file executable?)"
    if isinstance(inner, MCPError) and inner.code == mt.CONNECTION_CLOSED:
        return "exited before answering initialize"
    if isinstance(inner, MCPError) and inner.code == mt.REQUEST_TIMEOUT:
        return "did not answer initialize or tools/list in time"
    if isinstance(inner, MCPError) and isinstance(inner.data, dict) and DROPPED in inner.data:
        return f"answered initialize or tools/list, but {inner.message}"
    return f"failed to start ({_describe(inner)})"


def _describe(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("ctxwright")
    except Exception:
        return "0"
