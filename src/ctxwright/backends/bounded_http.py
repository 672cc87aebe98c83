"""An HTTP client for the SDKs that caps what a server can make ctxwright hold, and never
follows a redirect.

Why: ``--base-url`` may point at any server, and the SDKs' default clients trust it.

* **Size.** The SDK reads a whole reply body into memory (and an error body, and every line of
  a stream), and httpx undoes ``Content-Encoding: gzip`` without a limit: 100 KB of gzip
  becomes 100 MB of JSON. Here every reply is decoded by this module, a bounded piece at a
  time (zlib's ``max_length``), and a reply whose decoded size passes :data:`MAX_REPLY_BYTES`
  ends in :class:`~ctxwright.errors.ReplyTooLarge` -- whatever the compression ratio, memory
  and time stay bounded by the cap. Only ``gzip`` and ``deflate`` are asked for and accepted;
  a reply in any other encoding is refused with the same error type.
* **Redirects.** httpx drops ``Authorization`` when a redirect leaves the origin, but not
  Anthropic's ``x-api-key``, and a 307/308 sends the whole prompt again: a hostile server
  could forward both to a host of its choice. A redirect here is an HTTP error like any other
  (the message names the status): point ``--base-url`` at the final address.
* **Time.** The SDKs' ``timeout`` bounds each socket read, not the reply: a server or gateway
  that sends one byte a second, or an SSE keep-alive comment (``: ping``) every few seconds,
  holds a call forever. A backend runs each try inside :meth:`TryDeadline.running`; while it
  runs, every connect, read, write and TLS handshake on this client's connections waits at most
  what is left of the try's time. One that would start after the deadline, or times out at it,
  raises the HTTP package's own timeout error, made a :class:`~ctxwright.errors.DeadlinePassed`
  too (so every SDK version reports it as a timeout), which the backend words with
  :func:`deadline_message` and retries as ``--max-retries`` says. This sits in the network
  layer under httpx (``NetworkBackend`` / ``NetworkStream``, the same interface in ``httpcore``
  and ``httpcore2``), so it bounds the status line, the headers and the body alike, streamed or
  not, and needs no thread: the sync SDKs do their I/O on the caller's thread, whose deadline a
  thread-local holds.

The SDKs bring different httpx packages (``httpx``, or ``httpx2`` in newer ``anthropic`` and
``openai`` releases) with the same transport interface, so :func:`bounded_client` takes the SDK's client class and
wraps the transports it made.
"""

from __future__ import annotations

import sys
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ctxwright.core.redact import redact
from ctxwright.errors import DeadlinePassed, ReplyTooLarge

__all__ = [
    "MAX_REPLY_BYTES",
    "MAX_TIMEOUT_S",
    "TryDeadline",
    "bounded_client",
    "check_timeout",
    "deadline_message",
    "deadline_reason",
    "redirect_hint",
]

#: The largest reply body (decoded) a backend accepts: a Messages or Responses reply of the
#: longest output a model gives (128k tokens, with its reasoning and JSON escaping) is a few
#: MB, a stream of it some 20 MB; 64 MB leaves room and still bounds a hostile server.
MAX_REPLY_BYTES = 64 * 1024 * 1024
_PIECE = 64 * 1024
#: The longest ``timeout`` a backend takes: a week, far above any model's answer. ``inf`` or
#: ``1e309`` would reach ``time``/socket calls that take a C ``time_t`` and raise
#: ``OverflowError`` mid-call; ``nan`` compares false with every deadline and never ends.
MAX_TIMEOUT_S = 7 * 24 * 3600.0


def check_timeout(timeout: float) -> None:
    """Refuse (``ValueError``, one line) a ``timeout`` that is not a number of seconds above 0
    and at most :data:`MAX_TIMEOUT_S` -- the one rule of every served backend."""
    if not (isinstance(timeout, int | float) and 0 < timeout <= MAX_TIMEOUT_S):
        raise ValueError(
            f"timeout must be a positive number of seconds up to {MAX_TIMEOUT_S:.0f} (a week), not {timeout!r}"
        )


_ACCEPTED = ("gzip", "deflate", "x-gzip")


