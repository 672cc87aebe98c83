"""``ctxwright report``: the data each page shows, escaping of untrusted text, empty and huge
sessions, the command's bad input, and ``run --report``. Real SQLite and real sessions run by
the scripted backend; the page in a real browser is tests/test_report_browser.py."""

from __future__ import annotations

import json
import re
import time
from html import unescape
from pathlib import Path

import pytest

from ctxwright import CompactionConfig, Harness, ScriptedBackend, tool
from ctxwright.audit.compare import Prices
from ctxwright.backends.scripted import call
from ctxwright.cli.main import main
from ctxwright.core.messages import Message
from ctxwright.report import from_log, from_store, render_html, write_report
from ctxwright.report.html import MAX_BARS, MAX_ROWS, PROMPT_MARKS, buckets, parts_note
from ctxwright.store.sessions import Store

EVIL = "</script><script>alert('x')</script><img src=x onerror=alert(1)>"


@tool
def fetch(page: int) -> str:
    """Fetch a page.

    Args:
        page: page number
    """
    return f"Page {page}: " + " ".join(f"Fact{page}-{i}" for i in range(150))


def _long_session(tmp_path: Path, prompt: str = "read the pages") -> tuple[Harness, str]:
    """A session whose small window makes compaction run, with a replace-mode status bar."""
    replies = [Message(role="assistant", tool_calls=(call("fetch", {"page": i}, f"p{i}"),)) for i in range(10)]
    h = Harness(
        system="You read pages.",
        tools=[fetch],
        backend=ScriptedBackend([*replies, "done"]),
        db=tmp_path / "agent.db",
        compaction=CompactionConfig(results_dir=tmp_path, window_tokens=2048, keep_recent_results=2, policy="eager"),
        status=True,
        status_mode="replace",
        # the 2,048-token window is so small that recall's schema in the prefix would make every
        # call compact, and this session must also show the status bar's own cache breaks
        recall=False,
    )
    h.run(prompt)
    return h, h.session_id


def _figures(html: str) -> list[dict]:
    return [
        json.loads(m)
        for m in re.findall(r'<script type="application/json" class="fig" data-target="[^"]+">(.*?)</script>', html)
    ]


def test_a_stored_session_shows_every_part_compaction_status_and_tool(tmp_path):
    h, sid = _long_session(tmp_path)
    with h:
        data = from_store(h.store, sid)
        stored = h.store.calls(sid)
    (s,) = data.sessions
    assert len(s.calls) == len(stored) >= 6
    assert [c.prompt_tokens for c in s.calls] == [c.prompt_tokens for c in stored]
    # the stored ledger's parts, with status and compaction notes taken out of history
    assert all(c.parts["system_and_tools"] > 0 and c.parts["status"] > 0 for c in s.calls)
    assert any(c.parts.get("compaction_notes", 0) > 0 for c in s.calls)
    assert all(c.parts["latest_user"] > 0 for c in s.calls)  # the task, not the status after it
    compacted = [c for c in s.calls if c.cause == "compaction"]
    assert compacted and all(c.compactions for c in compacted)
    assert {k.before_call for k in s.compactions} == {c.index for c in compacted}
    assert all(k.cache_cost_tokens and k.cache_cost_tokens > 0 for k in s.compactions)
    assert (
        [t.name for t in s.tools] == ["fetch"] * len(s.tools)
        and len(s.tools) >= 6
        and all(t.elapsed_ms is not None for t in s.tools)
    )
    html = render_html(data, Prices(input=2.0, cached=0.5, output=8.0))
    figs = _figures(html)
    titles = [f["layout"]["title"]["text"] for f in figs]
    assert titles == [
        "context by part (tokens)",
        "prompt tokens: cached vs prefilled",
        "cumulative cost",
        "tool timings (ms)",
    ]
    names = [t["name"] for t in figs[0]["data"]]
    assert {"system + tools", "status", "compaction notes", "tool results", "latest user"} <= set(names)
    # each bar of the part chart adds up to the part sums of its call; a mark over it is its prompt count
    by_name = {t["name"]: t["y"] for t in figs[0]["data"]}
    marks = by_name.pop(PROMPT_MARKS)
    assert sum(v[3] for v in by_name.values()) == sum(s.calls[3].parts.values())
    assert marks == [c.prompt_tokens for c in s.calls]
    assert "status_replaced" in html and "compaction" in html
    # self-contained: plotly.js inline, nothing fetched
    assert "<script src" not in html and "<link" not in html
    assert "default-src 'none'" in html
    assert html.count("Plotly.newPlot") == 1 and len(html) > 3_000_000


