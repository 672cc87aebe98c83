"""Why a provider missed its cache on one call: ctxwright's byte diff and the provider's own
report fused into one cause, with its evidence.

Two witnesses speak about every call. ctxwright's audit (``audit/compare.py``) knows the
bytes: whether the request continues the previous one, and where it first differs. The
provider knows its cache: how many tokens it read, and -- when diagnostics were asked for --
its own miss reason. Neither alone explains a miss: identical bytes can still miss (the
entry expired, the prefix was too short to cache, the lookup did not reach the entry, the
request was routed to another machine), and a provider's ``messages_changed`` says nothing
of *where*. The rules, first match wins (:data:`RULES`):

``first``
    nothing earlier to reuse: the call writes the cache.
``byte_change``
    the bytes changed (segment ``system``/``tools``/``messages``/``options`` and offset):
    everything after the change is re-written. A change explains what follows it, not a miss
    of the unchanged prefix before it: when the provider did not read even that, and one of
    the rules below (provider switch, routing, minimum, lookback, TTL) explains it, that rule decides -- with
    the status bar rewriting the last block on every call, an idle gap is still an expiry.
``provider_switched``
    bytes identical, but a gateway (OpenRouter) served this call by another provider than the
    previous one under the same model name -- the ``provider`` field of its answer changed:
    each provider keeps its own cache, and the new one never saw the prefix.
``routing_key_changed``
    bytes identical, but the routing key differs from the previous call's: OpenAI routes on
    a hash of the prefix plus ``prompt_cache_key``, so another key lands on a cold machine.
``below_minimum``
    bytes identical, but the cacheable prefix is shorter than the model's minimum (Anthropic:
    1,024-4,096 tokens by model; OpenAI: 1,024): the provider never cached it.
``lookback_exceeded``
    Anthropic only: the lookup walks back at most 20 blocks from each breakpoint; the
    previous call's last breakpoint is more than 20 blocks before every breakpoint of this
    one, so the entry it wrote is never found.
``no_breakpoint``
    Anthropic only: the previous call placed no ``cache_control`` breakpoint (``breakpoints=
    "none"``, or a client that never marks one), so it wrote no entry to read: Anthropic
    caches only up to explicit breakpoints.
``ttl_expired``
    bytes identical, idle longer than the TTL since the cache was last written or read
    (Anthropic: 5 minutes or 1 hour; each read renews it).
``provider_reported``
    the provider says it missed (or read less than the reusable prefix), and the bytes say
    nothing changed: its reason is reported as is.
``hit``
    no miss.

``agree`` says whether the two witnesses agree when both speak: ``True`` when the provider's
reason names the segment the byte diff found (``tools_changed`` and a diff in the tools),
``False`` when it names another or names a change the bytes do not show, ``None`` when the
provider gave no reason.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ctxwright.cache.reported import REASON_SEGMENT, Reported
from ctxwright.core.words import gap as gap_text

#: Anthropic's lookup walks back at most this many content blocks from a breakpoint.
LOOKBACK_BLOCKS = 20
#: A read short of the expected prefix by at most this many tokens is still a hit (OpenAI
#: caches in 128-token steps; Anthropic reads up to the last breakpoint it finds).
TOLERANCE_TOKENS = 128
#: ... or by this share of it: ctxwright counts tokens with its own tokenizer, the provider
#: with the model's, and the two differ by a few percent.
TOLERANCE_SHARE = 0.05
#: The audit's causes that keep the bytes of the previous request (``audit/compare.py``).
UNCHANGED = frozenset({"first", "append"})
#: Request options that are not part of the cached prompt: the sampling and length fields
#: (Anthropic and OpenAI cache the prompt, not the generation settings) and the routing key
#: (judged by its own rule, ``routing_key_changed``).
PROMPT_NEUTRAL_OPTIONS = frozenset(
    {
        "max_tokens",
        "max_completion_tokens",
        "max_output_tokens",
        "temperature",
        "top_p",
        "top_k",
        "stop",
        "stop_sequences",
        "seed",
        "stream",
        "metadata",
        "user",
        "prompt_cache_key",
        "prompt_cache_retention",
        "service_tier",
    }
)
#: The provider's reasons that say nothing of what changed.
NEUTRAL_REASONS = frozenset({"previous_message_not_found", "unavailable"})
#: The audit cause -> the segment of the request it names.
CAUSE_SEGMENT: dict[str, str] = {
    "system_changed": "system",
    "tools_changed": "tools",
    "options_changed": "options",
}

CAUSES = (
    "first",
    "byte_change",
    "provider_switched",
    "routing_key_changed",
    "below_minimum",
    "lookback_exceeded",
    "no_breakpoint",
    "ttl_expired",
    "provider_reported",
    "hit",
)


@dataclass(frozen=True)
class ByteEvidence:
    """What ctxwright's byte audit found for one call (built from an ``AuditRow``)."""

    #: the audit's cause: ``first``, ``append``, ``system_changed``, ``tools_changed``, ...
    cause: str
    reusable_prefix_tokens: int = 0
    #: ``msg#3 content @120`` or ``""``
    where: str = ""
    offset: int | None = None
    #: the first divergence's message index (``None``: tools or options; 0: the system prompt)
    message_index: int | None = None
    field: str | None = None

    #: the request options that changed (the audit's ``options_changed``)
    options: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        """The bytes the provider caches changed (the audit's ``options_changed`` names only
        options that are part of the cached prompt: ``audit/compare.py: prompt_options``)."""
        return self.cause not in UNCHANGED

    @property
    def segment(self) -> str | None:
        """``system``, ``tools``, ``options`` or ``messages``; ``None`` when nothing changed."""
        if not self.changed:
            return None
        if self.cause in CAUSE_SEGMENT:
            return CAUSE_SEGMENT[self.cause]
        if self.message_index is None:
            return "options" if self.field == "options" else "tools"
        return "messages"


