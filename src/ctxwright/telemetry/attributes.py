"""The attributes of ctxwright's spans: pure functions from what was recorded to a flat dict.

Why pure, and apart from the SDK: every name and value a span carries is decided here, from
the typed records the rest of ctxwright already keeps -- a :class:`CallRecord` (a model call of
the harness, or of a stored session), a tool call and its outcome, a :class:`CompactionReport`,
a proxy exchange's request, answer and stored audit. A test checks them without a collector or
the OpenTelemetry SDK installed, and the span code (``spans.py``, ``exchanges.py``) only places
them in time.

Two vocabularies:

* the OpenTelemetry **GenAI semantic conventions** (``gen_ai.*``, maintained in their own
  repository, ``open-telemetry/semantic-conventions-genai``; the strings are those of
  ``opentelemetry.semconv._incubating.attributes.gen_ai_attributes``), so Jaeger, Phoenix or any
  GenAI-aware backend reads the calls, tokens and tools without knowing ctxwright. Input
  tokens *include* the cached ones, as the conventions say (Anthropic reports them apart;
  ``core/usage.py`` adds them back);
* **ctxwright's own** (``ctxwright.*``): what no convention names -- the cache audit's cause, the
  byte where a request first diverged from the previous one and the segment that byte is in
  (read back through ``audit/live.py: stored_evidence``, the evidence ``cache/verdict.py``
  judges, so the span says what ``ctxwright audit`` says), the reusable and cached tokens, the
  token ledger's parts, compactions.

No value here is message text, a tool's arguments or result, a header or a key: content goes on
a span only through ``content.py``, and only when asked for (``otlp_content``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ctxwright.audit.live import stored_evidence
from ctxwright.audit.logs import response_usage
from ctxwright.compaction.pipeline import CompactionReport
from ctxwright.core.messages import ToolCall
from ctxwright.core.records import CallRecord
from ctxwright.core.tokens import Ledger
from ctxwright.core.usage import CacheUsage, as_object, first_int, raw_cache_usage, read_usage

__all__ = [
    "AGENT_NAME",
    "Attributes",
    "cache_attributes",
    "chat_span_name",
    "compaction",
    "error_type",
    "exchange",
    "finish_reasons",
    "ledger_attributes",
    "model_call",
    "provider_name",
    "put",
    "session_run",
    "tool_error_type",
    "tool_run",
    "usage_attributes",
]

#: What an attribute may hold (the OpenTelemetry attribute types).
Value = str | bool | int | float | Sequence[str] | Sequence[int] | Sequence[float] | Sequence[bool]
Attributes = dict[str, Value]

# -- the GenAI semantic conventions' names ------------------------------------------------------
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
CONVERSATION = "gen_ai.conversation.id"
AGENT = "gen_ai.agent.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
MAX_TOKENS = "gen_ai.request.max_tokens"
TEMPERATURE = "gen_ai.request.temperature"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ = "gen_ai.usage.cache_read.input_tokens"
CACHE_CREATION = "gen_ai.usage.cache_creation.input_tokens"
FINISH_REASONS = "gen_ai.response.finish_reasons"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
ERROR_TYPE = "error.type"
#: Phoenix groups traces into sessions by this (OpenInference's name); set beside the
#: conventions' conversation id so a session's runs show as one session there too
SESSION_ID = "session.id"

#: ``gen_ai.agent.name`` of a run's root span
AGENT_NAME = "ctxwright"

#: ``gen_ai.provider.name`` by ctxwright backend. The conventions list ``openai``, ``anthropic``,
#: ``deepseek``...; an OpenAI-compatible server of no listed provider is ``openai`` (the API it
#: speaks), the embedded llama.cpp ``llama_cpp``; a backend of the caller's own keeps its name.
_BY_BACKEND = {
    "embedded": "llama_cpp",
    "anthropic": "anthropic",
    "openai": "openai",
    "openai-responses": "openai",
}
#: ... refined by the usage object's shape (``core/usage.py: usage_provider``): DeepSeek and a
#: llama.cpp server behind the OpenAI-compatible backend (or the proxy) report their own fields
_BY_SHAPE = {
    "deepseek": "deepseek",
    "llama.cpp": "llama_cpp",
    "anthropic": "anthropic",
    "openai": "openai",
    "openai-responses": "openai",
}
#: the proxy's APIs (``proxy/log.py: API_SUFFIXES``) and the provider each one is
_BY_API = {"openai_chat": "openai", "openai_responses": "openai", "anthropic_messages": "anthropic"}


def provider_name(backend: str, usage_shape: str | None = None) -> str:
    """``gen_ai.provider.name`` of a call made through ``backend`` (a backend's ``name``, or a
    proxy API), whose usage object had ``usage_shape`` (``None``: none)."""
    if backend in ("openai", "openai-responses", "external") or backend in _BY_API:
        if usage_shape in ("deepseek", "llama.cpp"):
            return _BY_SHAPE[usage_shape]
        if backend in _BY_API:
            return _BY_API[backend]
        if backend == "external":  # the caller's own loop: what its replies look like, if anything
            return _BY_SHAPE.get(usage_shape or "", "external")
    return _BY_BACKEND.get(backend, backend)


def chat_span_name(model: str | None) -> str:
    """``chat {gen_ai.request.model}``, the conventions' span name (``chat`` without a model)."""
    return f"chat {model}" if model else "chat"


