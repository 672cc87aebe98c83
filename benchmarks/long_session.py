"""A long scripted session driven through the compaction layers with a small window,
then resumed from the store (issue 5's benchmark).

The "model" is a scripted policy (no LLM): it follows a fixed-seed plan of tool rounds --
single calls and parallel batches of 2-3, outputs from 1 KB to 5 MB, repeated identical
listings, failed calls, and one ``delegate`` call whose sub-agent does its own search --
and now and then quotes a fact from a result (so the unused-result rule has something to
keep). Everything else is the real code path: the agent loop, the SQLite store, the
budget layer with disk offload, noise, clearing, trim, the per-call audit.

Measured:

* ``max_prompt_tokens`` against the window, on every call (the backend's count);
* ``invariant_violations`` over every request sent (orphans, unanswered calls, split
  batches, partial reasoning, a lost first user message);
* ``bytes_offloaded`` to disk by the budget layer;
* ``resume_bytes_identical``: the resumed session renders the exact messages of the last
  request;
* ``reuse_efficiency`` = Σcached ÷ Σreusable as the audit counts them (the scripted
  backend reports an ideal prefix cache), and ``prefix_kept`` = Σreusable(k) ÷
  Σprompt(k-1): the share of each previous request that the next one kept as its prefix,
  which every compaction lowers -- the cache cost of compressing;
* ``median_turn_overhead_ms``: ctxwright's own time per turn (status, layers, render,
  token counts, audit, SQLite writes, result handling), without the model, over the last
  50 calls;
* ``median_pass_ms`` / ``p95_pass_ms``: the time of one compaction pass (every layer that
  ran before one call, its check, its loss ledger and its recording), over the passes that
  compacted something.

``--window 131072`` is the 128K-token case (results 1 KB to 5 MB still overflow it).

    python benchmarks/long_session.py [--calls 200] [--window 8192] [--json PATH]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
import zlib
from pathlib import Path

from common import console, machine, save, table
from ctxwright.agent.delegate import Delegator
from ctxwright.agent.loop import Agent, AgentConfig
from ctxwright.backends.scripted import ScriptedBackend, call
from ctxwright.compaction import CompactionConfig
from ctxwright.compaction.check import violations
from ctxwright.compaction.manager import ContextManager
from ctxwright.compaction.retrieval import ResultReader
from ctxwright.core.events import CompactionEvent, ToolEvent
from ctxwright.core.messages import Message
from ctxwright.core.prefix import Prefix
from ctxwright.core.request import ChatRequest
from ctxwright.core.session import Session
from ctxwright.core.tokens import TokenCounter
from ctxwright.store.sessions import Store
from ctxwright.tools.registry import ToolRegistry, tool

SIZES = [1_000] * 10 + [4_000] * 6 + [20_000] * 3 + [200_000, 1_000_000, 5_000_000]
TASK = "Research the history of the Nordlys project: who founded it, when, and where each founder went next."
SYSTEM = "You are a research agent. Use the tools, keep notes short, answer with sources."


def page_text(seed: int, size: int) -> str:
    """Generated text of about ``size`` characters, built once (a list joined)."""
    rng = random.Random(seed)
    words = ["Nordlys", "founder", "moved", "company", "in", "the", "year", "team", "report", "city", "and"]
    head = f"Page {seed}: fact F{seed}-key = {rng.randint(1000, 9999)}.\n"
    line = " ".join(rng.choice(words) for _ in range(15)) + "\n"
    return head + line * max(0, (size - len(head)) // len(line))


def build_tools() -> ToolRegistry:
    reg = ToolRegistry()

    @tool
    def search(query: str) -> str:
        """Search the archive.

        Args:
            query: what to look for
        """
        seed = zlib.crc32(query.encode()) % 10_000  # not hash(): salted per process
        return "\n".join(f"result {i}: page P{seed + i} about {query}" for i in range(30))

    @tool
    def fetch(page: int, size: int = 1000) -> str:
        """Fetch one page.

        Args:
            page: page number
            size: characters wanted
        """
        if page % 17 == 0:
            raise ConnectionError(f"page {page}: the archive server reset the connection")
        return page_text(page, size)

    @tool
    def list_archive() -> str:
        """List the archive's folders."""
        return "\n".join(f"folder-{i:03d}/ (index, {i * 7} pages)" for i in range(40))

    for t in (search, fetch, list_archive):
        reg.register(t)
    return reg


