"""What a report shows, gathered from one of three sources into one shape.

* a **stored session** (``ctxwright report ID``): every call's ledger and audit as recorded
  live (``store/sessions.py``), the tool timings and compactions from its events, and the status
  and compaction notes of each request rendered again by the one renderer
  (``core/render.py``) -- so the report shows what the model was sent, not a re-derivation --
  and the attention maps saved for its calls (``ctxwright attention``), if any;
* a **request log** (``ctxwright report FILE``): anything ``ctxwright audit`` reads
  (``audit/logs.py``), audited by the same :class:`~ctxwright.audit.compare.Auditor`; each
  conversation the audit finds is a session of the report;
* a **proxy session** (``ctxwright report --proxy-session ID``): the calls ``ctxwright proxy``
  recorded, read back by ``proxy/log.py`` as request-log records and audited the same
  way, all of them one session (the proxy already grouped them), with the proxy's timings.

Why one shape: the page and its charts (``report/html.py``) are written once, whatever the
source, and the audit that decides each cache break is the one every other command uses.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxwright.attention.model import AttentionMap
from ctxwright.audit.compare import (
    Auditor,
    AuditRequest,
    AuditRow,
    Prices,
    RowCost,
    as_pricing,
    cache_ratios,
    paid_as_cached,
    priced,
)
from ctxwright.audit.live import audit_record
from ctxwright.audit.logs import ParseProblem, read_log
from ctxwright.audit.provider_log import LogVerdicts, age_ttl, describe, expiry_total
from ctxwright.cache.expiry import KEEP_WARM
from ctxwright.cache.prices import Pricing
from ctxwright.compaction import background, ledger
from ctxwright.compaction.planner import from_record
from ctxwright.core.events import (
    AssistantEvent,
    CompactionEvent,
    Event,
    StatusEvent,
    ToolEvent,
    UserEvent,
)
from ctxwright.core.messages import canonical_json
from ctxwright.core.records import CallRecord
from ctxwright.core.render import Renderer, RenderSettings
from ctxwright.core.tokens import PER_MESSAGE_OVERHEAD, Ledger, TokenCounter
from ctxwright.core.usage import CacheUsage, counts_usage, raw_cache_usage
from ctxwright.errors import AttentionError
from ctxwright.proxy.log import proxy_session_requests
from ctxwright.proxy.session_audit import is_refresh, session_items
from ctxwright.proxy.store import ProxyLog
from ctxwright.store.sessions import Store

#: The parts of a request, in prompt order as far as they have one. The ledger's parts
#: (``core/tokens.py``) plus two the ledger counts inside history: the status bar's messages
#: (``status/``) and the notes compactions leave in place of what they removed; last the
#: chat template and tokenizer difference, the prompt the provider counted less ctxwright's
#: count of the parts, so the parts add up to the provider's count where it reported one.
PARTS: tuple[str, ...] = (
    "system_and_tools",
    "skills_catalog",
    "status",
    "compaction_notes",
    "tool_results",
    "history",
    "latest_user",
    "framing",
    "template_difference",
)
LABELS: dict[str, str] = {
    **Ledger.LABELS,
    "system_and_tools": "system + tools",
    "status": "status",
    "compaction_notes": "compaction notes",
    "template_difference": Ledger.DIFFERENCE_TEXT,
}

#: The causes that are not a cache break (``audit/compare.py``).
NOT_A_BREAK = frozenset({"first", "append"})


@dataclass
class CallData:
    """One model call of a session."""

    index: int
    parts: dict[str, int]
    prompt_tokens: int | None
    cached_tokens: int | None
    reusable_tokens: int | None
    completion_tokens: int | None
    cause: str
    #: the prompt size was counted by ctxwright, not reported by the server (a log without usage)
    prompt_counted: bool = False
    where: str = ""
    before: str = ""
    after: str = ""
    options_changed: tuple[str, ...] = ()
    wall_ms: float | None = None
    error: str | None = None
    #: the compaction layers recorded just before this call
    compactions: tuple[str, ...] = ()
    #: the provider's own split of the prompt, its usage shape and the model, when recorded
    #: (``core/usage.py``): what the cost is priced on
    usage_split: CacheUsage | None = None
    provider: str | None = None
    model: str | None = None
    #: the provider's cache verdict (``audit/live.py: cache_record``), on a provider-caching
    #: backend or a logged Anthropic/Responses exchange
    cache: Mapping[str, Any] | None = None
    #: the previous call's prompt size (0 for the first): what an append would have read back
    previous_prompt_tokens: int = 0

    @property
    def cache_cause(self) -> str:
        return str((self.cache or {}).get("cause") or "")

    @property
    def cache_evidence(self) -> str:
        return describe(self.cache) if self.cache else ""

    @property
    def age_ttl(self) -> str:
        """The cache's age when the call was sent and its TTL (``4m30s/5m00s``)."""
        return age_ttl(self.cache)

    @property
    def expired(self) -> bool:
        return self.cache_cause == "ttl_expired"

    @property
    def is_break(self) -> bool:
        return self.cause not in NOT_A_BREAK

    @property
    def cached_paid(self) -> int:
        """Prompt tokens served from the cache: the provider's count, else the reusable prefix."""
        return paid_as_cached(self.prompt_tokens or 0, self.cached_tokens, self.reusable_tokens or 0)

    @property
    def prefilled(self) -> int:
        """Prompt tokens prefilled, for the cost: where the provider reported no cached count,
        an estimate (the prompt minus the reusable prefix)."""
        return max(0, (self.prompt_tokens or 0) - self.cached_paid)

    @property
    def prefilled_reported(self) -> int | None:
        """Prompt tokens prefilled as the provider's counts say; ``None`` (unknown) when it
        reported no cached count -- shown as unknown, never as the estimate."""
        return None if self.cached_tokens is None else self.prefilled

    @property
    def cache_usage(self) -> CacheUsage:
        """The provider's split when recorded, else the counts (the reusable prefix taken as
        cached where no cached count was reported)."""
        if self.usage_split is not None:
            return self.usage_split
        return counts_usage(self.prompt_tokens, self.cached_paid, self.completion_tokens)

    def priced(self, prices: Prices | Pricing) -> RowCost | None:
        """Its cost and its cost had the cache held (``audit/compare.py`` :func:`priced`)."""
        u, reusable = self.cache_usage, self.reusable_tokens or 0
        return priced(u, reusable, self.provider, self.model, prices, self.previous_prompt_tokens)

    def cost(self, prices: Prices | Pricing) -> float | None:
        """USD; ``None`` when its model has no price."""
        r = self.priced(prices)
        return None if r is None else r.cost