def error_type(error: str | None) -> str | None:
    """``error.type`` of a recorded error ``"ExceptionType: message"``: the type only (the
    message may quote a server's answer)."""
    if not error:
        return None
    head = error.split(":", 1)[0].strip()
    return head[:128] if head and " " not in head else "error"


def put(out: Attributes, key: str, value: Any) -> None:
    """Set ``key`` only to a value an attribute can hold (a ``None`` or a bool standing in for
    a count is left out)."""
    if value is None:
        return
    if isinstance(value, bool | str | int | float):
        out[key] = value
    elif isinstance(value, list | tuple) and value and all(isinstance(v, str) for v in value):
        out[key] = [str(v) for v in value]


def _count(value: Any) -> int | None:
    return first_int(value)


# -- usage ------------------------------------------------------------------------------------------
def usage_attributes(
    prompt: int | None, cached: int | None, completion: int | None, split: tuple[str, CacheUsage] | None
) -> Attributes:
    """The conventions' token counts: ``prompt``, ``cached``, ``completion`` as the backend read
    them (``core/usage.py``: every input token once, cached ones included -- Anthropic's three
    counts added up; a count the provider did not report is ``None`` and left out, never 0), and
    the cache writes from the provider's own ``split`` when it reports them (Anthropic, an
    OpenAI-style ``cache_write_tokens``)."""
    out: Attributes = {}
    put(out, INPUT_TOKENS, _count(prompt))
    put(out, OUTPUT_TOKENS, _count(completion))
    put(out, CACHE_READ, _count(cached))
    if split is not None:
        shape, parts = split
        if shape == "anthropic" or parts.cache_write:
            out[CACHE_CREATION] = parts.cache_write
    return out


# -- ctxwright's own ---------------------------------------------------------------------------------
def cache_attributes(audit: Mapping[str, Any]) -> Attributes:
    """``ctxwright.cache.*`` of a call's stored audit (``audit/live.py: audit_record``, a proxy
    exchange's too): the cause, whether the cached prefix changed, the reusable and cached tokens,
    where the request first diverged (byte offset, message, field, the segment ``cache/verdict.py``
    assigns it) and the provider's cache verdict when there is one. Never the text around the
    divergence (``audit["context"]``)."""
    out: Attributes = {}
    if not audit or not audit.get("cause"):
        if audit.get("problem"):
            out["ctxwright.cache.audited"] = False
        return out
    ev = stored_evidence(audit)
    out["ctxwright.cache.cause"] = ev.cause
    out["ctxwright.cache.prefix_changed"] = ev.changed
    out["ctxwright.cache.reusable_tokens"] = ev.reusable_prefix_tokens
    put(out, "ctxwright.cache.cached_tokens", _count(audit.get("cached_tokens")))
    if ev.offset is not None:
        out["ctxwright.cache.divergence.offset"] = ev.offset
        put(out, "ctxwright.cache.divergence.where", ev.where or None)
        put(out, "ctxwright.cache.divergence.message_index", ev.message_index)
        put(out, "ctxwright.cache.divergence.field", ev.field)
    put(out, "ctxwright.cache.divergence.segment", ev.segment)
    if ev.options:
        out["ctxwright.cache.options_changed"] = list(ev.options)
    verdict = audit.get("cache")
    if isinstance(verdict, Mapping) and verdict.get("cause"):
        out["ctxwright.cache.verdict"] = str(verdict["cause"])
        put(out, "ctxwright.cache.verdict.agree", verdict.get("agree"))
    return out


