"""``ctxwright show ID``: one stored session, its messages, tool calls and per-call usage.

Each recorded message is marked when the next request no longer sends it as recorded (a
compaction replaced or removed it, a newer status hid it), as the one renderer
(``core/render.py``) decides -- so what ``show`` says is what the model sees."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ctxwright.audit.compare import RowCost, cache_ratios, paid_as_cached, priced
from ctxwright.audit.provider_log import QUIET, age_ttl, describe, expiry_total
from ctxwright.cache.expiry import KEEP_WARM
from ctxwright.cache.prices import Pricing
from ctxwright.core.events import (
    AssistantEvent,
    CompactionEvent,
    Event,
    GateEvent,
    HookEvent,
    MessageEvent,
    ProviderCompactionEvent,
    ToolEvent,
    UserEvent,
    event_from_dict,
)
from ctxwright.core.messages import Message
from ctxwright.core.records import CallRecord
from ctxwright.core.render import Renderer, RenderSettings
from ctxwright.core.tokens import Ledger
from ctxwright.core.usage import counts_usage, raw_cache_usage
from ctxwright.errors import EventFormatError
from ctxwright.store.export import session_export
from ctxwright.store.sessions import Store

if TYPE_CHECKING:
    from ctxwright.compaction.survival import Survival


def _n(v: Any) -> str:
    if v is None:
        return "?"
    return f"{v:,.0f}" if isinstance(v, float) else f"{v:,}"


def render_session(
    store: Store,
    session_id: str,
    console: Console,
    *,
    as_json: bool = False,
    wide: bool = False,
    pricing: Pricing | None = None,
) -> None:
    data = session_export(store, session_id)
    if as_json:
        print(json.dumps(view_data(data, pricing or Pricing()), ensure_ascii=False, indent=1))
    else:
        _render(data, console, "", wide=wide, pricing=pricing or Pricing())


def render_compactions(store: Store, session_id: str, console: Console, *, as_json: bool = False) -> None:
    """``show ID --compactions``: the loss ledger of every compaction (``compaction/ledger.py``)
    and, where ``CompactionConfig.keep`` declared items, whether each survived it
    (``compaction/survival.py``)."""
    from ctxwright.compaction import background, survival
    from ctxwright.compaction.ledger import ledgers

    data = session_export(store, session_id)
    events, _ = _parse_events(data.get("events") or [])
    rows = ledgers(events)
    if as_json:
        out = [
            {**led.to_dict(), "survival": _survival_json(survival.read(ev.ledger))}
            if led is not None
            else {"event": ev.seq, "layer": ev.layer, "call_index": ev.call_index, "ledger": None, "survival": None}
            for ev, led in rows
        ]
        stall = background.stalls(events)
        doc = {
            "session": data["id"],
            "compactions": out,
            "stall": stall,
            "provider_compactions": [_provider_json(ev) for ev in events if isinstance(ev, ProviderCompactionEvent)],
            "hooks": [_hook_json(ev) for ev in events if isinstance(ev, HookEvent)],
        }
        print(json.dumps(doc, ensure_ascii=False, indent=1))
        return
    providers = [ev for ev in events if isinstance(ev, ProviderCompactionEvent)]
    hooks = [ev for ev in events if isinstance(ev, HookEvent)]
    if not rows and not providers:
        console.print(Text("no compactions in this session"))
        _render_hooks(hooks, console)
        return
    for ev, led in rows:
        head = f"compaction #{ev.seq} {ev.layer}" + (
            f" before call {ev.call_index}" if ev.call_index is not None else ""
        )
        if led is None:
            console.print(Text(head + ": recorded without a ledger (by an older ctxwright)", style="dim"))
            continue
        console.print(
            Text(f"{head}: hid {led.hidden} event(s); {led.lost} item(s) lost from view, {led.kept} still visible")
        )
        for h in led.events:
            what = f"{h.tool} result" if h.tool else h.role
            lost = ", ".join(f"{i.value} ({i.kind})" for i in h.lost) or "nothing"
            more = f" (+{h.items_omitted} not listed)" if h.items_omitted else ""
            line = Text(f"  event {h.seq} {what}: lost {lost}{more}")
            line.append(f"  · read back: {h.read_back}", style="dim")
            console.print(line, soft_wrap=True)
        if led.events_omitted:
            console.print(Text(f"  … {led.events_omitted} more hidden event(s) not listed", style="dim"))
        for p in led.pinned:
            console.print(Text(f"  event {p.seq} pinned by {p.by}: kept whole · {p.text}"), soft_wrap=True)
        if led.pinned_total > len(led.pinned):
            console.print(Text(f"  … {led.pinned_total - len(led.pinned)} more pinned event(s) kept", style="dim"))
        _render_survival(survival.read(ev.ledger), console)
    _render_stall(background.stalls(events), console)
    _render_providers(providers, console)
    _render_hooks(hooks, console)


def _provider_json(ev: ProviderCompactionEvent) -> dict[str, Any]:
    """A provider's compaction as ``--json`` lists it: what it did and its score, not the opaque
    item (a resume sends that back from the assistant message; ``export`` has it)."""
    from ctxwright.compaction.provider import readable_summary

    return {
        "event": ev.seq,
        "provider": ev.provider,
        "edit": ev.edit,
        "call_index": ev.call_index,
        "cleared": ev.cleared,
        "cleared_tokens": ev.cleared_tokens,
        "opaque_item": ev.item is not None and readable_summary(ev.item) is None,
        "score": None if ev.score is None else dict(ev.score),
    }


def _hook_json(ev: HookEvent) -> dict[str, Any]:
    return {
        "event": ev.seq,
        "hook": ev.hook,
        "tier": ev.tier,
        "decision": ev.decision,
        "call_index": ev.call_index,
        "duration_ms": ev.duration_ms,
        "kept": list(ev.kept),
        "note": ev.note,
        "reason": ev.reason,
    }


def _render_providers(providers: list[ProviderCompactionEvent], console: Console) -> None:
    """The provider's own compactions (``compaction/provider.py``): they change what its server
    reads, not ctxwright's view, so they have no loss ledger; their score says which of the
    hidden identifiers are still answerable."""
    from ctxwright.compaction.provider import readable_summary

    for ev in providers:
        at = f" at call {ev.call_index}" if ev.call_index is not None else ""
        what = []
        if ev.cleared is not None:
            what.append(f"cleared {ev.cleared}")
        if ev.cleared_tokens is not None:
            what.append(f"{ev.cleared_tokens:,} input tokens")
        if ev.item is not None:
            what.append("opaque item" if readable_summary(ev.item) is None else "readable summary")
        line = Text(f"provider compaction #{ev.seq} {ev.provider} {ev.edit}{at}: {', '.join(what) or 'applied'}")
        score = ev.score or {}
        if score:
            line.append(f"; {score.get('kept', 0)} identifier(s) kept, {score.get('lost', 0)} lost")
            if score.get("left_out"):
                line.append(f", {score['left_out']} not probed", style="dim")
        else:
            line.append("; not scored (what it hid cannot be read)", style="dim")
        console.print(line, soft_wrap=True)
        declared = score.get("survival")
        if isinstance(declared, dict):
            console.print(
                Text(
                    f"  survival: {declared.get('kept', 0)} kept, {declared.get('lost', 0)} lost",
                    style="bold red" if declared.get("lost") else "",
                )
            )


def _render_hooks(hooks: list[HookEvent], console: Console) -> None:
    """What the user's compaction hooks decided (``compaction/hooks.py``); an ``ok`` is not listed."""
    for ev in hooks:
        if ev.decision == "ok":
            continue
        at = f" before call {ev.call_index}" if ev.call_index is not None else ""
        line = Text(f"hook {ev.hook} on {ev.tier}{at}: {ev.decision}")
        detail = ev.reason or ev.note or (f"kept events {', '.join(map(str, ev.kept))}" if ev.kept else "")
        if detail:
            line.append(f"  · {detail}", style="dim")
        console.print(line, soft_wrap=True)


