"""Last resort: drop the oldest whole units until the request fits the window.

Used only when the cheaper layers could not bring a request under the window (a resumed
session that is already over it, a window smaller than the recorded turns). Removes the
oldest spans :mod:`.cutpoints` allows -- never the system prompt or the first user message,
never half a parallel batch, never part of a reasoning loop -- and leaves one note where
they were. The events stay in the store; only the view changes.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from ctxwright.compaction.batches import units
from ctxwright.compaction.cutpoints import removable_spans
from ctxwright.core.messages import Message


def note_text(n: int) -> str:
    return (
        f"[ctxwright: {n} earlier message(s) were removed here to fit the context window; they are kept "
        "in the session store (ctxwright show)]"
    )


def plan_trim(
    entries: list[tuple[int | None, Message]],
    tokens_of: Callable[[Message], int],
    excess: int,
    user_seqs: Collection[int],
    catalogs: Collection[Message] = (),
    pins: Collection[Message] = (),
) -> tuple[list[int], int | None]:
    """Seqs to drop freeing at least ``excess`` tokens, and the seq the note goes before.

    Order: first the units before the newest user message (older tasks), then units of the
    current task between that message and its newest tool-call batch. Never dropped: the
    first user message (cutpoints), the newest user message, the newest batch and anything
    after it (results the model has not answered yet, the status bar). ``([], None)`` when
    nothing can go. ``user_seqs`` are the seqs of user events (to tell a user message from
    the status bar's, which is a user-role message too); ``catalogs``: the skills catalog
    messages, never dropped (``pinned.py``); ``pins``: the pinned messages, never dropped (``pins.py``)."""
    msgs = [m for _, m in entries]
    last_user = max(
        (i for i, (seq, m) in enumerate(entries) if m.role == "user" and seq is not None and seq in user_seqs),
        default=0,
    )
    last_batch = max((i for i, m in enumerate(msgs) if m.role == "assistant" and m.tool_calls), default=len(msgs))
    keep_from = min(last_batch, units(msgs)[-1][0] if msgs else 0)  # the newest unit always stays
    spans = [(a, b) for a, b in removable_spans(msgs, catalogs, pins) if b <= keep_from]
    older = [(a, b) for a, b in spans if b <= last_user]
    current = [(a, b) for a, b in spans if a > last_user]
    drop: list[int] = []
    freed = 0
    for a, b in older + current:
        if freed >= excess:
            break
        for seq, m in entries[a:b]:
            if seq is None:
                continue
            drop.append(seq)
            freed += tokens_of(m)
    if not drop:
        return [], None
    first = min(drop)
    return sorted(drop), first
