"""The audit of a proxy session: one computation for the line the proxy prints per call,
``ctxwright audit --proxy-session`` and ``ctxwright report --proxy-session``.

Why one: a call's reusable prefix is the longest prefix it shares with any request its
auditor saw before it. An auditor shared by every session since the proxy started and one
that reads a single session back from the store give the same call two numbers -- a second
session opening with the same system prompt counts it as reusable live and not offline, a
call after a restart the other way round. So a proxy session is audited on its own: its calls
in call order, read by the log reader (``audit/logs.py``), each in the session's one
conversation, by an :class:`~ctxwright.audit.compare.Auditor` of its own with the default
limits. Live, :class:`LiveAudits` keeps one such auditor per recent session and rebuilds it
from the stored calls when it has none (the proxy restarted, or dropped it for memory), or
reads just the calls it has not seen when another process recorded some (``--workers``);
offline, :func:`session_items` feeds the stored calls to a fresh one. The same requests in the
same order give the same rows.

A keep-warm refresh (``proxy/keep_warm.py``) is recorded in the agent's session, but it is not
a turn of the agent's conversation: it re-sends the last request with ``max_tokens`` 1, and
compared with it the agent's next call would show ``options_changed`` -- a break the agent
never made. So a refresh is audited in a conversation of its own (:func:`in_session` with
``refresh``), live and offline alike, and the agent's calls are compared only with each other.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ctxwright.audit.compare import Auditor, AuditRequest, AuditRow
from ctxwright.audit.logs import LogItem, read_records
from ctxwright.audit.provider_log import LogVerdicts
from ctxwright.core.tokens import TokenCounter
from ctxwright.proxy.log import proxy_session_requests

if TYPE_CHECKING:
    from ctxwright.store.sessions import Store

#: sessions whose auditor the live proxy keeps (the least recently used beyond it is dropped)
LIVE_SESSIONS = 64
#: bytes the kept auditors may hold together (prefix indexes and latest requests, roughly)
LIVE_AUDIT_BYTES = 128 * 1024 * 1024


#: what a refresh's conversation adds to its session's id
REFRESHES = " keep-warm"


def in_session(req: AuditRequest, session_id: str, refresh: bool = False) -> AuditRequest:
    """``req`` as a call of the proxy session ``session_id``: its one conversation, or the
    session's refreshes' when ``refresh`` (see the module docstring)."""
    return dataclasses.replace(req, conversation=session_id + (REFRESHES if refresh else ""), session=session_id)


def is_refresh(record: Any) -> bool:
    """Whether a stored record (``proxy/log.py``) is a keep-warm refresh, not the agent's call."""
    meta = record.get("proxy") if isinstance(record, dict) else None
    audit = meta.get("audit") if isinstance(meta, dict) else None
    return isinstance(audit, dict) and audit.get("keep_warm") is True


def session_rows(records: Sequence[Any], session_id: str, counter: TokenCounter | None = None) -> list[AuditRow | None]:
    """The audit row of each record of one proxy session, in order (``None`` for a record whose
    request could not be read): the rows the live proxy printed, for a view that prices them
    (``ctxwright show``: ``audit/compare.py``'s ``row_cost`` needs each call's usage split,
    provider and model, which the stored audit does not keep)."""
    auditor = Auditor(counter or TokenCounter(), keep_rows=False)
    items = list(session_items(records, session_id))  # one item per record (``audit/logs.py``)
    return [auditor.add(i) if isinstance(i, AuditRequest) else None for i in items]


def session_items(records: Iterable[Any], session_id: str) -> Iterator[LogItem]:
    """The records of one proxy session (``proxy/log.py``) as the audit reads them, each
    request in the session's conversation; a record that cannot be read is its problem."""
    records = list(records)
    for record, item in zip(records, read_records(records), strict=True):  # one item per record
        yield in_session(item, session_id, is_refresh(record)) if isinstance(item, AuditRequest) else item


