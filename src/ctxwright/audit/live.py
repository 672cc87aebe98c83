"""The audit inside a live session: turning each rendered request into an
:class:`~ctxwright.audit.AuditRequest`, and rebuilding the audit of a resumed session.

Why separate from ``audit.py``: the core compares requests from any agent; this module
knows ctxwright's own request, usage and event types.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ctxwright.audit.compare import AuditRequest, AuditRow
from ctxwright.core.messages import Usage
from ctxwright.core.request import ChatRequest
from ctxwright.core.session import Session


def audit_request(request: ChatRequest, usage: Usage | None, marker: str | None = None) -> AuditRequest:
    u = usage or Usage()
    hint = u.raw.get("reusable_tokens") if isinstance(u.raw, dict) else None
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
        reusable_tokens_hint=hint if isinstance(hint, int) else None,
        message_bytes=[m.canonical_utf8 for m in rest],
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
    request, as if the session had never stopped. Same replay as ``ctxwright audit`` of a
    session export (children excluded: they are audited in their own sessions).
    """
    if not session.events or session.store is None:
        return
    from ctxwright.audit.logs import requests_from_export
    from ctxwright.core.export import session_export

    export = session_export(session.store, session.id)
    export["children"] = []
    for req, _problem in requests_from_export(export):
        if req is not None:
            yield req
