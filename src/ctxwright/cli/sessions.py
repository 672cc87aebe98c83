"""One way to name a session, whatever recorded it: the one list (``ctxwright sessions``) and
the one function every command that takes a session resolves its ID through.

Why: a store holds sessions of several kinds -- ``run`` (a Harness session: events, calls),
``proxy`` (the bytes ``ctxwright proxy`` relayed) and ``framework`` (the bytes a framework's
own HTTP client sent, recorded in process) -- in two sets of tables (``store/sessions.py``,
``proxy/store.py``). Each command used to take one kind positionally and the other through a
flag of its own (``--session``, ``--proxy-session``), so a user had to know which recorder
made an ID before using it. Here an ID (whole, or a unique start of it, ``store/ids.py``) is
looked up in both, and the :class:`SessionRef` says which kind it names; a command that does
not apply to that kind says so in one line (:func:`refuse`). The kind of a wire session is
derived from what is stored with it (``proxy/store.py: session_kind``), so a new recorder
adds a kind there, not here.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxwright.core.words import quoted
from ctxwright.errors import AmbiguousSessionId, CtxwrightError, SessionNotFound

#: the kind of a session a Harness recorded (``ctxwright run``, ``Harness``, ``Context``)
RUN = "run"
#: the largest LIMIT both databases take (a 64-bit integer): ``--limit`` 10**20 means "all"
_MOST = 2**63 - 1


@dataclass(frozen=True)
class SessionRef:
    """A session ID resolved: its full ``id`` and its ``kind`` (``run``, ``proxy``, ``framework``)."""

    kind: str
    id: str

    @property
    def from_the_wire(self) -> bool:
        """Whether it was recorded from the wire (its calls are bytes, it has no events)."""
        return self.kind != RUN

    def __str__(self) -> str:
        return f"{self.kind} session {self.id}"


def _wire_ref(store: Any, given: str) -> SessionRef:
    from ctxwright.proxy.store import ProxyLog

    row = ProxyLog(store).session_row(given)
    return SessionRef(str(row["kind"]), str(row["id"]))


def resolve_session(store: Any, given: str) -> SessionRef:
    """The session ``given`` names in ``store``, of any kind: its full ID, or the one ID that
    starts with it among every kind's. An exact ID wins over a start of another; a start shared
    by sessions of two kinds is :class:`AmbiguousSessionId`; none is the store's
    :class:`SessionNotFound` (one line, naming ``ctxwright sessions``)."""
    found: list[SessionRef] = []
    missing: SessionNotFound | None = None
    ambiguous: AmbiguousSessionId | None = None
    for lookup in (lambda: SessionRef(RUN, store.resolve(given)), lambda: _wire_ref(store, given)):
        try:
            found.append(lookup())
        except AmbiguousSessionId as exc:
            ambiguous = ambiguous or exc
        except SessionNotFound as exc:
            missing = missing or exc
    exact = [r for r in found if r.id == given.strip()]
    if exact:
        return exact[0]
    if len(found) == 1 and ambiguous is None:
        return found[0]
    if found:
        names = ", ".join(str(r) for r in found)
        raise AmbiguousSessionId(
            f"session ID {quoted(given)} is ambiguous: sessions of several kinds in {store.location} start with it "
            f"({names}{', ...' if ambiguous else ''}); give more of the ID"
        )
    if ambiguous is not None:
        raise ambiguous
    assert missing is not None
    raise missing


def all_sessions(store: Any, limit: int) -> list[dict[str, Any]]:
    """Every top-level session of every kind in ``store``, newest first, at most ``limit``:
    each row its kind's own fields (``store/sessions.py``, ``proxy/store.py``) with ``id``,
    ``kind``, ``created_at`` and ``calls`` in common."""
    from ctxwright.proxy.store import ProxyLog

    limit = min(max(0, limit), _MOST)
    rows = [*store.list_sessions(limit=limit), *ProxyLog(store).session_rows(limit=limit)]
    rows.sort(key=lambda r: float(r["created_at"] or 0.0), reverse=True)
    return rows[:limit]


def is_file_argument(given: str) -> bool:
    """Whether a positional that may be a FILE or an ID is a file: ``-`` (stdin), a path that
    exists, or one that looks like a file name (``cli/common.py: looks_like_path``: a folder
    separator or an extension, which no session ID has) -- so a mistyped file name is said to
    be unreadable, not looked up as an ID."""
    from ctxwright.cli.common import looks_like_path as _looks_like_path

    if given == "-" or _looks_like_path(given):
        return True
    try:
        return Path(given).expanduser().exists()
    except (OSError, ValueError, RuntimeError):  # a name the OS takes for no path
        return False


def named(
    args: argparse.Namespace,
    given: str | None,
    *,
    session: str | None = None,
    proxy_session: str | None = None,
    files: bool,
    usage: str,
) -> SessionRef | str | None:
    """What a command was pointed at: a file name (``files`` and :func:`is_file_argument`), a
    :class:`SessionRef`, or ``None`` when nothing was given. ``given`` is the positional, of
    any kind, resolved here; ``session`` and ``proxy_session`` are the aliases kept from before
    the one list (a run session's ID; a proxy or framework session's), passed on as given --
    the command's reader resolves them as it always did. ``usage`` is the command line to show
    when more than one was given. The store is read through the CLI's one opener
    (``cli/common.py: existing_store``), and only when an ID must be looked up."""
    given_ones = [x for x in (given, session, proxy_session) if x is not None]
    if len(given_ones) > 1:
        raise CtxwrightError(f"give one source, not {len(given_ones)}: {usage}")
    if session is not None:
        return SessionRef(RUN, session)
    if proxy_session is not None:
        return SessionRef("proxy", proxy_session)
    if given is None:
        return None
    if files and is_file_argument(given):
        return given
    return _lookup(args, given, files=files)


def _lookup(args: argparse.Namespace, given: str, *, files: bool) -> SessionRef:
    from ctxwright.cli.common import existing_store as _store

    store = _store(args)
    try:
        return resolve_session(store, given)
    except AmbiguousSessionId:
        raise  # it names the sessions that start so; "no file of that name" would mislead
    except SessionNotFound:
        if not files:
            raise
        raise SessionNotFound(
            f"no session {quoted(given)} in {store.location} and no file of that name: give a session ID "
            "(`ctxwright sessions` lists them; --db names another store) or a file"
        ) from None
    finally:
        store.close()


def refuse(ref: SessionRef, command: str, why: str) -> CtxwrightError:
    """The one line a command that does not apply to ``ref``'s kind says."""
    return CtxwrightError(f"{command} does not apply to {ref}: {why}")


__all__ = ["RUN", "SessionRef", "all_sessions", "is_file_argument", "named", "refuse", "resolve_session"]
