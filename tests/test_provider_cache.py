"""The provider's cache in a live session: each call's fused verdict stored with its audit,
the expiry priced, the keep-warm refresh recorded as cost and never as a trajectory request.

The backend here is a small in-process stand-in that answers in Anthropic's documented usage
shape (``input_tokens`` + ``cache_read_input_tokens`` + ``cache_creation_input_tokens``) and
``Usage.raw`` layout, with a simulated clock: an entry lives ``ttl_s`` from its last write or
read. (The loopback simulator of the Messages API, driven through the SDK, is
``tests/providers/anthropic_sim.py``.)"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from ctxwright import Harness
from ctxwright.agent.provider_cache import is_keep_warm
from ctxwright.backends.base import Backend
from ctxwright.core.events import AssistantEvent
from ctxwright.core.messages import Message, Usage
from ctxwright.core.request import ChatRequest, Completion
from ctxwright.store.sessions import Store


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


class CachingBackend(Backend):
    """Caches the prompt up to the end of each request (one breakpoint at the end) for ``ttl_s``."""

    name = "anthropic-standin"

    def __init__(self, clock: Clock, ttl_s: float = 300.0) -> None:
        self.model = "claude-standin"
        self.clock = clock
        self.ttl_s = ttl_s
        self.entries: dict[bytes, float] = {}  # prefix bytes -> last used
        self.requests: list[ChatRequest] = []

    def complete(self, request: ChatRequest, *, on_event: Any = None) -> Completion:
        self.requests.append(request)
        now = self.clock()
        body = b"".join(m.canonical_utf8 for m in request.messages)
        total = max(1, len(body) // 4) + 2000  # a 2,000-token system/tools prefix
        read = 0
        for prefix, used in list(self.entries.items()):
            if body.startswith(prefix) and now - used <= self.ttl_s:
                read = max(read, len(prefix) // 4 + 2000)
                self.entries[prefix] = now  # a read renews the entry
        write = total - read
        self.entries[body] = now
        usage = {
            "input_tokens": 0,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write,
            "output_tokens": 1,
        }
        raw = {
            "provider": "anthropic",
            "response_id": f"msg_{len(self.requests)}",
            "usage": usage,
            "cache": {
                "ttl": "5m",
                "ttl_s": self.ttl_s,
                "breakpoints": [{"block": len(request.messages), "tokens": total}],
                "minimum_tokens": 1024,
                "routing_key": None,
                "prefix_tokens": 2000,
                "sent_at": now,
            },
        }
        u = Usage(prompt_tokens=total, completion_tokens=1, cached_tokens=read, raw=raw)
        return Completion(Message(role="assistant", content="ok"), u, "stop", self.model)


def _calls(db: Path, sid: str) -> list[Any]:
    store = Store(db)
    try:
        return store.calls(sid)
    finally:
        store.close()


def test_each_call_carries_the_fused_verdict_and_an_expiry_is_priced(tmp_path: Path) -> None:
    clock = Clock()
    backend = CachingBackend(clock)
    db = tmp_path / "s.db"
    with Harness(backend=backend, db=db, system="You help.", status=False) as h:
        h.run("first question")
        clock.t += 60
        h.run("second question")
        clock.t += 400  # idle longer than the 5-minute TTL
        h.run("third question")
        sid = h.session_id
    calls = _calls(db, sid)
    causes = [c.audit.raw["cache"]["cause"] for c in calls]
    assert causes == ["first", "hit", "ttl_expired"]
    expired = calls[2].audit.raw["cache"]
    assert expired["age_s"] == 400.0 and expired["ttl_s"] == 300.0
    assert expired["gap_s"] == 400.0
    assert expired["expiry_cost"]["tokens"] > 2000
    assert "longer than its TTL of 5m00s" in expired["evidence"]


def test_keep_warm_refreshes_are_cost_not_trajectory(tmp_path: Path) -> None:
    clock = Clock()
    backend = CachingBackend(clock)
    db = tmp_path / "s.db"
    with Harness(backend=backend, db=db, system="You help.", status=False) as h:
        h.run("first question")
        assert h.context.provider_cache.timer is None  # keep_warm off: no timer
        clock.t += 270
        sent = h.keep_warm()
        assert sent == clock.t
        clock.t += 270
        h.run("second question")  # 540 s after the first call, 270 s after the refresh
        sid = h.session_id
        events = list(h.session.events)
    calls = _calls(db, sid)
    assert [c.audit.cause for c in calls] == ["first", "keep_warm", "append"]
    refresh = calls[1]
    assert is_keep_warm(dict(refresh.usage)) and refresh.max_tokens == 1
    assert refresh.cached_tokens == calls[0].prompt_tokens  # a full read of what the first call wrote
    assert calls[2].audit.raw["cache"]["cause"] == "hit"
    assert calls[2].audit.raw["cache"]["age_s"] == 270.0
    # the refresh's request is the last one unchanged but max_tokens
    assert backend.requests[1].messages == backend.requests[0].messages
    # its reply was never appended: two assistant replies for two runs
    assert sum(isinstance(e, AssistantEvent) for e in events) == 2


def test_the_timer_keeps_the_cache_warm_between_runs(tmp_path: Path) -> None:
    clock = Clock()
    backend = CachingBackend(clock)
    db = tmp_path / "s.db"
    stopped = threading.Event()

    def wait(seconds: float) -> bool:  # the timer's sleep, on the simulated clock
        clock.t += seconds
        if clock.t - 1_000_000.0 > 700:
            stopped.set()
            return True
        return False

    with Harness(backend=backend, db=db, system="You help.", status=False, keep_warm=True) as h:
        h.run("first question")
        cache = h.context.provider_cache
        assert cache.timer is not None and cache.timer.alive  # started after the run
        cache.stop_timer()
        timer = cache.start_timer(wait=wait)
        assert timer is not None
        assert stopped.wait(10)
        timer.stop()
        assert timer.sent == 2  # at 270 s and 540 s
        h.run("second question")
        sid = h.session_id
    assert not cache.timer or not cache.timer.alive  # close stopped it
    calls = _calls(db, sid)
    assert [c.audit.cause for c in calls] == ["first", "keep_warm", "keep_warm", "append"]
    assert calls[-1].audit.raw["cache"]["cause"] == "hit"


def test_a_backend_without_the_provider_layout_records_no_verdict(tmp_path: Path) -> None:
    from ctxwright.backends.scripted import ScriptedBackend

    db = tmp_path / "s.db"
    with Harness(backend=ScriptedBackend(["hi"]), db=db) as h:
        h.run("hello")
        assert h.keep_warm() is None  # nothing the provider caches
        sid = h.session_id
    (call,) = _calls(db, sid)
    assert "cache" not in call.audit.raw


def test_show_prints_age_ttl_the_fused_cause_and_the_expiry(tmp_path: Path, capsys: Any) -> None:
    from ctxwright.cli.main import main

    clock = Clock()
    backend = CachingBackend(clock)
    db = tmp_path / "s.db"
    with Harness(backend=backend, db=db, system="You help.", status=False) as h:
        h.run("first question")
        clock.t += 270
        h.keep_warm()
        clock.t += 60
        h.run("second question")
        clock.t += 400
        h.run("third question")
        sid = h.session_id
    capsys.readouterr()
    assert main(["--db", str(db), "show", sid]) == 0
    out = capsys.readouterr().out
    assert "age/TTL" in out
    assert "append · ttl_expired" in out
    assert "6m40s/5m00s" in out
    assert "call 3 provider cache: ttl_expired: bytes identical; idle 6m40s" in out
    assert "keep-warm refreshes: 1" in out
    assert "expiries: 1 (" in out
    assert main(["--db", str(db), "show", sid, "--wide"]) == 0
    wide = capsys.readouterr().out
    assert "provider" in wide and "ttl_expired" in wide and "keep_warm" in wide


def test_the_report_shows_the_provider_cache_and_counts_refreshes_as_cost(tmp_path: Path) -> None:
    from ctxwright.audit.compare import Prices
    from ctxwright.report import from_store, write_report

    clock = Clock()
    backend = CachingBackend(clock)
    db = tmp_path / "s.db"
    with Harness(backend=backend, db=db, system="You help.", status=False) as h:
        h.run("first question")
        clock.t += 270
        h.keep_warm()
        clock.t += 500
        h.run("second question")
        sid = h.session_id
    store = Store(db)
    try:
        data = from_store(store, sid)
    finally:
        store.close()
    (s,) = data.sessions
    assert [c.cache_cause for c in s.calls] == ["first", "ttl_expired"]  # the refresh is not a call
    assert len(s.refreshes) == 1 and s.refresh_tokens > 0
    prices = Prices(input=3.0, cached=0.3, output=15.0)
    assert s.cost(prices) == sum(c.cost(prices) for c in s.calls) + s.refreshes[0].cost(prices)
    assert s.refreshes[0].cost(prices) > 0
    page = write_report(data, tmp_path / "r.html", prices).read_text()
    assert "Provider cache" in page and "cache age / TTL" in page
    assert "Expiries: 1" in page and "Keep-warm refreshes: 1" in page
    assert "8m20s/5m00s" in page


class AutoTtlBackend(CachingBackend):
    """A stand-in with the Anthropic backend's ``--cache-ttl auto`` hook."""

    cache_ttl = "auto"

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock)
        self.ttl_for_call: Any = None


def test_cache_ttl_auto_picks_1h_once_pauses_of_minutes_are_seen(tmp_path: Path) -> None:
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Price:
        input: float = 3.0
        cached_read: float = 0.3
        cache_write_5m: float = 3.75
        cache_write_1h: float = 6.0

    clock = Clock()
    backend = AutoTtlBackend(clock)
    with Harness(backend=backend, db=tmp_path / "s.db", system="You help.", status=False) as h:
        assert backend.ttl_for_call is not None  # the context installed its choice
        h.context.provider_cache.price = Price()
        assert backend.ttl_for_call() == "5m"  # nothing seen yet: the provider's default
        h.run("one")
        clock.t += 30
        h.run("two")
        assert backend.ttl_for_call() == "5m"  # gaps within 5 minutes
        clock.t += 900
        h.run("three")
        assert backend.ttl_for_call() == "1h"  # a 15-minute pause: the 1-hour write pays off
