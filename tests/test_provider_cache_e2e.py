"""The provider cache end to end: the Anthropic and Responses backends, their loopback
simulators (``tests/providers/``, on simulated clocks) and the official SDKs, through the
Harness, ``ctxwright show``/``report``/``audit`` and the proxy.

What the issue's acceptance asks, each against the real parts:

* an idle gap longer than the TTL is ``ttl_expired`` in the live audit of the next call and
  priced (``cache/prices.py``), on both providers, and ``show`` and ``report`` say so;
* ``keep_warm`` keeps the next call's hit ratio at its level before the gap, its refreshes
  counted as cost and never as requests of the trajectory;
* a prefix change is reported with ctxwright's byte diff (segment, offset) and the provider's
  own reason, fused, with whether they agree;
* ``--cache-ttl auto`` chooses 5m or 1h per call from the gaps, priced by the session's prices;
* the proxy in front of the Anthropic simulator sees the expiry too, and ``ctxwright audit``
  of its log lists it with its cost.
"""

from __future__ import annotations

import itertools
import json
import threading
from pathlib import Path
from typing import Any

import anthropic
import pytest

from ctxwright import Harness, tool
from ctxwright.agent.provider_cache import is_keep_warm
from ctxwright.backends.anthropic import AnthropicBackend
from ctxwright.backends.openai_responses import ResponsesBackend
from ctxwright.cache.expiry import choose_ttl
from ctxwright.cache.prices import price_for, pricing_of
from ctxwright.core.events import AssistantEvent
from ctxwright.store.sessions import Store
from providers.anthropic_sim import AnthropicSim, block_tokens
from providers.responses_sim import ResponsesSim, text

CLAUDE = "claude-sonnet-4-5"  # minimum cacheable prompt: 1,024 tokens
GPT = "gpt-5.5"  # in_memory retention: 5 minutes idle
SYSTEM = "You are a careful research agent. Look every item up before you answer. " * 80


@tool
def lookup(n: int) -> str:
    """Look up item n of the catalogue."""
    return f"item {n}: " + "a fact about it, " * 12


def _calls(db: Path, sid: str) -> list[Any]:
    store = Store(db)
    try:
        return store.calls(sid)
    finally:
        store.close()


def _shared(sim: AnthropicSim, before: dict[str, Any], after: dict[str, Any]) -> int:
    """The simulator's tokens of the blocks ``after`` shares with ``before`` (the reusable prefix)."""
    total = 0
    for x, y in zip(sim.blocks(before), sim.blocks(after), strict=False):
        if x.item != y.item:
            break
        total += block_tokens(y.body)
    return total


def _claude(sim: AnthropicSim, **kw: Any) -> AnthropicBackend:
    return AnthropicBackend(CLAUDE, base_url=sim.url, api_key="sk-test", max_retries=0, clock=sim.clock.now, **kw)


def _gpt(sim: ResponsesSim, **kw: Any) -> ResponsesBackend:
    return ResponsesBackend(GPT, base_url=sim.url + "/v1", api_key="sk-test", max_retries=0, clock=sim.clock.now, **kw)


# -- a. an idle gap past the TTL: ttl_expired, priced, in show and report ---------------------------


def _assert_expiry_priced(rec: dict[str, Any], provider: str, model: str, ttl_s: float) -> None:
    assert rec["cause"] == "ttl_expired", rec
    assert rec["age_s"] == 360.0 and rec["ttl_s"] == ttl_s
    cost = rec["expiry_cost"]
    p = price_for(provider, model)
    assert p is not None
    tokens = cost["tokens"]
    assert tokens > 1024
    # priced by cache/prices.py: the re-write at the 5m write price against a read
    assert cost["write_usd"] == pytest.approx(tokens * p.cache_write_5m / 1e6, abs=1e-6)
    assert cost["read_usd"] == pytest.approx(tokens * p.cached_read / 1e6, abs=1e-6)
    assert cost["extra_usd"] == pytest.approx(tokens * (p.cache_write_5m - p.cached_read) / 1e6, abs=1e-6)


