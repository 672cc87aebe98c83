"""Layer 3, clearing: old tool results beyond the newest K become placeholders.

Why: a result's value decays fast -- the model used it in the next step or two -- while
its tokens stay in every later request (context rot). Clearing keeps the system prompt,
the first user message, every assistant turn and the newest K results, and replaces the
older results' contents only (so every tool call stays answered). It runs in batches at a
trigger share of the window (manager.py), never every turn: each clearing rewrites bytes
the provider has cached, and the audit counts that cost as a ``compaction``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ctxwright.core.events import ToolEvent
from ctxwright.core.messages import Message


def placeholder(tool_name: str, result_id: str, tokens: int) -> str:
    """Short on purpose: in a long session hundreds of these stay in the context."""
    return f'[cleared {tool_name} result, {tokens:,} tokens; read_result(result_id="{result_id}") restores it]'


def clear_old_results(
    entries: Iterable[tuple[int | None, Message]],
    meta: dict[int, ToolEvent],
    keep_recent: int,
    min_tokens: int,
    count: Callable[[str], int],
    already: set[int],
    keep_tokens: int | None = None,
) -> dict[int, str]:
    """Event seq -> placeholder for every result older than the newest ``keep_recent``, or
    older than the newest results that fit in ``keep_tokens`` together (whichever is fewer)."""
    results = [(seq, m) for seq, m in entries if m.role == "tool" and seq is not None]
    kept = 0
    used = 0
    for _seq, m in reversed(results):
        if kept >= keep_recent:
            break
        n = count(m.content or "")
        if keep_tokens is not None and kept and used + n > keep_tokens:
            break
        kept += 1
        used += n
    old = results[: len(results) - kept]
    out: dict[int, str] = {}
    for seq, m in old:
        if seq in already:
            continue
        content = m.content or ""
        if len(content) < min_tokens:  # cheap pre-check: shorter in chars than the floor in tokens
            continue
        tokens = count(content)
        if tokens < min_tokens:
            continue
        info = meta.get(seq)
        out[seq] = placeholder(
            (info.tool_name if info else None) or "tool",
            (info.result_id if info else None) or m.tool_call_id or str(seq),
            tokens,
        )
    return out
