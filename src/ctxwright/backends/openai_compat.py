"""Backend for any server that speaks the OpenAI chat-completions wire format.

One class covers OpenAI, DeepSeek, vLLM, Ollama, llama.cpp's server and proxies, because
they share the request shape. They differ in how they report prompt-cache hits and how
they word a context-window error, so this module reads the *raw* JSON reply (the SDK's
typed model drops fields it does not know) and maps every provider's dialect onto our
:class:`Usage` and our exception types.

Retries are ours, not the SDK's (it runs with ``max_retries=0``): the SDK retries in
silence, so a server that never answers stalled a run for ``timeout`` × 4 with nothing on
screen. Here every retry is announced before its wait, as a ``Retry`` event
(``core/progress.py``) through the ``on_event`` callback that :meth:`OpenAIBackend.complete`
takes (the agent passes the Harness's). What is retried follows the SDK's rules (timeouts, connection
failures, HTTP 408/409/429/5xx, a server's ``x-should-retry``; a ``retry-after`` of up to
60 s is honoured, else exponential backoff from 0.5 s to 8 s: ``backends/retry.py``, shared with the
Anthropic backend).

Failures are told apart, because each has its own fix: nothing listens (refused, the host
name does not resolve), the server closed the connection without answering, the reply was
cut off mid-transfer (:class:`~ctxwright.errors.ResponseTruncated`), no answer within the
timeout. Every message passes through :func:`~ctxwright.core.redact.redact`: a base URL
may carry credentials (``user:pass@``, ``?api-key=``), and these messages are printed and
stored with the failed call.

Streaming (``stream=True``) sends ``"stream": true`` and ``stream_options.include_usage``
and hands each text delta to ``on_event`` as a ``Token`` event; the reply is
assembled into exactly the message and usage a non-streamed call returns. The stream flags
are transport, not prompt: they are not part of the recorded request (``ChatRequest``).
A server that cannot stream what was asked falls back cleanly to non-streamed calls for
the rest of the session, announced as a ``StreamFallback`` event:
llama-cpp-python's server answers a streamed request with tools and ``tool_choice``
``"auto"`` with HTTP 200 and an empty body, and its streams carry no usage.

Routing hints (``cache/routing.py``): with ``routing_header`` the session's stable routing key
goes in that request header (vLLM's production-stack router, SGLang's router, NVIDIA Dynamo),
with ``prompt_cache_key`` in the body's ``prompt_cache_key`` (OpenAI; ``"auto"``: the derived
key). Like the stream flags, the key is transport: not part of the recorded request; it is
recorded in each call's ``Usage.raw["cache"]["routing_key"]``.

The wire form of a tool-call turn without text (``null_content``, ``core/render.py``): by
default ``"omit"`` (no ``content`` key) on OpenAI's own API, which documents the key as
optional on a turn with tool calls, and ``"empty"`` (``"content": ""``) anywhere else, because
llama-cpp-python's server answers both a missing key and ``null`` with HTTP 500. The SDK's
request transform checks every key of every message on each call, so the key left out saves
client CPU on every call of a long session.

The SDK does not walk the messages at all here: they go in ``extra_body`` with the other
fields, and the ``messages`` argument is an empty list. The SDK merges ``extra_body`` over its
own body (``_merge_mappings``: the second mapping wins, in the first one's key order), so the
bytes sent are the same; given as the argument, the messages would pass the SDK's request
transform, which checks every key of every message against each message type it knows on
each call and returns the same plain JSON, at a CPU cost that grows with the session.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import openai

from ctxwright.backends.base import Backend
from ctxwright.backends.bounded_http import (
    TryDeadline,
    bounded_client,
    check_timeout,
    deadline_message,
    deadline_reason,
    redirect_hint,
)
from ctxwright.backends.retry import backoff, should_retry
from ctxwright.cache.routing import header_name, prefix_sha256, routing_key
from ctxwright.core.messages import Message, Usage, canonical_json
from ctxwright.core.progress import EventSink, Retry, StreamFallback, Token, ignore
from ctxwright.core.redact import redact, scrub_secret
from ctxwright.core.render import NULL_CONTENT_FORMS, NullContent
from ctxwright.core.request import ChatRequest, Completion
from ctxwright.core.usage import as_object, read_usage
from ctxwright.errors import (
    BackendError,
    BackendUnavailable,
    ContextWindowExceeded,
    DeadlinePassed,
    MalformedResponse,
    ReplyTooLarge,
    ResponseTruncated,
)

_PLACEHOLDER_KEY = "not-needed"

#: Seconds one try may take, the whole answer included (streamed or not), before it is given up.
DEFAULT_TIMEOUT_S = 120.0
#: Retries after the first try. Each is announced (``Retry`` events), so a dead
#: server costs at most (1 + 2) × timeout, on screen, instead of 4 × 120 s in silence.
DEFAULT_MAX_RETRIES = 2

_CLOSED_WITHOUT_ANSWER = "the server closed the connection without answering"

# Lower-cased fragments that providers put in context-window errors. Matched only on
# 400/413/422 replies: on a 429, "too many tokens" means a rate limit, not the window.
_CONTEXT_PHRASES: tuple[str, ...] = (
    "maximum context length",  # OpenAI, DeepSeek, vLLM
    "context length",
    "context_length_exceeded",
    "prompt is too long",  # Anthropic
    "too many tokens",
    "exceeds the context window",
    "input is too long",
    "exceed_context_size_error",  # llama.cpp server error type
    "exceeds the available context size",  # llama.cpp server message
)
_CONTEXT_CODES: frozenset[str] = frozenset({"context_length_exceeded", "exceed_context_size_error"})
_CONTEXT_STATUSES: frozenset[int] = frozenset({400, 413, 422})
#: Hosts whose API accepts an assistant turn with tool calls and no ``content`` key (OpenAI's
#: reference: content is "required unless tool_calls or function_call is specified").
OMIT_CONTENT_HOSTS: frozenset[str] = frozenset({"api.openai.com"})


@dataclass
class _Failure:
    """One failed try: the error to raise if no retry is left (``cause``: the SDK's or the
    transport's exception, kept for ``--debug``), whether a retry may help, the wait the
    server asked for, and a short reason for the ``retry`` event."""

    error: BackendError
    retryable: bool
    reason: str
    wait_s: float | None = None
    cause: BaseException | None = None


@dataclass
class _Fallback:
    """The server cannot stream this request: send it again without streaming."""

    reason: str


@dataclass
class _Assembly:
    """A streamed reply, put back together chunk by chunk."""

    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish: str | None = None
    model: str | None = None
    usage: dict[str, Any] | None = None
    timings: dict[str, Any] | None = None
    chunks: int = 0
    done: bool = False

    def body(self) -> dict[str, Any]:
        """The non-streamed response body this stream stands for."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) if self.content else None}
        if self.calls:
            message["tool_calls"] = [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for _, c in sorted(self.calls.items())
            ]
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        out: dict[str, Any] = {"choices": [{"index": 0, "message": message, "finish_reason": self.finish}]}
        if self.model is not None:
            out["model"] = self.model
        if self.usage is not None:
            out["usage"] = self.usage
        if self.timings is not None:
            out["timings"] = self.timings
        return out


class OpenAIBackend(Backend):
    """A model served behind an OpenAI-compatible ``/v1/chat/completions`` endpoint."""

    name = "openai"

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = DEFAULT_TIMEOUT_S,
        max_retries: int = DEFAULT_MAX_RETRIES,
        context_window: int | None = None,
        stream: bool = False,
        routing_header: str | None = None,
        prompt_cache_key: str | None = None,
        clock: Callable[[], float] = time.time,
        null_content: NullContent | None = None,
    ) -> None:
        check_timeout(timeout)
        if max_retries < 0:
            raise ValueError(f"max_retries must be 0 or more, not {max_retries!r}")
        if null_content is not None and null_content not in NULL_CONTENT_FORMS:
            raise ValueError(f"null_content={null_content!r}: expected one of {', '.join(NULL_CONTENT_FORMS)}")
        self.model = model
        self._context_window = context_window
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.api_key_env = api_key_env
        #: stream replies (token events); switched off for good when the server cannot
        self.stream = stream
        #: the header the routing key is sent in (``cache/routing.py``: a preset or a name)
        self.routing_header = header_name(routing_header) if routing_header is not None else None
        #: ``prompt_cache_key`` sent in the body: a fixed key, ``"auto"`` (the derived one), or none
        self.prompt_cache_key = prompt_cache_key
        self.clock = clock
        self._lineage_root: str | None = None
        # Local servers (vLLM, Ollama, llama.cpp) accept any key, but the SDK refuses to
        # start without one, so a missing key becomes a harmless placeholder.
        key = api_key or os.environ.get(api_key_env) or _PLACEHOLDER_KEY
        #: each try's time, the whole answer included (the SDK's timeout bounds one read only)
        self._deadline = TryDeadline()
        kwargs: dict[str, Any] = {
            "api_key": key,
            "max_retries": 0,
            "timeout": self.timeout,
            # replies bounded once decoded, every try timed, redirects not followed (backends/bounded_http.py)
            "http_client": bounded_client(openai.DefaultHttpxClient, self._deadline),
        }
        if base_url is not None:
            kwargs["base_url"] = base_url
        self._client = openai.OpenAI(**kwargs)
        #: how a session started here sends a tool-call turn without text (the module docstring)
        self.null_content: NullContent = null_content or default_null_content(self.base_url)

    @property
    def base_url(self) -> str:
        """The endpoint actually used (after the SDK applied ``OPENAI_BASE_URL`` or its default).
        It may carry credentials: print :attr:`shown_url` instead."""
        return str(self._client.base_url).rstrip("/")

    @property
    def shown_url(self) -> str:
        """:attr:`base_url` without its credentials, for messages."""
        return redact(self.base_url)

    @property
    def context_window(self) -> int | None:
        """The served model's window in tokens, as given (the API does not say); the
        compaction layers plan for it, else for 128,000."""
        return self._context_window

    def recipe_record(self) -> dict[str, Any]:
        """The base URL, redacted (credentials in it -- ``user:pass@``, ``?api-key=`` -- are
        never stored: a resume asks for the full URL again), and the window when given.
        Never the API key."""
        return {"base_url": self.shown_url, **super().recipe_record()}

    def bind_lineage(self, root_session_id: str) -> None:
        """The root of the session lineage this backend serves: part of its routing key."""
        self._lineage_root = root_session_id

    def routing_key_for(self, request: ChatRequest) -> str | None:
        """The key this request is routed by: the fixed ``prompt_cache_key`` when one was
        given, else the derived key (``cache/routing.py``) when a header or ``"auto"`` asks
        for one, else ``None``."""
        if self.prompt_cache_key not in (None, "auto"):
            return self.prompt_cache_key
        if self.prompt_cache_key is None and self.routing_header is None:
            return None
        return routing_key(prefix_sha256(request), self._lineage_root or "")

    def complete(self, request: ChatRequest, *, on_event: EventSink | None = None) -> Completion:
        """Send one rendered request and translate the reply, or raise one of our errors.

        ``on_event`` receives a ``Retry`` event before each retry, a ``Token`` for each
        streamed text delta, a ``StreamFallback`` when streaming is switched off
        (``core/progress.py``)."""
        sink = on_event or ignore
        body = request.openai_body(self.model)
        key = self.routing_key_for(request)
        headers: dict[str, str] = {}
        if key is not None:
            if self.prompt_cache_key is not None:
                body["prompt_cache_key"] = key
            if self.routing_header is not None:
                headers[self.routing_header] = key
        sent_at = self.clock()
        completion = self._with_retries(body, sink, headers)
        if key is None:
            return completion
        raw = dict(completion.usage.raw)
        raw["provider"] = "openai"
        raw["cache"] = {
            "ttl": None,
            "ttl_s": None,
            "breakpoints": [],
            "minimum_tokens": None,
            "routing_key": key,
            "prefix_tokens": self.token_counter().count(canonical_prefix(request)),
            "sent_at": sent_at,
        }
        return replace(completion, usage=replace(completion.usage, raw=raw))

    def _with_retries(self, body: dict[str, Any], sink: EventSink, headers: Mapping[str, str]) -> Completion:
        """Tries until one answers or no retry is left; each retry announced before its wait.
        The API key is masked in whatever is raised (a server may echo it in its error)."""
        try:
            return self._retrying(body, sink, headers)
        except BackendError as exc:
            scrub_secret(exc, self._client.api_key or "")
            raise

    def _retrying(self, body: dict[str, Any], sink: EventSink, headers: Mapping[str, str]) -> Completion:
        attempt = 0
        while True:
            with self._deadline.running(self.timeout):
                result = self._try(body, sink, headers)
            if isinstance(result, Completion):
                return result
            if not result.retryable or attempt >= self.max_retries:
                raise result.error from result.cause
            attempt += 1
            wait = result.wait_s if result.wait_s is not None else backoff(attempt)
            sink(
                Retry(
                    attempt=attempt,
                    max_retries=self.max_retries,
                    reason=result.reason,
                    wait_s=round(wait, 3),
                    url=self.shown_url,
                )
            )
            time.sleep(wait)

    def _try(self, body: dict[str, Any], sink: EventSink, headers: Mapping[str, str]) -> Completion | _Failure:
        """One try, streamed when enabled; a stream the server cannot give falls back here."""
        if self.stream:
            result = self._streamed(body, sink, headers)
            if not isinstance(result, _Fallback):
                return result
            self.stream = False
            sink(StreamFallback(reason=result.reason, url=self.shown_url))
            plain = self._plain(body, headers)
            if isinstance(plain, _Failure) and plain.reason == _CLOSED_WITHOUT_ANSWER:
                # the failed stream left a dead keep-alive connection in the pool (llama-cpp-python's
                # server closes it after its empty stream): one silent new try, on a new connection
                plain = self._plain(body, headers)
            return plain
        return self._plain(body, headers)

    def _plain(self, body: dict[str, Any], headers: Mapping[str, str]) -> Completion | _Failure:
        wire = dict(body)
        model = wire.pop("model")
        started = time.perf_counter()
        try:
            # Everything but the model goes through ``extra_body``, which the SDK sends
            # untouched: the server sees exactly what the harness rendered. The messages too
            # (the module docstring): the SDK's ``messages=[]`` is replaced by them in place.
            raw = self._client.chat.completions.with_raw_response.create(
                model=model, messages=[], extra_body=wire, extra_headers=dict(headers) or None
            )
            text = raw.text
        except openai.OpenAIError as exc:
            return self._failure(exc)
        return self._parse(text, (time.perf_counter() - started) * 1000.0)

    def _streamed(
        self, body: dict[str, Any], sink: EventSink, headers: Mapping[str, str]
    ) -> Completion | _Failure | _Fallback:
        wire = dict(body)
        model = wire.pop("model")
        wire["stream"] = True
        wire["stream_options"] = {"include_usage": True}
        started = time.perf_counter()
        got = _Assembly()
        try:
            with self._client.chat.completions.with_streaming_response.create(
                model=model, messages=[], extra_body=wire, extra_headers=dict(headers) or None
            ) as response:
                try:
                    for data in _sse_events(response.iter_lines()):
                        if data == "[DONE]":
                            got.done = True
                            break
                        self._take_chunk(got, data, sink)
                except (BackendError, openai.OpenAIError):
                    raise
                except Exception as exc:  # the transport failed mid-stream (httpx's own errors)
                    return self._stream_broken(exc, got)
        except openai.APIStatusError as exc:
            if exc.status_code in (400, 422) and "stream" in _error_fields(exc.body, _text(exc))[2].lower():
                return _Fallback(f"HTTP {exc.status_code} to a streamed request")
            return self._failure(exc)
        except openai.OpenAIError as exc:
            return self._failure(exc)
        latency = (time.perf_counter() - started) * 1000.0
        if got.chunks == 0:
            return _Fallback("the server answered the streamed request with an empty stream")
        if not got.done and got.finish is None:
            return self._stream_broken(None, got)
        assembled = got.body()
        completion = self._from_data(assembled, json.dumps(assembled), latency)
        if got.usage is None:
            # The call's usage stays unknown (never guessed); later calls go unstreamed,
            # because the audit needs each call's prompt and cached tokens more than live text.
            self.stream = False
            sink(StreamFallback(reason="the server sends no usage in streamed replies", url=self.shown_url))
        return completion

    def _stream_broken(self, exc: BaseException | None, got: _Assembly) -> _Failure:
        """A stream that stopped before its end: out of time, or cut off mid-transfer."""
        names = {type(e).__name__ for e in _chain(exc)} if exc is not None else set()
        if _deadline_of(exc) is not None or any("Timeout" in n for n in names):
            return out_of_time(
                self.shown_url, self.timeout, self.max_retries + 1, exc, f", {got.chunks} streamed chunk(s)"
            )
        if exc is not None and not names & {"RemoteProtocolError", "ReadError", "ConnectionResetError"}:
            raise exc
        return _Failure(
            ResponseTruncated(
                f"the streamed reply from {self.shown_url} was cut off mid-transfer after {got.chunks} chunk(s), "
                "without its end: the server or a proxy closed the connection. This is not a connection "
                "problem: check the server's log (it may have crashed or run out of memory), then retry."
            ),
            retryable=True,
            reason="the streamed reply was cut off mid-transfer",
            cause=exc,
        )

    def _take_chunk(self, got: _Assembly, data: str, sink: EventSink) -> None:
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError as exc:
            raise MalformedResponse(
                f"{self.shown_url} sent a stream event that is not JSON ({exc.msg}); it starts with {data[:200]!r}"
            ) from exc
        if not isinstance(chunk, dict):
            raise MalformedResponse(f"{self.shown_url} sent a stream event that is a JSON {type(chunk).__name__}")
        if "error" in chunk and not chunk.get("choices"):
            code, etype, message = _error_fields(chunk["error"], data)
            if _is_context_error(code, etype, message, 400):
                raise self._context_error(message, None)
            raise BackendError(redact(f"{self.shown_url} reported an error mid-stream: {message}. Check its log."))
        got.chunks += 1
        if isinstance(chunk.get("model"), str):
            got.model = chunk["model"]
        if isinstance(chunk.get("usage"), dict):
            got.usage = chunk["usage"]
        if isinstance(chunk.get("timings"), dict):
            got.timings = chunk["timings"]
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = as_object(choice.get("delta"))
            text = delta.get("content")
            if isinstance(text, str) and text:
                got.content.append(text)
                sink(Token(text=text))
            thinking = delta.get("reasoning_content")
            if not isinstance(thinking, str):
                thinking = delta.get("reasoning")
            if isinstance(thinking, str) and thinking:
                got.reasoning.append(thinking)
            for tc in delta.get("tool_calls") or ():
                if not isinstance(tc, dict):
                    continue
                index = tc.get("index")
                i = index if isinstance(index, int) else len(got.calls)
                entry = got.calls.setdefault(i, {"id": None, "name": "", "arguments": ""})
                if isinstance(tc.get("id"), str) and tc["id"]:
                    entry["id"] = tc["id"]
                fn = as_object(tc.get("function"))
                if isinstance(fn.get("name"), str) and fn["name"] and not entry["name"]:
                    entry["name"] = fn["name"]
                if isinstance(fn.get("arguments"), str):
                    entry["arguments"] += fn["arguments"]
            if isinstance(choice.get("finish_reason"), str):
                got.finish = choice["finish_reason"]

    def count_tokens(self, text: str) -> int | None:
        """Always ``None``: a served model's tokenizer is not available offline."""
        return None

    def close(self) -> None:
        self._client.close()

    # -- translation -----------------------------------------------------------------

    def _failure(self, exc: openai.OpenAIError) -> _Failure:
        """What one failed try means, in our terms, and whether a retry may help."""
        too_large = next((e for e in _chain(exc) if isinstance(e, ReplyTooLarge)), None)
        if too_large is not None:  # the SDK wraps what the bounded client raised as a connection error
            return _Failure(too_large, retryable=False, reason="the reply is too large", cause=exc)
        url = self.shown_url
        if isinstance(exc, openai.APITimeoutError) or _deadline_of(exc) is not None:
            return out_of_time(self.shown_url, self.timeout, self.max_retries + 1, exc)
        if isinstance(exc, openai.APIConnectionError):
            return self._connection_failure(exc)
        if isinstance(exc, openai.APIStatusError):
            error = self._status_error(exc)
            retryable, wait = should_retry(exc.status_code, exc.response.headers)
            ok = retryable and not isinstance(error, ContextWindowExceeded)
            return _Failure(error, ok, f"HTTP {exc.status_code}", wait, cause=exc)
        return _Failure(
            BackendError(redact(f"request to {url} failed: {exc}. Check the base URL and the server's log.")),
            retryable=False,
            reason=type(exc).__name__,
            cause=exc,
        )

    def _connection_failure(self, exc: openai.APIConnectionError) -> _Failure:
        """Nothing listening, a name that does not resolve, a connection closed before any
        answer, and a reply cut off mid-transfer are four different problems."""
        url = self.shown_url
        chain = _chain(exc)
        names = {type(e).__name__ for e in chain}
        inner = redact(_cause(exc))
        lowered = inner.lower()
        if "without sending complete message body" in lowered or "incomplete chunked read" in lowered:
            sizes = re.search(r"received (\d+) bytes, expected (\d+)", inner)
            got = f" after {int(sizes[1]):,} of {int(sizes[2]):,} bytes" if sizes else ""
            return _Failure(
                ResponseTruncated(
                    f"the reply from {url} was cut off mid-transfer{got}: the server or a proxy closed the "
                    "connection before the whole body arrived (not a connection problem). Check the server's "
                    "log (it may have crashed or run out of memory) and any proxy's size and time limits, "
                    "then retry."
                ),
                retryable=True,
                reason="the reply was cut off mid-transfer",
                cause=exc,
            )
        if "without sending a response" in lowered or "ConnectionResetError" in names or "ReadError" in names:
            return _Failure(
                BackendUnavailable(
                    f"{url} accepted the connection but closed it without answering ({inner}). The server may "
                    "have crashed on this request or be restarting: check its log."
                ),
                retryable=True,
                reason=_CLOSED_WITHOUT_ANSWER,
                cause=exc,
            )
        if "gaierror" in names or "name or service not known" in lowered or "nodename nor servname" in lowered:
            return _Failure(
                BackendUnavailable(
                    f"cannot connect to {url}: the host name does not resolve ({inner}). Check the host in the "
                    "base URL (--base-url) and your DNS or network."
                ),
                retryable=True,
                reason="the host name does not resolve",
                cause=exc,
            )
        return _Failure(
            BackendUnavailable(
                f"cannot connect to {url} ({inner}). Check that the server is running and listening on that "
                "host and port, and that the base URL is the API root ending in /v1 (e.g. http://127.0.0.1:8000/v1)."
            ),
            retryable=True,
            reason=f"cannot connect ({inner})",
            cause=exc,
        )

    def _context_error(self, message: str, status: int | None) -> ContextWindowExceeded:
        where = f"HTTP {status} from {self.shown_url}" if status is not None else self.shown_url
        return ContextWindowExceeded(
            redact(
                f"the request does not fit the context window of model {self.model!r} ({where}: {message}). "
                "Shorten the context or compact the trajectory."
            )
        )

    def _status_error(self, exc: openai.APIStatusError) -> BackendError:
        """Map an HTTP error to our exception, keeping the server's words."""
        status = exc.status_code
        code, etype, message = _error_fields(exc.body, _text(exc))
        if _is_context_error(code, etype, message, status):
            return self._context_error(message, status)
        hint = ""
        if status in (401, 403):
            hint = f" Check the API key (passed in, or in ${self.api_key_env})."
        elif status == 404:
            hint = f" Check that the base URL ends in /v1 and that the server serves model {self.model!r}."
        elif status == 429:
            hint = " The server is rate-limiting (the retries are used up): wait, or lower the request rate."
        elif status >= 500:
            hint = " The server failed on this request: check its log, or retry later."
        elif status == 400:
            hint = " The server rejected the request as invalid: its message above says which field."
        else:
            hint = redirect_hint(status, exc.response.headers)
        return BackendError(redact(f"{self.shown_url} returned HTTP {status}: {message}.{hint}"))

    def _parse(self, text: str, latency_ms: float) -> Completion:
        """Turn a 200 reply's raw JSON into a :class:`Completion`."""
        url = self.shown_url
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise MalformedResponse(
                f"{url} answered HTTP 200 but the body is not JSON ({exc.msg} at "
                f"position {exc.pos}); body starts with {text[:200]!r}"
            ) from exc
        if not isinstance(data, dict):
            raise MalformedResponse(f"{url} answered HTTP 200 with a JSON {type(data).__name__}, not an object")
        return self._from_data(data, text, latency_ms)

    def _from_data(self, data: dict[str, Any], text: str, latency_ms: float) -> Completion:
        url = self.shown_url
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            if "error" in data:  # some proxies report failures inside a 200
                code, etype, message = _error_fields(data["error"], text)
                if _is_context_error(code, etype, message, 400):
                    raise self._context_error(message, None)
                raise MalformedResponse(redact(f"{url} answered HTTP 200 with an error: {message}"))
            raise MalformedResponse(
                f"{url} answered HTTP 200 without a non-empty `choices` list; body starts with {text[:200]!r}"
            )
        return completion_from_data(data, latency_ms, where=url)


