"""``tools_reordered``: the same tools, sent in a different order.

Provider behaviour protected: the tool list is cached as rendered, in order (Anthropic caches
it first of all; OpenAI-style templates render it with the system prompt). The same tools in
another order are other bytes: from the first tool out of place on, the prefix is written again.

Public agent bug: a tool list assembled from MCP servers that connect in a different order
after a resume or a reconnect; the prefix changes though no tool did (named with the resume
cache bugs reported against Claude Code, anthropics/claude-code#42338, and the interaction of
MCP servers with a resumed cache, anthropics/claude-code#42309).

Checked on a pair of requests: both send the same tool names, each once, in another order.
"""

from __future__ import annotations

from ctxwright.audit.compare import AuditRequest
from ctxwright.audit.rules.base import Finding, Settings
from ctxwright.core.request import tool_name

name = "tools_reordered"
fix = "send the tools in one fixed order (sort them by name once) for the whole session"


def check(previous: AuditRequest | None, current: AuditRequest, settings: Settings) -> Finding | None:
    if previous is None or previous.tools is current.tools or len(previous.tools) != len(current.tools):
        return None
    old = [tool_name(t) for t in previous.tools]
    new = [tool_name(t) for t in current.tools]
    if old == new or None in new or len(set(new)) != len(new) or sorted(old, key=str) != sorted(new, key=str):
        return None
    i = next(k for k, (a, b) in enumerate(zip(old, new, strict=True)) if a != b)
    return Finding(
        name,
        f"tools[{i}]: {new[i]!r} is where {old[i]!r} was (it was tools[{old.index(new[i])}])",
        fix,
        details={"index": i, "before": old, "after": new},
    )
