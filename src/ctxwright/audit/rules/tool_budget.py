"""``tool_budget``: the tools of a request take more tokens than ``--max-tool-tokens N``.

Provider behaviour protected: every tool schema is part of every request's prompt (cached or
not, it fills the context window and, read from cache or written to it, is billed each call).
An agent with many MCP servers can send tens of thousands of tokens of tool definitions before
the first word of the task, on every call.

Public agent bug: MCP-heavy agents whose connected servers' tool definitions take a large share
of every request, the reason Claude Code defers MCP tools behind a search tool (its interaction
with the cache: anthropics/claude-code#42309).

Checked on one request, when a budget is given: the sum of the tools' tokens (each tool's
canonical JSON, by the audit's counter) over it, on the first request of a conversation and
whenever the tool list changes (not again on every append). The line names the largest tools.
"""

from __future__ import annotations

from ctxwright.audit.compare import AuditRequest
from ctxwright.audit.rules.base import Finding, Settings

name = "tool_budget"
fix = "load fewer tools per request (defer rarely used MCP tools behind a search tool) or shorten their descriptions"


def check(previous: AuditRequest | None, current: AuditRequest, settings: Settings) -> Finding | None:
    limit = settings.max_tool_tokens
    if limit is None or not current.tools:
        return None
    if previous is not None and (previous.tools is current.tools or previous.tools == current.tools):
        return None
    counts = settings.tool_tokens(current.tools)
    total = sum(n for _, n in counts)
    if total <= limit:
        return None
    largest = sorted(counts, key=lambda c: -c[1])[:3]
    named = ", ".join(f"{n!r} {k:,}" for n, k in largest)
    return Finding(
        name,
        f"tools: {total:,} tokens in {len(counts)} tool(s), over --max-tool-tokens {limit:,} (largest: {named})",
        fix,
        details={"tokens": total, "limit": limit, "tools": len(counts), "largest": [list(c) for c in largest]},
    )
