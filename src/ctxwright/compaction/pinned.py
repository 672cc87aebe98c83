"""Invariant: the system prompt and the first user message are never cut.

Why: the system prompt is the cached prefix and the agent's rules; the first user message
is the task itself. Every summary or trim that dropped it produced an agent that kept
working on nothing (summaries that lose the task are a common complaint about peer
frameworks). Layers may
rewrite tool results and drop later turns, never these two.
"""

from __future__ import annotations

from ctxwright.core.messages import Message


def first_user_index(messages: list[Message]) -> int | None:
    return next((i for i, m in enumerate(messages) if m.role == "user"), None)


def pinned_violations(recorded: list[Message], view: list[Message]) -> list[str]:
    """``view`` (the trajectory without the system message) must begin with the recorded
    first user message, byte for byte."""
    k = first_user_index(recorded)
    if k is None:
        return []
    first = recorded[k]
    j = first_user_index(view)
    if j is None or view[j] != first:
        return ["the first user message is missing or changed in the view"]
    if any(m.role != "user" for m in view[:j]):
        return ["messages before the first user message were kept while it moved"]
    return []
