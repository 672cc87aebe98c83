"""Where a span of the trajectory may be removed: the one place the invariants meet.

A cut may start or end only at a boundary that (1) is not inside a parallel batch
(:mod:`.batches`), (2) is not inside a tool loop that carries reasoning
(:mod:`.reasoning_loops`), and (3) comes after the task, the first user message that is not
a skills catalog (:mod:`.pinned`); (4) a span holding a catalog message or a pinned message
(:mod:`.pins`) is never removable -- a pinned tool result keeps its call and its batch, since
a span is a whole unit (:mod:`.batches`).
Every layer that removes messages asks this module; none computes boundaries itself.
"""

from __future__ import annotations

from collections.abc import Collection

from ctxwright.compaction.batches import units
from ctxwright.compaction.pinned import first_user_index
from ctxwright.compaction.reasoning_loops import carries_reasoning, tool_loops
from ctxwright.core.messages import Message


def legal_boundaries(messages: list[Message], catalogs: Collection[Message] = ()) -> list[int]:
    """Indices ``i`` such that a cut between ``messages[i-1]`` and ``messages[i]`` is legal
    (``len(messages)`` included: the end is always a boundary). ``catalogs``: the session's
    skills catalog messages (``pinned.catalog_messages``)."""
    first = first_user_index(messages, catalogs)
    if first is None:
        return [len(messages)]
    ok = {start for start, _ in units(messages)} | {len(messages)}
    for a, b in tool_loops(messages):
        if carries_reasoning(messages, (a, b)):
            ok -= set(range(a + 1, b))
    return sorted(i for i in ok if i > first)


def removable_spans(
    messages: list[Message], catalogs: Collection[Message] = (), pins: Collection[Message] = ()
) -> list[tuple[int, int]]:
    """The smallest removable spans after the task, oldest first: consecutive legal
    boundaries, except a span that holds a skills catalog message or a pinned message
    (``pins``: ``pins.pinned_messages``), or the answer that closes a tool loop holding a
    pinned message.

    Why the closing answer: without pins, what a tier removes is the oldest spans, so a tool
    loop is cut from its start and what stays of it still ends with its answer. A pin keeps a
    turn in the middle; were its loop's answer removed, the turns kept would run on into the
    next loop, which the renderer and the provider then read as one loop -- one whose turns
    carry reasoning and others not (``reasoning_loops.py``)."""
    b = legal_boundaries(messages, catalogs)
    spans = [(b[i], b[i + 1]) for i in range(len(b) - 1)]
    if not catalogs and not pins:
        return spans
    keep = {i for i, m in enumerate(messages) if m in catalogs or m in pins}
    if pins:
        for a, z in tool_loops(messages):
            closing = messages[z - 1]
            if closing.role == "assistant" and not closing.tool_calls and any(messages[i] in pins for i in range(a, z)):
                keep.add(z - 1)
    return [(a, z) for a, z in spans if not any(i in keep for i in range(a, z))]