@dataclass(frozen=True)
class ToolRun:
    """One tool execution (``ToolEvent``): its name, wall time and outcome."""

    name: str
    elapsed_ms: float | None
    ok: bool
    after_call: int | None


@dataclass(frozen=True)
class Compaction:
    """One compaction layer run, and what it cost the cache: the call after it re-sent (and
    had prefilled) everything after the first changed message -- its prompt minus the prefix
    a cache could still reuse, the figure ``ctxwright run`` prints for compactions too."""

    before_call: int | None
    layer: str
    messages: int
    tokens_before: int | None
    cache_cost_tokens: int | None
    #: the planner's decision that ran these layers (``compaction/planner.py``), one line
    planner: str | None = None
    #: from the loss ledgers (``compaction/ledger.py``): items lost from view (``None``: the
    #: events were recorded without a ledger) and the first of them, ``value (event seq)``
    lost: int | None = None
    lost_items: tuple[str, ...] = ()
    #: how long the loop waited on these layers before the call, ms (``compaction/background.py``;
    #: ``None``: recorded before the events said)
    stall_ms: float | None = None


@dataclass
class SessionData:
    """One session (or one conversation of a log) of the report."""

    key: str
    title: str
    source: str
    created_at: float | None = None
    parent: str | None = None
    calls: list[CallData] = field(default_factory=list)
    tools: list[ToolRun] = field(default_factory=list)
    compactions: list[Compaction] = field(default_factory=list)
    #: p50/p95/max of the compactions' stalls (``background.stall_summary``); ``None``: none recorded
    stall: dict[str, float | int] | None = None
    notes: list[str] = field(default_factory=list)
    #: keep-warm refreshes (``cache/expiry.py``): calls that cost, not requests of the session
    refreshes: list[CallData] = field(default_factory=list)
    #: the attention maps stored for some of its calls (``ctxwright attention``), by call index
    attention: list[tuple[int, AttentionMap]] = field(default_factory=list)

    @property
    def provider_cache(self) -> bool:
        """Some call carries the provider's own cache verdict."""
        return any(c.cache is not None for c in self.calls)

    @property
    def expiries(self) -> list[CallData]:
        """The calls the provider missed because the cache had expired."""
        return [c for c in self.calls if c.expired]

    @property
    def refresh_tokens(self) -> int:
        """Tokens the keep-warm refreshes read from the cache."""
        return sum(c.cached_tokens or 0 for c in self.refreshes)

    @property
    def expiry_tokens(self) -> int:
        return expiry_total([dict(c.cache or {}) for c in self.expiries])[0]

    @property
    def expiry_usd(self) -> float | None:
        """What the expiries cost beyond reads, by the price table; ``None`` when unpriced."""
        return expiry_total([dict(c.cache or {}) for c in self.expiries])[1]

    @property
    def prompt_tokens(self) -> int:
        return sum(c.prompt_tokens or 0 for c in self.calls)

    @property
    def reported(self) -> list[CallData]:
        """The calls whose cached-token count the provider reported."""
        return [c for c in self.calls if c.cached_tokens is not None]

    @property
    def cached_tokens(self) -> int | None:
        """Σ cached tokens the provider reported; ``None`` (unknown) when no call reported
        one. Never the reusable prefix: that is ctxwright's estimate, shown as one."""
        known = self.reported
        return sum(c.cached_tokens or 0 for c in known) if known else None

    @property
    def hit_ratio(self) -> float | None:
        """Σcached ÷ Σprompt over the calls that reported a cached count (the audit's rule,
        ``cache_ratios``); ``None`` when none did."""
        known = self.reported
        if not known:
            return None
        return cache_ratios(sum(c.cached_tokens or 0 for c in known), sum(c.prompt_tokens or 0 for c in known), 0)[0]

    @property
    def reusable_tokens(self) -> int:
        """Σ reusable prefix (the audit's estimate of what a cache could have served)."""
        return sum(c.reusable_tokens or 0 for c in self.calls)

    @property
    def reusable_ratio(self) -> float | None:
        p = self.prompt_tokens
        return round(self.reusable_tokens / p, 4) if p else None

    @property
    def prompt_counted(self) -> bool:
        """Some call's prompt size was counted by ctxwright (no usage reported)."""
        return any(c.prompt_counted for c in self.calls)

    @property
    def breaks(self) -> list[CallData]:
        return [c for c in self.calls if c.is_break]

    def compaction_cost(self, k: Compaction, prices: Prices | Pricing) -> float | None:
        """USD a compaction cost the cache: its tokens prefilled again at the input price
        instead of the cached one, priced as the call after it (``None`` without a price)."""
        call = next((c for c in self.calls if c.index == k.before_call), None)
        pr = as_pricing(prices)
        p = pr.price(call.provider if call else None, call.model if call else None) if pr is not None else None
        if p is None or k.cache_cost_tokens is None:
            return None
        return k.cache_cost_tokens * (p.input - p.cached_read) / 1e6

    def costs(self, prices: Prices | Pricing) -> tuple[float, float, int] | None:
        """(cost, cost had the cache held, calls priced) over the calls that have a price;
        ``None`` when none has."""
        # keep-warm refreshes are paid for, so they count in the cost, never as calls
        found = [r for r in (c.priced(prices) for c in [*self.calls, *self.refreshes]) if r is not None]
        if not found:
            return None
        return sum(r.cost for r in found), sum(r.if_held for r in found), len(found)

    def cost(self, prices: Prices | Pricing) -> float | None:
        """USD over the priced calls; ``None`` when no call has a price."""
        c = self.costs(prices)
        return None if c is None else c[0]


