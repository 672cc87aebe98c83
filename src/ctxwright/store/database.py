"""What the store asks of a database, and which one a ``--db`` value names.

Why an interface: a team that runs many agents, or several proxy processes, outgrows one
SQLite file on one machine -- processes on other hosts must append to the same sessions and
resume each other's. So the store's SQL (``store/sessions.py``, ``proxy/store.py``, the
migrations) is written once, in the subset SQLite and PostgreSQL share (``?`` parameters,
``INSERT ... ON CONFLICT ... DO UPDATE``), and runs on either of two connections:

* :class:`~ctxwright.store.sqlite.SqliteDatabase` -- a file path (the default);
* :class:`~ctxwright.store.postgres.PostgresDatabase` -- a ``postgresql://`` URL, through
  psycopg 3 (the ``ctxwright[postgres]`` extra).

What differs between them is kept in one place each: how a connection waits for another
writer, how a transaction excludes the other writers of one key (the session lease, a proxy
session's next call number), where the schema's version lives, and how each failure becomes
one :class:`~ctxwright.errors.StoreUnusable` naming the store and the fix.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from ctxwright.errors import StoreMissing

T = TypeVar("T")

#: the URL schemes that name a PostgreSQL store (libpq accepts both)
POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_url(target: object) -> bool:
    """Whether a ``--db`` value names a PostgreSQL server rather than an SQLite file."""
    return isinstance(target, str) and target.strip().lower().startswith(POSTGRES_SCHEMES)


def normalize_target(target: str | Path) -> str | Path:
    """A ``--db`` value as the store opens it: a URL as given (trimmed), a path with ``~`` expanded."""
    return str(target).strip() if is_url(target) else Path(target).expanduser()


#: any of these tables makes a database a ctxwright store (``sessions``: every schema since the
#: first; ``_migrations``: every versioned one)
STORE_TABLES = ("_migrations", "sessions")


def missing_store(where: str, *, found: bool, by_default: bool = False) -> StoreMissing:
    """The one line for a store a reading command cannot open because there is none: no file
    (``found`` false) or a database without ctxwright's tables. Only the commands that record
    (``ctxwright run``, ``ctxwright proxy``) create a store, so a mistyped ``--db`` given to a
    reader leaves nothing behind. ``by_default``: no ``--db`` named the store (``Store(None)``),
    so the line says what did -- ``CTXWRIGHT_DB`` when it is set (as ``default_db_path`` reads
    it), else the user data dir -- instead of sending the user to check a ``--db`` never given."""
    if found:
        what = f"{where} holds no ctxwright store (none of its tables); it was not changed"
    else:
        what = f"no ctxwright database at {where}; nothing was created"
    if not by_default:
        hint = "Check --db (or CTXWRIGHT_DB)"
    elif os.environ.get("CTXWRIGHT_DB"):
        hint = "No --db was given, so this is the store CTXWRIGHT_DB names: check CTXWRIGHT_DB, or give --db"
    else:
        hint = (
            "No --db was given and CTXWRIGHT_DB is not set, so this is the default store in the user data dir; "
            "give --db (or set CTXWRIGHT_DB) for another"
        )
    return StoreMissing(f"{what}. {hint}; `ctxwright run` or `ctxwright proxy` creates the store there.", reason=what)


class Cursor(Protocol):
    """What a statement returns: rows that are read by column name (``row["id"]``)."""

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Connection(Protocol):
    """The connection a store function runs on (``Database.run``): ``sqlite3.Connection``
    itself, or the PostgreSQL connection behind the same ``execute`` (``store/postgres.py``)."""

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ..., /) -> Any: ...


C = TypeVar("C", bound=Connection)


class Dialect(Protocol):
    """The few statements SQLite and PostgreSQL spell differently."""

    name: str
    #: appended to a text column compared by range, so ``id >= start`` orders by code point
    #: (SQLite's default; a PostgreSQL database's collation may sort otherwise)
    binary_collation: str

    def begin_exclusive(self, db: Connection, key: str) -> None:
        """Begin a transaction no other writer of ``key`` runs beside: the session lease's
        check-then-write, a proxy session's next call number, the migrations."""

    def commit(self, db: Connection) -> None: ...

    def rollback(self, db: Connection) -> None: ...

    def has_table(self, db: Connection, name: str) -> bool: ...

    def user_version(self, db: Connection) -> int:
        """How many migrations the schema says were applied."""

    def set_user_version(self, db: Connection, version: int) -> None: ...

    def translate(self, sql: str) -> str:
        """A statement as written in ``store/`` (SQLite's spelling) for this database."""


class Database(Protocol):
    """One connection to the store's database, used under a thread lock (tool threads may
    record concurrently); every failure is one :class:`~ctxwright.errors.StoreUnusable`."""

    @property
    def dialect(self) -> Dialect: ...

    #: the store named for people: a file path, or a URL with its password left out
    location: str
    wait_s: float

    def run(self, fn: Callable[[Any], T], *, wait_s: float | None = None) -> T: ...

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> None: ...

    def fetchall(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[Any]: ...

    def fetchone(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> Any: ...

    def insert(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one ``INSERT`` into a table whose key is ``id``; the new row's id."""

    def exclusive(self, key: str, fn: Callable[[Any], T]) -> T:
        """``fn(connection)`` in one transaction that excludes the other writers of ``key``
        (any process, any host on the same database); committed when ``fn`` returns, rolled
        back when it raises."""

    def change_mark(self) -> object:
        """A value that changes when another connection may have written since it was read
        (``Store.lease_mark``); a database that cannot tell returns a new value every time."""

    def close(self) -> None: ...


def exclusive_tx(dialect: Dialect, key: str, fn: Callable[[C], T]) -> Callable[[C], T]:
    """``fn`` wrapped in a transaction no other writer of ``key`` runs beside
    (``Dialect.begin_exclusive``): committed when ``fn`` returns, rolled back when it raises.
    Both databases' ``Database.exclusive`` and the migrations run through it."""

    def tx(db: C) -> T:
        dialect.begin_exclusive(db, key)
        try:
            out = fn(db)
            dialect.commit(db)
            return out
        except BaseException:
            dialect.rollback(db)
            raise

    return tx


def upsert_sql(table: str, columns: Sequence[str], key: Sequence[str]) -> str:
    """``INSERT`` one row, or replace the row with the same ``key``: the statement both
    databases accept (``ON CONFLICT ... DO UPDATE``; SQLite's ``INSERT OR REPLACE`` is not
    PostgreSQL's)."""
    cols = ", ".join(columns)
    marks = ", ".join("?" * len(columns))
    rest = [c for c in columns if c not in key]
    action = "DO UPDATE SET " + ", ".join(f"{c}=excluded.{c}" for c in rest) if rest else "DO NOTHING"
    return f"INSERT INTO {table} ({cols}) VALUES ({marks}) ON CONFLICT ({', '.join(key)}) {action}"


__all__ = [
    "POSTGRES_SCHEMES",
    "STORE_TABLES",
    "Connection",
    "Cursor",
    "Database",
    "Dialect",
    "exclusive_tx",
    "is_url",
    "missing_store",
    "normalize_target",
    "upsert_sql",
]
