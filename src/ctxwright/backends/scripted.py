"""A deterministic backend for tests: replies come from a list, requests are recorded.

Why: the agent loop's error handling, parallel calls and caps must be tested exactly,
which a real model cannot guarantee. The scripted backend still goes through the same
``Backend`` interface, so nothing in the loop is special-cased for tests. Its usage
reports ``cached_tokens`` as the length of the longest common prefix (in estimated tokens
of canonical request bytes) with the previous request -- what an ideal prefix cache
would reuse -- so audits have numbers to check. That comparison is kept per message
(:class:`PrefixCache`): a benchmark of ctxwright's own per-turn work runs on this backend,
and comparing every request with the last one character by character would make the
backend's own cost -- and the cold CPU caches it leaves behind -- grow with the session.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ctxwright.backends.base import Backend, EventSink
from ctxwright.core.incremental import common_prefix_len
from ctxwright.core.messages import Message, ToolCall, Usage, canonical_json
from ctxwright.core.request import ChatRequest, Completion, ToolSpec
from ctxwright.core.tokens import cjk_chars, estimate_from, estimate_tokens
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


class PrefixCache:
    """What an ideal prefix cache would reuse of a request: the estimated tokens of the longest
    common prefix of its canonical text (``request.canonical_bytes()``, decoded) with the
    previous request's, and the estimated tokens of the whole text.

    The text is ``{"messages":[`` then the messages' canonical JSON joined by commas, then the
    tool fields and ``}`` (``core/request.py: RequestHasher`` relies on the same layout). The
    previous request's text is kept per message, with running lengths and CJK counts; the
    messages a request shares with the last one (the same objects, or equal: equal frozen
    messages have the same text) are skipped, and only the rest of the two texts is compared.
    Both figures equal those of a comparison of the whole texts character by character
    (tested)."""

    _HEAD = '{"messages":['

    def __init__(self) -> None:
        self._messages: list[Message] = []
        self._segments: list[str] = []  # message i's text, after a comma for i > 0
        self._ends: list[int] = []  # characters of the segments up to and including i
        self._cjk: list[int] = []  # CJK characters of the segments up to and including i
        self._tail = ""
        self._tail_key: tuple[tuple[ToolSpec, ...], str] | None = None
        self._seen = False

    def _tail_of(self, request: ChatRequest) -> str:
        """The text after the messages: ``]``, the tool fields, ``}``."""
        key = (request.tools, request.tool_choice)
        if self._tail_key is None or key[0] is not self._tail_key[0] or key[1] != self._tail_key[1]:
            bare = ChatRequest(messages=(), tools=request.tools, tool_choice=request.tool_choice)
            self._tail = canonical_json(bare.to_wire())[len(self._HEAD) :]
            self._tail_key = key
        return self._tail

    def usage(self, request: ChatRequest) -> tuple[int, int]:
        """``(prompt tokens, cached tokens)`` of ``request``, then remember it as the previous one."""
        msgs = request.messages
        k = common_prefix_len(self._messages, msgs)
        old_rest = "".join(self._segments[k:]) + self._tail if self._seen else None
        del self._messages[k:], self._segments[k:], self._ends[k:], self._cjk[k:]
        end = self._ends[-1] if k else 0
        cjk = self._cjk[-1] if k else 0
        for i in range(k, len(msgs)):
            seg = ("," if i else "") + msgs[i].canonical()
            end += len(seg)
            cjk += cjk_chars(seg)
            self._messages.append(msgs[i])
            self._segments.append(seg)
            self._ends.append(end)
            self._cjk.append(cjk)
        tail = self._tail_of(request)
        head = len(self._HEAD)
        prompt = estimate_from(head + end + len(tail), cjk + cjk_chars(tail))
        if old_rest is None:  # the first request: nothing to share
            self._seen = True
            return prompt, 0
        new_rest = "".join(self._segments[k:]) + tail
        c = common_prefix(old_rest, new_rest)
        shared = head + (self._ends[k - 1] if k else 0)
        shared_cjk = (self._cjk[k - 1] if k else 0) + cjk_chars(new_rest[:c])
        return prompt, estimate_from(shared + c, shared_cjk)


class ScriptedBackend(Backend):
    """Returns the scripted replies in order; when they run out, the last one repeats.

    A reply may be a ``Message``, a plain string (final answer), a ``BackendError`` to
    raise, or a function of the request.
    """

    name = "scripted"

    def __init__(self, replies: Sequence[Reply], model: str = "scripted") -> None:
        if not replies:
            raise ValueError("ScriptedBackend needs at least one reply")
        self.model = model
        self._replies = list(replies)
        self._i = 0
        self.requests: list[ChatRequest] = []
        self._prefix = PrefixCache()

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
