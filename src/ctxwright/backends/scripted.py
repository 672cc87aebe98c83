"""A deterministic backend for tests: replies come from a list, requests are recorded.

Why: the agent loop's error handling, parallel calls and caps must be tested exactly,
which a real model cannot guarantee. The scripted backend still goes through the same
``Backend`` interface, so nothing in the loop is special-cased for tests. Its usage
reports ``cached_tokens`` as the length of the longest common prefix (in estimated tokens
of the request's canonical text, its parts in the order the server renders them:
``core/wire_order.py``) with the previous request -- what an ideal prefix cache would
reuse -- so audits have numbers to check. That comparison is kept per message
(:class:`PrefixCache`): a benchmark of ctxwright's own per-turn work runs on this backend,
and comparing every request with the last one character by character would make the
backend's own cost -- and the cold CPU caches it leaves behind -- grow with the session.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ctxwright.backends.base import Backend, EventSink
from ctxwright.core.incremental import common_prefix_len
from ctxwright.core.messages import Message, ToolCall, Usage, canonical_json
from ctxwright.core.request import ChatRequest, Completion, ToolSpec
from ctxwright.core.tokens import cjk_chars, estimate_from, estimate_tokens
from ctxwright.core.wire_order import arrange
from ctxwright.errors import BackendError

Reply = Message | str | BackendError | Callable[[ChatRequest], Message | str]


def call(name: str, arguments: str | dict[str, Any], call_id: str | None = None) -> ToolCall:
    """Shorthand for a scripted tool call; dict arguments are JSON-encoded."""
    import json

    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolCall(id=call_id or f"call_{name}_{abs(hash(args)) % 10**8}", name=name, arguments=args)


def common_prefix(a: str, b: str) -> int:
    """How many leading characters ``a`` and ``b`` share, by halving the range where they part
    (string slices compare in C; a character loop in Python costs far more)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # invariant: a[:lo] == b[:lo], and they part before hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True)
class _Tools:
    """The tool fields of a request as one unit of its wire text (equal when the tools and the
    tool choice are)."""

    tools: tuple[ToolSpec, ...]
    choice: str


def _units(request: ChatRequest, api: str | None) -> list[Message | _Tools]:
    """The request's parts in the order the server renders them (``core/wire_order.py``)."""
    msgs = request.messages
    n = 1 if msgs and msgs[0].role == "system" else 0
    return arrange(api, system=msgs[:n], tools=(_Tools(request.tools, request.tool_choice),), messages=msgs[n:])


def _tool_fields(request: ChatRequest) -> str:
    """The canonical JSON of the request's tool fields, as they follow the messages in
    ``canonical_bytes()``: ``,"tool_choice":...,"tools":[...]``, or nothing without tools."""
    bare = ChatRequest(messages=(), tools=request.tools, tool_choice=request.tool_choice)
    return canonical_json(bare.to_wire())[len(_HEAD) + 1 : -1]


_HEAD = '{"messages":['
_END = "]}"


def wire_text(request: ChatRequest, api: str | None = None) -> str:
    """The text the scripted backend counts a request's tokens and its reuse on: the pieces of
    ``request.canonical_bytes()`` -- each message's canonical JSON (after a comma but the
    first), the tool fields -- in ``api``'s wire order, between ``{"messages":[`` and ``]}``.
    The same characters as the canonical bytes, so the prompt count is theirs; only what a
    common prefix covers follows the wire."""
    parts: list[str] = []
    first = True
    for unit in _units(request, api):
        if isinstance(unit, _Tools):
            parts.append(_tool_fields(request))
        else:
            parts.append(("" if first else ",") + unit.canonical())
            first = False
    return _HEAD + "".join(parts) + _END


