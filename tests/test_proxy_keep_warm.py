"""``ctxwright proxy --keep-warm`` (``proxy/keep_warm.py``) against the Anthropic simulator
(``tests/providers/anthropic_sim.py``: the documented TTL on a clock the test moves), the official
``anthropic`` SDK as the agent, the real relay and a real SQLite store.

What must hold: a refresh is sent before the entry expires and the agent's next call after the
TTL still reads the prefix (and, without one, would not); the caps hold (refreshes per session,
the idle horizon); nothing is sent when the price table says the refresh costs more than the
rewrite, nor for a model it cannot price; each refresh is recorded in its session, marked, and
the client's key -- which the refresh carries upstream -- is nowhere in the store."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import pytest

from ctxwright.cache.prices import ModelPrice, PriceTable, Pricing
from ctxwright.proxy.keep_warm import KeepWarmer, refresh_output_tokens, shortest_ttl_s
from ctxwright.proxy.log import proxy_session_requests, proxy_sessions
from ctxwright.proxy.serve import RecordingProxy
from ctxwright.proxy.server import ProxyConfig
from ctxwright.report.data import from_proxy
from ctxwright.store.sessions import Store

sys.path.insert(0, str(Path(__file__).parent))
from providers.anthropic_sim import AnthropicSim

KEY = "sk-ant-api03-KEEPWARM-NEVERSTORE-0123"
MODEL = "claude-sonnet-4-5"
SYSTEM = [{"type": "text", "text": "You follow the house rules. " * 60, "cache_control": {"type": "ephemeral"}}]


@dataclass
class Rig:
    sim: AnthropicSim
    proxy: RecordingProxy
    warmer: KeepWarmer
    store: Store
    client: anthropic.Anthropic
    said: list[str]
    lines: list[str]
    messages: list[dict[str, Any]] = field(default_factory=list)
    calls: int = 0

    def ask(self, text: str) -> int:
        """One agent call (the history grows append-only); its cache reads."""
        self.messages.append({"role": "user", "content": text})
        r = self.client.messages.create(model=MODEL, max_tokens=64, system=SYSTEM, messages=self.messages)
        self.messages.append({"role": "assistant", "content": r.content[0].text})  # type: ignore[union-attr]
        self.calls += 1
        self.settle()
        return r.usage.cache_read_input_tokens or 0

    def settle(self) -> None:
        assert self.proxy.recorder.wait_idle(30, at_least=self.calls + self.warmer.sent)


@pytest.fixture
def rig(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Rig]:
    options: dict[str, Any] = getattr(request, "param", {})
    with AnthropicSim(respond=lambda _b: [{"type": "text", "text": "noted"}], minimum=50) as sim:
        store = Store(tmp_path / "kw.db")
        said: list[str] = []
        lines: list[str] = []
        warmer = KeepWarmer(clock=sim.clock.now, printer=said.append, **options)
        config = ProxyConfig(upstream=sim.url, clock=sim.clock.now, keep_headers=True)
        with RecordingProxy.start(config, store, printer=lines.append, observer=warmer.observe) as proxy:
            warmer.attach(proxy.recorder)
            client = anthropic.Anthropic(base_url=proxy.url, api_key=KEY, max_retries=0)
            try:
                yield Rig(sim, proxy, warmer, store, client, said, lines)
            finally:
                client.close()
                warmer.stop()
        store.close()


def _db_bytes(store: Store) -> bytes:
    assert store.path is not None
    return b"".join(Path(f"{store.path}{s}").read_bytes() for s in ("", "-wal") if Path(f"{store.path}{s}").exists())


def test_a_refresh_before_expiry_keeps_the_next_call_a_hit(rig: Rig) -> None:
    assert rig.ask("first question") == 0  # written
    rig.sim.clock.advance(250)
    assert rig.warmer.tick() == 0  # not due yet: 30 s before the 5-minute TTL ends
    rig.sim.clock.advance(25)
    assert rig.warmer.tick() == 1
    rig.settle()
    refresh = rig.sim.requests[-1]
    assert refresh["max_tokens"] == 1 and refresh["messages"] == rig.messages[:1] and "stream" not in refresh
    agent, sent = rig.sim.headers[0], rig.sim.headers[-1]
    auth = ("x-api-key", "authorization", "anthropic-version")
    assert [sent.get(h) for h in auth] == [agent.get(h) for h in auth]  # the client's own key, carried by the refresh
    assert any(KEY in v for v in sent.values())
    assert rig.sim.responses[-1]["usage"]["cache_read_input_tokens"] > 0
    assert "refreshed" in rig.said[-1] and "s before they expire" in rig.said[-1] and "$" in rig.said[-1]
    rig.sim.clock.advance(275)  # 550 s after the first call: expired, had nothing renewed it
    assert rig.ask("second question") > 0
    rig.sim.clock.advance(301)  # the control: an idle gap past the TTL with no refresh misses
    assert rig.ask("third question") == 0
    (session,) = proxy_sessions(rig.store)  # the refresh is placed in the agent's session
    records = proxy_session_requests(rig.store, session["id"])
    audits = [r["proxy"]["audit"] for r in records]
    assert [a.get("keep_warm", False) for a in audits] == [False, True, False, False]
    assert audits[1]["cause"] == "keep_warm"
    # the refresh is no turn of the agent's: its next call is compared with its previous one
    # (not with the refresh's max_tokens 1, which would make it a false options_changed)
    assert [a["cause"] for a in audits] == ["first", "keep_warm", "append", "append"]
    (shown,) = from_proxy(rig.store, session["id"]).sessions  # the report: its cost, not a call
    assert (len(shown.calls), len(shown.refreshes)) == (3, 1) and shown.refresh_tokens > 0
    assert len(rig.lines) == 3  # the proxy's line per agent call; the refresh is keep-warm's own line
    assert KEY.encode() not in _db_bytes(rig.store)  # the key went upstream, never into the store
    # wrap's summary at exit counts the refresh in $ spent, and says so
    from ctxwright.cache.prices import Pricing
    from ctxwright.cli.wrap import summarize

    pricing = Pricing()
    data = from_proxy(rig.store, session["id"], pricing=pricing)
    refresh_cost = shown.refreshes[0].priced(pricing)
    calls_cost = [c.priced(pricing) for c in shown.calls]
    assert refresh_cost is not None and all(c is not None for c in calls_cost)
    money = summarize(data, pricing)[1]
    total = refresh_cost.cost + sum(c.cost for c in calls_cost if c is not None)
    assert money.startswith(f"${total:.4f} spent (of it ${refresh_cost.cost:.4f} on 1 keep-warm refresh)"), money


@pytest.mark.parametrize("rig", [{"max_refreshes": 2}], indirect=True)
def test_the_refreshes_per_session_are_capped(rig: Rig) -> None:
    rig.ask("first question")
    sent = []
    for _ in range(4):
        rig.sim.clock.advance(270)
        sent.append(rig.warmer.tick())
    assert sent == [1, 1, 0, 0]
    assert rig.said[-1].endswith("refresh 2 of at most 2") and len(rig.said) == 2
    assert rig.warmer.next_at() is None
    rig.ask("second question")  # a new idle period: the session's refreshes stay spent
    rig.sim.clock.advance(270)
    assert rig.warmer.tick() == 0 and "its 2 refreshes are spent" in rig.said[-1]
    rig.settle()
    assert len(rig.sim.requests) == 4  # two agent calls and two refreshes


@pytest.mark.parametrize("rig", [{"max_idle_s": 400.0}], indirect=True)
def test_no_refresh_past_the_idle_horizon(rig: Rig) -> None:
    rig.ask("first question")
    rig.sim.clock.advance(270)
    assert rig.warmer.tick() == 1
    assert rig.warmer.next_at() is None  # the next would renew the entry past 400 s idle
    rig.sim.clock.advance(270)
    assert rig.warmer.tick() == 0


@pytest.mark.parametrize(
    "rig",
    [
        {"pricing": Pricing(flat=ModelPrice.flat(3.0, 3.0, 15.0))},  # a read costs what a write does
        {"pricing": Pricing(table=PriceTable(rows=()))},  # no price for the model
    ],
    indirect=True,
)
def test_nothing_is_refreshed_when_it_would_not_pay(rig: Rig) -> None:
    rig.ask("first question")
    rig.sim.clock.advance(275)
    assert rig.warmer.tick() == 0
    assert rig.warmer.tick() == 0  # said once, not again
    assert len(rig.sim.requests) == 1
    (line,) = rig.said
    assert "costs more than the rewrite it saves" in line or "no price for claude-sonnet-4-5" in line
    rig.ask("second question")  # the agent's next call starts a new idle period: decided again
    rig.sim.clock.advance(275)
    assert rig.warmer.tick() == 0 and len(rig.said) == 2


def test_the_thread_refreshes_when_due(rig: Rig) -> None:
    rig.warmer.start()
    rig.ask("first question")
    rig.sim.clock.advance(275)
    rig.warmer.wake()
    deadline = time.monotonic() + 30
    while rig.warmer.sent < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert rig.warmer.sent == 1 and rig.sim.requests[-1]["max_tokens"] == 1


def test_the_refresh_shape_follows_the_request() -> None:
    one_hour = {"type": "ephemeral", "ttl": "1h"}
    body: dict[str, Any] = {"system": [{"type": "text", "text": "s", "cache_control": one_hour}], "messages": []}
    assert shortest_ttl_s(body) == 3600.0
    body["messages"] = [
        {"role": "user", "content": [{"type": "text", "text": "q", "cache_control": {"type": "ephemeral"}}]}
    ]
    assert shortest_ttl_s(body) == 300.0  # the 5-minute entry expires first
    assert refresh_output_tokens({"thinking": {"type": "enabled", "budget_tokens": 2048}}) == 2049
    assert refresh_output_tokens({}) == 1


def test_wrap_passes_keep_warm_to_its_proxy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from ctxwright.cli.main import main

    made: list[KeepWarmer] = []
    start = KeepWarmer.start

    def recorded_start(self: KeepWarmer) -> KeepWarmer:
        made.append(self)
        return start(self)

    monkeypatch.setattr(KeepWarmer, "start", recorded_start)

    assert main(["wrap", "--keep-warm", "--keep-warm-idle", "0", "--", sys.executable, "-c", "pass"]) == 2
    assert "--keep-warm-idle 0: give minutes above 0" in capsys.readouterr().err
    log = tmp_path / "wrap.log"
    argv = ["wrap", "--keep-warm", "--upstream", "http://127.0.0.1:9", "--db", str(tmp_path / "w.db")]
    argv += ["--log", str(log), "--report", str(tmp_path / "r.html"), "--", sys.executable, "-c", "pass"]
    assert main(argv) == 0
    (warmer,) = made  # wrap's proxy kept warm, with the bounds' defaults; stopped at the agent's exit
    assert warmer.max_refreshes == 6 and warmer._stopped.is_set() and not warmer._sessions
    assert "keep-warm" not in log.read_text()  # no call, nothing to keep warm: nothing said


@pytest.mark.slow
def test_ctxwright_proxy_keep_warm_serves_and_records(tmp_path: Path) -> None:
    """The command as a user starts it: the held headers, the observer beside the recorder's
    line and the refresh thread are wired in and stopped cleanly (a refresh itself is 4.5
    minutes away in real time: the tests above move the simulator's clock instead)."""
    import signal
    import subprocess

    from ports import free_port, wait_listening

    port, db = free_port(), tmp_path / "cli.db"
    src = str(Path(__file__).resolve().parents[1] / "src")
    with AnthropicSim(respond=lambda _b: [{"type": "text", "text": "noted"}], minimum=50) as sim:
        cmd = [sys.executable, "-m", "ctxwright.cli.main", "proxy", "--keep-warm", "--port", str(port)]
        cmd += ["--anthropic-upstream", sim.url, "--db", str(db)]
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": src}
        )
        try:
            wait_listening(port, proc, 60, "the proxy")
            client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key=KEY, max_retries=0)
            r = client.messages.create(
                model=MODEL, max_tokens=16, system=SYSTEM, messages=[{"role": "user", "content": "hello"}]
            )
            assert r.usage.cache_creation_input_tokens
            client.close()
        finally:
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert " #0 " in out and "first" in out and "1 exchange(s) recorded" in out
    store = Store(db)
    try:
        assert len(proxy_sessions(store)) == 1
        assert KEY.encode() not in _db_bytes(store)
    finally:
        store.close()
