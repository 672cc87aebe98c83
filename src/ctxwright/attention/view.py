"""Attention maps drawn: an HTML page (tables and Plotly heatmaps), a PNG, and the report's
attention section -- all three from :func:`attention_view`, so they show the same numbers.

Why the report's page: an attention page is read where a report is (after the run, offline,
attached to a bug), and holds the same untrusted text (every message of the request, token by
token). So it is drawn into the report's one shell (``report/page.py``: plotly.js embedded
once, a CSP that forbids every fetch, autoescaped Jinja2, figure JSON that cannot end its
``<script>``), and ``ctxwright report`` draws a session's saved maps with the same macro
(``report/templates/attention.html.j2``) as ``ctxwright attention --html`` does.

What a map shows:

* a table of the spans that partition the prompt (each message, and the answer's own earlier
  tokens): tokens, the share of non-sink attention averaged over the chosen layers, and the
  share the sink (token 0) took;
* a heatmap layer × message, and a second one layer × finer span (system-prompt sections,
  status-bar lines) when the map has them: a lookup that happens in middle layers only shows
  there, not in an average (``model.py`` says why);
* a strip over the prompt's tokens coloured by share, read left to right and top to bottom,
  its hover naming the tokens and their message.

Sizes stay bounded whatever the request: the strip draws at most :data:`MAX_STRIP_CELLS`
cells (past that each cell sums a run of consecutive tokens, and the page says how many), a
heatmap at most :data:`MAX_HEATMAP_SPANS` columns and a table :data:`MAX_TABLE_ROWS` rows
(the most attended, kept in prompt order, with how many were left out).

The PNG (:func:`write_png`) is the layer × message heatmap, drawn by matplotlib, which is an
optional extra (``pip install 'ctxwright[attention]'``): the HTML views need nothing beyond
what the report already uses.
"""

from __future__ import annotations

import bisect
import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from ctxwright.attention.model import AttentionMap, Span
from ctxwright.errors import AttentionError
from ctxwright.report.page import Chart, plotly_text, render_page, script_json, short, visible, write_page

#: cells of the per-token strip; a longer prompt is drawn in runs of consecutive tokens per cell
MAX_STRIP_CELLS = 2048
#: cells per row of the strip (the prompt reads left to right, then down)
STRIP_COLUMNS = 64
#: columns (spans) of a heatmap; past that the most attended are kept, in prompt order
MAX_HEATMAP_SPANS = 200
#: rows of a span table
MAX_TABLE_ROWS = 300
#: characters of a span label on a chart's axis, of a strip cell's text, of the answer shown
LABEL_CHARS = 32
CELL_CHARS = 60
ANSWER_CHARS = 2000
#: the colour of the frame around the layers the tables average (red, as the report's cut mark)
CHOSEN_COLOR = "#d62728"


@dataclass(frozen=True)
class SpanRow:
    """One span of a table: its number in the map's list of that kind, and its shares."""

    number: int
    label: str
    kind: str
    role: str
    message_index: int
    tokens: int
    #: share of non-sink attention, averaged over the chosen layers
    share: float
    #: share of raw attention on the sink token (non-zero only for the span that holds it)
    sink: float


@dataclass(frozen=True)
class AttentionView:
    """What the template (``attention.html.j2``) needs of one map."""

    anchor: str
    caption: str
    model: str
    meta: list[tuple[str, str]]
    answer: str
    answer_tokens: int
    prompt_tokens: int
    #: the layers the tables average, and all the map's layers, as ranges (``15-24``)
    layers_text: str
    all_layers_text: str
    #: share of raw attention on the sink token, averaged over the chosen layers
    sink: float
    rows: list[SpanRow]
    rows_left_out: int
    fine: list[SpanRow]
    fine_left_out: int
    charts: list[Chart]
    notes: list[str] = field(default_factory=list)
    #: the answer's log-probability (sum over its tokens), when the map has it
    logprob: float | None = None