class _Bounded:
    """A reply body read, decoded and counted a bounded piece at a time."""

    def __init__(self, inner: Any, coding: str, url: str, cap: int) -> None:
        self._inner = inner
        self._coding = coding
        self._url = url
        self._cap = cap

    def _too_large(self) -> ReplyTooLarge:
        return ReplyTooLarge(
            f"{self._url} sent a reply larger than {self._cap // (1024 * 1024)} MB (decoded); ctxwright stopped "
            "reading it"
        )

    def _decoded(self) -> Iterator[bytes]:
        if not self._coding:
            yield from self._inner
            return
        wbits = 16 + zlib.MAX_WBITS if self._coding in ("gzip", "x-gzip") else zlib.MAX_WBITS
        d = zlib.decompressobj(wbits)
        try:
            for chunk in self._inner:
                data = d.decompress(chunk, _PIECE)
                yield data
                while d.unconsumed_tail:
                    yield d.decompress(d.unconsumed_tail, _PIECE)
            yield d.flush()
        except zlib.error as exc:
            raise ReplyTooLarge(f"{self._url} sent a reply whose {self._coding} encoding is broken ({exc})") from None

    def __iter__(self) -> Iterator[bytes]:
        total = 0
        for piece in self._decoded():
            total += len(piece)
            if total > self._cap:
                raise self._too_large()
            if piece:
                yield piece

    def close(self) -> None:
        self._inner.close()


class TryDeadline:
    """The deadline of the try running on each thread, for one backend's client (module
    docstring, **Time**). Outside :meth:`running` nothing is bounded beyond the SDK's own
    timeouts."""

    def __init__(self) -> None:
        self._local = threading.local()

    @contextmanager
    def running(self, seconds: float) -> Iterator[None]:
        """While inside, this thread's I/O on the client ends by ``seconds`` from now."""
        self._local.until = time.monotonic() + seconds
        self._local.seconds = seconds
        self._local.received = 0
        try:
            yield
        finally:
            self._local.until = None

    def left(self) -> float | None:
        """Seconds left of this thread's running try (0 or less: none), ``None`` outside one."""
        until: float | None = getattr(self._local, "until", None)
        return None if until is None else until - time.monotonic()

    def passed(self, kind: type[DeadlinePassed] = DeadlinePassed) -> DeadlinePassed:
        """The error (of type ``kind``) of this thread's running try, its deadline passed."""
        return kind(getattr(self._local, "seconds", 0.0), getattr(self._local, "received", 0))

    def count(self, received: int) -> None:
        """``received`` more bytes read during this thread's running try."""
        if getattr(self._local, "until", None) is not None:
            self._local.received += received


def deadline_message(url: str, seconds: float, tries: int, received: int = 0, detail: str = "") -> str:
    """The one line a backend raises when a try's time ran out: the server sent nothing, or
    did not finish (``received`` bytes; ``detail`` e.g. ", 3 streamed chunks")."""
    times = f" ({tries} tries)" if tries > 1 else ""
    if received:
        what = (
            f"did not finish answering within {seconds:g} s ({received:,} bytes received{detail}){times}. "
            "A slow model or a stalled server or gateway (trickling bytes or keep-alive comments): --timeout "
            "bounds a try's whole answer, streamed or not"
        )
    else:
        what = (
            f"did not answer within {seconds:g} s{times}. The model may be overloaded, still loading, or slow "
            "on this prompt"
        )
    return f"{url} {what}: raise the timeout (--timeout SECONDS, Harness(timeout=...)), or check the server."


def deadline_reason(seconds: float, received: int) -> str:
    """The short reason of a ``Retry`` event after such a try."""
    return f"no answer within {seconds:g} s" if not received else f"answer not finished within {seconds:g} s"


_DEADLINE_ERRORS: dict[type[Exception], type[DeadlinePassed]] = {}


def _deadline_error(timeout_error: type[Exception]) -> type[DeadlinePassed]:
    """``timeout_error`` (httpcore's ``ReadTimeout`` ...) that is also a :class:`DeadlinePassed`:
    httpx maps it as its own timeout, and a connection pool that re-raises it ``from None``
    cannot lose what it is (a cause would be lost)."""
    made = _DEADLINE_ERRORS.get(timeout_error)
    if made is None:
        made = type(f"Deadline{timeout_error.__name__}", (timeout_error, DeadlinePassed), {})
        _DEADLINE_ERRORS[timeout_error] = made
    return made


def _timed(
    deadline: TryDeadline, timeout_error: type[Exception], call: Any, *args: Any, timeout: float | None, **kw: Any
) -> Any:
    """``call(*args, timeout=...)`` waiting at most what is left of the running try. When the
    try has nothing left, or the wait that was all it had left times out, the HTTP package's
    ``timeout_error`` is raised as a :class:`DeadlinePassed`."""
    left = deadline.left()
    if left is not None and left <= 0:
        raise deadline.passed(_deadline_error(timeout_error))
    cut = left is not None and (timeout is None or left <= timeout)
    try:
        return call(*args, timeout=left if cut else timeout, **kw)
    except Exception as exc:
        if cut and "Timeout" in type(exc).__name__:  # ConnectTimeout, ReadTimeout, WriteTimeout
            raise deadline.passed(_deadline_error(timeout_error)) from exc
        raise


