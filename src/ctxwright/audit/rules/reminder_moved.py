"""``reminder_moved``: a reminder that moved into the prefix (the system prompt or an earlier
message), or a block from the tail of the history that did.

Provider behaviour protected: a reminder appended to the newest message costs only its own
tokens; the same text inserted into the system prompt or an earlier message changes bytes the
cache already holds, so everything from there on is written again -- on a resume, the whole
conversation.

Public agent bug: on ``--resume`` Claude Code replayed a ``<system-reminder>`` block (the skill
listing) into the first user message where the session before the resume had it elsewhere,
breaking the cache of every turn after the resume (anthropics/claude-code#43657, refiled as
#67497).

Checked on a pair of requests: a ``<system-reminder>…</system-reminder>`` (or ``<reminder>``) span, or the last text
block of the previous request's last message (at least :data:`MIN_BLOCK` characters), that the
current request holds in its system prompt or in a message the previous request also held,
where the previous request did not hold it at that place.
"""

from __future__ import annotations

import re
from typing import Any

from ctxwright.audit.compare import AuditRequest
from ctxwright.audit.rules.base import Finding, Settings

name = "reminder_moved"
fix = "append reminders to the newest message only; never insert them into the system prompt or earlier turns"

#: a reminder block: ``<system-reminder>…</system-reminder>`` (Claude Code's), ``<reminder>…</reminder>``
_REMINDER = re.compile(r"<((?:[a-z]+[-_])?reminder)>.*?</\1>", re.S)
#: the shortest tail block followed (a shorter one, "ok", is found everywhere)
MIN_BLOCK = 24
#: characters of a moved text shown
SHOWN = 40


def texts(message: Any) -> list[str]:
    """The texts a message holds: its string content, or each block's text (a tool result's too)."""
    if not isinstance(message, dict):
        return []
    content = message.get("content")
    if isinstance(content, str):
        return [content]
    out: list[str] = []
    for b in content if isinstance(content, list) else ():
        if isinstance(b, dict):
            for key in ("text", "content"):
                v = b.get(key)
                if isinstance(v, str):
                    out.append(v)
                elif isinstance(v, list):
                    out.extend(x["text"] for x in v if isinstance(x, dict) and isinstance(x.get("text"), str))
    return out


def _candidates(previous: AuditRequest) -> list[tuple[str, bool]]:
    """(text, whether it sat at the tail of the history) of what may move."""
    out: list[tuple[str, bool]] = []
    seen: set[str] = set()
    last = texts(previous.messages[-1]) if previous.messages else []
    if last and len(last[-1]) >= MIN_BLOCK:
        out.append((last[-1], True))
        seen.add(last[-1])
    tail = "\n".join(last)
    for where in [previous.system, *("\n".join(texts(m)) for m in previous.messages)]:
        for m in _REMINDER.finditer(where):
            if m.group() not in seen:
                seen.add(m.group())
                out.append((m.group(), m.group() in tail))
    return out


def check(previous: AuditRequest | None, current: AuditRequest, settings: Settings) -> Finding | None:
    if previous is None:
        return None
    places = [("system prompt", previous.system, current.system)]
    for i, (a, b) in enumerate(zip(previous.messages, current.messages, strict=False)):
        if a is not b and a != b:
            places.append((f"msg#{i + 1}", "\n".join(texts(a)), "\n".join(texts(b))))
    places = [p for p in places if p[1] != p[2]]
    if not places or _shifted(previous, current):
        return None
    news = [(w, old, new) for w, old, new in places if "reminder>" in new]
    for text, at_tail in _candidates(previous):
        for where, old, new in places:
            if text in new and text not in old:
                return _found(where, new.index(text), text, at_tail)
    for where, old, new in news:  # a reminder inserted where none of its kind was
        for m in _REMINDER.finditer(new):
            if m.group() not in old:
                return _found(where, m.start(), m.group(), False)
    return None


def _shifted(previous: AuditRequest, current: AuditRequest) -> bool:
    """Whether the history moved up whole (a sliding window): the previous request's last
    message sits earlier in this one, and every text in it moved with it -- no reminder moved."""
    if not previous.messages:
        return False
    last = previous.messages[-1]
    return any(m == last for m in current.messages[: len(previous.messages) - 1])


def _found(where: str, at: int, text: str, at_tail: bool) -> Finding:
    shown = " ".join(text.split())
    shown = shown if len(shown) <= SHOWN else shown[: SHOWN - 1] + "…"
    origin = "from the tail of the history " if at_tail else ""
    return Finding(
        name,
        f"{where} @char {at}: {shown!r} moved {origin}into the prefix",
        fix,
        details={"where": where, "char": at, "text": text[:200], "from_tail": at_tail},
    )