@dataclass
class ReportData:
    """Everything one report file shows."""

    title: str
    sessions: list[SessionData]
    #: which tokenizer counted what no log or server reported (``TokenCounter.source``), as a phrase
    token_source: str
    problems: list[str] = field(default_factory=list)
    problems_total: int = 0


# -- a stored session ------------------------------------------------------------------------


def from_store(store: Store, session_id: str, counter: TokenCounter | None = None) -> ReportData:
    """The stored session ``session_id`` and its sub-agents' sessions, each a page.

    Raises :class:`~ctxwright.errors.SessionNotFound` for an unknown id."""
    counter = counter or TokenCounter()
    root = store.get_session(session_id)
    sessions: list[SessionData] = []
    todo = [root.id]
    while todo:
        sid = todo.pop(0)
        sessions.append(_stored_session(store, sid, counter))
        todo.extend(store.children(sid))
    return ReportData(
        title=f"session {root.id}",
        sessions=sessions,
        token_source="parts as counted live with each call (the session's tokenizer); status and compaction "
        f"notes counted with {counter.source}",
    )


def _stored_session(store: Store, session_id: str, counter: TokenCounter) -> SessionData:
    row = store.get_session(session_id)
    events = store.events(session_id)
    calls = store.calls(session_id)
    first_user = next((e.message.content or "" for e in events if isinstance(e, UserEvent)), "")
    s = SessionData(
        key=row.id,
        title=first_user,
        source=f"{row.backend or '?'} · {row.model or '?'}",
        created_at=row.created_at,
        parent=row.parent_id,
    )
    layers: dict[int, list[str]] = {}
    last_call: int | None = None
    raw_compactions: list[CompactionEvent] = []
    for ev in events:
        if isinstance(ev, AssistantEvent) and ev.call_index is not None:
            last_call = ev.call_index
        elif isinstance(ev, ToolEvent):
            s.tools.append(ToolRun(ev.tool_name, ev.elapsed_ms, ev.ok, last_call))
        elif isinstance(ev, CompactionEvent):
            raw_compactions.append(ev)
            if ev.call_index is not None:
                layers.setdefault(ev.call_index, []).append(ev.layer)
    extra = _status_and_notes(row.prefix, row.meta, events, calls, counter, s.notes)
    by_index: dict[int, CallData] = {}
    for c in calls:
        a = c.audit
        ctx_before, ctx_after = a.context or ("", "")
        parts = {k: int(c.ledger.get(k) or 0) for k in Ledger.SHOWN}
        moved = extra.get(c.call_index)
        if moved:
            _carve(parts, moved)
        found = raw_cache_usage(c.usage.get("raw"))
        call = CallData(
            index=c.call_index,
            parts=parts,
            prompt_tokens=c.prompt_tokens if c.prompt_tokens is not None else a.prompt_tokens,
            prompt_counted=c.prompt_tokens is None,
            cached_tokens=c.cached_tokens,
            reusable_tokens=a.reusable_prefix_tokens,
            completion_tokens=c.completion_tokens,
            cause=a.cause or ("error" if c.error else "?"),
            where=a.where,
            before=ctx_before,
            after=ctx_after,
            options_changed=a.options_changed,
            wall_ms=c.elapsed_ms,
            error=c.error,
            compactions=tuple(layers.get(c.call_index, ())),
            usage_split=found[1] if found else None,
            provider=found[0] if found else None,
            model=c.model or row.model,
            cache=a.cache,
        )
        if a.cause == KEEP_WARM:  # paid for, never a request of the trajectory
            s.refreshes.append(call)
            continue
        call.previous_prompt_tokens = s.calls[-1].prompt_tokens or 0 if s.calls else 0
        s.calls.append(call)
        by_index[call.index] = call
    grouped: dict[int | None, list[CompactionEvent]] = {}
    for ev in raw_compactions:  # the layers that ran before one call cost its cache once
        grouped.setdefault(ev.call_index, []).append(ev)
    for call_index, evs in grouped.items():
        after = by_index.get(call_index) if call_index is not None else None
        s.compactions.append(
            Compaction(
                before_call=call_index,
                layer=", ".join(ev.layer for ev in evs),
                messages=sum(len(ev.replace) + len(ev.drop) for ev in evs),
                tokens_before=evs[0].tokens_before,
                cache_cost_tokens=_cache_cost(after),
                planner=_planner_line(evs),
                **_lost(evs),
                stall_ms=_stall(evs),
            )
        )
    s.stall = background.stalls(raw_compactions)
    s.attention = _stored_attention(store, row.id, s.notes)
    return s