def ledger_attributes(ledger: Mapping[str, Any]) -> Attributes:
    """``ctxwright.ledger.*``: the request's tokens by part (``core/tokens.py: Ledger``), the
    tool definitions, the total, and the kind of a mismatch with the server's count."""
    out: Attributes = {}
    for part in (*Ledger.PARTS, "tools", "total"):
        put(out, f"ctxwright.ledger.{part}", _count(ledger.get(part)))
    mismatch = ledger.get("mismatch")
    if isinstance(mismatch, Mapping):
        put(out, "ctxwright.ledger.mismatch", mismatch.get("kind"))
    return out


# -- spans ------------------------------------------------------------------------------------------
def model_call(
    record: CallRecord,
    *,
    provider: str,
    finish_reason: str | None = None,
    response_model: str | None = None,
) -> Attributes:
    """A ``chat`` span's attributes: the conventions' request, response and usage, the call's
    error type, and ctxwright's index, timings, cache audit and ledger."""
    out: Attributes = {OPERATION: "chat", PROVIDER: provider}
    put(out, CONVERSATION, record.session_id or None)
    put(out, SESSION_ID, record.session_id or None)
    put(out, REQUEST_MODEL, record.model)
    put(out, RESPONSE_MODEL, response_model)
    put(out, MAX_TOKENS, record.max_tokens)
    put(out, TEMPERATURE, record.temperature)
    split = raw_cache_usage(as_object(record.usage.get("raw")))
    out.update(usage_attributes(record.prompt_tokens, record.cached_tokens, record.completion_tokens, split))
    if finish_reason:
        out[FINISH_REASONS] = [finish_reason]
    put(out, ERROR_TYPE, error_type(record.error))
    out["ctxwright.call.index"] = record.call_index
    put(out, "ctxwright.call.prefill_ms", record.prefill_ms)
    put(out, "ctxwright.call.decode_ms", record.decode_ms)
    put(out, "ctxwright.call.tool_choice", record.tool_choice)
    out.update(cache_attributes(record.audit.raw))
    out.update(ledger_attributes(record.ledger))
    return out


def tool_error_type(content: str) -> str:
    """The error type of a failed tool call's result (``tools/registry.py: error_outcome``'s
    ``{"error": {"type": ...}}``), or ``tool_error`` when the result has another shape (marked,
    offloaded, a tool's own text). Only the type: never the message, arguments or hint."""
    try:
        body = json.loads(content) if content.startswith("{") and len(content) < 1_000_000 else None
    except ValueError:
        body = None
    err = body.get("error") if isinstance(body, dict) else None
    kind = err.get("type") if isinstance(err, dict) else None
    if isinstance(kind, str) and kind and len(kind) <= 64 and kind.replace("_", "").replace(".", "").isalnum():
        return kind
    return "tool_error"


def tool_run(
    call: ToolCall, *, ok: bool, elapsed_ms: float, conversation_id: str | None, error: str | None = None
) -> Attributes:
    """An ``execute_tool`` span's attributes: the tool's name and call id, whether it succeeded
    (``error.type`` when not: :func:`tool_error_type`) and how long it ran."""
    out: Attributes = {
        OPERATION: "execute_tool",
        TOOL_NAME: call.name,
        TOOL_CALL_ID: call.id,
        TOOL_TYPE: "function",
        "ctxwright.tool.ok": ok,
        "ctxwright.tool.elapsed_ms": round(float(elapsed_ms), 3),
    }
    put(out, CONVERSATION, conversation_id)
    put(out, SESSION_ID, conversation_id)
    if not ok:
        out[ERROR_TYPE] = error or "tool_error"
    return out


def compaction(report: CompactionReport, *, conversation_id: str | None, call_index: int | None) -> Attributes:
    """A compaction span's attributes: the tier (``layer``: ``clearing``, ``full_stage1``...),
    the kind of event it recorded (``full`` for both stages), what it changed and the request's
    tokens before and after, the call it ran before and the planner's reason."""
    out: Attributes = {
        "ctxwright.compaction.layer": report.layer,
        "ctxwright.compaction.kind": report.kind or report.layer,
        "ctxwright.compaction.messages_changed": report.messages_changed,
        "ctxwright.compaction.tokens_before": report.tokens_before,
        "ctxwright.compaction.tokens_after": report.tokens_after,
        "ctxwright.compaction.event_seq": report.event_seq,
    }
    put(out, CONVERSATION, conversation_id)
    put(out, SESSION_ID, conversation_id)
    put(out, "ctxwright.call.index", call_index)
    if report.decision is not None:
        put(out, "ctxwright.compaction.reason", str(report.decision.reason))
    return out


