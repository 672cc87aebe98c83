"""Recording the model calls an agent framework makes, in process: the proxy's recorder behind
the ``openai`` SDK's own HTTP client.

Why here, and why this way: the OpenAI Agents SDK, pydantic-ai and LangChain all call
OpenAI-compatible models through the official ``openai`` SDK, and each lets its user hand that
SDK an ``httpx`` client. A transport in that client sees the exact bytes the framework sent and
the exact bytes that came back -- what the provider caches is those bytes, not the framework's
objects -- so the recording needs no copy of any framework's request-building code, and stays
right when a framework changes how it builds one. Each exchange goes through the same
:class:`~ctxwright.proxy.recorder.Recorder` that ``ctxwright proxy`` uses (decoding, session
placement by the ``X-Ctxwright-Session`` name, the live per-call audit, one row per call), so
``ctxwright audit --proxy-session``, ``report --proxy-session`` and the CI gate read a framework's
session as they read a proxied one, with the same numbers.

What it adds to the proxy's recording:

* the **frozen-prefix warning**. The first call of a session whose system prompt or tool list
  differs from the call before it (a framework's dynamic instructions, a tool list rebuilt in
  another order) is said once per segment, naming it, the byte where it changed and the fix the
  framework allows (:data:`FIXES`, or the adapter's own); the audit keeps counting every later
  one. A framework that sends its changing instructions as a later ``system`` message
  (pydantic-ai) changes the system prompt too, and is said so;
* **rewriting what is sent**, before it is sent and recorded (:func:`rewrite_body`, so the
  recording is what went over the wire): ``null_content`` sends an assistant message's
  ``"content": null`` -- what the frameworks send with tool calls, as OpenAI documents it -- as
  text, for servers that answer the null with HTTP 500 (llama-cpp-python's); ``compactor`` (a
  :class:`~ctxwright.integrations.compaction.WireCompactor`) decides what each request sends,
  the framework's own history staying whole; ``status`` (a
  :class:`~ctxwright.integrations.status.WireStatus`) adds the status bar at the end.

**One line per call, as the proxy prints it** (``proxy/recorder.py: format_line``: session, call,
status, time, cause, cached ÷ reusable tokens, the first divergence, the provider's verdict), on
stderr -- the application's stdout is its own (an agent may print JSON there) -- and, once, where
the session is stored and the command that audits it. On by default, so a user sees a break the
first time it happens rather than after opening the store; ``quiet=True`` turns both off (the
frozen-prefix warning stays: it is the one line that says what to fix).

Recording never fails or stalls the agent's model call: the provider has answered (and been
paid) by the time the exchange is recorded. Each exchange is handed to the recorder's own
thread; the call waits for its record only while the recorder keeps up, and at most
:data:`RECORD_WAIT_S` (a healthy store takes milliseconds, so what the agent reads next is
already stored). A store that is stopped, frozen, locked or full costs the call nothing more:
its exchanges go to a recovery file (``framework-*.jsonl`` in the store's recovery folder) that
is recorded once the store answers again, or imported by the next recorder on the store, and
what could not be recorded is said on stderr and counted (:attr:`FrameworkRecorder.unrecorded`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from ctxwright.errors import StoreUnusable
from ctxwright.integrations.compaction import WireCompactor
from ctxwright.integrations.status import WireStatus
from ctxwright.proxy.recorder import RecordedExchange, Recorder
from ctxwright.proxy.server import DEFAULT_RECORD_CAP, Capture, Exchange
from ctxwright.proxy.store import FRAMEWORK_UPSTREAM, ProxyLog
from ctxwright.store.database import normalize_target
from ctxwright.store.sessions import Store

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

#: the longest a model call waits for its exchange to be recorded (see the module docstring)
RECORD_WAIT_S = 2.0
#: the audit's causes that mean the frozen prefix changed, and the segment each names
PREFIX_CAUSES = {"system_changed": "system prompt", "tools_changed": "tool list"}
#: what a framework user can do about each, whatever the framework
FIXES = {
    "system_changed": (
        "keep the instructions fixed for the session and send what changes (time, state, a TODO list) as "
        "a message appended after the history"
    ),
    "tools_changed": "register every tool once, in one fixed order, for the whole session",
}


@dataclass(frozen=True)
class PrefixWarning:
    """The first call of a session whose frozen prefix changed in one segment."""

    session_id: str
    call_index: int
    cause: str
    segment: str
    byte_offset: int | None
    fix: str

    def __str__(self) -> str:
        at = f" at byte {self.byte_offset:,}" if self.byte_offset is not None else ""
        return (
            f"ctxwright: call #{self.call_index} of session {self.session_id} changed the {self.segment}{at}, "
            f"so the provider's cache of everything after it was lost; {self.fix}"
        )


def rewrite_body(
    body: bytes,
    *,
    null_content: str | None = None,
    compactor: WireCompactor | None = None,
    status: WireStatus | None = None,
) -> bytes | None:
    """The chat-completions body to send instead of ``body``, or ``None`` to send it as it is.
    Serialised as the ``openai`` SDK does (compact, UTF-8); a body that is not a chat request
    (or not JSON) is never touched."""
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError):
        return None
    messages = obj.get("messages") if isinstance(obj, dict) else None
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        return None
    out: list[dict[str, Any]] = messages
    if null_content is not None:
        out = [
            {**m, "content": null_content} if m.get("role") == "assistant" and m.get("content", 0) is None else m
            for m in out
        ]
    if compactor is not None:
        out = compactor(out)
    if status is not None:
        out = status(out)
    if out == messages:
        return None
    obj["messages"] = out
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def fill_null_content(body: bytes, text: str) -> bytes | None:
    """``body`` with each assistant message's ``"content": null`` sent as ``text``, or ``None``."""
    return rewrite_body(body, null_content=text)