@dataclass(frozen=True)
class Verdict:
    cause: str
    evidence: str
    agree: bool | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"cause": self.cause, "evidence": self.evidence, "agree": self.agree, **dict(self.details)}


@dataclass(frozen=True)
class Facts:
    """Everything a rule reads: the byte evidence, this call's and the previous call's report."""

    byte: ByteEvidence
    now: Reported
    prev: Reported | None

    @property
    def expected(self) -> int:
        """Tokens the provider could have read: the reusable prefix, cut back to the last
        breakpoint of the previous call inside it (Anthropic caches only up to breakpoints)."""
        reusable = self.byte.reusable_prefix_tokens
        counted = [t for _, t in self.prev.breakpoints if t is not None] if self.prev is not None else []
        if counted:
            if not self.byte.changed:  # an append keeps every earlier breakpoint's prefix
                return min(reusable, max(counted))
            inside = [t for t in counted if t <= reusable]
            return max(inside) if inside else 0
        return reusable

    @property
    def read(self) -> int | None:
        return self.now.tokens.cache_read

    @property
    def short(self) -> bool:
        """The provider read less than the reusable prefix allowed (beyond the tolerance)."""
        expected = self.expected
        slack = max(TOLERANCE_TOKENS, expected * TOLERANCE_SHARE)
        return self.read is not None and self.read + slack < expected

    @property
    def explained(self) -> bool:
        """The provider's miss reason names the segment the byte diff found changed: it is
        that change (Anthropic's diagnostics compare the request's structure with the named
        previous one, so a rewritten tail -- the status bar in ``replace`` mode -- is its
        ``messages_changed``), not a miss of the prefix before it."""
        said = self.now.miss_reason
        return said is not None and self.byte.changed and REASON_SEGMENT.get(said) == self.byte.segment

    @property
    def missed(self) -> bool:
        """The provider read less than it could have, or gave a miss reason the bytes do not
        explain."""
        said = self.now.miss_reason
        if said is not None and said not in NEUTRAL_REASONS and not self.explained:
            return True
        return self.short

    @property
    def same(self) -> str:
        """How the bytes stood, for a rule judging a miss of the reusable prefix: identical,
        or identical up to the change the byte diff found (a changed tail)."""
        if not self.byte.changed:
            return "bytes identical"
        return (
            f"bytes identical up to the change at {self.byte.where}"
            if self.byte.where
            else "bytes identical before the change"
        )

    @property
    def gap(self) -> float | None:
        if self.prev is None or self.prev.sent_at is None or self.now.sent_at is None:
            return None
        return self.now.sent_at - self.prev.sent_at