def _render_stall(stall: dict[str, float | int] | None, console: Console) -> None:
    """The summary line of how long the loop waited on compaction (``compaction/background.py``)."""
    if stall is not None:
        console.print(
            Text(
                f"stall per compaction (the loop waiting before its call): p50 {stall['p50_ms']:,.1f} ms, "
                f"p95 {stall['p95_ms']:,.1f} ms, max {stall['max_ms']:,.1f} ms over {stall['n']} compaction(s)"
            )
        )


def _survival_json(found: Survival | None) -> dict[str, Any] | None:
    return found.to_dict() if found is not None else None


def _render_survival(found: Survival | None, console: Console) -> None:
    """The survival contract's lines under a compaction: the counts, then each item, lost first."""
    if found is None:
        return
    head = f"  survival ({', '.join(found.declared)}): {found.kept} kept, {found.lost} lost"
    console.print(Text(head, style="bold red" if found.lost else ""), soft_wrap=True)
    for i in found.items:
        line = Text(f"    {'LOST' if not i.kept else 'kept'} {i.kind}: {i.text!r}")
        where = f"in the {i.where}" if i.kept and i.where else "nowhere in view"
        origin = f"; from event {i.seq}" if i.seq is not None else ""
        line.append(f"  · {where}{origin}", style="dim")
        console.print(line, soft_wrap=True)
    if found.items_omitted:
        console.print(Text(f"    … {found.items_omitted} more item(s) not listed", style="dim"))


