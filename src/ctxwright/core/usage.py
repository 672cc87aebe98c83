"""Reading usage and cached-token counts from any provider's response body.

Provider rule protected: every vendor reports prompt-cache hits in its own field, and a
missing field means the backend did not say -- *unknown*, never zero. One
reader serves the live backends, the offline audit of logs and the cost of a call.

The providers disagree on what their input count includes, which is where cost tools go
wrong (cached tokens counted twice, cache writes priced as plain input):

- Anthropic Messages: ``input_tokens`` *excludes* cache reads and writes; the prompt is
  ``input_tokens + cache_read_input_tokens + cache_creation_input_tokens``, and
  ``cache_creation`` splits the writes by TTL (``ephemeral_5m_input_tokens``,
  ``ephemeral_1h_input_tokens``).
- OpenAI (Responses ``input_tokens``, chat completions ``prompt_tokens``): the count
  *includes* the cached tokens (``*_details.cached_tokens``) and, for models that report
  them, the tokens written to the cache (``cache_write_tokens``).
- DeepSeek: ``prompt_cache_hit_tokens + prompt_cache_miss_tokens == prompt_tokens``.
- llama.cpp server ``timings``: ``prompt_n`` tokens evaluated, ``cache_n`` reused.

:func:`read_cache_usage` turns each into one :class:`CacheUsage` whose parts add up to the
prompt; :func:`read_usage` (the counts the rest of ctxwright stores) is built on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PROVIDERS = ("anthropic", "openai-responses", "openai", "deepseek", "llama.cpp")
"""The usage shapes :func:`read_cache_usage` knows, by the name ``Usage.raw["provider"]`` uses."""


def as_object(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else empty: absent and null fields read alike."""
    return value if isinstance(value, dict) else {}


#: The largest number read as a count: more tokens than any model has seen. A server may send
#: any JSON number; one past this (``1e30``, ``10**400``) is no count, and would otherwise
#: overflow SQLite's 64-bit integers when the call is stored, or every sum priced from it.
MAX_COUNT = 2**53


def first_int(*values: Any) -> int | None:
    """The first value that is a whole number from 0 to :data:`MAX_COUNT` (bools, nulls,
    negative and absurd numbers are not counts, whatever a server sends)."""
    for v in values:
        if isinstance(v, bool):
            continue
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, int) and 0 <= v <= MAX_COUNT:
            return v
    return None


def _count(*values: Any) -> int:
    """The first whole number among ``values``, as a count: absent or negative reads as 0."""
    n = first_int(*values)
    return n if n is not None and n > 0 else 0


@dataclass(frozen=True)
class CacheUsage:
    """One call's tokens, split the way providers bill them; the input parts never overlap.

    ``uncached_input`` is input neither read from nor written to the cache (full input
    price); ``cache_read`` was served from the cache; ``cache_write_5m`` / ``cache_write_1h``
    were written to it with that lifetime (Anthropic prices them differently; providers with
    one write price report them all as ``cache_write_5m``).
    """

    uncached_input: int = 0
    cache_read: int = 0
    cache_write_5m: int = 0
    cache_write_1h: int = 0
    output: int = 0

    def __add__(self, other: CacheUsage) -> CacheUsage:
        """Part by part: a session's usage is the sum of its calls' (costs are linear in it)."""
        return CacheUsage(
            self.uncached_input + other.uncached_input,
            self.cache_read + other.cache_read,
            self.cache_write_5m + other.cache_write_5m,
            self.cache_write_1h + other.cache_write_1h,
            self.output + other.output,
        )

    @property
    def cache_write(self) -> int:
        """Tokens written to the cache, whatever their lifetime."""
        return self.cache_write_5m + self.cache_write_1h

    @property
    def prompt(self) -> int:
        """Every input token of the call, each counted once."""
        return self.uncached_input + self.cache_read + self.cache_write_5m + self.cache_write_1h


def _anthropic(usage: dict[str, Any]) -> CacheUsage:
    """Anthropic: the three input counts are disjoint and add up to the prompt.

    When ``cache_creation`` gives the TTL split it is used; without it every write was a
    5-minute one (the default TTL, and the only one before the split was reported). A split
    that covers less than ``cache_creation_input_tokens`` leaves the rest at 5 minutes, so
    no billed write is lost.
    """
    written = _count(usage.get("cache_creation_input_tokens"))
    split = as_object(usage.get("cache_creation"))
    w1h = _count(split.get("ephemeral_1h_input_tokens"))
    w5m = _count(split.get("ephemeral_5m_input_tokens"))
    if not split:
        w5m, w1h = written, 0
    elif w5m + w1h < written:
        w5m = written - w1h
    return CacheUsage(
        uncached_input=_count(usage.get("input_tokens")),
        cache_read=_count(usage.get("cache_read_input_tokens")),
        cache_write_5m=w5m,
        cache_write_1h=w1h,
        output=_count(usage.get("output_tokens")),
    )


