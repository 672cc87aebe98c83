"""Persistence: one SQLite database per user (``$CTXWRIGHT_DB``) holding every session, its
events and its model calls, and the files that go with it.

* ``sqlite.py``: the connection, waiting out another process's lock, one error per failure;
* ``migrations.py``: the schema, changed only by named migrations (history: never removed);
* ``sessions.py``: :class:`~ctxwright.store.sessions.Store`, the sessions, events, calls and
  leases -- what ``core/records.py: SessionStore`` asks of a store;
* ``lease.py``: one writer per session; ``recovery.py``: events the database refused, kept
  until resume; ``private.py``: files only their owner can read; ``export.py``: a stored
  session as plain JSON, and each call's request body rebuilt.

The proxy's tables live in the same database but are ``proxy/store.py``'s.
"""
