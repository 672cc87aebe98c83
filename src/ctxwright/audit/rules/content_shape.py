"""``content_shape``: a message whose content was a string is sent as a list of blocks (or
back), with the same text.

Provider behaviour protected: the cache keys on the rendered bytes of each message, and a
string content and a one-block list ``[{"type": "text", "text": ...}]`` render differently
(different JSON, and on several servers a different template path). The same words in another
shape break the prefix at that message, and everything after it is written again.

Public agent bug: on ``--resume`` Claude Code replayed its session-start context message as a
plain string instead of the one text block it was first sent as, so every resume re-wrote the
conversation from that message on (anthropics/claude-code#93490).

Checked on a pair of requests: the first message, among those both requests hold, whose
content changed between a string and a list of blocks whose text is the same string.
"""

from __future__ import annotations

from typing import Any

from ctxwright.audit.compare import AuditRequest
from ctxwright.audit.rules.base import Finding, Settings

name = "content_shape"
fix = "send each message's content in one shape for the whole session (keep a string a string); never re-serialise history"


def block_text(content: Any) -> str | None:
    """The text of a list of text blocks (``None`` when an item is not a text block)."""
    if not isinstance(content, list) or not content:
        return None
    parts = []
    for b in content:
        if (
            not isinstance(b, dict)
            or not isinstance(b.get("text"), str)
            or b.get("type") not in ("text", "input_text", "output_text")
        ):
            return None
        parts.append(b["text"])
    return "".join(parts)


def check(previous: AuditRequest | None, current: AuditRequest, settings: Settings) -> Finding | None:
    if previous is None:
        return None
    for i, (a, b) in enumerate(zip(previous.messages, current.messages, strict=False)):
        if a is b or a == b:
            continue
        old, new = a.get("content"), b.get("content")
        if isinstance(old, str) and block_text(new) == old:
            shape = "a string became a list of blocks"
        elif isinstance(new, str) and block_text(old) == new:
            shape = "a list of blocks became a string"
        else:
            continue
        role = b.get("role")
        return Finding(
            name,
            f"msg#{i + 1} ({role}) content @0: {shape} with the same text",
            fix,
            details={"message_index": i + 1, "role": role, "before": type(old).__name__, "after": type(new).__name__},
        )
    return None
