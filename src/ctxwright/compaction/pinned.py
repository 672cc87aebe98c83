"""Invariant: the system prompt, the task and the skills catalog are never cut.

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
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable

from ctxwright.core.events import Event, UserEvent
from ctxwright.core.messages import Message


def catalog_messages(events: Iterable[Event]) -> frozenset[Message]:
    """The messages of the session's skills catalogs (``UserEvent.skills_announced``)."""
    return frozenset(ev.message for ev in events if isinstance(ev, UserEvent) and ev.skills_announced is not None)


def first_user_index(messages: list[Message], catalogs: Collection[Message] = ()) -> int | None:
    """Index of the task: the first user message that is not a skills catalog."""
    return next((i for i, m in enumerate(messages) if m.role == "user" and m not in catalogs), None)


def pinned_violations(recorded: list[Message], view: list[Message], catalogs: Collection[Message] = ()) -> list[str]:
    """``view`` (the trajectory without the system message) must begin with the recorded
    task (after the catalogs that came before it), byte for byte, and keep every catalog."""
    out: list[str] = []
    missing = Counter(m for m in recorded if m in catalogs) - Counter(m for m in view if m in catalogs)
    if missing:
        out.append(f"{sum(missing.values())} skills catalog message(s) missing or changed in the view")
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
