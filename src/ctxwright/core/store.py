"""SQLite persistence of sessions, events and model calls, with a versioned schema.

Why it looks like this: every event is written *as it happens* (autocommit, WAL), so a
crash mid-session keeps everything recorded before it (peer frameworks lose tool calls from
saved sessions). Events are stored once each -- never the full state per
step -- so a long session grows the database linearly, not quadratically.

The schema changes only through named migrations (:data:`MIGRATIONS`), applied in order
when a store is opened and listed in a ``_migrations`` table, with ``PRAGMA user_version``
holding how many were applied -- the scheme Simon Willison's ``llm`` uses. A database
written before versioning (store v1, ``tests/fixtures/store_v1.db``) is brought forward in
place. Nothing is written before two checks pass, because a store that writes first breaks
files it does not understand (``PRAGMA journal_mode=WAL`` alone rewrites the header): the
file must be an SQLite database, and its schema must not be newer than this build's.
Either failure is one :class:`~ctxwright.errors.StoreUnusable` that says what to do, with
the file left byte for byte as it was.

All SQL names its columns: a migration that adds one never shifts what a read returns.

Faults: every file and folder the store creates is private (``core/private.py``).
A write that meets another process's lock waits -- SQLite's busy timeout, then retries with
backoff -- for at most ``CTXWRIGHT_DB_WAIT`` seconds (default 60), because SQLite's own
default gives up after 5 s with ``database is locked`` while a reply is waiting to be
stored. Every SQLite failure becomes one :class:`~ctxwright.errors.StoreUnusable` (locked,
read-only, damaged, ...) that names the file and says what to do, never a bare
``sqlite3.Error``. One session has one writer at a time: the ``session_leases`` table
records which process runs it (``core/lease.py`` decides when a lease is stale).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ctxwright.core.events import MCP_TOOLS_KEY, SKILLS_CATALOG_KEY, AssistantEvent, Event, UserEvent, event_from_row
from ctxwright.core.messages import canonical_json
from ctxwright.core.private import create_private, private_dir
from ctxwright.core.redact import redact
from ctxwright.core.request import RequestOptions
from ctxwright.errors import (
    CtxwrightError,
    NotADatabase,
    SchemaTooNew,
    SessionNotFound,
    StoreLocked,
    StoreReadOnly,
    StoreUnusable,
)

if TYPE_CHECKING:
    from ctxwright.core.messages import Message
    from ctxwright.core.request import ToolSpec

_SQLITE_MAGIC = b"SQLite format 3\x00"
_USER_VERSION_OFFSET = 60  # of the 100-byte database header: "user version", big-endian
#: seconds a read or write waits for another process's lock before it fails (env CTXWRIGHT_DB_WAIT)
DEFAULT_WAIT_S = 60.0
#: SQLite's own busy timeout per attempt; between attempts the store backs off and retries
_BUSY_TIMEOUT_S = 5.0
T = TypeVar("T")


def default_db_path() -> Path:
    """``$CTXWRIGHT_DB`` if set, else ``ctxwright.db`` in the user's data dir."""
    env = os.environ.get("CTXWRIGHT_DB")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_data_dir

    return Path(user_data_dir("ctxwright", appauthor=False)) / "ctxwright.db"


# -- migrations ----------------------------------------------------------------------------
Migration = Callable[[sqlite3.Connection], None]

#: Every schema change, in the order applied; each is named by its function. Append only:
#: a released migration is never edited or reordered (databases already ran it).
MIGRATIONS: list[Migration] = []


def migration(fn: Migration) -> Migration:
    MIGRATIONS.append(fn)
    return fn


@migration
def m001_initial(db: sqlite3.Connection) -> None:
    """The schema of the first release (store v1). ``IF NOT EXISTS``: a v1 database has it."""
    db.execute(
        """CREATE TABLE IF NOT EXISTS sessions (
            id TEXT PRIMARY KEY,
            parent_id TEXT,
            created_at REAL NOT NULL,
            prefix_json TEXT NOT NULL,
            prefix_sha256 TEXT NOT NULL,
            backend TEXT,
            model TEXT,
            meta_json TEXT NOT NULL DEFAULT '{}'
        )"""
    )
    db.execute(
        """CREATE TABLE IF NOT EXISTS events (
            session_id TEXT NOT NULL REFERENCES sessions(id),
            seq INTEGER NOT NULL,
            kind TEXT NOT NULL,
            created_at REAL NOT NULL,
            payload_json TEXT NOT NULL,
            PRIMARY KEY (session_id, seq)
        )"""
    )
    db.execute(
        """CREATE TABLE IF NOT EXISTS calls (
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
        )"""
    )
    db.execute("CREATE INDEX IF NOT EXISTS sessions_parent ON sessions(parent_id)")


