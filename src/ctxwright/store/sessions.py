"""Persistence of sessions, events and model calls: the :class:`Store`, on an SQLite file
or a PostgreSQL server (``store/database.py``; one SQL text for both).

Why it looks like this: every event is written *as it happens* (autocommit, WAL), so a
crash mid-session keeps everything recorded before it (peer frameworks lose tool calls from
saved sessions). Events are stored once each -- never the full state per
step -- so a long session grows the database linearly, not quadratically.

The schema changes only through the migrations of ``store/migrations.py``; the connection,
its waiting and its errors are ``store/sqlite.py``'s or ``store/postgres.py``'s. All SQL names its columns: a migration
that adds one never shifts what a read returns. One session has one writer at a time: the
``session_leases`` table records which process runs it (``store/lease.py`` decides when a
lease is stale). The store implements what the session needs from it
(``core/records.py: SessionStore``); the proxy's tables are ``proxy/store.py``'s. The
attention maps ``ctxwright attention`` saved are kept per call, as the map's JSON, for the report.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxwright.core.events import (
    MCP_TOOLS_KEY,
    SKILLS_CATALOG_KEY,
    Event,
    MessageEvent,
    StatusEvent,
    UserEvent,
    event_from_row,
)
from ctxwright.core.messages import canonical_json
from ctxwright.core.records import CALL_COLUMNS, CALL_JSON_COLUMNS, CallRecord, SessionRow
from ctxwright.core.redact import redact
from ctxwright.errors import AttentionError, CtxwrightError, SessionNotFound
from ctxwright.store.database import (
    STORE_TABLES,
    Connection,
    Database,
    Dialect,
    is_url,
    missing_store,
    upsert_sql,
)
from ctxwright.store.ids import resolve_id
from ctxwright.store.migrations import applied_in_order, check_file, check_schema, migrate
from ctxwright.store.recovery import FOLDER, RecoveryLog
from ctxwright.store.sqlite import SqliteDatabase, default_db_target, wait_from_env


def payload_json(event: Event) -> str:
    """``canonical_json(event.to_payload())``, the text an event is stored as. A message
    event's payload holds its message's wire form under ``message``, whose canonical JSON the
    message keeps (``Message.canonical``, needed for the request anyway): it is put in its
    place rather than encoded a second time, between the keys that sort before and after it."""
    payload = event.to_payload()
    if not isinstance(event, MessageEvent) or "message" not in payload or not all(type(k) is str for k in payload):
        return canonical_json(payload)
    before = {k: v for k, v in payload.items() if k < "message"}
    after = {k: v for k, v in payload.items() if k > "message"}
    parts = [canonical_json(before)[1:-1], '"message":' + event.message.canonical(), canonical_json(after)[1:-1]]
    return "{" + ",".join(p for p in parts if p) + "}"


#: The largest attention map :meth:`Store.save_attention` keeps, in bytes of JSON. An 8k-token
#: request's map is a few hundred KB (each token's text and share, each span's share per layer).
MAX_ATTENTION_BYTES = 4_000_000

_CALL_ROW = ("session_id", "call_index", "created_at", *CALL_COLUMNS, *(f"{c}_json" for c in CALL_JSON_COLUMNS))
#: :meth:`Store.record_call`'s statement, written once (every call of a session runs it).
_INSERT_CALL = upsert_sql("calls", _CALL_ROW, ("session_id", "call_index"))
_LEASE_ROW = ("session_id", "holder", "pid", "host", "process_started", "since")
#: the first user messages read per session for ``list_sessions``' "first_user" (the skills
#: catalog and the MCP tool listing come first as user events of their own)
_FIRST_USER_SCAN = 8


@dataclass(frozen=True)
class LeaseRow:
    """Who runs a session: one harness (``holder``, a random token) in one process."""

    session_id: str
    holder: str
    pid: int
    host: str
    process_started: float | None
    since: float


def _data_dir() -> Path:
    from platformdirs import user_data_dir

    return Path(user_data_dir("ctxwright", appauthor=False))


def recovery_dir_for(target: str | Path) -> Path:
    """The recovery folder of the store at ``target`` (``store/recovery.py``), known without
    opening it: a process that cannot reach its store keeps what it could not write there."""
    if is_url(target):
        return _data_dir() / FOLDER / f"postgresql-{_url_digest(target)}"
    return Path(target).parent / FOLDER


def _url_digest(target: str | Path) -> str:
    """A PostgreSQL store's name on disk: its URL without the password, hashed."""
    return hashlib.sha256(redact(str(target).strip()).encode("utf-8")).hexdigest()[:16]


