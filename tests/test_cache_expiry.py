"""Expiry rules (``cache/expiry.py``): cache age and time left, the cost of an expiry, the TTL
choice for ``--cache-ttl auto`` and the keep-warm plan, on a simulated clock."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxwright.cache.expiry import KeepWarm, KeepWarmTimer, cache_state, choose_ttl, expiry_cost, ttl_costs
from ctxwright.cache.reported import reported


@dataclass(frozen=True)
class P:
    """A price in the shape of ``cache/prices.py: ModelPrice`` (USD per million tokens)."""

    input: float = 3.0
    cached_read: float = 0.3
    cache_write_5m: float = 3.75
    cache_write_1h: float = 6.0
    output: float = 15.0


def raw(read: int, write: int, sent_at: float, ttl: str = "5m") -> dict[str, Any]:
    return {
        "provider": "anthropic",
        "usage": {"input_tokens": 5, "cache_read_input_tokens": read, "cache_creation_input_tokens": write},
        "cache": {"ttl": ttl, "ttl_s": {"5m": 300.0, "1h": 3600.0}[ttl], "sent_at": sent_at, "breakpoints": []},
    }


class Clock:
    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_cache_age_and_time_left_from_the_last_call_that_used_it() -> None:
    history = [reported(raw(0, 3000, 100.0)), reported(raw(3000, 0, 200.0)), reported({"usage": {}})]
    st_ = cache_state(history, now=260.0)
    assert st_ is not None
    assert (st_.age_s, st_.left_s, st_.expired) == (60.0, 240.0, False)
    late = cache_state(history, now=600.0)
    assert late is not None and late.expired and late.left_s == 0.0
    # a call that neither read nor wrote (below the minimum) did not renew the entry
    history.append(reported(raw(0, 0, 250.0)))
    again = cache_state(history, now=260.0)
    assert again is not None and again.last_used_at == 200.0
    assert cache_state([reported({})], now=1.0) is None


def test_an_expiry_costs_the_write_minus_the_read() -> None:
    c = expiry_cost(100_000, "5m", P())
    assert c.write_usd == pytest.approx(0.375) and c.read_usd == pytest.approx(0.03)
    assert c.extra_usd == pytest.approx(0.345)
    assert expiry_cost(100_000, "1h", P()).write_usd == pytest.approx(0.6)


def test_choose_ttl_by_expected_cost() -> None:
    assert choose_ttl([], P()) == "5m"
    assert choose_ttl([30.0] * 20, P()) == "5m"  # every gap within 5 minutes: the cheaper write
    assert choose_ttl([30.0] * 10 + [600.0, 900.0], P()) == "1h"  # two 10-15 minute pauses
    assert choose_ttl([7200.0] * 3, P()) == "5m"  # past an hour neither holds
    assert choose_ttl([600.0], None) == "5m"
    costs = ttl_costs([600.0], P())
    assert costs == {"5m": pytest.approx(7.5), "1h": pytest.approx(6.3)}


@given(gaps=st.lists(st.floats(0, 20_000, allow_nan=False), max_size=30))
def test_choose_ttl_never_picks_the_dearer(gaps: list[float]) -> None:
    costs = ttl_costs(gaps, P())
    assert costs[choose_ttl(gaps, P())] == min(costs.values())


def test_keep_warm_refreshes_before_expiry_within_bounds() -> None:
    plan = KeepWarm(ttl_s=300.0, margin_s=30.0, max_refreshes=2, max_idle_s=3600.0)
    assert plan.next_at() is None  # nothing written yet
    plan.used(1000.0)
    assert plan.next_at() == 1270.0
    assert not plan.due(1200.0) and plan.due(1270.0) and plan.due(1300.0)
    assert not plan.due(1301.0)  # expired: a refresh now would re-write, not renew
    plan.refreshed(1270.0)
    assert plan.next_at() == 1540.0
    plan.refreshed(1540.0)
    assert plan.next_at() is None  # at most two per idle period
    plan.used(2000.0)
    assert plan.next_at() == 2270.0  # a real call starts over


def test_keep_warm_stops_at_the_longest_idle() -> None:
    plan = KeepWarm(ttl_s=300.0, margin_s=30.0, max_refreshes=100, max_idle_s=600.0)
    plan.used(0.0)
    plan.refreshed(270.0)
    plan.refreshed(540.0)
    assert plan.next_at() is None  # 810 s would be past 600 s of idle


def test_the_timer_sends_due_refreshes_and_stops_on_close() -> None:
    clock = Clock(0.0)
    plan = KeepWarm(ttl_s=300.0, margin_s=30.0, max_refreshes=3, max_idle_s=3600.0, clock=clock)
    plan.used(0.0)
    sent: list[float] = []

    def refresh() -> float:
        sent.append(clock.t)
        return clock.t

    def wait(seconds: float) -> bool:  # a simulated sleep
        clock.t += seconds
        return clock.t > 2000.0

    timer = KeepWarmTimer(plan, refresh, wait=wait, poll_s=100.0)
    timer.run()  # in this thread: returns once wait says stopped
    assert sent == [270.0, 540.0, 810.0]
    assert timer.sent == 3

    threaded = KeepWarmTimer(KeepWarm(), lambda: None)
    threaded.start()
    assert threaded.alive
    threaded.stop()
    assert not threaded.alive


def test_a_failed_refresh_stops_the_timer() -> None:
    clock = Clock(270.0)
    plan = KeepWarm(clock=clock)
    plan.used(0.0)
    timer = KeepWarmTimer(plan, lambda: None, wait=lambda s: False)
    assert not timer.tick()
    timer.run()  # returns at once: stopped
    assert timer.sent == 0
