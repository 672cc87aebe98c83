"""A stored session as plain JSON: what ``ctxwright show ID --json`` prints and what the
offline audit reads back."""

from __future__ import annotations

from typing import Any

from ctxwright.core.store import Store


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
        "calls": store.calls(row.id),
        "children": [session_export(store, c) for c in store.children(row.id)],
    }