def _show_and_report(db: Path, sid: str, rec: dict[str, Any], tmp_path: Path, capsys: Any) -> None:
    from ctxwright.cli.main import main

    capsys.readouterr()
    assert main(["--db", str(db), "show", sid]) == 0
    out = capsys.readouterr().out
    assert "ttl_expired" in out and "6m00s/5m00s" in out
    assert "· ttl_expired" in out and "call 2 provider cache: ttl_expired" in out  # calls count from 0
    usd = rec["expiry_cost"]["extra_usd"]
    assert f"expiry re-wrote {rec['expiry_cost']['tokens']:,} tokens, ${usd:.4f} more than a read" in out
    assert f"expiries: 1 ({rec['expiry_cost']['tokens']:,} tokens re-written, ${usd:.4f} more than reads)" in out
    page = tmp_path / "r.html"
    assert main(["--db", str(db), "report", sid, "-o", str(page)]) == 0
    html = page.read_text()
    assert "Expiries: 1" in html and "ttl_expired" in html and "6m00s/5m00s" in html


#: The causes of three calls 60 s and 360 s apart. With the status bar on (the default), its
#: block at the end is replaced on every call: the second call re-writes that tail (a byte
#: change the provider's diagnostics agree with), and the third is still an expiry.
CAUSES_BY_STATUS = {True: ["first", "byte_change", "ttl_expired"], False: ["first", "hit", "ttl_expired"]}


@pytest.mark.parametrize("status", [True, False])
def test_anthropic_an_idle_gap_past_the_ttl_is_ttl_expired_and_priced(
    tmp_path: Path, capsys: Any, status: bool
) -> None:
    db = tmp_path / "a.db"
    with AnthropicSim() as sim:
        with Harness(backend=_claude(sim), system=SYSTEM, db=db, status=status) as h:
            h.run("First question.")
            sim.clock.advance(60)
            h.run("Second question.")
            sim.clock.advance(360)  # idle longer than the 5-minute TTL
            h.run("Third question.")
            sid = h.session_id
        usage = [r["usage"] for r in sim.responses]
    assert usage[1]["cache_read_input_tokens"] > 0 and usage[2]["cache_read_input_tokens"] == 0  # the sim expired it
    calls = _calls(db, sid)
    assert [c.audit.raw["cache"]["cause"] for c in calls] == CAUSES_BY_STATUS[status]
    if status:  # the replaced status block: the byte diff and the provider name the same segment
        tail = calls[1].audit.raw["cache"]
        assert tail["segment"] == "messages" and tail["agree"] is True
    rec = calls[2].audit.raw["cache"]
    _assert_expiry_priced(rec, "anthropic", CLAUDE, 300.0)
    assert rec["expiry_cost"]["tokens"] <= usage[2]["cache_creation_input_tokens"]  # no more than it re-wrote
    _show_and_report(db, sid, calls[2].audit.raw["cache"], tmp_path, capsys)


@pytest.mark.parametrize("status", [True, False])
def test_responses_an_idle_gap_past_the_ttl_is_ttl_expired_and_priced(
    tmp_path: Path, capsys: Any, status: bool
) -> None:
    db = tmp_path / "r.db"
    with ResponsesSim(respond=lambda body: [text("ok")]) as sim:
        with Harness(backend=_gpt(sim), system=SYSTEM, db=db, status=status) as h:
            h.run("First question.")
            sim.clock.advance(60)
            h.run("Second question.")
            sim.clock.advance(360)  # idle longer than in-memory retention (5 minutes)
            h.run("Third question.")
            sid = h.session_id
        cached = [r["usage"]["input_tokens_details"]["cached_tokens"] for r in sim.responses]
    assert cached[1] > 0 and cached[2] == 0
    calls = _calls(db, sid)
    assert [c.audit.raw["cache"]["cause"] for c in calls] == CAUSES_BY_STATUS[status]
    _assert_expiry_priced(calls[2].audit.raw["cache"], "openai", GPT, 300.0)
    _show_and_report(db, sid, calls[2].audit.raw["cache"], tmp_path, capsys)


# -- b. keep-warm keeps the hit ratio; refreshes are cost, not trajectory ---------------------------


def _anthropic_ratios(sim: AnthropicSim, trajectory: list[int]) -> list[float]:
    """The provider's cache reads over the reusable prefix, per trajectory request after the first."""
    out = []
    for a, b in itertools.pairwise(trajectory):
        out.append(
            sim.responses[b]["usage"]["cache_read_input_tokens"] / _shared(sim, sim.requests[a], sim.requests[b])
        )
    return out


