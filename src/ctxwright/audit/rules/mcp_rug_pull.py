"""``mcp_rug_pull``: a tool description that changed after it was approved.

Provider behaviour protected: a tool's description is instructions the model follows, and part
of the cached prefix. An MCP server can serve a description a user approved, then change it
("rug pull"): the model now follows instructions nobody reviewed, and every call after the
change writes the prefix again.

Public source: the MCP tool-poisoning "rug pull", against which MCP scanners pin each tool's
description by hash and alert when it changes (invariantlabs-ai/mcp-scan); an MCP server's
tool list changing between calls is also among the MCP interactions with a resumed cache
(anthropics/claude-code#42309).

Checked two ways. Within a session, on a pair of requests: a tool that keeps its name while
its descriptions (its own and its parameters', :func:`~ctxwright.audit.rules.base.descriptions`)
change -- unless the change is a date or a per-session id, which ``date_in_prefix`` and
``session_id_in_tool`` name. Against approval: ``ctxwright.lock`` pins each tool's
:func:`description_sha256`, and ``ctxwright lock --check`` names each tool whose descriptions
no longer hash to it (:func:`pinned_changes`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from ctxwright.audit.compare import AuditRequest, utf8
from ctxwright.audit.rules.base import Finding, Settings, by_name, descriptions, first_change
from ctxwright.audit.rules.date_in_prefix import check as date_check
from ctxwright.audit.rules.session_id_in_tool import check as session_id_check
from ctxwright.core.messages import canonical_json

name = "mcp_rug_pull"
fix = "review the tool's new description before trusting it (re-approve it: `ctxwright lock`), and pin the MCP server's version"


def description_sha256(tool: Any) -> str:
    """The sha256 of a tool's descriptions (canonical JSON of :func:`descriptions`): what the
    lock pins, so a changed schema elsewhere (a new optional parameter) is told from changed
    instructions."""
    return hashlib.sha256(utf8(canonical_json(descriptions(tool)))).hexdigest()


def check(previous: AuditRequest | None, current: AuditRequest, settings: Settings) -> Finding | None:
    if previous is None or previous.tools is current.tools or previous.tools == current.tools:
        return None
    old = by_name(previous.tools)
    for tool, new in by_name(current.tools).items():
        was = old.get(tool)
        if was is None or was == new:
            continue
        a, b = descriptions(was), descriptions(new)
        if a == b:
            continue
        if date_check(previous, current, settings) or session_id_check(previous, current, settings):
            return None  # a date or a session id: named by its own rule, not a new instruction
        before, after = "\n".join(a), "\n".join(b)
        ch = first_change(before, after)
        at = ch.byte if ch is not None else 0
        shown = ch.shown() if ch is not None else ""
        return Finding(
            name,
            f"tool {tool!r} description @{at} changed within the session: {shown}",
            fix,
            details={"tool": tool, "byte": at, "before": before[:400], "after": after[:400]},
        )
    return None


def pinned_changes(pinned: Mapping[str, str], tools: Mapping[str, Any]) -> list[Finding]:
    """The tools whose descriptions no longer hash to what ``pinned`` approved (a lock's: tool
    label → :func:`description_sha256`); ``tools`` maps the same labels to the current schemas.
    A tool the lock does not pin is left to the lock's own "added" line."""
    out = []
    for label, tool in tools.items():
        want = pinned.get(label)
        if want is None:
            continue
        got = description_sha256(tool)
        if got != want:
            out.append(
                Finding(
                    name,
                    f"rug pull: {label}: its description changed after it was approved "
                    f"(locked sha256 {want[:12]}…, now {got[:12]}…)",
                    fix,
                    details={"tool": label, "locked": want, "now": got},
                )
            )
    return out
