"""``ctxwright show ID``: one stored session, its messages, tool calls and per-call usage.

Each recorded message is marked when the next request no longer sends it as recorded (a
compaction replaced or removed it, a newer status hid it), as the one renderer
(``core/render.py``) decides -- so what ``show`` says is what the model sees."""

from __future__ import annotations

import json
import time
from typing import Any

from rich.console import Console
from rich.markup import escape as esc
from rich.table import Table

from ctxwright.audit.compare import cache_ratios
from ctxwright.core.events import (
    AssistantEvent,
    CompactionEvent,
    Event,
    MessageEvent,
    ToolEvent,
    UserEvent,
    event_from_dict,
)
from ctxwright.core.export import session_export
from ctxwright.core.messages import Message
from ctxwright.core.render import Renderer, RenderSettings
from ctxwright.core.store import Store
from ctxwright.errors import EventFormatError


def _n(v: Any) -> str:
    if v is None:
        return "?"
    return f"{v:,.0f}" if isinstance(v, float) else f"{v:,}"


def render_session(store: Store, session_id: str, console: Console, *, as_json: bool = False) -> None:
    data = session_export(store, session_id)
    if as_json:
        print(json.dumps(data, ensure_ascii=False, indent=1))
    else:
        _render(data, console, "")


def _parse_events(raw: list[Any]) -> tuple[list[Event], list[tuple[Any, str]]]:
    events: list[Event] = []
    bad: list[tuple[Any, str]] = []
    for i, d in enumerate(raw):
        try:
            events.append(event_from_dict(d, default_seq=i))
        except EventFormatError as exc:
            bad.append((d.get("seq", i) if isinstance(d, dict) else i, str(exc)))
    return events, bad


def _current_view(data: dict[str, Any], events: list[Event]) -> dict[int, Message] | None:
    """Event seq -> the message the next request sends for it, by the one renderer
    (``core/render.py``); ``None`` when the session's settings cannot be read."""
    try:
        settings = RenderSettings.from_meta(data.get("meta"))
    except ValueError:
        return None
    r = Renderer(settings, tools_in_use=bool(data["prefix"].get("tools"))).feed_all(events)
    return {seq: m for seq, m in r.shown_entries() if seq is not None}


def _view_note(ev: Event, shown: dict[int, Message] | None) -> str:
    """What the next request does with a recorded message: nothing to say when it is sent as
    recorded; else that it is no longer sent, or is sent shortened by a compaction."""
    if shown is None or not isinstance(ev, MessageEvent):
        return ""
    now = shown.get(ev.seq)
    if now is None:
        return " [dim](no longer sent)[/]"
    if now.content != ev.message.content:
        c = now.content or ""
        return f" [dim](now sent as: {esc(c[:80])}{'…' if len(c) > 80 else ''})[/]"
    return ""


def _render(data: dict[str, Any], console: Console, indent: str) -> None:
    """One exported session, then its children (already in the export) indented below it."""
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(data["created_at"]))
    console.print(
        f"{indent}[bold]session {data['id']}[/] · {when} · {data['backend']} · {data['model']}"
        + (f" · child of {data['parent_id']}" if data["parent_id"] else "")
    )
    tools = [t["function"]["name"] for t in data["prefix"].get("tools", [])]
    console.print(
        f"{indent}prefix sha256 {data['prefix_sha256'][:16]} · system prompt "
        f"{len(data['prefix']['system']):,} chars · tools: {', '.join(tools) or '-'}"
    )
    events, unreadable = _parse_events(data["events"])
    for seq, problem in unreadable:
        console.print(f"{indent}  #{seq} [red]unreadable event[/] {esc(problem)}")
    shown = _current_view(data, events)
    for ev in events:
        note = _view_note(ev, shown)
        if isinstance(ev, AssistantEvent):
            msg = ev.message
            for tc in msg.tool_calls:
                console.print(
                    f"{indent}  #{ev.seq} [yellow]call[/] {esc(tc.name)}({esc(tc.arguments)}) [dim]{esc(tc.id)}[/]{note}"
                )
            if msg.content is not None or not msg.tool_calls:
                console.print(f"{indent}  #{ev.seq} [green]assistant[/] {esc(str(msg.content))}{note}")
        elif isinstance(ev, ToolEvent):
            c = ev.message.content or ""
            short = c if len(c) <= 200 else c[:200] + f"… ({len(c):,} chars)"
            off = ev.offload
            where = f" [dim](full {off.chars:,} chars offloaded to {off.path})[/]" if off else ""
            console.print(
                f"{indent}  #{ev.seq} [magenta]tool[/] {esc(ev.tool_name)} "
                f"[dim]{esc(ev.message.tool_call_id or '')}[/] {esc(short)}{where}{note}"
            )
        elif isinstance(ev, CompactionEvent):
            n = len(ev.replace) + len(ev.drop)
            how = "replaced" if ev.replace else "removed"
            before = ev.tokens_before
            console.print(
                f"{indent}  #{ev.seq} [blue]compaction[/] {ev.layer}: {n} message(s) {how}"
                + (f" before call {ev.call_index}" if ev.call_index is not None else "")
                + (f", request was {before:,} tokens" if before is not None else "")
            )
        elif isinstance(ev, UserEvent):
            console.print(f"{indent}  #{ev.seq} [cyan]user[/] {esc(ev.message.content or '')}{note}")
        else:
            summary = ev.to_payload()
            console.print(
                f"{indent}  #{ev.seq} [blue]{esc(ev.kind)}[/] {esc(json.dumps(summary, ensure_ascii=False)[:200])}{note}"
            )
    if data["calls"]:
        t = Table(title=f"{indent}calls")
        for c in (
            "call",
            "prompt tok",
            "cached tok",
            "reusable tok",
            "cause",
            "first divergence",
            "out tok",
            "prefill ms",
            "decode ms",
            "request sha256",
            "error",
        ):
            t.add_column(c, justify="right")
        for c in data["calls"]:
            a = c.get("audit") or {}
            t.add_row(
                str(c["call_index"]),
                _n(c["prompt_tokens"]),
                _n(c["cached_tokens"]),
                _n(a.get("reusable_prefix_tokens")),
                a.get("cause", ""),
                a.get("where", ""),
                _n(c["completion_tokens"]),
                _n(c["prefill_ms"]),
                _n(c["decode_ms"]),
                c["request_sha256"][:12],
                (c.get("error") or "")[:60],
            )
        console.print(t)
        for c in data["calls"]:
            ctx = (c.get("audit") or {}).get("context")
            if ctx and (c.get("audit") or {}).get("cause") not in ("append", "first"):
                console.print(
                    f"{indent}  call {c['call_index']} diverges at {c['audit']['where']}: "
                    f"…{ctx['before']}[red]|[/]{ctx['after']}…"
                )
        known = [c for c in data["calls"] if c["cached_tokens"] is not None and c["prompt_tokens"]]
        if known:
            hit, eff = cache_ratios(
                sum(c["cached_tokens"] for c in known),
                sum(c["prompt_tokens"] for c in known),
                sum((c.get("audit") or {}).get("reusable_prefix_tokens") or 0 for c in known),
            )
            eff_text = f"{eff:.1%}" if eff is not None else "n/a (nothing reusable)"
            console.print(
                f"{indent}hit ratio {hit:.1%} (Σcached ÷ Σprompt) · efficiency {eff_text} (Σcached ÷ Σreusable)"
            )
    for child in data["children"]:
        _render(child, console, indent + "    ")