def layer_ranges(layers: Sequence[int]) -> str:
    """``[3, 4, 5, 9]`` as ``3-5,9``: the form ``--layers`` takes (and how the answer rows a map
    read are said)."""
    out: list[str] = []
    run: list[int] = []
    for n in sorted(set(layers)):
        if run and n == run[-1] + 1:
            run.append(n)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [n]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def chosen_layers(m: AttentionMap, layers: Sequence[int] | None) -> tuple[int, ...]:
    """The layers to average, checked against the map's: a layer the map has no shares for
    would silently drop out of every mean."""
    if layers is None:
        return m.layers
    picked = tuple(dict.fromkeys(layers))
    missing = [n for n in picked if n not in m.layers]
    if not picked or missing:
        what = f"layer {missing[0]}" if missing else "no layer"
        raise AttentionError(
            f"the attention map of {m.model} has layers {layer_ranges(m.layers)}, not {what}; "
            "choose layers it has (e.g. --layers all)"
        )
    return picked


def _check(m: AttentionMap) -> None:
    n = len(m.layers)
    bad = [s.label for s in m.spans if len(s.share_by_layer) != n or len(s.sink_share_by_layer) != n]
    if bad or len(m.sink_share_by_layer) != n:
        raise AttentionError(
            f"the attention map of {m.model} is inconsistent: {len(m.layers)} layers but span "
            f"{bad[0] if bad else '(sink)'!r} has shares for another count; make it again with `ctxwright attention`"
        )


def _top(
    spans: Sequence[tuple[int, Span]], m: AttentionMap, layers: Sequence[int], limit: int
) -> list[tuple[int, Span]]:
    """At most ``limit`` spans: the most attended, in prompt order."""
    if len(spans) <= limit:
        return list(spans)
    order = sorted(range(len(spans)), key=lambda i: -m.mean_share(spans[i][1], layers))
    keep = set(order[:limit])
    return [x for i, x in enumerate(spans) if i in keep]


def _row(number: int, s: Span, m: AttentionMap, layers: Sequence[int]) -> SpanRow:
    return SpanRow(
        number=number,
        label=s.label,
        kind=s.kind,
        role=s.role,
        message_index=s.message_index,
        tokens=s.tokens,
        share=m.mean_share(s, layers),
        sink=sum(s.sink_share_by_layer[m.layers.index(n)] for n in layers) / len(layers),
    )


def _named(s: Span) -> str:
    """A message span as a reader names it: its label (``#3 tool lookup``, ``#4 status bar``)
    already holds its index and its role, so it is shown as it is."""
    return s.label


def _axis_label(number: int, s: Span, with_role: bool) -> str:
    """A heatmap column's label: a message's own (it is numbered); a section or status line
    numbered as in its table (labels need not be unique)."""
    return short(visible(s.label if with_role else f"#{number} {s.label}"), LABEL_CHARS)


def _frames(m: AttentionMap, layers: Sequence[int]) -> list[dict[str, Any]]:
    """Red frames around the chosen layers' runs, when they are not all the layers."""
    if set(layers) == set(m.layers):
        return []
    shapes = []
    for run in layer_ranges(layers).split(","):
        lo, _, hi = run.partition("-")
        shapes.append(
            {
                "type": "rect",
                "xref": "paper",
                "x0": 0,
                "x1": 1,
                "yref": "y",
                "y0": int(lo) - 0.5,
                "y1": int(hi or lo) + 0.5,
                "line": {"color": CHOSEN_COLOR, "width": 2},
            }
        )
    return shapes


