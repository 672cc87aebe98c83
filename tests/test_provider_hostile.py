"""The anthropic and openai-responses backends against a hostile server (anyone can point
``--base-url`` at one): every bad reply ends as one of ctxwright's errors on one line, memory
stays bounded (compression bombs, endless streams, huge deltas), a stalled stream times out,
a redirect is not followed (it would carry the API key elsewhere), and the key never shows in
an error. The official SDKs are the clients; the peer is a small Starlette app on 127.0.0.1."""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from ctxwright.backends.anthropic import AnthropicBackend
from ctxwright.backends.openai_responses import ResponsesBackend
from ctxwright.core.messages import Message
from ctxwright.core.request import ChatRequest
from ctxwright.errors import BackendError, MalformedResponse, ReplyTooLarge
from ctxwright.proxy.server import ProxyThread

SECRET = "sk-ant-hostile-0123456789abcdef"
MB = 1024 * 1024

Reply = Callable[[Request], Response]


class Hostile:
    """A server whose every reply is ``reply(request)``; ``hits`` counts requests per path."""

    def __init__(self) -> None:
        self.reply: Reply = lambda r: Response("{}", media_type="application/json")
        self.hits: list[str] = []
        self.headers: list[dict[str, str]] = []

        async def handle(request: Request) -> Response:
            self.hits.append(request.url.path)
            self.headers.append(dict(request.headers))
            await request.body()
            return self.reply(request)

        self.app = Starlette(routes=[Route("/{path:path}", handle, methods=["GET", "POST"])])
        self.thread = ProxyThread(self.app)

    @property
    def url(self) -> str:
        return self.thread.url


@pytest.fixture(scope="module")
def hostile() -> Iterator[Hostile]:
    h = Hostile()
    with h.thread:
        yield h


@pytest.fixture(autouse=True)
def _fresh(hostile: Hostile) -> None:
    hostile.hits.clear()
    hostile.headers.clear()


def request() -> ChatRequest:
    return ChatRequest(messages=(Message(role="system", content="sys"), Message(role="user", content="hi")))


def anthropic_backend(h: Hostile, **kw: Any) -> AnthropicBackend:
    kw.setdefault("max_retries", 0)
    return AnthropicBackend("claude-sonnet-4-5", base_url=h.url, api_key=SECRET, **kw)


def responses_backend(h: Hostile, **kw: Any) -> ResponsesBackend:
    kw.setdefault("max_retries", 0)
    return ResponsesBackend("gpt-5.4", base_url=h.url + "/v1", api_key=SECRET, **kw)


BACKENDS = {"anthropic": anthropic_backend, "responses": responses_backend}


def one_line_error(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text, text
    assert SECRET not in text
    assert "Traceback" not in text
    return text


def message_json(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 5, "output_tokens": 1},
    }
    body.update(over)
    return body


def response_json(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "resp_1",
        "object": "response",
        "status": "completed",
        "model": "gpt-5.4",
        "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}],
        "usage": {"input_tokens": 5, "output_tokens": 1, "input_tokens_details": {"cached_tokens": 0}},
    }
    body.update(over)
    return body


