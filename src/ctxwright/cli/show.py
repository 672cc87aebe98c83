"""``ctxwright show ID``: one stored session, its messages, tool calls and per-call usage."""

from __future__ import annotations

import json
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from ctxwright.audit.compare import cache_ratios
from ctxwright.core.export import session_export
from ctxwright.core.store import Store


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
    for ev in data["events"]:
        msg = ev.get("message") or {}
        kind = ev["kind"]
        if kind == "assistant":
            for tc in msg.get("tool_calls") or []:
                fn = tc["function"]
                console.print(
                    f"{indent}  #{ev['seq']} [yellow]call[/] {fn['name']}({fn['arguments']}) [dim]{tc['id']}[/]"
                )
            if msg.get("content") is not None or not msg.get("tool_calls"):
                console.print(f"{indent}  #{ev['seq']} [green]assistant[/] {msg.get('content')}")
        elif kind == "tool":
            c = msg.get("content") or ""
            short = c if len(c) <= 200 else c[:200] + f"… ({len(c):,} chars)"
            off = ev.get("offload")
            where = f" [dim](full {off['chars']:,} chars offloaded to {off['path']})[/]" if off else ""
            console.print(
                f"{indent}  #{ev['seq']} [magenta]tool[/] {ev.get('tool_name')} "
                f"[dim]{msg.get('tool_call_id')}[/] {short}{where}"
            )
        elif kind == "compaction":
            n = len(ev.get("replace") or {}) + len(ev.get("drop") or [])
            how = "replaced" if ev.get("replace") else "removed"
            before = ev.get("tokens_before")
            console.print(
                f"{indent}  #{ev['seq']} [blue]compaction[/] {ev.get('layer')}: {n} message(s) {how}"
                + (f" before call {ev['call_index']}" if "call_index" in ev else "")
                + (f", request was {before:,} tokens" if isinstance(before, int) else "")
            )
        elif kind == "user":
            console.print(f"{indent}  #{ev['seq']} [cyan]user[/] {msg.get('content')}")
        else:
            summary = {k: v for k, v in ev.items() if k not in ("seq", "kind", "created_at")}
            console.print(f"{indent}  #{ev['seq']} [blue]{kind}[/] {json.dumps(summary, ensure_ascii=False)[:200]}")
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
