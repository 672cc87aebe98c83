"""The replay server: answers an agent's model calls from a golden recording, on loopback, and
records every call it answered (the trace).

It speaks the three APIs at any path prefix (``/v1/chat/completions``, ``/responses``,
``/openai/v1/messages`` ...; ``proxy/log.py``'s ``api_of`` tells which), streaming or not
(``answers.py``), and ``GET .../models`` with the golden's models (some clients list models
before their first call). For each call it

1. reads the body within the bounds below, undoes its ``Content-Encoding`` (``proxy/decode.py``,
   bounded however compressed), and refuses what is not a JSON object (400);
2. refuses what the provider would (``validate.py``: an unanswered tool call is a 400);
3. places the request in the golden (``matching.py``) and answers the recorded reply -- or,
   when the conversation left the recording, says so in one line (kept in
   :attr:`ReplayServer.divergences`) and answers as ``on_divergence`` says: ``stop`` a 400 in
   the API's error shape with that line, ``repeat-last`` the conversation's last recorded reply;
4. appends the call to the trace.

**The hold** (the gate's resume parity, ``ci/resume.py``): :meth:`ReplayServer.hold_after`
makes the replay stop answering once N calls were answered. The next request is *held*, not
answered and not placed -- the user pressed Ctrl-C while the model was working on it -- so the
gate can stop the agent with that request in flight, as a terminal would, and compare the
resumed run's first request with it. :meth:`Hold.release` answers it (a 503 with the
connection closed, to a client that is usually gone by then) and lifts the hold; a held
request waits no longer than the hold's timeout either way, so nothing hangs.

**The trace** is JSONL, one line per call answered, in arrival order, flushed line by line::

    {"request": <the body received>, "response": <the answer, in the API's non-stream form even
     when streamed>, "replay": {"api", "conversation", "position", "stream", "diverged",
     "status"}}

``ctxwright audit TRACE`` reads it (the ``replay`` key is extra), and a trace is a golden. The
request is written as the bytes received when they are one line of UTF-8 JSON (re-serialized
otherwise). A call refused before it was placed (a 400 from the rules of step 2) has
``conversation`` and ``position`` null and its ``status``; a golden read from a trace leaves
such calls out.

**Bounds** (hostile or broken clients): the body at most ``max_body`` bytes, decoded too (413,
connection closed); the head and body timeouts and the connection cap of
``proxy/limits.py`` (uvicorn's protocol with a head deadline; 408 for a stalled body); loopback
by default. The trace path must be a regular file or new (a FIFO would stall every call), and
not a symbolic link (written through, it would truncate whatever the link points to; refused
as the store's private files refuse one, ``store/private.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ctxwright.core.words import counted
from ctxwright.errors import CtxwrightError, RequestRefused
from ctxwright.proxy.decode import decode_body
from ctxwright.proxy.limits import ClientLimits
from ctxwright.proxy.log import api_of
from ctxwright.proxy.server import ProxyThread
from ctxwright.replay.answers import answer_body, dumps, error_body, stream_bytes
from ctxwright.replay.golden import Golden
from ctxwright.replay.matching import Matcher, Placement
from ctxwright.replay.validate import refusal
from ctxwright.store.private import open_private

#: the largest request body accepted (decoded), as ``--max-body`` says in MB
DEFAULT_MAX_BODY = 32 * 1024 * 1024
#: the dummy key the agent under test is given (no request is authenticated)
DUMMY_KEY = "ctxwright-replay"
DIVERGENCE_MODES = ("stop", "repeat-last")


@dataclass
class TraceRecord:
    """One call the server answered (a line of the trace)."""

    api: str
    request: dict[str, Any]
    response: dict[str, Any]
    conversation: str | None
    position: int | None
    stream: bool
    diverged: str | None
    status: int = 200

    def meta(self) -> dict[str, Any]:
        return {
            "api": self.api,
            "conversation": self.conversation,
            "position": self.position,
            "stream": self.stream,
            "diverged": self.diverged,
            "status": self.status,
        }

    def to_json(self) -> dict[str, Any]:
        return {"request": self.request, "response": self.response, "replay": self.meta()}


class TraceWriter:
    """The trace file: one line per call, flushed, written from the event loop only."""

    def __init__(self, path: Path) -> None:
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            mode = None
        except OSError as exc:
            raise CtxwrightError(
                f"--trace {path}: {exc.strerror or exc}; give a file in a folder you can write"
            ) from None
        if mode is not None and stat.S_ISLNK(mode):
            raise CtxwrightError(
                f"--trace {path} is a symbolic link: the trace is not written through it (that would overwrite "
                "its target); give the path of a regular file"
            )
        if mode is not None and not stat.S_ISREG(mode):
            raise CtxwrightError(f"--trace {path} is not a regular file; give a file to (over)write, e.g. trace.jsonl")
        try:  # O_NOFOLLOW: a link planted after the check is refused too; 0600: it holds the prompts
            self._f: IO[bytes] = open_private(path)
        except OSError as exc:
            raise CtxwrightError(f"--trace {path}: cannot write it ({exc.strerror or exc})") from None
        self.path = path
        self._lock = threading.Lock()

    def write(self, record: TraceRecord, raw_request: bytes | None) -> None:
        req = raw_request if raw_request is not None and b"\n" not in raw_request else dumps(record.request)
        line = b'{"request":' + req + b',"response":' + dumps(record.response) + b',"replay":' + dumps(record.meta())
        with self._lock:
            if not self._f.closed:
                self._f.write(line + b"}\n")
                self._f.flush()

    def close(self) -> None:
        with self._lock:
            self._f.close()


class Hold:
    """The requests that arrive once ``after`` calls were answered wait here, unanswered, until
    :meth:`release` or ``timeout`` seconds (see the module docstring). ``request`` is the first
    one held, as ``(api, body)``: the request the run was stopped in."""

    def __init__(self, after: int, timeout: float) -> None:
        self.after = after
        self.timeout = timeout
        self.request: tuple[str, dict[str, Any]] | None = None
        #: set when a request is held: the moment to stop the agent
        self.held = threading.Event()
        self._released = threading.Event()
        self._lifted = False

    def due(self, answered: int) -> bool:
        return not self._lifted and answered >= self.after

    def release(self) -> None:
        """Answer every held request (503, connection closed), and the next ones at once the
        same way -- an SDK's retry of the stopped call is refused too, not answered -- until
        :meth:`lift`."""
        self._released.set()

    def lift(self) -> None:
        """Answer every request from now on (the resumed run): what was held is released."""
        self._released.set()
        self._lifted = True

    async def wait(self, api: str, body: dict[str, Any]) -> Response:
        if self.request is None:
            self.request = (api, body)
            self.held.set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        while not self._released.is_set() and loop.time() < deadline:
            await asyncio.sleep(0.05)
        message = "ctxwright replay: the run was stopped while this request was held (resume parity); not answered"
        return _json(503, error_body(api, message), close=True)


@dataclass
class _State:
    golden: Golden
    matcher: Matcher
    on_divergence: str
    max_body: int
    limits: ClientLimits
    trace: TraceWriter | None
    on_call: Callable[[TraceRecord], None] | None
    calls: list[TraceRecord] = field(default_factory=list)
    divergences: list[str] = field(default_factory=list)
    #: the calls answered at most (see :func:`call_cap`); past it every request is refused
    max_calls: int = 1000
    #: when set, the requests past its count are held (:class:`Hold`)
    hold: Hold | None = None


def _json(status: int, body: Any, *, close: bool = False) -> Response:
    headers = {"connection": "close"} if close else None
    return Response(dumps(body), status_code=status, media_type="application/json", headers=headers)


async def _read_body(request: Request, state: _State) -> bytes:
    """The request body, each wait bounded by the body timeout, its size by ``max_body``."""
    cap = state.max_body
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > cap:
        raise RequestRefused(413, _too_large(cap), close=True)
    chunks: list[bytes] = []
    size = 0
    while True:
        try:
            async with asyncio.timeout(state.limits.body_timeout):
                message = await request.receive()
        except TimeoutError:
            raise RequestRefused(
                408, f"the client sent nothing of its request body for {state.limits.body_timeout:g} s", close=True
            ) from None
        if message["type"] == "http.disconnect":
            raise RequestRefused(499, "the client closed the connection mid-request", close=True)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > cap:
            raise RequestRefused(413, _too_large(cap), close=True)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _too_large(cap: int) -> str:
    return f"ctxwright replay: the request body is larger than {cap:,} bytes (--max-body); not answered"


def _parse(raw: bytes, encoding: str | None, cap: int) -> tuple[dict[str, Any], bytes]:
    decoded = decode_body(raw, encoding, cap)
    if decoded.data is None:
        if decoded.over_cap:
            raise RequestRefused(413, _too_large(cap), close=True)
        raise RequestRefused(
            400, f"ctxwright replay: the request body cannot be decoded as Content-Encoding {encoding!r}"
        )
    try:
        value = json.loads(decoded.data.decode("utf-8"))
    except UnicodeDecodeError:
        raise RequestRefused(400, "We could not parse the JSON body of your request: it is not valid UTF-8.") from None
    except (ValueError, RecursionError):
        raise RequestRefused(
            400,
            "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP "
            "library correctly. The OpenAI API expects a JSON payload.)",
        ) from None
    if not isinstance(value, dict):
        raise RequestRefused(400, "the request body must be a JSON object")
    return value, decoded.data


def _models(golden: Golden) -> dict[str, Any]:
    """One model list both SDKs read: OpenAI's ``{"object": "list", "data": [{"id",
    "object": "model", ...}]}`` and Anthropic's ``{"data": [{"type": "model", "id", ...}],
    "has_more", "first_id", "last_id"}``."""
    names = golden.models() or ["ctxwright-replay"]
    data = [
        {
            "id": n,
            "object": "model",
            "type": "model",
            "created": 0,
            "created_at": "1970-01-01T00:00:00Z",
            "display_name": n,
            "owned_by": "ctxwright-replay",
        }
        for n in names
    ]
    return {"object": "list", "data": data, "has_more": False, "first_id": names[0], "last_id": names[-1]}


def build_app(state: _State) -> Starlette:
    """The replay as an ASGI app (see the module docstring)."""

    async def handle(request: Request) -> Response:
        path = request.url.path
        api = api_of(request.method, path)
        if api is None:
            bare = path.rstrip("/")
            if request.method == "GET" and bare.endswith("/models"):
                return _json(200, _models(state.golden))
            if request.method == "GET" and "/models/" in bare:
                name = bare.rsplit("/", 1)[1]
                return _json(200, next((m for m in _models(state.golden)["data"] if m["id"] == name), {"id": name}))
            message = f"ctxwright replay: no model API at {request.method} {path}; it answers POST .../chat/completions, .../responses and .../messages"
            return _json(404, error_body(None, message, etype="not_found_error"))
        try:
            raw = await _read_body(request, state)
            body, data = _parse(raw, request.headers.get("content-encoding"), state.max_body)
        except RequestRefused as r:
            return _json(r.status, error_body(api, r.message), close=r.close)
        hold = state.hold
        if hold is not None and hold.due(len(state.calls)):
            return await hold.wait(api, body)
        return answer(state, api, body, data)

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE"]
    return Starlette(routes=[Route("/{path:path}", handle, methods=methods)])


def call_cap(golden: Golden) -> int:
    """How many calls a replay answers: 20 times the recording's, at least 1,000. An agent
    that loops (on a refused call, say) would otherwise grow :attr:`ReplayServer.calls` and
    the trace without bound until the gate's timeout."""
    return max(1000, 20 * len(golden.calls()))


