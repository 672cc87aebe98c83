"""Backend for OpenAI's Responses API (``POST /v1/responses``), through the official ``openai``
SDK's ``client.responses``.

Stateless on purpose: every call sends the whole input with ``store: false`` and no
``previous_response_id``. ctxwright owns the trajectory -- it renders, compacts, audits and
resumes it -- so the provider's copy of the conversation would be a second, unaudited one.
Reasoning items come back with ``include: ["reasoning.encrypted_content"]`` and are kept
verbatim in ``Message.reasoning_blocks`` (their summaries in ``reasoning_content``), then sent
back as they came: OpenAI refuses a changed encrypted item, and a reasoning model that loses
its reasoning between tool calls re-thinks (and re-bills) it.

How the request is shaped for the cache (developers.openai.com, "Prompt caching"):

* tools are flat function tools (``{"type": "function", "name", "description",
  "parameters"}``) and come first; the system prompt is the first input item (a ``system``
  message with one ``input_text`` block), then the trajectory: user messages, assistant text,
  ``function_call`` items (``call_id`` = ctxwright's tool-call id) and their
  ``function_call_output`` items. The same rendered messages give the same bytes.
* ``prompt_cache_key``: the session lineage's stable key (``cache/routing.py``: the frozen
  prefix's sha256 and the root session id, so a sub-agent inherits its parent's key), or the
  one given (``prompt_cache_key=``). OpenAI routes on the first ~256 tokens plus this key.
* models that take explicit breakpoints (gpt-5.6 and later, per the API reference:
  :data:`BREAKPOINT_MODELS`) get ``prompt_cache_options: {"mode": "implicit", "ttl": ...}`` and
  ``prompt_cache_breakpoint: {"mode": "explicit"}`` on two content blocks: the system prompt's
  (the end of the frozen prefix) and the last markable item before the request's final message
  (a user message or a tool output; assistant text takes no breakpoint). Why the second: a hit
  needs a prefix that ends exactly at a breakpoint written before, and OpenAI's implicit
  breakpoint sits at the newest item -- which, with the status block rendered last, is the one
  item the next request does not repeat. With the implicit one: three writes of the four
  allowed, and there is no content-block lookback limit on this API. On these models a tool
  output is always sent as a list of ``input_text`` blocks (a breakpoint needs a block), so
  its bytes do not change when the marker moves on. Older models get
  ``prompt_cache_retention`` when a retention was asked for (``in_memory`` or ``24h``); the two
  are never sent together (OpenAI refuses it).
* ``diagnostics=True`` (the default; breakpoint models only) names the previous response as
  ``prompt_cache_options.comparison_response_id``; the ``prompt_cache_diagnostics`` that comes
  back is recorded verbatim in ``Usage.raw["diagnostics"]``.

Usage: ``input_tokens`` includes the cached tokens (``input_tokens_details.cached_tokens``),
read by ``core/usage.py``; ``Usage.raw`` holds the provider's usage verbatim and what the
cache needs to explain a call (``raw["cache"]``: TTL, breakpoints, routing key, prefix tokens,
send time by the backend's ``clock``).

Transport, retries and error mapping are the chat-completions backend's (``OpenAIBackend``,
whose subclass this is): the SDK runs with ``max_retries=0`` and every retry is announced;
refused requests keep the provider's words in one line.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

import openai

from ctxwright.backends.openai_compat import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_TIMEOUT_S,
    OpenAIBackend,
    _Assembly,
    _Failure,
    _Fallback,
    _sse_events,
    canonical_prefix,
)
from ctxwright.cache.routing import prefix_sha256, routing_key
from ctxwright.core.messages import Message, ToolCall, Usage, canonical_json
from ctxwright.core.progress import EventSink, Token, ignore
from ctxwright.core.redact import redact
from ctxwright.core.request import ChatRequest, Completion
from ctxwright.core.tokens import TokenCounter
from ctxwright.core.usage import as_object, read_usage
from ctxwright.errors import BackendError, MalformedResponse

__all__ = ["BREAKPOINT_MODELS", "RETENTIONS", "ResponsesBackend", "takes_breakpoints"]

#: Model-name prefixes that take ``prompt_cache_options`` and ``prompt_cache_breakpoint``
#: (the Responses API reference: "Supported for gpt-5.6 and later models"). Others get
#: ``prompt_cache_retention``. ``breakpoints=`` overrides the table for a model it does not know.
BREAKPOINT_MODELS: tuple[str, ...] = ("gpt-5.6", "gpt-5.7", "gpt-5.8", "gpt-5.9", "gpt-6", "gpt-7")

#: The retention values and their lifetimes in seconds. ``in_memory`` and ``24h`` are
#: ``prompt_cache_retention`` (older models; in-memory entries are cleared after 5 to 10 minutes
#: idle: 300 s is the lower bound, what an expiry plan must assume); ``30m`` and ``12h`` are
#: ``prompt_cache_options.ttl`` (breakpoint models).
RETENTIONS: dict[str, float] = {"in_memory": 300.0, "24h": 86400.0, "30m": 1800.0, "12h": 43200.0}
_OPTION_TTLS = ("30m", "12h")

#: OpenAI caches prompts of at least this many tokens.
MINIMUM_TOKENS = 1024


def takes_breakpoints(model: str) -> bool:
    """Whether ``model`` takes explicit breakpoints, by :data:`BREAKPOINT_MODELS`."""
    return model.startswith(BREAKPOINT_MODELS)


class ResponsesBackend(OpenAIBackend):
    """A model behind OpenAI's Responses API (the module docstring says what is sent)."""

    name = "openai-responses"

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
        retention: str | None = None,
        breakpoints: bool | None = None,
        diagnostics: bool = True,
        include_reasoning: bool = True,
        context_management: list[dict[str, Any]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(
            model,
            base_url=base_url,
            api_key=api_key,
            api_key_env=api_key_env,
            timeout=timeout,
            max_retries=max_retries,
            context_window=context_window,
            stream=stream,
            routing_header=routing_header,
            prompt_cache_key=prompt_cache_key,
            clock=clock,
        )
        #: explicit breakpoints and prompt_cache_options (gpt-5.6 and later), by the table unless given
        self.breakpoints = takes_breakpoints(model) if breakpoints is None else bool(breakpoints)
        if retention is not None and retention not in RETENTIONS:
            raise ValueError(f"retention {retention!r} is not one of {', '.join(RETENTIONS)}")
        if retention is not None and self.breakpoints != (retention in _OPTION_TTLS):
            wanted = "30m or 12h (prompt_cache_options.ttl)" if self.breakpoints else "in_memory or 24h"
            raise ValueError(f"model {model!r} takes a retention of {wanted}, not {retention!r}")
        self.retention = retention
        self.diagnostics = diagnostics
        self.include_reasoning = include_reasoning
        #: the provider's context management, sent as the request's ``context_management``
        #: (``[{"type": "compaction", "compact_threshold": N}]``, built by
        #: ``compaction/provider.py``); the encrypted ``compaction`` items that come back are kept
        #: verbatim in the assistant message and sent back in its place
        self.context_management = context_management
        self._counter: TokenCounter | None = None
        self._last_response_id: str | None = None

    def routing_key_for(self, request: ChatRequest) -> str:
        """Always a key on this API: the one given, else the lineage's derived key."""
        if self.prompt_cache_key not in (None, "auto"):
            return str(self.prompt_cache_key)
        return routing_key(prefix_sha256(request), self._lineage_root or "")

    @property
    def ttl(self) -> str:
        """The cache lifetime this backend asks for (``in_memory`` when nothing is asked on an
        older model, ``30m`` on a breakpoint model: the API's defaults)."""
        if self.retention is not None:
            return self.retention
        return "30m" if self.breakpoints else "in_memory"

    def body(self, request: ChatRequest, key: str) -> dict[str, Any]:
        """The Responses request body for ``request`` (module docstring)."""
        msgs = request.messages
        marks: set[int] = set()
        if self.breakpoints:
            if msgs and msgs[0].role == "system":
                marks.add(0)
            for i in range(len(msgs) - 2, 0, -1):  # the last markable message before the final one
                if msgs[i].role in ("user", "tool"):
                    marks.add(i)
                    break
        items: list[dict[str, Any]] = []
        for i, m in enumerate(msgs):
            items.extend(_items(m, mark=i in marks, reasoning=self.include_reasoning, blocks=self.breakpoints))
        items = _from_last_compaction(items)
        body: dict[str, Any] = {"model": self.model, "input": items, "store": False}
        if request.tools:
            body["tools"] = [
                {"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters}
                for t in request.tools
            ]
            choice = request.tool_choice
            body["tool_choice"] = (
                choice if choice in ("auto", "required", "none") else {"type": "function", "name": choice}
            )
        if self.include_reasoning:
            body["include"] = ["reasoning.encrypted_content"]
        if request.max_tokens is not None:
            body["max_output_tokens"] = request.max_tokens
        if request.temperature is not None:
            body["temperature"] = request.temperature
        body["prompt_cache_key"] = key
        if self.breakpoints:
            opts: dict[str, Any] = {"mode": "implicit", "ttl": self.ttl}
            if self.diagnostics and self._last_response_id is not None:
                opts["comparison_response_id"] = self._last_response_id
            body["prompt_cache_options"] = opts
        elif self.retention is not None:
            body["prompt_cache_retention"] = self.retention
        if self.context_management is not None:
            body["context_management"] = [dict(e) for e in self.context_management]
        body.update(request.extra)
        return body

    def compact(self, request: ChatRequest) -> dict[str, Any]:
        """``POST /responses/compact`` on the request's input (the standalone compaction): the
        reply as sent, whose ``output`` (the user messages, then one encrypted ``compaction``
        item) replaces that input in a later request. Read from the raw JSON, so the item's
        bytes are the server's."""
        key = self.routing_key_for(request)
        body = self.body(request, key)
        try:
            raw = self._client.responses.with_raw_response.compact(
                model=body["model"], input=body["input"], extra_body={"prompt_cache_key": key}
            )
            data = json.loads(raw.text)
        except openai.OpenAIError as exc:
            raise self._failure(exc).error from exc
        except json.JSONDecodeError as exc:
            raise MalformedResponse(
                f"{self.shown_url} answered /responses/compact with a body that is not JSON"
            ) from exc
        if not isinstance(data, dict) or not isinstance(data.get("output"), list):
            raise MalformedResponse(f"{self.shown_url} answered /responses/compact without an `output` list")
        return data

    def complete(self, request: ChatRequest, *, on_event: EventSink | None = None) -> Completion:
        """One Responses call (streamed when enabled), with announced retries; ``Usage.raw``
        carries the provider's usage and ``raw["cache"]``."""
        sink = on_event or ignore
        key = self.routing_key_for(request)
        body = self.body(request, key)
        headers = {self.routing_header: key} if self.routing_header is not None else {}
        sent_at = self.clock()
        completion = self._with_retries(body, sink, headers)
        raw = dict(completion.usage.raw)
        if self._counter is None:
            self._counter = self.token_counter()
        prefix_tokens = self._counter.count(canonical_prefix(request))
        raw["cache"] = {
            "ttl": self.ttl,
            "ttl_s": RETENTIONS[self.ttl],
            # the system prompt's item, in prompt order after the tools
            "breakpoints": [{"block": len(request.tools), "tokens": prefix_tokens}] if self.breakpoints else [],
            "minimum_tokens": MINIMUM_TOKENS,
            "routing_key": key,
            "prefix_tokens": prefix_tokens,
            "sent_at": sent_at,
        }
        rid = raw.get("response_id")
        if isinstance(rid, str):
            self._last_response_id = rid
        return Completion(
            completion.message, _with_raw(completion.usage, raw), completion.finish_reason, completion.model
        )

    # -- transport: the chat-completions backend's tries, on client.responses ---------------

    def _plain(self, body: dict[str, Any], headers: Mapping[str, str]) -> Completion | _Failure:
        wire = dict(body)
        model = wire.pop("model")
        started = time.perf_counter()
        try:
            # everything but the model goes through ``extra_body``, which the SDK sends untouched
            raw = self._client.responses.with_raw_response.create(
                model=model, extra_body=wire, extra_headers=dict(headers) or None
            )
            text = raw.text
        except openai.OpenAIError as exc:
            return self._failure(exc)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise MalformedResponse(
                f"{self.shown_url} answered HTTP 200 but the body is not JSON ({exc.msg} at position {exc.pos}); "
                f"body starts with {text[:200]!r}"
            ) from exc
        return self._from_response(data, (time.perf_counter() - started) * 1000.0)

    def _streamed(
        self, body: dict[str, Any], sink: EventSink, headers: Mapping[str, str]
    ) -> Completion | _Failure | _Fallback:
        wire = dict(body)
        model = wire.pop("model")
        started = time.perf_counter()
        got = _Assembly()
        final: dict[str, Any] | None = None
        try:
            with self._client.responses.with_streaming_response.create(
                model=model, stream=True, extra_body=wire, extra_headers=dict(headers) or None
            ) as response:
                try:
                    for data in _sse_events(response.iter_lines()):
                        got.chunks += 1
                        final = self._take_event(data, sink) or final
                except (BackendError, openai.OpenAIError):
                    raise
                except Exception as exc:  # the transport failed mid-stream (httpx's own errors)
                    return self._stream_broken(exc, got)
        except openai.OpenAIError as exc:
            return self._failure(exc)
        if got.chunks == 0:
            return _Fallback("the server answered the streamed request with an empty stream")
        if final is None:
            return self._stream_broken(None, got)
        return self._from_response(final, (time.perf_counter() - started) * 1000.0)

    def _take_event(self, data: str, sink: EventSink) -> dict[str, Any] | None:
        """One streamed event: text deltas go to ``sink``; the final response is returned."""
        try:
            event = json.loads(data)
        except json.JSONDecodeError as exc:
            raise MalformedResponse(f"{self.shown_url} sent a streamed event that is not JSON: {data[:200]!r}") from exc
        if not isinstance(event, dict):
            return None
        kind = event.get("type")
        if kind == "response.output_text.delta" and isinstance(event.get("delta"), str):
            sink(Token(text=event["delta"]))
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            resp = event.get("response")
            return resp if isinstance(resp, dict) else None
        elif kind == "error":
            message = event.get("message") or as_object(event.get("error")).get("message") or data[:200]
            raise BackendError(
                redact(f"{self.shown_url} reported an error mid-stream: {' '.join(str(message).split())}")
            )
        return None

    def _from_response(self, data: Any, latency_ms: float) -> Completion:
        """A Responses body as our :class:`Completion`: text, function calls, reasoning items."""
        url = self.shown_url
        if not isinstance(data, dict):
            raise MalformedResponse(f"{url} answered HTTP 200 with a JSON {type(data).__name__}, not an object")
        if data.get("status") == "failed":
            err = as_object(data.get("error"))
            reason = " ".join(str(err.get("message") or err or "no reason given").split())
            raise BackendError(redact(f"{url}: the response failed: {reason}"))
        output = data.get("output")
        if not isinstance(output, list):
            raise MalformedResponse(
                f"{url} answered HTTP 200 without an `output` list; body starts with {str(data)[:200]!r}"
            )
        texts: list[str] = []
        calls: list[ToolCall] = []
        kept: list[dict[str, Any]] = []
        compactions: list[dict[str, Any]] = []
        summaries: list[str] = []
        for item in output:
            if not isinstance(item, dict):
                continue
            kind = item.get("type")
            if kind == "message":
                for part in item.get("content") or ():
                    if isinstance(part, dict) and part.get("type") in ("output_text", "refusal"):
                        texts.append(str(part.get("text") or part.get("refusal") or ""))
            elif kind == "function_call":
                calls.append(
                    ToolCall(
                        id=str(item.get("call_id") or ""),
                        name=str(item.get("name") or ""),
                        arguments=_arguments(item.get("arguments")),
                    )
                )
            elif kind == "compaction":
                kept.append(item)  # verbatim, opaque: it stands for what it compacted from now on
                compactions.append(item)
            elif kind == "reasoning":
                kept.append(item)  # verbatim: its encrypted_content is checked when it comes back
                for s in item.get("summary") or ():
                    if isinstance(s, dict) and isinstance(s.get("text"), str):
                        summaries.append(s["text"])
        message = Message(
            role="assistant",
            content="".join(texts) if texts else None,
            tool_calls=tuple(calls),
            reasoning_content="\n".join(summaries) if summaries else None,
            reasoning_blocks=canonical_json(kept) if kept else None,
        )
        incomplete = as_object(data.get("incomplete_details")).get("reason")
        finish = "tool_calls" if calls else ("length" if incomplete == "max_output_tokens" else "stop")
        counts = read_usage(data)
        raw: dict[str, Any] = {
            "usage": as_object(data.get("usage")),
            "provider": "openai-responses",
            "response_id": data.get("id"),
            "latency_ms": latency_ms,
        }
        if isinstance(data.get("prompt_cache_diagnostics"), dict):
            raw["diagnostics"] = data["prompt_cache_diagnostics"]
        if compactions:
            raw["compactions"] = compactions
        usage = Usage(
            prompt_tokens=counts["prompt_tokens"],
            completion_tokens=counts["completion_tokens"],
            cached_tokens=counts["cached_tokens"],
            raw=raw,
        )
        model = data.get("model")
        return Completion(message, usage, finish, model if isinstance(model, str) else None)

    def _failure(self, exc: openai.OpenAIError) -> _Failure:
        """As the chat backend's, plus the hint a 404 needs here: a server that speaks chat
        completions only has no ``/v1/responses``."""
        failure = super()._failure(exc)
        if isinstance(exc, openai.NotFoundError):
            failure.error = BackendError(
                f"{failure.error} A server without the Responses API answers 404 on /v1/responses: use "
                "--backend openai (chat completions) for it."
            )
        return failure


def _arguments(value: Any) -> str:
    """A ``function_call``'s arguments as the JSON text the tool layer parses: the string the
    API documents, else (a non-conforming server sent an object) its canonical JSON -- never
    Python's repr of it, which no tool could read."""
    if isinstance(value, str):
        return value
    return canonical_json(value) if value is not None else ""


def _with_raw(usage: Usage, raw: dict[str, Any]) -> Usage:
    return Usage(
        usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens, usage.prefill_ms, usage.decode_ms, raw
    )


def _items(m: Message, *, mark: bool, reasoning: bool, blocks: bool) -> list[dict[str, Any]]:
    """The Responses input items for one rendered message (``blocks``: a tool output as a list
    of blocks, which is what can carry a breakpoint)."""
    part: dict[str, Any] = {"type": "input_text", "text": m.content or ""}
    if mark:
        part["prompt_cache_breakpoint"] = {"mode": "explicit"}
    if m.role in ("system", "user"):
        return [{"type": "message", "role": m.role, "content": [part]}]
    if m.role == "tool":
        output: Any = [part] if blocks else (m.content or "")
        return [{"type": "function_call_output", "call_id": m.tool_call_id, "output": output}]
    out: list[dict[str, Any]] = []
    if m.reasoning_blocks:
        kept = json.loads(m.reasoning_blocks)
        # a compaction item always goes back (it stands for the context before it); reasoning
        # items only when they are asked for
        wanted = ("reasoning", "compaction") if reasoning else ("compaction",)
        out.extend(b for b in kept if isinstance(b, dict) and b.get("type") in wanted)
    if m.content:
        out.append({"type": "message", "role": "assistant", "content": m.content})
    for tc in m.tool_calls:
        out.append({"type": "function_call", "call_id": tc.id, "name": tc.name, "arguments": tc.arguments})
    return out


def _from_last_compaction(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The input from the newest ``compaction`` item on, the system message kept first.

    OpenAI's compaction guide: after appending the output items, the items before the most
    recent compaction item may be dropped -- it carries what the next window needs -- which
    keeps requests smaller. The system message stays (it is the frozen prefix, cached apart).
    Without a compaction item the input is returned as it is."""
    last = max((i for i, it in enumerate(items) if it.get("type") == "compaction"), default=-1)
    if last <= 0:
        return items
    head = [items[0]] if items[0].get("type") == "message" and items[0].get("role") == "system" else []
    return [*head, *items[last:]]
