"""The cost planner (compaction/planner.py): its rule, and a session under each policy."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from ctxwright.agent.loop import Agent, AgentConfig
from ctxwright.backends.scripted import ScriptedBackend, call
from ctxwright.cache.stale_cost import break_even_calls, keeping_pays
from ctxwright.compaction import CompactionConfig
from ctxwright.compaction.check import violations
from ctxwright.compaction.planner import decide, from_record
from ctxwright.compaction.retrieval import ResultReader
from ctxwright.core.events import CompactionEvent
from ctxwright.core.messages import Message
from ctxwright.core.prefix import Prefix
from ctxwright.core.session import Session
from ctxwright.core.tokens import TokenCounter, estimate_tokens
from ctxwright.status.bar import choose_mode
from ctxwright.store.sessions import Store
from ctxwright.tools.registry import ToolRegistry, tool


def test_the_status_bar_and_the_planner_share_one_rule():
    # alpha*S*N/2 < (1-alpha)*R: 0.1*100*20/2 = 100 < 0.9*200 = 180 -> keep (append)
    assert keeping_pays(0.1, 100, 20, 200) and choose_mode(100, 200, 20, 0.1) == "append"
    assert not keeping_pays(0.1, 100, 40, 200) and choose_mode(100, 200, 40, 0.1) == "replace"


def test_the_worked_example_of_the_docs():
    # window 7,936, depth 1,984 (0.25), 600 pinned -> R = 1,384; the stretch grows 200 a call from 1,984
    kw = dict(window=7_936, target=1_984, pinned=600, alpha=0.1)
    d = decide(tokens=3_984, grown=2_000, calls=10, **kw)  # 0.1*2000*10/2 = 1,000 < 0.9*1,384 = 1,245.6
    assert d.reprefill == 1_384 and d.reason == "wait" and d.stale_cost == 1_000 and math.isclose(d.price, 1_245.6)
    assert round(break_even_calls(0.1, 200, 1_384), 2) == 11.16 and d.trigger == 4_216  # 1,984 + 200 * 11.16
    d = decide(tokens=4_784, grown=2_800, calls=14, **kw)  # 0.1*2800*14/2 = 1,960 >= 1,245.6
    assert d.compact and d.reason == "cost"
    d = decide(tokens=7_800, grown=5_800, calls=29, **{**kw, "alpha": 0.0})  # local: the window's 7,936 - 200
    assert d.compact and d.reason == "window" and d.trigger == 7_736


@given(
    tokens=st.integers(0, 200_000),
    window=st.integers(256, 200_000),
    target_share=st.floats(0.05, 0.9),
    grown=st.integers(0, 100_000),
    calls=st.integers(0, 500),
    pinned=st.integers(0, 20_000),
    alpha=st.floats(0, 1),
    spaced=st.booleans(),
)
def test_the_rule(tokens, window, target_share, grown, calls, pinned, alpha, spaced):
    target = int(window * target_share)
    d = decide(
        tokens=tokens, window=window, target=target, grown=grown, calls=calls, pinned=pinned, alpha=alpha, spaced=spaced
    )
    # over the window: always; never for a request already at its depth (unless over the window)
    if tokens > window:
        assert d.compact and d.reason == "over_window"
    elif tokens <= target:
        assert not d.compact
    # the cost reason is exactly the shared rule turned around, and needs the spacing
    if d.reason == "cost":
        assert spaced and not keeping_pays(alpha, grown, calls, max(0, target - pinned))
    # a local model (alpha 0) compacts for the window only
    if alpha == 0:
        assert d.reason != "cost"
    assert from_record(d.to_dict()) == d
    assert d.trigger <= window


def test_a_decision_recorded_by_another_build_is_not_trusted():
    assert from_record({"reason": "nonsense"}) is None and from_record("x") is None and from_record(None) is None
    assert from_record({"reason": "cost", "tokens": "many"}) is None


def _run(tmp_path, policy: str):
    """Fetches of mixed sizes under a 3,000-token window; the model quotes the newest fact."""
    reg = ToolRegistry()

    @tool
    def fetch(page: int) -> str:
        """Fetch a page.

        Args:
            page: page number
        """
        return f"Page {page}: fact F{page} = {page * 37}.\n" + (
            "filler words about the archive " * (20 + 30 * (page % 4))
        )

    reg.register(fetch)
    reg.register(ResultReader().tool())
    replies = [
        Message(
            role="assistant",
            content=f"Noted F{i - 1}" if i else None,
            tool_calls=(call("fetch", {"page": i}, f"p{i}"),),
        )
        for i in range(40)
    ] + ["done"]
    store = Store(tmp_path / f"{policy}.db")
    s = Session.start(Prefix.build("sys", reg.specs()), store=store)
    backend = ScriptedBackend(replies)
    cfg = CompactionConfig(
        results_dir=tmp_path / policy,
        window_tokens=3_000,
        reserve_output_tokens=128,
        policy=policy,
        keep_recent_results=2,
    )
    agent = Agent(
        s,
        backend,
        reg,
        AgentConfig(compaction=cfg, max_iterations=50),
        counter=TokenCounter(estimate_tokens, "estimate"),
    )
    r = agent.run("read the pages")
    return s, store, backend, r


def test_the_cost_policy_compacts_fewer_times_more_deeply_and_keeps_every_invariant(tmp_path):
    out = {}
    for policy in ("eager", "cost"):
        s, store, backend, r = _run(tmp_path, policy)
        assert r.stop_reason == "final_answer"
        recorded = [m for _, m in s.recorded_messages()]
        assert all(violations(recorded, list(req.messages[1:])) == [] for req in backend.requests)
        assert all(c.prompt_tokens is not None and c.prompt_tokens <= 3_000 for c in r.calls)
        resumed = Session.resume(store, s.id)
        last = backend.requests[-1]
        assert [m.canonical() for m in resumed.messages()[: len(last.messages)]] == [
            m.canonical() for m in last.messages
        ]
        comps = [ev for ev in s.events if isinstance(ev, CompactionEvent)]
        passes = {ev.call_index for ev in comps}
        # how deep: tokens a pass removed, on average
        removed = [
            max(ev.tokens_before or 0 for ev in comps if ev.call_index == k)
            - next(c.prompt_tokens or 0 for c in r.calls if c.index == k)
            for k in passes
        ]
        prefilled = sum((c.prompt_tokens or 0) - (c.reusable_tokens or 0) for c in r.calls)
        out[policy] = (len(passes), sum(removed) / max(1, len(removed)), prefilled, comps)
    (n_e, depth_e, pre_e, _), (n_c, depth_c, pre_c, comps_c) = out["eager"], out["cost"]
    assert 0 < n_c < n_e and depth_c > depth_e and pre_c < pre_e
    # every cost-policy event says why it ran
    assert all(from_record(ev.extra.get("planner")) is not None for ev in comps_c)
    assert all(from_record(ev.extra.get("planner")).compact for ev in comps_c)


def test_a_subnormal_alpha_that_underflows_is_keeping_forever() -> None:
    """Found by the rule's hypothesis test: α = 5e-324 times a growth under 1 underflows to 0,
    which divided by zero; the product that underflows means keeping never stops paying."""
    import math

    from ctxwright.cache.stale_cost import break_even_calls

    assert break_even_calls(5e-324, 0.5, 100.0) == math.inf
