"""``ctxwright proxy``: put ctxwright in front of any agent by changing its base URL.

The relay (``server.py``) forwards every request to the upstream unchanged and streams the
answer back unchanged; the recorder (``recorder.py``) stores each exchange and audits each
model call with the same audit as ``ctxwright audit``; ``sessions.py`` decides which session
a call belongs to. ``store.py`` holds the proxy's
tables, and what was recorded is read back by ``log.py``.
"""

from __future__ import annotations

from ctxwright.proxy.log import proxy_session_requests, proxy_sessions

__all__ = ["proxy_session_requests", "proxy_sessions"]