def _stored_attention(store: Store, session_id: str, notes: list[str]) -> list[tuple[int, AttentionMap]]:
    """The session's stored attention maps; one that cannot be read is a note, not a failed
    report (the rest of the session is still worth reading)."""
    out: list[tuple[int, AttentionMap]] = []
    for call_index, data in store.attention_maps(session_id):
        try:
            out.append((call_index, AttentionMap.from_json(data)))
        except AttentionError as exc:
            notes.append(f"the attention map stored for call {call_index} cannot be drawn: {exc}")
    return out


def _planner_line(evs: list[CompactionEvent]) -> str | None:
    """Why the layers ran and how deep, as the planner recorded it in the events' payload."""
    decision = next((d for ev in evs if (d := from_record(ev.extra.get("planner"))) is not None), None)
    return decision.describe() if decision is not None else None


#: lost items named per row of the report's compactions table
LOST_SHOWN = 12


def _lost(evs: Sequence[CompactionEvent]) -> dict[str, Any]:
    """The loss ledgers of one call's compactions, summed; nothing when none has one."""
    read = [led for ev in evs if (led := ledger.read(ev)) is not None]
    if not read:
        return {}
    names = [f"{i.value} (event {h.seq})" for led in read for h in led.events for i in h.lost]
    return {"lost": sum(led.lost for led in read), "lost_items": tuple(names[:LOST_SHOWN])}