def test_cost_per_call_follows_the_prices(tmp_path):
    h, sid = _long_session(tmp_path)
    with h:
        data = from_store(h.store, sid)
    c = data.sessions[0].calls[1]
    prices = Prices(input=3.0, cached=0.3, output=15.0)
    want = (c.prefilled * 3.0 + c.cached_paid * 0.3 + (c.completion_tokens or 0) * 15.0) / 1e6
    assert c.cost(prices) == pytest.approx(want)
    assert c.prefilled + c.cached_paid == c.prompt_tokens


def test_untrusted_text_is_escaped_everywhere(tmp_path):
    h, sid = _long_session(tmp_path, prompt=EVIL)
    with h:
        html = render_html(from_store(h.store, sid))
    assert EVIL not in html
    assert "&lt;/script&gt;&lt;script&gt;alert(" in html
    # a log whose edited message diverges inside the markup: the snippet is escaped too
    log = tmp_path / "log.jsonl"
    head = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "ok"},
    ]
    first = {"messages": [*head, {"role": "user", "content": "a " + EVIL}]}
    second = {"messages": [*head, {"role": "user", "content": "b " + EVIL}]}
    third = {"messages": [*second["messages"], {"role": "assistant", "content": EVIL}]}
    log.write_text("\n".join(json.dumps(x) for x in (first, second, third)) + "\n")
    html = render_html(from_log(log))
    assert "<script>alert" not in html and "onerror=alert" not in html.replace("onerror=alert(1)&gt;", "")
    assert "history_edited" in html
    for fig in _figures(html):  # every figure's JSON parses: no string from the log ended its <script>
        assert fig["data"]


def test_a_session_with_zero_calls_says_so(tmp_path):
    with Harness(tools=[fetch], backend=ScriptedBackend(["x"]), db=tmp_path / "a.db") as h:
        out = h.report(tmp_path / "empty.html")
    html = out.read_text()
    assert "This session made no model calls" in html
    assert _figures(html) == []


def test_ten_thousand_calls_are_aggregated(tmp_path):
    """One conversation of 10,000 requests (compacted every 50): the charts draw at most
    MAX_BARS bars, the table lists MAX_ROWS calls and says how many it left out. The build
    time and size are measured by benchmarks/report_scale.py."""
    log = tmp_path / "big.jsonl"
    _write_big_log(log, 10_000)
    data = from_log(log)
    (s,) = data.sessions
    assert len(s.calls) == 10_000
    html = render_html(data)
    for fig in _figures(html):
        assert len(fig["data"][0]["x"]) <= MAX_BARS
    assert f"{10_000 - MAX_ROWS:,} more are left out" in html
    assert "each bar: the mean of 25 consecutive calls" in html
    # plotly.js (~4.8 MB) plus well under 2 MB of report
    assert len(html.encode()) < 4_900_000 + 2_000_000


