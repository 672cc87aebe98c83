"""``timeout`` is a deadline per try, not a bound on one socket read: a server (or a gateway in
front of one) that trickles one byte every 0.3 s, or streams SSE keep-alive comments forever,
ends the call within the timeout with one line saying the answer did not finish in time, and
retries follow ``max_retries``. Each backend through the official SDK client it uses
(``backends/bounded_http.py``: every wait cut to what is left of the try); the peer is a raw
socket server on 127.0.0.1 that never stops on its own."""

from __future__ import annotations

import json
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ctxwright.backends.anthropic import AnthropicBackend
from ctxwright.backends.base import Backend
from ctxwright.backends.openai_compat import OpenAIBackend
from ctxwright.backends.openai_responses import ResponsesBackend
from ctxwright.core.messages import Message
from ctxwright.core.progress import Retry
from ctxwright.core.request import ChatRequest
from ctxwright.errors import BackendUnavailable

#: the try's time in these tests, and the bound its failure must come within (CI under load)
TIMEOUT_S = 1.5
BOUND_S = 20.0
#: how often the server sends its byte or its keep-alive comment
DRIP_S = 0.3
#: a handler gives up on its own after this, whatever the client does (the test's bound)
SERVE_AT_MOST_S = 60.0

OK_BODIES: dict[str, dict[str, Any]] = {
    "openai": {
        "id": "c1",
        "object": "chat.completion",
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1},
    },
    "anthropic": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 3, "output_tokens": 1},
    },
    "responses": {
        "id": "resp_1",
        "object": "response",
        "status": "completed",
        "model": "gpt-5.4",
        "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}],
        "usage": {"input_tokens": 3, "output_tokens": 1, "input_tokens_details": {"cached_tokens": 0}},
    },
}


class Slow(socketserver.ThreadingTCPServer):
    """Answers every request by ``mode``: ``drip`` (a JSON reply's headers, then one byte of its
    body every :data:`DRIP_S`), ``ping`` (an SSE stream of ``: ping`` comments, one per
    :data:`DRIP_S`), ``headers`` (the status line itself one byte at a time), ``ok`` (the
    ``ok_body`` at once). Counts requests."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.mode = "ok"
        self.ok_body: dict[str, Any] = {}
        self.requests = 0
        self.stopping = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(socketserver.BaseRequestHandler):
    server: Slow

    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.settimeout(SERVE_AT_MOST_S)
        head = b""
        while b"\r\n\r\n" not in head:
            piece = sock.recv(65536)
            if not piece:
                return
            head += piece
        top, _, body = head.partition(b"\r\n\r\n")
        length = next(
            (int(line.split(b":", 1)[1]) for line in top.split(b"\r\n") if line.lower().startswith(b"content-length:")),
            0,
        )
        while len(body) < length:
            body += sock.recv(65536)
        self.server.requests += 1
        mode = self.server.mode
        if mode == "ok":
            data = json.dumps(self.server.ok_body).encode()
            sock.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                + f"content-length: {len(data)}\r\n\r\n".encode()
                + data
            )
            return
        if mode == "drip":
            sock.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000000\r\n\r\n")
            pieces: Iterator[bytes] = (b" " for _ in iter(int, 1))  # JSON whitespace, forever
        elif mode == "ping":
            sock.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            pieces = (b"8\r\n: ping\n\n\r\n" for _ in iter(int, 1))  # one chunk: an SSE comment
        else:
            pieces = (bytes([b]) for b in b"HTTP/1.1 200 OK\r\n" + b"x-slow: " + b"y" * 1_000_000)
        started = time.monotonic()
        for piece in pieces:
            if self.server.stopping.is_set() or time.monotonic() - started > SERVE_AT_MOST_S:
                return
            try:
                sock.sendall(piece)
            except OSError:  # the client gave up: what the test waits for
                return
            time.sleep(DRIP_S)


@pytest.fixture(scope="module")
def slow() -> Iterator[Slow]:
    server = Slow()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.stopping.set()
        server.shutdown()
        server.server_close()


@pytest.fixture(autouse=True)
def _fresh(slow: Slow) -> None:
    slow.requests = 0
    slow.mode = "ok"


def make(kind: str, slow: Slow, **kw: Any) -> Backend:
    kw.setdefault("max_retries", 0)
    kw.setdefault("timeout", TIMEOUT_S)
    if kind == "openai":
        return OpenAIBackend("m", base_url=slow.url + "/v1", **kw)
    if kind == "anthropic":
        return AnthropicBackend("claude-sonnet-4-5", base_url=slow.url, **kw)
    return ResponsesBackend("gpt-5.4", base_url=slow.url + "/v1", **kw)


def request() -> ChatRequest:
    return ChatRequest(messages=(Message(role="system", content="sys"), Message(role="user", content="hi")))


def timed_failure(call: Callable[[], object]) -> tuple[str, float]:
    started = time.monotonic()
    with pytest.raises(BackendUnavailable) as info:
        call()
    return str(info.value), time.monotonic() - started


KINDS = ("openai", "anthropic", "responses")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", ["drip", "ping"])
def test_a_trickling_server_ends_the_try_at_its_deadline(slow: Slow, kind: str, mode: str) -> None:
    """``drip``: a plain call whose body never ends; ``ping``: a streamed call that gets only
    keep-alive comments. Each read returns within 0.3 s, so only a deadline ends them."""
    slow.mode = mode
    backend = make(kind, slow, stream=mode == "ping")
    try:
        message, took = timed_failure(lambda: backend.complete(request()))
        assert TIMEOUT_S * 0.9 <= took < BOUND_S, took
        assert "\n" not in message
        assert f"did not finish answering within {TIMEOUT_S:g} s" in message, message
        assert "bytes received" in message and "--timeout SECONDS" in message
        assert slow.requests == 1  # max_retries=0: one try
        # the deadline belonged to that try: the same backend's next call is answered
        slow.mode = "ok"
        slow.ok_body = OK_BODIES[kind]
        backend.stream = False
        assert backend.complete(request()).message.content == "ok"
    finally:
        backend.close()


def test_a_status_line_sent_byte_by_byte_ends_at_the_deadline(slow: Slow) -> None:
    """Before the reply's headers are complete too (the SDK reads them inside its request)."""
    slow.mode = "headers"
    backend = make("openai", slow)
    try:
        message, took = timed_failure(lambda: backend.complete(request()))
        assert took < BOUND_S
        assert f"did not finish answering within {TIMEOUT_S:g} s" in message, message
    finally:
        backend.close()