def _first(f: Facts) -> Verdict | None:
    if f.byte.cause != "first" or (f.prev is not None and f.expected > 0):
        return None
    return Verdict("first", "nothing earlier to reuse: this call writes the cache")


def _byte_change(f: Facts) -> Verdict | None:
    b = f.byte
    if not b.changed:
        return None
    if f.short and f.expected > 0 and any(rule(f) is not None for rule in _UNCHANGED_CAUSES):
        # the provider did not even read the prefix before the change, and an expiry, a cold
        # machine, a short prefix or the lookback explains that: the change (a rewritten
        # tail, say) is not why this call paid for its whole prefix
        return None
    seg = b.segment or "messages"
    at = f" at {b.where}" if b.where else ""
    said = f.now.miss_reason
    agree: bool | None = None
    if said is not None and said not in NEUTRAL_REASONS:
        agree = REASON_SEGMENT.get(said) == seg
    text = f"{b.cause}: the {seg} changed{at}"
    if said is not None:
        text += f"; provider says {said}" + (" (agrees)" if agree else " (disagrees)" if agree is False else "")
    return Verdict("byte_change", text, agree, {"segment": seg, "offset": b.offset, "where": b.where})


def _provider_switched(f: Facts) -> Verdict | None:
    p = f.prev
    before, now = (p.served_by if p is not None else None), f.now.served_by
    if not f.missed or before is None or now is None or before == now:
        return None
    return Verdict(
        "provider_switched",
        f"{f.same}; the gateway served this call by {now!r}, the previous one by {before!r} under the same "
        "model name (each provider keeps its own cache)",
        _agree_unchanged(f),
        {"previous_provider": before, "provider": now},
    )


def _routing(f: Facts) -> Verdict | None:
    p = f.prev
    if not f.missed or p is None or p.routing_key is None or f.now.routing_key is None:
        return None
    if p.routing_key == f.now.routing_key:
        return None
    return Verdict(
        "routing_key_changed",
        f"{f.same}; routing key {p.routing_key!r} -> {f.now.routing_key!r} (another machine, a cold cache)",
        _agree_unchanged(f),
        {"previous_key": p.routing_key, "key": f.now.routing_key},
    )


def _below_minimum(f: Facts) -> Verdict | None:
    minimum = f.now.minimum_tokens
    if not f.missed or minimum is None:
        return None
    cacheable = f.byte.reusable_prefix_tokens
    counted = [t for _, t in f.prev.breakpoints if t is not None] if f.prev is not None else []
    if counted:
        cacheable = max(counted)
    if cacheable >= minimum:
        return None
    return Verdict(
        "below_minimum",
        f"{f.same}; the cacheable prefix is {cacheable} tokens, below the model's minimum of {minimum}",
        _agree_unchanged(f),
        {"prefix_tokens": cacheable, "minimum_tokens": minimum},
    )