def _write_big_log(path: Path, n: int) -> None:
    system = {"role": "system", "content": "You are a helpful agent. " * 20}
    with path.open("w") as f:
        history: list[dict] = []
        for i in range(n):
            if i % 50 == 0:  # a compaction: the task stays, a summary replaces the rest
                history = [{"role": "user", "content": "the task"}]
                history.append({"role": "user", "content": f"summary of the work so far, part {i}"})
            history.append({"role": "user", "content": f"step {i}"})
            body = {"model": "m", "messages": [system, *history]}
            prompt = 120 + 8 * len(history)
            resp = {
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": 5,
                    "prompt_tokens_details": {"cached_tokens": prompt - 10},
                }
            }
            f.write(json.dumps({"request": body, "response": resp}) + "\n")
            history.append({"role": "assistant", "content": f"done {i}"})


def test_buckets_cover_every_call_once():
    for n in (0, 1, 399, 400, 401, 10_000, 12_345):
        runs = buckets(n)
        assert len(runs) <= MAX_BARS
        assert [i for a, b in runs for i in range(a, b)] == list(range(n))


# -- the command ---------------------------------------------------------------------------


def test_report_command_for_a_session_and_a_log(tmp_path, capsys):
    h, sid = _long_session(tmp_path)
    h.close()
    out = tmp_path / "r.html"
    assert main(["report", sid[:8], "-o", str(out), "--db", str(tmp_path / "agent.db"), "--price-input", "1"]) == 0
    assert f"session {sid}" in out.read_text() and "report written to" in capsys.readouterr().out
    log = tmp_path / "export.json"
    assert main(["show", sid, "--json", "--db", str(tmp_path / "agent.db")]) == 0
    log.write_text(capsys.readouterr().out)
    out2 = tmp_path / "r2.html"
    assert main(["report", str(log), "-o", str(out2)]) == 0
    assert sid in out2.read_text()


