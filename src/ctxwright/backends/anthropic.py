"""Backend for Anthropic's Messages API (``POST /v1/messages``), through the official SDK.

Why its own backend: Anthropic caches a prompt only up to explicit ``cache_control``
breakpoints (at most 4, each found again only by a lookup that walks back 20 blocks, none
useful below the model's minimum), and bills a cache write above the input price. Where the
breakpoints go decides the bill, so ctxwright places them (``cache/breakpoints.py``) on the
request it renders: at the end of the frozen prefix (tools + system), at the end of the
trajectory, and on a fixed grid in between. The TTL is the session's (``"5m"`` or ``"1h"``;
``ttl_for_call`` lets a planner choose per call).

The chat-completions messages ctxwright keeps are translated, not rewritten: the first system
message becomes ``system``, tools become ``{name, description, input_schema}``, an assistant
turn's thinking blocks (``Message.reasoning_blocks``, kept byte for byte: Anthropic checks
their signatures) go back first in its content, then its text and ``tool_use`` blocks; tool
results become ``tool_result`` blocks of the next user message, consecutive ones merged into
one (Anthropic refuses a ``tool_use`` whose result is not in the very next message).

Retries are ours (the SDK runs with ``max_retries=0``), announced as ``Retry`` events before
their wait, as in ``backends/openai_compat.py``: timeouts, connection failures, HTTP 408, 409,
429, 5xx and 529 (Anthropic's "overloaded"). Every failure ends as one of our error types with
the provider's own message on one line. The reply is read from the raw JSON (or the raw event
stream), so fields the SDK's types do not know yet -- ``diagnostics`` -- are kept: ``Usage.raw``
holds the provider's usage and diagnostics verbatim, the response id and the breakpoints sent.
"""

from __future__ import annotations

import copy
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ctxwright.errors import ConfigError

try:
    import anthropic
except ImportError:  # the SDK is the anthropic extra's, not a dependency of every install
    raise ConfigError(
        "the anthropic backend needs Anthropic's SDK, which is not installed: pip install 'ctxwright[anthropic]'"
    ) from None

from ctxwright.backends.base import Backend
from ctxwright.backends.bounded_http import (
    TryDeadline,
    bounded_client,
    check_timeout,
    redirect_hint,
)
from ctxwright.backends.openai_compat import (
    _cause,
    _chain,
    _deadline_of,
    _error_fields,
    _Failure,
    _is_context_error,
    _sse_events,
    out_of_time,
)
from ctxwright.backends.retry import backoff, should_retry
from ctxwright.cache.breakpoints import MODES, PromptBlock, place_breakpoints
from ctxwright.cache.minimums import minimum_tokens
from ctxwright.core.messages import Message, ToolCall, Usage, canonical_json
from ctxwright.core.progress import EventSink, Retry, Token, ignore
from ctxwright.core.redact import redact, scrub_secret
from ctxwright.core.request import ChatRequest, Completion
from ctxwright.core.usage import as_object, read_usage
from ctxwright.errors import (
    BackendError,
    BackendUnavailable,
    ContextWindowExceeded,
    MalformedResponse,
    ReplyTooLarge,
)

__all__ = ["DIAGNOSTICS_BETA", "TTLS", "AnthropicBackend"]

DEFAULT_TIMEOUT_S = 120.0
DEFAULT_MAX_RETRIES = 2
#: ``max_tokens`` is required by the Messages API; used when the request sets none.
DEFAULT_MAX_TOKENS = 4096
#: The beta header of cache diagnostics, sent with ``diagnostics=True`` (the default: the audit
#: shows the provider's miss reason beside the byte diff; dropped if the server refuses it).
DIAGNOSTICS_BETA = "cache-diagnosis-2026-04-07"
#: The TTLs a session may choose; ``auto`` is resolved per call by ``ttl_for_call`` (else 5m).
TTLS: dict[str, float] = {"5m": 300.0, "1h": 3600.0}
_TTL_CHOICES = ("5m", "1h", "auto")
_THINKING_TYPES = ("thinking", "redacted_thinking")
#: Blocks of a reply kept verbatim and sent back first in their assistant turn: thinking (its
#: signature is checked) and the server-side compaction block (the API drops everything before
#: it on the next request, and its signature is checked too).
_KEPT_TYPES = (*_THINKING_TYPES, "compaction")
#: Anthropic's stop reasons, as the chat-completions finish reasons the loop reads.
_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls", "max_tokens": "length"}
#: The longest tail of blocks treated as rewritten on every call (a status message: 1 or 2).
_MAX_VOLATILE_TAIL = 3


