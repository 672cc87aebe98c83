"""Compaction for a framework's own message list: rarely, deeply, and never breaking a rule a
provider enforces.

Why a wire-level compactor: a framework keeps its own history (Agents SDK items, pydantic-ai
messages, LangChain messages) and offers a hook that may rewrite what is sent (a model-input
filter, a history processor, a middleware). Each adapter converts its history to OpenAI chat
messages and back; this module decides what to send, the same way for all three.

What it keeps from ctxwright's compaction (``compaction/``):

* **Rarely and deeply.** Nothing changes until the request passes ``trigger_tokens``; then every
  tool result but the newest ``keep_results`` becomes a one-line placeholder at once
  (:func:`placeholder`: a framework agent has no ``read_result`` tool to page it back, so it
  names the call the model can make again instead). A result cleared once stays cleared
  (remembered by its ``tool_call_id``), so between two compactions every request extends the one
  before and the provider's cache holds -- clearing one more result per call would break the
  cache on every call.
* **The invariants** (``compaction/check.py``): no tool result without its call, no call
  without its result, no split parallel batch, the system prompt and first user message kept. A
  view that would break one is not sent: the messages go out as the framework built them.
* **The loss ledger** (``compaction/ledger.py``): per cleared result, the identifiers and
  numbers it held that appear nowhere else in what the model now sees.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ctxwright.compaction.check import violations
from ctxwright.compaction.ledger import appears, items_of, visible_text
from ctxwright.core.messages import Message
from ctxwright.core.tokens import TokenCounter

T = TypeVar("T")


def placeholder(tool_name: str, tool_call_id: str, tokens: int) -> str:
    """What a cleared result leaves: short, since hundreds of them may stay in a long session."""
    return (
        f"[cleared {tool_name} result of call {tool_call_id}, {tokens:,} tokens; call the tool again if it is needed]"
    )


def _counter() -> Callable[[str], int]:
    """The audit's own token count (``core/tokens.py``), so the trigger is judged in the tokens
    the audit reports."""
    return TokenCounter().count


@dataclass(frozen=True)
class Cleared:
    """One tool result a compaction replaced by a placeholder, and what the model lost with it."""

    tool_call_id: str
    tool_name: str
    tokens: int
    lost: tuple[str, ...]  # identifiers and numbers no longer visible anywhere


@dataclass
class WireCompactor:
    """Call it with a request's messages (OpenAI chat form) before each model call; it returns
    the messages to send. ``compactions`` counts the compaction steps; ``ledger`` lists what
    each cleared."""

    trigger_tokens: int
    keep_results: int = 2
    min_tokens: int = 50
    count: Callable[[str], int] = field(default_factory=_counter)
    compactions: int = 0
    ledger: list[Cleared] = field(default_factory=list)
    _cleared: dict[str, str] = field(default_factory=dict)  # tool_call_id -> placeholder
    refused: list[str] = field(default_factory=list)  # invariant violations of views not sent

    def tokens(self, messages: Sequence[dict[str, Any]]) -> int:
        return sum(self.count(visible_text([Message.from_wire(dict(m))])) for m in messages)

    def __call__(self, messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        wire = [dict(m) for m in messages]
        view = self._apply(wire)
        if self.tokens(view) > self.trigger_tokens:
            self._compact(view)
            view = self._apply(wire)
        lead = 0
        while lead < len(wire) and wire[lead].get("role") in ("system", "developer"):
            lead += 1  # the instructions: never compacted, not part of the trajectory checked
        recorded = [Message.from_wire(m) for m in wire[lead:]]
        shown = [Message.from_wire(m) for m in view[lead:]]
        problems = violations(recorded, shown)
        if problems:
            self.refused.extend(problems)
            return wire
        return view

    def _apply(self, wire: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for m in wire:
            cid = m.get("tool_call_id")
            if m.get("role") == "tool" and isinstance(cid, str) and cid in self._cleared:
                m = {**m, "content": self._cleared[cid]}
            out.append(m)
        return out

    def _compact(self, view: list[dict[str, Any]]) -> None:
        """Clear every result but the newest ``keep_results``, in one step."""
        names = {
            c.get("id"): (c.get("function") or {}).get("name", "tool")
            for m in view
            if m.get("role") == "assistant"
            for c in (m.get("tool_calls") or [])
            if isinstance(c, dict)
        }
        results = [m for m in view if m.get("role") == "tool" and isinstance(m.get("tool_call_id"), str)]
        old = results[: max(0, len(results) - self.keep_results)]
        chosen: dict[str, tuple[str, int, str]] = {}
        for m in old:
            cid = str(m["tool_call_id"])
            text = m.get("content") if isinstance(m.get("content"), str) else ""
            n = self.count(text or "")
            if cid in self._cleared or n < self.min_tokens:
                continue
            name = str(names.get(cid) or "tool")
            chosen[cid] = (name, n, text or "")
        if not chosen:
            return
        self.compactions += 1
        for cid, (name, n, _text) in chosen.items():
            self._cleared[cid] = placeholder(name, cid, n)
        after = visible_text([Message.from_wire(m) for m in self._apply(view)])
        for cid, (name, n, text) in chosen.items():
            lost = tuple(v for _kind, v in items_of(text) if not appears(v, after))
            self.ledger.append(Cleared(cid, name, n, lost[:24]))


def tail_reminder(text: str) -> dict[str, Any]:
    """What changes per call (time, state, a TODO list) as a message after the history: the
    place a framework's dynamic instructions move to, so the system prompt stays frozen."""
    return {"role": "user", "content": f"<context_update>\n{text}\n</context_update>"}


def put_back(items: Sequence[T], inserted: Sequence[tuple[int, T]]) -> list[T]:
    """``items`` (what the framework sends) with each message added on an earlier call put back
    where it was sent: ``(n, message)`` goes after the first ``n`` items. Messages a framework's
    history does not hold (an instructions update, a status) then stay in place on every later
    call, so each request extends the one before."""
    out: list[T] = []
    at = 0
    for n, message in inserted:
        out.extend(items[at:n])
        out.append(message)
        at = n
    out.extend(items[at:])
    return out


__all__ = ["Cleared", "WireCompactor", "placeholder", "put_back", "tail_reminder"]