@migration
def m002_call_request_options(db: sqlite3.Connection) -> None:
    """Per call: the request options that were sent and how many events it was rendered from.

    v1 kept only a hash of each request (model name, max_tokens, temperature and extra
    excluded), so its exact body could not be rebuilt. From now on the options are recorded
    with the call; for v1 calls this recovers what the stored hash proves (see
    :func:`recover_v1_options`) and marks the rest unknown.
    """
    for column, decl in (
        ("model", "TEXT"),
        ("tool_choice", "TEXT"),
        ("max_tokens", "INTEGER"),
        ("temperature", "REAL"),
        ("extra_json", "TEXT NOT NULL DEFAULT '{}'"),
        ("options_unknown_json", "TEXT NOT NULL DEFAULT '[]'"),
        ("event_count", "INTEGER"),
    ):
        db.execute(f"ALTER TABLE calls ADD COLUMN {column} {decl}")
    for srow in db.execute("SELECT id, prefix_json, model, meta_json FROM sessions").fetchall():
        calls = db.execute(
            "SELECT call_index, created_at, request_sha256 FROM calls WHERE session_id=? ORDER BY call_index",
            (srow["id"],),
        ).fetchall()
        if not calls:
            continue
        events = db.execute(
            "SELECT seq, kind, created_at, payload_json FROM events WHERE session_id=? ORDER BY seq", (srow["id"],)
        ).fetchall()
        recovered = recover_v1_options(
            srow["prefix_json"],
            srow["model"],
            srow["meta_json"],
            [(e["seq"], e["kind"], e["created_at"], e["payload_json"]) for e in events],
            [(c["call_index"], c["created_at"], c["request_sha256"]) for c in calls],
        )
        for call_index, (event_count, opts) in recovered.items():
            db.execute(
                "UPDATE calls SET model=?, tool_choice=?, event_count=?, options_unknown_json=? "
                "WHERE session_id=? AND call_index=?",
                (opts.model, opts.tool_choice, event_count, json.dumps(list(opts.unknown)), srow["id"], call_index),
            )


@migration
def m003_call_wall_ms(db: sqlite3.Connection) -> None:
    """Per call: its wall time in ms, measured around the backend call by the agent loop.

    Servers that report no cached-token field (llama-cpp-python's server) leave the cache
    columns unknown; the wall time still shows reuse (a call that reuses most of its prompt
    is much faster). Calls stored before have none (null): it was never measured.
    """
    db.execute("ALTER TABLE calls ADD COLUMN wall_ms REAL")


@migration
def m004_session_leases(db: sqlite3.Connection) -> None:
    """Which process runs each session (one writer per session, ``core/lease.py``).

    Two processes appending to one session both number their next event ``len(events)``:
    the second insert fails with ``IntegrityError`` and its reply is lost. A row here names
    the holder (a token per harness, its pid, host and process start time, since when); it
    is deleted when the harness closes, and a row whose process is gone is taken over.
    """
    db.execute(
        """CREATE TABLE IF NOT EXISTS session_leases (
            session_id TEXT PRIMARY KEY,
            holder TEXT NOT NULL,
            pid INTEGER NOT NULL,
            host TEXT NOT NULL,
            process_started REAL,
            since REAL NOT NULL
        )"""
    )


@migration
def m005_proxy(db: sqlite3.Connection) -> None:
    """What ``ctxwright proxy`` sees: its sessions and every HTTP exchange it relays.

    Kept apart from ``sessions``/``calls``: a proxied agent's requests are not rendered from
    ctxwright events, so they are stored as the bytes that went over the wire (decoded from
    their content-encoding; over the proxy's cap only their size and hash). One row per
    exchange, written when it ends, so a crash loses at most the exchanges in flight. No
    header is stored: the API key travels in headers and must never reach the disk.
    """
    db.execute(
        """CREATE TABLE IF NOT EXISTS proxy_sessions (
            id TEXT PRIMARY KEY,
            created_at REAL NOT NULL,
            grouped_by TEXT NOT NULL,
            group_key TEXT,
            api TEXT,
            upstream TEXT NOT NULL
        )"""
    )
    db.execute("CREATE INDEX IF NOT EXISTS proxy_sessions_key ON proxy_sessions(grouped_by, group_key)")
    db.execute(
        """CREATE TABLE IF NOT EXISTS proxy_exchanges (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT REFERENCES proxy_sessions(id),
            call_index INTEGER,
            started_at REAL NOT NULL,
            ended_at REAL,
            method TEXT NOT NULL,
            path TEXT NOT NULL,
            api TEXT,
            streamed INTEGER NOT NULL DEFAULT 0,
            status INTEGER,
            outcome TEXT NOT NULL,
            error TEXT,
            request_bytes INTEGER NOT NULL,
            request_sha256 TEXT NOT NULL,
            request_content_type TEXT,
            request_encoding TEXT,
            request_body BLOB,
            request_parsed INTEGER NOT NULL DEFAULT 0,
            response_bytes INTEGER NOT NULL DEFAULT 0,
            response_sha256 TEXT,
            response_content_type TEXT,
            response_encoding TEXT,
            response_body BLOB,
            response_parsed INTEGER NOT NULL DEFAULT 0,
            ttfb_ms REAL,
            total_ms REAL,
            audit_json TEXT NOT NULL DEFAULT '{}'
        )"""
    )
    db.execute("CREATE INDEX IF NOT EXISTS proxy_exchanges_session ON proxy_exchanges(session_id, call_index)")