def answer(state: _State, api: str, body: dict[str, Any], raw: bytes | None) -> Response:
    """Refuse, place and answer one parsed request; record it."""
    stream = body.get("stream") is True
    if len(state.calls) >= state.max_calls:
        recorded = counted(len(state.golden.calls()), "call")
        loops = f"more than {state.max_calls:,} calls against a recording of {recorded}: the agent loops"
        if not state.divergences or state.divergences[-1] != loops:
            state.divergences.append(loops)  # once: what is refused past the cap is not kept
        return _json(400, error_body(api, f"ctxwright replay: {loops}"))
    why = refusal(api, body)
    if why is not None:
        err = error_body(api, why)
        _record(state, TraceRecord(api, body, err, None, None, stream, None, 400), raw)
        return _json(400, err)
    placement: Placement = state.matcher.place(api, body)
    state.matcher.answered(placement)
    conv = placement.conversation
    conv_id = conv.id if conv is not None else None
    if placement.diverged is not None:
        state.divergences.append(placement.diverged)
        last = conv if conv is not None else state.matcher.last_conversation()
        if state.on_divergence == "stop" or last is None or not last.calls:
            err = error_body(api, f"ctxwright replay: {placement.diverged}")
            _record(
                state, TraceRecord(api, body, err, conv_id, placement.position, stream, placement.diverged, 400), raw
            )
            return _json(400, err)
        turn = last.calls[-1].turn
    else:
        assert placement.call is not None
        turn = placement.call.turn
    reply = answer_body(turn, api, model=body.get("model") if isinstance(body.get("model"), str) else None)
    _record(state, TraceRecord(api, body, reply, conv_id, placement.position, stream, placement.diverged), raw)
    if not stream:
        return _json(200, reply)
    options = body.get("stream_options")
    usage = isinstance(options, dict) and options.get("include_usage") is True
    return Response(
        stream_bytes(reply, api, include_usage=usage),
        media_type="text/event-stream; charset=utf-8",
        headers={"cache-control": "no-cache"},
    )


