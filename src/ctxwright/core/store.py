"""SQLite persistence of sessions, events and model calls.

Why it looks like this: every event is written *as it happens* (autocommit, WAL), so a
crash mid-session keeps everything recorded before it (DESIGN.md complaint 8: tool calls
missing from saved sessions). Events are stored once each -- never the full state per
step -- so a long session grows the database linearly, not quadratically.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxwright.core.messages import canonical_json
from ctxwright.errors import SessionNotFound

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    parent_id TEXT,
    created_at REAL NOT NULL,
    prefix_json TEXT NOT NULL,
    prefix_sha256 TEXT NOT NULL,
    backend TEXT,
    model TEXT,
    meta_json TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS events (
    session_id TEXT NOT NULL REFERENCES sessions(id),
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    created_at REAL NOT NULL,
    payload_json TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE TABLE IF NOT EXISTS calls (
    session_id TEXT NOT NULL REFERENCES sessions(id),
    call_index INTEGER NOT NULL,
    created_at REAL NOT NULL,
    request_sha256 TEXT NOT NULL,
    request_bytes INTEGER NOT NULL,
    prefix_sha256 TEXT NOT NULL,
    prompt_tokens INTEGER,
    cached_tokens INTEGER,
    completion_tokens INTEGER,
    prefill_ms REAL,
    decode_ms REAL,
    usage_json TEXT NOT NULL DEFAULT '{}',
    ledger_json TEXT NOT NULL DEFAULT '{}',
    audit_json TEXT NOT NULL DEFAULT '{}',
    error TEXT,
    PRIMARY KEY (session_id, call_index)
);
CREATE INDEX IF NOT EXISTS sessions_parent ON sessions(parent_id);
"""


def default_db_path() -> Path:
    """``$CTXWRIGHT_DB`` if set, else ``ctxwright.db`` in the user's data dir."""
    env = os.environ.get("CTXWRIGHT_DB")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_data_dir

    return Path(user_data_dir("ctxwright", appauthor=False)) / "ctxwright.db"


@dataclass(frozen=True)
class EventRow:
    seq: int
    kind: str
    created_at: float
    payload: dict[str, Any]


@dataclass(frozen=True)
class SessionRow:
    id: str
    parent_id: str | None
    created_at: float
    prefix: dict[str, Any]
    prefix_sha256: str
    backend: str | None
    model: str | None
    meta: dict[str, Any]