class Policy:
    """The scripted model: a fixed plan of tool rounds, then an answer; the sub-agent does
    one search and concludes."""

    def __init__(self, calls: int, seed: int = 7) -> None:
        rng = random.Random(seed)
        self.rounds: list[list[tuple[str, dict]]] = []
        n = 0
        page = 1
        while n < calls:
            width = rng.choice([1, 1, 2, 3])
            batch = []
            for _ in range(width):
                kind = rng.random()
                if kind < 0.15:
                    batch.append(("list_archive", {}))
                elif kind < 0.35:
                    batch.append(("search", {"query": f"Nordlys topic {rng.randint(1, 50)}"}))
                else:
                    batch.append(("fetch", {"page": page, "size": rng.choice(SIZES)}))
                    page += 1
            self.rounds.append(batch)
            n += width
        self.rounds.insert(
            len(self.rounds) // 2,
            [("delegate", {"task": "Search the archive for the founders' later companies and report the page ids."})],
        )
        self.i = 0
        self.k = 0
        self.rng = rng

    def __call__(self, request: ChatRequest) -> Message:
        first_user = next(m for m in request.messages if m.role == "user")
        if first_user.content and first_user.content.startswith("You are a sub-agent"):
            done = any(m.role == "tool" for m in request.messages)
            if done:
                return Message(role="assistant", content="Founders' companies are on pages P12-P19 (from search).")
            return Message(
                role="assistant", tool_calls=(call("search", {"query": "founders later companies"}, f"sub{self.k}"),)
            )
        if self.i >= len(self.rounds):
            return Message(
                role="assistant", content="Nordlys was founded by the people on pages P1-P9 (sources cited above)."
            )
        batch = self.rounds[self.i]
        self.i += 1
        calls = []
        for name, args in batch:
            self.k += 1
            calls.append(call(name, args, f"c{self.k}"))
        note = None
        last_tool = next((m for m in reversed(request.messages) if m.role == "tool"), None)
        if last_tool is not None and self.rng.random() < 0.3 and "fact F" in (last_tool.content or ""):
            start = last_tool.content.index("fact F")
            note = "Noted " + last_tool.content[start : start + 16]
        return Message(role="assistant", content=note, tool_calls=tuple(calls))


POLICIES = (("eager", None), ("cost", None), ("cost", 0.0))


def arm_name(policy: str, alpha: float | None) -> str:
    return policy if alpha is None else f"{policy} α={alpha:g}"


def timed_passes() -> list[float]:
    """Milliseconds of every compaction pass that compacted something, from now on: the
    manager's ``before_call`` timed around the real code (sub-agents' passes included)."""
    durations: list[float] = []
    inner = ContextManager.before_call

    def before_call(self: ContextManager, session: Session, call_index: int) -> list:
        t0 = time.perf_counter()
        reports = inner(self, session, call_index)
        if reports:
            durations.append((time.perf_counter() - t0) * 1000)
        return reports

    ContextManager.before_call = before_call  # type: ignore[method-assign]
    return durations


def p95(xs: list[float]) -> float:
    return round(sorted(xs)[min(len(xs) - 1, int(len(xs) * 0.95))], 3) if xs else 0.0


def run_session(policy: str, alpha: float | None, calls: int, window: int, **config: float) -> dict:
    """One scripted session under one compaction policy, measured; the plan is the same seed."""
    original_before_call = ContextManager.before_call
    passes = timed_passes()
    try:
        return _run_session(policy, alpha, calls, window, passes, **config)
    finally:
        ContextManager.before_call = original_before_call  # type: ignore[method-assign]


