"""The server's stdout cut into JSON-RPC lines, in linear time and bounded memory.

Why our own: the ``mcp`` SDK's stdio reader joins each 64 KB chunk to the line read so far
and splits the whole again (``(buffer + chunk).split("\\n")``), so one line of n bytes costs
n²/64 KB: 5 MB took 0.3 s, 20 MB 5 s, 50 MB over a minute, and every later message of the
server waited behind it. :class:`LineSplitter` looks for the newline only in the new chunk
and keeps a line's pieces in a list, joined once; a line longer than the cap is not kept at
all -- only its first and last bytes, to find which request it answered.

What a line the SDK cannot take (not JSON, not JSON-RPC, over the cap) answered is told
apart where the line itself says so (:func:`reply_id`): the ``id`` of a JSON object that is
not a request, or, for a line that is not JSON at all, an ``id`` that is the first member of
the top-level object (after ``jsonrpc``, as the Python SDK writes it) or its last (as the
TypeScript SDK writes it). A line that names no id can only be counted.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

__all__ = ["HEAD_BYTES", "Line", "LineSplitter", "LineStats", "cut_reply_id", "reply_id"]

#: Bytes kept from the start of a line over the cap (where an ``id`` written first is).
HEAD_BYTES = 4096
#: Bytes kept from its end (where an ``id`` written last is).
_TAIL_BYTES = 256
_ID = rb'(-?\d{1,18}|"(?:[^"\\]|\\.){0,200}")'
_ID_FIRST = re.compile(rb'\A\s*\{\s*(?:"jsonrpc"\s*:\s*"[^"]*"\s*,\s*)?"id"\s*:\s*' + _ID + rb"\s*[,}]")
_ID_LAST = re.compile(rb'[,{]\s*"id"\s*:\s*' + _ID + rb"\s*\}\s*\Z")
_METHOD = re.compile(rb'"method"\s*:')


@dataclass(frozen=True)
class Line:
    """A line of the server's stdout: ``data`` when it is within the cap; else ``data`` is
    ``None``, ``size`` the bytes seen so far, and ``complete`` whether its end was seen (a
    line over the cap is reported once when it crosses the cap, once when it ends)."""

    data: bytes | None
    size: int
    head: bytes = b""
    tail: bytes = b""
    complete: bool = True


class LineSplitter:
    """Cuts a byte stream into lines of at most ``cap`` bytes (see the module docstring)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._parts: list[bytes] = []
        self._size = 0
        self._over = False
        self._head = b""
        self._tail = b""

    def feed(self, chunk: bytes) -> list[Line]:
        """The lines ``chunk`` ends (and a line that crossed the cap in it)."""
        out: list[Line] = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            self._add(chunk[start:] if end < 0 else chunk[start:end], out)
            if end < 0:
                return out
            out.append(self._finish())
            start = end + 1

    def _add(self, piece: bytes, out: list[Line]) -> None:
        if not piece:
            return
        self._size += len(piece)
        if self._over:
            self._tail = (self._tail + piece[-_TAIL_BYTES:])[-_TAIL_BYTES:]
            return
        self._parts.append(piece)
        if self._size > self.cap:
            whole = b"".join(self._parts)
            self._parts = []
            self._over = True
            self._head, self._tail = whole[:HEAD_BYTES], whole[-_TAIL_BYTES:]
            out.append(Line(None, self._size, self._head, complete=False))

    def _finish(self) -> Line:
        if self._over:
            line = Line(None, self._size, self._head, self._tail)
        else:
            line = Line(b"".join(self._parts), self._size)
        self._parts, self._size, self._over, self._head, self._tail = [], 0, False, b"", b""
        return line


def reply_id(line: bytes) -> int | str | None:
    """The id of the request that ``line`` (one the SDK could not take) answers, when it
    says so unambiguously; ``None`` otherwise, and for a request or notification from the
    server, which answers nothing."""
    try:
        obj = json.loads(line)  # lenient where JSON-RPC is not: NaN, a result that is no object
    except (ValueError, RecursionError):  # not JSON (cut short, garbled): only the text can tell
        return cut_reply_id(line[:HEAD_BYTES], line[-_TAIL_BYTES:])
    if not isinstance(obj, dict) or "method" in obj:
        return None
    rid = obj.get("id")
    return rid if isinstance(rid, (int, str)) and not isinstance(rid, bool) else None


def cut_reply_id(head: bytes, tail: bytes | None) -> int | str | None:
    """The id in a line known only by its ``head`` (and ``tail``, once its end was seen):
    the top-level object's first member (after ``jsonrpc``) or its last."""
    if _METHOD.search(head):
        return None
    found = _ID_FIRST.match(head) or (_ID_LAST.search(tail) if tail else None)
    if found is None:
        return None
    try:
        value = json.loads(found.group(1))
    except ValueError:
        return None
    return value if isinstance(value, (int, str)) and not isinstance(value, bool) else None


@dataclass
class LineStats:
    """What a server wrote that was not a JSON-RPC message, for the one line that tells it
    (the SDK logged a traceback for each such line: 105 MB in 33 s from one chatty server)."""

    invalid: int = 0
    oversized: int = 0
    first: str = ""

    def note_invalid(self, line: bytes) -> None:
        self.invalid += 1
        if not self.first:
            text = line[:120].decode("utf-8", errors="replace")
            self.first = text + ("…" if len(line) > 120 else "")

    def summary(self) -> str:
        """``N invalid lines`` (and ``M over the size cap``), or ``""`` when there were none."""
        parts = []
        if self.invalid:
            parts.append(f"{self.invalid} invalid line{'s' if self.invalid != 1 else ''} (not JSON-RPC)")
        if self.oversized:
            parts.append(f"{self.oversized} message{'s' if self.oversized != 1 else ''} over the size cap")
        return " and ".join(parts)