@pytest.mark.parametrize(
    "args,says",
    [
        (["nosuchsession"], "no session 'nosuchsession' in"),
        ([], "name what to report"),
        (["x", "--proxy-session", "y"], "name what to report"),
        (["{log}", "--price-cached", "1"], "--price-cached and --price-output need --price-input"),
        (["{log}", "--price-input", "-1"], "give a price of zero or more"),
        (["{bad}"], "no request could be read from"),
    ],
)
def test_report_bad_input_is_one_line(tmp_path, capsys, args, says):
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n{]\n")
    args = [a.format(log=log, bad=bad) for a in args]
    Store(tmp_path / "a.db").close()  # a store that exists: a reader creates none (tests/test_cli_store_open.py)
    code = main(["report", *args, "-o", str(tmp_path / "r.html"), "--db", str(tmp_path / "a.db")])
    err = capsys.readouterr().err
    assert code == 2 and says in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_report_output_folder_must_exist(tmp_path, capsys):
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    assert main(["report", str(log), "-o", str(tmp_path / "nope" / "r.html")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_run_report_writes_it_at_the_end(tmp_path, capsys):
    """``ctxwright run --report PATH`` against a served model on 127.0.0.1: the run's tool
    call, its timing and the server's cached count are in the page written after the run."""
    from fakeserver import FakeOpenAIServer as S

    out = tmp_path / "run.html"
    with S(
        [
            S.reply_tool_calls([("c1", "calculator", '{"expression": "2+3"}')], usage=S.usage_openai(900, 10, 0)),
            S.reply_text("5", usage=S.usage_openai(950, 2, 896)),
        ]
    ) as srv:
        code = main(
            ["run", "--model", "m", "--base-url", srv.url, "--db", str(tmp_path / "r.db"), "--report", str(out), "2+3?"]
        )
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert f"report written to {out}" in printed.out
    html = out.read_text()
    figs = _figures(html)
    assert [t["y"] for t in figs[1]["data"]] == [[0, 896], [900, 54]]  # cached, prefilled per call
    assert "calculator" in html


def test_run_report_path_is_checked_before_the_run(tmp_path, capsys):
    code = main(["run", "--report", str(tmp_path / "missing" / "r.html"), "--db", str(tmp_path / "b.db"), "hi"])
    assert code == 2 and "--report" in capsys.readouterr().err
    assert not (tmp_path / "b.db").exists()  # nothing ran


def test_report_of_a_memory_only_harness_is_refused(tmp_path):
    from ctxwright.errors import CtxwrightError

    with (
        Harness(tools=[fetch], backend=ScriptedBackend(["x"]), db=None) as h,
        pytest.raises(CtxwrightError, match="give the Harness a database"),
    ):
        h.report(tmp_path / "r.html")


def test_write_report_and_render_agree(tmp_path):
    h, sid = _long_session(tmp_path)
    with h:
        data = from_store(h.store, sid)
    started = time.perf_counter()
    out = write_report(data, tmp_path / "w.html")
    assert time.perf_counter() - started < 60
    text = out.read_text()
    # only the generation time may differ
    assert re.sub(r"generated [^·]+", "", text) == re.sub(r"generated [^·]+", "", render_html(data))


# -- a proxy session -----------------------------------------------------------------------


def _exchange(sid: str, k: int, request: bytes, response: bytes, **kw) -> dict:
    import hashlib

    row = {
        "session_id": sid,
        "call_index": k,
        "started_at": 1.0 + k,
        "ended_at": 1.5 + k,
        "total_ms": 500.0 + k,
        "method": "POST",
        "path": "/v1/chat/completions",
        "api": "openai_chat",
        "streamed": 0,
        "status": 200,
        "outcome": "complete",
        "request_bytes": len(request),
        "request_sha256": hashlib.sha256(request).hexdigest(),
        "request_content_type": "application/json",
        "request_body": request,
        "request_parsed": 1,
        "response_bytes": len(response),
        "response_sha256": hashlib.sha256(response).hexdigest(),
        "response_content_type": "application/json",
        "response_body": response,
        "response_parsed": 1,
    }
    row.update(kw)
    return row


def test_a_proxy_session_is_one_page_with_the_proxys_timings(tmp_path, capsys):
    from ctxwright.proxy.store import ProxyLog
    from ctxwright.report import from_proxy
    from ctxwright.store.sessions import Store

    store = Store(tmp_path / "p.db")
    sid = ProxyLog(store).create_session(grouped_by="header", group_key="s1", api="openai_chat", upstream="http://up")
    system = {"role": "system", "content": "You are terse."}
    turns = [{"role": "user", "content": "hi " + EVIL}]
    bodies = []
    for i in range(3):
        bodies.append({"model": "m", "messages": [system, *turns]})
        turns = [*turns, {"role": "assistant", "content": f"a{i}"}, {"role": "user", "content": f"u{i}"}]
    bodies.append({"model": "m", "messages": [{"role": "system", "content": "You are terse. Now: 12:00"}, *turns]})
    usage = {"usage": {"prompt_tokens": 40, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 16}}}
    k = 0
    for b in bodies:
        ProxyLog(store).record_exchange(_exchange(sid, k, json.dumps(b).encode(), json.dumps(usage).encode()))
        k += 1
    ProxyLog(store).record_exchange(  # a body that is not JSON: forwarded, recorded unparsed
        _exchange(sid, k, b"not json", b"{}", request_parsed=0, request_content_type="text/plain")
    )
    ProxyLog(store).record_exchange(
        _exchange(sid, k + 1, json.dumps(bodies[-1]).encode(), b"", outcome="client_disconnected", response_parsed=0)
    )
    data = from_proxy(store, sid[:6])
    (s,) = data.sessions
    assert s.key == sid and s.source == "proxy · openai_chat · http://up"
    assert [c.cause for c in s.calls] == ["first", "append", "append", "system_changed", "append"]
    assert [c.wall_ms for c in s.calls] == [500.0, 501.0, 502.0, 503.0, 505.0]
    assert s.calls[-1].error == "client_disconnected"
    assert data.problems_total == 1 and data.problems[0].startswith("line 5:")
    assert s.calls[3].after.startswith(" Now: 12:00")
    store.close()
    out = tmp_path / "proxy.html"
    assert main(["report", "--proxy-session", sid[:6], "-o", str(out), "--db", str(tmp_path / "p.db")]) == 0
    html = out.read_text()
    assert "system_changed" in html and "client_disconnected" in html and EVIL not in html
    capsys.readouterr()
    assert main(["report", "--proxy-session", "px-nope", "-o", str(out), "--db", str(tmp_path / "p.db")]) == 2
    err = capsys.readouterr().err
    assert "ctxwright proxy --list" in err and len(err.strip().splitlines()) == 1


def _headline(html: str) -> str:
    (line,) = re.findall(r"<p[^>]*>\s*([\d,]+ call\(s\) · prompt .*?)</p>", html, re.S)
    return " ".join(line.split())


def _index_row(html: str) -> list[str]:
    """The cells of the index table's first session row."""
    table = html[html.index('<section id="index">') :]
    row = re.search(r"<tr>\s*<td class=\"l\"><a href=\"#s0\">.*?</tr>", table, re.S)
    assert row is not None
    return [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row.group(0), re.S)]


