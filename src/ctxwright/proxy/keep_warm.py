"""``ctxwright proxy --keep-warm``: refresh a proxied session's cached prefix just before its TTL
ends, while the agent is idle, when the price table says the refresh costs less than the
rewrite it saves.

Provider behaviour protected (Anthropic prompt caching, platform.claude.com/docs/en/build-with-claude/prompt-caching):
a cache entry lives 5 minutes -- 1 hour when its breakpoint asks ``"ttl": "1h"`` -- and each
use of the cached content refreshes that lifetime at no additional charge. An agent that pauses longer (a human reading, a slow tool) comes back to an empty cache
and pays the whole prefix again as a cache write (1.25x the input price for 5 minutes, 2x for
an hour) instead of a read (0.1x). Re-sending the session's last request unchanged with
``max_tokens`` 1 is a read of the whole prefix that renews the entry: what it costs (the read,
the tokens after the last breakpoint at the input price, one output token) against what the
next call would otherwise pay more (``cache/expiry.py: expiry_cost``: the rewrite less the read)
decides, per refresh, whether it is sent. The timing and the bounds are ``cache/expiry.py:
KeepWarm`` (the harness's ``--keep-warm`` uses the same rule): sent ``margin_s`` before the
entry expires, at most ``max_refreshes`` per session and never once the session has been idle
``max_idle_s`` -- an abandoned session stops paying. A model the price table does not know is
not kept warm (no price, no decision).

Only Anthropic Messages calls are kept warm: OpenAI documents no TTL a refresh could be timed
by (an entry lives 5-10 minutes idle, up to an hour off-peak), and its reasoning models bill
hidden reasoning tokens a one-token answer cannot bound. A request with extended thinking is
refreshed with ``max_tokens`` one above its thinking budget (Anthropic refuses less, and a
changed thinking budget would invalidate the cached messages); that output is priced in.

**The key.** The proxy records no header. A refresh must carry the client's own
``x-api-key`` / ``Authorization`` and ``anthropic-version`` / ``anthropic-beta``, so with
``--keep-warm`` each Anthropic request's forwarded headers are kept on its exchange in memory
(``ProxyConfig.keep_headers``), and here for the last call of at most :data:`MAX_SESSIONS`
sessions: never written to the store, the recovery spool, a log or a printed line, and gone
when the proxy stops.

Each refresh is recorded in the store as a call of its session, marked (``audit.cause`` and
``audit.keep_warm``, ``cache/expiry.py: KEEP_WARM``) so what it cost is counted and it is never
taken for the agent's call, and announced in one line.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from ctxwright.audit.provider_log import provider_raw
from ctxwright.cache.expiry import KeepWarm, expiry_cost
from ctxwright.cache.prices import ModelPrice, Pricing, call_cost
from ctxwright.core.usage import CacheUsage, read_cache_usage
from ctxwright.proxy.recorder import RecordedExchange
from ctxwright.proxy.server import DEFAULT_RECORD_CAP, Capture, Exchange

#: sessions whose last request (and its headers) is held for a refresh; the least recently
#: used beyond it is dropped (memory: one request body each)
MAX_SESSIONS = 8
#: refreshes per session, in all (``--keep-warm-max``)
MAX_REFRESHES = 6
#: the longest idle time a session is kept warm through, in seconds (``--keep-warm-idle``)
MAX_IDLE_S = 1800.0
#: how long before the entry's expiry a refresh is sent
MARGIN_S = 30.0
#: the longest the thread sleeps between two looks (a refresh due sooner wakes it sooner)
POLL_S = 30.0
#: headers not sent again: the refresh's body is new, plain JSON
_DROP = frozenset({b"content-length", b"content-encoding"})


def shortest_ttl_s(body: dict[str, Any]) -> float:
    """Seconds the first of the request's cache entries lives: 300 unless every breakpoint asks
    ``"ttl": "1h"`` (a 5-minute entry after a 1-hour one expires first, and the next call would
    rewrite everything after it)."""
    blocks: list[Any] = list(body.get("tools") or [])
    system = body.get("system")
    blocks.extend(system if isinstance(system, list) else [])
    for m in body.get("messages") or ():
        content = m.get("content") if isinstance(m, dict) else None
        blocks.extend(content if isinstance(content, list) else [])
    ttls = [
        b["cache_control"].get("ttl")
        for b in blocks
        if isinstance(b, dict) and isinstance(b.get("cache_control"), dict)
    ]
    return 3600.0 if ttls and all(t == "1h" for t in ttls) else 300.0


def refresh_output_tokens(body: dict[str, Any]) -> int:
    """``max_tokens`` of a refresh: 1, or one above an extended-thinking budget (Anthropic
    requires ``budget_tokens`` below ``max_tokens``)."""
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        budget = thinking.get("budget_tokens")
        if isinstance(budget, int) and not isinstance(budget, bool) and budget > 0:
            return budget + 1
    return 1


@dataclass(frozen=True)
class RefreshPrice:
    """A refresh priced before it is sent: ``refresh_usd`` (the prefix read, the tail at the
    input price, the output at most) against ``saved_usd`` (what the next call would pay more
    for rewriting the prefix than for reading it)."""

    refresh_usd: float
    saved_usd: float

    @property
    def pays(self) -> bool:
        return self.refresh_usd < self.saved_usd


def refresh_price(prefix: int, tail: int, output: int, ttl_s: float, price: ModelPrice) -> RefreshPrice:
    """:class:`RefreshPrice` of refreshing ``prefix`` cached tokens (``tail`` after them)."""
    refresh = call_cost(CacheUsage(uncached_input=tail, cache_read=prefix, output=output), price)
    saved = expiry_cost(prefix, "1h" if ttl_s > 300 else "5m", price).extra_usd
    return RefreshPrice(refresh, saved)


@dataclass
class _Warm:
    """What a session's next refresh re-sends, and its plan. ``headers`` hold the key: memory only."""

    session_id: str
    body: dict[str, Any]
    headers: list[tuple[bytes, bytes]]
    path: str
    upstream: str
    session_header: str | None
    model: str
    prefix: int
    tail: int
    plan: KeepWarm
    total: int = 0
    #: said for this idle period (a decline, the cap): not said again until the next call
    quiet: bool = False