SCHEMA_VERSION = len(MIGRATIONS)


def recover_v1_options(
    prefix_json: str,
    model: str | None,
    meta_json: str,
    events: Sequence[tuple[int, str, float, str]],
    calls: Sequence[tuple[int, float, str]],
) -> dict[int, tuple[int | None, RequestOptions]]:
    """What a v1 database proves about each call's request: ``call_index -> (event count,
    options)``.

    * event count: the assistant event recording the call's reply comes right after its
      request was rendered; a failed call (no reply) is placed by time;
    * tool_choice: the request is re-rendered (``core/render.py``) and hashed with every
      choice the harness could have sent (auto, required, none, each tool's name); the one
      whose hash equals the stored ``request_sha256`` is what was sent. No match -> the
      tool_choice and the messages are unknown;
    * model: the name the session recorded when it started (the backend's);
    * max_tokens, temperature, extra: not in the hash -- unknown.
    """
    from ctxwright.core.prefix import Prefix
    from ctxwright.core.render import RenderSettings, render_at

    out: dict[int, tuple[int | None, RequestOptions]] = {}
    base_unknown = ["max_tokens", "temperature", "extra"] + (["model"] if model is None else [])
    try:
        prefix = Prefix.from_dict(json.loads(prefix_json))
        settings = RenderSettings.from_meta(json.loads(meta_json))
        typed = [event_from_row(seq, kind, created, json.loads(p)) for seq, kind, created, p in events]
    except (CtxwrightError, ValueError, KeyError, TypeError):
        lost = ("tool_choice", "messages", *base_unknown)
        return {k: (None, RequestOptions(model=model, tool_choice=None, unknown=lost)) for k, _, _ in calls}
    reply_at = {ev.call_index: i for i, ev in enumerate(typed) if isinstance(ev, AssistantEvent)}
    counts: dict[int, int] = {}
    for k, created, _sha in calls:
        at = reply_at.get(k)
        counts[k] = at if at is not None else sum(1 for ev in typed if ev.created_at <= created)
    try:
        rendered = render_at(prefix, typed, settings, counts.values())
    except CtxwrightError:
        rendered = {}
    names = ["auto", "required", "none", *prefix.tool_names()] if prefix.tools else [None]
    for k, _created, sha in calls:
        msgs = rendered.get(counts[k])
        match = next((c for c in names if msgs is not None and _request_sha(msgs, prefix.tools, c) == sha), "")
        if match == "":
            unknown = ["tool_choice", "messages", *base_unknown]
        elif match is None:  # no tools: no tool_choice was sent
            unknown = ["tool_choice", *base_unknown]
        else:
            unknown = list(base_unknown)
        choice = match or None
        out[k] = (counts[k], RequestOptions(model=model, tool_choice=choice, unknown=tuple(unknown)))
    return out


def _request_sha(messages: Sequence[Message], tools: tuple[ToolSpec, ...], choice: str | None) -> str:
    """sha256 of ``ChatRequest(messages, tools, choice).canonical_bytes()``, built from each
    message's cached canonical bytes (a migration hashes every call of every session)."""
    from ctxwright.core.request import ChatRequest

    h = hashlib.sha256(b'{"messages":[' + b",".join(m.canonical_utf8 for m in messages) + b"]")
    if tools:
        wire = ChatRequest(messages=(), tools=tools, tool_choice=choice or "auto").to_wire()
        h.update(b',"tool_choice":' + canonical_json(wire["tool_choice"]).encode("utf-8"))
        h.update(b',"tools":' + canonical_json(wire["tools"]).encode("utf-8"))
    h.update(b"}")
    return h.hexdigest()