def costs_of(calls: list[CallRecord], pricing: Pricing, session_model: str | None = None) -> list[RowCost | None]:
    """Each call's cost in order, each held against the call before it (:func:`call_cost_of`)."""
    previous = [0] + [c.prompt_tokens or 0 for c in calls[:-1]]
    return [call_cost_of(c, pricing, session_model, p) for c, p in zip(calls, previous, strict=True)]


def call_cost_of(
    call: CallRecord, pricing: Pricing, session_model: str | None = None, previous: int = 0
) -> RowCost | None:
    """What a recorded call cost, and would have had the cache served all it could have (its
    reusable prefix, or the ``previous`` call's prompt: ``audit/compare.py`` :func:`priced`): from
    the provider's own usage split in ``Usage.raw`` when recorded, else from the counts (the
    reusable prefix taken as cached where no cached count was reported); ``None`` when its
    model has no price."""
    found = raw_cache_usage(call.usage.get("raw"))
    reusable = call.audit.reusable_prefix_tokens or 0
    if found is not None:
        provider, u = found
    else:
        prompt = call.prompt_tokens or 0
        provider = None
        u = counts_usage(prompt, paid_as_cached(prompt, call.cached_tokens, reusable), call.completion_tokens)
    return priced(u, reusable, provider, call.model or session_model, pricing, previous)


def _usd(v: float | None) -> str:
    return "-" if v is None else f"{v:,.5f}"


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


def _sent_as(ev: Event, shown: dict[int, Message] | None) -> tuple[str, str | None] | None:
    """What the next request does with a recorded message: ``("as recorded", None)``, ``("no
    longer sent", None)`` or ``("changed", the text it is sent as)`` after a compaction; ``None``
    for an event that is no message, or when the view cannot be rebuilt."""
    if shown is None or not isinstance(ev, MessageEvent):
        return None
    now = shown.get(ev.seq)
    if now is None:
        return "no longer sent", None
    if now.content != ev.message.content:
        return "changed", now.content or ""
    return "as recorded", None


def _view_note(ev: Event, shown: dict[int, Message] | None) -> Text:
    """The note after a recorded message (:func:`_sent_as`): nothing when it is sent as recorded."""
    state = _sent_as(ev, shown)
    if state is None or state[0] == "as recorded":
        return Text("")
    if state[1] is None:
        return Text(f" ({state[0]})", style="dim")
    c = state[1]
    return Text(f" (now sent as: {c[:80]}{'…' if len(c) > 80 else ''})", style="dim")


