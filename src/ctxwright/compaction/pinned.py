"""Invariant: the system prompt, the task, the skills catalog and every pin are never cut.

Why: the system prompt is the cached prefix and the agent's rules; the first user message
is the task itself. Every summary or trim that dropped it produced an agent that kept
working on nothing (summaries that lose the task are a common complaint about peer
frameworks). Layers may rewrite tool results and drop later turns, never these.

With skills, the first user message of a session is often not the task but the skills
catalog, a ``<system-reminder>`` the harness appends before it (``skills/tools.py``). The
task is therefore the first user message that is *not* a catalog; a catalog message is read
as one only through ``UserEvent.skills_announced``. Catalog messages are pinned too, wherever
they stand (one appended mid-session for a skill added later as well): they are small --
names, descriptions, locations -- and without them the model no longer knows which skills
it can load, nor the names a compaction note asks it to load again (``compaction/skills.py``).
The note a text pin appends (``pins.py``) is read like a catalog: kept wherever it stands,
never the task.

Pins (``pins.py``) name any other message the user, a tool or the model wants kept: the
view must show each pinned message as recorded. Compared without the reasoning fields and
the empty-content wire form (:func:`_kept_form`): the renderer's reasoning policy and wire
form rewrite those on every assistant turn, and they are not what a pin keeps.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable

from ctxwright.compaction.pins import PIN_NOTE_KEY
from ctxwright.core.events import Event, UserEvent
from ctxwright.core.messages import Message


def catalog_messages(events: Iterable[Event]) -> frozenset[Message]:
    """The messages of the session's skills catalogs (``UserEvent.skills_announced``) and of
    its pinned notes (``pins.py``): appended context, never the task, never cut."""
    return frozenset(
        ev.message
        for ev in events
        if isinstance(ev, UserEvent) and (ev.skills_announced is not None or PIN_NOTE_KEY in ev.extra)
    )


def first_user_index(messages: list[Message], catalogs: Collection[Message] = ()) -> int | None:
    """Index of the task: the first user message that is not a skills catalog."""
    return next((i for i, m in enumerate(messages) if m.role == "user" and m not in catalogs), None)


def _kept_form(m: Message) -> tuple[object, ...]:
    """What a pin keeps of a message: its role, text, call id and tool calls."""
    return (m.role, m.content or "", m.tool_call_id, m.name, tuple(m.tool_calls))


def pinned_violations(
    recorded: list[Message], view: list[Message], catalogs: Collection[Message] = (), pins: Collection[Message] = ()
) -> list[str]:
    """``view`` (the trajectory without the system message) must begin with the recorded
    task (after the catalogs that came before it), byte for byte, keep every catalog, and
    show every pinned message (``pins``: as recorded) unchanged."""
    out: list[str] = []
    missing = Counter(m for m in recorded if m in catalogs) - Counter(m for m in view if m in catalogs)
    if missing:
        out.append(f"{sum(missing.values())} skills catalog message(s) missing or changed in the view")
    if pins:
        lost = Counter(_kept_form(m) for m in recorded if m in pins) - Counter(_kept_form(m) for m in view)
        if lost:
            out.append(f"{sum(lost.values())} pinned message(s) missing or changed in the view")
    k = first_user_index(recorded, catalogs)
    if k is None:
        return out
    first = recorded[k]
    j = first_user_index(view, catalogs)
    if j is None or view[j] != first:
        return [*out, "the first user message is missing or changed in the view"]
    if any(m.role != "user" for m in view[:j]):
        out.append("messages before the first user message were kept while it moved")
    return out