@dataclass
class _Rendered:
    """One request body and what ctxwright decided about its cache."""

    body: dict[str, Any]
    cache: dict[str, Any]


@dataclass
class _Stream:
    """A streamed reply put back together, event by event."""

    message: dict[str, Any] = field(default_factory=dict)
    blocks: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: the deltas of each block's ``partial_json``, ``text`` and ``thinking``, joined once at
    #: the end: a server sending 10^6 tiny deltas must cost linear time, not a copy per delta
    partial: dict[int, list[str]] = field(default_factory=dict)
    texts: dict[tuple[int, str], list[str]] = field(default_factory=dict)
    done: bool = False
    #: server-sent events read (keep-alive comments are not events)
    events: int = 0

    def joined(self) -> list[dict[str, Any]]:
        """The content blocks in index order, their text and thinking deltas joined."""
        for (i, key), parts in self.texts.items():
            block = self.blocks.setdefault(i, {})
            block[key] = str(block.get(key) or "") + "".join(parts)
        self.texts.clear()
        return [self.blocks[i] for i in sorted(self.blocks)]


class AnthropicBackend(Backend):
    """A Claude model behind the Anthropic Messages API (or anything that speaks it)."""

    name = "anthropic"

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str = "ANTHROPIC_API_KEY",
        timeout: float = DEFAULT_TIMEOUT_S,
        max_retries: int = DEFAULT_MAX_RETRIES,
        context_window: int | None = None,
        stream: bool = False,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        ttl: str = "5m",
        ttl_for_call: Callable[[], str] | None = None,
        breakpoints: str = "ctxwright",
        minimum: int | None = None,
        diagnostics: bool = True,
        thinking: dict[str, Any] | None = None,
        context_management: dict[str, Any] | None = None,
        betas: tuple[str, ...] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        check_timeout(timeout)
        if max_retries < 0:
            raise ValueError(f"max_retries must be 0 or more, not {max_retries!r}")
        if ttl not in _TTL_CHOICES:
            raise ConfigError(f"cache TTL {ttl!r} is not one Anthropic offers: use 5m, 1h or auto (--cache-ttl)")
        if breakpoints not in MODES:
            raise ConfigError(f"breakpoint mode {breakpoints!r} is unknown: use {', '.join(MODES)}")
        self.model = model
        self._context_window = context_window
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.api_key_env = api_key_env
        self.stream = stream
        self.max_tokens = max_tokens
        self.ttl = ttl
        #: a planner's choice of TTL for the next call (``"5m"``/``"1h"``); ``None``: the session's
        self.ttl_for_call = ttl_for_call
        self.breakpoints = breakpoints
        self.minimum = minimum_tokens(model) if minimum is None else minimum
        self.diagnostics = diagnostics
        #: extended thinking, sent as the request's ``thinking`` (``{"type": "enabled",
        #: "budget_tokens": N}``); its blocks come back in ``Message.reasoning_blocks``
        self.thinking = thinking
        #: the provider's context management, sent as the request's ``context_management``
        #: (``{"edits": [...]}``, built by ``compaction/provider.py``), with the beta headers
        #: it needs in ``betas``; what the server did comes back in ``Usage.raw``
        self.context_management = context_management
        self.betas = tuple(betas)
        self.clock = clock
        #: the id of the last reply, named by the next request's diagnostics
        self.last_message_id: str | None = None
        self._owns_client = True
        self._token_cache: dict[str, int] = {}
        #: the previous request's blocks (role and canonical JSON, without cache_control)
        self._previous: list[str] | None = None
        key = api_key or os.environ.get(api_key_env) or "not-needed"
        #: each try's time, the whole answer included (the SDK's timeout bounds one read only)
        self._deadline = TryDeadline()
        kwargs: dict[str, Any] = {
            "api_key": key,
            "max_retries": 0,
            "timeout": self.timeout,
            # replies bounded once decoded, every try timed, redirects not followed (they would
            # carry x-api-key): backends/bounded_http.py
            "http_client": bounded_client(anthropic.DefaultHttpxClient, self._deadline),
        }
        if base_url is not None:
            kwargs["base_url"] = base_url
        self._client = anthropic.Anthropic(**kwargs)
        self._counter = self.token_counter()

    # -- what the harness asks of every backend -------------------------------------------

    @property
    def base_url(self) -> str:
        return str(self._client.base_url).rstrip("/")

    @property
    def shown_url(self) -> str:
        return redact(self.base_url)

    @property
    def context_window(self) -> int | None:
        return self._context_window

    def recipe_record(self) -> dict[str, Any]:
        """The base URL without credentials, and the window when given. Never the API key."""
        return {"base_url": self.shown_url, **super().recipe_record()}

    def fork(self) -> AnthropicBackend:
        """A backend for side requests (summaries, sub-agents): the same client, its own chain
        of diagnostics, so a summary's request is not compared with the session's next one."""
        other = copy.copy(self)
        other.last_message_id = None
        other._previous = None
        other._owns_client = False
        return other

    def close(self) -> None:
        if self._owns_client:
            self._client.close()

    # -- the request ------------------------------------------------------------------------

    @property
    def cache_ttl(self) -> str:
        """The session's TTL as asked (``5m``, ``1h`` or ``auto``): the context reads it to give
        ``--cache-ttl auto`` its planner (``ttl_for_call``) -- without one, auto stays 5m."""
        return self.ttl

    def call_ttl(self) -> str:
        """The TTL of the next call's breakpoints: the planner's when it chose, else the
        session's (``auto`` without a planner is 5m)."""
        chosen = self.ttl_for_call() if self.ttl_for_call is not None else self.ttl
        return chosen if chosen in TTLS else "5m"

    def _tokens(self, block: dict[str, Any]) -> int:
        text = canonical_json(block)
        n = self._token_cache.get(text)
        if n is None:
            if len(self._token_cache) > 50_000:
                self._token_cache.clear()
            n = self._counter.count(text)
            self._token_cache[text] = n
        return n

    def render(self, request: ChatRequest) -> _Rendered:
        """The Messages API body for ``request``, breakpoints placed; what the server receives."""
        system_blocks: list[dict[str, Any]] = []
        rest = list(request.messages)
        if rest and rest[0].role == "system":
            if rest[0].content:
                system_blocks.append({"type": "text", "text": rest[0].content})
            rest = rest[1:]
        tools = [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in request.tools]
        messages = _messages(rest)
        ordered: list[tuple[dict[str, Any], bool]] = [(t, True) for t in tools]
        ordered += [(b, True) for b in system_blocks]
        frozen_end = len(ordered) - 1
        for m in messages:
            for b in m["content"]:
                ok = b.get("type") not in _THINKING_TYPES and not (b.get("type") == "text" and not b.get("text"))
                ordered.append((b, ok))
        counts = [self._tokens(b) for b, _ in ordered]
        items = [canonical_json(b) for b, _ in ordered]
        chosen = place_breakpoints(
            [PromptBlock(n, ok) for n, (_, ok) in zip(counts, ordered, strict=True)],
            frozen_end,
            self.minimum,
            self.breakpoints,
            volatile_tail=_volatile_tail(self._previous, items, frozen_end),
        )
        self._previous = items
        ttl = self.call_ttl()
        mark: dict[str, Any] = {"type": "ephemeral"} if ttl == "5m" else {"type": "ephemeral", "ttl": ttl}
        for i in chosen:
            ordered[i][0]["cache_control"] = dict(mark)
        prefix_sums: list[int] = []
        total = 0
        for n in counts:
            total += n
            prefix_sums.append(total)
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_tokens if request.max_tokens is not None else self.max_tokens,
            "messages": messages,
        }
        if system_blocks:
            body["system"] = system_blocks
        if tools:
            body["tools"] = tools
            body["tool_choice"] = _tool_choice(request.tool_choice)
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if self.thinking is not None:
            body["thinking"] = dict(self.thinking)
        if self.context_management is not None:
            body["context_management"] = copy.deepcopy(self.context_management)
        body.update(request.extra)
        if self.diagnostics:
            body["diagnostics"] = {"previous_message_id": self.last_message_id}
        cache = {
            "ttl": ttl if chosen else None,
            "ttl_s": TTLS[ttl] if chosen else None,
            "breakpoints": [{"block": i, "tokens": prefix_sums[i]} for i in chosen],
            "minimum_tokens": self.minimum,
            "routing_key": None,
            "prefix_tokens": prefix_sums[frozen_end] if frozen_end >= 0 else 0,
        }
        return _Rendered(body, cache)

    def complete(self, request: ChatRequest, *, on_event: EventSink | None = None) -> Completion:
        """Send one rendered request and translate the reply, or raise one of our errors;
        ``on_event`` gets a ``Retry`` before each retry and a ``Token`` per streamed text delta."""
        try:
            return self._complete(request, on_event)
        except BackendError as exc:
            scrub_secret(exc, self._client.api_key or "")
            raise

    def _complete(self, request: ChatRequest, on_event: EventSink | None) -> Completion:
        sink = on_event or ignore
        rendered = self.render(request)
        attempt = 0
        while True:
            sent_at = self.clock()
            with self._deadline.running(self.timeout):
                result = self._try(rendered.body, sink)
            if isinstance(result, Completion):
                raw = dict(result.usage.raw)
                raw["cache"] = {**rendered.cache, "sent_at": sent_at}
                usage = Usage(
                    prompt_tokens=result.usage.prompt_tokens,
                    completion_tokens=result.usage.completion_tokens,
                    cached_tokens=result.usage.cached_tokens,
                    raw=raw,
                )
                rid = raw.get("response_id")
                if isinstance(rid, str):
                    self.last_message_id = rid
                return Completion(result.message, usage, result.finish_reason, result.model)
            if self.diagnostics and _refuses_diagnostics(result, self.betas):
                # a server without the cache-diagnosis beta (a gateway, an older deployment):
                # the diagnostics are an explanation, never worth the call -- drop them for the
                # session and send again at once (not one of the retries)
                self.diagnostics = False
                rendered.body.pop("diagnostics", None)
                sink(
                    Retry(
                        attempt=attempt + 1,
                        max_retries=self.max_retries,
                        reason="the server refused cache diagnostics; sent without them from now on",
                        wait_s=0.0,
                        url=self.shown_url,
                    )
                )
                continue
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

    def _headers(self) -> dict[str, str]:
        betas = [DIAGNOSTICS_BETA] if self.diagnostics else []
        betas += [b for b in self.betas if b not in betas]
        return {"anthropic-beta": ",".join(betas)} if betas else {}

    def _try(self, body: dict[str, Any], sink: EventSink) -> Completion | _Failure:
        wire = dict(body)
        model, max_tokens, messages = wire.pop("model"), wire.pop("max_tokens"), wire.pop("messages")
        started = time.perf_counter()
        try:
            if not self.stream:
                raw = self._client.messages.with_raw_response.create(
                    model=model,
                    max_tokens=max_tokens,
                    messages=messages,
                    extra_body=wire,
                    extra_headers=self._headers(),
                )
                text = raw.http_response.text
                return self._parse(text, (time.perf_counter() - started) * 1000.0)
            wire["stream"] = True
            got = _Stream()
            with self._client.messages.with_streaming_response.create(
                model=model, max_tokens=max_tokens, messages=messages, extra_body=wire, extra_headers=self._headers()
            ) as response:
                try:
                    for data in _sse_events(response.iter_lines()):
                        got.events += 1
                        failure = self._take_event(got, data, sink)
                        if failure is not None:
                            return failure
                except (BackendError, anthropic.AnthropicError):
                    raise
                except Exception as exc:  # the transport failed mid-stream (the SDK's HTTP client's own errors)
                    if _deadline_of(exc) is not None:
                        return out_of_time(
                            self.shown_url, self.timeout, self.max_retries + 1, exc, f", {got.events} streamed event(s)"
                        )
                    return _Failure(
                        BackendUnavailable(
                            f"the streamed reply from {self.shown_url} broke off ({_cause(exc)}); check the network "
                            "or the server, then retry"
                        ),
                        retryable=True,
                        reason="the stream broke off",
                        cause=exc,
                    )
        except anthropic.AnthropicError as exc:
            return self._failure(exc)
        if not got.done:
            return _Failure(
                BackendUnavailable(
                    f"the streamed reply from {self.shown_url} ended without message_stop: the server or a proxy "
                    "closed it early; retry, or check the server"
                ),
                retryable=True,
                reason="the stream ended early",
            )
        message = dict(got.message)
        message["content"] = got.joined()
        return self._completion(message, (time.perf_counter() - started) * 1000.0)

    def _take_event(self, got: _Stream, data: str, sink: EventSink) -> _Failure | None:
        """One server-sent event folded into the reply; an ``error`` event is a failure.

        An event of the wrong shape (not an object, an index that is no number) is the
        server's fault, said so in one line: left to fail inside the stream loop it would read
        as a network failure ("the stream broke off") and be retried against the same server."""
        try:
            event = json.loads(data)
        except json.JSONDecodeError as exc:
            raise _malformed(f"{self.shown_url} sent a stream event that is not JSON: {data[:200]!r}") from exc
        try:
            return self._fold(got, event, sink)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise _malformed(
                f"{self.shown_url} sent a stream event of the wrong shape ({type(exc).__name__}: {exc}): {data[:200]!r}"
            ) from exc

    def _fold(self, got: _Stream, event: Any, sink: EventSink) -> _Failure | None:
        if not isinstance(event, dict):
            raise TypeError(f"a JSON {type(event).__name__}, not an object")
        etype = event.get("type")
        if etype == "message_start":
            got.message = dict(as_object(event.get("message")))
        elif etype == "content_block_start":
            got.blocks[int(event["index"])] = dict(as_object(event.get("content_block")))
        elif etype == "content_block_delta":
            i = int(event["index"])
            block = got.blocks.setdefault(i, {})
            delta = as_object(event.get("delta"))
            dtype = delta.get("type")
            if dtype == "text_delta":
                got.texts.setdefault((i, "text"), []).append(str(delta.get("text", "")))
                sink(Token(text=str(delta.get("text", ""))))
            elif dtype == "input_json_delta":
                got.partial.setdefault(i, []).append(str(delta.get("partial_json", "")))
            elif dtype == "thinking_delta":
                got.texts.setdefault((i, "thinking"), []).append(str(delta.get("thinking", "")))
            elif dtype == "signature_delta":
                block["signature"] = str(delta.get("signature", ""))
            elif dtype == "compaction_delta":  # a server-side compaction block's summary, streamed
                if delta.get("content") is not None:
                    got.texts.setdefault((i, "content"), []).append(str(delta["content"]))
                if delta.get("encrypted_content") is not None:
                    block["encrypted_content"] = str(delta["encrypted_content"])
        elif etype == "content_block_stop":
            i = int(event["index"])
            if i in got.partial:
                raw = "".join(got.partial.pop(i))
                try:
                    got.blocks.setdefault(i, {})["input"] = json.loads(raw) if raw.strip() else {}
                except json.JSONDecodeError as exc:
                    raise _malformed(f"{self.shown_url} streamed tool input that is not JSON: {raw[:200]!r}") from exc
        elif etype == "message_delta":
            delta = as_object(event.get("delta"))
            if "stop_reason" in delta:
                got.message["stop_reason"] = delta["stop_reason"]
            usage = dict(as_object(got.message.get("usage")))
            usage.update(as_object(event.get("usage")))
            got.message["usage"] = usage
            if isinstance(event.get("context_management"), dict):  # the edits applied, at the end
                got.message["context_management"] = event["context_management"]
        elif etype == "message_stop":
            got.done = True
        elif etype == "error":
            err = as_object(event.get("error"))
            message = _one_line(str(err.get("message") or event.get("error") or "an error event"))
            overloaded = err.get("type") == "overloaded_error"
            return _Failure(
                BackendError(f"{self.shown_url} failed mid-stream ({err.get('type')}): {message}"),
                retryable=overloaded or err.get("type") == "api_error",
                reason=f"{err.get('type')} mid-stream",
            )
        return None

    # -- the reply --------------------------------------------------------------------------

    def _parse(self, text: str, latency_ms: float) -> Completion:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _malformed(
                f"{self.shown_url} answered HTTP 200 but the body is not JSON ({exc.msg}); it starts with {text[:200]!r}"
            ) from exc
        if not isinstance(data, dict) or not isinstance(data.get("content"), list):
            raise _malformed(f"{self.shown_url} answered HTTP 200 without a Messages API reply (no content list)")
        return self._completion(data, latency_ms)

    def _completion(self, data: dict[str, Any], latency_ms: float) -> Completion:
        content = [b for b in data.get("content") or [] if isinstance(b, dict)]
        text = "".join(str(b.get("text", "")) for b in content if b.get("type") == "text")
        calls = tuple(
            ToolCall(
                id=str(b.get("id") or ""), name=str(b.get("name") or ""), arguments=canonical_json(b.get("input") or {})
            )
            for b in content
            if b.get("type") == "tool_use"
        )
        kept = [b for b in content if b.get("type") in _KEPT_TYPES]
        readable = "".join(str(b.get("thinking", "")) for b in kept if b.get("type") == "thinking")
        message = Message(
            role="assistant",
            content=text or None,
            tool_calls=calls,
            reasoning_content=readable or None,
            reasoning_blocks=canonical_json(kept) if kept else None,
        )
        usage_obj = as_object(data.get("usage"))
        counts = read_usage({"usage": usage_obj})
        raw: dict[str, Any] = {
            "usage": usage_obj,
            "provider": "anthropic",
            "response_id": data.get("id"),
            "latency_ms": latency_ms,
        }
        if isinstance(data.get("diagnostics"), dict):  # an object, as documented; anything else is dropped
            raw["diagnostics"] = data["diagnostics"]
        if isinstance(data.get("context_management"), dict):  # the edits the server applied, verbatim
            raw["context_management"] = data["context_management"]
        compactions = [b for b in content if b.get("type") == "compaction"]
        if compactions:
            raw["compactions"] = compactions
        usage = Usage(
            prompt_tokens=counts["prompt_tokens"],
            completion_tokens=counts["completion_tokens"],
            cached_tokens=counts["cached_tokens"],
            raw=raw,
        )
        stop = data.get("stop_reason")
        model = data.get("model")
        return Completion(
            message=message,
            usage=usage,
            finish_reason=_FINISH.get(stop, stop) if isinstance(stop, str) else None,
            model=model if isinstance(model, str) else None,
        )

    # -- failures ---------------------------------------------------------------------------

    def _failure(self, exc: anthropic.AnthropicError) -> _Failure:
        url = self.shown_url
        too_large = next((e for e in _chain(exc) if isinstance(e, ReplyTooLarge)), None)
        if too_large is not None:  # the SDK wraps what the bounded client raised as a connection error
            return _Failure(too_large, retryable=False, reason="the reply is too large", cause=exc)
        if isinstance(exc, anthropic.APITimeoutError) or _deadline_of(exc) is not None:
            return out_of_time(self.shown_url, self.timeout, self.max_retries + 1, exc)
        if isinstance(exc, anthropic.APIConnectionError):
            inner = redact(_cause(exc))
            return _Failure(
                BackendUnavailable(
                    f"cannot connect to {url} ({inner}): check the base URL (--base-url, the API root without "
                    "/v1, e.g. https://api.anthropic.com) and the network"
                ),
                retryable=True,
                reason=f"cannot connect ({inner})",
                cause=exc,
            )
        if isinstance(exc, anthropic.APIStatusError):
            status = exc.status_code
            _code, etype, message = _error_fields(exc.body, _text(exc.response))
            message = _one_line(message)
            if _is_context_error(None, etype, message, status):
                error: BackendError = ContextWindowExceeded(
                    redact(
                        f"the request does not fit the context window of model {self.model!r} (HTTP {status} from "
                        f"{url}: {message}). Shorten the context or compact the trajectory."
                    )
                )
                return _Failure(error, False, f"HTTP {status}", cause=exc)
            kind = f" {etype}" if etype else ""
            hint = ""
            if status in (401, 403):
                hint = f" Check the API key (passed in, or in ${self.api_key_env})."
            elif status == 404:
                hint = f" Check the base URL (the API root, without /v1) and the model name {self.model!r}."
            elif status == 429:
                hint = (
                    " Anthropic is rate-limiting this key (the retries are used up): wait, or lower the request rate."
                )
            elif status == 529:
                hint = " Anthropic's API is overloaded (the retries are used up): retry later."
            elif status >= 500:
                hint = " The service failed on this request: retry later."
            elif status == 400:
                hint = " The request was refused as invalid: the message says which field."
            else:
                hint = redirect_hint(status, exc.response.headers)
            retryable, wait = should_retry(status, exc.response.headers)
            return _Failure(
                BackendError(redact(f"{url} returned HTTP {status}{kind}: {message}.{hint}")),
                retryable,
                f"HTTP {status}",
                wait,
                cause=exc,
            )
        return _Failure(
            BackendError(redact(f"request to {url} failed: {_one_line(str(exc))}")),
            False,
            type(exc).__name__,
            cause=exc,
        )


