"""An audit of agents' logs: each call judged (``causes.py``) and priced, summed per session,
per project or per day.

Memory: the calls are never held. What is kept is one :class:`Chain` per chain of calls and one
:class:`Tally` per session (and per group), the ids of the answers already counted (one small
hash each, so a repeated answer is counted once across files) and the :data:`WORST` dearest
misses; each judged call is handed to ``on_call`` as it is judged (the CLI writes the misses to
a temporary file, not to memory).

Money: every call is priced with the price table (``cache/prices.py``: the same table, files
and flags as every other command). *Spent* is what the call cost; *lost* is what it cost minus
what it would have cost had the cache held what the previous call left there
(:func:`~ctxwright.cache.prices.cost_if_held`), summed per cause. A model the table does not
price adds to the token counts, not to the dollars, and is counted as unpriced.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ctxwright.agent_logs.causes import CAUSES, Chain, Judged, after, judge
from ctxwright.agent_logs.records import LoggedCall, LogItem, LogProblem, Marker
from ctxwright.agent_logs.timestamps import day
from ctxwright.cache.prices import ModelPrice, Pricing, call_cost, cost_if_held
from ctxwright.core.usage import CacheUsage

#: the dearest misses kept for the table
WORST = 10


@dataclass
class Tally:
    """Everything summed over a set of calls: a session, a project, a day, or all of them."""

    key: str
    agent: str = ""
    project: str = ""
    session_id: str = ""
    calls: int = 0
    usage: CacheUsage = field(default_factory=CacheUsage)
    #: the counts as logged, by the log's own field names (compared with ccusage's)
    tokens: dict[str, int] = field(default_factory=dict)
    spent: float = 0.0
    lost: float = 0.0
    priced: int = 0
    causes: dict[str, int] = field(default_factory=dict)
    lost_by_cause: dict[str, float] = field(default_factory=dict)
    compactions: int = 0
    model_switches: int = 0
    sidechain_calls: int = 0
    #: idle gaps between calls of a chain longer than the cache's TTL, and the longest gap
    gaps_over_ttl: int = 0
    longest_gap_s: float = 0.0
    first_at: float | None = None
    last_at: float | None = None
    model: str = ""
    models: dict[str, int] = field(default_factory=dict)
    #: the prompt of the latest main-chain call: how full the context was
    last_context_tokens: int | None = None
    #: the TTL of the cache the latest call left
    ttl_s: float | None = None

    @property
    def hit_ratio(self) -> float | None:
        """Cache reads over every input token (``None``: no input)."""
        return self.usage.cache_read / self.usage.prompt if self.usage.prompt else None

    def add(
        self, call: LoggedCall, j: Judged, cost: float | None, lost: float, chain: Chain, switched: bool = False
    ) -> None:
        self.calls += 1
        self.usage = self.usage + call.usage
        for k, v in call.tokens.items():
            self.tokens[k] = self.tokens.get(k, 0) + v
        if cost is not None:
            self.priced += 1
            self.spent += cost
        self.causes[j.cause] = self.causes.get(j.cause, 0) + 1
        if lost:
            self.lost += lost
            self.lost_by_cause[j.cause] = self.lost_by_cause.get(j.cause, 0.0) + lost
        if switched:
            self.model_switches += 1
        self.sidechain_calls += call.sidechain
        if j.gap_s is not None:
            self.longest_gap_s = max(self.longest_gap_s, j.gap_s)
        if call.at is not None:
            self.first_at = call.at if self.first_at is None else min(self.first_at, call.at)
            if self.last_at is None or call.at >= self.last_at:
                self.last_at = call.at
                if call.model:
                    self.model = call.model
                if not call.sidechain:
                    self.last_context_tokens = call.usage.prompt
                    self.ttl_s = chain.ttl_s
        if call.model:
            self.models[call.model] = self.models.get(call.model, 0) + 1

    def to_json(self) -> dict[str, Any]:
        u = self.usage
        return {
            "key": self.key,
            "agent": self.agent,
            "project": self.project,
            "session_id": self.session_id,
            "calls": self.calls,
            "priced_calls": self.priced,
            "tokens": {
                "input": u.uncached_input,
                "cache_write_5m": u.cache_write_5m,
                "cache_write_1h": u.cache_write_1h,
                "cache_read": u.cache_read,
                "output": u.output,
            },
            "logged": dict(self.tokens),
            "hit_ratio": None if self.hit_ratio is None else round(self.hit_ratio, 6),
            "spent_usd": round(self.spent, 6),
            "lost_usd": round(self.lost, 6),
            "causes": {c: self.causes[c] for c in CAUSES if c in self.causes},
            "lost_usd_by_cause": {c: round(v, 6) for c, v in self.lost_by_cause.items()},
            "compactions": self.compactions,
            "model_switches": self.model_switches,
            "sidechain_calls": self.sidechain_calls,
            "idle_gaps_over_ttl": self.gaps_over_ttl,
            "longest_gap_s": round(self.longest_gap_s, 3),
            "first_at": self.first_at,
            "last_at": self.last_at,
            "model": self.model,
            "models": dict(self.models),
            "last_context_tokens": self.last_context_tokens,
            "ttl_s": self.ttl_s,
        }


@dataclass(frozen=True)
class JudgedCall:
    call: LoggedCall
    judged: Judged
    cost: float | None
    lost: float

    def to_json(self) -> dict[str, Any]:
        c, j, u = self.call, self.judged, self.call.usage
        return {
            "session": c.session,
            "chain": c.chain,
            "file": c.file,
            "line": c.line,
            "timestamp": c.stamp,
            "model": c.model,
            "cause": j.cause,
            "evidence": j.evidence,
            "expected_read": j.expected,
            "gap_s": None if j.gap_s is None else round(j.gap_s, 3),
            "input": u.uncached_input,
            "cache_write_5m": u.cache_write_5m,
            "cache_write_1h": u.cache_write_1h,
            "cache_read": u.cache_read,
            "output": u.output,
            "cost_usd": None if self.cost is None else round(self.cost, 8),
            "lost_usd": round(self.lost, 8),
        }


GROUPS = ("session", "project", "day")


class LogAudit:
    """Reads :data:`~ctxwright.agent_logs.records.LogItem` s in order and keeps the tallies.

    ``by`` chooses the groups kept beside the sessions (``project`` or ``day``; ``session``
    keeps none); ``on_call`` sees every judged call; ``on_problem`` every problem.
    """

    def __init__(
        self,
        pricing: Pricing | None = None,
        *,
        by: str = "session",
        on_call: Callable[[JudgedCall], None] | None = None,
        on_problem: Callable[[LogProblem], None] | None = None,
    ) -> None:
        self.pricing = pricing or Pricing()
        self.by = by
        self.on_call = on_call
        self.on_problem = on_problem
        self.sessions: dict[str, Tally] = {}
        self.groups: dict[str, Tally] = {}
        self.total = Tally("all")
        self.chains: dict[tuple[str, str], Chain] = {}
        self.worst: list[tuple[float, int, JudgedCall]] = []
        self.problems = 0
        self._n = 0
        self._prices: dict[tuple[str, str], ModelPrice | None] = {}

    def feed(self, items: Iterable[LogItem]) -> None:
        for item in items:
            if isinstance(item, LoggedCall):
                self.call(item)
            elif isinstance(item, Marker):
                self.marker(item)
            else:
                self.problems += 1
                if self.on_problem is not None:
                    self.on_problem(item)

    def _session(self, key: str, call: LoggedCall | None = None) -> Tally:
        t = self.sessions.get(key)
        if t is None:
            t = self.sessions[key] = Tally(key)
        if call is not None and not t.agent:
            t.agent, t.project, t.session_id = call.agent, call.project, call.session_id
        return t

    def _tallies(self, call: LoggedCall) -> list[Tally]:
        out = [self._session(call.session, call), self.total]
        if self.by in ("project", "day"):
            key = call.project if self.by == "project" else day(call.at)
            g = self.groups.get(key)
            if g is None:
                g = self.groups[key] = Tally(
                    key, agent=call.agent, project=call.project if self.by == "project" else ""
                )
            out.append(g)
        return out

    def marker(self, m: Marker) -> None:
        state = self.chains.get((m.session, m.chain))
        if m.what == "compaction":
            tally = self._session(m.session)
            tally.compactions += 1
            self.total.compactions += 1
            group = tally.project if self.by == "project" else day(m.at) if self.by == "day" else None
            if group is not None and group in self.groups:
                self.groups[group].compactions += 1
            if state is not None:
                state.compacted = m.detail or "compacted"
        elif m.what == "context" and state is not None:
            state.context = m.detail
        elif m.what == "chain_start":
            self.chains.pop((m.session, m.chain), None)

    def call(self, c: LoggedCall) -> JudgedCall:
        key = (c.session, c.chain)
        state = self.chains.get(key)
        real = c.usage.prompt > 0  # an API error's placeholder answer (no input) says nothing of the cache
        j = judge(c, state) if real else Judged("hit", "no input tokens: no call reached the provider's cache")
        price_key = (c.provider, c.model)
        if price_key not in self._prices:  # one look-up per model, not per call
            self._prices[price_key] = self.pricing.price(c.provider, c.model)
        price = self._prices[price_key]
        cost = call_cost(c.usage, price) if price is not None else None
        lost = 0.0
        if price is not None and cost is not None and j.cause not in ("first", "hit"):
            lost = max(cost - cost_if_held(c.usage, price, j.expected), 0.0)
        new_state = after(c, state) if real else (state or after(c, None))
        if real:
            self.chains[key] = new_state
        jc = JudgedCall(c, j, cost, lost)
        switched = bool(real and state is not None and c.model and state.model and c.model != state.model)
        for t in self._tallies(c):
            t.add(c, j, cost, lost, new_state, switched)
            if j.gap_s is not None and state is not None and j.gap_s > state.ttl_s:
                t.gaps_over_ttl += 1
        if lost > 0:
            self._n += 1
            item = (lost, self._n, jc)
            if len(self.worst) < WORST:
                heapq.heappush(self.worst, item)
            else:
                heapq.heappushpop(self.worst, item)
        if self.on_call is not None:
            self.on_call(jc)
        return jc

    def worst_calls(self) -> list[JudgedCall]:
        return [jc for _, _, jc in sorted(self.worst, key=lambda t: (-t[0], t[1]))]

    def ranked(self) -> list[Tally]:
        """Sessions (or the groups of ``by``), the most lost first."""
        rows = list(self.sessions.values()) if self.by == "session" else list(self.groups.values())
        return sorted(rows, key=lambda t: (-t.lost, -t.spent, t.key))
