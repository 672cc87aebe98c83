"""How long the proxy waits for its own clients, and how many it serves at once.

Why: every open connection holds a socket and a file descriptor, and uvicorn on its own never
times out a client that is slow to send its request: one that opens a connection and sends
its request head a byte at a time (or nothing at all), or stops in the middle of a body, holds
them as long as it likes -- enough such clients (slowloris) and the process runs out of file
descriptors and new requests fail. Three bounds, each from ``ctxwright proxy``'s flags:

* ``header_timeout`` -- a request head must be complete this many seconds after its first
  byte (after the connection opened, for the first request on it), or the connection is
  closed. uvicorn has no such option; :func:`http_protocol` adds it to uvicorn's own HTTP
  protocol class. (Idle time *between* requests on a kept-alive connection is uvicorn's
  ``timeout_keep_alive``.)
* ``body_timeout`` -- the longest silence between two pieces of a request body; the relay
  (``server.py``) then answers 408 and closes the connection.
* ``max_connections`` -- past this many open connections, uvicorn answers new requests with
  503 (``limit_concurrency``), which the OpenAI and Anthropic SDKs retry after a pause.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ClientLimits:
    """The bounds on the proxy's clients (see the module docstring)."""

    header_timeout: float = 20.0
    body_timeout: float = 60.0
    max_connections: int = 256

    def __post_init__(self) -> None:
        for flag, value in (("--header-timeout", self.header_timeout), ("--body-timeout", self.body_timeout)):
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{flag} {value:g} is not a number of seconds above 0; give e.g. {flag} 30")
        if self.max_connections < 1:
            raise ValueError(f"--max-connections {self.max_connections} must be at least 1; give e.g. 256")


class _HeadDeadline(asyncio.Protocol):
    """Closes a connection whose request head is not complete ``head_timeout`` seconds after
    it began. Mixed in before uvicorn's protocol class, whose ``cycle`` (the request being
    served, ``None`` before the first) tells whether a head is awaited: a new cycle means a
    head was parsed; bytes arriving once the current request was read whole begin the next
    head. (A client that pipelines the start of its next head with the end of a body is left
    to uvicorn's keep-alive timeout, which starts when the answer ends.)"""

    head_timeout: float = 20.0
    _head_timer: asyncio.TimerHandle | None = None
    _head_transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._head_transport = transport
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        before: Any = getattr(self, "cycle", None)
        # nothing of the current request is awaited (its body is in, or its answer is out):
        # these bytes begin the next request's head -- possibly while the answer is still sent
        between = before is None or before.response_complete or not before.more_body
        super().data_received(data)
        if getattr(self, "cycle", None) is not before:  # a request head was parsed
            self._disarm()
        elif between and self._head_timer is None:
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._head_timer = asyncio.get_running_loop().call_later(self.head_timeout, self._head_expired)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_expired(self) -> None:
        self._head_timer = None
        transport = self._head_transport
        if transport is not None and not transport.is_closing():
            transport.close()


def http_protocol(fast: bool, limits: ClientLimits) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class -- the ``httptools`` one when ``fast``, else ``h11`` --
    with the request-head deadline of ``limits``."""
    if fast:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base
    else:
        from uvicorn.protocols.http.h11_impl import H11Protocol as base  # type: ignore[assignment]
    name = f"HeadTimed{base.__name__}"
    return type(name, (_HeadDeadline, base), {"head_timeout": limits.header_timeout})


__all__ = ["ClientLimits", "http_protocol"]