def test_anthropic_keep_warm_keeps_the_hit_ratio_across_the_gap(tmp_path: Path) -> None:
    db = tmp_path / "k.db"
    with AnthropicSim() as sim:
        with Harness(backend=_claude(sim), system=SYSTEM, db=db) as h:
            h.run("First question.")
            sim.clock.advance(60)
            h.run("Second question.")
            sim.clock.advance(270)
            assert h.keep_warm() == sim.clock.now()
            sim.clock.advance(90)  # 360 s since the last real call: past the TTL without the refresh
            h.run("Third question.")
            sid = h.session_id
            pricing = h.pricing
            events = list(h.session.events)
        assert len(sim.requests) == 4
        before, after = _anthropic_ratios(sim, [0, 1, 3])
        refresh_usage = sim.responses[2]["usage"]
        sim_reads = [r["usage"]["cache_read_input_tokens"] for r in sim.responses]
    assert before >= 0.9 and after >= before - 0.01, (before, after)
    # the refresh was a full read of the last request's cache, and renewed it
    assert refresh_usage["cache_read_input_tokens"] >= sim_reads[1]
    assert sum(isinstance(e, AssistantEvent) for e in events) == 3  # its reply is not in the trajectory
    calls = _calls(db, sid)
    assert [c.audit.cause for c in calls][2] == "keep_warm" and is_keep_warm(dict(calls[2].usage))
    # not an expiry: only the status block at the end was re-written (the bar replaces it each call)
    assert (
        calls[3].audit.raw["cache"]["cause"] == "byte_change" and calls[3].audit.raw["cache"]["segment"] == "messages"
    )
    _refresh_is_cost_not_a_call(db, sid, pricing)


def _refresh_is_cost_not_a_call(db: Path, sid: str, pricing: Any) -> None:
    from ctxwright.report import from_store

    store = Store(db)
    try:
        (s,) = from_store(store, sid).sessions
    finally:
        store.close()
    assert len(s.calls) == 3 and len(s.refreshes) == 1  # not a request of the trajectory
    refresh = s.refreshes[0].cost(pricing)
    assert refresh is not None and refresh > 0
    assert s.cost(pricing) == pytest.approx(sum(c.cost(pricing) or 0.0 for c in s.calls) + refresh, abs=1e-12)