def _stall(evs: Sequence[CompactionEvent]) -> float | None:
    """The loop's wait on one call's compactions, summed; ``None`` when none recorded it."""
    found = [ev.stall_ms for ev in evs if ev.stall_ms is not None]
    return round(sum(found), 1) if found else None


def _cache_cost(call: CallData | None) -> int | None:
    if call is None or call.prompt_tokens is None or call.reusable_tokens is None:
        return None
    return max(0, call.prompt_tokens - call.reusable_tokens)


def _status_and_notes(
    prefix: Mapping[str, Any],
    meta: Mapping[str, Any] | None,
    events: Sequence[Event],
    calls: Sequence[CallRecord],
    counter: TokenCounter,
    notes: list[str],
) -> dict[int, dict[str, tuple[int, str]]]:
    """Per call index: the tokens of status messages and compaction notes in its request
    (and of the user's last message, when the ledger's "latest user" was one of those), and
    the ledger part each was counted in (``latest_user`` when it is the request's last
    user message, else ``history``, as ``build_ledger`` splits them).

    Rendered by the one renderer from the events the call was rendered from
    (``event_count``); skipped when the session has no status or compaction at all, so a long
    plain session costs nothing here."""
    if not any(isinstance(e, (StatusEvent, CompactionEvent)) for e in events):
        return {}
    try:
        settings = RenderSettings.from_meta(meta)
    except ValueError as exc:
        notes.append(f"status and compaction notes not shown: {exc}")
        return {}
    statuses = {e.seq for e in events if isinstance(e, StatusEvent)}
    r = Renderer(settings, tools_in_use=bool(prefix.get("tools")))
    out: dict[int, dict[str, tuple[int, str]]] = {}
    for c in sorted(calls, key=lambda c: c.event_count or 0):
        n = c.event_count
        if n is None:
            continue
        r.feed_all(events[r.count : n])
        entries = r.shown_entries()
        last_user = max((i for i, (_, m) in enumerate(entries) if m.role == "user"), default=None)
        found: dict[str, tuple[int, str]] = {}
        for i, (seq, m) in enumerate(entries):
            kind = "compaction_notes" if seq is None else "status" if seq in statuses else None
            if kind is None:
                continue
            where = "latest_user" if i == last_user else "tool_results" if m.role == "tool" else "history"
            tokens, _ = found.get(kind, (0, where))
            found[kind] = (tokens + counter.count_message(m), where)
        if last_user is not None and (entries[last_user][0] is None or entries[last_user][0] in statuses):
            # the ledger's "latest user" was a status or a note: the user's own last message
            # was counted in history
            plain = max(
                (
                    i
                    for i, (seq, m) in enumerate(entries)
                    if m.role == "user" and seq is not None and seq not in statuses
                ),
                default=None,
            )
            if plain is not None:
                found["latest_user"] = (counter.count_message(entries[plain][1]), "history")
        if found:
            out[c.call_index] = found
    return out