class _TimedStream:
    """A connection whose every wait is cut to what is left of the running try."""

    def __init__(self, inner: Any, deadline: TryDeadline, package: Any) -> None:
        self._inner = inner
        self._deadline = deadline
        self._package = package

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data: bytes = _timed(self._deadline, self._package.ReadTimeout, self._inner.read, max_bytes, timeout=timeout)
        self._deadline.count(len(data))
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        _timed(self._deadline, self._package.WriteTimeout, self._inner.write, buffer, timeout=timeout)

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
        inner = _timed(
            self._deadline,
            self._package.ConnectTimeout,
            self._inner.start_tls,
            ssl_context,
            server_hostname,
            timeout=timeout,
        )
        return _TimedStream(inner, self._deadline, self._package)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _TimedNetwork:
    """httpcore's network backend, its connections :class:`_TimedStream`; its timeout errors
    are those of its own package (``httpcore`` or ``httpcore2``), which httpx maps."""

    def __init__(self, inner: Any, deadline: TryDeadline) -> None:
        self._inner = inner
        self._deadline = deadline
        self._package = sys.modules[type(inner).__module__.split(".")[0]]

    def _stream(self, inner: Any) -> _TimedStream:
        return _TimedStream(inner, self._deadline, self._package)

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, **kw: Any) -> _TimedStream:
        error = self._package.ConnectTimeout
        return self._stream(_timed(self._deadline, error, self._inner.connect_tcp, host, port, timeout=timeout, **kw))

    def connect_unix_socket(self, path: str, timeout: float | None = None, **kw: Any) -> _TimedStream:
        error = self._package.ConnectTimeout
        return self._stream(_timed(self._deadline, error, self._inner.connect_unix_socket, path, timeout=timeout, **kw))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _Transport:
    """The client's own transport (its proxy, TLS and pool settings) with bounded replies and,
    under its connection pool, connections timed by the backend's :class:`TryDeadline`."""

    def __init__(self, inner: Any, cap: int, stream_base: type[Any], deadline: TryDeadline) -> None:
        # every httpx transport (direct, HTTP or SOCKS proxy) is a connection pool over a network
        # backend: wrapped, the deadline covers new connections and every read on them
        pool = inner._pool
        pool._network_backend = _TimedNetwork(pool._network_backend, deadline)
        self._inner = inner
        self._cap = cap
        # the client checks that a reply's stream is its package's SyncByteStream
        self._stream_type: type[Any] = type("BoundedStream", (_Bounded, stream_base), {})

    def handle_request(self, request: Any) -> Any:
        request.headers["Accept-Encoding"] = ", ".join(_ACCEPTED[:2])
        response = self._inner.handle_request(request)
        shown = _shown(request)
        coding = response.headers.get("content-encoding", "").strip().lower()
        if coding in ("", "identity"):
            coding = ""
        elif coding not in _ACCEPTED:
            response.close()
            raise ReplyTooLarge(
                f"{shown} sent a reply in the {coding!r} encoding, which ctxwright did not ask for "
                "(it accepts gzip or deflate)"
            )
        if coding:
            del response.headers["content-encoding"]
            if "content-length" in response.headers:
                del response.headers["content-length"]
        response.stream = self._stream_type(response.stream, coding, shown, self._cap)
        return response

    def close(self) -> None:
        self._inner.close()

    def __enter__(self) -> _Transport:
        self._inner.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._inner.__exit__(*exc)


def bounded_client(base_client: type[Any], deadline: TryDeadline, *, cap: int = MAX_REPLY_BYTES) -> Any:
    """An instance of the SDK's own default client class ``base_client`` (its timeouts,
    connection limits, proxies from the environment) whose replies are decoded and bounded by
    :class:`_Bounded`, whose I/O during a try ends by ``deadline``, with redirects not followed
    (module docstring)."""
    client = base_client(follow_redirects=False)
    package = next(c for c in base_client.__mro__ if c.__name__ == "Client").__module__.split(".")[0]
    stream_base: type[Any] = sys.modules[package].SyncByteStream
    client._transport = _Transport(client._transport, cap, stream_base, deadline)
    client._mounts = {
        k: (None if t is None else _Transport(t, cap, stream_base, deadline)) for k, t in client._mounts.items()
    }
    return client


def _shown(request: Any) -> str:
    url = request.url
    return redact(f"{url.scheme}://{url.netloc.decode('ascii', 'replace')}")


def redirect_hint(status: int, headers: Any) -> str:
    """The hint of an HTTP 3xx reply: where it pointed (credentials masked), and why it is not
    followed; empty for any other status."""
    if not 300 <= status < 400:
        return ""
    where = " ".join(str(headers.get("location") or "elsewhere").split())[:300]
    return (
        f" The server redirects to {redact(where)}; ctxwright does not follow redirects (they would carry "
        "the API key and the prompt to another host): give the final address as --base-url."
    )
