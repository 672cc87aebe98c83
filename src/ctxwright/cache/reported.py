"""What a provider reported about its cache for one call, read once from ``Usage.raw``.

Why one reader: the verdict (``cache/verdict.py``), the expiry rules (``cache/expiry.py``), the
report and ``ctxwright audit`` all need the same few facts -- tokens read from and written to
the cache, the provider's miss reason, the TTL, when the request was sent, the breakpoints and
the routing key. ``Usage.raw`` holds them in the layout every provider-caching backend writes
(``raw["usage"]``, ``raw["provider"]``, ``raw["diagnostics"]``, ``raw["cache"]``); the token
counts themselves are read by ``core/usage.py`` alone, in one call (``raw_cache_usage``: which
provider's shape, then its counts), so no provider's usage fields are parsed here.

Provider behaviour read here:

* Anthropic's cache diagnostics (a request naming ``diagnostics.previous_message_id``) answers
  ``diagnostics.cache_miss_reason`` -- ``null`` when nothing diverged, else an object whose
  ``type`` is ``model_changed``, ``system_changed``, ``tools_changed``, ``messages_changed``,
  ``previous_message_not_found`` or ``unavailable``, with ``cache_missed_input_tokens``.
* OpenAI Responses diagnostics against a named earlier response: read the same way (a reason
  string or an object with ``type``/``reason``).
* A gateway that routes one model name to several providers (OpenRouter) names the one that
  served each call in its answer's ``provider`` field; kept as ``raw["served_by"]``: each
  provider keeps its own cache, so a switch misses it whatever the bytes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ctxwright.core.usage import CacheUsage, as_object, first_int, raw_cache_usage

#: The provider's miss reasons that name the part of the request that changed.
REASON_SEGMENT: dict[str, str] = {
    "model_changed": "options",
    "system_changed": "system",
    "tools_changed": "tools",
    "messages_changed": "messages",
}


@dataclass(frozen=True)
class CacheTokens:
    """Tokens of one call by how the provider billed them (``None``: it did not say)."""

    cache_read: int | None
    cache_write: int | None
    uncached: int | None
    output: int | None


def cache_tokens(usage: CacheUsage | None) -> CacheTokens:
    """The call's tokens as ``core/usage.py`` read them (writes split by TTL and added up here,
    OpenAI's cached tokens never counted twice inside its input count); no usage read at all
    is all unknown."""
    if usage is None:
        return CacheTokens(None, None, None, None)
    u = usage
    return CacheTokens(
        cache_read=u.cache_read,
        cache_write=u.cache_write_5m + u.cache_write_1h,
        uncached=u.uncached_input,
        output=u.output,
    )


@dataclass(frozen=True)
class Reported:
    """One call's cache facts as the backend recorded them in ``Usage.raw``."""

    provider: str | None = None
    tokens: CacheTokens = CacheTokens(None, None, None, None)
    #: the provider's miss reason (``system_changed``, ...), ``None``: it gave none
    miss_reason: str | None = None
    #: tokens the provider says missed
    missed_tokens: int | None = None
    #: the request asked for diagnostics (so a ``None`` reason means "nothing diverged")
    diagnosed: bool = False
    ttl: str | None = None
    ttl_s: float | None = None
    sent_at: float | None = None
    minimum_tokens: int | None = None
    prefix_tokens: int | None = None
    #: (block index, tokens of the prefix ending there) of each breakpoint, in prompt order;
    #: the tokens are ``None`` where nobody counted them (a breakpoint read from a log)
    breakpoints: tuple[tuple[int, int | None], ...] = ()
    routing_key: str | None = None
    #: a keep-warm refresh (``cache/expiry.py``), not a trajectory request
    keep_warm: bool = False
    #: the provider a gateway says served the call (its answer's ``provider``), ``None``: not said
    served_by: str | None = None

    @property
    def known(self) -> bool:
        """The backend recorded the provider's cache layout at all."""
        return self.provider is not None


def _number(v: Any) -> float | None:
    """A finite number, not negative (a TTL, a send time); anything else is unknown. A stored
    ``inf`` or NaN would make every age computed from it infinite, and its print fail."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not -1e15 < v < 1e15:
        return None  # NaN fails the range test too; an int of 400 digits never reaches float()
    f = float(v)
    return f if math.isfinite(f) and 0 <= f < 1e15 else None


def reported(raw: Mapping[str, Any] | None) -> Reported:
    """:class:`Reported` of a call's ``Usage.raw`` (a call of any backend: missing parts stay
    ``None``)."""
    raw = as_object(raw)
    provider = raw.get("provider") if isinstance(raw.get("provider"), str) else None
    # the counts are read only when the call recorded a usage object (llama.cpp's ``timings``
    # alone say nothing of a provider's cache); the shape, named or by its fields, is core/usage's
    read = raw_cache_usage(raw) if as_object(raw.get("usage")) else None
    diag_value = raw.get("diagnostics")
    diag = as_object(diag_value)
    reason_value = diag.get("cache_miss_reason", diag.get("reason"))
    reason: str | None = None
    missed: int | None = None
    if isinstance(reason_value, str):
        reason = reason_value
    elif isinstance(reason_value, dict):
        kind = reason_value.get("type") or reason_value.get("reason")
        reason = kind if isinstance(kind, str) else None
        missed = first_int(reason_value.get("cache_missed_input_tokens"), reason_value.get("missed_tokens"))
    if missed is None:
        missed = first_int(diag.get("cache_missed_input_tokens"), diag.get("missed_tokens"))
    cache = as_object(raw.get("cache"))
    bps: list[tuple[int, int | None]] = []
    for bp in cache.get("breakpoints") or ():
        if isinstance(bp, dict):
            block, tokens = first_int(bp.get("block")), first_int(bp.get("tokens"))
            if block is not None:
                bps.append((block, tokens))
    key = cache.get("routing_key")
    ttl = cache.get("ttl")
    return Reported(
        provider=provider,
        tokens=cache_tokens(read[1] if read is not None else None),
        miss_reason=reason,
        missed_tokens=missed,
        diagnosed=isinstance(diag_value, dict),
        ttl=ttl if isinstance(ttl, str) else None,
        ttl_s=_number(cache.get("ttl_s")),
        sent_at=_number(cache.get("sent_at")),
        minimum_tokens=first_int(cache.get("minimum_tokens")),
        prefix_tokens=first_int(cache.get("prefix_tokens")),
        breakpoints=tuple(bps),
        routing_key=key if isinstance(key, str) else None,
        keep_warm=raw.get("keep_warm") is True,
        served_by=served if isinstance(served := raw.get("served_by"), str) and served else None,
    )


__all__ = ["REASON_SEGMENT", "CacheTokens", "Reported", "cache_tokens", "reported"]
