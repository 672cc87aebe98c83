"""Invariant: a parallel batch -- one assistant message and all its tool results -- is kept
or cut whole.

Provider rule protected: the results of one reply's parallel calls must all follow that
reply (see :mod:`.pairing`); cutting inside a batch leaves either orphans or unanswered
calls. Batches are the smallest unit any layer may remove.
"""

from __future__ import annotations

from ctxwright.core.messages import Message


def units(messages: list[Message]) -> list[tuple[int, int]]:
    """Half-open spans ``[start, end)`` that can only be kept or removed together: an
    assistant message with its following tool results, or any other single message."""
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(messages):
        j = i + 1
        if messages[i].role == "assistant" and messages[i].tool_calls:
            while j < len(messages) and messages[j].role == "tool":
                j += 1
        spans.append((i, j))
        i = j
    return spans