def _openai(total: int, details: dict[str, Any], usage: dict[str, Any], output: int) -> CacheUsage:
    """OpenAI: the input count includes cached and written tokens; take them out of it.

    A read or write count larger than the total (a malformed body) is capped at what is
    left, so the parts still add up to the input count the provider billed.
    """
    read = min(_count(details.get("cached_tokens"), usage.get("cache_read_input_tokens")), total)
    write = min(_count(details.get("cache_write_tokens"), usage.get("cache_write_tokens")), total - read)
    return CacheUsage(uncached_input=total - read - write, cache_read=read, cache_write_5m=write, output=output)


def _deepseek(usage: dict[str, Any]) -> CacheUsage:
    """DeepSeek: hit + miss tokens are the prompt (a miss count absent: prompt minus hits)."""
    hit = _count(usage.get("prompt_cache_hit_tokens"))
    miss = first_int(usage.get("prompt_cache_miss_tokens"))
    if miss is None:
        miss = max(_count(usage.get("prompt_tokens")) - hit, 0)
    return CacheUsage(uncached_input=max(miss, 0), cache_read=hit, output=_count(usage.get("completion_tokens")))


def _llama(timings: dict[str, Any]) -> CacheUsage:
    """llama.cpp server: ``prompt_n`` tokens evaluated, ``cache_n`` reused from the slot."""
    return CacheUsage(
        uncached_input=_count(timings.get("prompt_n")),
        cache_read=_count(timings.get("cache_n")),
        output=_count(timings.get("predicted_n")),
    )


def read_cache_usage(provider: str, usage_obj: dict[str, Any]) -> CacheUsage:
    """The call's :class:`CacheUsage` from ``provider``'s own usage object (its ``usage``;
    for ``"llama.cpp"`` its ``timings``), each input token counted once.

    ``provider`` is one of :data:`PROVIDERS`; any other name reads the object by its shape
    (:func:`usage_provider`), so an OpenAI-compatible server still gets the right split.
    """
    usage = as_object(usage_obj)
    if provider not in PROVIDERS:
        provider = usage_provider({"usage": usage}) or "openai"
    if provider == "anthropic":
        return _anthropic(usage)
    if provider == "deepseek":
        return _deepseek(usage)
    if provider == "llama.cpp":
        return _llama(usage)
    if provider == "openai-responses":
        total = _count(usage.get("input_tokens"), usage.get("prompt_tokens"))
        details = as_object(usage.get("input_tokens_details")) or as_object(usage.get("prompt_tokens_details"))
        return _openai(total, details, usage, _count(usage.get("output_tokens"), usage.get("completion_tokens")))
    total = _count(usage.get("prompt_tokens"), usage.get("input_tokens"))
    details = as_object(usage.get("prompt_tokens_details")) or as_object(usage.get("input_tokens_details"))
    return _openai(total, details, usage, _count(usage.get("completion_tokens"), usage.get("output_tokens")))


def usage_provider(body: dict[str, Any]) -> str | None:
    """Which provider's usage shape a response body carries, from its fields; ``None`` when
    it reports no usage at all.

    The fields decide, not the URL: DeepSeek's hit/miss counts, OpenAI chat's
    ``prompt_tokens`` (an OpenAI-compatible proxy that adds Anthropic-named cache counts
    still reports a prompt that includes them), Anthropic's cache counts, the Responses
    API's ``input_tokens``, and llama.cpp's ``timings`` when no usage object says more.
    """
    usage = as_object(body.get("usage"))
    timings = as_object(body.get("timings"))
    if "prompt_cache_hit_tokens" in usage or "prompt_cache_miss_tokens" in usage:
        return "deepseek"
    if first_int(usage.get("prompt_tokens")) is not None:
        details = as_object(usage.get("prompt_tokens_details"))
        reported = first_int(details.get("cached_tokens"), usage.get("cache_read_input_tokens"))
        if reported is None and first_int(timings.get("cache_n")) is not None:
            return "llama.cpp"  # its OpenAI-style usage says nothing of the cache; its timings do
        return "openai"
    if any(k in usage for k in ("cache_read_input_tokens", "cache_creation_input_tokens", "cache_creation")):
        return "anthropic"
    if first_int(usage.get("input_tokens")) is not None:
        # Without cache fields the two shapes agree: input_tokens is the whole prompt.
        return "anthropic" if body.get("type") == "message" else "openai-responses"
    if timings:
        return "llama.cpp"
    if usage:  # a partial usage (a stream's last event may carry only the output count)
        return "openai-responses" if "output_tokens" in usage else "openai"
    return None