def default_null_content(base_url: str) -> NullContent:
    """``"omit"`` on a host known to accept a tool-call turn without a ``content`` key
    (:data:`OMIT_CONTENT_HOSTS`), else ``"empty"``, which every server takes."""
    from urllib.parse import urlsplit

    try:
        host = (urlsplit(base_url).hostname or "").lower()
    except ValueError:  # an unparsable URL: the SDK will say so on the first call
        host = ""
    return "omit" if host in OMIT_CONTENT_HOSTS else "empty"


def completion_from_data(data: dict[str, Any], latency_ms: float = 0.0, *, where: str = "the reply") -> Completion:
    """A :class:`Completion` from a chat-completions reply's JSON (``choices[0].message`` and
    ``usage``): what this backend parses, and what ``Context.record`` takes from a caller's
    own client (an SDK object's ``model_dump()``)."""
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise MalformedResponse(f"{where} has no non-empty `choices` list")
    choice = choices[0]
    wire = choice.get("message")
    if not isinstance(wire, dict):
        raise MalformedResponse(f"{where}: choices[0] has no `message` object")
    try:
        reply = _assistant_message(wire)
    except (TypeError, ValueError, AttributeError) as exc:
        raise MalformedResponse(f"{where}: cannot read choices[0].message ({exc})") from exc
    finish = choice.get("finish_reason")
    model = data.get("model")
    return Completion(
        message=reply,
        usage=_usage(data, latency_ms),
        finish_reason=finish if isinstance(finish, str) else None,
        model=model if isinstance(model, str) else None,
    )