# -- opening without harm ------------------------------------------------------------------
def _check_file(path: Path) -> None:
    """Refuse a file that is not SQLite, or whose header says a newer schema, before any
    connection exists (a connection may create side files; WAL mode rewrites the header)."""
    if path.is_dir():
        raise StoreUnusable(f"{path} is a folder, not a database file. Point --db or CTXWRIGHT_DB at a file.")
    try:
        with path.open("rb") as f:
            head = f.read(100)
    except FileNotFoundError:
        return  # a new store
    except OSError as exc:
        raise StoreUnusable(_os_problem(path, exc)) from exc
    if not head:
        return  # an empty file is an empty SQLite database
    if not head.startswith(_SQLITE_MAGIC) or len(head) < 100:
        raise NotADatabase(
            f"{path} is not an SQLite database (it starts with {head[:16]!r}), so it cannot be a ctxwright "
            "store; it was not changed. Point --db or CTXWRIGHT_DB at a ctxwright database or at a new file name."
        )
    version = int.from_bytes(head[_USER_VERSION_OFFSET : _USER_VERSION_OFFSET + 4], "big")
    if version > SCHEMA_VERSION:
        raise _too_new(path, version, [])


def _too_new(path: Path, version: int, names: list[str]) -> SchemaTooNew:
    what = f"schema version {version}" + (f", migrations {', '.join(names)}" if names else "")
    return SchemaTooNew(
        f"the database at {path} was written by a newer ctxwright ({what}; this build knows schema version "
        f"{SCHEMA_VERSION}); it was not changed. Upgrade ctxwright (pip install -U ctxwright), or point --db or "
        "CTXWRIGHT_DB at another file."
    )


def _os_problem(path: Path, exc: OSError) -> str:
    """One line for an OS error on the database file or its folder."""
    why = exc.strerror or str(exc)
    return (
        f"cannot use the ctxwright database at {path}: {why} ({exc.filename or path}). Check that the folder "
        "exists and that you may read and write it, or point --db or CTXWRIGHT_DB at another file."
    )


