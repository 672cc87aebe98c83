"""A loopback Anthropic Messages API (``POST /v1/messages``) with the documented prompt cache.

What it implements, from platform.claude.com (Messages API, prompt caching, cache diagnostics,
streaming, extended thinking):

* **Validation** with Anthropic's error body ``{"type": "error", "error": {"type":
  "invalid_request_error", "message": ...}}`` (HTTP 400): ``model``, ``max_tokens`` and
  ``messages`` are required; at most 4 blocks with ``cache_control``; no ``cache_control`` on
  an empty text block nor on a thinking block; no empty text block; every ``tool_use`` answered
  by a ``tool_result`` in the next (user) message, and no ``tool_result`` without its
  ``tool_use``; a ``"ttl": "1h"`` breakpoint may not come after a ``"5m"`` one (longer TTLs
  first); a ``thinking`` block sent back must carry the signature this server gave it; with
  ``thinking`` enabled, a budget of at least 1,024 tokens below ``max_tokens``, and no
  ``tool_choice`` that forces tool use.
* **Blocks in prompt order**: each tool definition, each system text block, each content block
  of each message (a string content is one text block).
* **Tokens**: a block counts ``ceil(len(canonical JSON of the block without cache_control, in
  UTF-8 bytes) / 4)`` -- :func:`block_tokens`, so a test computes the expected numbers; the
  prompt is the sum of its blocks. A reply's ``output_tokens`` counts its content blocks alike.
* **Cache entries**: the key of the prefix ending at block ``i`` is a hash chained over the model
  and blocks ``0..i`` (``cache_control`` stripped: moving a breakpoint does not change the cached
  bytes). Entries are written only at breakpoints. At each breakpoint the lookup checks that
  block and the 20 before it (:data:`LOOKBACK`) for an entry still within its TTL; the longest
  prefix found is read, and reading refreshes the entry's TTL. A prefix below the model's
  minimum (:data:`MINIMUMS`, or ``minimum=`` to the constructor) is neither written nor read.
  TTL: ``"5m"`` (default) or ``"1h"``, scaled by ``ttl_scale`` (or set with ``ttl_seconds=``).
* **usage**: ``input_tokens`` (the tokens after the last read or written point),
  ``cache_read_input_tokens``, ``cache_creation_input_tokens`` with ``cache_creation``
  ``{ephemeral_5m_input_tokens, ephemeral_1h_input_tokens}`` (each written segment billed at the
  TTL of the breakpoint that ends it), ``output_tokens``. The three input fields add up to the
  prompt.
* **Diagnostics**: a request carrying a ``diagnostics`` object stores a fingerprint under its
  reply's id; one naming ``diagnostics.previous_message_id`` is compared with that fingerprint
  and gets ``"diagnostics": {"cache_miss_reason": {"type": ..., "cache_missed_input_tokens": N}}``
  at the first divergence (model, then tools, system, messages, in prompt order; the count is
  the previous request's tokens from that point on, what would have been read had it matched),
  ``{"type": "previous_message_not_found"}`` for an unknown id, ``null`` when nothing diverged.
* **Streaming** (``"stream": true``): ``message_start`` (with usage), per block
  ``content_block_start`` / ``content_block_delta`` (``text_delta``, ``input_json_delta``,
  ``thinking_delta`` then ``signature_delta``) / ``content_block_stop``, ``message_delta`` (stop
  reason and usage), ``message_stop``.

* **Context management** (platform.claude.com "Context editing", "Compaction"; the shapes are
  the SDK's ``BetaContextManagementConfigParam``): ``context_management: {"edits": [...]}``
  needs the beta header of each edit it holds (``context-management-2025-06-27`` for
  ``clear_tool_uses_20250919`` and ``clear_thinking_20251015``, ``compact-2026-01-12`` for
  ``compact_20260112``), else 400; an unknown edit type, a malformed trigger/keep/clear_at_least,
  ``clear_thinking_20251015`` not first when combined, or a compaction trigger under 50,000
  tokens is a 400. Applied in that order, on what the model reads (the client keeps its
  history as it is): every block before the newest ``compaction`` block is dropped (its
  signature must be this server's); ``clear_thinking`` keeps the thinking of the newest
  ``keep.value`` assistant turns (default 1; ``"all"`` keeps every one); ``clear_tool_uses``,
  once the prompt reaches its trigger (``input_tokens``, default 100,000, or ``tool_uses``),
  replaces the result of every tool use but the newest ``keep.value`` (default 3) with
  :data:`CLEARED`, oldest first, tools in ``exclude_tools`` never, their inputs too with
  ``clear_tool_inputs`` -- unless that clears fewer than ``clear_at_least`` tokens;
  ``compact_20260112``, once the prompt reaches its trigger (default 150,000), summarises the
  conversation into a ``compaction`` block sent first in the reply, and the model then reads
  that block and the request's last user message. The summary is this simulator's documented
  behaviour, not a model's: every user text verbatim, then per tool use its name and the first
  line of its result (:func:`summarise`). The reply carries ``context_management:
  {"applied_edits": [{type, cleared_tool_uses | cleared_thinking_turns,
  cleared_input_tokens}]}`` (the edits that cleared something), and a compaction adds ``usage.iterations`` (the compaction pass,
  then the message; the top-level usage is the message's). The cache is read and written on
  what the model reads.

Replies are scripted by ``respond(body) -> list of content blocks`` (``text``, ``tool_use``
without an id gets one, ``thinking`` without a signature gets this server's). ``fail_next``
queues an error answer (a 429, a 529 ``overloaded_error``), ``fail_next_stream`` an ``error``
event in the middle of a stream. The clock is simulated
(``sim.clock.advance(seconds)``): entries expire by it, never by waiting.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ctxwright.proxy.server import ProxyThread

__all__ = ["LOOKBACK", "MAX_BREAKPOINTS", "MINIMUMS", "AnthropicSim", "SimClock", "block_tokens"]

#: Anthropic's limit of blocks with ``cache_control`` per request.
MAX_BREAKPOINTS = 4
#: Blocks before a breakpoint the cache lookup checks.
LOOKBACK = 20
#: Minimum cacheable prompt by model family (the prompt caching page), most specific first.
MINIMUMS: tuple[tuple[str, int], ...] = (
    (r"opus-4-[5-9]", 4096),
    (r"haiku-4-5", 4096),
    (r"sonnet-4-6", 2048),
    (r"haiku-3|3-5-haiku|3-haiku", 2048),
    (r"sonnet|opus", 1024),
)
TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}
_THINKING = ("thinking", "redacted_thinking")
#: The beta header each context-management edit needs, and the documented defaults.
EDIT_BETAS = {
    "clear_tool_uses_20250919": "context-management-2025-06-27",
    "clear_thinking_20251015": "context-management-2025-06-27",
    "compact_20260112": "compact-2026-01-12",
}
CLEAR_TRIGGER = 100_000
CLEAR_KEEP = 3
COMPACT_TRIGGER = 150_000
COMPACT_MINIMUM = 50_000
#: What a cleared tool result reads as.
CLEARED = "[tool result cleared by context management]"


class SimClock:
    """A clock that moves only when told (cache entries are stamped with it)."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._t = start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._t

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._t += seconds


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _strip(block: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k != "cache_control"}