def canonical_prefix(request: ChatRequest) -> str:
    """The frozen prefix's text as counted for ``Usage.raw["cache"]["prefix_tokens"]``: the
    tools' and the leading system message's canonical JSON."""
    tools = canonical_json([t.to_wire() for t in request.tools]) if request.tools else ""
    head = request.messages[0].canonical() if request.messages and request.messages[0].role == "system" else ""
    return tools + head


def _sse_events(lines: Iterator[str]) -> Iterator[str]:
    """The ``data`` of each server-sent event (multi-line data joined by newlines)."""
    buf: list[str] = []
    for line in lines:
        if not line:
            if buf:
                yield "\n".join(buf)
                buf = []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if name == "data":
            buf.append(value[1:] if value.startswith(" ") else value)
    if buf:
        yield "\n".join(buf)


def _text(exc: openai.APIStatusError) -> str:
    try:
        return exc.response.text
    except Exception:  # a streamed error body that was never read
        return ""


def _assistant_message(wire: dict[str, Any]) -> Message:
    """The reply as our Message. Tool-call arguments stay the exact string received.

    Some servers (newer vLLM, OpenRouter) name the thinking ``reasoning`` instead of
    ``reasoning_content``; both land in ``reasoning_content``.
    """
    data = dict(wire)
    data["role"] = "assistant"
    if data.get("reasoning_content") is None and isinstance(data.get("reasoning"), str):
        data["reasoning_content"] = data["reasoning"]
    return Message.from_wire(data)


