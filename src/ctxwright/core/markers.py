"""Change markers: which recorded events make the next request differ from the last one
on purpose (so the audit reports the divergence as intended, not as a history edit)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ctxwright.core.events import AssistantEvent, CompactionEvent, Event, StatusEvent


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


def markers_at(events: Sequence[Event], counts: Iterable[int]) -> dict[int, str | None]:
    """The change marker of the request rendered from ``events[:n]``, for each ``n`` of
    ``counts``: :func:`next_marker` over the events since the last model reply before it --
    what the live session computed (``Session.marker_since_last_call``) when it sent that
    request, so a rebuilt request is audited as the live one was."""
    wanted = set(counts)
    out: dict[int, str | None] = {}
    marker: str | None = None
    status_before = False
    for i, ev in enumerate(events):
        if i in wanted:
            out[i] = marker
        if isinstance(ev, AssistantEvent):
            marker = None
        else:
            marker = next_marker(marker, ev, status_before)
        status_before = status_before or isinstance(ev, StatusEvent)
    for n in wanted - out.keys():
        if n >= len(events):
            out[n] = marker
    return out
