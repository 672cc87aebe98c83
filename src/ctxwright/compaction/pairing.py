"""Invariant: every tool result answers a tool call in the context, and every call is answered.

Provider rule protected: OpenAI rejects a ``tool`` message that does not follow an
assistant message carrying its ``tool_call_id`` ("messages with role 'tool' must be a
response to a preceding message with 'tool_calls'") and an assistant tool call whose
results are missing before the next turn; Anthropic requires each ``tool_use`` to be
answered by a ``tool_result`` in the very next message. Trimming that ignores this is
the most reported compaction bug in peer frameworks.
"""

from __future__ import annotations

from ctxwright.core.messages import Message


def pairing_violations(messages: list[Message]) -> list[str]:
    """Describe every orphan result and every unanswered call (empty list: the view is valid).

    The results of one assistant message must come right after it, one per call id, before
    any other message -- the strictest provider's rule, so a view valid here is valid for all.
    """
    out: list[str] = []
    open_ids: list[str] = []
    owner = -1
    for i, m in enumerate(messages):
        if m.role == "tool":
            if m.tool_call_id in open_ids:
                open_ids.remove(m.tool_call_id)
            else:
                out.append(f"message {i}: tool result {m.tool_call_id!r} answers no open tool call")
            continue
        if open_ids:
            out.append(f"message {owner}: tool call(s) {', '.join(open_ids)} unanswered before message {i}")
            open_ids = []
        if m.role == "assistant" and m.tool_calls:
            open_ids = [tc.id for tc in m.tool_calls]
            owner = i
    if open_ids:
        out.append(f"message {owner}: tool call(s) {', '.join(open_ids)} unanswered at the end")
    return out
