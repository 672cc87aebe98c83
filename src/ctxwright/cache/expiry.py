"""When a provider's cache entry expires, what an expiry costs, which TTL a session should
ask for, and when to refresh an entry before it expires.

Provider behaviour protected (Anthropic prompt caching, public docs): an entry lives for its
TTL -- 5 minutes by default, 1 hour on request -- from its last write *or read*: every hit
renews it at no extra charge. A call after a longer idle gap finds nothing and re-writes the
whole prefix at the write price (1.25x the input price for 5 minutes, 2x for 1 hour) instead
of reading it at 0.1x: one six-minute pause costs ~12x the read it replaced. OpenAI keeps an
entry in memory for 5-10 minutes of inactivity (up to an hour off-peak) or, with extended
retention, 24 hours; its writes cost the input price.

* :func:`cache_state` -- when the cache was last used (the previous calls' ``sent_at``), its
  age and the time left;
* :func:`expiry_cost` -- what the re-write cost against what a read would have cost;
* :func:`choose_ttl` -- ``--cache-ttl auto``: 5m or 1h from the idle gaps seen so far, by
  expected cost (a 1h write costs 2x rather than 1.25x, and pays off once gaps between 5 and
  60 minutes are likely);
* :class:`KeepWarm` -- ``--keep-warm``: when to re-send the last request (``max_tokens=1``,
  identical bytes: a full cache read that renews the TTL) before the entry expires, bounded by
  a number of refreshes and a longest idle time, so an abandoned session stops paying.

Prices are read through one function, :func:`price_of`, from the session's
:class:`~ctxwright.cache.prices.Pricing` (the built-in table, a ``--prices`` file laid over it,
or the ``--price-*`` flags): the same object that prices each call, so an expiry and a TTL
choice are priced exactly as the call's cost is. Every other function takes the price as an
argument.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ctxwright.cache.prices import Pricing
from ctxwright.cache.reported import Reported

#: ``audit.cause`` (and ``audit.cache.cause``) of a keep-warm refresh's call record.
KEEP_WARM = "keep_warm"
#: TTL names -> seconds (Anthropic's two; OpenAI's retention names).
TTL_SECONDS: dict[str, float] = {"5m": 300.0, "1h": 3600.0, "in_memory": 300.0, "30m": 1800.0, "24h": 86400.0}


class Price(Protocol):
    """The parts of ``cache/prices.py: ModelPrice`` these rules read (USD per million tokens)."""

    @property
    def input(self) -> float: ...
    @property
    def cached_read(self) -> float: ...
    @property
    def cache_write_5m(self) -> float: ...
    @property
    def cache_write_1h(self) -> float: ...


def price_of(provider: str | None, model: str | None, pricing: Pricing | None = None) -> Price | None:
    """The model's price by ``pricing`` (the session's; the built-in table when ``None``),
    ``None`` when it has none: the one place this module reads prices."""
    return (pricing if pricing is not None else Pricing()).price(provider, model)


@dataclass(frozen=True)
class CacheState:
    """The provider's cache entry as of ``now``: last used ``age_s`` ago, ``ttl_s`` long."""

    last_used_at: float
    ttl_s: float
    now: float

    @property
    def age_s(self) -> float:
        return max(0.0, self.now - self.last_used_at)

    @property
    def left_s(self) -> float:
        """Seconds before the entry expires (0 once it has)."""
        return max(0.0, self.ttl_s - self.age_s)

    @property
    def expired(self) -> bool:
        return self.age_s > self.ttl_s

    def to_json(self) -> dict[str, float]:
        return {"age_s": round(self.age_s, 3), "ttl_s": self.ttl_s, "left_s": round(self.left_s, 3)}


def touched(r: Reported) -> bool:
    """The call wrote or read the cache (each renews the entry's TTL). OpenAI reports no
    writes: every prompt it caches is written, so an unknown write counts as one."""
    t = r.tokens
    if (t.cache_read or 0) > 0:
        return True
    if t.cache_write is None:
        return r.known
    return t.cache_write > 0


def cache_state(history: Sequence[Reported], now: float) -> CacheState | None:
    """The cache as of ``now`` after the calls of ``history`` (oldest first, keep-warm
    refreshes included): last used at the latest ``sent_at`` of a call that read or wrote it,
    with that call's TTL. ``None`` when no call used it or none recorded when."""
    for r in reversed(history):
        if r.sent_at is not None and touched(r):
            ttl = r.ttl_s if r.ttl_s is not None else TTL_SECONDS.get(r.ttl or "")
            if ttl is None:
                return None
            return CacheState(r.sent_at, ttl, now)
    return None


@dataclass(frozen=True)
class ExpiryCost:
    """An expiry priced: ``tokens`` re-written at ``write_usd`` where a read would have cost
    ``read_usd``; ``extra_usd`` is what the expiry cost."""

    tokens: int
    write_usd: float
    read_usd: float

    @property
    def extra_usd(self) -> float:
        return self.write_usd - self.read_usd

    def to_json(self) -> dict[str, float | int]:
        return {
            "tokens": self.tokens,
            "write_usd": round(self.write_usd, 6),
            "read_usd": round(self.read_usd, 6),
            "extra_usd": round(self.extra_usd, 6),
        }


def write_rate(price: Price, ttl: str | None) -> float:
    """USD per million tokens written with that TTL (1h: its own rate; any other: 5m's)."""
    return price.cache_write_1h if ttl == "1h" else price.cache_write_5m


