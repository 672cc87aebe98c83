"""The proxy's tables (``proxy_sessions``, ``proxy_exchanges``): what ``ctxwright proxy``
writes as it relays, and the rows ``proxy/log.py`` reads back.

Why apart from ``store/sessions.py``: a proxied agent's requests are not rendered from
ctxwright events, so they are kept as the bytes that went over the wire, in tables of their
own (created by the store's migration ``m005_proxy``, which stays in ``store/migrations.py``
because migrations are history). :class:`ProxyLog` works over the same connection as the
store it is given (``Store.db``), so one database file holds both and the same waiting and
errors apply.

Several proxy processes may record into one database (``ctxwright proxy --workers N``, or
proxies on several hosts sharing a PostgreSQL store), so what places a request in a session
is kept here too (``proxy_heads``, ``proxy_responses``: ``proxy/sessions.py`` reads them), a
key meets one session however many processes see it first at once, and a call's number is
taken in the same transaction that writes its row (``Database.exclusive``): no two calls of a
session share a number, and none is skipped.

Every write passes here, so this is where credentials are kept off the disk: a client
configured with its key in the URL (``?key=`` for Google's endpoint, ``?api-key=`` for Azure)
sends it in the query of every request, and the stored path, error and upstream are redacted
by the one rule of ``core/redact.py`` (no header is stored at all).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from ctxwright.core.redact import redact, redact_query
from ctxwright.errors import SessionNotFound
from ctxwright.store.database import Connection, upsert_sql
from ctxwright.store.ids import resolve_id
from ctxwright.store.sessions import Store

#: chain hashes looked up per statement (SQLite allows 32,766 parameters; a long history has
#: one hash per message)
HEADS_PER_QUERY = 500

#: The ``upstream`` a session recorded in process by a framework's own HTTP client is stored
#: with (``integrations/recording.py``): it has no upstream URL, and this is what tells it
#: from a ``ctxwright proxy`` session in the one list of sessions.
FRAMEWORK_UPSTREAM = "framework"

#: The kind of session a stored ``upstream`` marks (anything else, a URL, is ``proxy``): one
#: table, so a later recorder of wire sessions adds its marker here and every listing and
#: command that resolves an id names its kind.
UPSTREAM_KINDS = {FRAMEWORK_UPSTREAM: "framework"}


def session_kind(upstream: str | None) -> str:
    """``proxy``, ``framework`` (or another :data:`UPSTREAM_KINDS` kind) for a stored upstream."""
    return UPSTREAM_KINDS.get(upstream or "", "proxy")


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


#: a request's hash chain end and its session (``proxy_heads``), replaced when met again
_HEAD_UPSERT = upsert_sql("proxy_heads", ("chain_sha", "session_id", "created_at"), ("chain_sha",))


def _heads_upsert(n: int) -> str:
    """:data:`_HEAD_UPSERT` for ``n`` distinct chain ends in one statement: a call stores two,
    and each statement the recorder runs is a round into SQLite (one more hand-over of the
    GIL to the event loop's thread and back)."""
    one = "(?, ?, ?)"
    return _HEAD_UPSERT.replace(f"VALUES {one}", "VALUES " + ", ".join([one] * n), 1)


def _newest_keyed(db: Connection, grouped_by: str, group_key: str) -> str | None:
    """The newest proxy session recorded under a key, on a connection (in or out of a transaction)."""
    row = db.execute(
        "SELECT id FROM proxy_sessions WHERE grouped_by=? AND group_key=? ORDER BY created_at DESC LIMIT 1",
        (grouped_by, group_key),
    ).fetchone()
    return None if row is None else str(row["id"])


def _insert_session(
    db: Connection,
    grouped_by: str,
    group_key: str | None,
    api: str | None,
    upstream: str,
    session_id: str | None = None,
) -> str:
    """A new proxy session's row, its upstream's credentials masked; its id."""
    sid = session_id or "px-" + uuid.uuid4().hex[:10]
    db.execute(
        "INSERT INTO proxy_sessions (id, created_at, grouped_by, group_key, api, upstream) VALUES (?, ?, ?, ?, ?, ?)",
        (sid, time.time(), grouped_by, group_key, api, redact(upstream)),
    )
    return sid


class ProxyLog:
    """The proxy's sessions and exchanges in ``store``'s database."""

    def __init__(self, store: Store) -> None:
        self.db = store.db

    def create_session(
        self, *, grouped_by: str, group_key: str | None, api: str | None, upstream: str, session_id: str | None = None
    ) -> str:
        return self.db.run(lambda db: _insert_session(db, grouped_by, group_key, api, upstream, session_id))

    def keyed_session(self, grouped_by: str, group_key: str, *, api: str | None, upstream: str) -> tuple[str, bool]:
        """The session of a key (a header, a cache key, a caller id): the newest one recorded
        under it, else a new one -- ``(id, new)``. One exclusive transaction per key: two
        processes meeting a new key at once make one session, not two."""

        def find_or_make(db: Connection) -> tuple[str, bool]:
            sid = _newest_keyed(db, grouped_by, group_key)
            if sid is not None:
                return sid, False
            return _insert_session(db, grouped_by, group_key, api, upstream), True

        return self.db.exclusive(f"proxy key {grouped_by}\x00{group_key}", find_or_make)

    def add_head(self, chain_sha: str, session_id: str) -> None:
        """Remember that a request whose hash chain ends in ``chain_sha`` is ``session_id``'s."""
        self.db.execute(_HEAD_UPSERT, (chain_sha, session_id, time.time()))

    def head_session(self, chain: Sequence[str]) -> str | None:
        """The session of the longest earlier request that ``chain`` (a request's hash chain,
        shortest first) extends, else ``None``."""
        found: dict[str, str] = {}
        for i in range(0, len(chain), HEADS_PER_QUERY):
            part = list(chain[i : i + HEADS_PER_QUERY])
            rows = self.db.fetchall(
                f"SELECT chain_sha, session_id FROM proxy_heads WHERE chain_sha IN ({', '.join('?' * len(part))})",
                part,
            )
            found.update({str(r["chain_sha"]): str(r["session_id"]) for r in rows})
        return next((found[h] for h in reversed(chain) if h in found), None)

    def add_response(self, response_id: str, session_id: str) -> None:
        """Remember which session a relayed Responses API answer belongs to."""
        self.db.execute(
            upsert_sql("proxy_responses", ("response_id", "session_id", "created_at"), ("response_id",)),
            (response_id, session_id, time.time()),
        )

    def response_session(self, response_id: str) -> str | None:
        row = self.db.fetchone("SELECT session_id FROM proxy_responses WHERE response_id=?", (response_id,))
        return None if row is None else str(row["session_id"])

    def record_call(self, row: Mapping[str, Any], heads: Sequence[str] = ()) -> tuple[int, int]:
        """One relayed model call of ``row["session_id"]``, numbered next in its session in
        the transaction that writes it; ``(row id, call index)``. ``heads``: the call's hash
        chain ends (``proxy/sessions.py``), stored in the same transaction -- one commit per
        call, and a call not stored leaves no chain end pointing at it."""
        clean = self._clean(row)
        cols = [c for c in PROXY_EXCHANGE_COLUMNS if c in clean and c != "call_index"]
        sid = clean["session_id"]
        unique = list(dict.fromkeys(heads))  # (one statement may not touch a row twice)

        # numbered next in its session by the insert itself: one statement, not a lookup and an
        # insert (each statement the recorder runs hands the GIL to the event loop and back)
        insert = (
            f"INSERT INTO proxy_exchanges ({', '.join([*cols, 'call_index'])}) VALUES ({', '.join('?' * len(cols))}, "
            "(SELECT COALESCE(MAX(call_index) + 1, 0) FROM proxy_exchanges WHERE session_id=?)) RETURNING id, call_index"
        )

        def write(db: Connection) -> tuple[int, int]:
            got = db.execute(insert, [*(clean[c] for c in cols), sid]).fetchone()
            rid, k = got["id"], int(got["call_index"])
            if unique:
                now = time.time()
                db.execute(_heads_upsert(len(unique)), [v for head in unique for v in (head, sid, now)])
            return int(rid), k

        return self.db.exclusive(f"proxy session {sid}", write)

    def find_session(self, grouped_by: str, group_key: str) -> str | None:
        """The newest proxy session grouped by ``grouped_by`` = ``group_key`` (a restarted proxy
        keeps adding to it)."""
        return self.db.run(lambda db: _newest_keyed(db, grouped_by, group_key))

    def record_exchange(self, row: Mapping[str, Any]) -> int:
        """One relayed exchange (the columns of :data:`PROXY_EXCHANGE_COLUMNS`), its query's
        credentials and any in its error redacted; its row id."""
        clean = self._clean(row)
        cols = [c for c in PROXY_EXCHANGE_COLUMNS if c in clean]
        values = [clean[c] for c in cols]
        return self.db.insert(
            f"INSERT INTO proxy_exchanges ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", values
        )

    @staticmethod
    def _clean(row: Mapping[str, Any]) -> dict[str, Any]:
        """``row`` with the credentials in its query and its error masked."""
        clean = dict(row)
        if isinstance(clean.get("path"), str):
            clean["path"] = redact_query(clean["path"])
        if isinstance(clean.get("error"), str):
            clean["error"] = redact(clean["error"])
        return clean

    def call_count(self, session_id: str) -> int:
        row = self.db.fetchone("SELECT COUNT(*) AS n FROM proxy_exchanges WHERE session_id=?", (session_id,))
        return 0 if row is None else int(row["n"])

    def session_rows(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Every proxy and framework session, newest first, with its counts, time span and
        ``kind`` (:func:`session_kind`)."""
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
        return [{**dict(r), "kind": session_kind(r["upstream"])} for r in rows]

    def session_row(self, session_id: str) -> dict[str, Any]:
        """One proxy session by id or unique id prefix (``store/ids.py``); :class:`SessionNotFound`
        or :class:`~ctxwright.errors.AmbiguousSessionId` otherwise."""
        cols = "id, created_at, grouped_by, group_key, api, upstream"
        sid = resolve_id(self.db, "proxy_sessions", session_id, what="proxy session", listing="ctxwright proxy --list")
        row = self.db.fetchone(f"SELECT {cols} FROM proxy_sessions WHERE id=?", (sid,))
        if row is None:  # deleted in between
            raise SessionNotFound(f"proxy session {session_id!r} is no longer in {self.db.location}")
        return {**dict(row), "kind": session_kind(row["upstream"])}

    def exchange_rows(self, session_id: str | None, start: int = 0, stop: int | None = None) -> list[dict[str, Any]]:
        """The exchanges of one proxy session in call order (``None``: those of no session,
        the requests that were not model calls), bodies included; of a session, only its
        ``start``-th to ``stop``-th stored call (counted from 0, ``stop`` excluded) -- what a
        live audit that saw the first ``start`` has not seen (``proxy/session_audit.py``)."""
        cols = ", ".join(("id", *PROXY_EXCHANGE_COLUMNS))
        if session_id is None:
            rows = self.db.fetchall(f"SELECT {cols} FROM proxy_exchanges WHERE session_id IS NULL ORDER BY id")
        else:
            sql = f"SELECT {cols} FROM proxy_exchanges WHERE session_id=? ORDER BY call_index, id"
            params: tuple[Any, ...] = (session_id,)
            if start > 0 or stop is not None:  # SQLite takes an OFFSET only after a LIMIT
                sql += " LIMIT ? OFFSET ?"
                params += (2**62 if stop is None else max(0, stop - start), max(0, start))
            rows = self.db.fetchall(sql, params)
        out = []
        for r in rows:
            d = dict(r)
            d["audit"] = json.loads(d.pop("audit_json") or "{}")
            out.append(d)
        return out


__all__ = [
    "FRAMEWORK_UPSTREAM",
    "HEADS_PER_QUERY",
    "PROXY_EXCHANGE_COLUMNS",
    "UPSTREAM_KINDS",
    "ProxyLog",
    "session_kind",
]