def spool_store(target: str | Path) -> str:
    """What a recovery spool names as its store (``store/recovery.py``, :class:`Spool`): the
    SQLite file's name, since two files in one folder share :func:`recovery_dir_for` (a
    PostgreSQL store's folder is its own: the same digest)."""
    return _url_digest(target) if is_url(target) else Path(target).name


class Store:
    """One database: an SQLite file (WAL mode) or a ``postgresql://`` URL. Thread-safe: tool
    threads may record concurrently.

    ``wait_s``: how long a read or write waits for another process's lock (default
    ``CTXWRIGHT_DB_WAIT`` or 60 s). ``db`` is the connection (``store/database.py``) the
    proxy's tables share. ``path`` is the SQLite file (``None`` for PostgreSQL), ``location``
    the store as printed (a URL without its password), ``target`` what reopens it.

    ``must_exist``: for a command that only reads -- a store that is not there (no file, or a
    database without ctxwright's tables) is :class:`~ctxwright.errors.StoreMissing` and
    nothing is created: no folder, no file, no table. Only what records creates a store.
    """

    def __init__(
        self, path: str | Path | None = None, *, wait_s: float | None = None, must_exist: bool = False
    ) -> None:
        target = default_db_target() if path is None else path
        self.must_exist = must_exist
        self.by_default = path is None  # no --db: a missing store's message says what chose it
        self.wait_s = wait_from_env() if wait_s is None else max(0.0, wait_s)
        self._lease_writes = 0  # lease writes through this connection (see lease_mark)
        self.db: Database
        if is_url(target):
            from ctxwright.store.postgres import PostgresDatabase

            self.path: Path | None = None
            self.target: str = str(target).strip()
            self.db = PostgresDatabase(self.target, wait_s=self.wait_s, setup=self._open)
        else:
            self.path = Path(target)
            self.target = str(self.path)
            self.db = SqliteDatabase(
                self.path,
                wait_s=self.wait_s,
                check_file=check_file,
                setup=self._open,
                create=not must_exist,
                by_default=self.by_default,
            )
        self.recovery_dir = recovery_dir_for(self.target)
        self.location = self.db.location

    @classmethod
    def existing(cls, target: str | Path | None = None) -> Store:
        """The store a command that only reads opens: ``target`` as ``--db`` gives it (a URL
        trimmed, ``~`` expanded; ``None``: ``$CTXWRIGHT_DB`` or the user data dir's), and only if
        it is there (``must_exist``) -- a mistyped name creates nothing. One opener for the
        CLI, the lock and the gate's golden, which each had a copy."""
        from ctxwright.store.database import normalize_target

        return cls(None if target is None else normalize_target(target), must_exist=True)

    def _open(self, db: Connection, dialect: Dialect) -> None:
        """Check the schema (reads only), then bring it forward (``store/migrations.py``). A
        store that must exist and has none of ctxwright's tables is refused before anything is
        written (the migrations would create them in whatever database ``--db`` named)."""
        where = redact(self.target)
        applied = check_schema(db, where, dialect)
        if self.must_exist and not any(dialect.has_table(db, t) for t in STORE_TABLES):
            raise missing_store(where, found=True, by_default=self.by_default)
        if dialect.name == "sqlite":  # written only once the checks passed: WAL rewrites the header
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
        migrate(db, where, applied, dialect)

    def schema(self) -> tuple[int, list[str]]:
        """(``user_version``, applied migration names in order)."""

        def read(db: Connection) -> tuple[int, list[str]]:
            return self.db.dialect.user_version(db), applied_in_order(db, self.db.dialect)

        return self.db.run(read)

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
        self.db.execute(
            "INSERT INTO sessions (id, parent_id, created_at, prefix_json, prefix_sha256, backend, model, "
            "meta_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
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

    def append_event(self, session_id: str, event: Event) -> None:
        self.db.execute(
            "INSERT INTO events (session_id, seq, kind, created_at, payload_json) VALUES (?, ?, ?, ?, ?)",
            (session_id, event.seq, event.kind, event.created_at, payload_json(event)),
        )

    def record_call(self, record: CallRecord) -> None:
        """One model call (``INSERT OR REPLACE`` by session and index). Its ``error`` is stored
        with any URL credential redacted (``core/redact.py``), whoever wrote it: an error may
        quote a base URL with its credentials."""
        scalars = {c: getattr(record, c) for c in CALL_COLUMNS}
        if isinstance(record.error, str):
            scalars["error"] = redact(record.error)
        parts = record.json_parts()
        values = [
            record.session_id,
            record.call_index,
            record.created_at or time.time(),
            *scalars.values(),
            *[canonical_json(parts[c]) for c in CALL_JSON_COLUMNS],
        ]
        self.db.execute(_INSERT_CALL, values)

    def update_meta(self, session_id: str, meta: dict[str, Any]) -> None:
        self.db.execute("UPDATE sessions SET meta_json=? WHERE id=?", (canonical_json(meta), session_id))

    def save_attention(self, session_id: str, call_index: int, data: dict[str, Any]) -> None:
        """Store the attention map of one call (``AttentionMap.to_json()``), replacing the map
        that call had. The session must exist (a unique start of its id is enough).

        Refused with an :class:`~ctxwright.errors.AttentionError` before anything is written:
        a map that is not JSON (a NaN share is a bug upstream, not a number to draw) or is
        over :data:`MAX_ATTENTION_BYTES` -- every report of the session would carry it."""
        if not isinstance(call_index, int) or isinstance(call_index, bool) or call_index < 0:
            raise AttentionError(f"an attention map is stored per model call: call {call_index!r} is not a call index")
        if not isinstance(data, dict):
            raise AttentionError(f"an attention map is a JSON object, not a {type(data).__name__}")
        try:
            text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise AttentionError(
                f"the attention map of call {call_index} is not JSON ({exc}); it was not stored"
            ) from None
        size = len(text.encode("utf-8"))
        if size > MAX_ATTENTION_BYTES:
            raise AttentionError(
                f"the attention map of call {call_index} is {size / 1e6:.1f} MB, over the store's "
                f"{MAX_ATTENTION_BYTES / 1e6:.0f} MB per map; it was not stored (a shorter request, or "
                "`ctxwright attention --json` to a file, keeps it)"
            )
        sid = self.resolve(session_id)
        self.db.execute(
            upsert_sql(
                "attention_maps", ("session_id", "call_index", "created_at", "map_json"), ("session_id", "call_index")
            ),
            (sid, call_index, time.time(), text),
        )

    def discard_unanswered(self, session_id: str) -> bool:
        """Delete a session that holds nothing but its opening -- the user's message and what
        the options add before the first call (the status, a skills catalog or MCP listing, all
        ``user``/``status`` events) -- and calls no model answered; ``True`` if it was deleted.

        Why: a run whose first model call never got an answer (nothing listening at the base
        URL, a name that does not resolve) left a session that only repeats the command line,
        and ``--resume`` on it would send the task twice. Anything more -- an answer, a tool
        result, a compaction, a child session, an attention map -- keeps the session whole;
        the check and the deletion are one exclusive transaction."""
        kinds = (UserEvent.KIND, StatusEvent.KIND)

        def discard(db: Connection) -> bool:
            marks = ", ".join("?" * len(kinds))
            checks = (
                (f"SELECT 1 FROM events WHERE session_id=? AND kind NOT IN ({marks})", (session_id, *kinds)),
                ("SELECT 1 FROM calls WHERE session_id=? AND error IS NULL", (session_id,)),
                ("SELECT 1 FROM sessions WHERE parent_id=?", (session_id,)),
                ("SELECT 1 FROM attention_maps WHERE session_id=?", (session_id,)),
            )
            if any(db.execute(sql + " LIMIT 1", params).fetchone() is not None for sql, params in checks):
                return False
            for table, key in (("calls", "session_id"), ("events", "session_id"), ("sessions", "id")):
                db.execute(f"DELETE FROM {table} WHERE {key}=?", (session_id,))
            return True

        return self.db.exclusive(f"lease {session_id}", discard)

    def recovery_log(self, session_id: str) -> RecoveryLog:
        """The recovery file a session writes to once this store refused a write (``store/recovery.py``)."""
        return RecoveryLog(self.recovery_dir, session_id)

    # -- one writer per session (store/lease.py) ---------------------------------------------
    def acquire_lease(self, lease: LeaseRow, may_take: Callable[[LeaseRow], bool]) -> LeaseRow | None:
        """Record ``lease`` as the session's writer unless another holder's lease stands;
        returns that standing lease (nothing written), or ``None`` when ``lease`` is now held.
        ``may_take(other)`` decides whether another holder's lease is stale. One exclusive
        transaction (``Database.exclusive``): two processes racing for a session are serialized."""

        def take(db: Connection) -> LeaseRow | None:
            self._lease_writes += 1
            r = db.execute(
                f"SELECT {', '.join(_LEASE_ROW)} FROM session_leases WHERE session_id=?", (lease.session_id,)
            ).fetchone()
            other = LeaseRow(**dict(r)) if r is not None else None
            if other is not None and other.holder != lease.holder and not may_take(other):
                return other
            db.execute(
                upsert_sql("session_leases", _LEASE_ROW, ("session_id",)),
                (lease.session_id, lease.holder, lease.pid, lease.host, lease.process_started, lease.since),
            )
            return None

        return self.db.exclusive(f"lease {lease.session_id}", take)

    def release_lease(self, session_id: str, holder: str, *, wait_s: float | None = None) -> None:
        """Delete the lease if ``holder`` still holds it, waiting at most ``wait_s`` for a lock."""

        def release(db: Connection) -> None:
            self._lease_writes += 1
            db.execute("DELETE FROM session_leases WHERE session_id=? AND holder=?", (session_id, holder))

        self.db.run(release, wait_s=wait_s)

    def lease_mark(self) -> tuple[object, int]:
        """A value that changes whenever a session lease may have changed since it was read:
        the database's change mark (SQLite's ``data_version``, changed by every commit of
        another connection, this process's or another's; PostgreSQL's is new every time) and
        this store's own lease writes (which ``data_version`` does not count). A lease checked
        under one mark is still held while the mark is the same, so a harness checking its
        lease before each step reads the lease row only after a write elsewhere."""
        return self.db.change_mark(), self._lease_writes

    def lease(self, session_id: str) -> LeaseRow | None:
        r = self.db.fetchone(
            "SELECT session_id, holder, pid, host, process_started, since FROM session_leases WHERE session_id=?",
            (session_id,),
        )
        return LeaseRow(**dict(r)) if r is not None else None

    # -- reads --------------------------------------------------------------------------
    def get_session(self, session_id: str) -> SessionRow:
        """The session ``session_id`` names: its full ID or a unique start of it (``resolve``)."""
        cols = "id, parent_id, created_at, prefix_json, prefix_sha256, backend, model, meta_json"
        row = self.db.fetchone(f"SELECT {cols} FROM sessions WHERE id=?", (self.resolve(session_id),))
        if row is None:  # deleted in between
            raise SessionNotFound(f"session {session_id!r} is no longer in {self.location}")
        return SessionRow(
            id=row["id"],
            parent_id=row["parent_id"],
            created_at=row["created_at"],
            prefix=json.loads(row["prefix_json"]),
            prefix_sha256=row["prefix_sha256"],
            backend=row["backend"],
            model=row["model"],
            meta=json.loads(row["meta_json"]),
        )

    def resolve(self, session_id: str) -> str:
        """The full ID of the session ``session_id`` names, whole or by a unique start
        (``store/ids.py``); :class:`SessionNotFound` or :class:`AmbiguousSessionId` otherwise."""
        return resolve_id(self.db, "sessions", session_id, what="session", listing="ctxwright sessions")

    def latest_session(self) -> str | None:
        """The id of the top-level session used last (its newest event, else its creation)."""
        row = self.db.fetchone(
            """SELECT s.id AS id FROM sessions s WHERE s.parent_id IS NULL
               ORDER BY COALESCE((SELECT MAX(e.created_at) FROM events e WHERE e.session_id=s.id), s.created_at)
               DESC, s.created_at DESC LIMIT 1"""
        )
        return None if row is None else str(row["id"])

    def events(self, session_id: str) -> list[Event]:
        rows = self.db.fetchall(
            "SELECT seq, kind, created_at, payload_json FROM events WHERE session_id=? ORDER BY seq", (session_id,)
        )
        return [event_from_row(r["seq"], r["kind"], r["created_at"], json.loads(r["payload_json"])) for r in rows]

    def calls(self, session_id: str) -> list[CallRecord]:
        """Every call of the session, in order."""
        columns = ["call_index", "created_at", *CALL_COLUMNS, *(f"{c}_json" for c in CALL_JSON_COLUMNS)]
        rows = self.db.fetchall(
            f"SELECT {', '.join(columns)} FROM calls WHERE session_id=? ORDER BY call_index", (session_id,)
        )
        out = []
        for r in rows:
            d: dict[str, Any] = {"session_id": session_id}
            d.update({c: r[c] for c in ("call_index", "created_at", *CALL_COLUMNS)})
            d.update({c: json.loads(r[f"{c}_json"]) for c in CALL_JSON_COLUMNS})
            out.append(CallRecord.from_dict(d))
        return out

    def list_sessions(self, limit: int = 50, include_children: bool = False) -> list[dict[str, Any]]:
        """The Harness sessions, newest first (``kind`` ``run``; the CLI lists them with the
        proxy's and frameworks' sessions, ``cli/sessions.py``)."""
        where = "" if include_children else "WHERE s.parent_id IS NULL"
        rows = self.db.fetchall(
            f"""SELECT s.id AS id, s.created_at AS created_at, s.backend AS backend, s.model AS model,
                   s.parent_id AS parent_id,
                   (SELECT COUNT(*) FROM events e WHERE e.session_id=s.id) AS events,
                   (SELECT COUNT(*) FROM calls c WHERE c.session_id=s.id) AS calls
               FROM sessions s {where} ORDER BY s.created_at DESC LIMIT ?""",
            (limit,),
        )
        return [
            {
                "id": r["id"],
                "kind": "run",
                "created_at": r["created_at"],
                "backend": r["backend"],
                "model": r["model"],
                "parent_id": r["parent_id"],
                "events": int(r["events"]),
                "calls": int(r["calls"]),
                "first_user": self._first_user(r["id"]),
            }
            for r in rows
        ]

    def _first_user(self, session_id: str) -> str:
        """The first thing the user said: the first user event that is not the skills catalog
        or the MCP tool listing (user events of their own), read in Python -- the JSON
        functions SQLite and PostgreSQL offer differ. A damaged payload counts as nothing."""
        rows = self.db.fetchall(
            "SELECT seq, payload_json FROM events WHERE session_id=? AND kind=? ORDER BY seq LIMIT ?",
            (session_id, UserEvent.KIND, _FIRST_USER_SCAN),
        )
        for r in rows:
            try:
                payload = json.loads(r["payload_json"])
                if not isinstance(payload, dict):
                    continue
                if payload.get(SKILLS_CATALOG_KEY) is not None or payload.get(MCP_TOOLS_KEY) is not None:
                    continue
                ev = event_from_row(r["seq"], UserEvent.KIND, 0.0, payload)
            except (CtxwrightError, ValueError, RecursionError):
                continue
            return ev.message.content or "" if isinstance(ev, UserEvent) else ""
        return ""

    def attention_maps(self, session_id: str) -> list[tuple[int, dict[str, Any]]]:
        """``(call index, map JSON)`` of every attention map stored for the session, by call."""
        rows = self.db.fetchall(
            "SELECT call_index, map_json FROM attention_maps WHERE session_id=? ORDER BY call_index",
            (self.resolve(session_id),),
        )
        return [(int(r["call_index"]), json.loads(r["map_json"])) for r in rows]

    def children(self, session_id: str) -> list[str]:
        rows = self.db.fetchall("SELECT id FROM sessions WHERE parent_id=? ORDER BY created_at", (session_id,))
        return [r["id"] for r in rows]

    def close(self) -> None:
        self.db.close()


__all__ = ["LeaseRow", "Store"]