class PrefixCache:
    """What an ideal prefix cache would reuse of a request: the estimated tokens of the longest
    common prefix of its :func:`wire_text` with the previous request's, and the estimated
    tokens of the whole text.

    Why the wire order: a server caches the prompt it rendered, where the tool definitions sit
    with the system prompt ahead of the conversation (Anthropic: ahead of the system prompt),
    not the JSON body with its sorted keys; counted on the body, the tools block after the
    messages was never reused, and a changed tool list cost nothing of the history.

    The previous request's text is kept per unit (a message, or the tool fields), with running
    lengths and CJK counts; the units a request shares with the last one (the same objects, or
    equal: equal frozen messages have the same text) are skipped, and only the rest of the two
    texts is compared. Both figures equal those of a comparison of the whole texts character by
    character (tested)."""

    def __init__(self, api: str | None = None) -> None:
        self.api = api
        self._units: list[Message | _Tools] = []
        self._segments: list[str] = []  # unit i's text
        self._ends: list[int] = []  # characters of the segments up to and including i
        self._cjk: list[int] = []  # CJK characters of the segments up to and including i
        self._tools_text: tuple[_Tools, str] | None = None
        self._seen = False

    def _text_of_tools(self, unit: _Tools, request: ChatRequest) -> str:
        known = self._tools_text
        if known is None or unit.tools is not known[0].tools or unit.choice != known[0].choice:
            known = self._tools_text = (unit, _tool_fields(request))
        return known[1]

    def usage(self, request: ChatRequest) -> tuple[int, int]:
        """``(prompt tokens, cached tokens)`` of ``request``, then remember it as the previous one."""
        units = _units(request, self.api)
        k = common_prefix_len(self._units, units)
        old_rest = "".join(self._segments[k:]) + _END if self._seen else None
        del self._units[k:], self._segments[k:], self._ends[k:], self._cjk[k:]
        end = self._ends[-1] if k else 0
        cjk = self._cjk[-1] if k else 0
        first = not any(isinstance(u, Message) for u in self._units[:2])  # no message before unit k
        # (one tools unit at most: a message, if any, is among the first two)
        for i in range(k, len(units)):
            unit = units[i]
            if isinstance(unit, _Tools):
                seg = self._text_of_tools(unit, request)
            else:
                seg = ("" if first else ",") + unit.canonical()
                first = False
            end += len(seg)
            cjk += cjk_chars(seg)
            self._units.append(unit)
            self._segments.append(seg)
            self._ends.append(end)
            self._cjk.append(cjk)
        head = len(_HEAD)
        prompt = estimate_from(head + end + len(_END), cjk)
        if old_rest is None:  # the first request: nothing to share
            self._seen = True
            return prompt, 0
        new_rest = "".join(self._segments[k:]) + _END
        c = common_prefix(old_rest, new_rest)
        shared = head + (self._ends[k - 1] if k else 0)
        shared_cjk = (self._cjk[k - 1] if k else 0) + cjk_chars(new_rest[:c])
        return prompt, estimate_from(shared + c, shared_cjk)


class ScriptedBackend(Backend):
    """Returns the scripted replies in order; when they run out, the last one repeats.

    A reply may be a ``Message``, a plain string (final answer), a ``BackendError`` to
    raise, or a function of the request. ``api`` picks the wire order its cache counts reuse in
    (``core/wire_order.py``: ``"chat"``, the default, ``"anthropic"`` or ``"responses"``).
    """

    name = "scripted"

    def __init__(self, replies: Sequence[Reply], model: str = "scripted", *, api: str = "chat") -> None:
        if not replies:
            raise ValueError("ScriptedBackend needs at least one reply")
        self.model = model
        self._replies = list(replies)
        self._i = 0
        self.requests: list[ChatRequest] = []
        self._prefix = PrefixCache(api)

    def complete(self, request: ChatRequest, *, on_event: EventSink | None = None) -> Completion:
        """The next scripted reply (``on_event`` is not used: nothing streams or retries)."""
        self.requests.append(request)
        reply = self._replies[min(self._i, len(self._replies) - 1)]
        self._i += 1
        if isinstance(reply, BackendError):
            raise reply
        if callable(reply) and not isinstance(reply, Message):
            reply = reply(request)
        msg = reply if isinstance(reply, Message) else Message(role="assistant", content=str(reply))
        prompt, cached = self._prefix.usage(request)
        usage = Usage(
            prompt_tokens=prompt,
            completion_tokens=estimate_tokens(msg.content or ""),
            cached_tokens=cached,
            prefill_ms=0.0,
            decode_ms=0.0,
        )
        return Completion(
            message=msg, usage=usage, finish_reason="tool_calls" if msg.tool_calls else "stop", model=self.model
        )
