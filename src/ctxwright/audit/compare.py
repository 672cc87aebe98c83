"""Per-call prefix audit: where each request first differs from the previous one of its
conversation, how much of it a prompt cache could have reused, and how much the backend says
it did reuse.

Provider rule protected: prompt caches reuse only the longest identical prefix (OpenAI in
128-token steps above 1,024 tokens, vLLM in 16-token blocks, llama.cpp token by token).
The audit therefore measures three things per request:

* **reusable** -- the longest common prefix with the *best* earlier request of the log (any
  conversation: a cache holds every request's prefix, whichever conversation sent it), in
  bytes and tokens: the physical maximum any cache could reuse;
* **first divergence** from the previous request *of the same conversation* -- message index
  (the system prompt is message 0), field, byte offset in that field's UTF-8 text, and the
  text around it;
* **cause** -- ``first`` (of its conversation), ``append``, ``system_changed``,
  ``tools_changed``, ``options_changed``, ``history_edited``, ``history_removed``,
  ``compaction`` (a compaction the harness recorded), ``status_replaced`` (the status bar's
  replace mode) or ``other``.

**Options.** ``tool_choice``, ``response_format``, ``parallel_tool_calls`` and the model are
not part of the message bytes, yet a change of them is a change of the cached prompt: several
servers render them into it (llama.cpp's function-calling chat formats write the tool list into
the system message only when ``tool_choice`` is set and not ``"none"``; Anthropic documents that
a changed ``tool_choice`` invalidates the cached messages), and a different model is a cold
cache. A request whose messages only append but whose prompt options changed is
``options_changed``, with the options named. The sampling and length fields (``temperature``,
``max_tokens`` ...: ``cache/verdict.py``'s ``PROMPT_NEUTRAL_OPTIONS``) are not part of any
cached prompt, so a change of only them is an ``append``; the options that changed, these
included, are listed on every row, whatever its cause.

**Conversations.** A log often holds several independent conversations, one after another
or interleaved. Comparing each request with the line before it would call every new
conversation a ``history_edited``. So each request is first assigned to a conversation, by
its messages only (never by the system prompt or tools, so that a changed system prompt stays
a ``system_changed`` of the same conversation):

1. it **continues** an open conversation whose latest request's messages are a prefix of its
   own (equal included): an append, or the same messages under a changed system prompt,
   tool list or option (the longest such prefix wins);
2. else it continues the open conversation whose latest request **shares** the most whole
   messages with it (a sliding window, an edit, a compaction kept the rest) -- except that a
   request made of one message, the same first message as that conversation, is a new run
   of the same task, not a cut of the old one;
3. else it **starts a new conversation**: it is ``first`` of that conversation.

A request with an explicit conversation (a session of a ctxwright export, the live session)
is assigned by it and never by these rules; one marked as following a recorded compaction or
status replacement continues the most recent conversation. Two conversations whose requests are identical so
far cannot be told apart: they are one until they differ.

**Memory.** The audit keeps no request's text except each open conversation's latest request:
the prefix index holds the distinct segments of the recent requests within a byte budget (two
generations: when the young one is full the old one is forgotten), at most
:data:`MAX_OPEN_CONVERSATIONS` conversations are open (the least recently used is closed and
its summary handed on), and the totals are running sums. A log of any length is audited in
memory bounded by those limits, not by its size. Forgetting old requests matches the caches it
models: providers evict a prefix minutes after its last use.

A request is linearised as segments in the order its server renders them
(``core/wire_order.py``): system text and tool definitions -- tools first for Anthropic, whose
cache prefix is tools, system, messages; system first for chat completions and Responses, whose
templates put the tools with the system prompt -- then each message's canonical JSON, so a
changed system prompt on Anthropic keeps its tools reusable and a changed tool list does not
keep its system prompt. The API is the request's ``provider`` (chat completions' order when it
is not known). Whole segments are matched through a hash chain (so
1,000 requests of 50K tokens take one pass), and only the first differing segment is
compared byte by byte. Tokens are counted per distinct segment and memoized, so an
append-only log costs the tokens of its new text only.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxwright.cache.prices import ModelPrice, Pricing, call_cost, held_usage, with_reads
from ctxwright.cache.verdict import PROMPT_NEUTRAL_OPTIONS
from ctxwright.core.incremental import common_prefix_len as shared_len
from ctxwright.core.messages import canonical_json
from ctxwright.core.skills_catalog import is_catalog_message, skills_catalog_tokens
from ctxwright.core.tokens import TokenCounter
from ctxwright.core.usage import CacheUsage, counts_usage
from ctxwright.core.wire_order import arrange, wire_order

_MESSAGE_FIELDS = ("role", "content", "tool_calls", "tool_call_id", "name", "reasoning_content", "reasoning_blocks")

#: bytes of distinct segments the prefix index keeps (two generations of half this each)
DEFAULT_INDEX_BYTES = 64 * 1024 * 1024
#: conversations open at once; the least recently used one beyond this is closed
MAX_OPEN_CONVERSATIONS = 32
#: bytes of latest requests the open conversations may hold together
MAX_OPEN_BYTES = 128 * 1024 * 1024
#: what one index node costs besides its segment's bytes (dict entries, hashes, list slots)
_NODE_OVERHEAD = 400
#: distinct segments whose token count is memoized (by hash) before the memo starts over
TOKEN_MEMO = 8192


@dataclass(frozen=True)
class AuditLimits:
    """Everything the audit of one log keeps is bounded by these, whatever the log's length:
    the prefix index (bytes of distinct segments), the open conversations (count, and bytes of
    their latest requests) and the memoized token counts (segments)."""

    index_bytes: int = DEFAULT_INDEX_BYTES
    open_conversations: int = MAX_OPEN_CONVERSATIONS
    open_bytes: int = MAX_OPEN_BYTES
    token_memo: int = TOKEN_MEMO


def utf8(text: str) -> bytes:
    """UTF-8 bytes of ``text``; a lone surrogate (JSON allows ``"\\ud800"``) is kept, not fatal."""
    return text.encode("utf-8", "surrogatepass")


@dataclass(frozen=True)
class AuditRequest:
    """One request in normalized form. ``messages`` excludes the system prompt."""

    system: str
    tools: Sequence[Any]
    messages: Sequence[dict[str, Any]]
    cached_tokens: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    #: the harness recorded a compaction (or a status replacement) just before this request
    marker: str | None = None
    #: exact reusable tokens by the backend's own count, over the token sequences it held itself
    #: (llama.cpp knows its token lists, replies included); see :func:`reusable_tokens`
    reusable_tokens_hint: int | None = None
    #: the canonical bytes of each message, when the caller has them already (a live session
    #: caches them per message); must equal ``canonical_json(m)`` of ``messages``
    message_bytes: Sequence[bytes] | None = None
    #: :func:`segment_hash` of each of ``message_bytes``, when the caller has them already
    message_hashes: Sequence[bytes] | None = None
    #: the request options besides messages and tools (tool_choice, temperature, ...);
    #: ``None`` when not known, and then never compared
    options: Mapping[str, Any] | None = None
    #: the conversation this request belongs to, when the log says (a session id); ``None``:
    #: decided by the rules of the module docstring
    conversation: str | None = None
    #: a name for that conversation in reports (the session id of an export)
    session: str | None = None
    #: the provider's own split of the prompt (reads, writes by TTL, uncached), when the log
    #: or the recorded call had its usage object (``core/usage.py``); what the cost is priced on
    usage_split: CacheUsage | None = None
    #: whose usage shape that was ("anthropic", "openai-responses", "openai", ...) and the
    #: model the request named: what picks the price (``cache/prices.py``)
    provider: str | None = None
    model: str | None = None
    #: what the provider reported about its cache, in ``Usage.raw``'s layout (``cache/reported.py``):
    #: read from a logged Anthropic or Responses exchange (``audit/provider_log.py``); ``None``: nothing
    provider_cache: Mapping[str, Any] | None = None
    #: the ``cache_control`` breakpoints of an Anthropic body in prompt order, as (where, ttl)
    #: (``tools[2]``, ``system[0]``, ``msg#3 block 1``; ``1h`` or ``5m``): the markers are
    #: stripped from the messages compared above, so a TTL that flips is seen only here
    #: (``audit/provider_log.py``: ``breakpoint_ttls``; the rule ``ttl_changed``); ``None``: not known
    cache_ttls: tuple[tuple[str, str], ...] | None = None


@dataclass(frozen=True)
class Divergence:
    message_index: int | None
    field: str
    byte_offset: int
    role: str | None = None
    before: str = ""
    after: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"message_index": self.message_index, "field": self.field, "byte_offset": self.byte_offset}

    @property
    def where(self) -> str:
        """Where it is, in one place for every reader (the audit table, the stored record, the
        cache verdict, the CI gate): ``msg#i field @byte`` (the system prompt is msg#0),
        ``tools @byte``, or ``options``."""
        if self.field == "options" and self.message_index is None:
            return "options"
        if self.message_index is None:
            return f"{self.field} @{self.byte_offset}"
        return f"msg#{self.message_index} {self.field} @{self.byte_offset}"


@dataclass(frozen=True)
class AuditRow:
    index: int
    prompt_tokens: int
    reusable_prefix_tokens: int
    reusable_prefix_bytes: int
    cached_tokens: int | None
    first_divergence: Divergence | None
    cause: str
    completion_tokens: int | None = None
    #: the conversation's number in the log (0, 1, ... in order of first request)
    conversation: int = 0
    #: request options that differ from the previous request of the conversation
    options_changed: tuple[str, ...] = ()
    #: the log reported this request's prompt size (its usage), rather than it being counted
    usage_known: bool = False
    #: tokens of the skills catalog in the request, messages and tool descriptions
    #: (``core/skills_catalog.py``), by ctxwright's count
    skills_catalog_tokens: int = 0
    #: as :class:`AuditRequest`'s: the provider's split, its shape and the model
    usage_split: CacheUsage | None = None
    provider: str | None = None
    model: str | None = None
    #: the prompt size of the previous request of its conversation (0 for its first): what the
    #: cache would have served had this request extended it (:func:`priced`)
    previous_prompt_tokens: int = 0

    @property
    def cache_usage(self) -> CacheUsage:
        """What the cost is priced on: the provider's own split when the log had it, else
        the counts, with the reusable prefix taken as cached where no cached count was
        reported (:func:`paid_as_cached`)."""
        if self.usage_split is not None:
            return self.usage_split
        paid = paid_as_cached(self.prompt_tokens, self.cached_tokens, self.reusable_prefix_tokens)
        return counts_usage(self.prompt_tokens, paid, self.completion_tokens)

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "conversation": self.conversation,
            "prompt_tokens": self.prompt_tokens,
            "reusable_prefix_tokens": self.reusable_prefix_tokens,
            "reusable_prefix_bytes": self.reusable_prefix_bytes,
            "cached_tokens": self.cached_tokens,
            "first_divergence": self.first_divergence.to_json() if self.first_divergence else None,
            "cause": self.cause,
            "options_changed": list(self.options_changed),
            "skills_catalog_tokens": self.skills_catalog_tokens,
        }


@dataclass(frozen=True)
class Prices:
    """Flat prices per million tokens for every call (``--price-input/--price-cached/
    --price-output``); ``cached`` defaults to ``input`` (no discount) when not given. They
    override the price table (:class:`~ctxwright.cache.prices.Pricing`); a cache write is
    priced as input (the flags have no write price)."""

    input: float
    cached: float | None = None
    output: float = 0.0

    def model_price(self) -> ModelPrice:
        return ModelPrice.flat(self.input, self.cached, self.output)

    @property
    def pricing(self) -> Pricing:
        """These prices as the one pricing object the audit, ``show`` and the report use."""
        return Pricing(flat=self.model_price())

    def cost(self, uncached: int, cached: int, completion: int) -> float:
        """What that many uncached prompt, cached prompt and completion tokens cost, by
        :func:`~ctxwright.cache.prices.call_cost` (the one formula)."""
        return call_cost(CacheUsage(uncached, cached, output=completion), self.model_price())


def as_pricing(prices: Prices | Pricing | None) -> Pricing | None:
    """One pricing object from the flat flags' :class:`Prices` or a :class:`Pricing`."""
    return prices.pricing if isinstance(prices, Prices) else prices


