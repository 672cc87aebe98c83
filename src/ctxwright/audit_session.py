"""The audit inside a live session: turning each rendered request into an
:class:`~ctxwright.audit.AuditRequest`, and rebuilding the audit of a resumed session.

Why separate from ``audit.py``: the core compares requests from any agent; this module
knows ctxwright's own request, usage and event types.
"""

from __future__ import annotations

from typing import Any, Iterator

from .audit import AuditRequest, AuditRow
from .backends.base import ChatRequest
from .messages import Usage
from .session import Session


def audit_request(request: ChatRequest, usage: Usage | None, marker: str | None = None) -> AuditRequest:
    u = usage or Usage()
    hint = u.raw.get("reusable_tokens") if isinstance(u.raw, dict) else None
    msgs = request.messages
    if msgs and msgs[0].role == "system":
        system, rest = msgs[0].content or "", msgs[1:]
    else:
        system, rest = "", msgs
    return AuditRequest(system=system, tools=[t.to_wire() for t in request.tools],
                        messages=[m.to_wire() for m in rest], cached_tokens=u.cached_tokens,
                        prompt_tokens=u.prompt_tokens, completion_tokens=u.completion_tokens, marker=marker,
                        reusable_tokens_hint=hint if isinstance(hint, int) else None)


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
    """The requests a resumed session already sent, rebuilt from its events.

    Every ``assistant`` event answered the request made of the prefix plus every message
    event before it; rebuilding them lets the audit of the next call compare against the
    best earlier request, as if the session had never stopped.
    """
    from .messages import Message

    if not session.events:
        return
    calls = {c["call_index"]: c for c in session.store.calls(session.id)} if session.store else {}
    system = session.prefix.system_message()
    msgs: list[Message] = []
    for ev in session.events:
        if ev.kind == "assistant" and "call_index" in ev.payload:
            c = calls.get(ev.payload["call_index"], {})
            req = ChatRequest(messages=(system, *msgs), tools=session.prefix.tools)
            yield audit_request(req, Usage(prompt_tokens=c.get("prompt_tokens"),
                                           cached_tokens=c.get("cached_tokens")))
        if ev.kind in ("user", "assistant", "tool"):
            msgs.append(Message.from_wire(ev.payload["message"]))
