"""A live session's view of the provider's prompt cache: the fused verdict of each call, the
TTL choice for ``--cache-ttl auto`` and the keep-warm refresh.

Why in ``agent``: the verdict needs the byte audit (``audit/``) and the provider's report
(``cache/``) of this call and of the calls before it, and the refresh needs the backend and
the session -- the context holds all four. The rules themselves live in ``cache/``.

**The refresh.** Anthropic renews an entry's TTL on every read, so re-sending the session's
last request unchanged (identical bytes, ``max_tokens=1``) is a full cache read that keeps
the entry alive for another TTL. Its reply is discarded -- never appended to the trajectory
(the model would otherwise see a one-token answer it never gave) -- and the call is recorded
with ``usage.raw["keep_warm"] = true`` and ``audit.cause = "keep_warm"`` so the report and
``ctxwright show`` count what it cost without counting it as a request of the session.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from itertools import pairwise
from typing import Any

from ctxwright.audit.compare import AuditRow
from ctxwright.audit.live import cache_history, cache_record
from ctxwright.backends.base import Backend
from ctxwright.cache.expiry import KEEP_WARM, KeepWarm, KeepWarmTimer, Price, cache_state, choose_ttl, price_of
from ctxwright.cache.prices import Pricing
from ctxwright.cache.reported import Reported, reported
from ctxwright.core.messages import Usage
from ctxwright.core.request import ChatRequest
from ctxwright.core.session import Session


def wants_auto_ttl(backend: Backend) -> bool:
    """The backend was asked for ``--cache-ttl auto`` and takes a per-call TTL choice: the
    Anthropic backend's ``ttl="auto"`` with its ``ttl_for_call`` hook still free (a
    ``cache_ttl`` attribute names the same request on another backend)."""
    asked = getattr(backend, "ttl", None) == "auto" or getattr(backend, "cache_ttl", None) == "auto"
    return asked and hasattr(backend, "ttl_for_call") and getattr(backend, "ttl_for_call", False) is None


def is_keep_warm(usage: Any) -> bool:
    """A stored call's ``usage`` object is a keep-warm refresh's."""
    raw = usage.get("raw") if isinstance(usage, dict) else None
    return isinstance(raw, dict) and raw.get("keep_warm") is True


class ProviderCache:
    """The cache history of one live session and what it decides from it."""

    def __init__(
        self, session: Session, backend: Backend, *, keep_warm: bool = False, pricing: Pricing | None = None
    ) -> None:
        self.session = session
        self.backend = backend
        #: the session's prices (built-in table, ``--prices`` file, ``--price-*`` flags): the
        #: same object that prices each call prices its expiry and the TTL choice
        self.pricing = pricing if pricing is not None else Pricing()
        stored = session.store.calls(session.id) if session.store is not None and session.events else []
        self.history: list[Reported] = cache_history([dict(c.usage) for c in stored])
        self.last_request: ChatRequest | None = None
        clock: Callable[[], float] = getattr(backend, "clock", None) or time.time
        self.clock = clock
        self.plan: KeepWarm | None = KeepWarm(clock=clock) if keep_warm else None
        self.timer: KeepWarmTimer | None = None
        #: held by a run and by a refresh: one request to the backend at a time
        self.lock = threading.RLock()
        #: a fixed price for ``--cache-ttl auto`` and expiries; ``None``: :attr:`pricing`'s for the model
        self.price: Price | None = None

    # -- each call -------------------------------------------------------------------------
    def after_call(self, request: ChatRequest, row: AuditRow, usage: Usage) -> dict[str, Any] | None:
        """The fused verdict of a call just answered (``audit["cache"]``), and what the next
        refresh and TTL choice learn from it."""
        rec = cache_record(
            row, usage.raw, self.history, model=self.backend.model, price=self.price, pricing=self.pricing
        )
        now = reported(usage.raw)
        self.history.append(now)
        self.last_request = request
        if self.plan is not None and now.known:
            self.plan.used(now.sent_at if now.sent_at is not None else self.clock(), ttl_s=now.ttl_s)
        return rec

    def gaps(self) -> list[float]:
        """The idle gaps between the calls that used the cache, in seconds."""
        at = [r.sent_at for r in self.history if r.known and r.sent_at is not None]
        return [b - a for a, b in pairwise(at)]

    def choose_ttl(self) -> str:
        """``--cache-ttl auto``: 5m or 1h for the next call, from the gaps seen so far, priced
        by the session's :attr:`pricing` (before any call: the backend's own provider name)."""
        provider = next((r.provider for r in reversed(self.history) if r.provider), None) or self.backend.name
        price = self.price if self.price is not None else price_of(provider, self.backend.model, self.pricing)
        return choose_ttl(self.gaps(), price)

    # -- keep-warm ---------------------------------------------------------------------------
    def refresh(self) -> float | None:
        """Send one keep-warm refresh now: the last request, ``max_tokens=1``, reply discarded,
        call recorded. Returns when it was sent, ``None`` when there is nothing to refresh
        (no call yet, or a backend that does not report the provider's cache) or it failed."""
        with self.lock:
            last = self.last_request
            if last is None or not any(r.known for r in self.history):
                return None
            request = replace(last, max_tokens=1)
            t0 = time.perf_counter()
            try:
                completion = self.backend.complete(request)
            except Exception as exc:  # a background refresh must never take the harness down
                self.session.record_call(
                    request,
                    Usage(raw={"keep_warm": True}),
                    audit={"cause": KEEP_WARM},
                    error=f"{type(exc).__name__}: {exc}",
                    model=self.backend.model,
                    wall_ms=round((time.perf_counter() - t0) * 1000, 3),
                )
                return None
            u = completion.usage
            raw = {**u.raw, "keep_warm": True}
            now = reported(raw)
            at = now.sent_at if now.sent_at is not None else self.clock()
            state = cache_state(self.history, at)
            read = now.tokens.cache_read
            cache = {
                "cause": KEEP_WARM,
                "evidence": f"refresh before expiry: read {read if read is not None else '?'} tokens, renewed the entry",
                "agree": None,
                "age_s": round(state.age_s, 3) if state is not None else None,
                "ttl_s": now.ttl_s,
                "expiry_cost": None,
            }
            self.session.record_call(
                request,
                replace(u, raw=raw),
                audit={"cause": KEEP_WARM, "cache": cache},
                model=self.backend.model,
                wall_ms=round((time.perf_counter() - t0) * 1000, 3),
            )
            self.history.append(now)
            return at

    def start_timer(self, *, wait: Callable[[float], bool] | None = None) -> KeepWarmTimer | None:
        """Start the background refreshes (``keep_warm`` on): a daemon thread, stopped by
        :meth:`stop_timer`. ``wait`` replaces its sleep (a test's simulated clock)."""
        if self.plan is None:
            return None
        if self.timer is None or not self.timer.alive:
            self.timer = KeepWarmTimer(self.plan, self.refresh, wait=wait)
            self.timer.start()
        return self.timer

    def stop_timer(self) -> None:
        if self.timer is not None:
            self.timer.stop()
            self.timer = None


__all__ = ["KEEP_WARM", "ProviderCache", "is_keep_warm", "wants_auto_ttl"]