@dataclass(frozen=True)
class RowCost:
    """One request's cost in USD as logged, and had the cache served all it could have
    (:func:`priced`)."""

    cost: float
    if_held: float
    price: ModelPrice

    @property
    def lost(self) -> float:
        """USD the call paid for what its cache did not serve: its cost less its cost had the
        cache held (0 for an append that read all the call before it left)."""
        return max(0.0, self.cost - self.if_held)

    @property
    def lost_shown(self) -> float | None:
        """:attr:`lost` when it shows at the 4 decimals a cost is printed with, else ``None``."""
        return self.lost if self.lost >= LOST_SHOWN_FROM else None


#: the smallest loss printed next to a cost (half of the last of its 4 decimals)
LOST_SHOWN_FROM = 0.00005
#: what a call whose model the price table does not know shows instead of a cost
PRICE_UNKNOWN = "price unknown"


def cost_text(r: RowCost | None) -> str:
    """One call's money in a line: ``$0.0123``, with ``lost $0.0098`` after it when the cache
    missed part of what it could have served, or :data:`PRICE_UNKNOWN` -- never a guessed
    price. The proxy's line and ``ctxwright show`` print it."""
    if r is None:
        return PRICE_UNKNOWN
    text = f"${r.cost:.4f}"
    return text if r.lost_shown is None else text + f" lost ${r.lost_shown:.4f}"


