"""A stored session as plain JSON: what ``ctxwright show ID --json`` prints and what the
offline audit reads back; and the request body of each of its model calls, rebuilt
(``ctxwright export ID --requests``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxwright.core.messages import sha256_text
from ctxwright.store.sessions import Store


def session_export(store: Store, session_id: str) -> dict[str, Any]:
    """Everything stored about a session (and its children) as plain JSON."""
    row = store.get_session(session_id)
    return {
        "id": row.id,
        "parent_id": row.parent_id,
        "created_at": row.created_at,
        "backend": row.backend,
        "model": row.model,
        "prefix_sha256": row.prefix_sha256,
        "prefix": row.prefix,
        "meta": row.meta,
        "events": [e.to_dict() for e in store.events(row.id)],
        "calls": [c.to_dict() for c in store.calls(row.id)],
        "children": [session_export(store, c) for c in store.children(row.id)],
    }


@dataclass(frozen=True)
class CallBody:
    """One model call's request body, rebuilt from the store, and what is not certain about it."""

    call_index: int
    body: dict[str, Any]
    #: options that were not recorded (calls stored before schema 2); left out of ``body``
    unknown: tuple[str, ...]
    #: the rebuilt request hashes to the ``request_sha256`` recorded when it was sent
    verified: bool


def request_bodies(store: Store, session_id: str) -> tuple[str, list[CallBody], list[int]]:
    """(session id, the request body of every model call, calls that cannot be rebuilt).

    Each call's messages are rendered by the one renderer (``core/render.py``) from the
    events recorded before it and the session's recorded settings; the options it was sent
    with come from its call record (``store/sessions.py``, schema 2). The body is what
    ``backends/openai_compat.py`` sends (``ChatRequest.openai_body``), so it equals, as
    canonical JSON, what the server received. Every rebuilt request is checked against the
    hash recorded when it was sent.
    """
    from ctxwright.core.render import render_at
    from ctxwright.core.session import Session

    session = Session.resume(store, session_id)
    calls = store.calls(session.id)
    counts = [c.event_count for c in calls if c.event_count is not None]
    rendered = render_at(session.prefix, session.events, session.settings(), counts)
    out: list[CallBody] = []
    missing: list[int] = []
    for c in calls:
        n = c.event_count
        if n is None:
            missing.append(c.call_index)
            continue
        opts = c.options
        messages = tuple(rendered[n])
        raw = opts.request(messages, session.prefix.tools).canonical_bytes()
        verified = sha256_text(raw.decode("utf-8")) == c.request_sha256
        out.append(CallBody(c.call_index, opts.body(messages, session.prefix.tools), opts.unknown, verified))
    return session.id, out, missing
