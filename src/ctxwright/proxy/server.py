"""The relay: an ASGI app (Starlette on uvicorn) that forwards every request to its provider's
upstream with httpx and streams the answer back as it arrives.

One proxy serves several providers: a request goes to the upstream of the provider its path
names (:func:`provider_of`: Anthropic Messages to Anthropic's, everything else to OpenAI's),
so Claude Code and Codex can share one proxy.

What it protects:

* **Not a byte changed.** The request body is streamed to the upstream as the client sends it
  and the upstream's body is streamed back as its raw bytes (``aiter_raw``): a compressed
  response stays compressed, because the client asked for it (its ``Accept-Encoding`` is
  passed on) and only the recording is decoded, afterwards, off the event loop. Headers pass
  both ways except the hop-by-hop ones (RFC 9110 §7.6.1), which belong to each connection,
  and ``Host``, which names the upstream. httpx adds no header of its own: requests are built
  directly, not through the client's defaults.
* **Streams stay streams.** Server-sent events reach the client chunk by chunk, as the
  upstream flushes them; nothing waits for the end of a response, so the time to the first
  token is the upstream's.
* **Errors stay the provider's.** Any status and body the upstream sends (429, 500, a
  malformed body) is relayed unchanged. Only when there is no upstream answer at all does the
  proxy answer itself -- 502 (cannot connect, broken answer) or 504 (no answer in time) --
  with a JSON error body both OpenAI's and Anthropic's SDKs read (``error.message``).
* **The key is only relayed.** ``Authorization``, ``x-api-key`` and ``api-key`` go to the
  upstream and nowhere else: no header is recorded or logged.
* **A client that leaves is noticed at once**, even while the proxy waits minutes for the
  upstream's first byte: the upstream request is cancelled rather than left to run (and, at a
  provider, to be billed) until ``--timeout``. Clients that stall in their request head or body
  are cut off, and the open connections are capped (``proxy/limits.py``).
* **A connection that ended badly is not reused**: one whose answer broke, and one whose
  upstream sent bytes past the end of its answer, which would corrupt the next answer on it.

Each exchange is handed to the recorder (``proxy/recorder.py``) when it ends -- completed,
cut by the client, or failed -- and the recorder writes and audits it on its own thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import importlib.util
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import TYPE_CHECKING, Any

import anyio
import httpcore
import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from ctxwright.audit.rules import Settings
from ctxwright.cache.prices import Pricing
from ctxwright.errors import ClientStalled
from ctxwright.proxy.limits import ClientLimits, http_protocol
from ctxwright.proxy.log import api_of
from ctxwright.proxy.providers import DEFAULT_UPSTREAMS, PROVIDERS

if TYPE_CHECKING:
    from ctxwright.proxy.compress import BodyCompressor

#: Headers that belong to one connection, never forwarded (RFC 9110 §7.6.1), plus ``host``.
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
#: bytes of one body the recording keeps (default); past it only its size and hash are kept
DEFAULT_RECORD_CAP = 32 * 1024 * 1024
#: the header that names a proxy session explicitly
SESSION_HEADER = "x-ctxwright-session"


#: The path prefix of Anthropic's Messages API (``/v1/messages``, ``/v1/messages/count_tokens``,
#: ``/v1/messages/batches``)
ANTHROPIC_PATH = b"/v1/messages"


def provider_of(raw_path: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> str:
    """The provider a request goes to: ``anthropic`` or ``openai``.

    Why by path: the SDKs build their URLs from one base URL each. Anthropic's clients (Claude
    Code, the ``anthropic`` SDKs) append ``/v1/messages`` to ``ANTHROPIC_BASE_URL``, the proxy's
    origin; OpenAI's (Codex, the ``openai`` SDKs) append ``/chat/completions`` or ``/responses``
    to ``OPENAI_BASE_URL``, which ends in ``/v1``. So ``/v1/messages`` and what lies under it is
    Anthropic's, and everything else -- chat completions, Responses, models, files -- OpenAI's.
    The match is on the whole ``/v1/messages`` segment at the start of the path: OpenAI's own
    ``/v1/threads/{id}/messages`` stays OpenAI's. A request under another path that carries an
    ``anthropic-version`` header (every Anthropic SDK request does, no OpenAI one does: Claude
    Code's ``/v1/models``) is Anthropic's too.
    """
    bare = raw_path.split(b"?", 1)[0]
    if bare == ANTHROPIC_PATH or bare.startswith(ANTHROPIC_PATH + b"/"):
        return "anthropic"
    if headers is not None and any(k.lower() == b"anthropic-version" for k, _v in headers):
        return "anthropic"
    return "openai"


def _check_url(url: str, flag: str, example: str) -> None:
    parsed = httpx.URL(url)
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ValueError(f"{flag} {url!r} is not an http(s) URL; give the provider's origin, e.g. {example}")


@dataclass(frozen=True)
class ProxyConfig:
    """Where to forward and how long to wait.

    ``upstream`` is one upstream for every path; ``upstreams`` one per provider (keys
    ``anthropic`` and ``openai``), a request going to its provider's by :func:`provider_of`.
    Given alone, ``upstream`` takes every path (as a single-provider proxy always did); given
    with ``upstreams``, it takes the providers ``upstreams`` leaves out. After construction
    ``upstreams`` names both providers' upstreams, whichever way they were given.

    ``read_timeout`` is the longest silence between two pieces of an upstream answer (a
    reasoning model may think for minutes before its first byte: the default is generous);
    ``connect_timeout`` how long to wait for a connection; ``clients`` how long to wait for
    the proxy's own clients and how many to serve at once (``proxy/limits.py``). ``clock``
    stamps when each exchange started and ended (epoch seconds): the provider cache's age is
    measured from it, so a test or benchmark passes its provider simulator's clock.
    """

    upstream: str | None = None
    connect_timeout: float = 10.0
    read_timeout: float = 600.0
    record_cap: int = DEFAULT_RECORD_CAP
    clients: ClientLimits = field(default_factory=ClientLimits)
    clock: Callable[[], float] = time.time
    #: hold the last bytes of each complete answer until its exchange is written, waiting at
    #: most this many seconds (``None``: never hold; see :class:`_Relay`)
    record_before_end: float | None = None
    #: keep each request's forwarded headers on its exchange, in memory only, for ``--keep-warm``
    #: (``proxy/keep_warm.py``: a refresh needs the client's key); never recorded or spooled
    keep_headers: bool = False
    upstreams: Mapping[str, str] = field(default_factory=dict)
    #: what the line per call prices each call by (``cache/prices.py``; ``None``: the built-in
    #: table): the recorder's, carried here so every worker process gets the same
    pricing: Pricing | None = None
    #: ``--compress``: each tool result in a model call's body sent compressed, the same bytes
    #: on every later request that repeats it (``proxy/compress.py``); the body is then read
    #: whole (up to ``record_cap``) before it is relayed
    compress: bool = False
    #: ``--max-tool-tokens``: the named rules' tool budget (``audit/rules/tool_budget.py``),
    #: named on the line of each call over it; ``None``: no budget
    max_tool_tokens: int | None = None
    #: ``--keep``: the survival contract the named rule ``compaction_lost_item`` holds each
    #: call to (``compaction/survival.py``); empty: nothing declared
    keep: tuple[str, ...] = ()

    def rules(self) -> Settings:
        """The named rules' settings of every recorder this config starts (one per worker)."""
        settings = Settings(self.max_tool_tokens)
        if self.keep:
            from ctxwright.compaction.survival import contract

            settings.keep = contract(self.keep)
        return settings

    def __post_init__(self) -> None:
        unknown = sorted(set(self.upstreams) - set(PROVIDERS))
        if unknown:
            raise ValueError(
                f"unknown provider {unknown[0]!r} in upstreams; the proxy routes to {', '.join(PROVIDERS)}"
            )
        if self.upstream is None and not self.upstreams:
            raise ValueError(
                "give an upstream: --upstream URL, or one per provider (--anthropic-upstream, --openai-upstream)"
            )
        if self.upstream is not None:
            _check_url(self.upstream, "--upstream", "https://api.openai.com")
        for provider, url in self.upstreams.items():
            _check_url(url, f"--{provider}-upstream", DEFAULT_UPSTREAMS[provider])
        missing = [p for p in PROVIDERS if p not in self.upstreams]
        if missing and self.upstream is None:
            raise ValueError(f"no upstream for {missing[0]}: give --{missing[0]}-upstream URL (or --upstream for all)")
        full = {p: self.upstreams.get(p) or str(self.upstream) for p in PROVIDERS}
        object.__setattr__(self, "upstreams", full)

    def upstream_for(self, provider: str) -> str:
        """The upstream of ``provider`` (``anthropic`` or ``openai``)."""
        return self.upstreams[provider]

    @property
    def label(self) -> str:
        """The upstream(s) in one line: the URL when one takes every path, else each provider's."""
        urls = set(self.upstreams.values())
        if len(urls) == 1:
            return urls.pop()
        return ", ".join(f"{p} {self.upstreams[p]}" for p in PROVIDERS)


class Capture:
    """A body as it passes: its size and sha256 always, its bytes up to ``cap``."""

    __slots__ = ("_hex", "cap", "data", "over", "sha", "size")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data: bytearray | None = bytearray()
        self.size = 0
        self.sha = hashlib.sha256()
        self.over = False
        self._hex: str | None = None

    @classmethod
    def restored(cls, cap: int, data: bytes | None, size: int, sha256: str) -> Capture:
        """A body read back from a spool (``proxy/recorder.py``): its bytes (``None``: over the
        cap), its size and the sha256 taken when it passed."""
        c = cls(cap)
        c.data = None if data is None else bytearray(data)
        c.over = data is None
        c.size = size
        c._hex = sha256
        return c

    def hexdigest(self) -> str:
        return self._hex if self._hex is not None else self.sha.hexdigest()

    def add(self, chunk: bytes) -> None:
        self.size += len(chunk)
        self.sha.update(chunk)
        if self.data is not None:
            if len(self.data) + len(chunk) > self.cap:
                self.data, self.over = None, True  # dropped: memory stays bounded by the cap
            else:
                self.data += chunk


@dataclass
class Exchange:
    """One relayed request and its answer, as the recorder receives it."""

    method: str
    path: str
    started_at: float
    t0: float
    request: Capture
    request_content_type: str | None
    request_encoding: str | None
    session_header: str | None
    response: Capture
    status: int | None = None
    response_content_type: str | None = None
    response_encoding: str | None = None
    outcome: str = "complete"
    error: str | None = None
    ttfb_ms: float | None = None
    total_ms: float | None = None
    ended_at: float | None = None
    #: the upstream the request was forwarded to (its provider's, ``ProxyConfig.upstreams``)
    upstream: str | None = None
    #: the headers forwarded with the request, the key among them: set only with
    #: ``ProxyConfig.keep_headers``, held in memory for a keep-warm refresh, never recorded
    headers: list[tuple[bytes, bytes]] | None = field(default=None, repr=False)
    #: a keep-warm refresh sent by the proxy itself (``proxy/keep_warm.py``), not the agent's call
    keep_warm: bool = False
    #: with ``--compress``: what the rewrite did (``proxy/compress.py``: ``Rewritten.summary``);
    #: ``request`` then holds the body that went upstream
    compression: dict[str, Any] | None = None
    #: set by the recorder once the exchange is written (or could not be): what an answer
    #: held until it is recorded waits for (``ProxyConfig.record_before_end``)
    written: concurrent.futures.Future[None] = field(default_factory=concurrent.futures.Future)


def _error_response(status: int, code: str, message: str, *, close: bool = False) -> Response:
    body = {"type": "error", "error": {"type": code, "code": code, "message": f"ctxwright proxy: {message}"}}
    headers = {"connection": "close"} if close else None  # uvicorn closes the connection after it
    return Response(json.dumps(body), status_code=status, headers=headers, media_type="application/json")


class _ClientWatch:
    """Notices the client closing its connection while the relay waits on the upstream --
    for its first byte, or between two pieces of a stream -- and cancels the relay's task, so
    the upstream request is abandoned at once (its connection closed, which tells a provider
    to stop generating an answer nobody will read) instead of after ``--timeout``.

    ASGI says a client is gone by a ``http.disconnect`` message on ``receive``; the request
    body comes on the same channel, so the watch starts only once the body was read whole
    (:meth:`start`), and only one reader ever waits on ``receive``.
    """

    __slots__ = ("_stopped", "_watcher", "gone", "receive", "task")

    def __init__(self, receive: Receive) -> None:
        self.receive = receive
        self.task = asyncio.current_task()
        self.gone = False
        self._watcher: asyncio.Future[None] | None = None
        self._stopped = False

    def start(self) -> None:
        if self._watcher is None and not self._stopped:
            self._watcher = asyncio.ensure_future(self._watch())

    async def _watch(self) -> None:
        while (await self.receive())["type"] != "http.disconnect":
            pass  # the rest of a body nobody reads any more
        self.gone = True
        if self.task is not None:
            self.task.cancel()

    def stop(self) -> None:
        """No more watching (called before anything that awaits once the relay is done)."""
        self._stopped = True
        if self._watcher is not None:
            self._watcher.cancel()

    def swallow(self) -> None:
        """The relay handled the cancellation it caused: the task is not being cancelled."""
        if self.task is not None:
            self.task.uncancel()


_SESSION = SESSION_HEADER.encode()
#: request headers the relay reads (besides forwarding them), looked up in one pass
_READ = frozenset({b"content-type", b"content-encoding", _SESSION, b"content-length", b"transfer-encoding"})


def _scan(raw: list[tuple[bytes, bytes]], *, drop_host: bool) -> tuple[list[tuple[bytes, bytes]], dict[bytes, str]]:
    """One pass over the headers (this runs on the event loop for every request): the ones to
    pass on -- all but the hop-by-hop ones, those the ``Connection`` header names and, for a
    request, ``Host`` -- and the first value of each header in ``_READ``."""
    lowered = [(k.lower(), k, v) for k, v in raw]
    named: set[bytes] = set()
    seen: dict[bytes, str] = {}
    for kl, _k, v in lowered:
        if kl == b"connection":
            named.update(t.strip().lower().encode("latin-1") for t in v.decode("latin-1").split(","))
        elif kl in _READ and kl not in seen:
            seen[kl] = v.decode("latin-1")
    keep = [
        (k, v) for kl, k, v in lowered if kl not in HOP_BY_HOP and kl not in named and not (drop_host and kl == b"host")
    ]
    return keep, seen


def _forwardable(raw: list[tuple[bytes, bytes]], *, drop_host: bool) -> list[tuple[bytes, bytes]]:
    """The headers to pass on (see :func:`_scan`)."""
    return _scan(raw, drop_host=drop_host)[0]


class _Relay(Response):
    """Streams an upstream answer to the client as it arrives; stops reading the upstream the
    moment the client goes away; hands the exchange to ``done`` whatever happens.

    ``hold_end`` (``ProxyConfig.record_before_end``, set by ``--workers``): the last piece of a
    complete answer is sent only once the recorder has written the exchange (or after that many
    seconds). A client that has its whole answer then finds it in the store, even if this
    process is killed the moment after: without the hold, an answer sent but still in the
    recorder's queue dies with the process. The first token is not delayed, only the end."""

    def __init__(
        self,
        upstream: httpx.Response,
        exchange: Exchange,
        done: Callable[[Exchange], None],
        watch: _ClientWatch,
        hold_end: float | None = None,
    ) -> None:
        self.upstream = upstream
        self.exchange = exchange
        self.done = done
        self.watch = watch
        self.hold_end = hold_end
        self.status_code = upstream.status_code
        self.background = None
        self.raw_headers = _forwardable(upstream.headers.raw, drop_host=False)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ex = self.exchange
        watch = self.watch
        watch.task = asyncio.current_task()
        watch.start()  # normally started when the body was read; an upstream may answer before that
        handed = sent = cut_short = False
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            held = b""
            async for chunk in self.upstream.aiter_raw():
                if ex.ttfb_ms is None:
                    ex.ttfb_ms = (time.perf_counter() - ex.t0) * 1000
                ex.response.add(chunk)
                if self.hold_end is not None:
                    chunk, held = held, chunk  # one piece behind: the last one waits for the record
                    if not chunk:
                        continue
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if self.hold_end is not None:
                handed = True
                await self._record(ex)
            await send({"type": "http.response.body", "body": held, "more_body": False})
            sent = True
        except asyncio.CancelledError:
            if not watch.gone:
                raise
            watch.swallow()
            # a handed exchange is the recorder's: complete, its upstream closed. Nor is it a
            # disconnection when the client had its whole answer: once the last byte is sent,
            # uvicorn's ``receive`` says ``http.disconnect`` (the cycle is over), and the
            # ``openai`` SDK closes a streamed answer as soon as it reads ``[DONE]``, before
            # the upstream ends its body (``_stream_finished``). Only the upstream's connection
            # is then dropped, as for any answer not read to its end.
            if not handed and not sent and not _stream_finished(ex.response):
                ex.outcome, ex.error = "client_disconnected", "the client closed the connection before the end"
            cut_short = True
        except httpx.TimeoutException:
            ex.outcome, ex.error = "upstream_timeout", "the upstream went silent mid-answer (read timeout)"
        except httpx.TransportError as exc:
            ex.outcome, ex.error = "upstream_broken", f"the upstream broke off mid-answer ({type(exc).__name__})"
        finally:
            watch.stop()
            if not handed:  # (_record closed the upstream and handed the exchange over already)
                with contextlib.suppress(Exception):
                    await asyncio.shield(_close(self.upstream, clean=ex.outcome == "complete" and not cut_short))
                self._finish(ex)

    def _finish(self, ex: Exchange) -> None:
        ex.total_ms = (time.perf_counter() - ex.t0) * 1000
        ex.ended_at = ex.started_at + ex.total_ms / 1000  # on the config's clock
        self.done(ex)

    async def _record(self, ex: Exchange) -> None:
        """Hand the complete exchange to the recorder and wait until it is written."""
        with contextlib.suppress(Exception):
            await asyncio.shield(_close(self.upstream, clean=True))
        self._finish(ex)
        with contextlib.suppress(TimeoutError, concurrent.futures.CancelledError):
            await asyncio.wait_for(asyncio.wrap_future(ex.written), self.hold_end)


#: the last event of a streamed answer, by API: chat completions end with ``data: [DONE]``,
#: Anthropic Messages with ``message_stop``, the Responses API with ``response.completed``
#: (or ``response.failed`` / ``response.incomplete``)
_STREAM_ENDS = (b"data: [DONE]", b"message_stop", b"response.completed", b"response.failed", b"response.incomplete")


def _stream_finished(body: Capture) -> bool:
    """Whether the last event relayed so far is a streamed answer's last one: the event after
    the final blank line names one of ``_STREAM_ENDS`` in its first bytes (a Responses API
    ``response.completed`` event carries the whole answer after its type)."""
    data = body.data
    if not data:
        return False
    end = len(data)
    while end and data[end - 1] in b" \r\n":
        end -= 1
    start = max(data.rfind(b"\n\n", 0, end), data.rfind(b"\r\n\r\n", 0, end)) + 1
    head = bytes(data[start : min(end, start + 256)])
    return any(marker in head for marker in _STREAM_ENDS)


def _connection_of(response: httpx.Response) -> Any:
    """httpcore's HTTP/1.1 connection that carried ``response``, or ``None``.

    httpx has no public way to it, so this follows private attributes (httpx's bound stream,
    its httpcore stream, the pool's stream, the connection's stream), checked by the test of a
    stream cut mid-way: when a version renames one, it finds nothing, and a connection that
    ended badly is left to httpcore's own checks.
    """
    node: Any = response.stream
    for attr in ("_stream", "_httpcore_stream", "_stream", "_connection"):
        node = getattr(node, attr, None)
        if node is None:
            return None
    return node if hasattr(node, "aclose") else None


def _sent_past_its_end(connection: Any) -> bool:
    """Whether the upstream sent bytes after the end of its answer (a stream ended early by a
    zero-length chunk and then continued, a ``Content-Length`` shorter than the body). h11
    keeps them for the next answer on the connection, which they would corrupt: the next
    request would fail with 502 although the upstream answered it."""
    h11_state = getattr(connection, "_h11_state", None)
    trailing = getattr(h11_state, "trailing_data", None)
    return bool(trailing and trailing[0])


async def _close(upstream: httpx.Response, *, clean: bool) -> None:
    """Close an upstream answer; drop its connection from the pool unless the answer ended
    cleanly -- without a byte past its end. httpcore closes a connection whose answer it saw
    break, but keeps one whose answer looked complete; this runs in one shielded task, so no
    other request can take the connection between the two steps."""
    connection = _connection_of(upstream)
    drop = not clean or _sent_past_its_end(connection)  # before aclose(), which readies it for reuse
    pooled = getattr(getattr(upstream.stream, "_stream", None), "_httpcore_stream", None)
    if drop and isinstance(pooled, _PooledStream):
        pooled.reusable = False  # not pushed back for the next request, even for a moment
    await upstream.aclose()
    if drop and connection is not None:
        await connection.aclose()


class _PooledStream:
    """An upstream answer's body as the pool hands it out: when it is closed, its connection
    goes back on its upstream's stack of idle connections (or is closed), in O(1).

    ``_stream`` is the connection's own body stream: :func:`_connection_of` walks through it to
    the connection. ``reusable`` is cleared by :func:`_close` for an answer that ended badly,
    before the connection could be handed to another request."""

    __slots__ = ("_closed", "_connection", "_origin", "_pool", "_stream", "reusable")

    def __init__(
        self,
        stream: Any,
        pool: _UpstreamPool,
        connection: httpcore.AsyncConnectionInterface,
        origin: httpcore.Origin,
    ) -> None:
        self._stream = stream
        self._pool = pool
        self._connection = connection
        self._origin = origin
        self._closed = False
        self.reusable = True

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for part in self._stream:
            yield part

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if hasattr(self._stream, "aclose"):
                await self._stream.aclose()
        finally:
            await self._pool.release(self._connection, self._origin, reusable=self.reusable)


class _UpstreamPool(httpcore.AsyncConnectionPool):
    """httpcore's connection pool without its scans: per upstream origin, a stack of idle
    HTTP/1.1 connections, the most recently used on top.

    httpcore's own pool re-examines every connection it holds whenever a request starts or an
    answer ends (``_assign_requests_to_connections``: per connection ``is_idle``,
    ``has_expired`` -- a ``poll`` of its socket -- and a count of all connections per
    connection), so with 32 clients in flight each request costs hundreds of checks, the
    largest share of the proxy's CPU. Here a request pops one idle connection (its expiry and
    socket checked, that one only) or opens a new one, and its answer's close pushes the
    connection back: O(1) per request. Sized: at most ``max_keepalive_connections`` idle per
    upstream (the rest closed as their answers end); the open ones are the answers in flight,
    which the proxy's own connection cap bounds (``proxy/limits.py``). The oldest idle
    connection is checked for expiry on every release, so one left at the bottom of the stack
    is not kept open past ``keepalive_expiry``. HTTP/1.1 only (one answer per connection at a
    time), as the relay uses it."""

    def __init__(self, like: httpcore.AsyncConnectionPool) -> None:
        super().__init__(
            ssl_context=like._ssl_context,
            max_connections=None,  # (httpcore's default, 10, would also cap the idle ones at 10)
            max_keepalive_connections=like._max_keepalive_connections,
            keepalive_expiry=like._keepalive_expiry,
            http1=True,
            http2=False,
            retries=like._retries,
            local_address=like._local_address,
            uds=like._uds,
            network_backend=like._network_backend,
            socket_options=like._socket_options,
        )
        #: idle connections per origin (``Origin`` itself is not hashable: its scheme, host, port)
        self._idle: dict[tuple[bytes, bytes, int], list[httpcore.AsyncConnectionInterface]] = {}
        self._open: set[httpcore.AsyncConnectionInterface] = set()

    @property
    def connections(self) -> list[httpcore.AsyncConnectionInterface]:
        return list(self._open)

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        origin = request.url.origin
        while True:
            connection = await self._take(origin)
            try:
                response = await connection.handle_async_request(request)
            except httpcore.ConnectionNotAvailable:  # closed between the check and the send: the next one
                await self.release(connection, origin, reusable=False)
                continue
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await self.release(connection, origin, reusable=False)
                raise
            return httpcore.Response(
                status=response.status,
                headers=response.headers,
                content=_PooledStream(response.stream, self, connection, origin),
                extensions=response.extensions,
            )

    async def _take(self, origin: httpcore.Origin) -> httpcore.AsyncConnectionInterface:
        """The most recently used idle connection to ``origin`` still good, else a new one."""
        stack = self._idle.get(_origin_key(origin))
        while stack:
            connection = stack.pop()
            if connection.is_available() and not connection.has_expired():
                return connection
            await self._drop(connection)
        connection = self.create_connection(origin)
        self._open.add(connection)
        return connection

    async def release(
        self, connection: httpcore.AsyncConnectionInterface, origin: httpcore.Origin, *, reusable: bool
    ) -> None:
        """An answer on ``connection`` ended: back on its stack when it is idle and there is
        room, else closed."""
        stack = self._idle.setdefault(_origin_key(origin), [])
        if reusable and connection.is_available() and len(stack) < self._max_keepalive_connections:
            stack.append(connection)
        else:
            await self._drop(connection)
        if len(stack) > 1 and stack[0].has_expired():
            await self._drop(stack.pop(0))

    async def _drop(self, connection: httpcore.AsyncConnectionInterface) -> None:
        self._open.discard(connection)
        if not connection.is_closed():
            await connection.aclose()

    async def aclose(self) -> None:
        self._idle.clear()
        open_now, self._open = self._open, set()
        for connection in open_now:
            await connection.aclose()


def _origin_key(origin: httpcore.Origin) -> tuple[bytes, bytes, int]:
    """An upstream origin as a dict key (``Origin`` itself is not hashable)."""
    return origin.scheme, origin.host, origin.port


def _pooled(client: httpx.AsyncClient) -> None:
    """Give ``client``'s direct transport the scan-free pool (:class:`_UpstreamPool`); a
    transport through an outbound proxy (``HTTPS_PROXY``) keeps httpcore's own."""
    transport: Any = getattr(client, "_transport", None)
    pool = getattr(transport, "_pool", None)
    if type(pool) is httpcore.AsyncConnectionPool and not pool._http2:
        transport._pool = _UpstreamPool(pool)


def build_app(
    config: ProxyConfig,
    done: Callable[[Exchange], None],
    admit: Callable[[], Awaitable[None]] | None = None,
    compressor: BodyCompressor | None = None,
) -> Starlette:
    """The proxy as an ASGI app; ``done(exchange)`` is called once per exchange, on the event
    loop, when it ends (it must return at once: the recorder queues it). ``admit()`` is awaited
    before each request is relayed (``Recorder.admit``: it holds new requests while the
    recorder's backlog is full). ``compressor`` (``--compress``): a model call's body is read
    whole and its tool results compressed before it is relayed (:func:`_compressed`)."""
    bases = {p: httpx.URL(u) for p, u in config.upstreams.items()}
    base_paths = {p: b.raw_path.rstrip(b"/") for p, b in bases.items()}
    timeout = httpx.Timeout(
        connect=config.connect_timeout, read=config.read_timeout, write=config.read_timeout, pool=None
    )
    state: dict[str, httpx.AsyncClient] = {}
    body_timeout = config.clients.body_timeout

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # no cookie jar: a proxy must not carry one client's cookies into another's requests
        jar = CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))
        # One client for the proxy's life: every request reuses a kept-alive connection (no TCP
        # or TLS handshake per call), taken from a pool that does not scan its connections per
        # request (_UpstreamPool); at most 64 idle per upstream, enough for a few dozen agents.
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=64, keepalive_expiry=30)
        client = httpx.AsyncClient(timeout=timeout, limits=limits, cookies=jar, follow_redirects=False)
        _pooled(client)
        async with client:
            state["client"] = client
            yield

    async def relay(request: Request) -> Response:
        if admit is not None:
            await admit()
        scope = request.scope
        raw_path: bytes = scope.get("raw_path") or scope["path"].encode("utf-8")
        query: bytes = scope.get("query_string") or b""
        provider = provider_of(raw_path, scope["headers"])
        target = base_paths[provider] + raw_path + (b"?" + query if query else b"")
        url = bases[provider].copy_with(raw_path=target)
        forward, seen = _scan(scope["headers"], drop_host=True)
        ex = Exchange(
            method=request.method,
            path=(raw_path + (b"?" + query if query else b"")).decode("latin-1"),
            started_at=config.clock(),
            t0=time.perf_counter(),
            request=Capture(config.record_cap),
            request_content_type=seen.get(b"content-type"),
            request_encoding=seen.get(b"content-encoding"),
            session_header=seen.get(_SESSION),
            response=Capture(config.record_cap),
            upstream=config.upstreams[provider],
            headers=forward if config.keep_headers else None,
        )
        has_body = seen.get(b"content-length") not in (None, "0") or bool(seen.get(b"transfer-encoding"))
        watch = _ClientWatch(request.receive)
        api = api_of(request.method, ex.path) if compressor is not None and has_body else None

        async def body() -> AsyncIterator[bytes]:
            """The client's body as it arrives, each wait bounded by ``--body-timeout``."""
            while True:
                try:
                    async with asyncio.timeout(body_timeout):
                        message = await request.receive()
                except TimeoutError:
                    raise ClientStalled from None
                if message["type"] == "http.disconnect":
                    raise ClientDisconnect
                more = bool(message.get("more_body", False))
                if not more:
                    watch.start()  # the body is whole: the next message can only say the client left
                chunk = message.get("body", b"")
                if chunk:
                    if api is None:  # (compressed: the capture takes the body that goes upstream)
                        ex.request.add(chunk)
                    yield chunk
                if not more:
                    return

        upload = body()
        outgoing = httpx.Request(request.method, url, headers=forward, content=upload if has_body else b"")
        if not has_body:
            watch.start()
        try:
            if api is not None and compressor is not None:
                outgoing = await _compressed(compressor, api, ex, upload, outgoing, forward, config)
            upstream = await state["client"].send(outgoing, stream=True)
        except BaseException as exc:
            watch.stop()
            if isinstance(exc, asyncio.CancelledError) and watch.gone:
                watch.swallow()  # the watch cancelled the upstream request: the client is gone
                msg = (
                    "the client closed the connection before the upstream answered; the upstream request was cancelled"
                )
                return _failed(ex, done, 499, "client_gone", msg)
            if isinstance(exc, ClientDisconnect):
                return _failed(ex, done, 499, "client_disconnected", "the client closed the connection mid-request")
            if isinstance(exc, ClientStalled):
                msg = f"the client sent nothing of its request body for {body_timeout:g} s (--body-timeout)"
                return _failed(ex, done, 408, "client_timeout", msg, close=True)
            if isinstance(exc, httpx.TransportError):
                if has_body:  # read the rest of what the client sent, so the failed call is recorded whole
                    with contextlib.suppress(Exception):
                        async for _chunk in upload:
                            pass
                return _upstream_failed(ex, done, config, exc)
            raise
        ex.status = upstream.status_code
        ex.response_content_type = upstream.headers.get("content-type")
        ex.response_encoding = upstream.headers.get("content-encoding")
        return _Relay(upstream, ex, done, watch, config.record_before_end)

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
    return Starlette(routes=[Route("/{path:path}", relay, methods=methods)], lifespan=lifespan)


