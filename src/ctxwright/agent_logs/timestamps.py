"""The ``timestamp`` field both agents write: ISO 8601 in UTC (``2026-12-06T12:51:27.123Z``)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from ctxwright.core.words import gap

#: the form ccusage accepts for a Claude Code usage entry (its ``isoTimestampSchema``: seconds,
#: optional milliseconds, ``Z``); a line with another form is not counted by it, nor here
ISO_Z = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{3})?Z")


def epoch(stamp: object) -> float | None:
    """``stamp`` as seconds since the epoch, or ``None`` when it is not an ISO 8601 time."""
    if not isinstance(stamp, str) or len(stamp) > 64:
        return None
    text = stamp[:-1] + "+00:00" if stamp.endswith("Z") else stamp
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def day(at: float | None) -> str:
    """The UTC date of ``at`` (``YYYY-MM-DD``), ``unknown`` without a time."""
    return "unknown" if at is None else datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d")


def clock(at: float | None) -> str:
    """``at`` as ``YYYY-MM-DD HH:MM:SS`` UTC, ``?`` without a time."""
    return "?" if at is None else datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S")


def duration(seconds: float) -> str:
    """A gap as people read it: ``45s``, ``6m05s``, ``2h10m`` (``core/words.py``: one form
    with the cache verdict's)."""
    return gap(seconds)
