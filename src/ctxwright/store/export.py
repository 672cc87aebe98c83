"""A stored session as plain JSON: what ``ctxwright show ID --json`` prints and what the
offline audit reads back; and the request body of each of its model calls, rebuilt
(``ctxwright export ID --requests``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ctxwright.core.messages import sha256_text
from ctxwright.core.request import without_reply_only
from ctxwright.store.sessions import Store


def session_export(store: Store, session_id: str) -> dict[str, Any]:
    """Everything stored about a session (and its children) as plain JSON, its saved
    attention maps included (``attention``: ``{"call_index", "map"}`` per map)."""
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
        # the maps `ctxwright attention` saved: cheap beside the events, and costly to make again
        "attention": [{"call_index": k, "map": m} for k, m in store.attention_maps(row.id)],
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
    #: the usage the server reported, as an OpenAI ``usage`` object (only the counts it gave)
    usage: dict[str, Any] = field(default_factory=dict)
    #: what the live audit knew of the call besides the body: ``session``, ``call_index``,
    #: the request's change ``marker`` (a compaction), the backend's own ``reusable_tokens``,
    #: the ``error`` of a call that failed
    meta: dict[str, Any] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """The call as one line of a request log: ``{"request": body, "response": {"usage":
        ...}, "ctxwright": meta}``, the pair form every log reader takes (``audit/logs.py``).
        ``ctxwright audit`` of these lines gives the verdicts and reusable counts the live audit
        stored (``ctxwright show``); any other tool can take ``.request`` to replay it."""
        return {"request": self.body, "response": {"usage": self.usage}, "ctxwright": self.meta}


def openai_usage(prompt: int | None, completion: int | None, cached: int | None) -> dict[str, Any]:
    """Counts as an OpenAI ``usage`` object; a count the server did not give is left out
    (unknown), never written as 0."""
    usage: dict[str, Any] = {}
    if prompt is not None:
        usage["prompt_tokens"] = prompt
    if completion is not None:
        usage["completion_tokens"] = completion
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return usage


def request_bodies(store: Store, session_id: str) -> tuple[str, list[CallBody], list[int]]:
    """(session id, the request body of every model call, calls that cannot be rebuilt).

    Each call's messages are rendered by the one renderer (``core/render.py``) from the
    events recorded before it and the session's recorded settings; the options it was sent
    with come from its call record (``store/sessions.py``, schema 2). The body is what
    ``backends/openai_compat.py`` sends (``ChatRequest.openai_body``), so it equals, as
    canonical JSON, what the server received. Every rebuilt request is checked against the
    hash recorded when it was sent.
    """
    from ctxwright.core.markers import markers_at
    from ctxwright.core.render import render_at
    from ctxwright.core.session import Session

    session = Session.resume(store, session_id)
    calls = store.calls(session.id)
    counts = [c.event_count for c in calls if c.event_count is not None]
    rendered = render_at(session.prefix, session.events, session.settings(), counts)
    markers = markers_at(session.events, counts)
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
        meta: dict[str, Any] = {"session": session.id, "call_index": c.call_index}
        if markers.get(n):
            meta["marker"] = markers[n]
        hint = c.usage.get("raw", {}).get("reusable_tokens") if isinstance(c.usage.get("raw"), dict) else None
        if isinstance(hint, int) and not isinstance(hint, bool):
            meta["reusable_tokens"] = hint
        if c.error is not None:
            meta["error"] = c.error
        usage = openai_usage(c.prompt_tokens, c.completion_tokens, c.cached_tokens)
        body = without_reply_only(opts.body(messages, session.prefix.tools), session.backend)
        out.append(CallBody(c.call_index, body, opts.unknown, verified, usage, meta))
    return session.id, out, missing