async def _compressed(
    compressor: BodyCompressor,
    api: str,
    ex: Exchange,
    upload: AsyncIterator[bytes],
    outgoing: httpx.Request,
    forward: list[tuple[bytes, bytes]],
    config: ProxyConfig,
) -> httpx.Request:
    """The request with its tool results compressed (``--compress``, ``proxy/compress.py``).

    The body is read whole, up to ``record_cap``: a longer one is relayed as it arrives, the
    part already read first, byte for byte. The rewritten body gets its own ``Content-Length``
    (and loses its ``Content-Encoding`` when it was decoded); every other header is the
    client's."""
    head: list[bytes] = []
    size = 0
    async for chunk in upload:
        head.append(chunk)
        size += len(chunk)
        if size > config.record_cap:
            ex.compression = {"skipped": f"the body is over the cap ({config.record_cap:,} bytes, --record-cap)"}

            async def rest() -> AsyncIterator[bytes]:
                for piece in head:
                    ex.request.add(piece)
                    yield piece
                async for piece in upload:
                    ex.request.add(piece)
                    yield piece

            return httpx.Request(outgoing.method, outgoing.url, headers=forward, content=rest())
    raw = b"".join(head)
    out = await compressor.rewrite(raw, api=api, encoding=ex.request_encoding, scope=ex.session_header)
    ex.compression = out.summary
    ex.request.add(out.body)
    if out.body is raw:
        return httpx.Request(outgoing.method, outgoing.url, headers=forward, content=raw)
    drop = {b"content-length", b"content-encoding"} if out.decoded else {b"content-length"}
    headers = [(k, v) for k, v in forward if k.lower() not in drop]
    headers.append((b"content-length", str(len(out.body)).encode("ascii")))
    if out.decoded:
        ex.request_encoding = None  # the recorded body is the plain one that went upstream
    if ex.headers is not None:
        ex.headers = headers
    return httpx.Request(outgoing.method, outgoing.url, headers=headers, content=out.body)