def priced(
    u: CacheUsage,
    reusable: int,
    provider: str | None,
    model: str | None,
    pricing: Prices | Pricing | None,
    previous: int = 0,
) -> RowCost | None:
    """What one call cost, and would have cost had the cache served all it could have,
    priced for its provider and model; ``None`` when it has no price. The one place a call's
    cost is computed, for the audit, the proxy's line, ``show``, the report, ``wrap`` and ``run``.

    "All it could have" is the larger of its ``reusable`` prefix (what it shares with the
    previous request: a miss of that is the cache's failure -- an expiry, a routing miss) and
    ``previous``, the previous request's prompt (up to this one's size: what an append would
    have read back). The second is what a break costs: a timestamp first in the system prompt
    leaves a reusable prefix of a few tokens, yet the whole prompt after it is paid again --
    that is the money the break lost, and the figure users ask for ("$ lost to misses")."""
    pr = as_pricing(pricing)
    p = pr.price(provider, model) if pr is not None else None
    if p is None:
        return None
    could = max(reusable, min(previous, u.prompt))
    return RowCost(call_cost(u, p), call_cost(held_usage(u, could), p), p)


def row_cost(row: AuditRow, pricing: Prices | Pricing | None) -> RowCost | None:
    """The cost of ``row`` by its provider and model (:func:`priced`)."""
    return priced(
        row.cache_usage, row.reusable_prefix_tokens, row.provider, row.model, pricing, row.previous_prompt_tokens
    )


def paid_as_cached(prompt: int, cached: int | None, reusable: int) -> int:
    """Prompt tokens billed at the cached price: the provider's cached count when it gave one,
    else the reusable prefix (what a cache that kept every earlier prefix would have served)."""
    return min(cached if cached is not None else reusable, prompt)


@dataclass
class AuditSummary:
    requests: int = 0
    prompt_tokens: int = 0
    reusable_tokens: int = 0
    cached_tokens: int | None = None
    hit_ratio: float | None = None
    efficiency: float | None = None
    est_cost: float | None = None
    est_cost_if_stable: float | None = None
    #: what the priced requests would have cost had the cache served all it could have: each
    #: request's reusable prefix, or all the previous request left (:func:`priced`)
    est_cost_if_held: float | None = None
    #: requests the costs cover (a request whose model has no price is left out of them)
    priced_requests: int = 0
    #: the prices applied, one line per price (``Pricing.describe``)
    prices_used: tuple[str, ...] = ()
    causes: dict[str, int] = field(default_factory=dict)
    conversations: int = 0
    #: requests whose usage (prompt size) the log reported
    usage_known: int = 0
    #: requests whose cached-token count the log reported
    cached_known: int = 0
    #: how many requests changed each option
    options_changed: dict[str, int] = field(default_factory=dict)
    #: Σ tokens of the skills catalog over the requests, and how many requests had one
    skills_catalog_tokens: int = 0
    skills_catalog_requests: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "conversations": self.conversations,
            "prompt_tokens": self.prompt_tokens,
            "reusable_tokens": self.reusable_tokens,
            "cached_tokens": self.cached_tokens,
            "hit_ratio": self.hit_ratio,
            "efficiency": self.efficiency,
            "est_cost": self.est_cost,
            "est_cost_if_stable": self.est_cost_if_stable,
            "est_cost_if_held": self.est_cost_if_held,
            "priced_requests": self.priced_requests,
            "usage_known": self.usage_known,
            "cached_known": self.cached_known,
            "causes": dict(self.causes),
            "options_changed": dict(self.options_changed),
            "skills_catalog_tokens": self.skills_catalog_tokens,
            "skills_catalog_requests": self.skills_catalog_requests,
        }


def common_prefix_len(a: bytes, b: bytes) -> int:
    """Length of the common prefix of two byte strings, at C speed.

    Compares chunks from the start, doubling their size, and bisects only inside the
    first chunk that differs: the cost follows where the strings part, not how long they
    are, so comparing a 200 KB segment with many siblings that differ early stays cheap.
    """
    n = min(len(a), len(b))
    if a.startswith(b) if len(b) <= len(a) else b.startswith(a):  # no copies
        return n
    lo, step = 0, 64
    while True:  # invariant: a[:lo] == b[:lo]; a difference exists before n
        hi = min(n, lo + step)
        if a[lo:hi] != b[lo:hi]:
            break
        lo, step = hi, step * 2
    while hi - lo > 1:  # a[:lo] == b[:lo], a[:hi] != b[:hi]
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def field_text(value: Any) -> str:
    """A message field as the audit compares it: its text, or its canonical JSON (a list of
    content blocks where a string was is a change of the bytes too)."""
    if value is None:
        return ""
    return value if isinstance(value, str) else canonical_json(value)


def _context(raw: bytes, byte_offset: int, width: int = 40) -> tuple[str, str]:
    before = raw[:byte_offset].decode("utf-8", "ignore")[-width:]
    after = raw[byte_offset:].decode("utf-8", "ignore")[:width]
    return before, after


def _bytes_divergence(a: bytes, b: bytes) -> tuple[int, str, str]:
    """(byte offset, text before, text after) of the first difference of ``a`` (old) and ``b`` (new).

    The offset is moved back to the start of the UTF-8 character it falls in: 周一 and
    周二 share the first byte of their second character, but the change is the whole
    character, and the context must show it rather than drop its broken tail.
    """
    off = common_prefix_len(a, b)
    raw = b if off < len(b) else a
    while 0 < off < len(raw) and raw[off] & 0xC0 == 0x80:  # a continuation byte
        off -= 1
    before, after = _context(b, off)
    return off, before, after


def _text_divergence(old: str, new: str) -> tuple[int, str, str]:
    return _bytes_divergence(utf8(old), utf8(new))