def _record(state: _State, record: TraceRecord, raw: bytes | None) -> None:
    state.calls.append(record)
    if state.trace is not None:
        state.trace.write(record, raw)
    if state.on_call is not None:
        with contextlib.suppress(Exception):  # a printer's failure must not fail the call
            state.on_call(record)


class ReplayServer:
    """The replay server on a background thread: ``with ReplayServer.start(golden) as srv``.

    The socket is bound before :meth:`start` returns, so :attr:`url` is known (port 0 picks a
    free one) and the agent may connect at once. On exit the server stops and the trace is
    closed (each line was flushed as it was written)."""

    def __init__(self, thread: ProxyThread, state: _State) -> None:
        self._thread = thread
        self._state = state

    @classmethod
    def start(
        cls,
        golden: Golden,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        on_divergence: str = "stop",
        trace: Path | None = None,
        limits: ClientLimits | None = None,
        max_body: int = DEFAULT_MAX_BODY,
        on_call: Callable[[TraceRecord], None] | None = None,
        max_calls: int | None = None,
    ) -> ReplayServer:
        if on_divergence not in DIVERGENCE_MODES:
            raise CtxwrightError(f"--on-divergence {on_divergence}: give stop or repeat-last")
        if max_body < 1:
            raise CtxwrightError(f"--max-body {max_body}: give a size above 0")
        limits = limits or ClientLimits()
        writer = TraceWriter(Path(trace)) if trace is not None else None
        state = _State(golden, Matcher(golden), on_divergence, max_body, limits, writer, on_call)
        state.max_calls = call_cap(golden) if max_calls is None else max_calls
        try:
            thread = ProxyThread(build_app(state), host, port, limits)
        except OSError as exc:
            if writer is not None:
                writer.close()
            raise CtxwrightError(
                f"cannot listen on {host}:{port}: {exc.strerror or exc}. Pick another --port (or stop what uses it)."
            ) from None
        try:
            thread.start()
        except RuntimeError:
            if writer is not None:
                writer.close()
            raise CtxwrightError(f"the replay server did not start on {host}:{port}") from None
        return cls(thread, state)

    @property
    def url(self) -> str:
        host = self._thread.host
        return f"http://[{host}]:{self._thread.port}" if ":" in host else f"http://{host}:{self._thread.port}"

    def env(self) -> dict[str, str]:
        """The environment that points the official SDKs (and most agents) at this server."""
        return {
            "OPENAI_BASE_URL": self.url + "/v1",
            "OPENAI_API_KEY": DUMMY_KEY,
            "ANTHROPIC_BASE_URL": self.url,
            "ANTHROPIC_API_KEY": DUMMY_KEY,
        }

    def hold_after(self, calls: int, timeout: float) -> Hold:
        """Hold every request that arrives once ``calls`` calls were answered (:class:`Hold`)."""
        hold = Hold(calls, timeout)
        self._state.hold = hold
        return hold

    @property
    def calls(self) -> list[TraceRecord]:
        return self._state.calls

    @property
    def divergences(self) -> list[str]:
        return self._state.divergences

    @property
    def golden(self) -> Golden:
        return self._state.golden

    def stop(self) -> None:
        if self._state.hold is not None:
            self._state.hold.lift()  # a held request is answered, not left to the shutdown
        self._thread.stop()
        if self._state.trace is not None:
            self._state.trace.close()

    def __enter__(self) -> ReplayServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = ["DEFAULT_MAX_BODY", "DIVERGENCE_MODES", "DUMMY_KEY", "Hold", "ReplayServer", "TraceRecord", "build_app"]