def _ratios(calls: list[CallRecord]) -> tuple[float | None, float | None] | None:
    """Hit ratio and efficiency over the calls whose cached tokens were reported; ``None``
    when none were."""
    known = [c for c in calls if c.cached_tokens is not None and c.prompt_tokens]
    if not known:
        return None
    return cache_ratios(
        sum(c.cached_tokens or 0 for c in known),
        sum(c.prompt_tokens or 0 for c in known),
        sum(c.audit.reusable_prefix_tokens or 0 for c in known),
    )


def view_data(data: dict[str, Any], pricing: Pricing) -> dict[str, Any]:
    """``show ID --json``: what the view shows, as data -- the session as exported (so the
    audit still reads it) with its ``kind`` and a ``view``: what the next request sends for each
    recorded message (:func:`_sent_as`), each call's cause and cost, and the totals the view
    prints under the calls. The session file to keep or re-import is ``ctxwright export ID``:
    this adds what the view computes, which depends on the prices and on this ctxwright."""
    events, unreadable = _parse_events(data.get("events") or [])
    shown = _current_view(data, events)
    messages = []
    for ev in events:
        state = _sent_as(ev, shown)
        if state is not None:
            messages.append({"seq": ev.seq, "sent": state[0], **({"now": state[1]} if state[1] is not None else {})})
    calls = [CallRecord.from_dict(c) for c in data.get("calls") or []]
    costs = costs_of(calls, pricing, data.get("model"))
    hit, eff = _ratios(calls) or (None, None)
    found = [r for r in costs if r is not None]
    view = {
        "messages": messages,
        "unreadable_events": [{"seq": seq, "problem": problem} for seq, problem in unreadable],
        "calls": [
            {
                "call_index": c.call_index,
                "cause": _cause(c),
                "cost_usd": None if r is None else r.cost,
                "if_held_usd": None if r is None else r.if_held,
            }
            for c, r in zip(calls, costs, strict=True)
        ],
        "summary": {
            "calls": len(calls),
            "hit_ratio": hit,
            "efficiency": eff,
            "cost_usd": sum(r.cost for r in found) if found else None,
            "if_held_usd": sum(r.if_held for r in found) if found else None,
            "priced_calls": len(found),
            "keep_warm_refreshes": sum(1 for c in calls if c.audit.cause == KEEP_WARM),
            "expiries": sum(1 for c in calls if (c.audit.cache or {}).get("cause") == "ttl_expired"),
        },
    }
    children = [view_data(c, pricing) for c in data.get("children") or []]
    return {"kind": "run", **data, "view": view, "children": children}


def _line(indent: str, seq: int, label: str, style: str, *parts: str | tuple[str, str] | Text) -> Text:
    """``#seq label`` then the parts, each printed literally: recorded text is whatever a
    user, a model or a tool wrote (``[/INST]``, ``[red]x[/red]``) and is never read as
    console markup (``cli/progress.py`` says why)."""
    out = Text(f"{indent}  #{seq} ")
    out.append(label, style=style)
    for p in parts:
        if isinstance(p, Text):
            out.append_text(p)
        elif isinstance(p, tuple):
            out.append(p[0], style=p[1])
        else:
            out.append(p)
    return out


#: A message longer than this is written to the terminal as it is, not laid out by rich.
LONG_TEXT_CHARS = 64 * 1024


def _say_long(console: Console, label: Text, text: str, note: Text) -> None:
    """A message after its label, whole. Rich lays out every line it prints (a 30 MB answer
    of short lines took 40 s even with ``soft_wrap``), so a long one goes straight to the
    console's file, the way ``show --json`` prints; a short one as literal :class:`Text`."""
    if len(text) <= LONG_TEXT_CHARS or console.record:
        console.print(Text.assemble(label, text, note), soft_wrap=True)
        return
    console.print(label, end="", soft_wrap=True)
    for start in range(0, len(text), 1 << 20):
        console.file.write(text[start : start + (1 << 20)])
    console.print(note, soft_wrap=True)


