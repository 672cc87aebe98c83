"""``ttl_changed``: a ``cache_control`` breakpoint whose TTL changed (``1h`` ↔ ``5m``).

Provider behaviour protected: Anthropic keeps a cache entry for the TTL its breakpoint asked
for (``"ttl": "1h"``, default 5 minutes) and prices a 1-hour write at twice the input price, a
5-minute one at 1.25 times. A breakpoint whose TTL flips is a different cache entry: the
prefix is written again at the new TTL, and an agent that meant 1 hour and sends 5 minutes
finds its cache gone after a coffee break.

Public agent bug: on ``--resume`` the block first sent with ``cache_control`` ``ttl: 1h`` came
back without it (anthropics/claude-code#93490); a client whose requests went from 1-hour to
5-minute breakpoints paid for the expiries (anthropics/claude-code#46829).

Checked on a pair of requests: the TTL of a breakpoint at the same place (tools, system block,
message block) in both, or of the last breakpoint of each (the one that moves to the newest
block every call), differs. The log reader keeps each body's breakpoints and TTLs in prompt
order (``AuditRequest.cache_ttls``); requests without them (chat completions) are not checked.
"""

from __future__ import annotations

from ctxwright.audit.compare import AuditRequest
from ctxwright.audit.rules.base import Finding, Settings

name = "ttl_changed"
fix = "send one cache_control TTL per breakpoint for the whole session (and after a resume): pick 1h or 5m once"


def check(previous: AuditRequest | None, current: AuditRequest, settings: Settings) -> Finding | None:
    if previous is None or not previous.cache_ttls or not current.cache_ttls:
        return None
    if previous.cache_ttls == current.cache_ttls:
        return None
    old = dict(previous.cache_ttls)
    for where, ttl in current.cache_ttls:
        if where in old and old[where] != ttl:
            return _found(where, old[where], ttl)
    (w_old, t_old), (w_new, t_new) = previous.cache_ttls[-1], current.cache_ttls[-1]
    if t_old != t_new:
        return _found(w_new, t_old, t_new, was_at=w_old)
    return None


def _found(where: str, before: str, after: str, was_at: str | None = None) -> Finding:
    moved = f" (the last breakpoint, at {was_at} before)" if was_at is not None and was_at != where else ""
    return Finding(
        name,
        f"cache_control at {where}{moved}: ttl {before} → {after}",
        fix,
        details={"where": where, "before": before, "after": after},
    )
