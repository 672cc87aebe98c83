"""The audit inside a live session: turning each rendered request into an
:class:`~ctxwright.audit.compare.AuditRequest`, and rebuilding the audit of a resumed session.

Why separate from ``audit/compare.py``: that module compares requests from any agent; this module
knows ctxwright's own request, usage and event types.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ctxwright.audit.compare import AuditRequest, AuditRow
from ctxwright.audit.logs import WireCache
from ctxwright.core.messages import Usage
from ctxwright.core.render import replay_calls
from ctxwright.core.request import ChatRequest
from ctxwright.core.session import Session

#: The conversation of every request a live session audits: one auditor audits one session, so
#: its requests are never split into conversations by the log rules of ``audit/compare.py``.
LIVE_CONVERSATION = "live session"


def audit_request(request: ChatRequest, usage: Usage | None, marker: str | None = None) -> AuditRequest:
    u = usage or Usage()
    msgs = request.messages
    if msgs and msgs[0].role == "system":
        system, rest = msgs[0].content or "", msgs[1:]
    else:
        system, rest = "", msgs
    return AuditRequest(
        system=system,
        tools=[t.to_wire() for t in request.tools],
        messages=[m.to_wire() for m in rest],
        cached_tokens=u.cached_tokens,
        prompt_tokens=u.prompt_tokens,
        completion_tokens=u.completion_tokens,
        marker=marker,
        reusable_tokens_hint=_hint(u),
        message_bytes=[m.canonical_utf8 for m in rest],
        conversation=LIVE_CONVERSATION,
    )


def audit_record(row: AuditRow) -> dict[str, Any]:
    """What is stored with the call: the audit row plus a readable divergence."""
    rec = row.to_json()
    d = row.first_divergence
    if d is not None:
        idx = "tools" if d.message_index is None else f"msg#{d.message_index}"
        rec["role"] = d.role
        rec["where"] = f"{idx} {d.field} @{d.byte_offset}"
        rec["context"] = {"before": d.before, "after": d.after}
    return rec


def past_requests(session: Session) -> Iterator[AuditRequest]:
    """The requests a resumed session already sent, rebuilt from its stored events.

    Rebuilding them lets the audit of the next call compare against the best earlier
    request, as if the session had never stopped. Rendered by the one renderer
    (``core/render.py``) with the session's recorded settings -- the code and settings
    that rendered them live -- so an unchanged history is audited as ``append``.
    """
    if not session.events or session.store is None:
        return
    calls = {c.call_index: c for c in session.store.calls(session.id)}
    prefix = session.prefix
    system = prefix.system_prompt
    tools = [t.to_wire() for t in prefix.tools]
    wire = WireCache()
    for rc in replay_calls(session.events, session.settings(), tools_in_use=bool(prefix.tools)):
        call = calls.get(rc.reply.call_index) if rc.reply.call_index is not None else None
        u = Usage.from_dict(dict(call.usage) if call is not None else {})
        yield AuditRequest(
            system=system,
            tools=tools,
            messages=[wire(m) for m in rc.messages],
            cached_tokens=call.cached_tokens if call is not None else None,
            prompt_tokens=call.prompt_tokens if call is not None else None,
            completion_tokens=call.completion_tokens if call is not None else None,
            marker=rc.marker,
            reusable_tokens_hint=_hint(u),
            message_bytes=[m.canonical_utf8 for m in rc.messages],
            conversation=LIVE_CONVERSATION,
        )


def _hint(u: Usage) -> int | None:
    hint = u.raw.get("reusable_tokens") if isinstance(u.raw, dict) else None
    return hint if isinstance(hint, int) and not isinstance(hint, bool) else None