def _upstream_failed(ex: Exchange, done: Callable[[Exchange], None], config: ProxyConfig, exc: Exception) -> Response:
    """The proxy's own answer when the upstream gave none: 502 or 504, one clear message."""
    up = ex.upstream or config.label
    if isinstance(exc, httpx.ConnectTimeout):
        msg = f"could not connect to the upstream {up} within {config.connect_timeout:g} s (--connect-timeout)"
        return _failed(ex, done, 502, "upstream_unreachable", msg)
    if isinstance(exc, httpx.ConnectError):
        msg = f"could not connect to the upstream {up} ({exc or type(exc).__name__}); is it running?"
        return _failed(ex, done, 502, "upstream_unreachable", msg)
    if isinstance(exc, httpx.TimeoutException):
        msg = f"the upstream {up} sent no answer within {config.read_timeout:g} s (--timeout)"
        return _failed(ex, done, 504, "upstream_timeout", msg)
    msg = f"the upstream {up} sent no valid HTTP answer ({type(exc).__name__}: {exc})"
    return _failed(ex, done, 502, "upstream_broken", msg)


def _failed(
    ex: Exchange, done: Callable[[Exchange], None], status: int, code: str, message: str, *, close: bool = False
) -> Response:
    ex.outcome, ex.error = code, message
    ex.total_ms = (time.perf_counter() - ex.t0) * 1000
    ex.ended_at = ex.started_at + ex.total_ms / 1000  # on the config's clock
    done(ex)
    return _error_response(status, code, message, close=close)


