"""Change markers: which recorded events make the next request differ from the last one
on purpose (so the audit reports the divergence as intended, not as a history edit)."""

from __future__ import annotations

from ctxwright.core.events import CompactionEvent, Event, StatusEvent


def next_marker(marker: str | None, event: Event, status_before: bool) -> str | None:
    """The change marker of the next request after one more event since the previous reply.

    A compaction marks it ``compaction``; a status recorded in ``replace`` mode marks it
    ``status_replaced`` if an earlier status existed (one that it hides) and nothing else
    marked it. The audit then reports the divergence as intended, not as a history edit. One
    rule for the live session and for the offline reader of a session export.
    """
    if isinstance(event, CompactionEvent):
        return "compaction"
    if isinstance(event, StatusEvent) and event.mode == "replace" and status_before:
        return marker or "status_replaced"
    return marker