def _render(
    data: dict[str, Any], console: Console, indent: str, *, wide: bool = False, pricing: Pricing | None = None
) -> None:
    pricing = pricing or Pricing()
    """One exported session, then its children (already in the export) indented below it.
    Messages are printed whole (``run`` echoes a long one only in part and points here), with
    ``soft_wrap`` so that rich does not lay out a 30 MB answer word by word."""

    def say(text: Text) -> None:
        console.print(text, soft_wrap=True)

    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(data["created_at"]))
    head = Text(indent)
    head.append(f"session {data['id']}", style="bold")
    head.append(f" · {when} · {data['backend']} · {data['model']}")
    if data["parent_id"]:
        head.append(f" · child of {data['parent_id']}")
    say(head)
    tools = [t["function"]["name"] for t in data["prefix"].get("tools", [])]
    say(
        Text(
            f"{indent}prefix sha256 {data['prefix_sha256'][:16]} · system prompt "
            f"{len(data['prefix']['system']):,} chars · tools: {', '.join(tools) or '-'}"
        )
    )
    events, unreadable = _parse_events(data["events"])
    for seq, problem in unreadable:
        say(_line(indent, seq, "unreadable event", "red", " ", problem))
    shown = _current_view(data, events)
    for ev in events:
        note = _view_note(ev, shown)
        if isinstance(ev, AssistantEvent):
            msg = ev.message
            for tc in msg.tool_calls:
                say(_line(indent, ev.seq, "call", "yellow", f" {tc.name}({tc.arguments}) ", (tc.id, "dim"), note))
            if msg.content is not None or not msg.tool_calls:
                _say_long(console, _line(indent, ev.seq, "assistant", "green", " "), str(msg.content), note)
        elif isinstance(ev, ToolEvent):
            c = ev.message.content or ""
            short = c if len(c) <= 200 else c[:200] + f"… ({len(c):,} chars)"
            off = ev.offload
            where = Text(f" (full {off.chars:,} chars offloaded to {off.path})", style="dim") if off else Text("")
            if ev.external:  # defence/: marked as external content, and what the sanitizer changed
                cleaned = f"; sanitized: {ev.sanitized.summary()}, original kept" if ev.sanitized else ""
                where.append(f" [external content{cleaned}]", style="dim")
            say(
                _line(
                    indent,
                    ev.seq,
                    "tool",
                    "magenta",
                    f" {ev.tool_name} ",
                    (ev.message.tool_call_id or "", "dim"),
                    f" {short}",
                    where,
                    note,
                )
            )
        elif isinstance(ev, CompactionEvent):
            n = len(ev.replace) + len(ev.drop)
            how = "replaced" if ev.replace else "removed"
            before = ev.tokens_before
            say(
                _line(
                    indent,
                    ev.seq,
                    "compaction",
                    "blue",
                    f" {ev.layer}: {n} message(s) {how}"
                    + (f" before call {ev.call_index}" if ev.call_index is not None else "")
                    + (f", request was {before:,} tokens" if before is not None else ""),
                )
            )
        elif isinstance(ev, GateEvent):
            style = "green" if ev.decision == "approve" else "red"
            say(
                _line(
                    indent,
                    ev.seq,
                    "gate",
                    style,
                    f" {ev.decision} {ev.tool} ",
                    (ev.call_id, "dim"),
                    f" {ev.effects} · {ev.by}: {ev.reason}",
                )
            )
        elif isinstance(ev, UserEvent):
            _say_long(console, _line(indent, ev.seq, "user", "cyan", " "), ev.message.content or "", note)
        else:
            summary = json.dumps(ev.to_payload(), ensure_ascii=False)[:200]
            say(_line(indent, ev.seq, ev.kind, "blue", " ", summary, note))
    calls = [CallRecord.from_dict(c) for c in data["calls"]]
    if calls:
        costs = costs_of(calls, pricing, data.get("model"))
        console.print(_calls_table(calls, indent, wide=wide, costs=costs))
        _print_parts(console, calls, indent, wide=wide)
        for call in calls:
            if call.audit.context and call.audit.cause not in ("append", "first"):
                ctx_before, ctx_after = call.audit.context
                line = Text(f"{indent}  call {call.call_index} diverges at {call.audit.where}: …{ctx_before}")
                line.append("|", style="red")
                line.append(f"{ctx_after}…")
                say(line)
            cache = call.audit.cache
            if cache is not None and cache.get("cause") not in QUIET:
                say(Text(f"{indent}  call {call.call_index} provider cache: {describe(cache)}"))
            if call.error and not wide:
                say(Text(f"{indent}  call {call.call_index} failed: {call.error}"))
        refreshes = [call for call in calls if call.audit.cause == KEEP_WARM]
        if refreshes:
            read = sum(call.cached_tokens or 0 for call in refreshes)
            say(Text(f"{indent}keep-warm refreshes: {len(refreshes)} ({read:,} tokens read; cost, not requests)"))
        expired = [c for c in calls if (c.audit.cache or {}).get("cause") == "ttl_expired"]
        if expired:
            tokens, usd = expiry_total([dict(c.audit.cache or {}) for c in expired])
            cost = f", ${usd:.4f} more than reads" if usd is not None else ""
            say(Text(f"{indent}expiries: {len(expired)} ({tokens:,} tokens re-written{cost})"))
        ratios = _ratios(calls)
        if ratios is not None:
            hit, eff = ratios
            eff_text = f"{eff:.1%}" if eff is not None else "n/a (nothing reusable)"
            say(Text(f"{indent}hit ratio {hit:.1%} (Σcached ÷ Σprompt) · efficiency {eff_text} (Σcached ÷ Σreusable)"))
        found = [r for r in costs if r is not None]
        if found:
            share = (
                "" if len(found) == len(calls) else f" over {len(found)} of {len(calls)} calls (no price for the rest)"
            )
            say(
                Text(
                    f"{indent}cost {_usd(sum(r.cost for r in found))} USD · if the cache had held "
                    f"{_usd(sum(r.if_held for r in found))}{share}"
                )
            )
            for used in dict.fromkeys(pricing.describe(r.price) for r in found):
                say(Text(f"{indent}  at {used}", style="dim"))
    for child in data["children"]:
        _render(child, console, indent + "    ", wide=wide, pricing=pricing)


