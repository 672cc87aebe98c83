"""The provider's own cache report in a logged exchange, and the fused verdict of each logged
call: what ``ctxwright audit LOG``, the report of a log and a proxy session show next to the
byte diff.

Why a module: a logged Anthropic or Responses exchange carries what a live backend records in
``Usage.raw`` -- the provider's usage object, its diagnostics, the request's breakpoints, TTL
and cache key -- but spread over the request body, the response (or its stream events) and
the logger's own fields. :func:`provider_raw` gathers them into that one layout, so the
verdict (``cache/verdict.py``) and the expiry rules (``cache/expiry.py``) read a log exactly as
they read a live call. The log rules it follows:

* **when** a request was sent: the proxy's ``proxy.started_at`` (epoch seconds), else a
  logger's ``sent_at``/``timestamp``/``ts``/``created_at`` (epoch seconds or ISO 8601). A log
  without timestamps gets verdicts but no expiry (no gap is known);
* **Anthropic**: ``cache_control`` blocks in prompt order (tools, system, then each message's
  content blocks) are the breakpoints, their ``ttl`` (``"1h"``; default ``"5m"``) the TTL; the
  usage from the response, or from the stream's ``message_start`` and ``message_delta``;
  ``diagnostics`` from the response or ``message_start``'s message;
* **Responses**: ``prompt_cache_key`` is the routing key, ``prompt_cache_retention`` the TTL
  (``24h``; else ``in_memory``, which OpenAI keeps 5-10 minutes idle: judged at 5), the usage
  from the response or ``response.completed``.
* **a gateway's provider**: OpenRouter names the provider that served a call in its answer's
  top-level ``provider`` field (``"Anthropic"``, ``"Google"``; in every chunk of a stream) --
  one model name may be served by several, each with its own cache. It is kept as
  ``served_by``, and a chat completions call that carries it gets a verdict too (its usage's
  cached count, no TTL or breakpoints), so a switch is named ``provider_switched``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ctxwright.audit.compare import AuditRequest, AuditRow
from ctxwright.cache.expiry import TTL_SECONDS
from ctxwright.cache.prices import Pricing
from ctxwright.cache.reported import Reported, reported
from ctxwright.core.usage import as_object
from ctxwright.core.words import gap

_TIME_KEYS = ("sent_at", "timestamp", "ts", "created_at", "time")
#: Send times from 1970 up to the year 10000 are times; a log's ``1e400`` (read as infinity),
#: NaN or ``1e300`` is none: an idle gap computed from it would be infinite or absurd.
LATEST_TIME = 253402300800.0


def sent_at(record: Mapping[str, Any]) -> float | None:
    """When the logged request was sent, in epoch seconds; ``None`` when the log does not say
    (or says something that is no time: not finite, not after 1970, after the year 9999)."""
    for holder in (as_object(record.get("proxy")), record, as_object(record.get("ctxwright"))):
        for key in ("started_at", *_TIME_KEYS):
            v = holder.get(key)
            if isinstance(v, int | float) and not isinstance(v, bool) and 0 < v < LATEST_TIME:
                return float(v)
            if isinstance(v, str):
                try:
                    t = datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp()
                except (ValueError, OverflowError, OSError):
                    continue
                if 0 < t < LATEST_TIME:
                    return t
    return None


def _response_parts(response: Any) -> tuple[dict[str, Any], dict[str, Any] | None, str | None]:
    """(usage object, diagnostics, response id) of a logged response or its stream events."""
    if isinstance(response, dict):
        inner = as_object(response.get("response")) or response
        diag = inner.get("diagnostics")
        rid = inner.get("id")
        return (
            as_object(inner.get("usage")),
            diag if isinstance(diag, dict) else None,
            rid if isinstance(rid, str) else None,
        )
    usage: dict[str, Any] = {}
    diag_out: dict[str, Any] | None = None
    rid_out: str | None = None
    if isinstance(response, list):
        for ev in response:
            if not isinstance(ev, dict):
                continue
            for part in (ev.get("message"), ev.get("response"), ev):
                part = as_object(part)
                if isinstance(part.get("usage"), dict):
                    usage.update({k: v for k, v in part["usage"].items() if v is not None})
                if isinstance(part.get("diagnostics"), dict):
                    diag_out = part["diagnostics"]
                if isinstance(part.get("id"), str) and part is not ev:
                    rid_out = part["id"]
    return usage, diag_out, rid_out


def _blocks(body: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """Every block of an Anthropic body that may carry ``cache_control``, in prompt order
    (tools, system, each message's content blocks), with where it is."""
    blocks: list[tuple[str, Any]] = [(f"tools[{i}]", t) for i, t in enumerate(body.get("tools") or [])]
    system = body.get("system")
    if isinstance(system, list):
        blocks.extend((f"system[{i}]", b) for i, b in enumerate(system))
    elif system:
        blocks.append(("system", system))
    for k, m in enumerate(body.get("messages") or ()):
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):
            blocks.extend((f"msg#{k + 1} block {j}", b) for j, b in enumerate(content))
        else:
            blocks.append((f"msg#{k + 1}", content))
    return blocks