def read_usage(body: dict[str, Any]) -> dict[str, int | None]:
    """``prompt_tokens``, ``completion_tokens`` and ``cached_tokens`` from a response body.

    Read through :func:`read_cache_usage`, so the prompt is every input token once
    (Anthropic's is the sum of its three counts). A count the body does not report is
    ``None``: cache hits are known only when the provider's cache field is there (OpenAI
    ``*_tokens_details.cached_tokens``, DeepSeek ``prompt_cache_hit_tokens``, Anthropic
    ``cache_read_input_tokens``, llama.cpp ``timings.cache_n``).
    """
    usage = as_object(body.get("usage"))
    timings = as_object(body.get("timings"))
    provider = usage_provider(body)
    if provider is None:
        return {"prompt_tokens": None, "completion_tokens": None, "cached_tokens": None}
    parts = read_cache_usage(provider, timings if provider == "llama.cpp" else usage)
    details = as_object(usage.get("prompt_tokens_details")) or as_object(usage.get("input_tokens_details"))
    completion = first_int(usage.get("completion_tokens"), usage.get("output_tokens"), timings.get("predicted_n"))
    if provider == "anthropic":
        has_cache = "cache_read_input_tokens" in usage or "cache_creation_input_tokens" in usage
        cached = first_int(usage.get("cache_read_input_tokens"))
        prompt = parts.prompt if has_cache else first_int(usage.get("input_tokens"))
    elif provider == "deepseek":
        cached = first_int(usage.get("prompt_cache_hit_tokens"), details.get("cached_tokens"))
        prompt = first_int(usage.get("prompt_tokens"))
        prompt = parts.prompt if prompt is None else prompt
    elif provider == "llama.cpp":
        cached = first_int(timings.get("cache_n"))
        prompt = first_int(usage.get("prompt_tokens"))
        if prompt is None and first_int(timings.get("prompt_n")) is not None:
            prompt = parts.prompt
    else:
        cached = first_int(details.get("cached_tokens"), usage.get("cache_read_input_tokens"))
        prompt = first_int(usage.get("prompt_tokens"), usage.get("input_tokens"))
    if cached is not None and prompt is not None and cached > prompt:
        cached = prompt  # a server reporting more cached tokens than its prompt: never a hit ratio above 1
    return {"prompt_tokens": prompt, "completion_tokens": completion, "cached_tokens": cached}


def raw_cache_usage(raw: Any) -> tuple[str, CacheUsage] | None:
    """The provider and :class:`CacheUsage` of a recorded call, from its ``Usage.raw``:
    ``raw["provider"]`` names the usage shape when the backend set it (the provider-caching
    backends do), else the fields of ``raw["usage"]`` (and llama.cpp's ``raw["timings"]``)
    decide. ``None`` when the call recorded no usage object.
    """
    raw = as_object(raw)
    body = {"usage": as_object(raw.get("usage")), "timings": as_object(raw.get("timings"))}
    named = raw.get("provider")
    provider = named if isinstance(named, str) and named in PROVIDERS else usage_provider(body)
    if provider is None or not (body["usage"] or body["timings"]):
        return None
    return provider, read_cache_usage(provider, body["timings"] if provider == "llama.cpp" else body["usage"])


def counts_usage(prompt: int | None, cached: int | None, completion: int | None) -> CacheUsage:
    """A :class:`CacheUsage` from plain counts, for a call whose provider split is unknown:
    ``cached`` of the ``prompt`` read, the rest uncached, no writes (a provider that bills
    writes reports them, and then :func:`raw_cache_usage` has them)."""
    p = max(prompt or 0, 0)
    c = min(max(cached or 0, 0), p)
    return CacheUsage(uncached_input=p - c, cache_read=c, output=max(completion or 0, 0))