def _appending_log(path: Path, usage: dict | None) -> Path:
    system = {"role": "system", "content": "You are a careful agent. " * 30}
    turns: list[dict] = [{"role": "user", "content": "the task"}]
    with path.open("w") as f:
        for i in range(3):
            body = {"model": "m", "messages": [system, *turns]}
            f.write(json.dumps({"request": body, "response": usage} if usage is not None else body) + "\n")
            turns = [*turns, {"role": "assistant", "content": f"step {i} done"}, {"role": "user", "content": "go on"}]
    return path


@pytest.mark.parametrize(
    "usage",
    [
        {"usage": {"prompt_tokens": 300, "completion_tokens": 4}},  # a server without a cached-token field
        None,  # a log without usage at all
    ],
)
def test_the_headline_shows_an_unreported_cached_count_as_unknown(tmp_path, usage):
    """Hostile probe: where no cached count was reported, the page must not show the audit's
    reusable prefix as "cached": the headline, the index and the chart say unknown and label
    the reusable prefix as the estimate it is."""
    log = _appending_log(tmp_path / "log.jsonl", usage)
    data = from_log(log)
    (s,) = data.sessions
    reusable = sum(c.reusable_tokens or 0 for c in s.calls)
    assert [c.cached_tokens for c in s.calls] == [None] * 3 and reusable > 0
    html = render_html(data, Prices(input=1.0, cached=0.1))
    head = _headline(html)
    assert "cached unknown" in head and not re.search(r"cached [\d,]+", head), head
    assert s.cached_tokens is None and s.hit_ratio is None
    assert f"estimated reusable prefix {reusable:,}" in head
    assert "cost" in head and "estimate" in head.split("cost")[1]
    assert ("counted by ctxwright" in head) == (usage is None)
    cells = _index_row(html)
    assert cells[5:8] == ["unknown", "unknown", f"{reusable:,}"], cells  # cached, hit ratio, reusable
    cache = _figures(html)[1]
    by_name = {t["name"]: t["y"] for t in cache["data"]}
    assert by_name["cached"] == [0, 0, 0]
    assert by_name["reusable prefix (cached not reported: estimate)"] == [c.reusable_tokens for c in s.calls]
    # each call's row: cached and prefilled unknown, the reusable prefix in its own column
    rows = re.findall(r"<tr><td>\d+</td>.*?</tr>", html[html.index("<h3>Calls</h3>") :], re.S)
    assert len(rows) == 3
    for row, c in zip(rows, s.calls, strict=True):
        cells = [re.sub(r"<[^>]+>", "", x).strip() for x in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        i = cells.index(f"{c.prompt_tokens:,}", 1)  # prompt, cached, reusable, prefilled
        assert cells[i + 1 : i + 4] == ["?", f"{c.reusable_tokens:,}", "?"], cells


def test_a_reported_cached_count_is_shown_as_cached(tmp_path):
    log = _appending_log(
        tmp_path / "log.jsonl",
        {"usage": {"prompt_tokens": 300, "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 200}}},
    )
    data = from_log(log)
    head = _headline(render_html(data))
    assert "cached 600 (hit ratio 66.7%)" in head and "estimated reusable prefix" in head
    assert "estimate" not in _figures(render_html(data))[1]["data"][-1]["name"]


def test_a_stored_session_on_a_server_without_cached_counts_says_unknown(tmp_path, capsys):
    """``run --report`` against a served model whose usage has no cached-token field (as
    llama-cpp-python's server): every row says ``?``, and so does the headline."""
    from fakeserver import FakeOpenAIServer as S

    out = tmp_path / "run.html"
    with S(
        [
            S.reply_tool_calls([("c1", "calculator", '{"expression": "2+3"}')], usage=S.usage_openai(900, 10)),
            S.reply_text("5", usage=S.usage_openai(950, 2)),
        ]
    ) as srv:
        code = main(
            ["run", "--model", "m", "--base-url", srv.url, "--db", str(tmp_path / "r.db"), "--report", str(out), "2+3?"]
        )
    assert code == 0, capsys.readouterr().err
    head = _headline(out.read_text())
    assert "cached unknown" in head and "estimated reusable prefix" in head
    assert not re.search(r"cached [\d,]+", head), head


def _parts_notes(html: str) -> list[str]:
    notes = re.findall(r'<p class="note parts-note">(.*?)</p>', html, re.S)
    return [" ".join(unescape(n).split()) for n in notes]


def test_the_parts_and_the_prompt_count_agree_or_a_note_says_why(tmp_path):
    """The part chart counts each part's text with ctxwright's counter; the prompt tokens are the
    server's count of the request its chat template rendered. Where the totals differ, a note
    under the headline gives both totals and says why; where they agree, no note."""
    # the server's count: 40 tokens more than the parts per call (its template's role markers)
    log = _appending_log(tmp_path / "differ.jsonl", None)
    data = from_log(log)
    (s,) = data.sessions
    parts = [sum(c.parts.values()) for c in s.calls]
    with (tmp_path / "server.jsonl").open("w") as f:
        for line, n in zip(log.read_text().splitlines(), parts, strict=True):
            f.write(json.dumps({"request": json.loads(line), "response": {"usage": {"prompt_tokens": n + 40}}}) + "\n")
    served = from_log(tmp_path / "server.jsonl")
    # the difference is a part of its own, named, so the parts add up to the server's count: no note
    assert [c.parts["template_difference"] for c in served.sessions[0].calls] == [40, 40, 40]
    assert [sum(c.parts.values()) for c in served.sessions[0].calls] == [n + 40 for n in parts]
    html = render_html(served)
    assert _parts_notes(html) == [] and "chat template and tokenizer difference" in html
    # a session recorded without the part (an older ctxwright): the note gives both totals and says why
    for c in served.sessions[0].calls:
        c.parts["template_difference"] = 0
    (note,) = _parts_notes(render_html(served))
    total = sum(parts)
    assert f"The parts add up to {total:,} tokens" in note and f"the prompt tokens to {total + 120:,} (+120, " in note
    assert "the provider's own count of the request as its chat template rendered it" in note
    assert note.endswith("The marks over the bars of the part chart are the prompt tokens.")
    # a log whose usage is exactly the parts: they agree, no note
    with (tmp_path / "same.jsonl").open("w") as f:
        for line, n in zip(log.read_text().splitlines(), parts, strict=True):
            f.write(json.dumps({"request": json.loads(line), "response": {"usage": {"prompt_tokens": n}}}) + "\n")
    assert _parts_notes(render_html(from_log(tmp_path / "same.jsonl"))) == []
    assert parts_note(from_log(tmp_path / "same.jsonl").sessions[0], "x") is None
