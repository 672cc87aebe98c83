"""OpenAIBackend against a real HTTP server of ours, through the real openai SDK.

Each test scripts the server's replies, then checks what the backend returned or raised
and what bytes the server received.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest

from ctxwright.backends.base import Backend
from ctxwright.backends.openai_compat import OpenAIBackend
from ctxwright.core.messages import ToolCall, assistant, system, tool_result, user
from ctxwright.core.request import ChatRequest, ToolSpec
from ctxwright.errors import BackendError, BackendUnavailable, ContextWindowExceeded, MalformedResponse
from fakeserver import FakeOpenAIServer

S = FakeOpenAIServer


@pytest.fixture
def srv() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server


_open: list[OpenAIBackend] = []


@pytest.fixture(autouse=True)
def _close_backends() -> Iterator[None]:
    """Close every backend a test made, so no HTTP connection outlives its test."""
    yield
    while _open:
        _open.pop().close()


def make_backend(srv: FakeOpenAIServer, max_retries: int = 0, timeout: float = 10.0) -> OpenAIBackend:
    backend = OpenAIBackend("test-model", base_url=srv.url, max_retries=max_retries, timeout=timeout)
    _open.append(backend)
    return backend


def simple_request(**kwargs: object) -> ChatRequest:
    return ChatRequest(messages=(system("You are terse."), user("Say hi.")), **kwargs)  # type: ignore[arg-type]


def test_is_a_backend(srv: FakeOpenAIServer) -> None:
    backend = make_backend(srv)
    assert isinstance(backend, Backend)
    assert backend.name == "openai" and backend.model == "test-model"
    assert backend.count_tokens("anything") is None
    backend.close()


def test_plain_text_reply(srv: FakeOpenAIServer) -> None:
    srv.enqueue(S.reply_text("Hi.", usage=S.usage_openai(21, 2), model="served-name"))
    backend = make_backend(srv)
    out = backend.complete(simple_request())
    assert out.message.role == "assistant"
    assert out.message.content == "Hi."
    assert out.message.tool_calls == ()
    assert out.message.reasoning_content is None
    assert out.finish_reason == "stop"
    assert out.model == "served-name"
    assert out.usage.prompt_tokens == 21 and out.usage.completion_tokens == 2
    assert srv.requests[0]["model"] == "test-model"
    backend.close()


def test_two_parallel_tool_calls_keep_arguments_byte_exact(srv: FakeOpenAIServer) -> None:
    # Odd spacing, unicode escapes, key order and outright invalid JSON must all survive.
    args_a = '{ "path" : "src/\\u00e9t\u00e9.py",  "b":1, "a":2 }'
    args_b = '{"query": "x", broken'
    srv.enqueue(S.reply_tool_calls([("call_a", "read_file", args_a), ("call_b", "search", args_b)]))
    out = make_backend(srv).complete(simple_request())
    assert out.finish_reason == "tool_calls"
    assert out.message.content is None
    assert out.message.tool_calls == (
        ToolCall(id="call_a", name="read_file", arguments=args_a),
        ToolCall(id="call_b", name="search", arguments=args_b),
    )


@pytest.mark.parametrize(
    "usage, timings, expected",
    [
        (S.usage_openai(1000, 10, cached=896), None, 896),
        (S.usage_openai(1000, 10, cached=0), None, 0),
        (S.usage_deepseek(1000, 10, hit=640), None, 640),
        (
            S.usage_openai(1000, 10),
            S.timings_llamacpp(cache_n=700, prompt_n=300, prompt_ms=45.5, predicted_n=10, predicted_ms=120.25),
            700,
        ),
        ({"prompt_tokens": 1000, "completion_tokens": 10, "cache_read_input_tokens": 512}, None, 512),
    ],
    ids=["openai", "openai-zero", "deepseek", "llamacpp", "anthropic-proxy"],
)
def test_cached_tokens_from_each_provider_field(
    srv: FakeOpenAIServer, usage: dict, timings: dict | None, expected: int
) -> None:
    srv.enqueue(S.reply_text("ok", usage=usage, timings=timings))
    u = make_backend(srv).complete(simple_request()).usage
    assert u.cached_tokens == expected
    assert u.prompt_tokens == 1000 and u.completion_tokens == 10
    assert u.raw["usage"] == usage
    assert isinstance(u.raw["latency_ms"], float) and u.raw["latency_ms"] > 0
    if timings is not None:
        assert u.raw["timings"] == timings
        assert u.prefill_ms == 45.5 and u.decode_ms == 120.25
    else:
        assert "timings" not in u.raw
        assert u.prefill_ms is None and u.decode_ms is None


@pytest.mark.parametrize(
    "usage",
    [S.usage_openai(50, 5), {**S.usage_openai(50, 5), "prompt_tokens_details": None}, None],
    ids=["no-details", "null-details", "no-usage"],
)
def test_cached_tokens_unknown_is_none_not_zero(srv: FakeOpenAIServer, usage: dict | None) -> None:
    srv.enqueue(S.reply_text("ok", usage=usage))
    u = make_backend(srv).complete(simple_request()).usage
    assert u.cached_tokens is None
    if usage is None:
        assert u.prompt_tokens is None and u.completion_tokens is None


def test_reasoning_content_is_read(srv: FakeOpenAIServer) -> None:
    srv.enqueue(S.reply_text("42", reasoning_content="6 times 7 is 42."))
    msg = make_backend(srv).complete(simple_request()).message
    assert msg.content == "42"
    assert msg.reasoning_content == "6 times 7 is 42."


def test_rate_limit_then_success_is_retried_by_the_sdk(srv: FakeOpenAIServer) -> None:
    srv.enqueue(S.rate_limited(retry_after_ms=1), S.reply_text("finally"))
    started = time.perf_counter()
    out = make_backend(srv, max_retries=2).complete(simple_request())
    assert out.message.content == "finally"
    assert len(srv.requests) == 2
    assert srv.requests[0] == srv.requests[1]
    assert time.perf_counter() - started < 5.0


def test_persistent_500_becomes_backend_error_after_retries(srv: FakeOpenAIServer) -> None:
    failure = S.error(
        500,
        {
            "error": {
                "message": "The server had an error while processing your request.",
                "type": "server_error",
                "code": None,
            }
        },
        headers={"retry-after-ms": "1"},
    )
    srv.enqueue(failure, failure, failure)
    with pytest.raises(BackendError) as info:
        make_backend(srv, max_retries=2).complete(simple_request())
    assert type(info.value) is BackendError
    assert "500" in str(info.value)
    assert "The server had an error while processing your request." in str(info.value)
    assert srv.url in str(info.value)
    assert len(srv.requests) == 3 and srv.pending == 0


def test_empty_script_gives_a_clear_500_without_retrying(srv: FakeOpenAIServer) -> None:
    with pytest.raises(BackendError, match="no scripted behaviour left"):
        make_backend(srv, max_retries=3).complete(simple_request())
    assert len(srv.requests) == 1


@pytest.mark.parametrize(
    "body",
    [
        b"{not json at all",
        b"<html>502 Bad Gateway</html>",
        b'{"id": "x", "object": "chat.completion"}',
        b'{"choices": []}',
        b"[1, 2]",
    ],
    ids=["broken-json", "html", "no-choices", "empty-choices", "not-an-object"],
)
def test_malformed_200_body(srv: FakeOpenAIServer, body: bytes) -> None:
    srv.enqueue(S.malformed(body))
    with pytest.raises(MalformedResponse) as info:
        make_backend(srv).complete(simple_request())
    assert "200" in str(info.value)


@pytest.mark.parametrize("style", ["openai", "deepseek", "vllm", "llamacpp"])
def test_context_length_errors_from_every_provider(srv: FakeOpenAIServer, style: str) -> None:
    srv.enqueue(S.context_length_error(style, n_ctx=4096, n_prompt=5000))
    with pytest.raises(ContextWindowExceeded) as info:
        make_backend(srv, max_retries=2).complete(simple_request())
    assert "4096" in str(info.value)  # the server's own words are kept
    assert len(srv.requests) == 1  # a 400 is not retried


def test_anthropic_style_prompt_too_long_via_proxy(srv: FakeOpenAIServer) -> None:
    srv.enqueue(
        S.error(
            400,
            {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": "prompt is too long: 210000 tokens > 200000 maximum",
                },
            },
        )
    )
    with pytest.raises(ContextWindowExceeded):
        make_backend(srv).complete(simple_request())


def test_rate_limit_mentioning_tokens_is_not_a_context_error(srv: FakeOpenAIServer) -> None:
    srv.enqueue(
        S.error(
            429,
            {
                "error": {
                    "message": "Too many tokens per minute, slow down.",
                    "type": "tokens",
                    "code": "rate_limit_exceeded",
                }
            },
        )
    )
    with pytest.raises(BackendError) as info:
        make_backend(srv, max_retries=0).complete(simple_request())
    assert not isinstance(info.value, ContextWindowExceeded)
    assert "429" in str(info.value) and "Too many tokens per minute" in str(info.value)


def test_other_400_is_a_plain_backend_error(srv: FakeOpenAIServer) -> None:
    srv.enqueue(
        S.error(
            400,
            {
                "error": {
                    "message": "Invalid value for 'tool_choice'.",
                    "type": "invalid_request_error",
                    "code": "invalid_value",
                }
            },
        )
    )
    with pytest.raises(BackendError) as info:
        make_backend(srv).complete(simple_request())
    assert type(info.value) is BackendError
    assert "400" in str(info.value) and "Invalid value for 'tool_choice'." in str(info.value)


def test_unreachable_url_is_backend_unavailable() -> None:
    with socket.socket() as s:  # reserve a free port, then close it so nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    backend = OpenAIBackend("test-model", base_url=url, max_retries=0, timeout=5.0)
    with pytest.raises(BackendUnavailable) as info:
        backend.complete(simple_request())
    assert url in str(info.value)
    assert "/v1" in str(info.value) and "running" in str(info.value)


def test_timeout_is_backend_unavailable(srv: FakeOpenAIServer) -> None:
    srv.enqueue(S.reply_text("too late", delay_s=1.0))
    with pytest.raises(BackendUnavailable, match="did not answer within"):
        make_backend(srv, max_retries=0, timeout=0.2).complete(simple_request())


def test_request_body_is_exactly_what_to_wire_produced(srv: FakeOpenAIServer) -> None:
    call = ToolCall(id="call_1", name="read_file", arguments='{"path":  "a.py"}')
    tools = (
        ToolSpec.create(
            "read_file",
            "Read a file.",
            {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        ),
        ToolSpec.create("search", "Search the repo."),
    )
    request = ChatRequest(
        messages=(
            system("sys"),
            user("read a.py"),
            assistant(None, [call]),
            tool_result("call_1", "print('hé')"),
            user("and now?"),
        ),
        tools=tools,
        tool_choice="required",
        max_tokens=256,
        temperature=0.0,
        extra={"seed": 7, "chat_template_kwargs": {"enable_thinking": False}},
    )
    srv.enqueue(S.reply_text("done"))
    make_backend(srv).complete(request)

    sent = srv.requests[0]
    wire = request.to_wire()
    assert sent["messages"] == wire["messages"]
    assert sent["tools"] == wire["tools"]
    assert sent["tool_choice"] == "required"
    assert sent["max_tokens"] == 256 and sent["temperature"] == 0.0
    assert sent["seed"] == 7 and sent["chat_template_kwargs"] == {"enable_thinking": False}
    assert sent["model"] == "test-model"
    # The raw tool-call arguments string went out untouched, not re-serialized.
    assert sent["messages"][2]["tool_calls"][0]["function"]["arguments"] == '{"path":  "a.py"}'
    assert set(sent) == {
        "model",
        "messages",
        "tools",
        "tool_choice",
        "max_tokens",
        "temperature",
        "seed",
        "chat_template_kwargs",
    }


def test_no_tools_means_no_tools_or_tool_choice_fields(srv: FakeOpenAIServer) -> None:
    srv.enqueue(S.reply_text("ok"))
    make_backend(srv).complete(simple_request())
    assert set(srv.requests[0]) == {"model", "messages"}


def test_api_key_placeholder_and_env(srv: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MY_KEY", raising=False)
    srv.enqueue(S.reply_text("a"), S.reply_text("b"))
    OpenAIBackend("m", base_url=srv.url, api_key_env="MY_KEY", max_retries=0).complete(simple_request())
    monkeypatch.setenv("MY_KEY", "sk-from-env")
    OpenAIBackend("m", base_url=srv.url, api_key_env="MY_KEY", max_retries=0).complete(simple_request())
    auth = [r.headers.get("authorization") for r in srv.recorded]
    assert auth == ["Bearer not-needed", "Bearer sk-from-env"]


def test_fake_server_records_raw_json(srv: FakeOpenAIServer) -> None:
    """The recorded bytes parse to the recorded JSON: a sanity check benchmarks rely on."""
    srv.enqueue(S.reply_text("ok"))
    make_backend(srv).complete(simple_request())
    rec = srv.recorded[0]
    assert rec.method == "POST" and rec.path == "/v1/chat/completions"
    assert json.loads(rec.raw) == rec.json