def _messages(rest: list[Message]) -> list[dict[str, Any]]:
    """The conversation as Messages API turns: tool results in the next user turn (consecutive
    ones merged), thinking blocks first in their assistant turn, same-role turns merged."""
    out: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for m in rest:
        if m.role == "assistant":
            blocks: list[dict[str, Any]] = []
            if m.reasoning_blocks:
                blocks.extend(json.loads(m.reasoning_blocks))
            if m.content:
                blocks.append({"type": "text", "text": m.content})
            for tc in m.tool_calls:
                try:
                    args = tc.parsed_arguments()
                except ValueError:
                    args = {}
                blocks.append({"type": "tool_use", "id": tc.id, "name": tc.name, "input": args})
            if not blocks:
                blocks.append({"type": "text", "text": "(no answer)"})
            add("assistant", blocks)
        elif m.role == "tool":
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": m.tool_call_id}
            if m.content:
                result["content"] = m.content
            add("user", [result])
        else:  # a user message, or a later system message (the Messages API has one system prompt)
            add("user", [{"type": "text", "text": m.content or "(empty)"}])
    return out


def _volatile_tail(previous: list[str] | None, current: list[str], frozen_end: int) -> int:
    """How many of the previous request's last blocks this one did not reproduce, when the
    rest of it came back unchanged: a tail the caller rewrites on every call (ctxwright's
    status bar in ``replace`` mode). The next request will most likely replace this request's
    last as many blocks too, so the trajectory's breakpoint goes before them. 0 when the
    previous request came back whole (append-only), or when more changed than a short tail
    (a compaction, an edit: then nothing is learned)."""
    if previous is None:
        return 0
    common = 0
    for a, b in zip(previous, current, strict=False):
        if a != b:
            break
        common += 1
    dropped = len(previous) - common
    if common <= frozen_end + 1 or not 0 < dropped <= _MAX_VOLATILE_TAIL:
        return 0
    return dropped


