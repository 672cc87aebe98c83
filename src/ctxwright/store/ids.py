"""A session ID as people give it: the whole ID or any unique start of it, as git takes
commit hashes -- the one rule every command that takes an ID follows (``show``, ``export``,
``report``, ``run --resume``, ``audit --proxy-session``, ...).

Why one function: IDs are copied by hand from a listing or a log line, often only their start,
and each command used to decide for itself what a prefix meant (one called an ambiguous
prefix "no session"). Why not SQL ``LIKE``: ``_`` and ``%`` in what was typed are wildcards
there, so ``show %`` opened whichever session happened to be alone in the database. The start
is compared as text, on the primary key's order (a range scan, not a scan of the table).
"""

from __future__ import annotations

from ctxwright.core.words import quoted
from ctxwright.errors import AmbiguousSessionId, SessionNotFound
from ctxwright.store.database import Database

#: candidates named in the error for an ambiguous start
SHOWN = 5
#: above every character an ID can hold: ``start + _TOP`` bounds the IDs that begin with ``start``
_TOP = "\U0010ffff"


def unstorable(start: str) -> str | None:
    """Why no stored ID can be ``start``, or ``None``: a lone surrogate (what Python makes of
    argv bytes that are not UTF-8) cannot be encoded for either database, and PostgreSQL text
    holds no NUL -- asking would be a driver error, not "no session"."""
    if "\x00" in start:
        return "it holds a NUL character"
    try:
        start.encode("utf-8")
    except UnicodeEncodeError:
        return "it is not valid text (bytes that are not UTF-8)"
    return None


def resolve_id(db: Database, table: str, given: str, *, what: str, listing: str) -> str:
    """The full ID in ``table`` that ``given`` names: itself, else the one ID starting with it.

    ``what`` names the kind in messages ("session", "proxy session"), ``listing`` the command
    that lists them. A trailing ``…`` (an ID copied from a table that cut it) is ignored.
    Raises :class:`SessionNotFound` (one line) when nothing matches, and
    :class:`AmbiguousSessionId` naming how many IDs (and the first few) start with it.
    """
    start = given.strip().removesuffix("…").rstrip()
    where = f"in {db.location}"
    text = f"id{db.dialect.binary_collation}"
    if not start:
        raise SessionNotFound(f"no {what} ID given: give one (`{listing}` lists them)")
    why = unstorable(start)
    if why is not None:
        raise SessionNotFound(f"no {what} {quoted(given)} {where}: {why}. Run `{listing}` to list the IDs.")
    row = db.fetchone(f"SELECT id FROM {table} WHERE id=?", (start,))
    if row is not None:
        return str(row["id"])
    rows = db.fetchall(
        f"SELECT id FROM {table} WHERE {text} >= ? AND {text} < ? AND substr(id, 1, ?) = ? ORDER BY {text} LIMIT ?",
        (start, start + _TOP, len(start), start, SHOWN + 1),
    )
    if len(rows) == 1:
        return str(rows[0]["id"])
    if not rows:
        raise SessionNotFound(
            f"no {what} {quoted(given)} {where}. Run `{listing}` to list the IDs "
            "(or pass --db / CTXWRIGHT_DB if it lives in another database)."
        )
    n = db.fetchone(
        f"SELECT COUNT(*) AS n FROM {table} WHERE {text} >= ? AND {text} < ? AND substr(id, 1, ?) = ?",
        (start, start + _TOP, len(start), start),
    )
    count = int(n["n"]) if n is not None else len(rows)
    names = ", ".join(str(r["id"]) for r in rows[:SHOWN]) + (", ..." if count > SHOWN else "")
    raise AmbiguousSessionId(
        f"{what} ID {quoted(given)} is ambiguous: {count:,} {what}s {where} start with it ({names}); give more of the ID"
    )


__all__ = ["resolve_id", "unstorable"]