def _rewritten(request: httpx.Request, body: bytes, owner: FrameworkRecorder) -> httpx.Request:
    if owner.null_content is None and owner.compactor is None and owner.status is None:
        return request
    if request.method != "POST" or not request.url.path.endswith("/chat/completions"):
        return request
    new = rewrite_body(body, null_content=owner.null_content, compactor=owner.compactor, status=owner.status)
    if new is None:
        return request
    headers = [(k, v) for k, v in request.headers.raw if k.lower() != b"content-length"]
    return httpx.Request(request.method, request.url, headers=headers, content=new, extensions=request.extensions)


class FrameworkRecorder:
    """Records a framework agent's model calls as one ctxwright session (the proxy's tables).

    ``db``: the store (a path or ``postgresql://`` URL; ``Store`` objects too). ``name``: what
    groups the calls into one session (a new random one by default; the same name again adds
    to the same session). ``on_warning`` receives each :class:`PrefixWarning` (default: printed
    to stderr once per segment); ``fixes`` the adapter's own fix per cause (default
    :data:`FIXES`). ``null_content``, ``compactor`` and ``status`` rewrite what is sent (see the
    module docstring). Use :meth:`http_client` / :meth:`async_http_client` as the ``openai`` SDK's
    ``http_client``; :meth:`close` when done. ``quiet``: no line per call and no line saying
    where the session is stored (default: both, on stderr; ``printer`` receives them instead).
    """

    def __init__(
        self,
        db: str | Path | Store,
        *,
        name: str | None = None,
        framework: str = "framework",
        on_warning: Callable[[PrefixWarning], None] | None = None,
        record_cap: int = DEFAULT_RECORD_CAP,
        fixes: Mapping[str, str] | None = None,
        null_content: str | None = None,
        compactor: WireCompactor | None = None,
        status: WireStatus | None = None,
        quiet: bool = False,
        printer: Callable[[str], None] | None = None,
    ) -> None:
        self.owned = not isinstance(db, Store)
        self.store = db if isinstance(db, Store) else Store(normalize_target(db))
        self.name = name or f"{framework}-{uuid.uuid4().hex[:10]}"
        self.framework = framework
        self.record_cap = record_cap
        self.fixes = {**FIXES, **(fixes or {})}
        self.null_content = null_content
        self.compactor = compactor
        self.status = status
        self.warnings: list[PrefixWarning] = []
        self._sid: str | None = None
        self._closed = False
        self._said: set[str] = set()
        self._on_warning = on_warning
        self.quiet = quiet
        self._print = printer or _stderr
        self._told_where = False
        self.recorder = Recorder(
            self.store,
            FRAMEWORK_UPSTREAM,  # what tells a framework's session from a proxy's (proxy/store.py)
            printer=None if quiet else self._print,
            observer=self._observe,
            warn=lambda line: print(line, file=sys.stderr, flush=True),
            name="ctxwright recorder",
            spool_prefix="framework",
        )

    # -- the clients the framework's openai SDK uses ---------------------------------------------
    def http_client(self, **kwargs: Any) -> httpx.Client:
        """An ``httpx.Client`` that records every exchange (for a sync ``openai.OpenAI``)."""
        return httpx.Client(transport=RecordingTransport(self, httpx.HTTPTransport()), **kwargs)

    def async_http_client(self, **kwargs: Any) -> httpx.AsyncClient:
        """An ``httpx.AsyncClient`` that records every exchange (for ``openai.AsyncOpenAI``)."""
        return httpx.AsyncClient(transport=AsyncRecordingTransport(self, httpx.AsyncHTTPTransport()), **kwargs)

    # -- what was recorded -------------------------------------------------------------------------
    @property
    def session_id(self) -> str | None:
        """The recorded session's id (``None`` before the first model call is recorded);
        still known after :meth:`close`."""
        if self._sid is None and not self._closed:
            try:
                self._sid = ProxyLog(self.store).find_session("header", self.name)
            except StoreUnusable:
                return None  # the store is away: known once a call of the session is recorded
        return self._sid

    @property
    def unrecorded(self) -> int:
        """Model calls of this recorder not in the store: kept in its recovery file, or lost."""
        return self.recorder.unrecorded

    def record(self, ex: Exchange) -> None:
        """Hand one exchange to the recorder's thread (which decodes, places, audits and writes
        the exchanges one at a time, in call order) and wait for its record while the recorder
        keeps up, at most :data:`RECORD_WAIT_S`. Never raises for the store's sake."""
        self.recorder.wait_room()
        waits = self.recorder.caught_up
        self.recorder.submit(ex)
        if waits:
            with contextlib.suppress(TimeoutError):  # recorded (or kept) later, on the recorder's thread
                ex.written.result(RECORD_WAIT_S)

    async def record_async(self, ex: Exchange) -> None:
        """:meth:`record` for a caller on an event loop: the loop is never blocked."""
        await self.recorder.admit()
        waits = self.recorder.caught_up
        self.recorder.submit(ex)
        if waits:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(ex.written)), RECORD_WAIT_S)

    def where(self, session_id: str) -> str:
        """The line saying where a session is stored and the command that audits it."""
        return (
            f"ctxwright: {self.framework} session {session_id} is recorded in {self.store.location}; "
            f"audit it with: ctxwright audit {session_id} --db {self.store.location}"
        )

    def _observe(self, rec: RecordedExchange) -> None:
        self._sid = rec.session_id
        if not self.quiet and not self._told_where:
            self._told_where = True  # once, after the session's first line (its id is known from then on)
            self._print(self.where(rec.session_id))
        cause = rec.audit.get("cause")
        if cause == "history_edited" and rec.audit.get("role") == "system":
            cause = "system_changed"  # instructions sent as a later system message, re-rendered
        if cause not in PREFIX_CAUSES or cause in self._said:
            return
        self._said.add(cause)
        d = rec.audit.get("first_divergence")
        offset = d.get("byte_offset") if isinstance(d, dict) else None
        warning = PrefixWarning(rec.session_id, rec.call_index, cause, PREFIX_CAUSES[cause], offset, self.fixes[cause])
        self.warnings.append(warning)
        if self._on_warning is not None:
            self._on_warning(warning)
        else:
            import sys

            print(warning, file=sys.stderr, flush=True)

    def close(self) -> None:
        """Record what is queued (a store that is away: kept in the recovery file), then stop;
        what is not in the store is said on stderr."""
        if self._closed:
            return
        self.recorder.close()
        _ = self.session_id  # known after close
        self._closed = True
        if self.recorder.unrecorded:
            print(f"ctxwright recorder: {self.recorder.summary()}", file=sys.stderr, flush=True)
        if self.owned:
            self.store.close()

    def __enter__(self) -> FrameworkRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one exchange ------------------------------------------------------------------------------
    def _start(self, request: httpx.Request) -> Exchange:
        body = request.content  # the SDK sends a complete body (JSON), never a stream
        ex = Exchange(
            method=request.method,
            path=request.url.raw_path.decode("latin-1"),
            started_at=time.time(),
            t0=time.perf_counter(),
            request=Capture(self.record_cap),
            request_content_type=request.headers.get("content-type"),
            request_encoding=request.headers.get("content-encoding"),
            session_header=self.name,
            response=Capture(self.record_cap),
        )
        ex.request.add(body)
        return ex

    def _answered(self, ex: Exchange, response: httpx.Response) -> None:
        ex.status = response.status_code
        ex.ttfb_ms = (time.perf_counter() - ex.t0) * 1000
        ex.response_content_type = response.headers.get("content-type")
        ex.response_encoding = response.headers.get("content-encoding")

    def _failed(self, ex: Exchange, exc: BaseException) -> None:
        ex.outcome, ex.error = "upstream_broken", f"{type(exc).__name__}: {exc}"
        self._end(ex)

    def _end(self, ex: Exchange) -> None:
        self._stamp_end(ex)
        self.record(ex)

    async def _end_async(self, ex: Exchange) -> None:
        self._stamp_end(ex)
        await self.record_async(ex)

    @staticmethod
    def _stamp_end(ex: Exchange) -> None:
        ex.total_ms = (time.perf_counter() - ex.t0) * 1000
        ex.ended_at = ex.started_at + ex.total_ms / 1000


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class _Captured(httpx.SyncByteStream):
    """The answer's bytes as the SDK reads them (a stream stays a stream); recorded when closed."""

    def __init__(self, inner: httpx.SyncByteStream, ex: Exchange, owner: FrameworkRecorder) -> None:
        self.inner, self.ex, self.owner, self.done = inner, ex, owner, False

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.inner:
            self.ex.response.add(chunk)
            yield chunk

    def close(self) -> None:
        try:
            self.inner.close()
        finally:
            if not self.done:
                self.done = True
                self.owner._end(self.ex)


