"""Invariant: reasoning stays with its tool loop.

Provider rule protected: thinking models that interleave reasoning with tool calls
(DeepSeek's thinking mode, Anthropic's extended thinking) require the reasoning of the
*current* tool loop -- from the user message that started it to the final answer -- to be
sent back complete; a loop with some of its reasoning removed is rejected or degrades the
model. A loop that carries reasoning is therefore one unit: kept whole or cut whole.
"""

from __future__ import annotations

from ctxwright.core.messages import Message


def tool_loops(messages: list[Message]) -> list[tuple[int, int]]:
    """Spans ``[start, end)`` of tool loops: a user message, then assistant tool-call turns
    and their results, up to and including the next assistant message without tool calls."""
    loops: list[tuple[int, int]] = []
    start: int | None = None
    for i, m in enumerate(messages):
        if m.role == "user" and start is None:
            start = i
        elif m.role == "assistant" and not m.tool_calls and start is not None:
            loops.append((start, i + 1))
            start = None
    if start is not None:
        loops.append((start, len(messages)))
    return loops


def carries_reasoning(messages: list[Message], span: tuple[int, int]) -> bool:
    return any(m.role == "assistant" and m.reasoning_content for m in messages[span[0] : span[1]])


def reasoning_violations(messages: list[Message]) -> list[str]:
    """A loop in which some tool-call turns carry reasoning and others lost it."""
    out = []
    for a, b in tool_loops(messages):
        turns = [m for m in messages[a:b] if m.role == "assistant" and m.tool_calls]
        with_r = sum(1 for m in turns if m.reasoning_content)
        if 0 < with_r < len(turns):
            out.append(
                f"messages {a}-{b - 1}: {len(turns) - with_r} of {len(turns)} tool-call turns of one "
                "loop lost their reasoning"
            )
    return out
