"""ctxwright's own stdio transport for MCP servers (POSIX), in place of the SDK's ``stdio_client``.

It yields the same pair of streams the SDK's ``Client`` takes from any transport, built from
the SDK's public pieces (``SessionMessage``, ``jsonrpc_message_adapter``, its default
environment and its process-group kill), and differs where the SDK's own did harm:

* **Reading.** Lines are cut in linear time and a message over ``max_message_bytes`` is
  dropped as it streams in (``mcp/lines.py``): the SDK's reader took seconds to minutes on
  a result of tens of megabytes, and the server's every later answer waited behind it.
  The request that message answered is failed at once with a clear error (a JSON-RPC error
  this side makes up, marked with :data:`DROPPED`), and the connection reads on.
* **Invalid lines.** A line that is not a JSON-RPC message is counted (``LineStats``), not
  logged with a traceback; when it names the request it answered, that request fails at
  once instead of waiting for its timeout.
* **Processes.** The server runs under ``core/supervise.py`` in a session of its own, which
  ends the server's whole process group -- and, as their subreaper, the server's descendants
  that left it (``setsid``, a daemon) -- when the server exits, when this side closes it,
  and when ctxwright dies (SIGTERM, SIGKILL: ``PR_SET_PDEATHSIG``). The SDK killed the
  group only when the server outlived the 2 s after its stdin closed, so a server that
  exited at once left its children running, and a ctxwright ended by a signal left all.
  (The kernel's signal comes when the *thread* that spawned the supervisor ends: here the
  connection's own event-loop thread, which ends only after the server was stopped.)

Shutdown follows the MCP spec's order, as the SDK's does: close the server's stdin, wait
2 s, then SIGTERM the group (the supervisor passes it on) and SIGKILL 2 s later.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any, TextIO

import anyio
import anyio.abc
import mcp.types as mt
from mcp.client.stdio import get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

from ctxwright.core.supervise import END_S, find_executable, launch_argv
from ctxwright.mcp.lines import Line, LineSplitter, LineStats, cut_reply_id, reply_id

__all__ = ["DROPPED", "launch_argv", "stdio_transport"]

#: Key of the ``data`` of a JSON-RPC error this side made up for a reply it dropped; its
#: value is ``"too_large"`` or ``"invalid"``.
DROPPED = "ctxwright_dropped"
#: Seconds the server has to exit after its stdin closed, then after SIGTERM (the SDK's).
_EXIT_WAIT_S = 2.0
_FLUSH_WAIT_S = 0.5
_READ_BYTES = 1 << 20


def _dropped(rid: int | str, kind: str, message: str) -> SessionMessage:
    error = mt.ErrorData(code=mt.INTERNAL_ERROR, message=message, data={DROPPED: kind})
    return SessionMessage(mt.JSONRPCError(jsonrpc="2.0", id=rid, error=error))


class _Reader:
    """Turns the server's lines into the session's messages; see the module docstring."""

    def __init__(self, max_message_bytes: int, stats: LineStats) -> None:
        self.splitter = LineSplitter(max_message_bytes)
        self.stats = stats
        self.cap_text = f"{max_message_bytes / 1_000_000:g} MB"
        self._cut_answered = False

    def items(self, chunk: bytes) -> list[SessionMessage]:
        return [m for line in self.splitter.feed(chunk) if (m := self._item(line)) is not None]

    def _item(self, line: Line) -> SessionMessage | None:
        if line.data is None:
            return self._over(line)
        if not line.data.strip():
            return None
        try:
            return SessionMessage(mt.jsonrpc_message_adapter.validate_json(line.data, by_name=False))
        except (ValueError, RecursionError):
            self.stats.note_invalid(line.data)
        rid = reply_id(line.data)
        if rid is None:
            return None
        excerpt = line.data[:80].decode("utf-8", errors="replace")
        return _dropped(rid, "invalid", f"its answer is not a valid JSON-RPC message ({excerpt!r}), so it was dropped")

    def _over(self, line: Line) -> SessionMessage | None:
        """A line over the cap: fail its request as soon as its id is known (the head when it
        crosses the cap, else the tail when it ends), once."""
        if not line.complete:
            self.stats.oversized += 1
            self._cut_answered = False
        if self._cut_answered:
            return None
        rid = cut_reply_id(line.head, line.tail if line.complete else None)
        if rid is None:
            return None
        self._cut_answered = True
        size = f" ({line.size / 1_000_000:.1f} MB)" if line.complete else ""
        return _dropped(
            rid,
            "too_large",
            f"its answer{size} is over the cap of {self.cap_text} on one message from an MCP server "
            "(--mcp-result-cap, mcp_result_cap=), so it was dropped",
        )


@asynccontextmanager
async def stdio_transport(
    argv: Sequence[str],
    *,
    env: dict[str, str] | None,
    cwd: str | None,
    errlog: TextIO,
    max_message_bytes: int,
    stats: LineStats,
) -> AsyncIterator[Any]:
    """Start ``argv`` under the supervisor and yield ``(read_stream, write_stream)`` for
    the SDK's ``Client``; on exit, stop it (see the module docstring)."""
    full_env = get_default_environment() | (env or {})
    executable = find_executable(argv[0], full_env, cwd)
    process = await anyio.open_process(
        launch_argv(executable, argv), env=full_env, stderr=errlog, cwd=cwd, start_new_session=True
    )
    # no await between the spawn and the task group: a cancellation there would leak the process
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
    writer_done = anyio.Event()
    reader = _Reader(max_message_bytes, stats)

    async def stdout_reader() -> None:
        assert process.stdout is not None
        live = True
        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, ConnectionError, OSError):
            async with read_writer:
                while True:
                    try:
                        chunk = await process.stdout.receive(_READ_BYTES)
                    except anyio.EndOfStream:
                        return
                    if not live:
                        continue  # the session is gone: read on (a server blocked writing cannot exit)
                    for item in reader.items(chunk):
                        try:
                            await read_writer.send(item)
                        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                            live = False
                            break

    async def stdin_writer() -> None:
        assert process.stdin is not None
        try:
            async with write_reader:
                async for message in write_reader:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                    await process.stdin.send(data.encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_writer.aclose()  # the session sees the end instead of a request hanging
        finally:
            writer_done.set()

    async def shutdown() -> None:
        read_stream.close()
        write_stream.close()
        with anyio.move_on_after(_FLUSH_WAIT_S):
            await writer_done.wait()
        await _stop(process)
        for stream in (read_stream, write_stream, read_writer, write_reader):
            await stream.aclose()

    async with anyio.create_task_group() as tg:
        tg.start_soon(stdout_reader)
        tg.start_soon(stdin_writer)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):  # every wait inside is bounded
                await shutdown()
            tg.cancel_scope.cancel()