class Store:
    """One SQLite database (WAL mode). Thread-safe: tool threads may record concurrently."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_db_path()
        if str(self.path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        try:
            self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise sqlite3.DatabaseError(
                f"cannot open the ctxwright database at {self.path}: {exc}. "
                "Point CTXWRIGHT_DB (or --db) at another file, or move the damaged one away."
            ) from exc

    # -- writes -------------------------------------------------------------------------
    def create_session(
        self,
        prefix: dict[str, Any],
        prefix_sha256: str,
        *,
        backend: str | None = None,
        model: str | None = None,
        parent_id: str | None = None,
        meta: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> str:
        sid = session_id or uuid.uuid4().hex[:12]
        with self._lock:
            self._db.execute(
                "INSERT INTO sessions VALUES (?,?,?,?,?,?,?,?)",
                (
                    sid,
                    parent_id,
                    time.time(),
                    canonical_json(prefix),
                    prefix_sha256,
                    backend,
                    model,
                    canonical_json(meta or {}),
                ),
            )
        return sid

    def append_event(
        self, session_id: str, seq: int, kind: str, payload: dict[str, Any], created_at: float | None = None
    ) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO events VALUES (?,?,?,?,?)",
                (session_id, seq, kind, created_at or time.time(), canonical_json(payload)),
            )

    def record_call(self, session_id: str, call_index: int, row: dict[str, Any]) -> None:
        cols = (
            "request_sha256",
            "request_bytes",
            "prefix_sha256",
            "prompt_tokens",
            "cached_tokens",
            "completion_tokens",
            "prefill_ms",
            "decode_ms",
        )
        jcols = ("usage", "ledger", "audit")
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO calls (session_id, call_index, created_at, "
                + ", ".join(cols)
                + ", usage_json, ledger_json, audit_json, error) VALUES ("
                + ",".join("?" * (3 + len(cols) + len(jcols) + 1))
                + ")",
                (
                    session_id,
                    call_index,
                    time.time(),
                    *[row.get(c) for c in cols],
                    *[canonical_json(row.get(c) or {}) for c in jcols],
                    row.get("error"),
                ),
            )

    def update_meta(self, session_id: str, meta: dict[str, Any]) -> None:
        with self._lock:
            self._db.execute("UPDATE sessions SET meta_json=? WHERE id=?", (canonical_json(meta), session_id))

    # -- reads --------------------------------------------------------------------------
    def get_session(self, session_id: str) -> SessionRow:
        with self._lock:
            row = self._db.execute("SELECT * FROM sessions WHERE id=?", (session_id,)).fetchone()
            if row is None:
                # allow unique prefixes of IDs, like git
                rows = self._db.execute("SELECT * FROM sessions WHERE id LIKE ?", (session_id + "%",)).fetchall()
                if len(rows) == 1:
                    row = rows[0]
        if row is None:
            raise SessionNotFound(
                f"no session {session_id!r} in {self.path}. Run `ctxwright sessions` to list the IDs "
                "(or pass --db / CTXWRIGHT_DB if the session lives in another database)."
            )
        return SessionRow(row[0], row[1], row[2], json.loads(row[3]), row[4], row[5], row[6], json.loads(row[7]))

    def events(self, session_id: str) -> list[EventRow]:
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, kind, created_at, payload_json FROM events WHERE session_id=? ORDER BY seq", (session_id,)
            ).fetchall()
        return [EventRow(r[0], r[1], r[2], json.loads(r[3])) for r in rows]

    def calls(self, session_id: str) -> list[dict[str, Any]]:
        with self._lock:
            cur = self._db.execute("SELECT * FROM calls WHERE session_id=? ORDER BY call_index", (session_id,))
            names = [d[0] for d in cur.description]
            out = []
            for r in cur.fetchall():
                d = dict(zip(names, r, strict=False))
                for j in ("usage_json", "ledger_json", "audit_json"):
                    d[j[:-5]] = json.loads(d.pop(j))
                out.append(d)
        return out

    def list_sessions(self, limit: int = 50, include_children: bool = False) -> list[dict[str, Any]]:
        where = "" if include_children else "WHERE s.parent_id IS NULL"
        with self._lock:
            rows = self._db.execute(
                f"""SELECT s.id, s.created_at, s.backend, s.model, s.parent_id,
                       (SELECT COUNT(*) FROM events e WHERE e.session_id=s.id),
                       (SELECT COUNT(*) FROM calls c WHERE c.session_id=s.id),
                       (SELECT payload_json FROM events e WHERE e.session_id=s.id AND e.kind='user'
                        ORDER BY seq LIMIT 1)
                   FROM sessions s {where} ORDER BY s.created_at DESC LIMIT ?""",
                (limit,),
            ).fetchall()
        out = []
        for r in rows:
            first = ""
            if r[7]:
                first = (json.loads(r[7]).get("message") or {}).get("content") or ""
            out.append(
                {
                    "id": r[0],
                    "created_at": r[1],
                    "backend": r[2],
                    "model": r[3],
                    "parent_id": r[4],
                    "events": r[5],
                    "calls": r[6],
                    "first_user": first,
                }
            )
        return out

    def children(self, session_id: str) -> list[str]:
        with self._lock:
            return [
                r[0]
                for r in self._db.execute(
                    "SELECT id FROM sessions WHERE parent_id=? ORDER BY created_at", (session_id,)
                ).fetchall()
            ]

    def close(self) -> None:
        with self._lock:
            self._db.close()