def test_retries_after_a_deadline_follow_max_retries(slow: Slow) -> None:
    slow.mode = "drip"
    events: list[object] = []
    backend = make("anthropic", slow, max_retries=1, timeout=1.0)
    try:
        message, took = timed_failure(lambda: backend.complete(request(), on_event=events.append))
        assert took < BOUND_S
        assert slow.requests == 2
        retries = [e for e in events if isinstance(e, Retry)]
        assert [r.reason for r in retries] == ["answer not finished within 1 s"]
        assert "(2 tries)" in message
    finally:
        backend.close()


def test_a_silent_server_did_not_answer(slow: Slow) -> None:
    """A server that sends nothing at all is told apart from one that did not finish."""
    with socket.socket() as quiet:
        quiet.bind(("127.0.0.1", 0))
        quiet.listen(1)  # accepted by the kernel, never read or answered
        url = f"http://127.0.0.1:{quiet.getsockname()[1]}/v1"
        backend = OpenAIBackend("m", base_url=url, max_retries=0, timeout=1.0)
        try:
            message, took = timed_failure(lambda: backend.complete(request()))
        finally:
            backend.close()
    assert took < BOUND_S
    assert "did not answer within 1 s" in message and "bytes received" not in message, message


@pytest.mark.parametrize("package", ["httpx", "httpx2"])
def test_the_deadline_holds_under_both_http_packages_the_sdks_bring(slow: Slow, package: str) -> None:
    """Older openai and anthropic releases use ``httpx`` (over ``httpcore``), newer ones
    ``httpx2`` (over ``httpcore2``): the deadline raises each package's own ``ReadTimeout``,
    which is also a ``DeadlinePassed`` carrying what had arrived; outside a try, nothing is cut."""
    import importlib

    from ctxwright.backends.bounded_http import TryDeadline, bounded_client
    from ctxwright.backends.openai_compat import _chain
    from ctxwright.errors import DeadlinePassed

    http = importlib.import_module(package)
    deadline = TryDeadline()
    client = bounded_client(http.Client, deadline)
    try:
        slow.mode = "drip"
        started = time.monotonic()
        with pytest.raises(http.ReadTimeout) as info, deadline.running(1.0):
            client.post(slow.url + "/x", content=b"{}", timeout=30.0)
        assert time.monotonic() - started < BOUND_S
        passed = next(e for e in _chain(info.value) if isinstance(e, DeadlinePassed))
        assert passed.seconds == 1.0 and passed.received > 0
        slow.mode = "ok"
        slow.ok_body = {"ok": True}
        assert client.post(slow.url + "/x", content=b"{}", timeout=30.0).json() == {"ok": True}
    finally:
        client.close()