def session_run(
    *,
    provider: str,
    model: str | None,
    conversation_id: str | None,
    backend: str,
    stop_reason: str | None = None,
    iterations: int | None = None,
    calls: int | None = None,
    error: str | None = None,
) -> Attributes:
    """The run's root span (``invoke_agent ctxwright``): the agent, its provider and model, the
    session, and how the run ended."""
    out: Attributes = {OPERATION: "invoke_agent", AGENT: AGENT_NAME, PROVIDER: provider, "ctxwright.backend": backend}
    put(out, REQUEST_MODEL, model)
    put(out, CONVERSATION, conversation_id)
    put(out, SESSION_ID, conversation_id)
    put(out, "ctxwright.run.stop_reason", stop_reason)
    put(out, "ctxwright.run.iterations", iterations)
    put(out, "ctxwright.run.calls", calls)
    put(out, ERROR_TYPE, error_type(error))
    return out


# -- a proxied exchange ------------------------------------------------------------------------------
def _max_tokens(body: Mapping[str, Any]) -> int | None:
    return first_int(body.get("max_tokens"), body.get("max_completion_tokens"), body.get("max_output_tokens"))


def finish_reasons(api: str | None, response: Any) -> list[str]:
    """Why the answer ended, as the provider said it: chat's ``finish_reason`` per choice,
    Anthropic's ``stop_reason``, the Responses API's status (its ``incomplete_details.reason``
    when incomplete); read from a body or from a stream's events."""
    found: list[str] = []

    def add(value: Any) -> None:
        if isinstance(value, str) and value and len(value) <= 64 and value not in found:
            found.append(value)

    def from_responses(resp: Mapping[str, Any]) -> None:
        details = as_object(resp.get("incomplete_details"))
        add(details.get("reason") if resp.get("status") == "incomplete" else resp.get("status"))

    bodies = response if isinstance(response, list) else [response]
    for body in bodies:
        if not isinstance(body, dict):
            continue
        if api == "openai_chat":
            for choice in body.get("choices") or ():
                if isinstance(choice, dict):
                    add(choice.get("finish_reason"))
        elif api == "anthropic_messages":
            add(body.get("stop_reason"))
            add(as_object(body.get("delta")).get("stop_reason"))
        elif api == "openai_responses":
            inner = as_object(body.get("response")) or body
            if body.get("type") in (None, "response.completed", "response.incomplete", "response.failed"):
                from_responses(inner)
    return found


def exchange(
    *,
    api: str | None,
    body: Mapping[str, Any],
    response: Any,
    audit: Mapping[str, Any],
    session_id: str,
    call_index: int,
    status: int | None,
    outcome: str,
    streamed: bool,
) -> Attributes:
    """A relayed model call's ``chat`` span attributes (``ctxwright proxy``): the request's model
    and limits from its body, the answer's model, id, finish reasons and usage from the answer
    (a body, or a stream's events merged as ``ctxwright audit`` merges them), the HTTP status and
    the relay's outcome, and the live audit's ``ctxwright.cache.*``."""
    answer = response_usage(response)
    split = raw_cache_usage(answer)
    out: Attributes = {OPERATION: "chat", PROVIDER: provider_name(api or "", split[0] if split else None)}
    put(out, CONVERSATION, session_id)
    put(out, SESSION_ID, session_id)
    model = body.get("model")
    put(out, REQUEST_MODEL, model if isinstance(model, str) else None)
    put(out, RESPONSE_MODEL, answer.get("model") if isinstance(answer.get("model"), str) else None)
    rid = response.get("id") if isinstance(response, dict) else None
    put(out, RESPONSE_ID, rid if isinstance(rid, str) and len(rid) <= 256 else None)
    put(out, MAX_TOKENS, _max_tokens(body))
    temperature = body.get("temperature")
    if isinstance(temperature, int | float) and not isinstance(temperature, bool):
        out[TEMPERATURE] = float(temperature)
    counts = read_usage(answer)
    out.update(usage_attributes(counts["prompt_tokens"], counts["cached_tokens"], counts["completion_tokens"], split))
    reasons = finish_reasons(api, response)
    if reasons:
        out[FINISH_REASONS] = reasons
    put(out, "http.response.status_code", status)
    if status is not None and status >= 400:
        out[ERROR_TYPE] = str(status)
    elif outcome != "complete":
        out[ERROR_TYPE] = outcome
    out["ctxwright.call.index"] = call_index
    put(out, "ctxwright.proxy.api", api)
    out["ctxwright.proxy.outcome"] = outcome
    out["ctxwright.proxy.streamed"] = streamed
    put(out, "ctxwright.proxy.grouped_by", audit.get("grouped_by"))
    out.update(cache_attributes(audit))
    return out