def _lookback(f: Facts) -> Verdict | None:
    p = f.prev
    if not f.missed or p is None or not p.breakpoints or not f.now.breakpoints or f.now.provider != "anthropic":
        return None
    last = max(b for b, _ in p.breakpoints)
    ahead = [b - last for b, _ in f.now.breakpoints if b >= last]
    if not ahead or min(ahead) <= LOOKBACK_BLOCKS:
        return None
    return Verdict(
        "lookback_exceeded",
        f"{f.same}; the previous breakpoint (block {last}) is {min(ahead)} blocks before the nearest "
        f"breakpoint of this call, past the {LOOKBACK_BLOCKS}-block lookback",
        _agree_unchanged(f),
        {"previous_block": last, "blocks": min(ahead)},
    )


def _no_breakpoint(f: Facts) -> Verdict | None:
    p = f.prev
    if not f.missed or p is None or p.provider != "anthropic" or p.breakpoints or p.tokens.cache_write:
        return None
    return Verdict(
        "no_breakpoint",
        f"{f.same}; the previous call placed no cache_control breakpoint, so it wrote nothing to read "
        "(Anthropic caches only up to explicit breakpoints)",
        _agree_unchanged(f),
        {},
    )


def _ttl(f: Facts) -> Verdict | None:
    gap, ttl = f.gap, (f.prev.ttl_s if f.prev is not None and f.prev.ttl_s is not None else f.now.ttl_s)
    if not f.missed or gap is None or ttl is None or gap <= ttl:
        return None
    return Verdict(
        "ttl_expired",
        f"{f.same}; idle {gap_text(gap)} since the cache was last used, longer than its TTL of {gap_text(ttl)}",
        _agree_unchanged(f),
        {"gap_s": round(gap, 3), "ttl_s": ttl},
    )


def _provider(f: Facts) -> Verdict | None:
    if not f.missed:
        return None
    said = f.now.miss_reason
    read = f.read
    why = f"provider says {said}" if said else f"provider read {read} of {f.expected} reusable tokens"
    return Verdict(
        "provider_reported",
        f"{f.same} (ctxwright sees no change there); {why}"
        if f.byte.changed
        else f"bytes identical (ctxwright sees no change); {why}",
        _agree_unchanged(f),
        {"reason": said, "read": read, "expected": f.expected, "missed_tokens": f.now.missed_tokens},
    )


def _hit(f: Facts) -> Verdict | None:
    read = f.read
    text = "no miss" if read is None else f"read {read} of {f.expected} reusable tokens"
    return Verdict("hit", text, _agree_unchanged(f) if f.now.diagnosed else None)


def _agree_unchanged(f: Facts) -> bool | None:
    """With identical bytes, a provider reason that names a changed segment disagrees; one
    that names the changed tail the byte diff found says nothing of this cause (``None``)."""
    said = f.now.miss_reason
    if said not in REASON_SEGMENT or f.explained:
        return None
    return False


#: The rules that explain a miss of a prefix whose bytes did not change.
_UNCHANGED_CAUSES: tuple[Callable[[Facts], Verdict | None], ...] = (
    _provider_switched,
    _routing,
    _below_minimum,
    _lookback,
    _no_breakpoint,
    _ttl,
)

#: The rules in order; the first that speaks decides.
RULES: tuple[Callable[[Facts], Verdict | None], ...] = (
    _first,
    _byte_change,
    _provider_switched,
    _routing,
    _below_minimum,
    _lookback,
    _no_breakpoint,
    _ttl,
    _provider,
    _hit,
)


def fuse(byte: ByteEvidence, now: Reported, prev: Reported | None = None) -> Verdict:
    """The one cause of this call's cache outcome, from the byte audit, this call's report and
    the previous call's (the one whose cache entry this call should read)."""
    facts = Facts(byte, now, prev)
    for rule in RULES:
        v = rule(facts)
        if v is not None:
            return v
    raise AssertionError("the hit rule always speaks")  # pragma: no cover


__all__ = ["CAUSES", "LOOKBACK_BLOCKS", "RULES", "ByteEvidence", "Facts", "Verdict", "fuse"]