def _field_divergence(index: int, a: dict[str, Any], b: dict[str, Any]) -> Divergence:
    """The first field of message ``index`` that differs between ``a`` (before) and ``b``."""
    keys = list(_MESSAGE_FIELDS) + sorted((set(a) | set(b)) - set(_MESSAGE_FIELDS), key=str)
    for k in keys:
        if a.get(k) != b.get(k):
            off, before, after = _text_divergence(field_text(a.get(k)), field_text(b.get(k)))
            role = b.get("role")
            return Divergence(
                index, str(k), off, role=role if isinstance(role, str) else None, before=before, after=after
            )
    role = b.get("role")
    return Divergence(index, "message", 0, role=role if isinstance(role, str) else None)


def changed_options(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The names of the options that differ (an option set on one side only counts); none
    when either side's options are unknown."""
    if before is None or after is None:
        return ()
    out = []
    for k in set(before) | set(after):
        a, b = before.get(k), after.get(k)
        if a != b and canonical_json(a) != canonical_json(b):  # NaN, 1 vs 1.0: compared as sent
            out.append(str(k))
    return tuple(sorted(out))


def prompt_options(names: Iterable[str]) -> tuple[str, ...]:
    """The options among ``names`` that are part of the cached prompt (the model,
    ``tool_choice``, thinking ...): a change of only the others (``max_tokens``, ``temperature``,
    the routing key, which has its own rule) leaves the bytes a provider caches as they were,
    so it is no ``options_changed`` -- the row still lists it."""
    return tuple(n for n in names if n not in PROMPT_NEUTRAL_OPTIONS)


def _option_text(value: Any) -> str:
    """An option's value, short: a tool_choice that names a function shows as that name."""
    if isinstance(value, Mapping) and isinstance(value.get("function"), Mapping):
        name = value["function"].get("name")
        if isinstance(name, str):
            return f"function {name}"
    return "(not set)" if value is None else canonical_json(value)


def _options_divergence(before: Mapping[str, Any], after: Mapping[str, Any], names: tuple[str, ...]) -> Divergence:
    """The options that changed as a divergence: ``before``/``after`` hold their values (the
    option name too when more than one changed)."""

    def show(opts: Mapping[str, Any]) -> str:
        if len(names) == 1:
            return _option_text(opts.get(names[0]))[:40]
        return "; ".join(f"{k}={_option_text(opts.get(k))}" for k in names)[:60]

    return Divergence(None, "options", 0, before=show(before), after=show(after))


@dataclass(frozen=True)
class _Shape:
    """What the comparison needs of a request besides its messages: hashes, not text."""

    system: str
    tools: bytes  # canonical JSON of the tool list ("[]" when there is none)
    hashes: list[bytes]  # one per message


def _divergence(prev: AuditRequest, p: _Shape, cur: AuditRequest, c: _Shape) -> Divergence | None:
    for part in wire_order(cur.provider):  # system and tools, in the order the server renders them
        if part == "system" and p.system != c.system:
            off, before, after = _text_divergence(p.system, c.system)
            return Divergence(0, "content", off, role="system", before=before, after=after)
        if part == "tools" and p.tools != c.tools:
            off, before, after = _bytes_divergence(p.tools, c.tools)
            return Divergence(None, "tools", off, before=before, after=after)
    ph, ch = p.hashes, c.hashes
    i = shared_len(ph, ch)  # the first message that differs (in C: a long history is mostly shared)
    if i < min(len(ph), len(ch)):
        return _field_divergence(i + 1, prev.messages[i], cur.messages[i])
    if len(ch) < len(ph):
        return Divergence(len(ch) + 1, "message", 0)
    return None


def _classify(
    prev: AuditRequest | None, p: _Shape | None, cur: AuditRequest, c: _Shape, div: Divergence | None, options: bool
) -> str:
    if prev is None or p is None:
        return "first"
    if cur.marker in ("compaction", "status_replaced"):
        return cur.marker
    if div is None:
        return "options_changed" if options else "append"
    if div.field == "tools":
        return "tools_changed"
    if div.message_index == 0:
        return "system_changed"
    i = (div.message_index or 1) - 1  # index into .messages
    if i >= len(c.hashes):
        return "history_removed"
    if c.hashes[i] in p.hashes[i + 1 :]:
        return "history_removed"  # a later message moved up: earlier ones were dropped
    if len(c.hashes) < len(p.hashes) and len(p.hashes) - i > 1 and not set(p.hashes[i:]).intersection(c.hashes):
        # shorter, and none of the messages from the cut on kept: a window of new messages only
        # (``[system, newest question]``), not an edit -- an edit keeps what follows it
        return "history_removed"
    if i < len(p.hashes) and cur.messages[i].get("role") == prev.messages[i].get("role"):
        return "history_edited"
    return "other"


def segment_hash(data: bytes) -> bytes:
    """The hash the audit keys a segment (system text, tool list, one message) by."""
    return hashlib.blake2b(data, digest_size=16).digest()


_h = segment_hash


def _chain_hashes(hashes: Sequence[bytes], known: Sequence[bytes] = ()) -> list[bytes]:
    """``chains[i]``: the hash of segments ``0 .. i-1`` (``b""`` before the first), the key
    under which segment ``i`` hangs in a :class:`PrefixIndex`. ``known`` is a prefix of the
    result already computed (an earlier request with the same leading segments)."""
    chains = list(known[: len(hashes)]) or [b""]
    for i in range(len(chains), len(hashes)):
        chains.append(_h(chains[i - 1] + hashes[i - 1]))
    return chains


def _running(known: list[int], items: Iterable[int]) -> list[int]:
    """``known`` (running sums, extended in place) followed by the running sums of ``items``."""
    acc = known[-1] if known else 0
    for n in items:
        acc += n
        known.append(acc)
    return known


def _tools_bytes(tools: Sequence[Any]) -> bytes:
    return utf8(canonical_json(list(tools)))


def _shape(req: AuditRequest, segments: list[bytes] | None = None) -> _Shape:
    segs = segments if segments is not None else segments_of(req)
    n = len(req.messages)
    return _Shape(req.system, _tools_bytes(req.tools), [_h(s) for s in segs[len(segs) - n :]] if n else [])


def first_divergence(prev: AuditRequest, cur: AuditRequest) -> Divergence | None:
    """Where ``cur`` first differs from ``prev`` in prompt order; ``None`` for a pure append."""
    return _divergence(prev, _shape(prev), cur, _shape(cur))


def classify(prev: AuditRequest | None, cur: AuditRequest, div: Divergence | None) -> str:
    """The cause of the difference between two consecutive requests of one conversation."""
    opts = bool(prompt_options(changed_options(prev.options, cur.options))) if prev is not None else False
    return _classify(prev, _shape(prev) if prev is not None else None, cur, _shape(cur), div, opts)


class PrefixIndex:
    """Every earlier request's segment chain, to find the best earlier match in one pass.

    Each chain node keeps its children's segments sorted, because the longest common
    prefix of a byte string with any member of a sorted set is reached at one of its two
    neighbours in that order: a log of many requests that share only the system prompt
    then costs two comparisons per request, not one per earlier request. ``size`` is the
    memory the stored segments take, roughly, so a caller can bound it.
    """

    def __init__(self) -> None:
        # chain hash -> {next segment hash: next segment bytes}
        self._children: dict[bytes, dict[bytes, bytes]] = {}
        # chain hash -> the same segments, sorted
        self._sorted: dict[bytes, list[bytes]] = {}
        self.size = 0

    def add(
        self,
        segments: Sequence[bytes],
        hashes: Sequence[bytes] | None = None,
        chains: Sequence[bytes] | None = None,
        start: int = 0,
    ) -> None:
        """``start``: the leading segments known to be in the index already (along the same
        chain), which adding again would not change."""
        hashes = hashes if hashes is not None else [_h(s) for s in segments]
        chains = chains if chains is not None else _chain_hashes(hashes)
        children = self._children
        for i in range(start, len(segments)):
            seg, chain, sh = segments[i], chains[i], hashes[i]
            kids = children.get(chain)
            if kids is None:
                kids = children[chain] = {}
                self.size += _NODE_OVERHEAD
            if sh not in kids:
                kids[sh] = seg
                bisect.insort(self._sorted.setdefault(chain, []), seg)
                self.size += len(seg) + _NODE_OVERHEAD

    def match(
        self,
        segments: Sequence[bytes],
        hashes: Sequence[bytes] | None = None,
        chains: Sequence[bytes] | None = None,
        start: int = 0,
    ) -> tuple[int, int]:
        """(whole segments matched, bytes matched inside the next segment). ``start``: the
        leading segments known to match (an earlier request with them was added)."""
        hashes = hashes if hashes is not None else [_h(s) for s in segments]
        chains = chains if chains is not None else _chain_hashes(hashes)
        children = self._children
        for i in range(start, len(segments)):
            kids = children.get(chains[i])
            if not kids:
                return i, 0
            if hashes[i] not in kids:
                return i, self._best_partial(chains[i], segments[i])
        return len(segments), 0

    def _best_partial(self, chain: bytes, seg: bytes) -> int:
        """Longest common prefix of ``seg`` with any child of ``chain`` (its sorted neighbours)."""
        sibs = self._sorted[chain]
        j = bisect.bisect_left(sibs, seg)
        return max(common_prefix_len(seg, sibs[k]) for k in (j - 1, j) if 0 <= k < len(sibs))


class RecentPrefixIndex:
    """A :class:`PrefixIndex` over the recent requests only, in at most ``budget`` bytes.

    Two generations: requests go into the young index; when it holds half the budget it
    becomes the old one and the previous old one is forgotten. A match looks in both, so every
    request of the last half-budget of distinct text is always found, whatever the log's length.
    """

    def __init__(self, budget: int = DEFAULT_INDEX_BYTES) -> None:
        self.budget = budget
        self._young = PrefixIndex()
        self._old: PrefixIndex | None = None
        #: the young index's number; the old one is ``generation - 1``
        self.generation = 0

    @property
    def size(self) -> int:
        return self._young.size + (self._old.size if self._old is not None else 0)

    def match(self, segments: Sequence[bytes], hashes: Sequence[bytes], chains: Sequence[bytes]) -> tuple[int, int]:
        best = self._young.match(segments, hashes, chains)
        if self._old is not None:
            best = max(best, self._old.match(segments, hashes, chains))  # more whole segments = more bytes
        return best

    def add(self, segments: Sequence[bytes], hashes: Sequence[bytes], chains: Sequence[bytes]) -> None:
        self._young.add(segments, hashes, chains)
        self._rotate()

    def _rotate(self) -> bool:
        if self._young.size > self.budget // 2:
            self._old, self._young = self._young, PrefixIndex()
            self.generation += 1
            return True
        return False

    def match_after(
        self, segments: Sequence[bytes], hashes: Sequence[bytes], chains: Sequence[bytes], hint: IndexHint, shared: int
    ) -> tuple[tuple[int, int], tuple[int, int] | None]:
        """:meth:`match` for a request whose first ``shared`` segments are those of the request
        ``hint`` was made for (the last one of its conversation): those are not walked again
        where the index still holds them. Returns the match and the old index's own."""
        start = shared if hint.young == self.generation else 0
        best = self._young.match(segments, hashes, chains, start)
        old_match = None
        if self._old is not None:
            if hint.old == self.generation - 1:  # unchanged since: its walk differs from the shared segments on
                w, p = hint.old_match
                old_match = (w, p) if w < shared else self._old.match(segments, hashes, chains, shared)
            else:
                old_match = self._old.match(segments, hashes, chains)
            best = max(best, old_match)
        return best, old_match

    def add_after(
        self,
        segments: Sequence[bytes],
        hashes: Sequence[bytes],
        chains: Sequence[bytes],
        hint: IndexHint,
        shared: int,
        old_match: tuple[int, int] | None,
    ) -> IndexHint:
        """:meth:`add` after :meth:`match_after` of the same request; returns its hint."""
        self._young.add(segments, hashes, chains, shared if hint.young == self.generation else 0)
        if self._rotate():  # the whole request is in the old index now, the young one is empty
            return IndexHint(None, self.generation - 1, (len(segments), 0))
        old = self.generation - 1 if self._old is not None and old_match is not None else None
        return IndexHint(self.generation, old, old_match or (0, 0))


@dataclass(frozen=True)
class IndexHint:
    """What a :class:`RecentPrefixIndex` knew of one request once it was added, so the next
    request of its conversation -- mostly the same segments -- is matched and added without
    walking those again (a live session's audit would otherwise cost more each call).
    ``young``: the generation of the young index that holds every segment of it (``None``:
    no longer); ``old``: the generation of the old index ``old_match`` was found in."""

    young: int | None = None
    old: int | None = None
    old_match: tuple[int, int] = (0, 0)


def reusable_tokens(reusable: int, counted: int, reported: int | None, hint: int | None) -> int:
    """A request's reusable prefix in the provider's tokens: ``reusable`` of its ``counted``
    tokens (ctxwright's count of canonical JSON: what the earlier requests of the log share with
    it), scaled to the prompt size the provider ``reported`` -- it counts its own rendering, and
    Σcached ÷ Σreusable must compare like with like -- or the backend's exact ``hint`` when that is
    larger. Never more than the prompt.

    Why the larger and not the hint alone: a backend knows only the token sequences it held itself.
    A resumed session's backend held nothing, so its "0 reusable" would hide a whole prompt
    prefilled again (cached 0 of reusable 0 reads as 100% efficient), while the log still holds the
    requests it shares its prefix with. Why the hint at all: where the backend did hold them it
    is exact (llama.cpp's token lists hold its replies too), and the scaled count is an estimate
    that can fall short of what llama.cpp really reused (above 100% efficient).
    """
    if reported is not None and counted:
        reusable = round(reusable * reported / counted)
    if hint is not None:
        reusable = max(reusable, hint)
    return min(reusable, reported if reported is not None else counted)


def segments_of(req: AuditRequest) -> list[bytes]:
    tools = [_tools_bytes(req.tools)] if req.tools else []
    segs = arrange(req.provider, system=[utf8(req.system)], tools=tools, messages=[])
    if req.message_bytes is not None:
        segs.extend(req.message_bytes)
    else:
        segs.extend(utf8(canonical_json(m)) for m in req.messages)
    return segs


# -- running totals -------------------------------------------------------------------------


def cache_ratios(cached: int, prompt: int, reusable: int) -> tuple[float | None, float | None]:
    """(hit ratio, efficiency) = (Σcached ÷ Σprompt, Σcached ÷ Σreusable), over the requests
    whose cached count is known; ``None`` where the divisor is 0."""
    return (round(cached / prompt, 4) if prompt else None, round(cached / reusable, 4) if reusable else None)


class Totals:
    """Running sums over audit rows: the summary of a log (or of one conversation) without
    keeping its rows. Hit ratio = Σcached ÷ Σprompt; efficiency = Σcached ÷ Σreusable, both
    over the requests whose cached count is known. Cost: what the log cost (known cached
    counts; where unknown, the reusable prefix is assumed cached) and what it would have cost
    with a stable prefix (each request reusing all of the previous one of its conversation).
    """

    def __init__(self) -> None:
        self.requests = self.prompt = self.reusable = self.completion = 0
        self.cached = self.cached_known = self.prompt_known = self.reusable_known = self.usage_known = 0
        self.causes: dict[str, int] = {}
        self.options: dict[str, int] = {}
        self.catalog = self.catalog_requests = 0
        # usage sums by (provider, model), as logged / had the cache held / with a stable
        # prefix, so prices can be applied at the end (a cost is linear in the usage)
        self._usage: dict[tuple[str | None, str | None], tuple[CacheUsage, CacheUsage, CacheUsage, int]] = {}

    def add(self, row: AuditRow, prev_prompt: int) -> None:
        """One row; ``prev_prompt`` is the prompt size of the previous request of its
        conversation (0 for its first)."""
        self.requests += 1
        self.prompt += row.prompt_tokens
        self.reusable += row.reusable_prefix_tokens
        self.completion += row.completion_tokens or 0
        self.usage_known += row.usage_known
        self.catalog += row.skills_catalog_tokens
        self.catalog_requests += row.skills_catalog_tokens > 0
        self.causes[row.cause] = self.causes.get(row.cause, 0) + 1
        for name in row.options_changed:
            self.options[name] = self.options.get(name, 0) + 1
        if row.cached_tokens is not None:
            self.cached_known += 1
            self.cached += row.cached_tokens
            self.prompt_known += row.prompt_tokens
            self.reusable_known += row.reusable_prefix_tokens
        u = row.cache_usage
        key = (row.provider, row.model)
        had, held, stable, n = self._usage.get(key, (CacheUsage(), CacheUsage(), CacheUsage(), 0))
        self._usage[key] = (
            had + u,
            held + held_usage(u, max(row.reusable_prefix_tokens, min(prev_prompt, u.prompt))),  # as priced()
            stable + with_reads(u, min(prev_prompt, row.prompt_tokens)),
            n + 1,
        )

    def summary(self, prices: Prices | Pricing | None = None, conversations: int = 1) -> AuditSummary:
        s = AuditSummary(
            requests=self.requests,
            prompt_tokens=self.prompt,
            reusable_tokens=self.reusable,
            causes=dict(self.causes),
            conversations=conversations if self.requests else 0,
            usage_known=self.usage_known,
            cached_known=self.cached_known,
            options_changed=dict(sorted(self.options.items())),
            skills_catalog_tokens=self.catalog,
            skills_catalog_requests=self.catalog_requests,
        )
        if self.cached_known:
            s.cached_tokens = self.cached
            s.hit_ratio, s.efficiency = cache_ratios(self.cached, self.prompt_known, self.reusable_known)
        pricing = as_pricing(prices)
        if pricing is not None:
            cost = if_held = if_stable = 0.0
            used: dict[str, None] = {}
            for (provider, model), (had, held, stable, n) in self._usage.items():
                p = pricing.price(provider, model)
                if p is None:
                    continue
                cost += call_cost(had, p)
                if_held += call_cost(held, p)
                if_stable += call_cost(stable, p)
                s.priced_requests += n
                used[pricing.describe(p)] = None
            if s.priced_requests:
                s.est_cost, s.est_cost_if_held = round(cost, 6), round(if_held, 6)
                s.est_cost_if_stable = round(if_stable, 6)
                s.prices_used = tuple(used)
        return s


def summarize(rows: Sequence[AuditRow], prices: Prices | Pricing | None = None) -> AuditSummary:
    """Session totals of rows already in memory (see :class:`Totals`)."""
    t = Totals()
    last: dict[int, int] = {}
    for r in rows:
        t.add(r, 0 if r.cause == "first" else last.get(r.conversation, 0))
        last[r.conversation] = r.prompt_tokens
    return t.summary(prices, conversations=len(last))


# -- conversations --------------------------------------------------------------------------


@dataclass(frozen=True)
class ConversationSummary:
    """One conversation of a log: where it starts and ends, and its totals."""

    number: int
    session: str | None
    first_request: int
    last_request: int
    summary: AuditSummary

    def to_json(self) -> dict[str, Any]:
        s = self.summary
        return {
            "conversation": self.number,
            "session": self.session,
            "first_request": self.first_request,
            "last_request": self.last_request,
            "requests": s.requests,
            "prompt_tokens": s.prompt_tokens,
            "reusable_tokens": s.reusable_tokens,
            "cached_tokens": s.cached_tokens,
            "hit_ratio": s.hit_ratio,
            "efficiency": s.efficiency,
            "causes": s.causes,
        }


@dataclass(eq=False)
class _Conversation:
    number: int
    key: str | None
    session: str | None
    first_request: int
    prev: AuditRequest
    shape: _Shape
    size: int
    #: the latest request's segment hashes and chain hashes (see :func:`_chain_hashes`)
    hashes: list[bytes] = field(default_factory=list)
    chains: list[bytes] = field(default_factory=list)
    #: per segment of the latest request: its tokens, and the running total of the skills
    #: catalog's tokens up to it -- kept for the segments the next request shares
    tokens: list[int] = field(default_factory=list)
    catalog: list[int] = field(default_factory=list)
    #: per segment: the bytes and the tokens of the segments up to and including it (running
    #: sums, so the request's size and its reusable prefix cost no walk over the history)
    sizes: list[int] = field(default_factory=list)
    token_sums: list[int] = field(default_factory=list)
    index_hint: IndexHint = field(default_factory=IndexHint)
    last_request: int = 0
    last_prompt: int = 0
    totals: Totals = field(default_factory=Totals)
    _hashset: set[bytes] | None = None

    def hashset(self) -> set[bytes]:
        if self._hashset is None:
            self._hashset = set(self.shape.hashes)
        return self._hashset

    def close(self) -> ConversationSummary:
        return ConversationSummary(
            self.number, self.session, self.first_request, self.last_request, self.totals.summary()
        )


class Conversations:
    """The open conversations of a log, and the rules that assign a request to one (see the
    module docstring). Open conversations are kept in least-recently-used order; beyond
    ``max_open`` of them, or ``max_bytes`` of their latest requests, the oldest is closed and
    its summary handed to ``on_close``."""

    def __init__(
        self,
        max_open: int = MAX_OPEN_CONVERSATIONS,
        max_bytes: int = MAX_OPEN_BYTES,
        on_close: Callable[[ConversationSummary], None] | None = None,
    ) -> None:
        self.max_open, self.max_bytes, self.on_close = max_open, max_bytes, on_close
        self._open: dict[int, _Conversation] = {}  # insertion order = least recently used first
        self._by_key: dict[str, int] = {}
        self._bytes = 0
        self.count = 0

    def find(self, req: AuditRequest, hashes: list[bytes]) -> _Conversation | None:
        if req.conversation is not None:
            n = self._by_key.get(req.conversation)
            return self._open.get(n) if n is not None else None
        best: _Conversation | None = None
        if req.marker in ("compaction", "status_replaced") and self._open:  # this conversation, changed
            return next(reversed(self._open.values()))
        longest = -1
        for c in self._open.values():  # rule 1: its latest messages are a prefix of these
            h = c.shape.hashes
            n = len(h)
            if c.key is None and n <= len(hashes) and n >= longest and (not n or h[0] == hashes[0]) and hashes[:n] == h:
                best, longest = c, n
        if best is not None or not hashes:
            return best
        shared_most = 0
        for c in self._open.values():  # rule 2: the most whole messages in common
            h = c.shape.hashes
            if c.key is not None or not h or (len(hashes) == 1 and h[0] == hashes[0]):
                continue
            shared = len(c.hashset().intersection(hashes))
            if shared and shared >= shared_most:
                best, shared_most = c, shared
        return best

    def start(self, req: AuditRequest, shape: _Shape, size: int, index: int) -> _Conversation:
        c = _Conversation(self.count, req.conversation, req.session, index, req, shape, size, last_request=index)
        self.count += 1
        self._open[c.number] = c
        self._bytes += size
        if req.conversation is not None:
            self._by_key[req.conversation] = c.number
        self._evict(keep=c)
        return c

    def update(self, c: _Conversation, req: AuditRequest, shape: _Shape, size: int, index: int) -> None:
        """``req`` is now the latest request of ``c`` (and ``c`` the most recently used)."""
        self._bytes += size - c.size
        c.prev, c.shape, c.size, c.last_request, c._hashset = req, shape, size, index, None
        del self._open[c.number]
        self._open[c.number] = c
        self._evict(keep=c)

    def _evict(self, keep: _Conversation) -> None:
        while len(self._open) > self.max_open or (self._bytes > self.max_bytes and len(self._open) > 1):
            oldest = next(iter(self._open.values()))
            if oldest is keep:
                break
            self._close(oldest)

    def _close(self, c: _Conversation) -> None:
        del self._open[c.number]
        self._bytes -= c.size
        if c.key is not None and self._by_key.get(c.key) == c.number:
            del self._by_key[c.key]
        if self.on_close is not None:
            self.on_close(c.close())

    @property
    def held_bytes(self) -> int:
        """Bytes of the open conversations' latest requests."""
        return self._bytes

    def close_all(self) -> None:
        """Close every open conversation, in order of their first request."""
        for c in sorted(self._open.values(), key=lambda c: c.number):
            self._close(c)


# -- the auditor ----------------------------------------------------------------------------


class Auditor:
    """Audits a sequence of requests incrementally; one instance per session or log.

    ``keep_rows`` keeps every row in :attr:`rows` (a live session shows them); a log of
    millions of requests is audited with it off, each row handed back by :meth:`add` and the
    summary kept as running totals, in memory bounded by ``limits``. ``on_close`` receives each conversation's summary when it
    is closed (see :class:`Conversations`; :meth:`finish` closes the rest).
    """

    def __init__(
        self,
        counter: TokenCounter | None = None,
        *,
        keep_rows: bool = True,
        limits: AuditLimits | None = None,
        on_close: Callable[[ConversationSummary], None] | None = None,
    ) -> None:
        self.limits = limits = limits or AuditLimits()
        self.counter = counter or TokenCounter(cache_size=limits.token_memo)
        self.index = RecentPrefixIndex(limits.index_bytes)
        self.conversations = Conversations(limits.open_conversations, limits.open_bytes, on_close)
        self.keep_rows = keep_rows
        self.rows: list[AuditRow] = []
        self.count = 0
        self.totals = Totals()
        self._seg_tokens: dict[bytes, int] = {}
        self._system: tuple[str, bytes, bytes] | None = None
        self._tools: tuple[Sequence[Any], bytes, bytes] | None = None
        self._tools_catalog: tuple[Sequence[Any], int] | None = None

    def _fixed(self, req: AuditRequest) -> tuple[bytes, bytes, bytes, bytes]:
        """(system bytes, its hash, tool list bytes, its hash): a log repeats one system prompt and
        one tool list on every line (the reader hands back the same tool list object), so
        they are serialized and hashed once, not once per request."""
        system = self._system
        if system is None or system[0] != req.system:
            raw = utf8(req.system)
            system = self._system = (req.system, raw, _h(raw))
        tools = self._tools
        if tools is None or tools[0] is not req.tools:
            raw = _tools_bytes(req.tools)
            tools = self._tools = (req.tools, raw, _h(raw))
        return system[1], system[2], tools[1], tools[2]

    def _count(self, segs: list[bytes], hashes: list[bytes]) -> list[int]:
        """Tokens of each segment, memoized by hash (a repeated segment costs one lookup)."""
        memo = self._seg_tokens
        out = [memo.get(h, -1) for h in hashes]
        for i, n in enumerate(out):
            if n < 0:
                n = out[i] = self.counter.count(segs[i].decode("utf-8", "ignore"))
                if len(memo) >= self.limits.token_memo:
                    memo.clear()
                memo[hashes[i]] = n
        return out

    def _catalog(self, req: AuditRequest, in_messages: int) -> int:
        """Tokens of the skills catalog in ``req``: the tool list's share, once per tool list
        object (a log repeats one), plus ``in_messages`` (from :meth:`_catalog_sums`)."""
        cached = self._tools_catalog
        if cached is None or cached[0] is not req.tools:
            cached = self._tools_catalog = (req.tools, skills_catalog_tokens(self.counter.count, (), req.tools).total)
        return cached[1] + in_messages

    def _catalog_sums(self, req: AuditRequest, head: int, known: list[int]) -> list[int]:
        """Per segment, the skills catalog's tokens in the messages up to it (``core/skills_catalog.py``
        counts a catalog message as its canonical JSON); ``known``: the leading ones, shared with
        the conversation's last request. The head segments (system, tools) hold no message."""
        out = list(known)
        acc = out[-1] if out else 0
        count = self.counter.count
        for i in range(len(out), head + len(req.messages)):
            if i >= head:
                m = req.messages[i - head]
                if is_catalog_message(m.get("role"), m.get("content")):
                    acc += count(canonical_json(m))
            out.append(acc)
        return out

    def add(self, req: AuditRequest) -> AuditRow:
        system, system_h, tools, tools_h = self._fixed(req)
        if req.message_bytes is not None:  # only read: head + msgs below is the copy
            msgs = req.message_bytes if isinstance(req.message_bytes, list) else list(req.message_bytes)
        else:
            msgs = [utf8(canonical_json(m)) for m in req.messages]
        if req.message_hashes is not None and len(req.message_hashes) == len(msgs):
            mh = list(req.message_hashes)
        else:
            mh = [_h(m) for m in msgs]
        has_tools = bool(req.tools)
        head = arrange(req.provider, system=[system], tools=[tools] if has_tools else [], messages=[])
        head_h = arrange(req.provider, system=[system_h], tools=[tools_h] if has_tools else [], messages=[])
        segs, hashes = head + msgs, head_h + mh
        shape = _Shape(req.system, tools, mh)
        conv = self.conversations.find(req, mh)

        # the leading segments it shares with its conversation's last request: their chain hashes,
        # token counts, catalog tokens and place in the index are known (a live session's request
        # is mostly its last one, and redoing them would cost more every call)
        shared = shared_len(conv.hashes, hashes) if conv is not None else 0
        chains = _chain_hashes(hashes, conv.chains[: shared + 1] if conv is not None else ())
        hint = conv.index_hint if conv is not None else IndexHint()
        (whole, partial), old_match = self.index.match_after(segs, hashes, chains, hint, shared)
        new_tokens = self._count(segs[shared:], hashes[shared:])
        tokens = conv.tokens[:shared] if conv is not None else []
        tokens.extend(new_tokens)
        catalog = self._catalog_sums(req, len(head), conv.catalog[:shared] if conv is not None else [])
        sizes = _running(conv.sizes[:shared] if conv is not None else [], map(len, segs[shared:]))
        sums = _running(conv.token_sums[:shared] if conv is not None else [], new_tokens)
        reusable_bytes = (sizes[whole - 1] if whole else 0) + partial
        counted = sums[-1] if sums else 0
        reusable_tok = sums[whole - 1] if whole else 0
        if partial:
            reusable_tok += self.counter.count(segs[whole][:partial].decode("utf-8", "ignore"))
        prompt = req.prompt_tokens if req.prompt_tokens is not None else counted
        reusable_tok = reusable_tokens(reusable_tok, counted, req.prompt_tokens, req.reusable_tokens_hint)

        size = sizes[-1] if sizes else 0
        prev_req = conv.prev if conv is not None else None
        div = _divergence(prev_req, conv.shape, req, shape) if conv is not None and prev_req is not None else None
        options = changed_options(prev_req.options, req.options) if prev_req is not None else ()
        in_prompt = prompt_options(options)
        cause = _classify(prev_req, conv.shape if conv is not None else None, req, shape, div, bool(in_prompt))
        if cause == "options_changed" and prev_req is not None and prev_req.options is not None:
            div = _options_divergence(prev_req.options, req.options or {}, in_prompt)
        if conv is None:
            conv = self.conversations.start(req, shape, size, self.count)
            prev_prompt = 0
        else:
            prev_prompt = conv.last_prompt
            self.conversations.update(conv, req, shape, size, self.count)
        conv.hashes, conv.chains, conv.tokens, conv.catalog = hashes, chains, tokens, catalog
        conv.sizes, conv.token_sums = sizes, sums
        row = AuditRow(
            self.count,
            prompt,
            reusable_tok,
            reusable_bytes,
            req.cached_tokens,
            div,
            cause,
            req.completion_tokens,
            conversation=conv.number,
            options_changed=options,
            usage_known=req.prompt_tokens is not None,
            skills_catalog_tokens=self._catalog(req, catalog[-1] if catalog else 0),
            usage_split=req.usage_split,
            provider=req.provider,
            model=req.model,
            previous_prompt_tokens=prev_prompt,
        )
        conv.last_prompt = prompt
        conv.totals.add(row, prev_prompt)
        self.totals.add(row, prev_prompt)
        conv.index_hint = self.index.add_after(segs, hashes, chains, hint, shared, old_match)
        self.count += 1
        if self.keep_rows:
            self.rows.append(row)
        return row

    @property
    def held_bytes(self) -> int:
        """What this audit holds in memory, roughly: its prefix index and the open
        conversations' latest requests (a caller keeping several auditors bounds their sum)."""
        return self.index.size + self.conversations.held_bytes

    def summary(self, prices: Prices | Pricing | None = None) -> AuditSummary:
        return self.totals.summary(prices, conversations=self.conversations.count)

    def finish(self) -> None:
        """Close every open conversation (each summary goes to ``on_close``)."""
        self.conversations.close_all()
