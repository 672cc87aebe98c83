"""The store's schema, changed only through named migrations, applied in order when a store
is opened and listed in a ``_migrations`` table, with ``PRAGMA user_version`` holding how many
were applied -- the scheme Simon Willison's ``llm`` uses.

The migrations are written in SQLite's spelling and run unchanged on PostgreSQL too: its
connection translates the column types (``store/postgres.py``), so both databases have one
schema and one list of named migrations. ``PRAGMA user_version`` is SQLite's; PostgreSQL's
store keeps the count in ``_migrations`` (``Dialect.user_version``).

Why: a database written before versioning (store v1, ``tests/fixtures/store_v1.db``) is
brought forward in place, and a released migration is history -- databases already ran it --
so it is never edited, reordered or removed (``m005_proxy`` creates the proxy's tables, which
``proxy/store.py`` reads and writes; ``m006_attention`` the saved attention maps, ``m007_proxy_placement`` what the proxy places requests by, ``m008_proxy_compressed`` what ``proxy --compress`` sent in place of each tool result). Nothing is written before two checks pass, because a
store that writes first breaks files it does not understand (``PRAGMA journal_mode=WAL``
alone rewrites the header): the file must be an SQLite database (:func:`check_file`), and its
schema must not be newer than this build's (:func:`check_schema`). Either failure is one
:class:`~ctxwright.errors.StoreUnusable` that says what to do, with the file left byte for
byte as it was.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ctxwright.core.events import AssistantEvent, event_from_row
from ctxwright.core.messages import canonical_json
from ctxwright.core.request import RequestOptions
from ctxwright.errors import CtxwrightError, NotADatabase, SchemaTooNew, StoreUnusable
from ctxwright.store.database import Connection, Dialect, exclusive_tx
from ctxwright.store.sqlite import os_problem

if TYPE_CHECKING:
    from ctxwright.core.messages import Message
    from ctxwright.core.request import ToolSpec

_SQLITE_MAGIC = b"SQLite format 3\x00"
_USER_VERSION_OFFSET = 60  # of the 100-byte database header: "user version", big-endian

Migration = Callable[[Connection], None]

#: Every schema change, in the order applied; each is named by its function. Append only:
#: a released migration is never edited or reordered (databases already ran it).
MIGRATIONS: list[Migration] = []


def migration(fn: Migration) -> Migration:
    MIGRATIONS.append(fn)
    return fn


@migration
def m001_initial(db: Connection) -> None:
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
def m002_call_request_options(db: Connection) -> None:
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
def m003_call_wall_ms(db: Connection) -> None:
    """Per call: its wall time in ms, measured around the backend call by the agent loop.

    Servers that report no cached-token field (llama-cpp-python's server) leave the cache
    columns unknown; the wall time still shows reuse (a call that reuses most of its prompt
    is much faster). Calls stored before have none (null): it was never measured.
    """
    db.execute("ALTER TABLE calls ADD COLUMN wall_ms REAL")


@migration
def m004_session_leases(db: Connection) -> None:
    """Which process runs each session (one writer per session, ``store/lease.py``).

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
def m005_proxy(db: Connection) -> None:
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


@migration
def m006_attention(db: Connection) -> None:
    """The attention maps ``ctxwright attention`` saved: one per model call of a session.

    A map costs a model re-reading the whole request (seconds to minutes), so it is kept to
    be drawn again by ``ctxwright report``. Stored as the map's JSON (``attention/model.py``,
    ``AttentionMap.to_json``), not as columns: the report reads it back whole, and a map
    written by a newer build stays readable as JSON. Kept apart from ``calls``: most calls
    have none, and a map is far larger than a call's row.
    """
    db.execute(
        """CREATE TABLE IF NOT EXISTS attention_maps (
            session_id TEXT NOT NULL,
            call_index INTEGER NOT NULL,
            created_at REAL NOT NULL,
            map_json TEXT NOT NULL,
            PRIMARY KEY (session_id, call_index)
        )"""
    )


@migration
def m007_proxy_placement(db: Connection) -> None:
    """What ``ctxwright proxy`` places requests by, in the store rather than in one process's
    memory, so several proxy processes (``--workers``, or proxies on several hosts) recording
    into one database place every request as one process would (``proxy/sessions.py``).

    ``proxy_heads``: the hash chain end of every model call's request (its system prompt,
    tools and messages), so a request that extends an earlier one is found whichever process
    recorded that one. ``proxy_responses``: which session each relayed Responses API answer
    belongs to, for a request that names it as ``previous_response_id``.
    """
    db.execute(
        """CREATE TABLE IF NOT EXISTS proxy_heads (
            chain_sha TEXT PRIMARY KEY,
            session_id TEXT NOT NULL,
            created_at REAL NOT NULL
        )"""
    )
    db.execute(
        """CREATE TABLE IF NOT EXISTS proxy_responses (
            response_id TEXT PRIMARY KEY,
            session_id TEXT NOT NULL,
            created_at REAL NOT NULL
        )"""
    )


@migration
def m008_proxy_compressed(db: Connection) -> None:
    """What ``ctxwright proxy --compress`` sent upstream in place of each tool result
    (``proxy/compress.py``), so a result is compressed once and the same bytes go upstream on
    every later request that repeats it -- by this process after a restart, or by another
    process recording into the same database. A provider's prompt cache matches bytes: a
    result sent once compressed and once not (or compressed by a newer build) breaks the
    agent's prefix there.

    ``scope`` is the request's ``X-Ctxwright-Session`` header (empty without one), ``chain_sha`` the
    hash of the result with every tool result before it in its request (what its compressed
    form depends on), ``text`` what went upstream (``NULL``: the result went as it was).
    """
    db.execute(
        """CREATE TABLE IF NOT EXISTS proxy_compressed (
            scope TEXT NOT NULL,
            chain_sha TEXT NOT NULL,
            call_id TEXT NOT NULL,
            original_sha256 TEXT NOT NULL,
            text TEXT,
            rule TEXT NOT NULL,
            original_chars INTEGER NOT NULL,
            saved_chars INTEGER NOT NULL,
            created_at REAL NOT NULL,
            PRIMARY KEY (scope, chain_sha)
        )"""
    )


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


def check_file(path: Path) -> None:
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
        raise StoreUnusable(os_problem(path, exc)) from exc
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


def _too_new(where: Path | str, version: int, names: list[str]) -> SchemaTooNew:
    what = f"schema version {version}" + (f", migrations {', '.join(names)}" if names else "")
    return SchemaTooNew(
        f"the database at {where} was written by a newer ctxwright ({what}; this build knows schema version "
        f"{SCHEMA_VERSION}); it was not changed. Upgrade ctxwright (pip install -U ctxwright), or point --db or "
        "CTXWRIGHT_DB at another database."
    )


def _applied(db: Connection, dialect: Dialect) -> set[str]:
    if not dialect.has_table(db, "_migrations"):
        return set()
    return {r["name"] for r in db.execute("SELECT name FROM _migrations").fetchall()}


def applied_in_order(db: Connection, dialect: Dialect) -> list[str]:
    """The applied migrations' names in the order they were applied (``MIGRATIONS``' order:
    each build applies the ones it lacks in that order)."""
    order = {fn.__name__: i for i, fn in enumerate(MIGRATIONS)}
    return sorted(_applied(db, dialect), key=lambda n: (order.get(n, len(order)), n))


def check_schema(db: Connection, where: Path | str, dialect: Dialect) -> set[str]:
    """The migrations already applied; :class:`SchemaTooNew` if any is not one of ours."""
    version = dialect.user_version(db)
    applied = _applied(db, dialect)
    ours = {fn.__name__ for fn in MIGRATIONS}
    unknown = sorted(applied - ours)
    if version > SCHEMA_VERSION or unknown:
        raise _too_new(where, version, unknown)
    return applied


def migrate(db: Connection, where: Path | str, applied: set[str], dialect: Dialect) -> None:
    if all(fn.__name__ in applied for fn in MIGRATIONS):
        return

    def apply(db: Connection) -> None:
        done = check_schema(db, where, dialect)  # again: another process may have migrated meanwhile
        db.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
        for fn in MIGRATIONS:
            if fn.__name__ in done:
                continue
            fn(db)
            db.execute("INSERT INTO _migrations (name, applied_at) VALUES (?, ?)", (fn.__name__, time.time()))
        dialect.set_user_version(db, SCHEMA_VERSION)

    # one writer migrates; a second process waits, then finds it done
    exclusive_tx(dialect, "ctxwright migrations", apply)(db)


__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "applied_in_order",
    "check_file",
    "check_schema",
    "migrate",
    "recover_v1_options",
]