def _refuses_diagnostics(failure: _Failure, betas: tuple[str, ...] = ()) -> bool:
    """An HTTP 400 whose message names the diagnostics field or the beta header: the server
    does not take cache diagnostics (Anthropic answers an unknown field or beta with 400).
    One that names a beta of the context management asked for is about that, not diagnostics."""
    text = str(failure.error).lower()
    if failure.reason != "HTTP 400":
        return False
    if "diagnostics" in text or DIAGNOSTICS_BETA in text:
        return True
    return "anthropic-beta" in text and not any(b.lower() in text for b in betas)


def _tool_choice(choice: str) -> dict[str, Any]:
    if choice == "auto":
        return {"type": "auto"}
    if choice == "required":
        return {"type": "any"}
    if choice == "none":
        return {"type": "none"}
    return {"type": "tool", "name": choice}


#: What to check when a reply is not a Messages API reply. Not the OpenAI advice: the Anthropic
#: SDK adds /v1/messages itself, so a base URL ending in /v1 asks for /v1/v1/messages.
MALFORMED_HINT = (
    "Check that the base URL is the API root of a server of the Anthropic Messages API, without /v1 "
    "(e.g. https://api.anthropic.com), and that no proxy in between rewrites the replies."
)


def _malformed(message: str) -> MalformedResponse:
    """A :class:`MalformedResponse` ending with the Anthropic advice (:data:`MALFORMED_HINT`)."""
    return MalformedResponse(message, hint=MALFORMED_HINT)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _text(response: Any) -> str:
    try:
        return response.text
    except Exception:  # a streamed error body that was never read
        return ""