def _part(ledger: Mapping[str, Any], part: str) -> str:
    """One part of a stored ledger; ``?`` when the call was recorded before that part existed
    (the skills catalog was then counted inside history or the prefix), ``-`` for a difference
    from a prompt count the backend did not report; the difference is signed."""
    v = ledger.get(part)
    if part == "template_difference":
        return f"{v:+,}" if isinstance(v, int) else "-" if part in ledger else "?"
    return f"{v:,}" if isinstance(v, int) else "?"


def _print_parts(console: Console, calls: list[CallRecord], indent: str, *, wide: bool) -> None:
    """The context by part (the ledger ``core/tokens.py`` recorded for each call: system and
    tools, skills catalog, tool results, history, latest user, framing, and the chat template
    and tokenizer difference from the prompt the backend counted): the last call's on one line,
    every call's in a table with ``wide``. ``counted`` is ctxwright's count; ``prompt`` the
    backend's, which the parts add up to."""
    recorded = [c for c in calls if c.ledger]
    if not recorded:
        return
    if wide:
        t = Table(title=f"{indent}context by part (tokens, ctxwright's count; the server's prompt count)")
        for col in ("call", *(Ledger.LABELS[k] for k in Ledger.SHOWN), "counted", "prompt"):
            t.add_column(col, justify="right")
        for c in recorded:
            lg = c.ledger
            t.add_row(
                str(c.call_index),
                *(_part(lg, k) for k in Ledger.SHOWN),
                _part(lg, "total"),
                f"{c.prompt_tokens:,}" if c.prompt_tokens is not None else "-",
            )
        console.print(t)
        return
    last = recorded[-1]
    lg = last.ledger
    parts = " · ".join(f"{Ledger.LABELS[k]} {_part(lg, k)}" for k in Ledger.PARTS)
    line = f"{indent}context of call {last.call_index} by part: {parts} · counted {_part(lg, 'total')}"
    if isinstance(lg.get("template_difference"), int) and last.prompt_tokens is not None:
        line += (
            f" · {Ledger.DIFFERENCE_TEXT} {_part(lg, 'template_difference')}"
            f" · prompt {last.prompt_tokens:,} (the server's count)"
        )
    console.print(Text(line), soft_wrap=True)