async def _stop(process: anyio.abc.Process) -> None:
    """Close stdin, wait, then SIGTERM the supervisor's group and SIGKILL after a wait."""
    assert process.stdin is not None and process.stdout is not None
    with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdin.aclose()
    if not await _exited(process, _EXIT_WAIT_S):
        # the supervisor's own graces come first: SIGKILLing it earlier (a loaded machine)
        # would leave the server and its daemons orphaned, with nobody to end them
        await terminate_posix_process_tree(process, END_S + _EXIT_WAIT_S)
        await _exited(process, _EXIT_WAIT_S)
    _kill_session(process.pid)
    with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdout.aclose()
    with anyio.move_on_after(_EXIT_WAIT_S), suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.aclose()


def _kill_session(sid: int) -> None:
    """SIGKILL whatever is left of the supervisor's session (the server, the server's group and
    any child of it that only changed its group), found in ``/proc``: the last resort when the
    supervisor could not end them itself -- it was killed, or the machine was too loaded for its
    grace. A process that started a session of its own is not found here (the supervisor, its
    subreaper, ends it). Linux only (elsewhere there is no ``/proc/PID/stat``; the supervisor's kill is all there is)."""
    if not os.path.isdir("/proc/self"):
        return
    me = os.getpid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile, or not ours to read
        # "PID (COMM) STATE PPID PGRP SESSION ...": COMM may hold spaces and parentheses
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 3 and fields[3] == str(sid).encode():
            with suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)


async def _exited(process: anyio.abc.Process, timeout: float) -> bool:
    """Whether the process exited within ``timeout`` (its ``returncode``: ``wait()`` would
    also wait for the pipes' EOF, which a survivor holding them delays)."""
    with anyio.move_on_after(timeout):
        while process.returncode is None:
            await anyio.sleep(0.01)
        return True
    return False