def block_tokens(block: dict[str, Any]) -> int:
    """The simulator's token count of one block: a quarter of its canonical JSON's bytes, rounded up."""
    return math.ceil(len(_canonical(_strip(block)).encode("utf-8")) / 4)


def summarise(messages: list[dict[str, Any]]) -> str:
    """The simulator's compaction summary (module docstring): user texts verbatim, then per
    tool use its name and the first line of its result, and earlier summaries first."""
    lines: list[str] = []
    names: dict[str, str] = {}
    for m in messages:
        content = m.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        for b in blocks:
            btype = b.get("type")
            if btype == "compaction" and isinstance(b.get("content"), str):
                lines.append(b["content"])
            elif btype == "text" and m.get("role") == "user":
                lines.append(f"User: {b.get('text', '')}")
            elif btype == "tool_use":
                names[str(b.get("id"))] = str(b.get("name"))
            elif btype == "tool_result":
                result = b.get("content")
                text = result if isinstance(result, str) else " ".join(str(x.get("text", "")) for x in result or [])
                first = text.strip().split("\n", 1)[0]
                lines.append(f"Tool {names.get(str(b.get('tool_use_id')), '?')}: {first}")
    return "Summary of the conversation so far:\n" + "\n".join(lines)


class _Refusal(Exception):
    def __init__(self, message: str, status: int = 400, etype: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.message, self.status, self.etype = message, status, etype


@dataclass
class _Block:
    segment: str  # "tools" | "system" | "messages"
    where: str  # the request path of the block, for error messages
    body: dict[str, Any]
    message: int = -1
    role: str = ""

    @property
    def item(self) -> str:
        return _canonical({"seg": self.segment, "msg": self.message, "role": self.role, "block": _strip(self.body)})


@dataclass
class _Entry:
    expires: float
    ttl_s: float


@dataclass
class _Fingerprint:
    model: str
    items: list[str]
    segments: list[str]
    tokens: list[int]


@dataclass
class AnthropicSim:
    """The simulator; a context manager serving on ``127.0.0.1:<free port>`` (``.url``)."""

    respond: Callable[[dict[str, Any]], list[dict[str, Any]]] | None = None
    minimum: int | None = None
    ttl_scale: float = 1.0
    ttl_seconds: dict[str, float] | None = None
    clock: SimClock = field(default_factory=SimClock)
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    responses: list[dict[str, Any]] = field(default_factory=list)
    #: per accepted request, the body as the model read it (after context management)
    seen: list[dict[str, Any]] = field(default_factory=list)
    cache: dict[str, _Entry] = field(default_factory=dict)
    fingerprints: dict[str, _Fingerprint] = field(default_factory=dict)
    secret: bytes = b"anthropic-sim"
    _failures: list[tuple[int, str, str, dict[str, str]]] = field(default_factory=list)
    _stream_failures: list[tuple[str, str]] = field(default_factory=list)
    _thread: ProxyThread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _n: int = 0

    # -- serving -------------------------------------------------------------------------

    def __enter__(self) -> AnthropicSim:
        app = Starlette(routes=[Route("/v1/messages", self._handle, methods=["POST"])])
        self._thread = ProxyThread(app).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._thread.stop()

    @property
    def url(self) -> str:
        assert self._thread is not None, "use the simulator as a context manager"
        return self._thread.url

    def fail_next(self, status: int, etype: str, message: str, headers: dict[str, str] | None = None) -> None:
        """Answer the next request with this error (e.g. 429 ``rate_limit_error``, 529 ``overloaded_error``)."""
        self._failures.append((status, etype, message, headers or {}))

    def fail_next_stream(self, etype: str, message: str) -> None:
        """Break the next streamed reply after its ``message_start`` with an ``error`` event
        (Anthropic sends ``overloaded_error`` that way once a stream has begun)."""
        self._stream_failures.append((etype, message))

    # -- rules ---------------------------------------------------------------------------

    def minimum_for(self, model: str) -> int:
        if self.minimum is not None:
            return self.minimum
        for pattern, n in MINIMUMS:
            if re.search(pattern, model):
                return n
        return 1024

    def ttl_s(self, ttl: str) -> float:
        table = self.ttl_seconds or {k: v * self.ttl_scale for k, v in TTL_SECONDS.items()}
        return table[ttl]

    def sign(self, thinking: str) -> str:
        return hmac.new(self.secret, thinking.encode("utf-8"), hashlib.sha256).hexdigest()

    def blocks(self, body: dict[str, Any]) -> list[_Block]:
        """Every block of the prompt, in prompt order: tools, system, messages."""
        out: list[_Block] = []
        for i, tool in enumerate(body.get("tools") or []):
            out.append(_Block("tools", f"tools.{i}", tool))
        system = body.get("system")
        if isinstance(system, str):
            out.append(_Block("system", "system", {"type": "text", "text": system}))
        elif isinstance(system, list):
            for j, b in enumerate(system):
                out.append(_Block("system", f"system.{j}", b))
        for i, m in enumerate(body.get("messages") or []):
            content = m.get("content")
            role = str(m.get("role"))
            if isinstance(content, str):
                out.append(_Block("messages", f"messages.{i}.content", {"type": "text", "text": content}, i, role))
            else:
                for j, b in enumerate(content or []):
                    out.append(_Block("messages", f"messages.{i}.content.{j}", b, i, role))
        return out

    def validate(self, body: dict[str, Any], blocks: list[_Block]) -> None:
        for name in ("model", "max_tokens", "messages"):
            if name not in body:
                raise _Refusal(f"{name}: Field required")
        if not isinstance(body["messages"], list) or not body["messages"]:
            raise _Refusal("messages: at least one message is required")
        thinking = body.get("thinking")
        if isinstance(thinking, dict) and thinking.get("type") == "enabled":
            budget = thinking.get("budget_tokens")
            if not isinstance(budget, int) or budget < 1024:
                raise _Refusal("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
            if budget >= body["max_tokens"]:
                raise _Refusal("`max_tokens` must be greater than `thinking.budget_tokens`")
            if isinstance(body.get("tool_choice"), dict) and body["tool_choice"].get("type") in ("any", "tool"):
                raise _Refusal("Thinking may not be enabled when tool_choice forces tool use.")
        marked = [b for b in blocks if isinstance(b.body.get("cache_control"), dict)]
        if len(marked) > MAX_BREAKPOINTS:
            raise _Refusal(
                f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {len(marked)}."
            )
        seen_5m = False
        for b in blocks:
            btype = b.body.get("type")
            cc = b.body.get("cache_control")
            if btype in _THINKING and cc is not None:
                raise _Refusal(f"{b.where}.{btype}.cache_control: Extra inputs are not permitted")
            if btype == "text" and not b.body.get("text"):
                if cc is not None:
                    raise _Refusal(f"{b.where}.text: cache_control cannot be set for empty text blocks")
                raise _Refusal(f"{b.where}: text content blocks must be non-empty")
            if isinstance(cc, dict):
                ttl = cc.get("ttl", "5m")
                if cc.get("type") != "ephemeral" or ttl not in TTL_SECONDS:
                    raise _Refusal(f"{b.where}.cache_control: type must be 'ephemeral' and ttl '5m' or '1h'")
                if ttl == "1h" and seen_5m:
                    raise _Refusal(
                        f"{b.where}.cache_control: a ttl='1h' cache_control block must not come after a "
                        "ttl='5m' cache_control block (longer TTLs must come first)"
                    )
                seen_5m = seen_5m or ttl == "5m"
            if btype == "thinking" and b.segment == "messages":  # noqa: SIM102 -- one rule, one if
                if b.body.get("signature") != self.sign(str(b.body.get("thinking", ""))):
                    raise _Refusal(f"{b.where}: Invalid `signature` in `thinking` block")
            if btype == "compaction" and b.body.get("content") is not None:  # noqa: SIM102 -- one rule, one if
                if b.body.get("signature") != self.sign(str(b.body.get("content"))):
                    raise _Refusal(f"{b.where}: Invalid `signature` in `compaction` block")
        messages = body["messages"]
        for i, m in enumerate(messages):
            content = m.get("content") if isinstance(m.get("content"), list) else []
            if m.get("role") == "user":
                results = [b.get("tool_use_id") for b in content if b.get("type") == "tool_result"]
                prev = messages[i - 1] if i > 0 else {}
                prev_content = prev.get("content") if isinstance(prev.get("content"), list) else []
                uses = {b.get("id") for b in prev_content if b.get("type") == "tool_use"}
                stray = [r for r in results if r not in uses]
                if stray:
                    raise _Refusal(
                        f"messages.{i}.content: unexpected `tool_use_id` found in `tool_result` blocks: "
                        f"{', '.join(map(str, stray))}. Each `tool_result` block must have a corresponding "
                        "`tool_use` block in the previous message."
                    )
            if m.get("role") == "assistant":
                ids = [b.get("id") for b in content if b.get("type") == "tool_use"]
                if not ids:
                    continue
                nxt = messages[i + 1] if i + 1 < len(messages) else None
                nxt_content = nxt.get("content") if nxt is not None and isinstance(nxt.get("content"), list) else []
                answered = {b.get("tool_use_id") for b in nxt_content if b.get("type") == "tool_result"}
                missing = [t for t in ids if t not in answered]
                if missing:
                    raise _Refusal(
                        f"messages.{i + 1}: `tool_use` ids were found without `tool_result` blocks immediately "
                        f"after: {', '.join(map(str, missing))}. Each `tool_use` block must have a corresponding "
                        "`tool_result` block in the next message."
                    )

    def _keys(self, model: str, blocks: list[_Block]) -> list[str]:
        keys: list[str] = []
        h = hashlib.sha256(model.encode("utf-8")).hexdigest()
        for b in blocks:
            h = hashlib.sha256((h + b.item).encode("utf-8")).hexdigest()
            keys.append(h)
        return keys

    def cache_pass(self, model: str, blocks: list[_Block]) -> dict[str, int]:
        """Read and write the cache for one request; the input side of its usage."""
        tokens = [block_tokens(b.body) for b in blocks]
        prefix: list[int] = []
        total = 0
        for t in tokens:
            total += t
            prefix.append(total)
        keys = self._keys(model, blocks)
        minimum = self.minimum_for(model)
        now = self.clock.now()
        bps = [
            (i, str(b.body["cache_control"].get("ttl", "5m")))
            for i, b in enumerate(blocks)
            if isinstance(b.body.get("cache_control"), dict)
        ]
        read = -1
        with self._lock:
            for bp, _ttl in bps:
                for p in range(bp, max(-1, bp - LOOKBACK - 1), -1):
                    entry = self.cache.get(keys[p])
                    if entry is not None and entry.expires > now and prefix[p] >= minimum:
                        read = max(read, p)
                        break
            if read >= 0:
                hit = self.cache[keys[read]]
                hit.expires = now + hit.ttl_s
            written = {"5m": 0, "1h": 0}
            last = read
            for bp, ttl in bps:
                if prefix[bp] < minimum:
                    continue
                ttl_s = self.ttl_s(ttl)
                old = self.cache.get(keys[bp])
                expires = max(now + ttl_s, old.expires if old is not None and old.expires > now else 0.0)
                self.cache[keys[bp]] = _Entry(expires, max(ttl_s, old.ttl_s if old is not None else 0.0))
                if bp > last:
                    written[ttl] += prefix[bp] - (prefix[last] if last >= 0 else 0)
                    last = bp
        cache_read = prefix[read] if read >= 0 else 0
        creation = written["5m"] + written["1h"]
        return {
            "input_tokens": total - cache_read - creation,
            "cache_creation_input_tokens": creation,
            "cache_read_input_tokens": cache_read,
            "ephemeral_5m_input_tokens": written["5m"],
            "ephemeral_1h_input_tokens": written["1h"],
        }

    def fingerprint(self, model: str, blocks: list[_Block]) -> _Fingerprint:
        return _Fingerprint(
            model, [b.item for b in blocks], [b.segment for b in blocks], [block_tokens(b.body) for b in blocks]
        )

    def diagnose(self, previous_id: Any, now: _Fingerprint) -> dict[str, Any] | None:
        """The ``diagnostics`` object: the first divergence from the named earlier request."""
        before = self.fingerprints.get(previous_id) if isinstance(previous_id, str) else None
        if before is None:
            return {"cache_miss_reason": {"type": "previous_message_not_found"}}
        if before.model != now.model:
            return {"cache_miss_reason": {"type": "model_changed", "cache_missed_input_tokens": sum(before.tokens)}}
        for seg in ("tools", "system", "messages"):
            old = [(k, it) for k, (it, s) in enumerate(zip(before.items, before.segments, strict=True)) if s == seg]
            new = [it for it, s in zip(now.items, now.segments, strict=True) if s == seg]
            n = min(len(old), len(new))
            first = next((x for x in range(n) if old[x][1] != new[x]), None)
            if first is None:
                # the history may grow (messages appended), nothing else may change length
                if len(new) < len(old) or (seg != "messages" and len(new) != len(old)):
                    first = n
                else:
                    continue
            # the SDK's definition: the tokens that would have been read from the cache had the
            # prefix matched -- the previous request's, from the divergence on
            start = old[first][0] if first < len(old) else self._segment_end(before, seg)
            missed = sum(before.tokens[start:])
            return {"cache_miss_reason": {"type": f"{seg}_changed", "cache_missed_input_tokens": missed}}
        return None

    @staticmethod
    def _segment_end(fp: _Fingerprint, seg: str) -> int:
        order = {"tools": 0, "system": 1, "messages": 2}
        return sum(1 for s in fp.segments if order[s] <= order[seg])

    # -- context management ----------------------------------------------------------------

    def manage(
        self, body: dict[str, Any], betas: set[str]
    ) -> tuple[dict[str, Any], list[dict[str, Any]] | None, dict[str, Any] | None]:
        """What the model reads (the body after the compaction drop and the edits), the
        ``applied_edits`` (``None`` without ``context_management``) and the compaction block
        made now, if any (module docstring)."""
        cm = body.get("context_management")
        edits = self._edits(cm, betas) if cm is not None else []
        seen = dict(body, messages=_after_compaction(body["messages"]))
        seen.pop("context_management", None)
        applied: list[dict[str, Any]] = []
        compaction: dict[str, Any] | None = None
        for edit in edits:
            if edit["type"] == "clear_thinking_20251015":
                done = self._clear_thinking(seen, edit)
            elif edit["type"] == "clear_tool_uses_20250919":
                done = self._clear_tool_uses(seen, edit)
            else:
                trigger = (edit.get("trigger") or {}).get("value", COMPACT_TRIGGER)
                if self._prompt_tokens(seen) >= trigger:
                    summary = summarise(seen["messages"])
                    compaction = {"type": "compaction", "content": summary, "signature": self.sign(summary)}
                done = None
            if done is not None and (done.get("cleared_tool_uses") or done.get("cleared_thinking_turns")):
                applied.append(done)  # only the edits that were applied are listed
        return seen, (applied if cm is not None else None), compaction

    def _edits(self, cm: Any, betas: set[str]) -> list[dict[str, Any]]:
        if not isinstance(cm, dict) or not isinstance(cm.get("edits"), list):
            raise _Refusal("context_management.edits: Input should be a valid list")
        edits = cm["edits"]
        for i, e in enumerate(edits):
            where = f"context_management.edits.{i}"
            etype = e.get("type") if isinstance(e, dict) else None
            if etype not in EDIT_BETAS:
                raise _Refusal(
                    f"{where}: Input tag {etype!r} found using 'type' does not match any of the expected tags: "
                    + ", ".join(repr(t) for t in EDIT_BETAS)
                )
            if EDIT_BETAS[etype] not in betas:
                raise _Refusal(f"{where}: {etype} requires the beta header '{EDIT_BETAS[etype]}'")
            if etype == "clear_thinking_20251015" and i != 0:
                raise _Refusal(f"{where}: clear_thinking_20251015 must be the first edit when strategies are combined")
            for key, kinds in (
                ("trigger", ("input_tokens", "tool_uses")),
                ("keep", ("tool_uses",)),
                ("clear_at_least", ("input_tokens",)),
            ):
                v = e.get(key)
                if v is None or (key == "keep" and etype == "clear_thinking_20251015"):
                    continue
                allowed = ("input_tokens",) if etype == "compact_20260112" else kinds
                if not isinstance(v, dict) or v.get("type") not in allowed or not _count(v.get("value")):
                    raise _Refusal(
                        f"{where}.{key}: expected {{'type': one of {list(allowed)}, 'value': a whole number}}"
                    )
            if etype == "clear_thinking_20251015":
                keep = e.get("keep", {"type": "thinking_turns", "value": 1})
                ok = keep == "all" or (
                    isinstance(keep, dict)
                    and (
                        keep.get("type") == "all"
                        or (keep.get("type") == "thinking_turns" and _count(keep.get("value")))
                    )
                )
                if not ok:
                    raise _Refusal(f"{where}.keep: expected 'all' or {{'type': 'thinking_turns', 'value': N}}")
            if etype == "compact_20260112":
                value = (e.get("trigger") or {}).get("value", COMPACT_TRIGGER)
                if value < COMPACT_MINIMUM:
                    raise _Refusal(
                        f"{where}.trigger.value: must be at least {COMPACT_MINIMUM} input tokens, not {value}"
                    )
        return [dict(e) for e in edits]

    def _prompt_tokens(self, body: dict[str, Any]) -> int:
        return sum(block_tokens(b.body) for b in self.blocks(body))

    def _clear_thinking(self, seen: dict[str, Any], edit: dict[str, Any]) -> dict[str, Any]:
        keep = edit.get("keep", {"type": "thinking_turns", "value": 1})
        n = 10**9 if keep == "all" or (isinstance(keep, dict) and keep.get("type") == "all") else int(keep["value"])
        turns = [i for i, m in enumerate(seen["messages"]) if m.get("role") == "assistant" and _has(m, _THINKING)]
        cleared = turns[: max(0, len(turns) - n)]
        tokens = 0
        messages = list(seen["messages"])
        for i in cleared:
            content = messages[i]["content"]
            tokens += sum(block_tokens(b) for b in content if b.get("type") in _THINKING)
            messages[i] = dict(messages[i], content=[b for b in content if b.get("type") not in _THINKING])
        seen["messages"] = messages
        return {
            "type": "clear_thinking_20251015",
            "cleared_thinking_turns": len(cleared),
            "cleared_input_tokens": tokens,
        }

    def _clear_tool_uses(self, seen: dict[str, Any], edit: dict[str, Any]) -> dict[str, Any]:
        done = {"type": "clear_tool_uses_20250919", "cleared_tool_uses": 0, "cleared_input_tokens": 0}
        trigger = edit.get("trigger") or {"type": "input_tokens", "value": CLEAR_TRIGGER}
        messages = [
            dict(m, content=list(m["content"]) if isinstance(m["content"], list) else m["content"])
            for m in seen["messages"]
        ]
        uses = [
            (i, j, b)
            for i, m in enumerate(messages)
            if m.get("role") == "assistant" and isinstance(m["content"], list)
            for j, b in enumerate(m["content"])
            if b.get("type") == "tool_use"
        ]
        reached = (
            self._prompt_tokens(seen) >= trigger["value"]
            if trigger["type"] == "input_tokens"
            else len(uses) >= trigger["value"]
        )
        if not reached:
            return done
        keep = int((edit.get("keep") or {"value": CLEAR_KEEP})["value"])
        excluded = set(edit.get("exclude_tools") or [])
        inputs = edit.get("clear_tool_inputs")
        old = [u for u in uses[: max(0, len(uses) - keep)] if u[2].get("name") not in excluded]
        ids = {str(b.get("id")): (i, j, b) for i, j, b in old}
        tokens = 0
        for m in messages:
            if m.get("role") != "user" or not isinstance(m["content"], list):
                continue
            for k, b in enumerate(m["content"]):
                if b.get("type") == "tool_result" and str(b.get("tool_use_id")) in ids and b.get("content") != CLEARED:
                    new = dict(b, content=CLEARED)
                    tokens += block_tokens(b) - block_tokens(new)
                    m["content"][k] = new
        for i, j, b in old:
            if inputs is True or (isinstance(inputs, list) and b.get("name") in inputs):
                new = dict(b, input={})
                tokens += block_tokens(b) - block_tokens(new)
                messages[i]["content"][j] = new
        least = (edit.get("clear_at_least") or {}).get("value", 0)
        if not old or tokens < least:
            return done  # nothing to clear, or not enough to be worth the cache it breaks
        seen["messages"] = messages
        return {**done, "cleared_tool_uses": len(old), "cleared_input_tokens": tokens}

    @staticmethod
    def _usage_of(usage_in: dict[str, int]) -> dict[str, Any]:
        return {
            "input_tokens": usage_in["input_tokens"],
            "cache_creation_input_tokens": usage_in["cache_creation_input_tokens"],
            "cache_read_input_tokens": usage_in["cache_read_input_tokens"],
        }

    # -- the endpoint --------------------------------------------------------------------

    async def _handle(self, request: Request) -> Response:
        self.headers.append(dict(request.headers))
        try:
            body = json.loads(await request.body())
        except json.JSONDecodeError:
            return self._error(_Refusal("the request body is not valid JSON"))
        self.requests.append(body)
        if self._failures:
            status, etype, message, headers = self._failures.pop(0)
            return self._error(_Refusal(message, status, etype), headers)
        try:
            if not isinstance(body, dict):
                raise _Refusal("the request body must be a JSON object")
            blocks = self.blocks(body)
            self.validate(body, blocks)
            betas = {b.strip() for b in request.headers.get("anthropic-beta", "").split(",") if b.strip()}
            seen, applied, compaction = self.manage(body, betas)
        except _Refusal as refusal:
            return self._error(refusal)
        model = str(body["model"])
        blocks = self.blocks(seen)
        compaction_usage: dict[str, Any] | None = None
        if compaction is not None:  # the compaction pass read everything, then the model the summary
            compaction_usage = {"type": "compaction", **self._usage_of(self.cache_pass(model, blocks))}
            compaction_usage["output_tokens"] = block_tokens(compaction)
            last = seen["messages"][-1]
            seen = dict(seen, messages=[{"role": "user", "content": [compaction]}])
            if last.get("role") == "user" and any(b.get("type") == "text" for b in last["content"]):
                seen["messages"].append(
                    {"role": "user", "content": [b for b in last["content"] if b.get("type") == "text"]}
                )
            blocks = self.blocks(seen)
        self.seen.append(seen)
        usage_in = self.cache_pass(model, blocks)
        content = ([compaction] if compaction is not None else []) + self._reply(seen)
        with self._lock:
            self._n += 1
            msg_id = f"msg_sim_{self._n:06d}"
        out_tokens = sum(block_tokens(b) for b in content if b.get("type") != "compaction")
        usage: dict[str, Any] = {
            "input_tokens": usage_in["input_tokens"],
            "cache_creation_input_tokens": usage_in["cache_creation_input_tokens"],
            "cache_read_input_tokens": usage_in["cache_read_input_tokens"],
            "cache_creation": {
                "ephemeral_5m_input_tokens": usage_in["ephemeral_5m_input_tokens"],
                "ephemeral_1h_input_tokens": usage_in["ephemeral_1h_input_tokens"],
            },
            "output_tokens": out_tokens,
            "service_tier": "standard",
        }
        if compaction_usage is not None:
            usage["iterations"] = [
                compaction_usage,
                {"type": "message", **self._usage_of(usage_in), "output_tokens": out_tokens},
            ]
        message: dict[str, Any] = {
            "id": msg_id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": "tool_use" if any(b.get("type") == "tool_use" for b in content) else "end_turn",
            "stop_sequence": None,
            "usage": usage,
        }
        if applied is not None:
            message["context_management"] = {"applied_edits": applied}
        diag = body.get("diagnostics")
        if isinstance(diag, dict):
            fp = self.fingerprint(model, blocks)
            if diag.get("previous_message_id") is not None:
                message["diagnostics"] = self.diagnose(diag.get("previous_message_id"), fp)
            self.fingerprints[msg_id] = fp
        self.responses.append(message)
        if body.get("stream"):
            events = self._events(message)
            if self._stream_failures:
                events = self._broken(message, *self._stream_failures.pop(0))
            return StreamingResponse(events, media_type="text/event-stream")
        return JSONResponse(message, headers={"request-id": f"req_{msg_id}"})

    def _reply(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        blocks = self.respond(body) if self.respond is not None else [{"type": "text", "text": "ok"}]
        out: list[dict[str, Any]] = []
        for b in blocks:
            b = dict(b)
            if b.get("type") == "tool_use":
                b.setdefault("id", f"toolu_sim_{len(self.responses):04d}_{len(out)}")
                b.setdefault("input", {})
            if b.get("type") == "thinking":
                b.setdefault("signature", self.sign(str(b.get("thinking", ""))))
            out.append(b)
        return out

    def _events(self, message: dict[str, Any]) -> Iterator[str]:
        def sse(name: str, data: dict[str, Any]) -> str:
            return f"event: {name}\ndata: {json.dumps(data)}\n\n"

        start = dict(message, content=[], stop_reason=None, usage=dict(message["usage"], output_tokens=1))
        yield sse("message_start", {"type": "message_start", "message": start})
        for i, b in enumerate(message["content"]):
            btype = b["type"]
            if btype == "text":
                yield sse(
                    "content_block_start",
                    {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}},
                )
                for k in range(0, len(b["text"]), 8):
                    delta = {"type": "text_delta", "text": b["text"][k : k + 8]}
                    yield sse("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta})
            elif btype == "tool_use":
                head = {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}
                yield sse("content_block_start", {"type": "content_block_start", "index": i, "content_block": head})
                raw = json.dumps(b["input"])
                for k in range(0, len(raw), 10):
                    delta = {"type": "input_json_delta", "partial_json": raw[k : k + 10]}
                    yield sse("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta})
            elif btype == "thinking":
                head = {"type": "thinking", "thinking": "", "signature": ""}
                yield sse("content_block_start", {"type": "content_block_start", "index": i, "content_block": head})
                for k in range(0, len(b["thinking"]), 12):
                    delta = {"type": "thinking_delta", "thinking": b["thinking"][k : k + 12]}
                    yield sse("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta})
                sig = {"type": "signature_delta", "signature": b["signature"]}
                yield sse("content_block_delta", {"type": "content_block_delta", "index": i, "delta": sig})
            else:
                yield sse("content_block_start", {"type": "content_block_start", "index": i, "content_block": b})
            yield sse("content_block_stop", {"type": "content_block_stop", "index": i})
        delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
        yield sse("message_delta", {"type": "message_delta", "delta": delta, "usage": message["usage"]})
        yield sse("message_stop", {"type": "message_stop"})

    def _broken(self, message: dict[str, Any], etype: str, text: str) -> Iterator[str]:
        yield next(self._events(message))
        error = {"type": "error", "error": {"type": etype, "message": text}}
        yield f"event: error\ndata: {json.dumps(error)}\n\n"

    @staticmethod
    def _error(refusal: _Refusal, headers: dict[str, str] | None = None) -> JSONResponse:
        body = {"type": "error", "error": {"type": refusal.etype, "message": refusal.message}}
        return JSONResponse(body, status_code=refusal.status, headers=headers)


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _has(message: dict[str, Any], types: tuple[str, ...]) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(b.get("type") in types for b in content)


def _after_compaction(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages from the newest ``compaction`` block on: the API drops every block before it."""
    for i in range(len(messages) - 1, -1, -1):
        content = messages[i].get("content")
        if not isinstance(content, list):
            continue
        at = max((j for j, b in enumerate(content) if b.get("type") == "compaction"), default=-1)
        if at >= 0:
            return [dict(messages[i], content=content[at:]), *messages[i + 1 :]]
    return list(messages)