def _calls_table(
    calls: list[CallRecord], indent: str, *, wide: bool, costs: list[RowCost | None] | None = None
) -> Table:
    """The stored calls: compact by default (fits 80 columns; a failed call's error is
    printed under the table), every column with ``wide``. A cost column (USD; with ``wide``
    also "if the cache had held") when some call has a price."""
    t = Table(title=f"{indent}calls")
    costs = costs or [None] * len(calls)
    priced = any(r is not None for r in costs)
    provider = any(c.audit.cache is not None for c in calls)  # the provider's cache verdicts
    if not wide:
        cols = (
            "call",
            "prompt",
            "cached/reusable",
            "wall ms",
            "cause",
            *(("age/TTL",) if provider else ()),
            "out",
            *(("cost $",) if priced else ()),
        )
        for col in cols:
            t.add_column(col, justify="left" if col in ("cause", "age/TTL") else "right", no_wrap=True)
        for c, r in zip(calls, costs, strict=True):
            t.add_row(
                str(c.call_index),
                _n(c.prompt_tokens),
                f"{_n(c.cached_tokens)}/{_n(c.audit.reusable_prefix_tokens)}",
                _n(c.elapsed_ms),  # the stored wall time (store m003); prefill + decode before it
                Text(_cause(c)),
                *((Text(age_ttl(c.audit.cache)),) if provider else ()),
                _n(c.completion_tokens),
                *((_usd(r.cost if r else None),) if priced else ()),
            )
        return t
    for col in (
        "call",
        "prompt tok",
        "cached tok",
        "reusable tok",
        "wall ms",
        "cause",
        *(("provider cause", "age/TTL") if provider else ()),
        "first divergence",
        "out tok",
        "prefill ms",
        "decode ms",
        "request sha256",
        "error",
        *(("cost $", "if held $") if priced else ()),
    ):
        t.add_column(col, justify="right")
    for c, r in zip(calls, costs, strict=True):
        t.add_row(
            str(c.call_index),
            _n(c.prompt_tokens),
            _n(c.cached_tokens),
            _n(c.audit.reusable_prefix_tokens),
            _n(c.wall_ms),
            Text(c.audit.cause),
            *((Text(str((c.audit.cache or {}).get("cause") or "")), Text(age_ttl(c.audit.cache))) if provider else ()),
            Text(c.audit.where),
            _n(c.completion_tokens),
            _n(c.prefill_ms),
            _n(c.decode_ms),
            c.request_sha256[:12],
            Text((c.error or "")[:60]),
            *((_usd(r.cost if r else None), _usd(r.if_held if r else None)) if priced else ()),
        )
    return t


def _cause(c: CallRecord) -> str:
    """The compact table's cause: the byte audit's, with the provider's verdict when it differs
    from a plain hit (``append · ttl_expired``)."""
    cause = c.audit.cause or ("error" if c.error else "")
    v = (c.audit.cache or {}).get("cause")
    return f"{cause} · {v}" if v and v not in QUIET and v != cause else cause