class LiveAudits:
    """The auditors of the sessions the live proxy is recording (used from the recorder's
    thread only). An auditor missing for a session that has stored calls is rebuilt from them
    (``proxy/log.py``), so its next row is the one the offline audit gives."""

    def __init__(
        self,
        store: Store,
        counter: TokenCounter,
        *,
        max_sessions: int = LIVE_SESSIONS,
        max_bytes: int = LIVE_AUDIT_BYTES,
    ) -> None:
        self.store = store
        self.counter = counter
        self.max_sessions = max_sessions
        self.max_bytes = max_bytes
        self._auditors: OrderedDict[str, Auditor] = OrderedDict()  # least recently used first
        self._seen: dict[str, int] = {}  # calls each kept auditor has audited
        #: each kept auditor's ``held_bytes`` when it last audited, and their sum: only the
        #: auditor that just audited a call changes, so the bound is kept without asking
        #: every kept auditor on every call
        self._held: dict[str, int] = {}
        self._held_sum = 0
        #: each session's history of the provider's cache reports, kept with its auditor
        self._verdicts: dict[str, LogVerdicts] = {}
        #: the provider's cache verdict of the call :meth:`add` audited last (``None``: its
        #: exchange carries no Anthropic/Responses cache report)
        self.cache: dict[str, Any] | None = None
        #: sessions with stored calls whose auditor was built anew from all of them (tests,
        #: the summary of a ``--workers`` process)
        self.rebuilt = 0
        #: calls read back from the store: every call of a rebuilt session, and the calls
        #: another process recorded in a session whose auditor this one keeps
        self.read_back = 0

    def add(
        self, session_id: str, req: AuditRequest, *, new: bool, stored: int | None = None, refresh: bool = False
    ) -> AuditRow:
        """Audit one call of ``session_id`` (``new``: the session has no stored call yet).

        ``stored``: how many calls of the session the store holds. A kept auditor that saw
        fewer -- another process (a ``--workers`` sibling, a second proxy on the same
        database) recorded the rest -- first audits just those, read from the store, and keeps
        its state: the kernel hands each new connection to any worker, so a session's calls
        move between workers all the time, and rebuilding the auditor from the whole session
        on each move would cost every call the session's length. Each call is still audited
        after exactly the calls stored before it, so the row is the one one process gives."""
        auditor = self._auditors.pop(session_id, None)
        if auditor is not None and stored is not None and self._seen.get(session_id, 0) > stored:
            auditor = None  # calls it saw are no longer stored (deleted meanwhile): start over
        if auditor is None:
            self._held_sum -= self._held.pop(session_id, 0)
        fresh = auditor is None
        if auditor is None:
            auditor = Auditor(self.counter, keep_rows=False)
            self._verdicts[session_id] = LogVerdicts()
            self._seen[session_id] = 0
            if not new:
                self.rebuilt += 1
        if not new and (fresh or (stored is not None and self._seen[session_id] < stored)):
            self._catch_up(auditor, session_id, self._seen[session_id], stored)
        self._auditors[session_id] = auditor
        item = in_session(req, session_id, refresh)
        row = auditor.add(item)
        self._seen[session_id] = self._seen.get(session_id, 0) + 1
        self.cache = self._verdicts.setdefault(session_id, LogVerdicts()).add(item, row)
        held = auditor.held_bytes
        self._held_sum += held - self._held.get(session_id, 0)
        self._held[session_id] = held
        self._evict()
        return row

    def forget(self, session_id: str) -> None:
        """Drop a session's auditor: its last call was audited but not stored (a failed write),
        and the stored calls are what the audit of the session is made of."""
        self._auditors.pop(session_id, None)
        self._verdicts.pop(session_id, None)
        self._seen.pop(session_id, None)
        self._held_sum -= self._held.pop(session_id, 0)

    def _catch_up(self, auditor: Auditor, session_id: str, start: int, stop: int | None) -> None:
        """Audit the stored calls ``start`` to ``stop`` (all from ``start`` when ``None``) of
        the session with ``auditor``; a call whose request could not be read counts as seen."""
        records = proxy_session_requests(self.store, session_id, start, stop)
        self.read_back += len(records)
        verdicts = self._verdicts[session_id]
        for item in session_items(records, session_id):
            if isinstance(item, AuditRequest):
                verdicts.add(item, auditor.add(item))
        self._seen[session_id] = start + len(records)

    def _evict(self) -> None:
        while len(self._auditors) > 1 and (len(self._auditors) > self.max_sessions or self._held_sum > self.max_bytes):
            old, _ = self._auditors.popitem(last=False)
            self._verdicts.pop(old, None)
            self._seen.pop(old, None)
            self._held_sum -= self._held.pop(old, 0)


__all__ = ["LIVE_AUDIT_BYTES", "LIVE_SESSIONS", "LiveAudits", "in_session", "session_items", "session_rows"]