def _carve(parts: dict[str, int], moved: Mapping[str, tuple[int, str]]) -> None:
    """Move each found part's tokens out of the ledger part they were counted in (never
    below zero: the ledger may have been counted by another tokenizer)."""
    for kind, (tokens, source) in moved.items():
        take = min(tokens, parts.get(source, 0))
        parts[source] = parts.get(source, 0) - take
        parts[kind] = parts.get(kind, 0) + take


# -- a request log, or request records ------------------------------------------------------


#: problems of a log listed on the page (the rest are counted)
MAX_PROBLEMS = 50


def from_log(path: str | Path, counter: TokenCounter | None = None, pricing: Pricing | None = None) -> ReportData:
    """Every conversation of the log at ``path`` (anything ``ctxwright audit`` reads); each
    expiry priced by ``pricing`` (the command's prices; the built-in table when ``None``).

    Raises ``OSError`` when the file cannot be read; what is wrong inside it is listed."""
    return from_requests(read_log(path), title=Path(path).name, counter=counter, pricing=pricing)


def from_requests(
    items: Iterable[AuditRequest | ParseProblem],
    *,
    title: str,
    counter: TokenCounter | None = None,
    pricing: Pricing | None = None,
) -> ReportData:
    """The requests (and problems) of a log or of recorded traffic, audited in order; each
    conversation the audit finds (a session export's session, a proxy session) is a page."""
    counter = counter or TokenCounter()
    auditor = Auditor(counter, keep_rows=False)
    verdicts = LogVerdicts(pricing=pricing)
    sessions: dict[int, SessionData] = {}
    data = ReportData(
        title=title, sessions=[], token_source=f"tokens the log does not report counted with {counter.source}"
    )
    for item in items:
        if isinstance(item, ParseProblem):
            data.problems_total += 1
            if len(data.problems) < MAX_PROBLEMS:
                data.problems.append(f"line {item.line}: {item.message}")
            continue
        row = auditor.add(item)
        s = sessions.get(row.conversation)
        if s is None:
            first_user = next(
                (_text(m.get("content")) for m in item.messages if isinstance(m, Mapping) and m.get("role") == "user"),
                "",
            )
            name = item.session or f"conversation {row.conversation}"
            s = sessions[row.conversation] = SessionData(
                key=str(name) if item.session else f"conv-{row.conversation}",
                title=first_user,
                source=f"from request #{row.index}",
            )
        s.calls.append(_logged_call(counter, item, row, len(s.calls)))
        s.calls[-1].cache = verdicts.add(item, row)
        if item.marker == "compaction" or row.cause == "compaction":
            call = s.calls[-1]
            s.compactions.append(
                Compaction(call.index, "recorded in the log", 0, None, _cache_cost(call)),
            )
    data.sessions = list(sessions.values())
    return data


