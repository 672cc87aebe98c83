"""The attention views (``attention/view.py``): the HTML page, the PNG, the saved maps in the
store and in ``ctxwright report``. The maps are built by hand, so every number the page
shows can be checked against the one it was given; the browser tests open the pages in
headless Chromium (``tests/browser.py``)."""

from __future__ import annotations

import json
import re
import stat
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from browser import chromium_available, open_page
from ctxwright import Harness, ScriptedBackend
from ctxwright.attention.model import AttentionMap, Span
from ctxwright.attention.view import (
    MAX_STRIP_CELLS,
    attention_view,
    layer_ranges,
    render_html,
    write_html,
    write_png,
)
from ctxwright.errors import AttentionError, SessionNotFound
from ctxwright.report import from_store, write_report
from ctxwright.report import render_html as render_report
from ctxwright.store.export import session_export
from ctxwright.store.sessions import MAX_ATTENTION_BYTES, Store

EVIL = "</script><script>alert(1)</script>"
EVIL_IMG = "<img src=x onerror=console.error('injected')>"
LAYERS = 30


def _shares(weights: list[float]) -> tuple[float, ...]:
    total = sum(weights)
    return tuple(w / total for w in weights)


def make_map(*, label: str = "user: where is the handbook?", token: str = "tok", prompt: int = 100) -> AttentionMap:
    """Four messages, the answer, a system-prompt section and a status line, over 30 layers.
    The middle layers read the user's message, the others the system prompt -- so an average
    over all layers and one over 15-24 differ, as they do on a real model."""
    bounds = [(0, prompt * 4 // 10), (prompt * 4 // 10, prompt * 6 // 10), (prompt * 6 // 10, prompt * 8 // 10)]
    bounds.append((prompt * 8 // 10, prompt))
    per_layer = []
    for layer in range(LAYERS):
        middle = 15 <= layer <= 24
        per_layer.append(_shares([5.0 - layer / 10, 1.0, 1.0 + (6.0 if middle else 0.0), 2.0 + layer / 30, 0.5]))
    sink = tuple(0.4 + layer / 100 for layer in range(LAYERS))
    names = [("system", "system", 0), ("status", "user", 1), (label, "user", 2), ("assistant", "assistant", 3)]
    spans = [
        Span(
            label=name,
            kind="message",
            message_index=idx,
            role=role,
            start=a,
            end=b,
            share_by_layer=tuple(row[i] for row in per_layer),
            sink_share_by_layer=sink if i == 0 else (0.0,) * LAYERS,
        )
        for i, ((name, role, idx), (a, b)) in enumerate(zip(names, bounds, strict=True))
    ]
    spans.append(
        Span("answer", "answer", 4, "assistant", prompt, prompt + 3, tuple(r[4] for r in per_layer), (0.0,) * LAYERS)
    )
    spans.append(Span("## Handbook", "section", 0, "system", 5, 20, tuple(0.2 for _ in range(LAYERS)), (0.0,) * LAYERS))
    spans.append(
        Span(
            "open_tickets: 3",
            "status_line",
            1,
            "user",
            bounds[1][0],
            bounds[1][0] + 5,
            (0.05,) * LAYERS,
            (0.0,) * LAYERS,
        )
    )
    texts = tuple(f"{token}{i} " for i in range(prompt))
    token_share = _shares([1.0 + (i % 7) for i in range(prompt)])
    return AttentionMap(
        model="SmolLM2-135M",
        layers=tuple(range(LAYERS)),
        answer_tokens=("The", " handbook", " is in room 4"),
        prompt_tokens=prompt,
        spans=tuple(spans),
        sink_share_by_layer=sink,
        token_text=texts,
        token_share=token_share,
        strip_layers=tuple(range(15, 25)),
        answer_logprobs=(-0.5, -0.25, -1.0),
        meta={"source": "session abc", "call": 2},
    )


def figures(html: str) -> dict[str, dict]:
    """Every figure of a page by its element id, parsed as the page's script parses it."""
    found = re.findall(r'<script type="application/json" class="fig" data-target="([^"]+)">(.*?)</script>', html, re.S)
    return {target: json.loads(text) for target, text in found}


# -- the HTML page ------------------------------------------------------------------------------


def test_the_page_holds_the_maps_numbers():
    m = make_map()
    html = render_html([m], title="a question", layers=range(15, 25))
    figs = figures(html)
    assert set(figs) == {"a0-messages", "a0-sections", "a0-tokens"}
    (heat,) = figs["a0-messages"]["data"]
    messages = m.messages()
    # every layer's share of every message, as given (rounded to 5 places)
    assert heat["y"] == list(range(LAYERS))
    for layer in range(LAYERS):
        assert heat["z"][layer] == pytest.approx([s.share_by_layer[layer] for s in messages], abs=1e-5)
    assert heat["x"][2] == "user: where is the handbook?"  # a message's own label (spans.py numbers it)
    # the tables average the chosen layers only: the user's message leads there, not over all layers
    user = messages[2]
    chosen = m.mean_share(user, range(15, 25))
    assert chosen > m.mean_share(user) + 0.05
    assert f"<td>{chosen:.1%}</td>" in html
    assert f"{m.mean_sink(range(15, 25)):.1%}" in html
    assert "layers 15-24 (the map has layers 0-29)" in html
    # the chosen layers are framed on the heatmap
    (frame,) = figs["a0-messages"]["layout"]["shapes"]
    assert (frame["y0"], frame["y1"]) == (14.5, 24.5)
    # the finer spans have a heatmap and a table of their own
    sections = figs["a0-sections"]["data"][0]
    assert sections["x"] == ["#0 ## Handbook", "#1 open_tickets: 3"]
    assert "<td>20.0%</td>" in html and "status line" in html
    # the strip: one cell per token (100 tokens: no merging), shares as given
    strip = figs["a0-tokens"]["data"][0]
    cells = [v for row in strip["z"] for v in row if v is not None]
    assert cells == pytest.approx(list(m.token_share), abs=1e-6)
    assert strip["text"][0][41].startswith("token 41 · status<br>tok41")
    assert "The handbook is in room 4" in html and "log-probability -1.75" in html
    assert 'document.body.dataset.charts = "3"' in html


def test_all_layers_by_default_and_no_frame():
    m = make_map()
    html = render_html([m], title="t")
    assert (
        "shapes" not in figures(html)["a0-messages"]["layout"] or not figures(html)["a0-messages"]["layout"]["shapes"]
    )
    assert f"<td>{m.mean_share(m.messages()[0]):.1%}</td>" in html


@pytest.mark.parametrize(
    "rows,says",
    [([0, 1, 2], "answer tokens read: all 3"), ([0, 2], "answer tokens read: 2 of 3 (0,2)")],
)
def test_the_heading_summarises_the_rows_read_and_does_not_repeat_the_answer(rows, says):
    """The pipeline records which answer rows it read, one index per token: listed in the
    heading, a long answer's were a dump of numbers."""
    m = replace(make_map(), meta={"source": "request r.json", "answer": "The handbook is in room 4", "rows": rows})
    view = attention_view(m, "a0")
    assert dict(view.meta) == {"source": "request r.json", "answer tokens read": says.split(": ", 1)[1]}
    html = render_html([m], title="request r.json")
    (heading,) = re.findall(r'<div class="meta">model (.*?)</div>', html)
    assert heading.endswith(f"source: request r.json · {says}"), heading
    assert "<title>ctxwright attention · request r.json</title>" in html


def test_layers_the_map_does_not_have_are_refused():
    with pytest.raises(AttentionError, match="layers 0-29, not layer 31"):
        render_html([make_map()], title="t", layers=[3, 31])
    assert layer_ranges([9, 3, 4, 5, 11, 12]) == "3-5,9,11-12"


def test_hostile_labels_and_tokens_stay_text():
    m = make_map(label=f"user {EVIL} {EVIL_IMG}", token=EVIL)
    html = render_html([m], title=f"title {EVIL}")
    assert EVIL not in html and "<img" not in html and "alert(1)</script>" not in html
    # exactly the page's own scripts: plotly.js, the drawing script, one per figure
    assert html.count("<script") == 2 + 3
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in html  # the table, escaped
    figs = figures(html)
    # in a figure the text reaches Plotly as entities: drawn as the characters, never as markup
    label = figs["a0-messages"]["data"][0]["x"][2]
    assert "&lt;/script&gt;" in label and "<" not in label
    cell = figs["a0-tokens"]["data"][0]["text"][0][0]
    assert "&lt;/script&gt;&lt;script&gt;alert(1)" in cell


def test_a_long_prompt_is_drawn_in_bounded_cells():
    m = make_map(prompt=8192)
    html = render_html([m], title="8k")
    strip = figures(html)["a0-tokens"]["data"][0]
    cells = [v for row in strip["z"] for v in row if v is not None]
    assert len(cells) == 8192 // 4 <= MAX_STRIP_CELLS
    assert sum(cells) == pytest.approx(1.0, abs=1e-3)  # merged cells sum their tokens' shares
    assert "8,192 tokens are drawn as 2,048 cells of 4 consecutive tokens" in html
    assert "tokens 0–3 · system<br>" in strip["text"][0][0]
    without_plotly = len(html) - len(re.search(r"<script>(.*?)</script>\n<script>", html, re.S).group(1))
    assert without_plotly < 700_000


def test_many_messages_keep_the_most_attended():
    base = make_map()
    many = [
        Span(f"#{i} user", "message", i, "user", i, i + 1, tuple((i + 1) / 1e4 for _ in range(LAYERS)), (0.0,) * LAYERS)
        for i in range(450)
    ]
    m = AttentionMap(
        model="x",
        layers=base.layers,
        answer_tokens=("a",),
        prompt_tokens=450,
        spans=tuple(many),
        sink_share_by_layer=base.sink_share_by_layer,
    )
    v = attention_view(m, "a0")
    heat = json.loads(v.charts[0].json)["data"][0]
    assert len(heat["x"]) == 200 and heat["x"][0].startswith("#250 ") and heat["x"][-1].startswith("#449 ")
    assert len(v.rows) == 300 and v.rows_left_out == 150 and v.rows[0].number == 150


def test_write_html_is_private(tmp_path):
    out = write_html([make_map()], tmp_path / "att.html", title="t")
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert out.read_text().startswith("<!doctype html>")
    assert "Content-Security-Policy" in out.read_text()


# -- the PNG -----------------------------------------------------------------------------------


def test_png_is_written(tmp_path):
    pytest.importorskip("matplotlib")
    out = write_png(make_map(label="cost: $5 and $x^2$"), tmp_path / "att.png", layers=range(15, 25))
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


def test_png_without_matplotlib_says_which_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(AttentionError, match=r"pip install 'ctxwright\[attention\]'"):
        write_png(make_map(), tmp_path / "att.png")
    assert not (tmp_path / "att.png").exists()


# -- the store, the report, the export ---------------------------------------------------------


def _session(tmp_path: Path) -> tuple[Store, str]:
    with Harness(system="You answer.", backend=ScriptedBackend(["room 4", "yes"]), db=tmp_path / "a.db") as h:
        h.run("where is the handbook?")
        h.run("sure?")
        sid = h.session.id
    return Store(tmp_path / "a.db"), sid


def test_store_round_trip_and_replacement(tmp_path):
    store, sid = _session(tmp_path)
    assert store.attention_maps(sid) == []
    first, second = make_map(), make_map(label="again")
    store.save_attention(sid[:6], 1, second.to_json())  # a unique start of the id is enough
    store.save_attention(sid, 0, first.to_json())
    got = store.attention_maps(sid)
    assert [k for k, _ in got] == [0, 1]
    assert AttentionMap.from_json(got[0][1]) == AttentionMap.from_json(first.to_json())
    store.save_attention(sid, 0, second.to_json())  # replaces call 0's map
    got = store.attention_maps(sid)
    assert len(got) == 2 and got[0][1]["spans"][2]["label"] == "again"
    store.close()


def test_the_store_refuses_what_it_should_not_keep(tmp_path):
    store, sid = _session(tmp_path)
    big = make_map().to_json()
    big["tokens"]["text"] = ["x" * 1000] * (MAX_ATTENTION_BYTES // 1000 + 1)
    with pytest.raises(AttentionError, match="MB, over the store's 4 MB"):
        store.save_attention(sid, 0, big)
    nan = make_map().to_json()
    nan["sink_share_by_layer"][0] = float("nan")
    with pytest.raises(AttentionError, match="not JSON"):
        store.save_attention(sid, 0, nan)
    with pytest.raises(AttentionError, match="not a call index"):
        store.save_attention(sid, -1, make_map().to_json())
    with pytest.raises(SessionNotFound):
        store.save_attention("nosuchsession", 0, make_map().to_json())
    assert store.attention_maps(sid) == []
    store.close()


def test_the_report_shows_saved_maps_only_when_there_are_some(tmp_path):
    store, sid = _session(tmp_path)
    plain = render_report(from_store(store, sid))
    assert "Attention ·" not in plain and "-messages" not in plain
    store.save_attention(sid, 1, make_map(label=f"user {EVIL}").to_json())
    data = from_store(store, sid)
    assert [k for k, _ in data.sessions[0].attention] == [1]
    html = render_report(data)
    assert "<h3>Attention · call 1</h3>" in html and EVIL not in html
    figs = figures(html)
    assert {"s0-a1-messages", "s0-a1-sections", "s0-a1-tokens"} <= set(figs)
    n = len(figs)
    assert f'document.body.dataset.charts = "{n}"' in html
    # the same renderer as the attention page: the saved map draws the numbers its page draws
    saved = AttentionMap.from_json(make_map(label=f"user {EVIL}").to_json())
    page = figures(render_html([saved], title="t"))
    for part in ("messages", "sections", "tokens"):
        assert figs[f"s0-a1-{part}"]["data"] == page[f"a0-{part}"]["data"]
    # its tables average the layers the map was made for (its strip's), as the strip does
    assert f"<td>{saved.mean_share(saved.messages()[2], range(15, 25)):.1%}</td>" in html
    assert "layers 15-24 (the map has layers 0-29)" in html
    store.close()


def test_the_report_command_draws_and_counts_saved_maps(tmp_path, capsys):
    from ctxwright.cli.main import main

    store, sid = _session(tmp_path)
    store.save_attention(sid, 0, make_map().to_json())
    store.close()
    out = tmp_path / "r.html"
    assert main(["report", sid, "-o", str(out), "--db", str(tmp_path / "a.db")]) == 0
    assert "1 attention map," in capsys.readouterr().out
    assert "<h3>Attention · call 0</h3>" in out.read_text()


def test_a_broken_saved_map_is_a_note_not_a_failed_report(tmp_path):
    store, sid = _session(tmp_path)
    store.save_attention(sid, 0, {"model": "x"})
    data = from_store(store, sid)
    assert data.sessions[0].attention == []
    assert any("attention map stored for call 0 cannot be drawn" in n for n in data.sessions[0].notes)
    assert "Attention ·" not in render_report(data)
    store.close()


def test_the_export_carries_the_saved_maps(tmp_path):
    store, sid = _session(tmp_path)
    assert session_export(store, sid)["attention"] == []
    store.save_attention(sid, 1, make_map().to_json())
    exported = session_export(store, sid)["attention"]
    assert [a["call_index"] for a in exported] == [1]
    assert AttentionMap.from_json(exported[0]["map"]) == AttentionMap.from_json(make_map().to_json())
    store.close()


# -- in a browser ------------------------------------------------------------------------------

CHECKS = {
    "charts": "Number(document.body.dataset.charts)",
    "drawn": "Number(document.body.dataset.chartsDrawn)",
    "plots": "document.querySelectorAll('.js-plotly-plot').length",
    "plots_with_svg": "[...document.querySelectorAll('.js-plotly-plot')].filter(p => p.querySelector('.main-svg')).length",
    "heatmaps": "document.querySelectorAll('.js-plotly-plot .hm image').length",
    "imgs": "document.querySelectorAll('img').length",
    "strip_width": "document.querySelector('[id$=-tokens]').getBoundingClientRect().width",
}
browser = pytest.mark.skipif(not chromium_available(), reason="chromium is not installed (make test installs it)")


def _opened(page: Path, charts: int, heatmaps: int) -> dict:
    result = open_page(
        page, expressions=CHECKS, ready="document.body && document.body.dataset.chartsDrawn", timeout=120
    )
    assert result.errors == []
    assert result.requests == []
    ev = result.evaluated
    assert ev["charts"] == ev["drawn"] == ev["plots"] == ev["plots_with_svg"] == charts
    assert ev["heatmaps"] == heatmaps  # each heatmap drew its cells (one raster image each)
    assert ev["imgs"] == 0  # the <img onerror> of a label stayed text
    return ev


@pytest.mark.slow
@browser
def test_the_attention_page_draws_in_chromium(tmp_path):
    maps = [make_map(label=f"user {EVIL} {EVIL_IMG}", token=EVIL_IMG), make_map(prompt=8192)]
    page = write_html(maps, tmp_path / "att.html", title="two maps", layers=range(15, 25))
    ev = _opened(page, charts=6, heatmaps=6)
    assert ev["strip_width"] > 1000  # across the page, not squeezed into a grid column


@pytest.mark.slow
@browser
def test_a_report_with_a_saved_map_draws_in_chromium(tmp_path):
    store, sid = _session(tmp_path)
    store.save_attention(sid, 0, make_map(label=f"user {EVIL_IMG}").to_json())
    page = write_report(from_store(store, sid), tmp_path / "report.html")
    store.close()
    charts = len(figures(page.read_text()))
    assert charts >= 5  # the session's own charts and the map's three
    _opened(page, charts=charts, heatmaps=3)
