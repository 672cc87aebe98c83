"""The SQLite connection every store table goes through: one connection under a thread lock,
a lock held by another process waited out, and every SQLite failure turned into one
:class:`~ctxwright.errors.StoreUnusable` that names the file and says what to do.

Why: SQLite's own default gives up after 5 s with ``database is locked`` while a reply is
waiting to be stored, so a write that meets another process's lock waits -- SQLite's busy
timeout, then retries with backoff -- for at most ``CTXWRIGHT_DB_WAIT`` seconds (default 60).
A caller never sees a bare ``sqlite3.Error``: locked, read-only, damaged and full disks each
get their own sentence. Every file and folder made here is private (``store/private.py``).

The session tables (``store/sessions.py``) and the proxy's (``proxy/store.py``) share one
:class:`SqliteDatabase`; neither knows the other's SQL. A ``postgresql://`` store is
``store/postgres.py``'s, behind the same interface (``store/database.py``).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from ctxwright.errors import NotADatabase, StoreLocked, StoreReadOnly, StoreUnusable
from ctxwright.store.database import Connection, exclusive_tx, missing_store
from ctxwright.store.private import create_private, private_dir

#: seconds a read or write waits for another process's lock before it fails (env CTXWRIGHT_DB_WAIT)
DEFAULT_WAIT_S = 60.0
#: SQLite's own busy timeout per attempt; between attempts the store backs off and retries
BUSY_TIMEOUT_S = 5.0
T = TypeVar("T")


def default_db_path() -> Path:
    """``$CTXWRIGHT_DB`` if set, else ``ctxwright.db`` in the user's data dir."""
    env = os.environ.get("CTXWRIGHT_DB")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_data_dir

    return Path(user_data_dir("ctxwright", appauthor=False)) / "ctxwright.db"


def default_db_target() -> str | Path:
    """``$CTXWRIGHT_DB`` as given when it is a ``postgresql://`` URL, else :func:`default_db_path`."""
    from ctxwright.store.database import is_url

    env = os.environ.get("CTXWRIGHT_DB")
    return env.strip() if env and is_url(env) else default_db_path()


def os_problem(path: Path, exc: OSError) -> str:
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


def _uri(path: Path, mode: str) -> str:
    """``path`` as an SQLite ``file:`` URI opened in ``mode`` (``rw``: never created)."""
    from urllib.parse import quote

    return f"file:{quote(str(path.absolute()))}?mode={mode}"


def wait_from_env() -> float:
    raw = os.environ.get("CTXWRIGHT_DB_WAIT")
    if not raw:
        return DEFAULT_WAIT_S
    try:
        return max(0.0, float(raw))
    except ValueError:
        raise StoreUnusable(f"CTXWRIGHT_DB_WAIT={raw!r} is not a number of seconds; set it to e.g. 60") from None


class SqliteDialect:
    """SQLite's spelling of what ``store/database.py: Dialect`` names."""

    name = "sqlite"
    binary_collation = ""  # SQLite compares text by code point unless told otherwise

    def begin_exclusive(self, db: Connection, key: str) -> None:
        # One writer at a time per database file: BEGIN IMMEDIATE takes the write lock now,
        # so a second process waits here instead of failing at its first write.
        db.execute("BEGIN IMMEDIATE")

    def commit(self, db: Connection) -> None:
        db.execute("COMMIT")

    def rollback(self, db: Connection) -> None:
        if isinstance(db, sqlite3.Connection) and not db.in_transaction:
            return
        db.execute("ROLLBACK")

    def has_table(self, db: Connection, name: str) -> bool:
        return db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (name,)).fetchone() is not None

    def user_version(self, db: Connection) -> int:
        return int(db.execute("PRAGMA user_version").fetchone()[0])

    def set_user_version(self, db: Connection, version: int) -> None:
        db.execute(f"PRAGMA user_version = {int(version)}")

    def translate(self, sql: str) -> str:
        return sql