def test_responses_keep_warm_timer_on_the_simulated_clock_keeps_the_hit_ratio(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with ResponsesSim(respond=lambda body: [text("ok")]) as sim:
        stopped = threading.Event()
        start = sim.clock.now()

        def wait(seconds: float) -> bool:  # the timer's sleep: the simulated clock moves instead
            if sim.clock.now() + seconds - start > 420:
                stopped.set()
                return True
            sim.clock.advance(seconds)
            return False

        with Harness(backend=_gpt(sim), system=SYSTEM, db=db, keep_warm=True) as h:
            h.run("First question.")
            sim.clock.advance(60)
            start = sim.clock.now()
            h.run("Second question.")
            cache = h.context.provider_cache
            cache.stop_timer()  # the real-time timer the run started: replaced by one on the sim's clock
            timer = cache.start_timer(wait=wait)
            assert timer is not None and stopped.wait(30)
            timer.stop()
            assert timer.sent == 1  # at 270 s, 30 s before the entry would expire
            sim.clock.advance(420 - (sim.clock.now() - start))  # 420 s after the last real call
            h.run("Third question.")
            sid = h.session_id
            pricing = h.pricing
        cached = [r["usage"]["input_tokens_details"]["cached_tokens"] for r in sim.responses]
        prompts = [r["usage"]["input_tokens"] for r in sim.responses]
    assert len(cached) == 4
    before, after = cached[1] / prompts[0], cached[3] / prompts[1]  # reads over the previous request's prompt
    assert before >= 0.9 and after >= before - 0.01, (before, after)
    _refresh_is_cost_not_a_call(db, sid, pricing)


def test_without_keep_warm_the_same_gap_loses_the_cache(tmp_path: Path) -> None:
    """The control of the two tests above: the hit ratio they keep is the refresh's doing."""
    with AnthropicSim() as sim:
        with Harness(backend=_claude(sim), system=SYSTEM, db=tmp_path / "c.db") as h:
            h.run("First question.")
            sim.clock.advance(60)
            h.run("Second question.")
            sim.clock.advance(360)
            h.run("Third question.")
        before, after = _anthropic_ratios(sim, [0, 1, 2])
    assert before >= 0.9 and after == 0.0


# -- c. a prefix change: the byte diff and the provider's reason, fused ------------------------------

TOOLS_A = [{"name": "lookup", "description": "Look up item n.", "input_schema": {"type": "object"}}]
TOOLS_B = [{"name": "lookup", "description": "Look up item n of the catalogue.", "input_schema": {"type": "object"}}]


class MisreportingSim(AnthropicSim):
    """A simulator whose diagnostics blame the messages whatever changed (a provider and
    ctxwright disagreeing)."""

    def diagnose(self, previous_id: Any, now: Any) -> dict[str, Any] | None:
        found = super().diagnose(previous_id, now)
        if found and found["cache_miss_reason"].get("type", "").endswith("_changed"):
            found["cache_miss_reason"]["type"] = "messages_changed"
        return found


def _two_calls_through_the_proxy(sim: AnthropicSim, store: Store) -> list[dict[str, Any]]:
    """Two calls of one agent (``metadata.user_id``) through the proxy, the second with a
    changed tool description, each naming the previous reply in its diagnostics."""
    from ctxwright.backends.anthropic import DIAGNOSTICS_BETA
    from ctxwright.proxy.log import proxy_session_requests, proxy_sessions
    from ctxwright.proxy.serve import RecordingProxy
    from ctxwright.proxy.server import ProxyConfig

    system = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    previous: str | None = None
    with RecordingProxy.start(ProxyConfig(upstream=sim.url, clock=sim.clock.now), store, printer=lambda _: None) as p:
        client = anthropic.Anthropic(base_url=p.url, api_key="sk-test", max_retries=0)
        for tools in (TOOLS_A, TOOLS_B):
            reply = client.messages.create(  # type: ignore[call-overload]
                model=CLAUDE,
                max_tokens=32,
                system=system,
                tools=tools,
                messages=[{"role": "user", "content": "Which item?"}],
                metadata={"user_id": "agent-7"},
                extra_body={"diagnostics": {"previous_message_id": previous}},
                extra_headers={"anthropic-beta": DIAGNOSTICS_BETA},
            )
            previous = reply.id
            sim.clock.advance(10)
        assert p.recorder.wait_idle(60, at_least=2)
    (session,) = proxy_sessions(store)
    return [r["proxy"]["audit"]["cache"] for r in proxy_session_requests(store, session["id"])]


def test_a_prefix_change_has_the_byte_diff_and_the_providers_reason_and_they_agree(tmp_path: Path) -> None:
    store = Store(tmp_path / "p.db")
    try:
        with AnthropicSim() as sim:
            first, changed = _two_calls_through_the_proxy(sim, store)
            assert sim.responses[1]["diagnostics"]["cache_miss_reason"]["type"] == "tools_changed"
    finally:
        store.close()
    assert first["cause"] == "first"
    assert changed["cause"] == "byte_change" and changed["segment"] == "tools"
    assert isinstance(changed["offset"], int) and changed["offset"] > 0  # where the description differs
    assert "provider says tools_changed (agrees)" in changed["evidence"]
    assert changed["agree"] is True


def test_a_provider_blaming_another_segment_disagrees(tmp_path: Path) -> None:
    store = Store(tmp_path / "p.db")
    try:
        with MisreportingSim() as sim:
            _first, changed = _two_calls_through_the_proxy(sim, store)
    finally:
        store.close()
    assert changed["cause"] == "byte_change" and changed["segment"] == "tools"
    assert "provider says messages_changed (disagrees)" in changed["evidence"]
    assert changed["agree"] is False


def test_the_harness_on_anthropic_asks_for_diagnostics_and_records_the_providers_verdict(tmp_path: Path) -> None:
    """Diagnostics are on by default (``cache_diagnostics``): each request names the previous
    reply, so a verdict of a miss can carry the provider's reason."""
    with AnthropicSim() as sim:
        with Harness(backend="anthropic", base_url=sim.url, model=CLAUDE, system=SYSTEM, db=tmp_path / "d.db") as h:
            h.run("First question.")
            h.run("Second question.")
        assert sim.requests[0]["diagnostics"] == {"previous_message_id": None}
        assert sim.requests[1]["diagnostics"] == {"previous_message_id": sim.responses[0]["id"]}
        with Harness(
            backend="anthropic", base_url=sim.url, model=CLAUDE, system=SYSTEM, cache_diagnostics=False
        ) as off:
            off.run("Hello.")
        assert "diagnostics" not in sim.requests[-1]


def test_a_server_refusing_diagnostics_gets_the_call_without_them() -> None:
    from ctxwright.core.messages import Message
    from ctxwright.core.progress import Retry
    from ctxwright.core.request import ChatRequest

    events: list[Any] = []
    with AnthropicSim() as sim:
        b = _claude(sim)
        sim.fail_next(400, "invalid_request_error", "diagnostics: Extra inputs are not permitted")
        req = ChatRequest(messages=(Message(role="system", content=SYSTEM), Message(role="user", content="Hi.")))
        done = b.complete(req, on_event=events.append)
        assert done.message.content == "ok"
        assert "diagnostics" in sim.requests[0] and "diagnostics" not in sim.requests[1]
        assert not b.diagnostics
        b.complete(req)
        assert "diagnostics" not in sim.requests[2]
    assert any(isinstance(e, Retry) and "diagnostics" in e.reason for e in events)


# -- d. the cost per call from the recorded usage, by one price source ------------------------------


def test_the_cost_of_each_call_by_a_prices_file_equals_the_hand_computation(tmp_path: Path) -> None:
    from ctxwright.cli.show import call_cost_of

    prices = tmp_path / "prices.toml"
    prices.write_text(
        f'[models."{CLAUDE}"]\nprovider = "anthropic"\ninput = 2.0\ncached_read = 0.2\n'
        "cache_write_5m = 2.5\ncache_write_1h = 4.0\noutput = 10.0\n"
    )
    db = tmp_path / "p.db"
    with AnthropicSim() as sim:
        with Harness(backend=_claude(sim), system=SYSTEM, db=db, prices=str(prices), tools=[lookup]) as h:
            h.run("First question.")
            sim.clock.advance(30)
            h.run("Second question.")
            sid = h.session_id
            pricing = h.pricing
        usage = [r["usage"] for r in sim.responses]
    used = pricing.price("anthropic", CLAUDE)
    assert used is not None and used.source.startswith(str(prices))  # the file's row, over the built-in one
    assert (used.input, used.cached_read, used.cache_write_5m, used.cache_write_1h, used.output) == (
        2.0,
        0.2,
        2.5,
        4.0,
        10.0,
    )
    for call, u in zip(_calls(db, sid), usage, strict=True):
        by_hand = (
            u["input_tokens"] * 2.0
            + u["cache_read_input_tokens"] * 0.2
            + u["cache_creation"]["ephemeral_5m_input_tokens"] * 2.5
            + u["cache_creation"]["ephemeral_1h_input_tokens"] * 4.0
            + u["output_tokens"] * 10.0
        ) / 1e6
        got = call_cost_of(call, pricing)
        assert got is not None and got.cost == pytest.approx(by_hand, abs=1e-12)


# -- --cache-ttl auto: 5m or 1h per call, by the session's prices -----------------------------------


def test_cache_ttl_auto_chooses_per_call_from_the_gaps_by_the_sessions_prices(tmp_path: Path) -> None:
    with AnthropicSim() as sim:
        with Harness(
            backend="anthropic", base_url=sim.url, model=CLAUDE, system=SYSTEM, cache_ttl="auto", db=tmp_path / "t.db"
        ) as h:
            backend = h.backend
            assert isinstance(backend, AnthropicBackend) and backend.ttl_for_call is not None
            backend.clock = sim.clock.now
            h.run("One.")
            sim.clock.advance(30)
            h.run("Two.")
            sim.clock.advance(900)  # a 15-minute pause: a 1-hour write pays for itself
            h.run("Three.")
            h.run("Four.")
        marks = [r["system"][0]["cache_control"] for r in sim.requests]
    assert marks[:3] == [{"type": "ephemeral"}] * 3  # 5m until a pause longer than 5 minutes is seen
    assert marks[3] == {"type": "ephemeral", "ttl": "1h"}
    assert sim.responses[3]["usage"]["cache_creation"]["ephemeral_1h_input_tokens"] > 0


def test_cache_ttl_auto_is_priced_by_the_prices_file_not_only_the_builtin_table(tmp_path: Path) -> None:
    """A model the built-in table does not know has a price from the user's file: the choice
    reads it (without it, no price: 5m forever)."""
    model = "claude-house-1"
    prices = tmp_path / "prices.toml"
    prices.write_text(f'[models."{model}"]\nprovider = "anthropic"\ninput = 3.0\ncached_read = 0.3\n')
    assert price_for("anthropic", model) is None
    price = pricing_of(prices).price("anthropic", model)
    assert price is not None and choose_ttl([30.0, 900.0], price) == "1h"  # writes at the input price either way
    with AnthropicSim(minimum=1024) as sim:
        backend = AnthropicBackend(model, base_url=sim.url, api_key="t", ttl="auto", clock=sim.clock.now)
        with Harness(backend=backend, system=SYSTEM, prices=str(prices), db=tmp_path / "h.db") as h:
            h.run("One.")
            sim.clock.advance(30)
            h.run("Two.")
            sim.clock.advance(900)
            h.run("Three.")
            assert backend.ttl_for_call is not None and backend.ttl_for_call() == "1h"
            h.run("Four.")
        assert sim.requests[-1]["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}


# -- e. through the proxy: the Anthropic SDK, a simulated gap, the session audit and ctxwright audit --


def test_the_proxy_sees_the_expiry_and_ctxwright_audit_prices_it(tmp_path: Path, capsys: Any) -> None:
    from ctxwright.cli.main import main
    from ctxwright.proxy.log import proxy_session_requests, proxy_sessions
    from ctxwright.proxy.serve import RecordingProxy
    from ctxwright.proxy.server import ProxyConfig

    store = Store(tmp_path / "proxy.db")
    lines: list[str] = []
    system = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Which item?"}]
    with AnthropicSim() as sim:
        config = ProxyConfig(upstream=sim.url, clock=sim.clock.now)
        with RecordingProxy.start(config, store, printer=lines.append) as proxy:
            client = anthropic.Anthropic(base_url=proxy.url, api_key="sk-test", max_retries=0)
            for gap in (0, 60, 360):
                sim.clock.advance(gap)
                reply = client.messages.create(  # type: ignore[call-overload]
                    model=CLAUDE,
                    max_tokens=32,
                    system=system,
                    messages=messages,
                    metadata={"user_id": "agent-9"},
                )
                messages = [
                    *messages,
                    {"role": "assistant", "content": reply.content[0].text},
                    {"role": "user", "content": "And the next?"},
                ]
            assert proxy.recorder.wait_idle(60, at_least=3)
        assert sim.responses[2]["usage"]["cache_read_input_tokens"] == 0  # the sim expired the entry
    (session,) = proxy_sessions(store)
    sid = session["id"]
    records = proxy_session_requests(store, sid)
    live = [r["proxy"]["audit"]["cache"] for r in records]
    assert [c["cause"] for c in live] == ["first", "hit", "ttl_expired"]
    assert live[2]["age_s"] == 360.0 and live[2]["expiry_cost"]["extra_usd"] > 0
    assert any("ttl_expired" in line for line in lines)  # the proxy's printed line says so
    capsys.readouterr()
    assert main(["audit", "--proxy-session", sid, "--json", "--db", str(store.path)]) == 0
    out = json.loads(capsys.readouterr().out)
    expiries = out["expiries"]
    assert len(expiries["calls"]) == 1 and expiries["calls"][0]["cause"] == "ttl_expired"
    p = price_for("anthropic", CLAUDE)
    assert p is not None
    tokens = expiries["tokens"]
    assert tokens > 1024
    assert expiries["extra_usd"] == pytest.approx(tokens * (p.cache_write_5m - p.cached_read) / 1e6, abs=1e-6)
    assert main(["audit", "--proxy-session", sid, "--db", str(store.path)]) == 0
    table = capsys.readouterr().out
    assert "expiries: 1 (" in table and "ttl_expired" in table
    # a --prices file prices the expiry in ctxwright audit and in the report, not the built-in table
    from ctxwright.report import from_proxy

    prices = tmp_path / "prices.toml"
    prices.write_text(
        f'[models."{CLAUDE}"]\nprovider = "anthropic"\ninput = 10.0\ncached_read = 1.0\ncache_write_5m = 20.0\n'
    )
    assert main(["audit", "--proxy-session", sid, "--json", "--db", str(store.path), "--prices", str(prices)]) == 0
    theirs = json.loads(capsys.readouterr().out)["expiries"]
    assert theirs["tokens"] == tokens and theirs["extra_usd"] == pytest.approx(tokens * 19.0 / 1e6, abs=1e-6)
    (page,) = from_proxy(store, sid, pricing=pricing_of(prices)).sessions
    assert page.expiry_usd == pytest.approx(tokens * 19.0 / 1e6, abs=1e-6)
    store.close()
