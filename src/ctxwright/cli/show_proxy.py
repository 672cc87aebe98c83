"""``ctxwright show ID`` for a session that was recorded from the wire: a ``ctxwright proxy``
session, or a framework agent's (``integrations/``).

Why its own view: such a session has no ctxwright events -- its calls are the bytes that went
over the wire -- so there is no trajectory to render. What a person wants from ``show`` is still
there: each call in order with its status, what the live audit said of it (cause, reusable and
cached tokens), what it cost and what its miss lost (by the price table, ``--prices``; "price
unknown" for a model the table does not know), how many messages it sent, the newest of them,
and the answer. ``--json`` prints
that view's data: the session (with its ``kind``) and every call's status, audit, request and
answer as recorded (``ctxwright export ID`` writes the calls as a request log instead).
"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ctxwright.audit.compare import PRICE_UNKNOWN, RowCost, cost_text, row_cost
from ctxwright.cache.prices import Pricing
from ctxwright.proxy.log import proxy_session_requests, request_value, response_value
from ctxwright.proxy.session_audit import session_rows
from ctxwright.proxy.store import ProxyLog
from ctxwright.replay.turns import content_text, turn_from_response
from ctxwright.store.sessions import Store

#: characters of a message or an answer shown in the table
SHOWN = 80


def newest_message(request: Any) -> str:
    """The last message a chat, Responses or Messages request sent, as ``role: text``."""
    if not isinstance(request, dict):
        return ""
    messages = request.get("messages") or request.get("input")
    if isinstance(messages, str):
        return f"user: {messages}"
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
        return ""
    last = messages[-1]
    text = content_text(last.get("content")) or content_text(last.get("output"))
    if not text and last.get("tool_calls"):
        text = ", ".join(str((c.get("function") or {}).get("name")) for c in last["tool_calls"] if isinstance(c, dict))
    return f"{last.get('role') or last.get('type') or '?'}: {text}"


def answer_text(api: str | None, response: Any) -> str:
    """The answer's text, or the tools it called: the reply as the replay reads it
    (``replay/turns.py``: a body or a stream's events, of any of the three APIs)."""
    if api is None or response is None:
        return ""
    try:
        turn = turn_from_response(api, response)
    except (ValueError, KeyError, TypeError):
        return ""
    if turn.tool_calls:
        return "calls " + ", ".join(c.name for c in turn.tool_calls)
    return turn.text


def call_costs(store: Store, session_id: str, rows: list[dict[str, Any]], pricing: Pricing) -> list[RowCost | None]:
    """What each exchange of a proxy session cost and would have cost had the cache held
    (``None``: its model has no price, or it was refused or never answered -- providers do not
    bill those), priced on the rows the proxy audited live (``proxy/session_audit.py``)."""
    audited = session_rows(proxy_session_requests(store, session_id), session_id)
    out: list[RowCost | None] = []
    for r, row in zip(rows, audited, strict=True):
        out.append(row_cost(row, pricing) if row is not None and _billed(r) else None)
    return out


def money_total(costs: list[RowCost | None], billed: int) -> str:
    """The session's money in one line: ``cost $0.0412, $0.0188 of it lost to cache misses``,
    over the priced calls (saying how many of the ``billed`` calls had no price); ``""`` when
    no call was billed."""
    found = [c for c in costs if c is not None]
    if not billed:
        return ""
    if not found:
        return f"cost: {PRICE_UNKNOWN} (no call's model is in the price table; --prices FILE adds one)"
    text = f"cost ${sum(c.cost for c in found):.4f}, ${sum(c.lost for c in found):.4f} of it lost to cache misses"
    if len(found) < billed:
        text += f" (over {len(found)} of {billed} calls: {PRICE_UNKNOWN} for the rest)"
    return text


def _billed(r: dict[str, Any]) -> bool:
    """The upstream answered the exchange (a refused or unanswered call is not billed)."""
    return r["status"] is not None and r["status"] < 400


def render_proxy_session(
    store: Store, session_id: str, console: Console, *, as_json: bool = False, pricing: Pricing | None = None
) -> None:
    log = ProxyLog(store)
    session = log.session_row(session_id)
    rows = log.exchange_rows(session["id"])
    costs = call_costs(store, session["id"], rows, pricing or Pricing())
    if as_json:
        calls = [
            {
                "call_index": r["call_index"],
                "status": r["status"],
                "outcome": r["outcome"],
                "streamed": bool(r["streamed"]),
                "total_ms": r["total_ms"],
                "cost_usd": None if c is None else c.cost,
                "lost_usd": None if c is None else c.lost,
                "audit": r["audit"],
                "request": request_value(r),
                "response": response_value(r),
            }
            for r, c in zip(rows, costs, strict=True)
        ]
        print(
            json.dumps(
                {"kind": session["kind"], "session": session, "calls": calls}, ensure_ascii=False, indent=1, default=str
            )
        )
        return
    key = f" {session['grouped_by']}={session['group_key']}" if session.get("group_key") else ""
    console.print(
        Text(f"session {session['id']} (recorded from the wire{key}; {session['api'] or 'api ?'}, {len(rows)} call(s))")
    )
    t = Table(show_lines=False)
    for col in (
        "#",
        "status",
        "cause",
        "reusable",
        "cached",
        "$ (lost to the miss)",
        "msgs",
        "newest message",
        "answer",
    ):
        t.add_column(col, justify="right" if col in ("#", "reusable", "cached", "msgs") else "left", overflow="fold")
    for r, c in zip(rows, costs, strict=True):
        audit = r["audit"] or {}
        request = request_value(r)
        cached = audit.get("cached_tokens")
        messages = request.get("messages") if isinstance(request, dict) else None
        t.add_row(
            str(r["call_index"]),
            f"{r['status'] or '---'}" + ("" if r["outcome"] == "complete" else f" {r['outcome']}"),
            str(audit.get("cause") or audit.get("problem") or ""),
            f"{audit.get('reusable_prefix_tokens', 0):,}",
            "?" if cached is None else f"{cached:,}",
            Text(cost_text(c) if _billed(r) and audit.get("cause") else ""),
            str(len(messages)) if isinstance(messages, list) else "?",
            Text(newest_message(request)[:SHOWN]),
            Text(answer_text(r["api"], response_value(r))[:SHOWN]),
        )
    console.print(t)
    total = money_total(costs, sum(1 for r in rows if _billed(r) and (r["audit"] or {}).get("cause")))
    if total:
        console.print(Text(total))
    console.print(
        Text(
            f"ctxwright audit {session['id']} audits it again; ctxwright report {session['id']} -o report.html "
            "draws it; ctxwright export ID writes its calls as a request log"
        ),
        soft_wrap=True,
    )


__all__ = ["answer_text", "call_costs", "money_total", "newest_message", "render_proxy_session"]