class KeepWarmer:
    """Sends the refreshes of ``ctxwright proxy --keep-warm``.

    :meth:`observe` is the recorder's observer (``proxy/recorder.py``: each recorded call, on
    its thread); :meth:`attach` gives it the recorder its refreshes are recorded by;
    :meth:`start` runs :meth:`tick` on a thread of its own until :meth:`stop`. ``clock`` is the
    proxy's (``ProxyConfig.clock``: a test passes its simulator's, then calls :meth:`tick`);
    ``printer`` receives the one line per refresh or decision; ``pricing`` decides.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        pricing: Pricing | None = None,
        printer: Callable[[str], None] = print,
        max_refreshes: int = MAX_REFRESHES,
        max_idle_s: float = MAX_IDLE_S,
        margin_s: float = MARGIN_S,
        max_sessions: int = MAX_SESSIONS,
        timeout: float = 600.0,
        record_cap: int = DEFAULT_RECORD_CAP,
    ) -> None:
        if max_refreshes < 1 or not 0 < max_idle_s < float("inf"):
            raise ValueError("keep-warm needs at least one refresh and a finite idle time above 0")
        self.clock = clock
        self.pricing = pricing if pricing is not None else Pricing()
        self.printer = printer
        self.max_refreshes = max_refreshes
        self.max_idle_s = max_idle_s
        self.margin_s = margin_s
        self.max_sessions = max(1, max_sessions)
        self.record_cap = record_cap
        self.submit: Callable[[Exchange], None] | None = None
        self.sent = 0
        self.spent_usd = 0.0
        self._sessions: OrderedDict[str, _Warm] = OrderedDict()
        self._lock = threading.Lock()
        self._wake = threading.Condition()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._http = httpx.Client(timeout=timeout, follow_redirects=False)

    def attach(self, recorder: Any) -> None:
        """Record refreshes through ``recorder`` (its ``submit``): the relay's own recorder, so
        they are placed, audited and written in order with the agent's calls."""
        self.submit = recorder.submit

    # -- the recorder's side -----------------------------------------------------------------
    def observe(self, rec: RecordedExchange) -> None:
        """A recorded call: an Anthropic Messages call that used the cache (re)starts its
        session's idle period; anything else is left alone."""
        ex = rec.exchange
        if ex.keep_warm or rec.api != "anthropic_messages" or ex.headers is None or ex.upstream is None:
            return
        if ex.status != 200 or ex.outcome != "complete" or not isinstance(rec.request, dict):
            return
        raw = provider_raw({"request": rec.request, "response": rec.response}, rec.request)
        if raw is None or raw.get("provider") != "anthropic":
            return
        u = read_cache_usage("anthropic", raw["usage"])
        prefix = u.cache_read + u.cache_write
        with self._lock:
            if prefix <= 0:  # nothing cached: nothing to keep warm
                self._sessions.pop(rec.session_id, None)
                return
            old = self._sessions.pop(rec.session_id, None)
            ttl_s = shortest_ttl_s(rec.request)
            plan = KeepWarm(ttl_s=ttl_s, margin_s=self.margin_s, max_refreshes=self.max_refreshes,
                            max_idle_s=self.max_idle_s, clock=self.clock)  # fmt: skip
            plan.used(ex.started_at, ttl_s=ttl_s)
            model = rec.request.get("model")
            self._sessions[rec.session_id] = _Warm(
                rec.session_id,
                rec.request,
                [(k, v) for k, v in ex.headers if k.lower() not in _DROP],
                ex.path,
                ex.upstream,
                ex.session_header,
                model if isinstance(model, str) else "",
                prefix,
                u.uncached_input,
                plan,
                total=old.total if old is not None else 0,
            )
            while len(self._sessions) > self.max_sessions:
                self._sessions.popitem(last=False)
        with self._wake:
            self._wake.notify_all()

    # -- the refreshes ------------------------------------------------------------------------
    def next_at(self) -> float | None:
        """When the next refresh of any session is due (``None``: none is planned)."""
        with self._lock:
            times = [at for w in self._sessions.values() if not w.quiet and (at := w.plan.next_at()) is not None]
        return min(times, default=None)

    def tick(self, now: float | None = None) -> int:
        """Send every refresh due now; how many were sent."""
        t = self.clock() if now is None else now
        with self._lock:
            due = [w for w in self._sessions.values() if not w.quiet and w.plan.due(t)]
        return sum(self._refresh(w, t) for w in due)

    def _say(self, w: _Warm, text: str, *, once: bool = False) -> None:
        if once:
            w.quiet = True  # until the session's next call
        self.printer(f"ctxwright keep-warm: session {w.session_id}: {text}")

    def _refresh(self, w: _Warm, now: float) -> bool:
        """Price one refresh, send it if it pays, record it, say it; whether it was sent."""
        if w.total >= self.max_refreshes:
            self._say(w, f"not refreshed: its {self.max_refreshes} refreshes are spent (--keep-warm-max)", once=True)
            return False
        price = self.pricing.price("anthropic", w.model)
        if price is None:
            self._say(w, f"not kept warm: the price table has no price for {w.model or 'its model'}", once=True)
            return False
        output = refresh_output_tokens(w.body)
        rp = refresh_price(w.prefix, w.tail, output, w.plan.ttl_s, price)
        if not rp.pays:
            self._say(
                w,
                f"not refreshed: a refresh (${rp.refresh_usd:.4f}) costs more than the rewrite it saves "
                f"(${rp.saved_usd:.4f})",
                once=True,
            )
            return False
        left = max(0.0, (w.plan.last_used_at or now) + w.plan.ttl_s - now)
        body = {k: v for k, v in w.body.items() if k != "stream"}
        body["max_tokens"] = output
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        ex = Exchange(
            method="POST",
            path=w.path,
            started_at=now,
            t0=time.perf_counter(),
            request=Capture(self.record_cap),
            request_content_type="application/json",
            request_encoding=None,
            session_header=w.session_header,
            response=Capture(self.record_cap),
            upstream=w.upstream,
            keep_warm=True,
        )
        ex.request.add(data)
        answer: dict[str, Any] | None = None
        try:
            r = self._http.post(w.upstream.rstrip("/") + w.path, content=data, headers=w.headers)
            ex.status = r.status_code
            ex.response_content_type = r.headers.get("content-type")
            ex.response.add(r.content)  # decoded by httpx: recorded as plain JSON
            with contextlib.suppress(ValueError):
                answer = r.json()
        except httpx.HTTPError as exc:
            ex.outcome, ex.error = "upstream_broken", f"keep-warm refresh failed ({type(exc).__name__})"
        ex.total_ms = (time.perf_counter() - ex.t0) * 1000
        ex.ended_at = now + ex.total_ms / 1000
        if self.submit is not None:
            self.submit(ex)
        usage = answer.get("usage") if isinstance(answer, dict) else None
        if ex.status != 200 or not isinstance(usage, dict):
            why = ex.error or f"HTTP {ex.status}"
            self._say(w, f"refresh failed ({why}); not tried again until the session's next call", once=True)
            return False
        u = read_cache_usage("anthropic", usage)
        cost = call_cost(u, price)
        with self._lock:
            w.plan.refreshed(now)
            w.total += 1
            self.sent += 1
            self.spent_usd += cost
        self._say(
            w,
            f"refreshed {u.cache_read:,} cached tokens {left:.0f} s before they expire, for ${cost:.4f} "
            f"(rewriting them would cost ${rp.saved_usd:.4f} more); refresh {w.total} of at most {self.max_refreshes}",
        )
        return True

    # -- the thread -----------------------------------------------------------------------------
    def start(self) -> KeepWarmer:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ctxwright-keep-warm", daemon=True)
            self._thread.start()
        return self

    def wake(self) -> None:
        """Look again now (a test that moved its clock)."""
        with self._wake:
            self._wake.notify_all()

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                self.tick()
            except Exception as exc:  # a refresh must never take the proxy down
                self.printer(f"ctxwright keep-warm: stopped: {type(exc).__name__}: {exc}")
                return
            at = self.next_at()
            delay = POLL_S if at is None else min(POLL_S, max(0.05, at - self.clock()))
            with self._wake:
                if not self._stopped.is_set():
                    self._wake.wait(delay)

    def stop(self) -> None:
        """End the thread, forget every held request and header."""
        self._stopped.set()
        self.wake()
        if self._thread is not None:
            self._thread.join(10)
        with self._lock:
            self._sessions.clear()
        self._http.close()


__all__ = [
    "MAX_IDLE_S",
    "MAX_REFRESHES",
    "MAX_SESSIONS",
    "KeepWarmer",
    "RefreshPrice",
    "refresh_output_tokens",
    "refresh_price",
    "shortest_ttl_s",
]