def _heatmap(
    m: AttentionMap, spans: Sequence[tuple[int, Span]], title: str, layers: Sequence[int], with_role: bool
) -> go.Figure:
    """Layer (y) × span (x), coloured by the span's share at that layer."""
    x = [plotly_text(_axis_label(n, s, with_role)) for n, s in spans]
    z = [[round(s.share_by_layer[i], 5) for _, s in spans] for i in range(len(m.layers))]
    frames = _frames(m, layers)
    note = f" (framed: layers {layer_ranges(layers)})" if frames else ""
    fig = go.Figure(
        layout={
            "title": {"text": plotly_text(title + note), "font": {"size": 14}},
            "height": max(300, 14 * len(m.layers) + 200),
            "margin": {"l": 60, "r": 20, "t": 40, "b": 140},
            "xaxis": {"type": "category", "tickangle": -45, "automargin": True},
            "yaxis": {"title": {"text": "layer"}},
            "shapes": frames,
        }
    )
    fig.add_heatmap(
        x=x,
        y=list(m.layers),
        z=z,
        zmin=0,
        colorscale="Viridis",
        colorbar={"title": {"text": "share"}, "tickformat": ".0%"},
        hovertemplate="%{x}<br>layer %{y}<br>share %{z:.1%}<extra></extra>",
    )
    return fig


def _strip(m: AttentionMap) -> tuple[go.Figure, str | None]:
    """The prompt's tokens as rows of cells coloured by share; ``(figure, note)`` where the
    note says how many tokens each cell merges when the prompt is longer than the cells."""
    n = len(m.token_share)
    size = max(1, math.ceil(n / MAX_STRIP_CELLS))
    runs = [(a, min(a + size, n)) for a in range(0, n, size)]
    parts = sorted(m.messages(), key=lambda s: s.start)
    starts = [s.start for s in parts]

    def owner(i: int) -> str:
        at = bisect.bisect_right(starts, i) - 1
        if at < 0 or i >= parts[at].end:
            return "no message"
        return _named(parts[at])

    cells: list[float] = []
    hover: list[str] = []
    for a, b in runs:
        share = sum(m.token_share[a:b])
        text = visible("".join(m.token_text[a:b]))
        if len(text) > CELL_CHARS:
            text = text[: CELL_CHARS - 1] + "…"
        where = f"token {a}" if b - a == 1 else f"tokens {a}–{b - 1}"
        cells.append(round(share, 6))
        hover.append(plotly_text(f"{where} · {owner(a)}") + "<br>" + plotly_text(text) + f"<br>share {share:.2%}")
    rows = max(1, math.ceil(len(cells) / STRIP_COLUMNS))
    pad = rows * STRIP_COLUMNS - len(cells)
    z_flat: list[float | None] = [*cells, *([None] * pad)]
    h_flat = [*hover, *([""] * pad)]
    z = [z_flat[r * STRIP_COLUMNS : (r + 1) * STRIP_COLUMNS] for r in range(rows)]
    hover_rows = [h_flat[r * STRIP_COLUMNS : (r + 1) * STRIP_COLUMNS] for r in range(rows)]
    ranked = sorted(cells)
    # a few tokens take most of the attention; capped at the 99th percentile, the rest still show
    zmax = ranked[int(0.99 * (len(ranked) - 1))] if ranked else 0.0
    zmax = zmax if zmax > 0 else (ranked[-1] if ranked and ranked[-1] > 0 else 1.0)
    every = max(1, rows // 12)
    layers = layer_ranges(m.strip_layers) if m.strip_layers else "all"
    merged = f"; a cell sums {size} consecutive tokens" if size > 1 else ""
    fig = go.Figure(
        layout={
            "title": {
                "text": plotly_text(
                    f"share per prompt token (layers {layers}{merged}; colours capped at the 99th percentile)"
                ),
                "font": {"size": 14},
            },
            "height": max(180, 18 * rows + 110),
            "margin": {"l": 90, "r": 20, "t": 40, "b": 20},
            "plot_bgcolor": "rgba(0,0,0,0)",  # the empty cells after the last token
            "xaxis": {"showticklabels": False, "showgrid": False, "zeroline": False},
            "yaxis": {
                "autorange": "reversed",
                "tickvals": list(range(0, rows, every)),
                "ticktext": [f"token {r * STRIP_COLUMNS * size:,}" for r in range(0, rows, every)],
                "showgrid": False,
                "zeroline": False,
            },
        }
    )
    fig.add_heatmap(
        z=z,
        text=hover_rows,
        zmin=0,
        zmax=zmax,
        colorscale="Viridis",
        colorbar={"title": {"text": "share"}, "tickformat": ".2%"},
        hovertemplate="%{text}<extra></extra>",
        xgap=1,
        ygap=1,
    )
    note = (
        f"The prompt's {n:,} tokens are drawn as {len(cells):,} cells of {size} consecutive tokens "
        f"({n - len(cells):,} tokens merged into their neighbours; a cell's share is their sum)."
        if size > 1
        else None
    )
    return fig, note


def _meta(m: AttentionMap) -> list[tuple[str, str]]:
    """The map's provenance as the page lists it, one short text per entry. The answer has its
    own line, so it is not repeated; the answer rows read (``meta["rows"]``, one index per
    answer token) are said as a count and ranges -- listed, a long answer's rows were a dump of
    numbers in the heading."""
    out = []
    for k, v in m.meta.items():
        if k == "answer":
            continue
        if k == "rows":
            out.append(("answer tokens read", _rows_text(v, len(m.answer_tokens))))
            continue
        text = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str)
        out.append((str(k), short(text, 160)))
    return out


