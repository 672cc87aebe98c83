"""The lines of one agent log, read as a stream, a line that is too long skipped rather than held.

Why not ``audit/logs.py``'s reader as is: a request log whose record is over the cap is not a
request log, and reading stops there. An agent's transcript is the user's own history, written
by the agent for months: one enormous line (a pasted file, a tool result of a binary) must cost
that line, not the rest of the file. So a line longer than the cap
(:data:`~ctxwright.audit.logs.MAX_RECORD_BYTES`, the same cap) is read past in pieces of
:data:`SKIP_CHUNK` bytes -- never held -- and reported as one problem, and reading goes on.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import IO, Any

from ctxwright.agent_logs.records import LogProblem
from ctxwright.audit.logs import MAX_RECORD_BYTES

#: the piece an over-long line is read past in
SKIP_CHUNK = 1 << 20
_BOM = b"\xef\xbb\xbf"


def numbered_lines(f: IO[bytes], *, cap: int = MAX_RECORD_BYTES) -> Iterator[tuple[int, bytes | int]]:
    """``(line number, line)`` for each line of ``f`` (1-based, without its newline; a BOM at the
    start dropped); for a line longer than ``cap`` bytes, ``(line number, its length)`` instead,
    the line read past without being held."""
    number = 0
    while True:
        raw = f.readline(cap + 1)
        if not raw:
            return
        number += 1
        if number == 1 and raw.startswith(_BOM):
            raw = raw[len(_BOM) :]
        if raw.endswith(b"\n"):
            yield number, raw[:-1]
            continue
        if len(raw) <= cap:  # the last line, with no newline after it
            yield number, raw
            continue
        size = len(raw)
        del raw
        while True:
            piece = f.readline(SKIP_CHUNK)
            size += len(piece)
            if not piece or piece.endswith(b"\n"):
                break
        yield number, size


def json_objects(
    f: IO[bytes], name: str, *, cap: int = MAX_RECORD_BYTES
) -> Iterator[tuple[int, dict[str, Any]] | LogProblem]:
    """Each line of an agent log as ``(number, object)``; a line over the cap, one that is not
    JSON or not a JSON object is a :class:`LogProblem` naming it, and blank lines are passed
    over. The one loop both readers (Claude Code's, Codex's) share."""
    for number, raw in numbered_lines(f, cap=cap):
        if isinstance(raw, int):
            yield LogProblem(name, number, f"a line of {raw:,} bytes, longer than the {cap:,}-byte cap: skipped")
            continue
        if len(raw) < 64 and not raw.strip():  # blank (a long line is never blank enough to matter)
            continue
        try:
            obj = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            yield LogProblem(name, number, f"not JSON ({str(exc)[:80]}): skipped")
            continue
        if not isinstance(obj, dict):
            yield LogProblem(name, number, "not a JSON object: skipped")
            continue
        yield number, obj