def _is_busy(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def describe_problem(path: Path, exc: sqlite3.Error, waited_s: float | None = None) -> StoreUnusable:
    """The one-line error for an SQLite failure on ``path``: what is wrong, what to do."""
    text = str(exc)
    low = text.lower()
    unchanged = "it was not changed"
    if _is_busy(exc):
        waited = f" for {waited_s:.0f} s" if waited_s else ""
        reason = (
            f"the ctxwright database at {path} is locked by another process (another ctxwright run or a program "
            f"writing to it) and stayed locked{waited}"
        )
        return StoreLocked(
            f"{reason}; {unchanged}. Wait for that process to finish and run the command again, or raise "
            "CTXWRIGHT_DB_WAIT (seconds to wait, default 60).",
            reason=f"{reason} (CTXWRIGHT_DB_WAIT sets how long to wait)",
        )
    if isinstance(exc, sqlite3.IntegrityError):
        return StoreUnusable(
            f"the ctxwright database at {path} already holds that row ({text}): another process wrote to the same "
            "session at the same time. Run one process per session (a second one is refused unless --take-over "
            "was given), then resume it."
        )
    if "readonly" in low or "read-only" in low:
        folder = path.parent
        if path.exists() and os.access(path, os.W_OK) and not os.access(folder, os.W_OK):
            where = (
                f"its folder {folder} is read-only, and SQLite must create {path.name}-wal and {path.name}-shm "
                "next to it"
            )
        else:
            where = "the file is read-only"
        return StoreReadOnly(
            f"cannot write the ctxwright database at {path}: {where}; {unchanged}. Make it writable "
            "(chmod u+w), or copy it to a writable folder and point --db or CTXWRIGHT_DB at the copy.",
            reason=f"cannot write the ctxwright database at {path}: {where}",
        )
    if "malformed" in low or "not a database" in low or "corrupt" in low:
        return NotADatabase(
            f"the ctxwright database at {path} is damaged ({text}: truncated or partly overwritten); {unchanged}. "
            f"Restore it from a backup (`sqlite3 {path} .recover` may save what is left), or point --db or "
            "CTXWRIGHT_DB at another file.",
            reason=f"the ctxwright database at {path} is damaged ({text})",
        )
    if "unable to open" in low:
        return StoreUnusable(
            f"cannot open the ctxwright database at {path} ({text}). Check that its folder exists and that you "
            "may read and write it, or point --db or CTXWRIGHT_DB at another file."
        )
    if "full" in low or "disk i/o" in low:
        return StoreUnusable(
            f"cannot write the ctxwright database at {path}: {text}. Free some disk space (or check the disk), "
            "then run the command again.",
            reason=f"cannot write the ctxwright database at {path}: {text}",
        )
    return StoreUnusable(
        f"cannot use the ctxwright database at {path}: {text}. Point --db or CTXWRIGHT_DB at another file, or "
        "move this one away and start again.",
        reason=f"cannot use the ctxwright database at {path}: {text}",
    )


def _applied(db: sqlite3.Connection) -> set[str]:
    has = db.execute("SELECT name FROM sqlite_master WHERE type='table' AND name='_migrations'").fetchone()
    if has is None:
        return set()
    return {r["name"] for r in db.execute("SELECT name FROM _migrations").fetchall()}


def _check_schema(db: sqlite3.Connection, path: Path) -> set[str]:
    """The migrations already applied; :class:`SchemaTooNew` if any is not one of ours."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    applied = _applied(db)
    ours = {fn.__name__ for fn in MIGRATIONS}
    unknown = sorted(applied - ours)
    if version > SCHEMA_VERSION or unknown:
        raise _too_new(path, version, unknown)
    return applied


def _migrate(db: sqlite3.Connection, path: Path, applied: set[str]) -> None:
    if all(fn.__name__ in applied for fn in MIGRATIONS):
        return
    db.execute("BEGIN IMMEDIATE")  # one writer migrates; a second process waits, then finds it done
    try:
        applied = _check_schema(db, path)
        db.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
        for fn in MIGRATIONS:
            if fn.__name__ in applied:
                continue
            fn(db)
            db.execute("INSERT INTO _migrations (name, applied_at) VALUES (?, ?)", (fn.__name__, time.time()))
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


# -- rows ----------------------------------------------------------------------------------
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


def options_of(call: Mapping[str, Any]) -> RequestOptions:
    """The request options of one row of :meth:`Store.calls`."""
    return RequestOptions(
        model=call.get("model"),
        tool_choice=call.get("tool_choice"),
        max_tokens=call.get("max_tokens"),
        temperature=call.get("temperature"),
        extra=call.get("extra") or {},
        unknown=tuple(call.get("options_unknown") or ()),
    )


_CALL_COLUMNS = (
    "request_sha256",
    "request_bytes",
    "prefix_sha256",
    "prompt_tokens",
    "cached_tokens",
    "completion_tokens",
    "prefill_ms",
    "decode_ms",
    "error",
    "model",
    "tool_choice",
    "max_tokens",
    "temperature",
    "event_count",
    "wall_ms",
)
_CALL_JSON_COLUMNS = ("usage", "ledger", "audit", "extra", "options_unknown")


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


@dataclass(frozen=True)
class LeaseRow:
    """Who runs a session: one harness (``holder``, a random token) in one process."""

    session_id: str
    holder: str
    pid: int
    host: str
    process_started: float | None
    since: float


def _wait_from_env() -> float:
    raw = os.environ.get("CTXWRIGHT_DB_WAIT")
    if not raw:
        return DEFAULT_WAIT_S
    try:
        return max(0.0, float(raw))
    except ValueError:
        raise StoreUnusable(f"CTXWRIGHT_DB_WAIT={raw!r} is not a number of seconds; set it to e.g. 60") from None


class Store:
    """One SQLite database (WAL mode). Thread-safe: tool threads may record concurrently.

    ``wait_s``: how long a read or write waits for another process's lock, in SQLite busy
    timeouts of at most 5 s with backoff between them (default ``CTXWRIGHT_DB_WAIT`` or 60 s).
    """

    def __init__(self, path: str | Path | None = None, *, wait_s: float | None = None) -> None:
        self.path = Path(path) if path is not None else default_db_path()
        self.wait_s = _wait_from_env() if wait_s is None else max(0.0, wait_s)
        memory = str(self.path) == ":memory:"
        created = False
        if not memory:
            _check_file(self.path)
            try:  # private: folders made here 0700, the file 0600 (core/private.py)
                private_dir(self.path.parent)
                created = create_private(self.path)
            except OSError as exc:
                raise StoreUnusable(_os_problem(self.path, exc)) from exc
        self._lock = threading.RLock()
        busy_s = min(_BUSY_TIMEOUT_S, self.wait_s)
        try:
            self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None, timeout=busy_s)
        except sqlite3.Error as exc:
            raise describe_problem(self.path, exc) from exc
        self._db.row_factory = sqlite3.Row
        try:
            self._run(self._open)
        except BaseException:
            self._db.close()
            raise
        if created:  # SQLite gives -wal/-shm the database's mode; make sure of it
            for side in ("-wal", "-shm"):
                side_path = Path(f"{self.path}{side}")
                if side_path.exists() and not side_path.is_symlink():
                    os.chmod(side_path, 0o600)

    def _open(self, db: sqlite3.Connection) -> None:
        applied = _check_schema(db, self.path)  # reads only
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        _migrate(db, self.path, applied)

    def _run(self, fn: Callable[[sqlite3.Connection], T], *, wait_s: float | None = None) -> T:
        """``fn(db)`` under the store's thread lock. A lock held by another process is waited
        out: SQLite's busy timeout per attempt, then backoff and retry, for ``wait_s`` in all
        (default the store's). Any SQLite failure becomes one :class:`StoreUnusable` naming the
        file and the fix."""
        budget = self.wait_s if wait_s is None else wait_s
        start = time.monotonic()
        delay = 0.05
        while True:
            try:
                with self._lock:
                    return fn(self._db)
            except StoreUnusable:
                raise
            except sqlite3.Error as exc:
                waited = time.monotonic() - start
                if _is_busy(exc) and waited + delay < budget:
                    time.sleep(delay)
                    delay = min(delay * 2, 1.0)
                    continue
                raise describe_problem(self.path, exc, waited) from exc

    def _execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> None:
        self._run(lambda db: db.execute(sql, params))

    def _fetchall(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[sqlite3.Row]:
        return self._run(lambda db: db.execute(sql, params).fetchall())

    def _fetchone(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> sqlite3.Row | None:
        row: sqlite3.Row | None = self._run(lambda db: db.execute(sql, params).fetchone())
        return row

    def schema(self) -> tuple[int, list[str]]:
        """(``user_version``, applied migration names in order)."""

        def read(db: sqlite3.Connection) -> tuple[int, list[str]]:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            names = [r["name"] for r in db.execute("SELECT name FROM _migrations ORDER BY rowid").fetchall()]
            return version, names

        return self._run(read)

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
        self._execute(
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
        self._execute(
            "INSERT INTO events (session_id, seq, kind, created_at, payload_json) VALUES (?, ?, ?, ?, ?)",
            (session_id, event.seq, event.kind, event.created_at, canonical_json(event.to_payload())),
        )

    def record_call(self, session_id: str, call_index: int, row: Mapping[str, Any]) -> None:
        """One model call; ``row`` holds the columns of :data:`_CALL_COLUMNS` and the JSON
        fields of :data:`_CALL_JSON_COLUMNS` (missing ones are null / empty). Its ``error``
        is stored with any URL credential redacted (``core/redact.py``)."""
        columns = ["session_id", "call_index", "created_at", *_CALL_COLUMNS, *(f"{c}_json" for c in _CALL_JSON_COLUMNS)]
        if isinstance(row.get("error"), str):  # an error may quote a base URL with its credentials
            row = {**row, "error": redact(row["error"])}
        values = [
            session_id,
            call_index,
            row.get("created_at") or time.time(),
            *[row.get(c) for c in _CALL_COLUMNS],
            *[canonical_json(row.get(c) or ([] if c == "options_unknown" else {})) for c in _CALL_JSON_COLUMNS],
        ]
        self._execute(
            f"INSERT OR REPLACE INTO calls ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
            values,
        )

    def update_meta(self, session_id: str, meta: dict[str, Any]) -> None:
        self._execute("UPDATE sessions SET meta_json=? WHERE id=?", (canonical_json(meta), session_id))

    # -- one writer per session (core/lease.py) ----------------------------------------------
    def acquire_lease(self, lease: LeaseRow, may_take: Callable[[LeaseRow], bool]) -> LeaseRow | None:
        """Record ``lease`` as the session's writer unless another holder's lease stands;
        returns that standing lease (nothing written), or ``None`` when ``lease`` is now held.
        ``may_take(other)`` decides whether another holder's lease is stale. One transaction
        (``BEGIN IMMEDIATE``): two processes racing for a session are serialized."""

        def take(db: sqlite3.Connection) -> LeaseRow | None:
            db.execute("BEGIN IMMEDIATE")
            try:
                r = db.execute(
                    "SELECT session_id, holder, pid, host, process_started, since FROM session_leases "
                    "WHERE session_id=?",
                    (lease.session_id,),
                ).fetchone()
                other = LeaseRow(**dict(r)) if r is not None else None
                if other is not None and other.holder != lease.holder and not may_take(other):
                    db.execute("ROLLBACK")
                    return other
                db.execute(
                    "INSERT OR REPLACE INTO session_leases (session_id, holder, pid, host, process_started, since) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (lease.session_id, lease.holder, lease.pid, lease.host, lease.process_started, lease.since),
                )
                db.execute("COMMIT")
                return None
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise

        return self._run(take)

    def release_lease(self, session_id: str, holder: str, *, wait_s: float | None = None) -> None:
        """Delete the lease if ``holder`` still holds it, waiting at most ``wait_s`` for a lock."""

        def release(db: sqlite3.Connection) -> None:
            if wait_s is not None:
                db.execute(f"PRAGMA busy_timeout = {int(min(wait_s, _BUSY_TIMEOUT_S) * 1000)}")
            try:
                db.execute("DELETE FROM session_leases WHERE session_id=? AND holder=?", (session_id, holder))
            finally:
                if wait_s is not None:
                    db.execute(f"PRAGMA busy_timeout = {int(min(self.wait_s, _BUSY_TIMEOUT_S) * 1000)}")

        self._run(release, wait_s=wait_s)

    def lease(self, session_id: str) -> LeaseRow | None:
        r = self._fetchone(
            "SELECT session_id, holder, pid, host, process_started, since FROM session_leases WHERE session_id=?",
            (session_id,),
        )
        return LeaseRow(**dict(r)) if r is not None else None

    # -- reads --------------------------------------------------------------------------
    def get_session(self, session_id: str) -> SessionRow:
        cols = "id, parent_id, created_at, prefix_json, prefix_sha256, backend, model, meta_json"
        row = self._fetchone(f"SELECT {cols} FROM sessions WHERE id=?", (session_id,))
        if row is None:
            # allow unique prefixes of IDs, like git
            rows = self._fetchall(f"SELECT {cols} FROM sessions WHERE id LIKE ?", (session_id + "%",))
            if len(rows) == 1:
                row = rows[0]
        if row is None:
            raise SessionNotFound(
                f"no session {session_id!r} in {self.path}. Run `ctxwright sessions` to list the IDs "
                "(or pass --db / CTXWRIGHT_DB if the session lives in another database)."
            )
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

    def latest_session(self) -> str | None:
        """The id of the top-level session used last (its newest event, else its creation)."""
        row = self._fetchone(
            """SELECT s.id AS id FROM sessions s WHERE s.parent_id IS NULL
               ORDER BY COALESCE((SELECT MAX(e.created_at) FROM events e WHERE e.session_id=s.id), s.created_at)
               DESC, s.created_at DESC LIMIT 1"""
        )
        return None if row is None else str(row["id"])

    def events(self, session_id: str) -> list[Event]:
        rows = self._fetchall(
            "SELECT seq, kind, created_at, payload_json FROM events WHERE session_id=? ORDER BY seq", (session_id,)
        )
        return [event_from_row(r["seq"], r["kind"], r["created_at"], json.loads(r["payload_json"])) for r in rows]

    def calls(self, session_id: str) -> list[dict[str, Any]]:
        """Every call of the session as a dict: the columns, the JSON fields decoded."""
        columns = ["call_index", "created_at", *_CALL_COLUMNS, *(f"{c}_json" for c in _CALL_JSON_COLUMNS)]
        rows = self._fetchall(
            f"SELECT {', '.join(columns)} FROM calls WHERE session_id=? ORDER BY call_index", (session_id,)
        )
        out = []
        for r in rows:
            d: dict[str, Any] = {"session_id": session_id}
            d.update({c: r[c] for c in ("call_index", "created_at", *_CALL_COLUMNS)})
            d.update({c: json.loads(r[f"{c}_json"]) for c in _CALL_JSON_COLUMNS})
            out.append(d)
        return out

    def list_sessions(self, limit: int = 50, include_children: bool = False) -> list[dict[str, Any]]:
        where = "" if include_children else "WHERE s.parent_id IS NULL"
        rows = self._fetchall(
            f"""SELECT s.id AS id, s.created_at AS created_at, s.backend AS backend, s.model AS model,
                   s.parent_id AS parent_id,
                   (SELECT COUNT(*) FROM events e WHERE e.session_id=s.id) AS events,
                   (SELECT COUNT(*) FROM calls c WHERE c.session_id=s.id) AS calls,
                   (SELECT seq FROM events e WHERE e.session_id=s.id AND e.kind=:user
                    AND CASE WHEN json_valid(e.payload_json) THEN COALESCE(json_extract(e.payload_json, :catalog), json_extract(e.payload_json, :mcp)) END IS NULL
                    ORDER BY seq LIMIT 1) AS first_seq,
                   (SELECT payload_json FROM events e WHERE e.session_id=s.id AND e.kind=:user
                    AND CASE WHEN json_valid(e.payload_json) THEN COALESCE(json_extract(e.payload_json, :catalog), json_extract(e.payload_json, :mcp)) END IS NULL
                    ORDER BY seq LIMIT 1) AS first_payload
               FROM sessions s {where} ORDER BY s.created_at DESC LIMIT :limit""",
            {"user": UserEvent.KIND, "limit": limit, "catalog": f"$.{SKILLS_CATALOG_KEY}", "mcp": f"$.{MCP_TOOLS_KEY}"},
        )
        out = []
        for r in rows:
            first = ""
            if r["first_payload"]:
                try:
                    ev = event_from_row(r["first_seq"], UserEvent.KIND, 0.0, json.loads(r["first_payload"]))
                    first = ev.message.content or "" if isinstance(ev, UserEvent) else ""
                except (CtxwrightError, ValueError):
                    first = ""
            out.append(
                {
                    "id": r["id"],
                    "created_at": r["created_at"],
                    "backend": r["backend"],
                    "model": r["model"],
                    "parent_id": r["parent_id"],
                    "events": r["events"],
                    "calls": r["calls"],
                    "first_user": first,
                }
            )
        return out

    def children(self, session_id: str) -> list[str]:
        rows = self._fetchall("SELECT id FROM sessions WHERE parent_id=? ORDER BY created_at", (session_id,))
        return [r["id"] for r in rows]

    # -- the proxy (``ctxwright proxy``; read back by ``core/proxy_log.py``) ----------------------
    def create_proxy_session(
        self, *, grouped_by: str, group_key: str | None, api: str | None, upstream: str, session_id: str | None = None
    ) -> str:
        sid = session_id or "px-" + uuid.uuid4().hex[:10]
        self._execute(
            "INSERT INTO proxy_sessions (id, created_at, grouped_by, group_key, api, upstream) VALUES (?, ?, ?, ?, ?, ?)",
            (sid, time.time(), grouped_by, group_key, api, upstream),
        )
        return sid

    def find_proxy_session(self, grouped_by: str, group_key: str) -> str | None:
        """The newest proxy session grouped by ``grouped_by`` = ``group_key`` (a restarted proxy
        keeps adding to it)."""
        row = self._fetchone(
            "SELECT id FROM proxy_sessions WHERE grouped_by=? AND group_key=? ORDER BY created_at DESC LIMIT 1",
            (grouped_by, group_key),
        )
        return None if row is None else str(row["id"])

    def record_proxy_exchange(self, row: Mapping[str, Any]) -> int:
        """One relayed exchange (the columns of :data:`PROXY_EXCHANGE_COLUMNS`); its row id."""
        cols = [c for c in PROXY_EXCHANGE_COLUMNS if c in row]
        values = [row[c] for c in cols]

        def insert(db: sqlite3.Connection) -> int:
            cur = db.execute(
                f"INSERT INTO proxy_exchanges ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", values
            )
            return int(cur.lastrowid or 0)

        return self._run(insert)

    def proxy_call_count(self, session_id: str) -> int:
        row = self._fetchone("SELECT COUNT(*) AS n FROM proxy_exchanges WHERE session_id=?", (session_id,))
        return 0 if row is None else int(row["n"])

    def set_proxy_audit(self, exchange_id: int, audit: Mapping[str, Any]) -> None:
        self._execute("UPDATE proxy_exchanges SET audit_json=? WHERE id=?", (canonical_json(dict(audit)), exchange_id))

    def proxy_session_rows(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Every proxy session, newest first, with its counts and time span."""
        rows = self._fetchall(
            """SELECT s.id AS id, s.created_at AS created_at, s.grouped_by AS grouped_by, s.group_key AS group_key,
                   s.api AS api, s.upstream AS upstream,
                   (SELECT COUNT(*) FROM proxy_exchanges x WHERE x.session_id=s.id) AS calls,
                   (SELECT MAX(COALESCE(x.ended_at, x.started_at)) FROM proxy_exchanges x WHERE x.session_id=s.id)
                     AS last_at
               FROM proxy_sessions s ORDER BY s.created_at DESC LIMIT ?""",
            (-1 if limit is None else limit,),
        )
        return [dict(r) for r in rows]

    def proxy_session_row(self, session_id: str) -> dict[str, Any]:
        """One proxy session by id or unique id prefix; :class:`SessionNotFound` otherwise."""
        cols = "id, created_at, grouped_by, group_key, api, upstream"
        row = self._fetchone(f"SELECT {cols} FROM proxy_sessions WHERE id=?", (session_id,))
        if row is None:
            rows = self._fetchall(f"SELECT {cols} FROM proxy_sessions WHERE id LIKE ?", (session_id + "%",))
            row = rows[0] if len(rows) == 1 else None
        if row is None:
            raise SessionNotFound(
                f"no proxy session {session_id!r} in {self.path}. Run `ctxwright proxy --list` to list them (or pass "
                "--db / CTXWRIGHT_DB if the proxy wrote to another database)."
            )
        return dict(row)

    def proxy_exchange_rows(self, session_id: str | None) -> list[dict[str, Any]]:
        """The exchanges of one proxy session in call order (``None``: those of no session,
        the requests that were not model calls), bodies included."""
        cols = ", ".join(("id", *PROXY_EXCHANGE_COLUMNS))
        if session_id is None:
            rows = self._fetchall(f"SELECT {cols} FROM proxy_exchanges WHERE session_id IS NULL ORDER BY id")
        else:
            rows = self._fetchall(
                f"SELECT {cols} FROM proxy_exchanges WHERE session_id=? ORDER BY call_index, id", (session_id,)
            )
        out = []
        for r in rows:
            d = dict(r)
            d["audit"] = json.loads(d.pop("audit_json") or "{}")
            out.append(d)
        return out

    def close(self) -> None:
        with self._lock:
            self._db.close()


__all__ = [
    "MIGRATIONS",
    "PROXY_EXCHANGE_COLUMNS",
    "SCHEMA_VERSION",
    "LeaseRow",
    "SessionRow",
    "Store",
    "default_db_path",
    "describe_problem",
    "options_of",
]