def _fast(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def uvicorn_config(app: Starlette, host: str, port: int, limits: ClientLimits | None = None) -> uvicorn.Config:
    """uvicorn as a relay needs it: no ``Server``/``Date`` headers of its own (the upstream's
    pass through), no access log (a request line is the recorder's job, without headers), and
    the C parser (``httptools``) and libuv loop (``uvloop``) when installed -- they are
    dependencies; the pure-Python ``h11`` and ``asyncio`` remain the fallback, and the relay
    CPU per request is what the added latency of every concurrent client is made of. The
    protocol class carries the request-head deadline of ``limits``, and uvicorn's
    ``limit_concurrency`` its connection cap (``proxy/limits.py``)."""
    limits = limits or ClientLimits()
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=http_protocol(_fast("httptools"), limits),
        loop="uvloop" if _fast("uvloop") else "asyncio",
        limit_concurrency=limits.max_connections + 1,  # uvicorn refuses at this many, its own included
        log_level="warning",
        access_log=False,
        server_header=False,
        date_header=False,
        timeout_keep_alive=30,
        lifespan="on",
    )


def listening_socket(host: str) -> socket.socket:
    """A TCP socket for ``host``, its protocol named: asyncio turns Nagle's algorithm off
    (``TCP_NODELAY``) only on sockets whose ``proto`` is ``IPPROTO_TCP``, and a socket made
    with proto 0 passes that 0 to every accepted connection -- whose small writes then wait
    for a delayed ACK, 40 ms per request on Linux."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)


class ProxyThread:
    """The proxy served on a background thread (tests, benchmarks, embedding in an app).

    The socket is bound before the thread starts, so ``url`` is known (port 0 picks a free
    one) and a client may connect at once.
    """

    def __init__(
        self, app: Starlette, host: str = "127.0.0.1", port: int = 0, limits: ClientLimits | None = None
    ) -> None:
        self.sock = listening_socket(host)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.host, self.port = host, self.sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn_config(app, host, self.port, limits))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> ProxyThread:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the proxy did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()

    def __enter__(self) -> ProxyThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