class _AsyncCaptured(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, ex: Exchange, owner: FrameworkRecorder) -> None:
        self.inner, self.ex, self.owner, self.done = inner, ex, owner, False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.inner:
            self.ex.response.add(chunk)
            yield chunk

    async def aclose(self) -> None:
        try:
            await self.inner.aclose()
        finally:
            if not self.done:
                self.done = True
                await self.owner._end_async(self.ex)


class RecordingTransport(httpx.BaseTransport):
    """Passes each request to ``inner`` unchanged and records the exchange when its answer is closed."""

    def __init__(self, owner: FrameworkRecorder, inner: httpx.BaseTransport) -> None:
        self.owner, self.inner = owner, inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request = _rewritten(request, request.read(), self.owner)
        ex = self.owner._start(request)
        try:
            response = self.inner.handle_request(request)
        except BaseException as exc:
            self.owner._failed(ex, exc)
            raise
        self.owner._answered(ex, response)
        assert isinstance(response.stream, httpx.SyncByteStream)
        response.stream = _Captured(response.stream, ex, self.owner)
        return response

    def close(self) -> None:
        self.inner.close()


class AsyncRecordingTransport(httpx.AsyncBaseTransport):
    """:class:`RecordingTransport` for ``httpx.AsyncClient``."""

    def __init__(self, owner: FrameworkRecorder, inner: httpx.AsyncBaseTransport) -> None:
        self.owner, self.inner = owner, inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        request = _rewritten(request, await request.aread(), self.owner)
        ex = self.owner._start(request)
        try:
            response = await self.inner.handle_async_request(request)
        except BaseException as exc:
            ex.outcome, ex.error = "upstream_broken", f"{type(exc).__name__}: {exc}"
            await self.owner._end_async(ex)
            raise
        self.owner._answered(ex, response)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _AsyncCaptured(response.stream, ex, self.owner)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


__all__ = [
    "FIXES",
    "PREFIX_CAUSES",
    "AsyncRecordingTransport",
    "FrameworkRecorder",
    "PrefixWarning",
    "RecordingTransport",
    "fill_null_content",
    "rewrite_body",
]