def json_reply(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Reply:
    return lambda r: Response(json.dumps(body), status_code=status, media_type="application/json", headers=headers)


def sse(events: Iterator[dict[str, Any]] | list[dict[str, Any]], stall: float = 0.0) -> Reply:
    def reply(r: Request) -> Response:
        async def gen() -> Any:
            import asyncio

            for e in events:
                name = e.get("type") if isinstance(e, dict) else "x"
                yield f"event: {name}\ndata: {json.dumps(e)}\n\n".encode()
            if stall:
                await asyncio.sleep(stall)

        return StreamingResponse(gen(), media_type="text/event-stream")

    return reply


# -- replies that are not what they claim -------------------------------------------------


@pytest.mark.parametrize("kind", BACKENDS)
@pytest.mark.parametrize(
    "body",
    [b"<html>not json</html>", b"\xff\xfe\x00garbage", b"[1, 2, 3]", b'"a string"', b"null", b'{"error": "x"}'],
)
def test_non_json_or_wrong_shape_200(hostile: Hostile, kind: str, body: bytes) -> None:
    hostile.reply = lambda r: Response(body, media_type="application/json")
    backend = BACKENDS[kind](hostile)
    with pytest.raises(BackendError) as info:
        backend.complete(request())
    one_line_error(info.value)


@pytest.mark.parametrize(
    "usage",
    [
        {"input_tokens": -5, "output_tokens": 10**30},
        {"input_tokens": 1.5, "output_tokens": True, "cache_read_input_tokens": "12"},
        {"input_tokens": 10**400 if False else 1e308, "cache_creation_input_tokens": 10**25},
        "not an object",
        None,
        [],
    ],
)
def test_anthropic_usage_of_any_type_reads_as_counts(hostile: Hostile, usage: Any) -> None:
    hostile.reply = json_reply(message_json(usage=usage))
    c = anthropic_backend(hostile).complete(request())
    for n in (c.usage.prompt_tokens, c.usage.completion_tokens, c.usage.cached_tokens):
        assert n is None or (isinstance(n, int) and 0 <= n < 2**63)


def test_anthropic_odd_content_blocks(hostile: Hostile) -> None:
    content = [
        {"type": "server_tool_use_v9", "weird": True},
        "a bare string",
        {"type": "tool_use", "id": "t1", "name": "f", "input": [1, 2]},
        {"type": "tool_use", "id": "t2", "name": "g", "input": "text"},
        {"type": "thinking", "thinking": "hm"},  # no signature
        {"type": "text", "text": 42},
    ]
    hostile.reply = json_reply(message_json(content=content, diagnostics="not an object"))
    c = anthropic_backend(hostile).complete(request())
    assert [t.name for t in c.message.tool_calls] == ["f", "g"]
    # kept as JSON text: the tool layer refuses arguments that are not an object, to the model
    assert [json.loads(t.arguments) for t in c.message.tool_calls] == [[1, 2], "text"]
    assert "diagnostics" not in c.usage.raw or isinstance(c.usage.raw["diagnostics"], dict)


def test_responses_odd_output_items(hostile: Hostile) -> None:
    output = [
        {"type": "computer_call_v9", "x": 1},
        7,
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": {"a": 1}},
        {"type": "reasoning", "summary": "not a list", "encrypted_content": "e" * 1000},
        {"type": "message", "content": "not a list"},
    ]
    usage = {"input_tokens": 3, "output_tokens": 1, "input_tokens_details": {"cached_tokens": 50}}
    hostile.reply = json_reply(response_json(output=output, usage=usage, prompt_cache_diagnostics=[1]))
    c = responses_backend(hostile).complete(request())
    assert isinstance(json.loads(c.message.tool_calls[0].arguments), dict)
    assert c.usage.cached_tokens is not None and c.usage.cached_tokens <= (c.usage.prompt_tokens or 0)
    assert "diagnostics" not in c.usage.raw


# -- size: bombs, huge bodies, endless streams ----------------------------------------------


@pytest.mark.parametrize("kind", BACKENDS)
def test_gzip_bomb_is_refused_bounded(hostile: Hostile, kind: str) -> None:
    pad = b" " * (80 * MB)
    inner = json.dumps(message_json() if kind == "anthropic" else response_json()).encode()
    bomb = gzip.compress(inner[:-1] + b', "pad": "' + b'"' + pad + b"}", compresslevel=9)
    assert len(bomb) < 200_000
    hostile.reply = lambda r: Response(bomb, media_type="application/json", headers={"content-encoding": "gzip"})
    with pytest.raises(ReplyTooLarge) as info:
        BACKENDS[kind](hostile).complete(request())
    assert "larger than" in one_line_error(info.value)


def test_gzip_reply_in_bounds_still_reads(hostile: Hostile) -> None:
    body = gzip.compress(json.dumps(message_json()).encode())
    hostile.reply = lambda r: Response(body, media_type="application/json", headers={"content-encoding": "gzip"})
    assert anthropic_backend(hostile).complete(request()).message.content == "ok"
    assert hostile.headers[-1]["accept-encoding"] == "gzip, deflate"


def test_unasked_encoding_is_refused(hostile: Hostile) -> None:
    hostile.reply = lambda r: Response(b"\x00" * 10, media_type="application/json", headers={"content-encoding": "br"})
    with pytest.raises(ReplyTooLarge) as info:
        anthropic_backend(hostile).complete(request())
    assert "'br'" in one_line_error(info.value)


def test_gzip_bomb_as_error_body_is_refused(hostile: Hostile) -> None:
    bomb = gzip.compress(b'{"error": {"message": "' + b"x" * (80 * MB) + b'"}}')
    hostile.reply = lambda r: Response(
        bomb, status_code=500, media_type="application/json", headers={"content-encoding": "gzip"}
    )
    with pytest.raises(BackendError) as info:
        anthropic_backend(hostile).complete(request())
    one_line_error(info.value)


def _anthropic_stream(deltas: Iterator[str]) -> Iterator[dict[str, Any]]:
    yield {"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 1}}}
    yield {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    for d in deltas:
        yield {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": d}}
    yield {"type": "content_block_stop", "index": 0}
    yield {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}}
    yield {"type": "message_stop"}


def test_single_huge_delta_is_refused(hostile: Hostile) -> None:
    hostile.reply = sse(_anthropic_stream(iter(["x" * (70 * MB)])))
    with pytest.raises(ReplyTooLarge):
        anthropic_backend(hostile, stream=True).complete(request())


def test_many_tiny_deltas_take_linear_time(hostile: Hostile) -> None:
    n = 100_000
    hostile.reply = sse(list(_anthropic_stream(iter(["ab"] * n))))
    started = time.monotonic()
    c = anthropic_backend(hostile, stream=True).complete(request())
    assert c.message.content == "ab" * n
    assert time.monotonic() - started < 15


@pytest.mark.parametrize(
    "event",
    [
        {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "no index"}},
        {"type": "content_block_delta", "index": "zero", "delta": {"type": "text_delta", "text": "x"}},
        [1, 2],
        {"type": "content_block_start", "index": None},
        {"type": "error", "error": "a bare string"},
    ],
)
def test_anthropic_malformed_stream_events(hostile: Hostile, event: Any) -> None:
    events: list[Any] = [{"type": "message_start", "message": {"id": "m"}}, event, {"type": "message_stop"}]
    hostile.reply = sse(events)
    with pytest.raises(BackendError) as info:
        anthropic_backend(hostile, stream=True).complete(request())
    text = one_line_error(info.value)
    assert "broke off" not in text  # a bad event is the server's reply, not the network


def test_anthropic_error_event_mid_stream(hostile: Hostile) -> None:
    events = [
        {"type": "message_start", "message": {"id": "m"}},
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded\nsecond line"}},
    ]
    hostile.reply = sse(events)
    with pytest.raises(BackendError) as info:
        anthropic_backend(hostile, stream=True).complete(request())
    assert "Overloaded second line" in one_line_error(info.value)


def test_anthropic_stream_without_message_stop(hostile: Hostile) -> None:
    hostile.reply = sse([{"type": "message_start", "message": {"id": "m"}}])
    with pytest.raises(BackendError) as info:
        anthropic_backend(hostile, stream=True).complete(request())
    assert "message_stop" in one_line_error(info.value)


@pytest.mark.parametrize("kind", BACKENDS)
def test_stalled_stream_times_out(hostile: Hostile, kind: str) -> None:
    first = (
        {"type": "message_start", "message": {"id": "m"}}
        if kind == "anthropic"
        else {"type": "response.created", "response": {"id": "r"}}
    )
    hostile.reply = sse([first], stall=30)
    started = time.monotonic()
    with pytest.raises(BackendError) as info:
        BACKENDS[kind](hostile, stream=True, timeout=1.0).complete(request())
    assert time.monotonic() - started < 10
    one_line_error(info.value)


@pytest.mark.parametrize(
    "events",
    [
        [{"type": "response.failed", "response": {"status": "failed", "error": {"message": "boom"}}}],
        [{"type": "response.incomplete", "response": "not an object"}],
        [{"type": "response.output_text.delta", "delta": "x"}],  # never completes
        [{"type": "error", "message": "bad\nthing"}],
        [{"type": "response.completed", "response": {"output": "nope"}}],
    ],
)
def test_responses_hostile_stream_events(hostile: Hostile, events: list[dict[str, Any]]) -> None:
    hostile.reply = sse(events)
    with pytest.raises(BackendError) as info:
        responses_backend(hostile, stream=True).complete(request())
    one_line_error(info.value)


# -- redirects, retry-after, secrets --------------------------------------------------------


@pytest.mark.parametrize("kind", BACKENDS)
@pytest.mark.parametrize("status", [302, 307])
def test_redirect_is_not_followed(hostile: Hostile, kind: str, status: int) -> None:
    target = hostile.url + "/elsewhere"

    def reply(r: Request) -> Response:
        if r.url.path == "/elsewhere":
            return json_reply(message_json() if kind == "anthropic" else response_json())(r)
        return Response(status_code=status, headers={"location": target + "?key=" + SECRET})

    hostile.reply = reply
    with pytest.raises(BackendError) as info:
        BACKENDS[kind](hostile).complete(request())
    text = one_line_error(info.value)
    assert f"HTTP {status}" in text and "redirects to" in text and "/elsewhere?key=***" in text
    assert "/elsewhere" not in hostile.hits


@pytest.mark.parametrize("kind", BACKENDS)
@pytest.mark.parametrize("status", [429, 529])
def test_huge_retry_after_is_not_waited(hostile: Hostile, kind: str, status: int) -> None:
    hostile.reply = json_reply(
        {"error": {"type": "rate_limit_error", "message": "slow down"}}, status, {"retry-after": "99999999"}
    )
    started = time.monotonic()
    with pytest.raises(BackendError) as info:
        BACKENDS[kind](hostile, max_retries=2).complete(request())
    assert time.monotonic() - started < 5
    assert len(hostile.hits) == 1
    one_line_error(info.value)


@pytest.mark.parametrize("kind", BACKENDS)
def test_api_key_echoed_by_server_is_not_in_the_error(hostile: Hostile, kind: str) -> None:
    def reply(r: Request) -> Response:
        key = r.headers.get("x-api-key") or r.headers.get("authorization", "")
        return Response(json.dumps({"error": {"type": "authentication_error", "message": f"bad key {key}"}}), 401)

    hostile.reply = reply
    with pytest.raises(BackendError) as info:
        BACKENDS[kind](hostile).complete(request())
    one_line_error(info.value)


def test_base_url_credentials_are_redacted_in_errors(hostile: Hostile) -> None:
    hostile.reply = json_reply({"error": {"message": "nope"}}, 500)
    url = hostile.url.replace("http://", "http://user:" + SECRET + "@")
    backend = AnthropicBackend("claude-sonnet-4-5", base_url=url + "?key=" + SECRET, api_key="k", max_retries=0)
    with pytest.raises(BackendError) as info:
        backend.complete(request())
    one_line_error(info.value)
    assert SECRET not in json.dumps(backend.recipe_record())


@pytest.mark.parametrize("kind", BACKENDS)
@pytest.mark.parametrize("stream", [False, True])
def test_malformed_reply_advice_is_each_apis_own(hostile: Hostile, kind: str, stream: bool) -> None:
    """A reply that is not the API's says what to check; the Anthropic SDK adds /v1/messages
    itself, so its base URL must not end in /v1 -- the OpenAI advice ("ends in /v1") would
    send the user to /v1/v1/messages."""
    if stream:
        hostile.reply = lambda r: Response(b"data: <html>\n\n", media_type="text/event-stream")
    else:
        hostile.reply = lambda r: Response(b"<html>a login page</html>", media_type="application/json")
    with pytest.raises(MalformedResponse) as info:
        BACKENDS[kind](hostile, stream=stream).complete(request())
    text = one_line_error(info.value)
    if kind == "anthropic":
        assert "without /v1" in text and "ends in /v1" not in text, text
    else:
        assert "ends in /v1" in text, text
