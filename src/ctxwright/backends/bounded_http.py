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

The SDKs bring different httpx packages (``anthropic`` ships ``httpx2``, ``openai`` uses
``httpx``) with the same transport interface, so :func:`bounded_client` takes the SDK's client class and
wraps the transports it made.
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import Iterator
from typing import Any

from ctxwright.core.redact import redact
from ctxwright.errors import ReplyTooLarge

__all__ = ["MAX_REPLY_BYTES", "bounded_client", "redirect_hint"]

#: The largest reply body (decoded) a backend accepts: a Messages or Responses reply of the
#: longest output a model gives (128k tokens, with its reasoning and JSON escaping) is a few
#: MB, a stream of it some 20 MB; 64 MB leaves room and still bounds a hostile server.
MAX_REPLY_BYTES = 64 * 1024 * 1024
_PIECE = 64 * 1024
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


class _Transport:
    """The client's own transport (its proxy, TLS and pool settings) with bounded replies."""

    def __init__(self, inner: Any, cap: int, stream_base: type[Any]) -> None:
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


def bounded_client(base_client: type[Any], *, cap: int = MAX_REPLY_BYTES) -> Any:
    """An instance of the SDK's own default client class ``base_client`` (its timeouts,
    connection limits, proxies from the environment) whose replies are decoded and bounded by
    :class:`_Bounded`, with redirects not followed (module docstring)."""
    client = base_client(follow_redirects=False)
    package = next(c for c in base_client.__mro__ if c.__name__ == "Client").__module__.split(".")[0]
    stream_base: type[Any] = sys.modules[package].SyncByteStream
    client._transport = _Transport(client._transport, cap, stream_base)
    client._mounts = {k: (None if t is None else _Transport(t, cap, stream_base)) for k, t in client._mounts.items()}
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
