"""Counts in the sentences ctxwright prints: "1 call", "3 calls", never "1 calls" or "call(s)";
what a user typed, repeated in a message (:func:`quoted`); and a time span (:func:`gap`).

One helper, so every message counts the same way; English plurals only (the messages are
English), with the irregular plural given where a noun has one.
"""

from __future__ import annotations


def counted(n: int, singular: str, plural: str | None = None) -> str:
    """``n`` and the noun agreeing with it: ``counted(1, "call")`` is ``"1 call"``,
    ``counted(3, "call")`` ``"3 calls"``, ``counted(2, "entry", "entries")`` ``"2 entries"``.
    Numbers are grouped by thousands (``"200,000 calls"``)."""
    return f"{n:,} {singular if n == 1 else (plural or singular + 's')}"


#: characters of a user's value a message repeats: an argument may be a megabyte long
QUOTED_CHARS = 80


def quoted(given: str, limit: int = QUOTED_CHARS) -> str:
    """``given`` as a message repeats it: quoted and escaped (``repr``: a newline, a NUL or a
    lone surrogate from argv bytes that are not UTF-8 stays on the one line and prints on any
    terminal), cut to ``limit`` characters with its length said -- a one-line error, whatever
    was pasted."""
    if len(given) <= limit:
        return repr(given)
    return f"{given[:limit]!r}... ({counted(len(given), 'character')})"


def gap(seconds: float) -> str:
    """A time span as people read a cache's age or an idle gap: ``45s``, ``6m05s``, ``2h10m``
    (seconds up to two minutes, minutes up to two hours). One form for the cache verdict, the
    report's age/TTL column and the agent-log audit, so the same gap reads the same everywhere."""
    s = round(seconds)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


__all__ = ["QUOTED_CHARS", "counted", "gap", "quoted"]
