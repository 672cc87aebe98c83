"""Reading usage and cached-token counts from any provider's response body.

Provider rule protected: every vendor reports prompt-cache hits in its own field, and a
missing field means the backend did not say -- *unknown*, never zero. One
reader serves both the live OpenAI-compatible backend and the offline audit of logs.
"""

from __future__ import annotations

from typing import Any


def as_object(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else empty: absent and null fields read alike."""
    return value if isinstance(value, dict) else {}


def first_int(*values: Any) -> int | None:
    """The first value that is a whole number (bools and nulls are not counts)."""
    for v in values:
        if isinstance(v, bool):
            continue
        if isinstance(v, int):
            return v
        if isinstance(v, float) and v.is_integer():
            return int(v)
    return None


def read_usage(body: dict[str, Any]) -> dict[str, int | None]:
    """``prompt_tokens``, ``completion_tokens`` and ``cached_tokens`` from a response body.

    Cache hits, in order: OpenAI ``usage.prompt_tokens_details.cached_tokens`` (Responses
    API: ``input_tokens_details.cached_tokens``), DeepSeek ``prompt_cache_hit_tokens``,
    Anthropic ``cache_read_input_tokens``, llama.cpp server ``timings.cache_n``.
    Anthropic's ``input_tokens`` excludes cache reads and writes, so its prompt is the sum.
    """
    usage = as_object(body.get("usage"))
    timings = as_object(body.get("timings"))
    details = as_object(usage.get("prompt_tokens_details")) or as_object(usage.get("input_tokens_details"))
    cached = first_int(
        details.get("cached_tokens"),
        usage.get("prompt_cache_hit_tokens"),
        usage.get("cache_read_input_tokens"),
        timings.get("cache_n"),
    )
    prompt = first_int(usage.get("prompt_tokens"))
    if prompt is None and first_int(usage.get("input_tokens")) is not None:
        if "cache_read_input_tokens" in usage or "cache_creation_input_tokens" in usage:
            parts = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
            prompt = sum((first_int(usage.get(k)) or 0) for k in parts)
        else:  # OpenAI Responses API: input_tokens already includes cached ones
            prompt = first_int(usage.get("input_tokens"))
    if prompt is None and timings:
        n = first_int(timings.get("prompt_n"))
        prompt = n + (first_int(timings.get("cache_n")) or 0) if n is not None else None
    completion = first_int(usage.get("completion_tokens"), usage.get("output_tokens"), timings.get("predicted_n"))
    return {"prompt_tokens": prompt, "completion_tokens": completion, "cached_tokens": cached}