def _run_session(
    policy: str, alpha: float | None, calls: int, window: int, passes: list[float], **config: float
) -> dict:
    work = Path(tempfile.mkdtemp(prefix="ctxwright-long-"))
    store = Store(work / "long.db")
    reg = build_tools()
    reg.register(ResultReader().tool())
    delegator = Delegator()
    reg.register(delegator.tool())
    policy_model = Policy(calls)
    backend = ScriptedBackend([policy_model], model="scripted-plan")
    session = Session.start(Prefix.build(SYSTEM, reg.specs()), store=store, backend=backend.name, model=backend.model)
    cfg = AgentConfig(
        max_iterations=len(policy_model.rounds) + 5,
        max_tokens=256,
        tool_timeout_s=120,
        compaction=CompactionConfig(
            window_tokens=window, reserve_output_tokens=256, policy=policy, cache_price_ratio=alpha, **config
        ),
    )
    agent = Agent(session, backend, reg, cfg, counter=TokenCounter())
    delegator.bind(agent)
    t0 = time.perf_counter()
    result = agent.run(TASK)
    wall = time.perf_counter() - t0

    tool_events = [ev for ev in session.events if isinstance(ev, ToolEvent)]
    child_tools = sum(1 for c in delegator.children for e in store.events(c) if isinstance(e, ToolEvent))
    recorded = [m for _, m in session.recorded_messages()]
    bad = 0
    for req in backend.requests:
        view = list(req.messages[1:])
        is_child = (view[0].content or "").startswith("You are a sub-agent")
        bad += len(violations(view[:1] if is_child else recorded, view))
    resumed = Session.resume(Store(work / "long.db"), session.id)
    last = backend.requests[-1]
    same = [m.canonical() for m in resumed.messages()[: len(last.messages)]] == [m.canonical() for m in last.messages]
    summ = agent.auditor.summary()
    prompts = [c.prompt_tokens or 0 for c in result.calls]
    reusable = [c.reusable_tokens or 0 for c in result.calls]
    cached = [c.cached_tokens or 0 for c in result.calls]
    kept = sum(reusable[1:]) / max(1, sum(prompts[:-1]))
    overheads = [c.overhead_ms for c in result.calls if c.overhead_ms is not None]
    comps = [ev for ev in session.events if isinstance(ev, CompactionEvent)]
    layers: dict[str, int] = {}
    for c in comps:
        layers[c.layer] = layers.get(c.layer, 0) + 1
    comp_calls = [c for c in result.calls if c.cause == "compaction"]
    a = 0.1 if alpha is None else alpha
    by_cause: dict[str, int] = {}
    for c in result.calls:
        by_cause[c.cause or "?"] = by_cause.get(c.cause or "?", 0) + (c.prompt_tokens or 0) - (c.reusable_tokens or 0)
    return {
        "prefilled_by_cause": by_cause,
        "calls": len(tool_events) + child_tools,
        "model_calls": len(result.calls),
        "stop_reason": result.stop_reason,
        "max_prompt_tokens": max(prompts),
        "mean_prompt_tokens": round(statistics.mean(prompts)),
        "window": window,
        "invariant_violations": bad,
        "bytes_offloaded": sum(ev.offload.bytes for ev in tool_events if ev.offload is not None),
        "results_offloaded": sum(1 for ev in tool_events if ev.offload is not None),
        "repeats_marked": sum(1 for ev in tool_events if ev.repeat_of),
        "resume_bytes_identical": same,
        "reuse_efficiency": summ.efficiency,
        "prefix_kept": round(kept, 4),
        # Σ (prompt - reusable): what a prefix cache could not have served, whatever the backend counts
        "total_prefilled_tokens": sum(p - r for p, r in zip(prompts, reusable, strict=True)),
        # Σ (prompt - cached): what the scripted backend says it prefilled
        "total_prefilled_tokens_backend": sum(p - c for p, c in zip(prompts, cached, strict=True)),
        # in uncached-token units at α: prefilled + α·reused
        "input_cost_units": round(sum(p - r + a * r for p, r in zip(prompts, reusable, strict=True))),
        "compaction_passes": len({c.call_index for c in comps}),
        "compaction_events": len(comps),
        "compactions": layers,
        "tokens_reprefilled_by_compactions": sum((c.prompt_tokens or 0) - (c.reusable_tokens or 0) for c in comp_calls),
        "median_turn_overhead_ms": round(statistics.median(overheads[-50:]), 3),
        "median_turn_overhead_ms_all": round(statistics.median(overheads), 3),
        "p90_turn_overhead_ms": round(sorted(overheads)[int(len(overheads) * 0.9)], 3),
        "passes_timed": len(passes),
        "median_pass_ms": round(statistics.median(passes), 3) if passes else 0.0,
        "p95_pass_ms": p95(passes),
        "max_pass_ms": round(max(passes), 3) if passes else 0.0,
        "wall_s": round(wall, 2),
        "tokens_counted_by": agent.counter.source,
        "store": str(work),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=200, help="tool calls in the plan (at least)")
    p.add_argument("--window", type=int, default=8192)
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args()

    arms = {arm_name(pol, a): run_session(pol, a, args.calls, args.window) for pol, a in POLICIES}
    eager, cost = arms["eager"], arms["cost"]
    saving = 1 - cost["total_prefilled_tokens"] / max(1, eager["total_prefilled_tokens"])
    names = list(arms)
    keys = [k for k in eager if k != "store"]
    console.print(
        table(
            f"long_session · {eager['calls']} tool calls · {eager['model_calls']} model calls · window "
            f"{args.window:,} · eager vs cost, same plan",
            ["measure", *names],
            [[k, *(str(arms[n][k]) for n in names)] for k in keys],
        )
    )
    ok = all(
        d["max_prompt_tokens"] <= args.window and d["invariant_violations"] == 0 and d["resume_bytes_identical"]
        for d in arms.values()
    )
    console.print(f"total prefill, cost vs eager: {saving:.1%} below (target ≥ 20%)")
    worst = max(d["p95_pass_ms"] for d in arms.values())
    console.print(f"compaction pass p95, worst arm: {worst:.1f} ms (target ≤ 50 ms)")
    console.print(
        (
            "[green]targets met[/]"
            if ok and saving >= 0.2 and cost["median_turn_overhead_ms"] <= 5 and worst <= 50
            else "[red]a target was missed[/]"
        )
        + f" · stores and offloads in {', '.join(d['store'] for d in arms.values())}"
    )
    save(args, {"arms": arms, "prefill_saving_cost_vs_eager": round(saving, 4), "machine": machine()})


if __name__ == "__main__":
    main()
