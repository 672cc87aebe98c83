"""The report as one HTML file: an index of sessions, then a section per session.

The page's shell is ``report/page.py``'s (shared with the attention page): one file that opens
offline (plotly.js embedded once, a ``Content-Security-Policy`` of ``default-src 'none'``),
autoescaped Jinja2, and each figure's JSON written so no string from a log can end its
``<script>`` element. A stored session's attention maps are drawn in its section by the
attention page's own renderer (``attention/view.py``), so the two show the same numbers.

Large sessions stay usable: the per-call charts draw at most :data:`MAX_BARS` bars (a bar
stands for the mean of a run of consecutive calls when there are more), and the tables list
at most :data:`MAX_ROWS` calls and :data:`MAX_BREAKS` cache breaks, saying how many are left out.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go

from ctxwright.audit.compare import Prices, as_pricing
from ctxwright.cache.prices import Pricing
from ctxwright.cache.verdict import CAUSES
from ctxwright.report.data import LABELS, PARTS, CallData, ReportData, SessionData
from ctxwright.report.page import Chart, pct, render_page, script_json, write_page

if TYPE_CHECKING:
    from ctxwright.attention.view import AttentionView

#: bars per per-call chart; more calls are averaged in runs of consecutive calls
MAX_BARS = 400
#: calls listed in a session's table
MAX_ROWS = 300
#: cache breaks listed in a session's table
MAX_BREAKS = 200
#: sessions whose charts are drawn (each session is still listed in the index)
MAX_CHARTED_SESSIONS = 200
#: stored attention maps drawn per session (the first, by call); each is three charts
MAX_ATTENTION_MAPS = 20
#: The provider-cache causes the report lists as misses: every cause of the verdict but a
#: first write and a hit (one list, ``cache/verdict.py``).
MISS_CAUSES = [c for c in CAUSES if c not in ("first", "hit")]

#: one colour per part, the same in every chart
COLORS: dict[str, str] = {
    "system_and_tools": "#4c78a8",
    "skills_catalog": "#9d755d",
    "status": "#b279a2",
    "compaction_notes": "#eeca3b",
    "tool_results": "#f58518",
    "history": "#54a24b",
    "latest_user": "#e45756",
    "framing": "#bab0ac",
    "template_difference": "#d3d3d3",
    "cached": "#72b7b2",
    "reusable": "#c7e9e6",
    "prefilled": "#e45756",
}


#: the name of a reusable prefix standing where the provider reported no cached count
ESTIMATED_REUSABLE = "reusable prefix (cached not reported: estimate)"
#: the name of the marks over the part chart's bars: each call's prompt tokens, as in the table
PROMPT_MARKS = "prompt tokens (as in the table)"


def buckets(n: int, max_bars: int = MAX_BARS) -> list[tuple[int, int]]:
    """``[start, end)`` runs of consecutive calls, at most ``max_bars`` of them, equal sizes."""
    if n <= 0:
        return []
    size = max(1, math.ceil(n / max_bars))
    return [(a, min(a + size, n)) for a in range(0, n, size)]


def _labels(calls: Sequence[CallData], runs: list[tuple[int, int]]) -> list[str]:
    return [str(calls[a].index) if b - a == 1 else f"{calls[a].index}–{calls[b - 1].index}" for a, b in runs]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _layout(title: str, runs: list[tuple[int, int]], calls: int, y: str) -> dict[str, Any]:
    averaged = len(runs) < calls
    note = f" (each bar: the mean of {runs[0][1] - runs[0][0]} consecutive calls)" if averaged else ""
    return {
        "title": {"text": title + note, "font": {"size": 14}},
        "barmode": "stack",
        "height": 340,
        "margin": {"l": 60, "r": 20, "t": 40, "b": 50},
        "xaxis": {"title": {"text": "model call"}, "type": "category"},
        "yaxis": {"title": {"text": y}},
        "legend": {"orientation": "h", "y": -0.25, "traceorder": "normal"},
    }


def _parts_chart(s: SessionData, runs: list[tuple[int, int]], labels: list[str]) -> go.Figure:
    present = [p for p in PARTS if any(c.parts.get(p) for c in s.calls)]
    fig = go.Figure(layout=_layout("context by part (tokens)", runs, len(s.calls), "tokens"))
    for part in present:
        ys = [round(_mean([s.calls[i].parts.get(part, 0) for i in range(a, b)])) for a, b in runs]
        fig.add_bar(x=labels, y=ys, name=LABELS.get(part, part), marker_color=COLORS.get(part))
    # the prompt count the headline and the table give, as a mark over each bar: where the two
    # differ (another tokenizer, the chat template's markers) it shows, and parts_note says why
    prompts = [round(_mean([s.calls[i].prompt_tokens or 0 for i in range(a, b)])) for a, b in runs]
    fig.add_scatter(
        x=labels,
        y=prompts,
        mode="markers",
        name=PROMPT_MARKS,
        marker={"symbol": "line-ew-open", "size": 16, "color": "#222", "line": {"width": 2}},
    )
    return fig


def parts_note(s: SessionData, token_source: str) -> str | None:
    """Why the parts (the part chart, the table's part columns) and the prompt tokens (the
    headline, the table's column) add up to different totals, when they do; ``None`` when they
    agree. They are two counts of two things: each part is ctxwright's count of that part's text
    (``token_source``), the prompt tokens are the provider's count of the request its chat
    template rendered -- another tokenizer, role markers, the tools in the template's own format
    -- or, where the provider reported no usage, ctxwright's count of the request as sent."""
    if not s.calls:
        return None
    parts = sum(sum(c.parts.values()) for c in s.calls)
    prompt = s.prompt_tokens
    if parts == prompt:
        return None
    counted = sum(c.prompt_counted for c in s.calls)
    if counted == len(s.calls):
        whose = "ctxwright's count of each request as sent (the provider reported no usage)"
    else:
        whose = (
            "the provider's own count of the request as its chat template rendered it (its tokenizer, role "
            "markers, the tools in the template's own format)"
        )
        if counted:
            whose += (
                f"; ctxwright's count for the {counted:,} call{'s' if counted > 1 else ''} it reported no usage for"
            )
    diff = prompt - parts
    share = f", {diff / prompt:+.1%}" if prompt else ""
    return (
        f"The parts add up to {parts:,} tokens over the session's calls and the prompt tokens to {prompt:,} "
        f"({diff:+,}{share}): each part is ctxwright's count of that part's text ({token_source}); the prompt "
        f"tokens are {whose}. The marks over the bars of the part chart are the prompt tokens."
    )


def _cache_chart(s: SessionData, runs: list[tuple[int, int]], labels: list[str]) -> go.Figure:
    """Cached and prefilled tokens per call. A call whose provider reported no cached count
    shows its reusable prefix as a bar of its own, named as the estimate it is, never as cached."""
    fig = go.Figure(layout=_layout("prompt tokens: cached vs prefilled", runs, len(s.calls), "tokens"))

    def mean(value: Callable[[CallData], int]) -> list[int]:
        return [round(_mean([value(s.calls[i]) for i in range(a, b)])) for a, b in runs]

    cached = mean(lambda c: c.cached_paid if c.cached_tokens is not None else 0)
    pre = mean(lambda c: c.prefilled)
    breaks = [sum(s.calls[i].is_break for i in range(a, b)) for a, b in runs]
    fig.add_bar(x=labels, y=cached, name="cached", marker_color=COLORS["cached"])
    if len(s.reported) < len(s.calls):
        fig.add_bar(
            x=labels,
            y=mean(lambda c: c.cached_paid if c.cached_tokens is None else 0),
            name=ESTIMATED_REUSABLE,
            marker_color=COLORS["reusable"],
        )
    fig.add_bar(
        x=labels,
        y=pre,
        name="prefilled",
        marker_color=COLORS["prefilled"],
        customdata=breaks,
        hovertemplate="%{y} prefilled · cache breaks: %{customdata}<extra></extra>",
    )
    return fig


def _cost_chart(s: SessionData, runs: list[tuple[int, int]], labels: list[str], prices: Pricing) -> go.Figure:
    """Cumulative cost as billed, and had the cache held every reusable prefix token."""
    total = held = 0.0
    ys, hs = [], []
    for a, b in runs:
        for i in range(a, b):
            r = s.calls[i].priced(prices)
            if r is not None:
                total, held = total + r.cost, held + r.if_held
        ys.append(round(total, 6))
        hs.append(round(held, 6))
    fig = go.Figure(layout=_layout("cumulative cost", runs, len(s.calls), "cost"))
    fig.update_layout(barmode="group", showlegend=True, yaxis={"rangemode": "tozero"})
    mode = "lines+markers" if len(runs) < 60 else "lines"
    fig.add_scatter(x=labels, y=ys, mode=mode, name="cost")
    fig.add_scatter(x=labels, y=hs, mode=mode, name="if the cache had held", line={"dash": "dot"})
    return fig


@dataclass(frozen=True)
class ToolStats:
    name: str
    runs: int
    errors: int
    median_ms: float | None
    max_ms: float | None
    total_ms: float


def tool_stats(s: SessionData) -> list[ToolStats]:
    by: dict[str, list[tuple[float | None, bool]]] = {}
    for t in s.tools:
        by.setdefault(t.name, []).append((t.elapsed_ms, t.ok))
    out = []
    for name, runs in sorted(by.items()):
        ms = [m for m, _ in runs if m is not None]
        out.append(
            ToolStats(
                name,
                len(runs),
                sum(not ok for _, ok in runs),
                statistics.median(ms) if ms else None,
                max(ms) if ms else None,
                sum(ms),
            )
        )
    return out


def _tools_chart(stats: list[ToolStats]) -> go.Figure:
    fig = go.Figure(
        layout={
            "title": {"text": "tool timings (ms)", "font": {"size": 14}},
            "barmode": "group",
            "height": 300,
            "margin": {"l": 60, "r": 20, "t": 40, "b": 50},
            "yaxis": {"title": {"text": "ms"}},
            "legend": {"orientation": "h", "y": -0.25},
        }
    )
    names = [t.name for t in stats]
    fig.add_bar(x=names, y=[t.median_ms or 0 for t in stats], name="median")
    fig.add_bar(x=names, y=[t.max_ms or 0 for t in stats], name="max")
    return fig


@dataclass
class SessionView:
    """What the template needs of one session."""

    anchor: str
    data: SessionData
    charts: list[Chart]
    rows: list[CallData]
    rows_left_out: int
    breaks: list[CallData]
    breaks_left_out: int
    tools: list[ToolStats]
    cost: float | None
    #: what the priced calls would have cost had the cache held every reusable prefix token
    cost_if_held: float | None
    #: calls with a price (a model missing from the price table has none)
    priced_calls: int
    charted: bool
    #: the parts any call of the session has (the table's columns)
    parts: list[str]
    #: the headline's cache figures: what the provider reported, and ctxwright's estimate
    cached_text: str
    reusable_text: str
    #: the cost counts reusable prefixes as cached where the provider reported no cached count
    cost_estimated: bool
    #: why the parts and the prompt tokens add up to different totals (``None``: they agree)
    parts_note: str | None = None
    #: the session's stored attention maps, drawn by the attention page's renderer
    attention: list[AttentionView] = field(default_factory=list)
    attention_left_out: int = 0


def _attention(i: int, s: SessionData) -> list[AttentionView]:
    """The first :data:`MAX_ATTENTION_MAPS` stored maps of the session. Each table averages the
    layers its per-token strip was computed over (the layers ``ctxwright attention`` was asked
    for), so the table and the strip agree; a map without them averages every layer."""
    if not s.attention:
        return []
    from ctxwright.attention.view import attention_view  # a peer of the report; drawn only when stored

    out = []
    for k, m in s.attention[:MAX_ATTENTION_MAPS]:
        layers = m.strip_layers if m.strip_layers and set(m.strip_layers) <= set(m.layers) else None
        out.append(attention_view(m, f"s{i}-a{k}", layers, caption=f"call {k}"))
    return out


def _view(i: int, s: SessionData, prices: Pricing | None, chart: bool, token_source: str = "") -> SessionView:
    charts: list[Chart] = []
    stats = tool_stats(s)
    if chart and s.calls:
        runs = buckets(len(s.calls))
        labels = _labels(s.calls, runs)
        charts.append(Chart(f"c{i}-parts", "context by part", script_json(_parts_chart(s, runs, labels))))
        charts.append(Chart(f"c{i}-cache", "cached vs prefilled", script_json(_cache_chart(s, runs, labels))))
        if prices is not None:
            charts.append(Chart(f"c{i}-cost", "cost", script_json(_cost_chart(s, runs, labels, prices))))
    if chart and stats:
        charts.append(Chart(f"c{i}-tools", "tool timings", script_json(_tools_chart(stats))))
    breaks = s.breaks
    costs = s.costs(prices) if prices is not None else None
    return SessionView(
        anchor=f"s{i}",
        data=s,
        charts=charts,
        rows=s.calls[:MAX_ROWS],
        rows_left_out=max(0, len(s.calls) - MAX_ROWS),
        breaks=breaks[:MAX_BREAKS],
        breaks_left_out=max(0, len(breaks) - MAX_BREAKS),
        tools=stats,
        cost=costs[0] if costs else None,
        cost_if_held=costs[1] if costs else None,
        priced_calls=costs[2] if costs else 0,
        charted=chart,
        parts=[p for p in PARTS if any(c.parts.get(p) for c in s.calls)],
        cached_text=cached_text(s),
        reusable_text=reusable_text(s),
        cost_estimated=len(s.reported) < len(s.calls),
        parts_note=parts_note(s, token_source),
        attention=_attention(i, s),
        attention_left_out=max(0, len(s.attention) - MAX_ATTENTION_MAPS),
    )


def cached_text(s: SessionData) -> str:
    """The cached tokens the provider reported, for a headline: ``unknown`` when no call
    reported a count (a server without a cached-token field, a log without usage) -- the
    reusable prefix is an estimate and is shown as one, by :func:`reusable_text`."""
    known = s.reported
    if not known:
        return "cached unknown (not reported by the provider)"
    text = f"cached {s.cached_tokens or 0:,} (hit ratio {pct(s.hit_ratio)})"
    if len(known) < len(s.calls):
        text += f" on the {len(known):,} of {len(s.calls):,} calls that reported it"
    return text


def reusable_text(s: SessionData) -> str:
    """The reusable prefix, labelled as ctxwright's estimate of what a cache could serve."""
    return f"estimated reusable prefix {s.reusable_tokens:,} ({pct(s.reusable_ratio)} of the prompt)"


def render_html(data: ReportData, prices: Prices | Pricing | None = None) -> str:
    """The report as one HTML document (plotly.js included). ``prices``: the flat
    ``--price-*`` prices or a :class:`~ctxwright.cache.prices.Pricing` (the price table);
    the cost columns appear when some call has a price."""
    pricing = as_pricing(prices)
    # prices were given but no call's model has one: the page says so rather than show no cost
    unpriced = pricing is not None and any(s.calls for s in data.sessions)
    if pricing is not None and not any(c.priced(pricing) for s in data.sessions for c in s.calls):
        pricing = None
    unpriced = unpriced and pricing is None
    prices = pricing
    used: dict[str, None] = {}
    if pricing is not None:
        for s in data.sessions:
            for c in s.calls:
                r = c.priced(pricing)
                if r is not None:
                    used[pricing.describe(r.price)] = None
    views = [_view(i, s, prices, i < MAX_CHARTED_SESSIONS, data.token_source) for i, s in enumerate(data.sessions)]
    return render_page(
        "report.html.j2",
        charts=sum(len(v.charts) + sum(len(a.charts) for a in v.attention) for v in views),
        data=data,
        views=views,
        prices=prices,
        prices_used=list(used),
        unpriced=unpriced,
        labels=LABELS,
        parts=PARTS,
        colors=COLORS,
        max_charted=MAX_CHARTED_SESSIONS,
        miss_causes=MISS_CAUSES,
        json=json,
    )


def write_report(data: ReportData, path: str | Path, prices: Prices | Pricing | None = None) -> Path:
    """Write the report to ``path`` (its folder must exist); returns the path written.

    The file is ``0600``, as the database is (``store/private.py``): the page holds every
    message and tool result of the session, which the default umask would let every local
    user read. A file that cannot be written (a full disk, ``/dev/full``, a symlink, which is
    not followed) is a :class:`~ctxwright.errors.CtxwrightError` naming it.
    """
    return write_page(render_html(data, prices), path, "the report")