def from_proxy(
    store: Store, session_id: str, counter: TokenCounter | None = None, pricing: Pricing | None = None
) -> ReportData:
    """The proxy session ``session_id`` (or a unique prefix of it): one page, its calls audited
    as one conversation, each with the wall time the proxy measured and its outcome when the
    exchange did not complete. Raises :class:`~ctxwright.errors.SessionNotFound` for an
    unknown id."""
    row = ProxyLog(store).session_row(session_id)
    sid = str(row["id"])
    records = proxy_session_requests(store, sid)
    items = list(session_items(records, sid))  # audited as the proxy audited them live
    # the proxy's own keep-warm refreshes (proxy/keep_warm.py): paid for, never the agent's calls,
    # audited in a conversation of their own (proxy/session_audit.py)
    warm = [is_refresh(r) for r in records]
    agent = [(r, i) for r, i, w in zip(records, items, warm, strict=True) if not w]
    data = from_requests([i for _r, i in agent], title=f"proxy session {sid}", counter=counter, pricing=pricing)
    refreshes = from_requests(
        [i for i, w in zip(items, warm, strict=True) if w], title="", counter=counter, pricing=pricing
    )
    # one item per record (proxy/log.py): the proxy's own figures of each call
    metas = [r.get("proxy") or {} for r, item in agent if isinstance(item, AuditRequest)]
    for s in data.sessions:
        s.source = f"proxy · {row.get('api') or '?'} · {row.get('upstream') or '?'}"
        s.created_at = row.get("created_at")
        for call, meta in zip(s.calls, metas, strict=False):
            call.wall_ms = meta.get("total_ms")
            outcome = meta.get("outcome")
            if meta.get("error") or (outcome and outcome != "complete"):
                call.error = str(meta.get("error") or outcome)
        s.refreshes += [c for r in refreshes.sessions for c in r.calls]
    return data


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(b.get("text", "")) for b in content if isinstance(b, Mapping))
    return ""


def _is_tool_result(m: Mapping[str, Any]) -> bool:
    """An OpenAI ``tool`` message or an Anthropic user turn made of ``tool_result`` blocks."""
    if m.get("role") in ("tool", "function"):
        return True
    content = m.get("content")
    return (
        isinstance(content, list)
        and bool(content)
        and all(isinstance(b, Mapping) and b.get("type") == "tool_result" for b in content)
    )


def _logged_call(counter: TokenCounter, req: AuditRequest, row: AuditRow, index: int) -> CallData:
    """A logged request's parts, split the way ``build_ledger`` splits a ctxwright request,
    counted on the same canonical JSON the audit counts."""
    msgs = [m if isinstance(m, Mapping) else {} for m in req.messages]
    raw = req.message_bytes
    texts = [raw[i].decode("utf-8", "replace") if raw is not None else canonical_json(m) for i, m in enumerate(msgs)]
    last_user = max(
        (i for i, m in enumerate(msgs) if m.get("role") == "user" and not _is_tool_result(m)),
        default=None,
    )
    parts = dict.fromkeys(Ledger.PARTS, 0)
    parts["system_and_tools"] = counter.count(req.system) + (
        counter.count(canonical_json(list(req.tools))) if req.tools else 0
    )
    for i, (m, t) in enumerate(zip(msgs, texts, strict=True)):
        n = counter.count(t)
        key = "tool_results" if _is_tool_result(m) else "latest_user" if i == last_user else "history"
        parts[key] += n
    parts["framing"] = PER_MESSAGE_OVERHEAD * len(msgs)
    if row.skills_catalog_tokens:
        _carve(parts, {"skills_catalog": (row.skills_catalog_tokens, "history")})
    if row.usage_known:  # the provider counted the prompt: the parts add up to its count
        parts["template_difference"] = row.prompt_tokens - sum(parts.values())
    rec = audit_record(row)
    ctx = rec.get("context") or {}
    return CallData(
        index=index,
        parts=parts,
        prompt_tokens=row.prompt_tokens,
        cached_tokens=row.cached_tokens,
        reusable_tokens=row.reusable_prefix_tokens,
        completion_tokens=row.completion_tokens,
        cause=row.cause,
        previous_prompt_tokens=row.previous_prompt_tokens,
        prompt_counted=not row.usage_known,
        where=str(rec.get("where") or ""),
        before=str(ctx.get("before") or ""),
        after=str(ctx.get("after") or ""),
        options_changed=row.options_changed,
        usage_split=row.usage_split,
        provider=row.provider,
        model=row.model,
    )


def generated_at() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime())
