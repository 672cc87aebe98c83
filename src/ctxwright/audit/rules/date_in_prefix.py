"""``date_in_prefix``: a date or time in the system prompt or a tool description.

Provider behaviour protected: a prompt cache serves only the longest byte-identical prefix
(Anthropic: tools, then system, then messages; OpenAI: system first). A date or clock written
into the system prompt or a tool description changes that prefix every day (or every call),
and every token after it is written to the cache again, on every call of every session.

Public agent bug: a date re-synthesised into the prefix is one of the resume cache bugs
reported against Claude Code, where the first request after ``--resume`` re-writes the whole
cache (anthropics/claude-code#42338 and the reports named with it, #86299 and #87137).

Checked on a pair of requests: the first difference of the prefix falls inside a date or time
on both sides (an ISO date, a month name and day, a clock, an epoch timestamp), or the text the
current request put there holds a date or time no version number takes (a date written in where
there was none: the resume bug above, or a build that started adding today's date). Checked on the
first request of a conversation: a span of the prefix shaped like a date or time no version
number takes (``2026-12-06``, ``Dec 6``, ``15:48:02``, ``3:45 PM``) is a warning: it will change.
"""

from __future__ import annotations

from ctxwright.audit.compare import AuditRequest
from ctxwright.audit.rules.base import (
    LOOSE_DATE,
    STRICT_DATE,
    Finding,
    Settings,
    common_suffix_len,
    first_change,
    prefix_texts,
    span_at,
    spans,
)

name = "date_in_prefix"
fix = "keep the date and time out of the system prompt and tools: send them in the newest user message"


def check(previous: AuditRequest | None, current: AuditRequest, settings: Settings) -> Finding | None:
    if previous is None:
        return _warning(current)
    if previous.system == current.system and (previous.tools is current.tools or previous.tools == current.tools):
        return None
    old = dict(prefix_texts(previous))
    for where, text in prefix_texts(current):
        before = old.get(where)
        if before is None:
            continue
        ch = first_change(before, text)
        if ch is None:
            continue
        now, then = span_at(spans(LOOSE_DATE, text), ch.at), span_at(spans(LOOSE_DATE, before), ch.at)
        if now is None or then is None:
            added = _added_date(before, text, ch.at)
            if added is None:
                continue
            return Finding(
                name,
                f"{where} @{ch.byte}: the date/time {added!r} was written into it",
                fix,
                details={"where": where, "byte": ch.byte, "before": None, "after": added},
            )
        was, is_ = before[then[0] : then[1]], text[now[0] : now[1]]
        return Finding(
            name,
            f"{where} @{ch.byte}: the date/time {was!r} became {is_!r}",
            fix,
            details={"where": where, "byte": ch.byte, "before": was, "after": is_},
        )
    return None


def _added_date(before: str, after: str, at: int) -> str | None:
    """A strict date or time inside the text ``after`` holds in place of ``before``'s from
    character ``at`` on (the two share everything before ``at`` and their common tail)."""
    tail = common_suffix_len(before[at:], after[at:])
    m = STRICT_DATE.search(after, at, len(after) - tail)
    return m.group() if m is not None else None


def _warning(current: AuditRequest) -> Finding | None:
    for where, text in prefix_texts(current):
        m = STRICT_DATE.search(text)
        if m is not None:
            byte = len(m.string[: m.start()].encode("utf-8", "surrogatepass"))
            return Finding(
                name,
                f"{where} @{byte} holds the date/time {m.group()!r}: the prefix will change when it does",
                fix,
                "warning",
                {"where": where, "byte": byte, "text": m.group()},
            )
    return None