def breakpoint_ttls(body: Mapping[str, Any]) -> tuple[tuple[str, str], ...] | None:
    """The ``cache_control`` breakpoints of an Anthropic body in prompt order, as (where, TTL:
    ``"1h"``, else the default ``"5m"``); ``None`` for a body with none (the messages the audit
    compares have their markers stripped, ``audit/logs.py``, so this is where a TTL is kept)."""
    if "messages" not in body:
        return None
    out = []
    for where, b in _blocks(body):
        cc = b.get("cache_control") if isinstance(b, dict) else None
        if isinstance(cc, dict):
            out.append((where, "1h" if cc.get("ttl") == "1h" else "5m"))
    return tuple(out) or None


def _anthropic_cache(body: Mapping[str, Any]) -> dict[str, Any]:
    bps, ttl = [], None
    for i, (_, b) in enumerate(_blocks(body)):
        cc = b.get("cache_control") if isinstance(b, dict) else None
        if isinstance(cc, dict):
            bps.append({"block": i, "tokens": None})
            t = cc.get("ttl")
            ttl = "1h" if t == "1h" or ttl == "1h" else "5m"
    return {"ttl": ttl, "ttl_s": TTL_SECONDS.get(ttl or ""), "breakpoints": bps, "routing_key": None}


def _responses_cache(body: Mapping[str, Any]) -> dict[str, Any]:
    retention = body.get("prompt_cache_retention")
    ttl = retention if isinstance(retention, str) and retention in TTL_SECONDS else "in_memory"
    key = body.get("prompt_cache_key")
    return {
        "ttl": ttl,
        "ttl_s": TTL_SECONDS[ttl],
        "breakpoints": [],
        "routing_key": key if isinstance(key, str) else None,
    }


def served_by(response: Any) -> str | None:
    """The provider a gateway says served the call: the top-level ``provider`` string of the
    answer, or of the first stream event (or its ``response``/``message``) that has one."""
    events = response if isinstance(response, list) else [response]
    for ev in events:
        for part in (ev, *(as_object(ev).get(k) for k in ("response", "message"))):
            name = as_object(part).get("provider")
            if isinstance(name, str) and name:
                return name
    return None