def expiry_cost(tokens: int, ttl: str | None, price: Price) -> ExpiryCost:
    """What re-writing ``tokens`` after an expiry cost, against reading them."""
    return ExpiryCost(tokens, tokens * write_rate(price, ttl) / 1e6, tokens * price.cached_read / 1e6)


def ttl_costs(gaps: Iterable[float], price: Price) -> dict[str, float]:
    """Cost per million prefix tokens of a session whose calls are ``gaps`` seconds apart, by
    TTL: one write, then per gap a read when within the TTL (a hit renews it), else a write."""
    gs = list(gaps)
    out: dict[str, float] = {}
    for ttl in ("5m", "1h"):
        w, limit = write_rate(price, ttl), TTL_SECONDS[ttl]
        out[ttl] = w + sum(price.cached_read if g <= limit else w for g in gs)
    return out


def choose_ttl(gaps: Iterable[float], price: Price | None) -> str:
    """``--cache-ttl auto``: the TTL whose expected cost over the observed idle gaps is lower;
    ``5m`` with no gaps or no price (the provider's default, the cheaper write)."""
    gs = list(gaps)
    if not gs or price is None:
        return "5m"
    costs = ttl_costs(gs, price)
    return "1h" if costs["1h"] < costs["5m"] else "5m"


@dataclass
class KeepWarm:
    """When to refresh the cache entry before it expires while the session is expected to
    continue.

    A refresh re-sends the last request with ``max_tokens=1``: identical bytes, so the
    provider reads the whole prefix (0.1x) and renews the TTL, instead of the next real call
    re-writing it (1.25x / 2x). It is sent ``margin_s`` before expiry. Bounds, so an
    abandoned session stops paying: at most ``max_refreshes`` refreshes per idle period, and
    none once the session has been idle ``max_idle_s`` (the refresh would renew past it).
    A real call (:meth:`used`) starts a new idle period."""

    ttl_s: float = 300.0
    margin_s: float = 30.0
    max_refreshes: int = 3
    max_idle_s: float = 1800.0
    clock: Callable[[], float] | None = None
    #: when the entry was last written or read (``None``: never: nothing to keep warm)
    last_used_at: float | None = None
    #: when the idle period started (the last real call)
    idle_since: float | None = None
    refreshes: int = 0

    def used(self, at: float, *, ttl_s: float | None = None) -> None:
        """A real call used the cache at ``at``: a new idle period."""
        self.last_used_at = self.idle_since = at
        self.refreshes = 0
        if ttl_s is not None:
            self.ttl_s = ttl_s

    def refreshed(self, at: float) -> None:
        """A refresh read the cache at ``at`` (renewing it)."""
        self.last_used_at = at
        self.refreshes += 1

    def next_at(self) -> float | None:
        """When the next refresh is due, ``None`` when none will be (bounds reached)."""
        if self.last_used_at is None or self.idle_since is None or self.refreshes >= self.max_refreshes:
            return None
        at = self.last_used_at + max(0.0, self.ttl_s - self.margin_s)
        if at - self.idle_since > self.max_idle_s:
            return None
        return at

    def due(self, now: float | None = None) -> bool:
        """A refresh should be sent now (not before its time, not after the entry expired:
        a late refresh would re-write the cache rather than renew it)."""
        t = self.now() if now is None else now
        at = self.next_at()
        return at is not None and self.last_used_at is not None and at <= t <= self.last_used_at + self.ttl_s

    def now(self) -> float:
        return (self.clock or time.time)()


class KeepWarmTimer:
    """A daemon thread that sends :class:`KeepWarm`'s refreshes while a harness is open
    between runs; :meth:`stop` (the harness's close) ends it.

    ``refresh`` sends one refresh and returns when it was sent (its ``sent_at``), or ``None``
    when it could not (then the timer stops: a failing backend is not retried in the
    background). ``wait(seconds)`` sleeps and returns ``True`` once stopped: a test passes one
    that advances a simulated clock instead of waiting."""

    def __init__(
        self,
        plan: KeepWarm,
        refresh: Callable[[], float | None],
        *,
        wait: Callable[[float], bool] | None = None,
        poll_s: float = 60.0,
    ) -> None:
        self.plan = plan
        self._refresh = refresh
        self._stop = threading.Event()
        self._wait = wait or self._stop.wait
        self._poll_s = poll_s
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.sent = 0

    def tick(self) -> bool:
        """Send a refresh if one is due now; ``True`` when one was sent."""
        with self._lock:
            if self._stop.is_set() or not self.plan.due():
                return False
            at = self._refresh()
            if at is None:
                self._stop.set()
                return False
            self.plan.refreshed(at)
            self.sent += 1
            return True

    def run(self) -> None:
        """The loop: wait until the next refresh is due (or ``poll_s`` when none is planned:
        a real call may plan one), send it, again, until stopped."""
        while not self._stop.is_set():
            at = self.plan.next_at()
            delay = self._poll_s if at is None else max(0.0, at - self.plan.now())
            if self._wait(delay) or self._stop.is_set():
                return
            self.tick()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self.run, name="ctxwright-keep-warm", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()


__all__ = [
    "KEEP_WARM",
    "TTL_SECONDS",
    "CacheState",
    "ExpiryCost",
    "KeepWarm",
    "KeepWarmTimer",
    "Price",
    "cache_state",
    "choose_ttl",
    "expiry_cost",
    "price_of",
    "touched",
    "ttl_costs",
    "write_rate",
]
