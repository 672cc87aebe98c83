"""``session_id_in_tool``: a per-session id or URL in a tool description or schema.

Provider behaviour protected: the tool definitions are the first thing Anthropic caches (tools,
then system, then messages) and part of the system prompt's render for OpenAI-style servers, so
one tool whose text changes with each session makes every session write the whole prefix again
instead of reading the previous session's cache.

Public agent bug: a per-session URL in a tool description is one of the resume cache bugs
reported against Claude Code (anthropics/claude-code#47261); the same mechanism with a per-run
UUID written into the first message cost one project 76% of its cache-write spend
(multica-ai/multica#6008).

Checked on a pair of requests: a tool present in both whose schema differs, where the first
difference lies inside a URL, or inside a word that reads as a generated id on both sides (a
UUID, a hex token, a run of letters mixed with digits), or where the text written in place of
the old holds such a URL or id (an id added where there was none).
"""

from __future__ import annotations

import re

from ctxwright.audit.compare import AuditRequest
from ctxwright.audit.rules.base import (
    Finding,
    Settings,
    changed_tools,
    common_suffix_len,
    first_change,
    looks_like_id,
    span_at,
    url_spans,
    word_at,
    words_in,
)
from ctxwright.core.messages import canonical_json

#: a port in a URL (``127.0.0.1:53211``): local servers a session started pick one per session
_PORT = re.compile(r"://[^/\s]*:\d{2,5}\b")

name = "session_id_in_tool"
fix = "keep per-session ids and URLs out of tool descriptions: pass them as an argument or in the newest message"


def check(previous: AuditRequest | None, current: AuditRequest, settings: Settings) -> Finding | None:
    if previous is None:
        return None
    for tool, old, new in changed_tools(previous.tools, current.tools):
        before, after = canonical_json(old), canonical_json(new)
        ch = first_change(before, after)
        if ch is None:
            continue
        url = span_at(url_spans(after), ch.at)
        was_url = span_at(url_spans(before), ch.at)
        if url is not None and was_url is not None:
            what, was, is_ = "URL", before[was_url[0] : was_url[1]], after[url[0] : url[1]]
        else:
            was, is_ = word_at(before, ch.at), word_at(after, ch.at)
            if not (looks_like_id(was) and looks_like_id(is_)):
                added = _added_id(before, after, ch.at)
                if added is None:
                    continue
                what, is_ = added
                return Finding(
                    name,
                    f"tool {tool!r} @{ch.byte}: the per-session {what} {is_!r} was written into it",
                    fix,
                    details={"tool": tool, "byte": ch.byte, "kind": what, "before": None, "after": is_},
                )
            what = "id"
        return Finding(
            name,
            f"tool {tool!r} @{ch.byte}: the per-session {what} {was!r} became {is_!r}",
            fix,
            details={"tool": tool, "byte": ch.byte, "kind": what, "before": was, "after": is_},
        )
    return None


def _added_id(before: str, after: str, at: int) -> tuple[str, str] | None:
    """``("URL" | "id", text)`` of a URL or a generated id inside the text ``after`` holds in
    place of ``before``'s from character ``at`` on: an id written in where there was none."""
    end = len(after) - common_suffix_len(before[at:], after[at:])
    for s, e in url_spans(after):
        url = after[s:e]
        # a URL with an id or a port in it: a link to documentation is not per-session
        if s < end and e > at and (any(looks_like_id(w) for w in words_in(url)) or _PORT.search(url)):
            return "URL", url
    for word in words_in(after[max(0, at - 1) : end + 1]):
        if looks_like_id(word):
            return "id", word
    return None
