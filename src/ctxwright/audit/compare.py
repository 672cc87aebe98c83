"""Per-call prefix audit: where each request first differs from the previous one, how much
of it a prompt cache could have reused, and how much the backend says it did reuse.

Provider rule protected: prompt caches reuse only the longest identical prefix (OpenAI in
128-token steps above 1,024 tokens, vLLM in 16-token blocks, llama.cpp token by token).
The audit therefore measures three things per request:

* **reusable** -- the longest common prefix with the *best* earlier request of the
  session, in bytes and tokens: the physical maximum any cache could reuse;
* **first divergence** from the previous request -- message index (the system prompt is
  message 0), field, byte offset in that field's UTF-8 text, and the text around it;
* **cause** -- ``first``, ``append``, ``system_changed``, ``tools_changed``,
  ``history_edited``, ``history_removed``, ``compaction`` (a compaction the harness
  recorded), ``status_replaced`` (the status bar's replace mode) or ``other``.

A request is linearised as segments in prompt order -- system text, tool definitions,
then each message's canonical JSON. Whole segments are matched through a hash chain (so
1,000 requests of 50K tokens take one pass), and only the first differing segment is
compared byte by byte. Tokens are counted per distinct segment and memoized, so an
append-only log costs the tokens of its new text only.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxwright.core.messages import canonical_json
from ctxwright.core.tokens import TokenCounter

_MESSAGE_FIELDS = ("role", "content", "tool_calls", "tool_call_id", "name", "reasoning_content")


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
    #: exact reusable tokens when the backend can say (llama.cpp knows its token lists)
    reusable_tokens_hint: int | None = None
    #: the canonical bytes of each message, when the caller has them already (a live session
    #: caches them per message); must equal ``canonical_json(m)`` of ``messages``
    message_bytes: Sequence[bytes] | None = None


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

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "prompt_tokens": self.prompt_tokens,
            "reusable_prefix_tokens": self.reusable_prefix_tokens,
            "reusable_prefix_bytes": self.reusable_prefix_bytes,
            "cached_tokens": self.cached_tokens,
            "first_divergence": self.first_divergence.to_json() if self.first_divergence else None,
            "cause": self.cause,
        }


@dataclass(frozen=True)
class Prices:
    """Per million tokens. ``cached`` defaults to ``input`` (no discount) when not given."""

    input: float
    cached: float | None = None
    output: float = 0.0


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
    causes: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "reusable_tokens": self.reusable_tokens,
            "cached_tokens": self.cached_tokens,
            "hit_ratio": self.hit_ratio,
            "efficiency": self.efficiency,
            "est_cost": self.est_cost,
            "est_cost_if_stable": self.est_cost_if_stable,
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


def _text_of(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else canonical_json(value)


def _context(text: str, byte_offset: int, width: int = 40) -> tuple[str, str]:
    raw = text.encode("utf-8")
    before = raw[:byte_offset].decode("utf-8", "ignore")[-width:]
    after = raw[byte_offset:].decode("utf-8", "ignore")[:width]
    return before, after


def _text_divergence(old: str, new: str) -> tuple[int, str, str]:
    """(byte offset, text before, text after) of the first difference of two texts.

    The offset is moved back to the start of the UTF-8 character it falls in: 周一 and
    周二 share the first byte of their second character, but the change is the whole
    character, and the context must show it rather than drop its broken tail.
    """
    a, b = old.encode("utf-8"), new.encode("utf-8")
    off = common_prefix_len(a, b)
    raw = b if off < len(b) else a
    while 0 < off < len(raw) and raw[off] & 0xC0 == 0x80:  # a continuation byte
        off -= 1
    before, after = _context(new, off)
    return off, before, after


def _field_divergence(index: int, a: dict[str, Any], b: dict[str, Any]) -> Divergence:
    """The first field of message ``index`` that differs between ``a`` (before) and ``b``."""
    keys = list(_MESSAGE_FIELDS) + sorted((set(a) | set(b)) - set(_MESSAGE_FIELDS))
    for k in keys:
        if a.get(k) != b.get(k):
            off, before, after = _text_divergence(_text_of(a.get(k)), _text_of(b.get(k)))
            return Divergence(index, k, off, role=b.get("role"), before=before, after=after)
    return Divergence(index, "message", 0, role=b.get("role"))


def first_divergence(prev: AuditRequest, cur: AuditRequest) -> Divergence | None:
    """Where ``cur`` first differs from ``prev`` in prompt order; ``None`` for a pure append."""
    if prev.system != cur.system:
        off, before, after = _text_divergence(prev.system, cur.system)
        return Divergence(0, "content", off, role="system", before=before, after=after)
    if canonical_json(list(prev.tools)) != canonical_json(list(cur.tools)):
        off, before, after = _text_divergence(canonical_json(list(prev.tools)), canonical_json(list(cur.tools)))
        return Divergence(None, "tools", off, before=before, after=after)
    for i, (a, b) in enumerate(zip(prev.messages, cur.messages, strict=False)):
        if a != b:
            return _field_divergence(i + 1, a, b)
    if len(cur.messages) < len(prev.messages):
        return Divergence(len(cur.messages) + 1, "message", 0)
    return None


def classify(prev: AuditRequest | None, cur: AuditRequest, div: Divergence | None) -> str:
    """The cause of the difference between two consecutive requests (see module docstring)."""
    if prev is None:
        return "first"
    if cur.marker in ("compaction", "status_replaced"):
        return cur.marker
    if div is None:
        return "append"
    if div.field == "tools":
        return "tools_changed"
    if div.message_index == 0:
        return "system_changed"
    i = (div.message_index or 1) - 1  # index into .messages
    if i >= len(cur.messages):
        return "history_removed"
    if cur.messages[i] in list(prev.messages[i + 1 :]):
        return "history_removed"  # a later message moved up: earlier ones were dropped
    if i < len(prev.messages) and cur.messages[i].get("role") == prev.messages[i].get("role"):
        return "history_edited"
    return "other"


def _h(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


class PrefixIndex:
    """Every earlier request's segment chain, to find the best earlier match in one pass.

    Each chain node keeps its children's segments sorted, because the longest common
    prefix of a byte string with any member of a sorted set is reached at one of its two
    neighbours in that order: a log of many requests that share only the system prompt
    then costs two comparisons per request, not one per earlier request.
    """

    def __init__(self) -> None:
        # chain hash -> {next segment hash: next segment bytes}
        self._children: dict[bytes, dict[bytes, bytes]] = {}
        # chain hash -> the same segments, sorted
        self._sorted: dict[bytes, list[bytes]] = {}

    def add(self, segments: list[bytes]) -> None:
        chain = b""
        for seg in segments:
            sh = _h(seg)
            kids = self._children.setdefault(chain, {})
            if sh not in kids:
                kids[sh] = seg
                bisect.insort(self._sorted.setdefault(chain, []), seg)
            chain = _h(chain + sh)

    def match(self, segments: list[bytes]) -> tuple[int, int]:
        """(whole segments matched, bytes matched inside the next segment)."""
        chain = b""
        for i, seg in enumerate(segments):
            kids = self._children.get(chain)
            if not kids:
                return i, 0
            sh = _h(seg)
            if sh in kids:
                chain = _h(chain + sh)
                continue
            return i, self._best_partial(chain, seg)
        return len(segments), 0

    def _best_partial(self, chain: bytes, seg: bytes) -> int:
        """Longest common prefix of ``seg`` with any child of ``chain`` (its sorted neighbours)."""
        sibs = self._sorted[chain]
        j = bisect.bisect_left(sibs, seg)
        return max(common_prefix_len(seg, sibs[k]) for k in (j - 1, j) if 0 <= k < len(sibs))


def segments_of(req: AuditRequest) -> list[bytes]:
    segs = [req.system.encode("utf-8")]
    if req.tools:
        segs.append(canonical_json(list(req.tools)).encode("utf-8"))
    if req.message_bytes is not None:
        segs.extend(req.message_bytes)
    else:
        segs.extend(canonical_json(m).encode("utf-8") for m in req.messages)
    return segs


class Auditor:
    """Audits a sequence of requests incrementally; one instance per session or log."""

    def __init__(self, counter: TokenCounter | None = None) -> None:
        self.counter = counter or TokenCounter()
        self.index = PrefixIndex()
        self.prev: AuditRequest | None = None
        self.rows: list[AuditRow] = []
        self._seg_tokens: dict[bytes, int] = {}

    def _tokens(self, seg: bytes) -> int:
        n = self._seg_tokens.get(seg)  # bytes cache their hash: a repeated segment costs one lookup
        if n is None:
            n = self.counter.count(seg.decode("utf-8", "ignore"))
            if len(self._seg_tokens) > 20_000:
                self._seg_tokens.clear()
            self._seg_tokens[seg] = n
        return n

    def add(self, req: AuditRequest) -> AuditRow:
        segs = segments_of(req)
        whole, partial = self.index.match(segs)
        reusable_bytes = sum(len(s) for s in segs[:whole]) + partial
        counted = sum(self._tokens(s) for s in segs)
        reusable_tok = sum(self._tokens(s) for s in segs[:whole])
        if partial:
            reusable_tok += self._tokens(segs[whole][:partial])
        prompt = req.prompt_tokens if req.prompt_tokens is not None else counted
        if req.reusable_tokens_hint is not None:
            reusable_tok = req.reusable_tokens_hint
        elif req.prompt_tokens is not None and counted:
            # Our count is of canonical JSON segments, the provider's of its own rendering;
            # scale to the provider's units so Σcached ÷ Σreusable compares like with like.
            reusable_tok = round(reusable_tok * req.prompt_tokens / counted)
        reusable_tok = min(reusable_tok, prompt)
        div = first_divergence(self.prev, req) if self.prev is not None else None
        row = AuditRow(
            len(self.rows),
            prompt,
            reusable_tok,
            reusable_bytes,
            req.cached_tokens,
            div,
            classify(self.prev, req, div),
            req.completion_tokens,
        )
        self.index.add(segs)
        self.prev = req
        self.rows.append(row)
        return row

    def summary(self, prices: Prices | None = None) -> AuditSummary:
        return summarize(self.rows, prices)


def cache_ratios(cached: int, prompt: int, reusable: int) -> tuple[float | None, float | None]:
    """(hit ratio, efficiency) = (Σcached ÷ Σprompt, Σcached ÷ Σreusable), over the requests
    whose cached count is known; ``None`` where the divisor is 0."""
    return (round(cached / prompt, 4) if prompt else None, round(cached / reusable, 4) if reusable else None)


def summarize(rows: Sequence[AuditRow], prices: Prices | None = None) -> AuditSummary:
    """Session totals. Hit ratio = Σcached ÷ Σprompt; efficiency = Σcached ÷ Σreusable.

    Both use only requests whose cached count is known. Cost: what the log cost (known
    cached counts; where unknown, the reusable prefix is assumed cached) and what it
    would have cost with a stable prefix (each request reusing all of the previous one).
    """
    s = AuditSummary(requests=len(rows))
    s.prompt_tokens = sum(r.prompt_tokens for r in rows)
    s.reusable_tokens = sum(r.reusable_prefix_tokens for r in rows)
    known = [r for r in rows if r.cached_tokens is not None]
    for r in rows:
        s.causes[r.cause] = s.causes.get(r.cause, 0) + 1
    if known:
        s.cached_tokens = sum(r.cached_tokens or 0 for r in known)
        s.hit_ratio, s.efficiency = cache_ratios(
            s.cached_tokens, sum(r.prompt_tokens for r in known), sum(r.reusable_prefix_tokens for r in known)
        )
    if prices is not None:
        pc = prices.cached if prices.cached is not None else prices.input

        def cost(prompt: int, cached: int, out: int | None) -> float:
            cached = min(cached, prompt)
            return ((prompt - cached) * prices.input + cached * pc + (out or 0) * prices.output) / 1e6

        s.est_cost = round(
            sum(
                cost(
                    r.prompt_tokens,
                    r.cached_tokens if r.cached_tokens is not None else r.reusable_prefix_tokens,
                    r.completion_tokens,
                )
                for r in rows
            ),
            6,
        )
        stable = 0.0
        for i, r in enumerate(rows):
            prev_prompt = rows[i - 1].prompt_tokens if i else 0
            stable += cost(r.prompt_tokens, prev_prompt, r.completion_tokens)
        s.est_cost_if_stable = round(stable, 6)
    return s
