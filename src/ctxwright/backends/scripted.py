"""A deterministic backend for tests: replies come from a list, requests are recorded.

Why: the agent loop's error handling, parallel calls and caps must be tested exactly,
which a real model cannot guarantee. The scripted backend still goes through the same
``Backend`` interface, so nothing in the loop is special-cased for tests. Its usage
reports ``cached_tokens`` as the length of the longest common prefix (in estimated tokens
of canonical request bytes) with the previous request -- what an ideal prefix cache
would reuse -- so audits have numbers to check.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

from ctxwright.backends.base import Backend, EventSink
from ctxwright.core.messages import Message, ToolCall, Usage
from ctxwright.core.request import ChatRequest, Completion
from ctxwright.core.tokens import estimate_tokens
from ctxwright.errors import BackendError

Reply = Message | str | BackendError | Callable[[ChatRequest], Message | str]


def call(name: str, arguments: str | dict[str, Any], call_id: str | None = None) -> ToolCall:
    """Shorthand for a scripted tool call; dict arguments are JSON-encoded."""
    import json

    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolCall(id=call_id or f"call_{name}_{abs(hash(args)) % 10**8}", name=name, arguments=args)


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
        self._prev_text = ""

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
        text = request.canonical_bytes().decode("utf-8")
        common = sum(1 for _ in itertools.takewhile(lambda p: p[0] == p[1], zip(text, self._prev_text, strict=False)))
        self._prev_text = text
        usage = Usage(
            prompt_tokens=estimate_tokens(text),
            completion_tokens=estimate_tokens(msg.content or ""),
            cached_tokens=estimate_tokens(text[:common]),
            prefill_ms=0.0,
            decode_ms=0.0,
        )
        return Completion(
            message=msg, usage=usage, finish_reason="tool_calls" if msg.tool_calls else "stop", model=self.model
        )
