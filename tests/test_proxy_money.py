"""$ where users look: the proxy's line per call and ``ctxwright show`` of a proxy session say
what each call cost and what its cache miss lost, priced by the one price table
(``cache/prices.py``); a model the table does not know is "price unknown", never a guess.

Real parts: the Anthropic simulator (``tests/providers/anthropic_sim.py``) as the upstream, the
official ``anthropic`` SDK as the client, the proxy on real HTTP recording into SQLite. The
expected figures are computed here from the simulator's own usage objects and the price
table's row for the model, not read back from what the proxy computed."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anthropic
import pytest
from rich.console import Console

from ctxwright.cache.prices import call_cost, cost_if_held, price_for, pricing_of
from ctxwright.cli.main import main
from ctxwright.cli.show_proxy import render_proxy_session
from ctxwright.core.usage import read_cache_usage
from ctxwright.proxy.log import proxy_session_requests, proxy_sessions
from ctxwright.proxy.serve import RecordingProxy
from ctxwright.proxy.server import ProxyConfig
from ctxwright.report.data import from_proxy
from ctxwright.report.html import render_html
from ctxwright.store.sessions import Store

sys.path.insert(0, str(Path(__file__).parent))
from ports import free_port, wait_listening
from providers.anthropic_sim import AnthropicSim

SYSTEM = "You answer from the house rules only. " * 300  # past Anthropic's minimum cacheable prefix
PRICED, UNPRICED = "claude-sonnet-4-5", "claude-unreleased-9"
#: a --prices file that prices the model the built-in table does not know
PRICES_FILE = (
    f'[models."{UNPRICED}"]\nprovider = "anthropic"\ninput = 10.0\ncached_read = 1.0\n'
    "cache_write_5m = 12.5\ncache_write_1h = 20.0\noutput = 50.0\n"
)


def _session(tmp_path: Path) -> tuple[Store, AnthropicSim, list[str], str]:
    """Four calls of one session: a first call, an append (a read), a changed system prompt (a
    miss), then a model the price table does not know."""
    store = Store(tmp_path / "money.db")
    lines: list[str] = []
    with (
        AnthropicSim() as sim,
        RecordingProxy.start(ProxyConfig(upstream=sim.url, clock=sim.clock.now), store, printer=lines.append) as p,
    ):
        client = anthropic.Anthropic(base_url=p.url, api_key="sk-ant-test", max_retries=0)
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Which rule?"}]
        models = [PRICED, PRICED, PRICED, UNPRICED]
        for i, model in enumerate(models):
            text = SYSTEM + (" Today is Tuesday." if i >= 2 else "")
            reply = client.messages.create(
                model=model,
                max_tokens=32,
                system=[{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}],
                messages=messages,  # type: ignore[arg-type]
                extra_headers={"x-ctxwright-session": "money"},
            )
            answer = reply.content[0].text  # type: ignore[union-attr]
            messages = [
                *messages,
                {"role": "assistant", "content": answer},
                {"role": "user", "content": f"and {i}?"},
            ]
        assert p.recorder.wait_idle(60, at_least=len(models))
    (session,) = proxy_sessions(store)
    return store, sim, lines, str(session["id"])


def test_each_call_line_and_show_say_its_cost_and_what_its_miss_lost(tmp_path: Path) -> None:
    store, sim, lines, sid = _session(tmp_path)
    assert len(lines) == 4, lines
    price = price_for("anthropic", PRICED)
    assert price is not None
    records = proxy_session_requests(store, sid)
    usages = [read_cache_usage("anthropic", r["usage"]) for r in sim.responses]
    reusable = [int(r["proxy"]["audit"]["reusable_prefix_tokens"]) for r in records]
    costs = [call_cost(u, price) for u in usages[:3]]
    # what each call could have read: its reusable prefix, or all the call before it left
    could = [
        max(n, min(prev.prompt, u.prompt)) for n, u, prev in zip(reusable, usages, [usages[0], *usages], strict=False)
    ]
    could[0] = reusable[0]
    lost = [c - cost_if_held(u, price, n) for c, u, n in zip(costs, usages, could, strict=False)]
    # the break lost more than the few tokens before the change: the whole prompt was paid again
    assert lost[2] > costs[2] - cost_if_held(usages[2], price, reusable[2])
    # the first call writes the cache and the append reads it: nothing lost
    assert lines[0].split("tok  ", 1)[1].startswith(f"${costs[0]:.4f}") and "lost" not in lines[0]
    assert usages[1].cache_read > 0 and f"${costs[1]:.4f}" in lines[1] and "lost" not in lines[1]
    # the changed system prompt missed the cache: its cost and what that miss lost
    assert records[2]["proxy"]["audit"]["cause"] == "system_changed" and lost[2] > 0.001
    assert f"${costs[2]:.4f} lost ${lost[2]:.4f}" in lines[2]
    # a model the table does not know
    assert price_for("anthropic", UNPRICED) is None and "price unknown" in lines[3] and "$" not in lines[3]

    out = io.StringIO()
    render_proxy_session(store, sid, Console(file=out, width=300), pricing=pricing_of())
    table = out.getvalue()
    assert f"${costs[2]:.4f} lost ${lost[2]:.4f}" in table and "price unknown" in table
    total = f"cost ${sum(costs):.4f}, ${sum(lost):.4f} of it lost to cache misses (over 3 of 4 calls: price unknown"
    assert total in table, table
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("sys.stdout", out)
        render_proxy_session(store, sid, Console(file=io.StringIO()), as_json=True)
    calls = json.loads(out.getvalue())["calls"]
    assert [c["cost_usd"] for c in calls[:3]] == pytest.approx(costs)
    assert calls[2]["lost_usd"] == pytest.approx(lost[2]) and calls[3]["cost_usd"] is None

    # the HTML report of the session: the same cost, what the miss lost, and "price unknown"
    html = render_html(from_proxy(store, sid, pricing=pricing_of()), pricing_of())
    assert "<th>lost to the miss</th>" in html
    assert f"<td>{costs[2]:,.4f}</td>" in html and f"<td>{lost[2]:,.4f}</td>" in html
    assert '<td class="l" colspan="3">price unknown</td>' in html
    only_unpriced = from_proxy(store, sid, pricing=pricing_of())
    only_unpriced.sessions[0].calls = only_unpriced.sessions[0].calls[3:]  # the unknown model's call
    html = render_html(only_unpriced, pricing_of())
    assert "cost: price unknown (no call's model is in the price table" in html and "lost to the miss" not in html


def test_a_prices_file_reprices_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _store, sim, _lines, sid = _session(tmp_path)
    prices = tmp_path / "prices.toml"
    prices.write_text(PRICES_FILE)
    pricing = pricing_of(prices)
    p = pricing.price("anthropic", UNPRICED)
    assert p is not None
    want = call_cost(read_cache_usage("anthropic", sim.responses[3]["usage"]), p)
    code = main(["--db", str(tmp_path / "money.db"), "show", sid, "--prices", str(prices)])
    shown = capsys.readouterr().out
    assert code == 0 and f"${want:.4f}" in shown and "price unknown" not in shown, shown


@pytest.mark.slow
def test_the_proxy_cli_prices_its_line_by_a_prices_file(tmp_path: Path) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text(PRICES_FILE)
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src"), "NO_PROXY": "127.0.0.1"}
    with AnthropicSim() as sim:
        cmd = [sys.executable, "-m", "ctxwright.cli.main", "--db", str(tmp_path / "cli.db"), "proxy",
               "--anthropic-upstream", sim.url, "--port", str(port), "--prices", str(prices)]  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            wait_listening(port, proc, 60, "the proxy")
            client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key="sk-ant-test", max_retries=0)
            client.messages.create(model=UNPRICED, max_tokens=8, messages=[{"role": "user", "content": "q"}])
        finally:
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    p = pricing_of(prices).price("anthropic", UNPRICED)
    assert p is not None
    want = call_cost(read_cache_usage("anthropic", sim.responses[0]["usage"]), p)
    (line,) = [ln for ln in out.splitlines() if " #0 " in ln]
    assert f"${want:.4f}" in line and "price unknown" not in line, out