class SqliteDatabase:
    """One SQLite connection (autocommit, WAL set up by the caller's ``setup``), used under a
    thread lock: tool threads may record concurrently.

    ``wait_s``: how long a read or write waits for another process's lock, in SQLite busy
    timeouts of at most 5 s with backoff between them.
    """

    def __init__(
        self,
        path: Path,
        *,
        wait_s: float,
        check_file: Callable[[Path], None],
        setup: Callable[[sqlite3.Connection, SqliteDialect], None],
        create: bool = True,
        by_default: bool = False,
    ) -> None:
        """Open ``path``: ``check_file(path)`` first (nothing is written before it passes: a
        connection may create side files, WAL mode rewrites the header), then the file is
        created private, connected, and ``setup(connection)`` runs (schema checks, migrations).
        ``create=False``: a file that is not there is :class:`~ctxwright.errors.StoreMissing`,
        and neither it nor its folders are made (``sqlite3.connect`` would create both);
        ``by_default``: no ``--db`` named ``path``, and the message says what did."""
        self.path = path
        self.location = str(path)
        self.dialect = SqliteDialect()
        self.wait_s = wait_s
        memory = str(path) == ":memory:"
        created = False
        if not memory:
            check_file(path)
            if not create:
                if not path.is_file():
                    raise missing_store(str(path), found=False, by_default=by_default)
            else:
                try:  # private: folders made here 0700, the file 0600 (store/private.py)
                    private_dir(path.parent)
                    created = create_private(path)
                except OSError as exc:
                    raise StoreUnusable(os_problem(path, exc)) from exc
        self._lock = threading.RLock()
        busy_s = min(BUSY_TIMEOUT_S, wait_s)
        try:
            # mode=rw: a file removed since the check above is an error here, not created again
            name, uri = (str(path), False) if create or memory else (_uri(path, "rw"), True)
            self._db = sqlite3.connect(name, check_same_thread=False, isolation_level=None, timeout=busy_s, uri=uri)
        except sqlite3.Error as exc:
            raise describe_problem(path, exc) from exc
        self._db.row_factory = sqlite3.Row
        try:
            self.run(lambda db: setup(db, self.dialect))
        except BaseException:
            self._db.close()
            raise
        if created:  # SQLite gives -wal/-shm the database's mode; make sure of it
            for side in ("-wal", "-shm"):
                side_path = Path(f"{path}{side}")
                if side_path.exists() and not side_path.is_symlink():
                    os.chmod(side_path, 0o600)

    def run(self, fn: Callable[[sqlite3.Connection], T], *, wait_s: float | None = None) -> T:
        """``fn(db)`` under the thread lock. A lock held by another process is waited out:
        SQLite's busy timeout per attempt, then backoff and retry, for ``wait_s`` in all
        (default the database's). Any SQLite failure becomes one :class:`StoreUnusable` naming
        the file and the fix."""
        budget = self.wait_s if wait_s is None else wait_s
        start = time.monotonic()
        delay = 0.05
        while True:
            try:
                with self._lock:
                    if wait_s is None:
                        return fn(self._db)
                    self._db.execute(f"PRAGMA busy_timeout = {int(min(wait_s, BUSY_TIMEOUT_S) * 1000)}")
                    try:
                        return fn(self._db)
                    finally:
                        self._db.execute(f"PRAGMA busy_timeout = {int(min(self.wait_s, BUSY_TIMEOUT_S) * 1000)}")
            except StoreUnusable:
                raise
            except sqlite3.Error as exc:
                waited = time.monotonic() - start
                if _is_busy(exc) and waited + delay < budget:
                    time.sleep(delay)
                    delay = min(delay * 2, 1.0)
                    continue
                raise describe_problem(self.path, exc, waited) from exc

    def exclusive(self, key: str, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(db)`` in one ``BEGIN IMMEDIATE`` transaction: the database's write lock, so
        every other writer (of any key) waits; committed when ``fn`` returns."""

        return self.run(exclusive_tx(self.dialect, key, fn))

    def change_mark(self) -> object:
        """SQLite's ``data_version``: changed by every commit of another connection."""
        return self.run(lambda db: int(db.execute("PRAGMA data_version").fetchone()[0]))

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> None:
        self.run(lambda db: db.execute(sql, params))

    def fetchall(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[sqlite3.Row]:
        return self.run(lambda db: db.execute(sql, params).fetchall())

    def fetchone(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> sqlite3.Row | None:
        row: sqlite3.Row | None = self.run(lambda db: db.execute(sql, params).fetchone())
        return row

    def insert(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one ``INSERT``; the new row's id."""
        return self.run(lambda db: int(db.execute(sql, params).lastrowid or 0))

    def close(self) -> None:
        with self._lock:
            self._db.close()


__all__ = [
    "BUSY_TIMEOUT_S",
    "DEFAULT_WAIT_S",
    "SqliteDatabase",
    "SqliteDialect",
    "default_db_path",
    "default_db_target",
    "describe_problem",
    "os_problem",
    "wait_from_env",
]