def _rows_text(rows: Any, answer_tokens: int) -> str:
    """``all 12``, or ``3 of 12 (0-1,5)``: which answer tokens' attention the map averages."""
    if not isinstance(rows, list) or not all(isinstance(r, int) and not isinstance(r, bool) for r in rows):
        return short(json.dumps(rows, ensure_ascii=False, default=str), 160)
    picked = sorted(set(rows))
    if picked == list(range(answer_tokens)):
        return f"all {answer_tokens:,}"
    return f"{len(picked):,} of {answer_tokens:,} ({short(layer_ranges(picked), 120)})"


def attention_view(
    m: AttentionMap, anchor: str, layers: Sequence[int] | None = None, *, caption: str | None = None
) -> AttentionView:
    """One map as the template draws it. ``anchor``: unique in the page (chart ids start with
    it); ``layers``: the layers the tables average (all of them by default), each one the map
    has; ``caption``: the heading (default: the model)."""
    _check(m)
    chosen = chosen_layers(m, layers)
    partition = list(enumerate(m.messages()))
    fine = list(enumerate(s for s in m.spans if not s.in_partition))
    rows = _top(partition, m, chosen, MAX_TABLE_ROWS)
    fine_rows = _top(fine, m, chosen, MAX_TABLE_ROWS)
    charts: list[Chart] = []
    notes: list[str] = []
    # one heatmap of the messages (the partition), one of the sections and status lines
    for spans, key, name, heading, messages in (
        (partition, "messages", "layer × message", "layer × message", True),
        (fine, "sections", "layer × section", "layer × section and status line", False),
    ):
        cols = _top(spans, m, chosen, MAX_HEATMAP_SPANS)
        if not cols:
            continue
        title = heading if len(cols) == len(spans) else f"{heading} (the {len(cols)} most attended of {len(spans)})"
        charts.append(Chart(f"{anchor}-{key}", name, script_json(_heatmap(m, cols, title, chosen, messages))))
    if m.token_share:
        fig, note = _strip(m)
        charts.append(Chart(f"{anchor}-tokens", "per-token strip", script_json(fig), wide=True))
        if note:
            notes.append(note)
    answer = "".join(m.answer_tokens)
    if len(answer) > ANSWER_CHARS:
        answer = answer[: ANSWER_CHARS - 1] + "…"
    return AttentionView(
        anchor=anchor,
        caption=caption or m.model,
        model=m.model,
        meta=_meta(m),
        answer=answer,
        answer_tokens=len(m.answer_tokens),
        prompt_tokens=m.prompt_tokens,
        layers_text=layer_ranges(chosen),
        all_layers_text=layer_ranges(m.layers),
        sink=m.mean_sink(chosen),
        rows=[_row(n, s, m, chosen) for n, s in rows],
        rows_left_out=len(partition) - len(rows),
        fine=[_row(n, s, m, chosen) for n, s in fine_rows],
        fine_left_out=len(fine) - len(fine_rows),
        charts=charts,
        notes=notes,
        logprob=sum(m.answer_logprobs) if m.answer_logprobs else None,
    )


