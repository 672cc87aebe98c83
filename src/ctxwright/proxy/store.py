"""The proxy's tables (``proxy_sessions``, ``proxy_exchanges``): what ``ctxwright proxy``
writes as it relays, and the rows ``proxy/log.py`` reads back.

Why apart from ``store/sessions.py``: a proxied agent's requests are not rendered from
ctxwright events, so they are kept as the bytes that went over the wire, in tables of their
own (created by the store's migration ``m005_proxy``, which stays in ``store/migrations.py``
because migrations are history). :class:`ProxyLog` works over the same connection as the
store it is given (``Store.db``), so one database file holds both and the same waiting and
errors apply.

Every write passes here, so this is where credentials are kept off the disk: a client
configured with its key in the URL (``?key=`` for Google's endpoint, ``?api-key=`` for Azure)
sends it in the query of every request, and the stored path, error and upstream are redacted
by the one rule of ``core/redact.py`` (no header is stored at all).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from typing import Any

from ctxwright.core.redact import redact, redact_query
from ctxwright.errors import SessionNotFound
from ctxwright.store.ids import resolve_id
from ctxwright.store.sessions import Store

#: The columns of one ``proxy_exchanges`` row a caller may write (``id`` is assigned).
PROXY_EXCHANGE_COLUMNS = (
    "session_id",
    "call_index",
    "started_at",
    "ended_at",
    "method",
    "path",
    "api",
    "streamed",
    "status",
    "outcome",
    "error",
    "request_bytes",
    "request_sha256",
    "request_content_type",
    "request_encoding",
    "request_body",
    "request_parsed",
    "response_bytes",
    "response_sha256",
    "response_content_type",
    "response_encoding",
    "response_body",
    "response_parsed",
    "ttfb_ms",
    "total_ms",
    "audit_json",
)


class ProxyLog:
    """The proxy's sessions and exchanges in ``store``'s database."""

    def __init__(self, store: Store) -> None:
        self.db = store.db

    def create_session(
        self, *, grouped_by: str, group_key: str | None, api: str | None, upstream: str, session_id: str | None = None
    ) -> str:
        sid = session_id or "px-" + uuid.uuid4().hex[:10]
        self.db.execute(
            "INSERT INTO proxy_sessions (id, created_at, grouped_by, group_key, api, upstream) VALUES (?, ?, ?, ?, ?, ?)",
            (sid, time.time(), grouped_by, group_key, api, redact(upstream)),
        )
        return sid

    def find_session(self, grouped_by: str, group_key: str) -> str | None:
        """The newest proxy session grouped by ``grouped_by`` = ``group_key`` (a restarted proxy
        keeps adding to it)."""
        row = self.db.fetchone(
            "SELECT id FROM proxy_sessions WHERE grouped_by=? AND group_key=? ORDER BY created_at DESC LIMIT 1",
            (grouped_by, group_key),
        )
        return None if row is None else str(row["id"])

    def record_exchange(self, row: Mapping[str, Any]) -> int:
        """One relayed exchange (the columns of :data:`PROXY_EXCHANGE_COLUMNS`), its query's
        credentials and any in its error redacted; its row id."""
        clean = dict(row)
        if isinstance(clean.get("path"), str):
            clean["path"] = redact_query(clean["path"])
        if isinstance(clean.get("error"), str):
            clean["error"] = redact(clean["error"])
        cols = [c for c in PROXY_EXCHANGE_COLUMNS if c in clean]
        values = [clean[c] for c in cols]
        return self.db.insert(
            f"INSERT INTO proxy_exchanges ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", values
        )

    def call_count(self, session_id: str) -> int:
        row = self.db.fetchone("SELECT COUNT(*) AS n FROM proxy_exchanges WHERE session_id=?", (session_id,))
        return 0 if row is None else int(row["n"])

    def session_rows(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Every proxy session, newest first, with its counts and time span."""
        rows = self.db.fetchall(
            """SELECT s.id AS id, s.created_at AS created_at, s.grouped_by AS grouped_by, s.group_key AS group_key,
                   s.api AS api, s.upstream AS upstream,
                   (SELECT COUNT(*) FROM proxy_exchanges x WHERE x.session_id=s.id) AS calls,
                   (SELECT MAX(COALESCE(x.ended_at, x.started_at)) FROM proxy_exchanges x WHERE x.session_id=s.id)
                     AS last_at
               FROM proxy_sessions s ORDER BY s.created_at DESC"""
            + ("" if limit is None else " LIMIT ?"),
            () if limit is None else (limit,),
        )
        return [dict(r) for r in rows]

    def session_row(self, session_id: str) -> dict[str, Any]:
        """One proxy session by id or unique id prefix (``store/ids.py``); :class:`SessionNotFound`
        or :class:`~ctxwright.errors.AmbiguousSessionId` otherwise."""
        cols = "id, created_at, grouped_by, group_key, api, upstream"
        sid = resolve_id(self.db, "proxy_sessions", session_id, what="proxy session", listing="ctxwright proxy --list")
        row = self.db.fetchone(f"SELECT {cols} FROM proxy_sessions WHERE id=?", (sid,))
        if row is None:  # deleted in between
            raise SessionNotFound(f"proxy session {session_id!r} is no longer in {self.db.location}")
        return dict(row)

    def exchange_rows(self, session_id: str | None) -> list[dict[str, Any]]:
        """The exchanges of one proxy session in call order (``None``: those of no session,
        the requests that were not model calls), bodies included."""
        cols = ", ".join(("id", *PROXY_EXCHANGE_COLUMNS))
        if session_id is None:
            rows = self.db.fetchall(f"SELECT {cols} FROM proxy_exchanges WHERE session_id IS NULL ORDER BY id")
        else:
            rows = self.db.fetchall(
                f"SELECT {cols} FROM proxy_exchanges WHERE session_id=? ORDER BY call_index, id", (session_id,)
            )
        out = []
        for r in rows:
            d = dict(r)
            d["audit"] = json.loads(d.pop("audit_json") or "{}")
            out.append(d)
        return out


__all__ = ["PROXY_EXCHANGE_COLUMNS", "ProxyLog"]
