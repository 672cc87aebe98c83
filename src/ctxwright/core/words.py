"""Counts in the sentences ctxwright prints: "1 call", "3 calls", never "1 calls" or "call(s)".

One helper, so every message counts the same way; English plurals only (the messages are
English), with the irregular plural given where a noun has one.
"""

from __future__ import annotations


def counted(n: int, singular: str, plural: str | None = None) -> str:
    """``n`` and the noun agreeing with it: ``counted(1, "call")`` is ``"1 call"``,
    ``counted(3, "call")`` ``"3 calls"``, ``counted(2, "entry", "entries")`` ``"2 entries"``.
    Numbers are grouped by thousands (``"200,000 calls"``)."""
    return f"{n:,} {singular if n == 1 else (plural or singular + 's')}"


__all__ = ["counted"]
