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
UUID, a hex token, a run of letters mixed with digits).
"""

from __future__ import annotations

from ctxwright.audit.compare import AuditRequest
from ctxwright.audit.rules.base import (
    Finding,
    Settings,
    changed_tools,
    first_change,
    looks_like_id,
    span_at,
    url_spans,
    word_at,
)
from ctxwright.core.messages import canonical_json

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
                continue
            what = "id"
        return Finding(
            name,
            f"tool {tool!r} @{ch.byte}: the per-session {what} {was!r} became {is_!r}",
            fix,
            details={"tool": tool, "byte": ch.byte, "kind": what, "before": was, "after": is_},
        )
    return None