def provider_raw(record: Mapping[str, Any], body: Mapping[str, Any]) -> dict[str, Any] | None:
    """The logged exchange in ``Usage.raw``'s layout, or ``None`` when it is neither an
    Anthropic Messages nor a Responses call with a response, nor a call a gateway names its
    provider for (other chat completions carry no cache layout to judge)."""
    response = record.get("response")
    if response is None:
        return None
    usage, diag, rid = _response_parts(response)
    gateway = served_by(response)
    if "cache_read_input_tokens" in usage or "cache_creation_input_tokens" in usage:
        provider, cache = "anthropic", _anthropic_cache(body)
    elif "input_tokens_details" in usage or ("input" in body and "messages" not in body):
        provider, cache = "openai-responses", _responses_cache(body)
    elif gateway is not None and "prompt_tokens" in usage:
        key = body.get("prompt_cache_key")
        provider = "openai"
        cache = {"ttl": None, "ttl_s": None, "breakpoints": [], "routing_key": key if isinstance(key, str) else None}
    else:
        return None
    cache["sent_at"] = sent_at(record)
    cache["minimum_tokens"] = None
    out: dict[str, Any] = {"provider": provider, "usage": usage, "response_id": rid, "cache": cache}
    if diag is not None:
        out["diagnostics"] = diag
    if gateway is not None:
        out["served_by"] = gateway
    return out


@dataclass
class LogVerdicts:
    """The fused verdict of each logged call, one cache history per conversation; an
    expiry priced by ``pricing`` (the command's ``--prices``/``--price-*``; the built-in table
    when ``None``)."""

    history: dict[int, list[Reported]] = field(default_factory=dict)
    expiries: list[dict[str, Any]] = field(default_factory=list)
    pricing: Pricing | None = None

    def add(self, req: AuditRequest, row: AuditRow, *, model: str | None = None) -> dict[str, Any] | None:
        from ctxwright.audit.live import cache_record

        if req.provider_cache is None:
            return None
        past = self.history.setdefault(row.conversation, [])
        if model is None and req.options is not None:
            m = req.options.get("model")
            model = m if isinstance(m, str) else None
        rec = cache_record(row, req.provider_cache, past, model=model, pricing=self.pricing)
        past.append(reported(req.provider_cache))
        if rec is not None and rec["cause"] == "ttl_expired":
            self.expiries.append({"index": row.index, "conversation": row.conversation, **rec})
        return rec


#: The verdicts that need no line of their own under a call.
QUIET = frozenset({"hit", "first"})


def describe(rec: Mapping[str, Any]) -> str:
    """One line for a verdict: its cause, evidence, whether the provider agrees, and the
    cost of an expiry."""
    text = f"{rec.get('cause')}: {rec.get('evidence')}"
    cost = as_object(rec.get("expiry_cost"))
    if cost:
        usd = cost.get("extra_usd")
        tokens = cost.get("tokens")
        text += f"; expiry re-wrote {tokens:,} tokens" if isinstance(tokens, int) else ""
        text += f", ${usd:.4f} more than a read" if isinstance(usd, int | float) else " (no price for this model)"
    return text


def age_ttl(rec: Mapping[str, Any] | None) -> str:
    """``"6m40s/5m00s"``: the cache's age when the call was sent and its TTL (``?`` unknown)."""
    if not rec:
        return ""
    age, ttl = rec.get("age_s"), rec.get("ttl_s")
    return f"{_dur(age)}/{_dur(ttl)}"


def _dur(v: Any) -> str:
    if not isinstance(v, int | float) or isinstance(v, bool):
        return "?"
    return gap(v)


def expiry_total(expiries: Sequence[Mapping[str, Any]]) -> tuple[int, float | None]:
    """(tokens re-written, extra USD or ``None`` when no expiry was priced) of ``expiries``."""
    tokens = sum(int(as_object(e.get("expiry_cost")).get("tokens") or 0) for e in expiries)
    priced = [as_object(e.get("expiry_cost")).get("extra_usd") for e in expiries]
    usd = [float(p) for p in priced if isinstance(p, int | float)]
    return tokens, (sum(usd) if usd else None)


__all__ = [
    "QUIET",
    "LogVerdicts",
    "age_ttl",
    "breakpoint_ttls",
    "describe",
    "expiry_total",
    "provider_raw",
    "sent_at",
    "served_by",
]
