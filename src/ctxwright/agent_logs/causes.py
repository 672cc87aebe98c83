"""Why a logged call read less from the cache than the call before it left there.

The same words as the wire audit (``cache/verdict.py``: ``first``, ``ttl_expired``, ``hit``;
``audit/compare.py``: ``compaction``) where they mean the same thing, and two of the log's own:
``model_changed`` and ``prefix_changed``. An agent's log holds what the provider reported, not
the bytes sent, so the rules judge from the reads, the clock, the model and what the agent
logged between calls. For each call of a chain (a session's main line, or one sub-agent's side
chain: each has its own system prompt, so its own cache entry), first match wins:

``first``
    nothing earlier in the chain to reuse: the call writes the cache.
``hit``
    the reads did not fall: the call read at least what the previous call left in the cache
    (its reads and writes, within :data:`~ctxwright.cache.verdict.TOLERANCE_TOKENS` or
    :data:`~ctxwright.cache.verdict.TOLERANCE_SHARE`, and never more than this call's prompt).
``model_changed``
    the reads fell and the model differs from the previous call's: a cache belongs to one model.
``compaction``
    the reads fell after a compaction (Claude Code's compact boundary or summary, Codex's
    ``compacted`` item): the history was replaced by a summary, so everything after the system
    prompt and tools is new.
``ttl_expired``
    the reads fell after an idle gap longer than the cache's TTL since the previous call (each
    read or write renews it: Anthropic's 5 minutes, or 1 hour when the previous calls wrote
    1-hour entries; OpenAI keeps an entry 5-10 minutes idle, counted as 5).
``prefix_changed``
    the reads fell with none of the above: bytes before the end of the cached prefix changed
    (for Codex, the turn context fields that changed are named). Placed at the token where the
    provider stopped reading; the byte is not in these logs -- neither agent logs the request
    it sent -- so ``ctxwright wrap`` (the proxy) is what names it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ctxwright.agent_logs.records import LoggedCall
from ctxwright.agent_logs.timestamps import duration
from ctxwright.cache.expiry import TTL_SECONDS
from ctxwright.cache.verdict import TOLERANCE_SHARE, TOLERANCE_TOKENS

CAUSES = ("first", "model_changed", "compaction", "ttl_expired", "prefix_changed", "hit")
#: the causes of a fall: what a call lost money to
MISSES = ("model_changed", "compaction", "ttl_expired", "prefix_changed")
#: Anthropic's default TTL, and OpenAI's in-memory retention (``cache/expiry.py``)
DEFAULT_TTL = {"anthropic": TTL_SECONDS["5m"], "openai": TTL_SECONDS["in_memory"]}


@dataclass
class Chain:
    """What one chain's cache held after its latest call."""

    model: str
    #: tokens the latest call left in the cache (read + written; OpenAI: the whole prompt)
    cached: int
    at: float | None
    ttl_s: float
    compacted: str | None = None
    context: str | None = None


@dataclass(frozen=True)
class Judged:
    cause: str
    evidence: str
    #: tokens the call could have read (what the previous call left), and the idle gap before it
    expected: int = 0
    gap_s: float | None = None


def judge(call: LoggedCall, chain: Chain | None) -> Judged:
    """The cause of ``call``'s reads, given its chain's state before it (``None``: the chain's
    first call)."""
    if chain is None:
        return Judged("first", "nothing earlier in this chain to reuse: this call writes the cache")
    u = call.usage
    expected = min(chain.cached, u.prompt)
    gap = call.at - chain.at if call.at is not None and chain.at is not None else None
    slack = max(TOLERANCE_TOKENS, expected * TOLERANCE_SHARE)
    read = u.cache_read
    if read + slack >= expected:
        return Judged("hit", f"read {read:,} of {expected:,} tokens", expected, gap)
    fell = f"reads fell to {read:,} of the {expected:,} tokens the previous call left"
    if call.model and chain.model and call.model != chain.model:
        return Judged("model_changed", f"{fell}: model {chain.model} -> {call.model}", expected, gap)
    if chain.compacted is not None:
        return Judged("compaction", f"{fell}: compacted before it ({chain.compacted})", expected, gap)
    if gap is not None and gap > chain.ttl_s:
        return Judged(
            "ttl_expired", f"{fell}: idle {duration(gap)}, longer than the {duration(chain.ttl_s)} TTL", expected, gap
        )
    if chain.context:
        return Judged("prefix_changed", f"{fell}: the turn context changed ({chain.context})", expected, gap)
    where = (
        f"the prefix changed before token {read:,} (the byte is not in this log: the agent does not log "
        "the request it sent; ctxwright wrap names it)"
    )
    return Judged("prefix_changed", f"{fell}: {where}", expected, gap)


def after(call: LoggedCall, chain: Chain | None) -> Chain:
    """The chain's state after ``call``: what it left in the cache, and for how long."""
    u = call.usage
    default = DEFAULT_TTL.get(call.provider, TTL_SECONDS["5m"])
    if u.cache_write_1h:
        ttl = TTL_SECONDS["1h"]
    elif u.cache_write_5m or chain is None:
        ttl = default
    else:
        ttl = chain.ttl_s
    cached = u.cache_read + u.cache_write if call.provider == "anthropic" else u.prompt
    at = call.at if call.at is not None else (chain.at if chain else None)
    return Chain(model=call.model or (chain.model if chain else ""), cached=cached, at=at, ttl_s=ttl)