def _usage(data: dict[str, Any], latency_ms: float) -> Usage:
    """Token counts and cache hits from whichever provider's fields are present
    (:func:`ctxwright.core.usage.read_usage`), plus llama.cpp server timings when given."""
    counts = read_usage(data)
    usage = as_object(data.get("usage"))
    timings = as_object(data.get("timings"))
    raw: dict[str, Any] = {"usage": usage, "latency_ms": latency_ms}
    if timings:
        raw["timings"] = timings
    return Usage(
        prompt_tokens=counts["prompt_tokens"],
        completion_tokens=counts["completion_tokens"],
        cached_tokens=counts["cached_tokens"],
        prefill_ms=_first_float(timings.get("prompt_ms")),
        decode_ms=_first_float(timings.get("predicted_ms")),
        raw=raw,
    )


def _first_float(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _error_fields(body: object, text: str) -> tuple[str | None, str | None, str]:
    """(code, type, message) from a provider error body, whatever its shape.

    The SDK hands us ``body["error"]`` when that exists; servers also send a bare string,
    ``{"detail": ...}`` (FastAPI) or plain text.
    """
    if isinstance(body, dict) and isinstance(body.get("error"), (dict, str)):
        body = body["error"]
    if isinstance(body, dict):
        code = body.get("code")
        etype = body.get("type")
        msg = body.get("message") or body.get("detail") or body.get("msg")
        message = msg if isinstance(msg, str) else (json.dumps(msg) if msg is not None else text)
        return (
            str(code) if code is not None else None,
            str(etype) if etype is not None else None,
            message.strip() or "(empty error body)",
        )
    if isinstance(body, str) and body.strip():
        return None, None, body.strip()
    return None, None, text.strip()[:500] or "(empty error body)"


def _is_context_error(code: str | None, etype: str | None, message: str, status: int) -> bool:
    """True when an error means "the prompt does not fit", in any provider's wording."""
    if code in _CONTEXT_CODES or etype in _CONTEXT_CODES:
        return True
    if status not in _CONTEXT_STATUSES:
        return False
    lowered = message.lower()
    return any(phrase in lowered for phrase in _CONTEXT_PHRASES)


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and every exception it was raised from, outermost first."""
    out: list[BaseException] = []
    inner: BaseException | None = exc
    while inner is not None and inner not in out:
        out.append(inner)
        inner = inner.__cause__ or inner.__context__
    return out


def out_of_time(url: str, timeout: float, tries: int, exc: BaseException | None, detail: str = "") -> _Failure:
    """A try whose time ran out (``backends/bounded_http.py``: the whole answer, streamed or
    not, within ``timeout``); retried as any timeout. One text for every HTTP backend."""
    passed = _deadline_of(exc)
    received = passed.received if passed is not None else 0
    return _Failure(
        BackendUnavailable(deadline_message(url, timeout, tries, received, detail)),
        retryable=True,
        reason=deadline_reason(timeout, received),
        cause=exc,
    )


def _deadline_of(exc: BaseException | None) -> DeadlinePassed | None:
    """The :class:`DeadlinePassed` in ``exc``'s chain (the SDK wraps it as a connection error)."""
    if exc is None:
        return None
    return next((e for e in _chain(exc) if isinstance(e, DeadlinePassed)), None)


def _cause(exc: BaseException) -> str:
    """The innermost reason of a connection failure, e.g. "Connection refused"."""
    inner = _chain(exc)[-1]
    return str(inner) or type(inner).__name__