def render_html(maps: Sequence[AttentionMap], *, title: str, layers: Sequence[int] | None = None) -> str:
    """The maps as one self-contained HTML page (plotly.js included, nothing fetched)."""
    views = [attention_view(m, f"a{i}", layers) for i, m in enumerate(maps)]
    return render_page("attention_page.html.j2", charts=sum(len(v.charts) for v in views), title=title, views=views)


def write_html(
    maps: Sequence[AttentionMap], path: str | Path, *, title: str, layers: Sequence[int] | None = None
) -> Path:
    """Write :func:`render_html` to ``path`` (``0600``, as the report: it holds the request's
    text); returns the path written."""
    return write_page(render_html(maps, title=title, layers=layers), path, "the attention page")


def write_png(map: AttentionMap, path: str | Path, *, layers: Sequence[int] | None = None) -> Path:
    """The layer × message heatmap as a PNG (matplotlib, the ``attention`` extra), the chosen
    layers framed in red; returns the path written."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.patches import Rectangle
        from matplotlib.ticker import PercentFormatter
    except ImportError:
        raise AttentionError(
            "a PNG is drawn with matplotlib, which is not installed: pip install 'ctxwright[attention]' "
            "(or write the HTML page, which needs nothing more)"
        ) from None
    _check(map)
    chosen = chosen_layers(map, layers)
    cols = _top(list(enumerate(map.messages())), map, chosen, MAX_HEATMAP_SPANS)
    if not cols:
        raise AttentionError(f"the attention map of {map.model} has no message spans: there is nothing to draw")
    z = [[s.share_by_layer[i] for _, s in cols] for i in range(len(map.layers))]
    width = min(30.0, max(7.0, 2.5 + 0.32 * len(cols)))
    height = min(20.0, max(4.5, 2.8 + 0.16 * len(map.layers)))
    # the object API with an Agg canvas: no pyplot, so no global backend or figure registry
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    image = ax.imshow(z, aspect="auto", origin="lower", cmap="viridis", vmin=0.0, interpolation="nearest")
    labels = [_axis_label(n, s, True) for n, s in cols]
    # parse_math=False: a label holding "$" is text, not a formula matplotlib would try to typeset
    ax.set_xticks(range(len(cols)), labels, rotation=60, ha="right", fontsize=7, parse_math=False)
    step = max(1, len(map.layers) // 16)
    ticks = list(range(0, len(map.layers), step))
    ax.set_yticks(ticks, [str(map.layers[i]) for i in ticks], fontsize=7)
    ax.set_ylabel("layer")
    for run in layer_ranges(chosen).split(",") if set(chosen) != set(map.layers) else []:
        lo, _, hi = run.partition("-")
        a, b = map.layers.index(int(lo)), map.layers.index(int(hi or lo))
        ax.add_patch(Rectangle((-0.5, a - 0.5), len(cols), b - a + 1, fill=False, edgecolor=CHOSEN_COLOR, lw=1.5))
    framed = f"; framed: layers {layer_ranges(chosen)}" if set(chosen) != set(map.layers) else ""
    ax.set_title(f"{map.model}: share of non-sink attention, layer × message{framed}", fontsize=9, parse_math=False)
    bar = fig.colorbar(image, ax=ax)
    bar.ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return write_page(buf.getvalue(), path, "the attention PNG")


__all__ = ["AttentionView", "attention_view", "layer_ranges", "render_html", "write_html", "write_png"]
