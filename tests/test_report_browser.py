"""A report opened in a real headless Chromium (the distribution's ``chromium``; ``make test``
installs it when missing): it loads with no console error and no request leaving the file,
every chart is drawn, and a screenshot is written. Driven over the DevTools protocol
(tests/browser.py)."""

from __future__ import annotations

import json

import pytest

from browser import chromium_available, open_page
from ctxwright import CompactionConfig, Harness, ScriptedBackend, tool
from ctxwright.audit.compare import Prices
from ctxwright.backends.scripted import call
from ctxwright.core.messages import Message

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not chromium_available(), reason="chromium is not installed (make test installs it)"),
]

EVIL = "</script><script>console.error('injected')</script><img src=x onerror=console.error(1)>"

CHECKS = {
    "charts": "Number(document.body.dataset.charts)",
    "drawn": "Number(document.body.dataset.chartsDrawn)",
    "plots": "document.querySelectorAll('.js-plotly-plot').length",
    "plots_with_svg": "[...document.querySelectorAll('.js-plotly-plot')].filter(p => p.querySelector('.main-svg')).length",
    "bars": "document.querySelectorAll('.js-plotly-plot .point').length",
    "imgs": "document.querySelectorAll('img').length",
    "sessions": "document.querySelectorAll('section.session').length",
}


@tool
def fetch(page: int) -> str:
    """Fetch a page.

    Args:
        page: page number
    """
    return f"Page {page}: " + " ".join(f"Fact{page}-{i}" for i in range(150))


def _check(result, charts: int) -> None:
    assert result.errors == []
    assert result.requests == []
    ev = result.evaluated
    assert ev["charts"] == ev["drawn"] == ev["plots"] == ev["plots_with_svg"] == charts
    assert ev["bars"] > 0
    assert ev["imgs"] == 0  # the <img onerror> of the log stayed text


def test_a_session_report_loads_and_draws_every_chart(tmp_path):
    replies = [Message(role="assistant", tool_calls=(call("fetch", {"page": i}, f"p{i}"),)) for i in range(8)]
    with Harness(
        system="You read pages.",
        tools=[fetch],
        backend=ScriptedBackend([*replies, "done " + EVIL]),
        db=tmp_path / "a.db",
        compaction=CompactionConfig(results_dir=tmp_path, window_tokens=2048, keep_recent_results=2),
        status=True,
        status_mode="replace",
    ) as h:
        h.run("read the pages " + EVIL)
        page = h.report(tmp_path / "report.html", Prices(input=2.0, cached=0.2, output=8.0))
    shot = tmp_path / "report.png"
    result = open_page(
        page, expressions=CHECKS, ready="document.body && document.body.dataset.chartsDrawn", screenshot=shot
    )
    _check(result, charts=4)
    assert result.evaluated["sessions"] == 1
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


#: every table's box, and the page, no wider than what shows them: nothing scrolls sideways
WIDTHS = {
    "too_wide": "[...document.querySelectorAll('table')].map(t => [t.closest('section').id, "
    "t.parentElement.scrollWidth, t.parentElement.clientWidth, t.rows[0].cells.length])"
    ".filter(([, scroll, client]) => scroll > client)",
    "tables": "document.querySelectorAll('table').length",
    "page": "[document.documentElement.scrollWidth, document.documentElement.clientWidth]",
    "parts_note": "document.querySelectorAll('p.parts-note').length",
}


def test_every_table_fits_a_1400_pixel_window(tmp_path):
    """The widest tables the report draws -- the calls table with every part, the cost columns and
    the provider-cache columns, the compactions with their lost identifiers -- fit a 1400 px
    window: text and headers wrap, nothing scrolls sideways. A screenshot at that width is kept."""
    from ctxwright.report import from_store, write_report

    replies = [Message(role="assistant", tool_calls=(call("fetch", {"page": i}, f"p{i}"),)) for i in range(8)]
    with Harness(
        system="You read pages.",
        tools=[fetch],
        backend=ScriptedBackend([*replies, "done"]),
        db=tmp_path / "a.db",
        compaction=CompactionConfig(results_dir=tmp_path, window_tokens=2048, keep_recent_results=2),
        status=True,
        status_mode="replace",
    ) as h:
        h.run("read the pages " + EVIL)
        data = from_store(h.store, h.session_id)
    for c in data.sessions[0].calls[1:]:  # the provider's own verdict: two more columns
        c.cache = {"cause": "ttl_expired", "evidence": "idle 6m40s past the 5m TTL", "age_s": 400, "ttl_s": 300}
    page = write_report(data, tmp_path / "wide.html", Prices(input=2.0, cached=0.2, output=8.0))
    shot = tmp_path / "wide.png"
    result = open_page(
        page,
        expressions={**CHECKS, **WIDTHS},
        ready="document.body && document.body.dataset.chartsDrawn",
        screenshot=shot,
        width=1400,
    )
    _check(result, charts=4)
    ev = result.evaluated
    assert ev["tables"] >= 5  # index, breaks, provider cache, compactions, tools, calls
    assert ev["too_wide"] == [], ev["too_wide"]
    assert ev["page"][0] <= ev["page"][1] == 1400
    assert (
        ev["parts_note"] == 0
    )  # the scripted counts are reported: the parts (the template difference one of them) add up to them
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_large_log_report_loads_and_draws(tmp_path):
    """3,000 requests in 3 conversations, one of them with a divergence inside markup."""
    from ctxwright.report import from_log, write_report

    log = tmp_path / "log.jsonl"
    with log.open("w") as f:
        for conv in range(3):
            history = [{"role": "user", "content": f"task {conv} {EVIL}"}]
            for i in range(1000):
                history.append({"role": "user", "content": f"step {i}"})
                if i == 500:
                    history[0] = {"role": "user", "content": f"task {conv} edited {EVIL}"}
                body = {"messages": [{"role": "system", "content": "sys"}, *history[-30:]]}
                usage = {"prompt_tokens": 100 + i % 40, "completion_tokens": 3}
                f.write(json.dumps({"request": body, "response": {"usage": usage}}) + "\n")
                history.append({"role": "assistant", "content": "ok"})
    page = write_report(from_log(log), tmp_path / "log.html", Prices(input=1.0))
    result = open_page(
        page,
        expressions=CHECKS,
        ready="document.body && document.body.dataset.chartsDrawn",
        screenshot=tmp_path / "log.png",
    )
    sessions = result.evaluated["sessions"]
    assert sessions >= 1
    _check(result, charts=3 * sessions)
    assert (tmp_path / "log.png").stat().st_size > 10_000
