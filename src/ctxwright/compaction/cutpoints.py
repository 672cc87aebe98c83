"""Where a span of the trajectory may be removed: the one place the invariants meet.

A cut may start or end only at a boundary that (1) is not inside a parallel batch
(:mod:`.batches`), (2) is not inside a tool loop that carries reasoning
(:mod:`.reasoning_loops`), and (3) comes after the first user message (:mod:`.pinned`).
Every layer that removes messages asks this module; none computes boundaries itself.
"""

from __future__ import annotations

from ctxwright.compaction.batches import units
from ctxwright.compaction.pinned import first_user_index
from ctxwright.compaction.reasoning_loops import carries_reasoning, tool_loops
from ctxwright.core.messages import Message


def legal_boundaries(messages: list[Message]) -> list[int]:
    """Indices ``i`` such that a cut between ``messages[i-1]`` and ``messages[i]`` is legal
    (``len(messages)`` included: the end is always a boundary)."""
    first = first_user_index(messages)
    if first is None:
        return [len(messages)]
    ok = {start for start, _ in units(messages)} | {len(messages)}
    for a, b in tool_loops(messages):
        if carries_reasoning(messages, (a, b)):
            ok -= set(range(a + 1, b))
    return sorted(i for i in ok if i > first)


def removable_spans(messages: list[Message]) -> list[tuple[int, int]]:
    """The smallest removable spans after the first user message, oldest first: consecutive
    legal boundaries."""
    b = legal_boundaries(messages)
    return [(b[i], b[i + 1]) for i in range(len(b) - 1)]
