"""The compaction pipeline (compaction/pipeline.py): the tier order a config gives, the trigger
gate, and the one shared step -- a plan that would break an invariant is refused before
anything is stored, and every tier's report is the event it recorded."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest

from ctxwright.agent.loop import Agent, AgentConfig
from ctxwright.backends.scripted import ScriptedBackend, call
from ctxwright.compaction import CompactionConfig, CompactionReport, ContextManager, pipeline
from ctxwright.compaction.check import violations
from ctxwright.compaction.pipeline import PassState, Plan, Tier, tiers_for
from ctxwright.compaction.retrieval import ResultReader
from ctxwright.core.events import BudgetRecord, CompactionEvent, ToolEvent
from ctxwright.core.messages import Message, ToolCall
from ctxwright.core.prefix import Prefix
from ctxwright.core.session import Session
from ctxwright.core.tokens import TokenCounter, estimate_tokens
from ctxwright.tools.registry import ToolRegistry, tool

COUNT = TokenCounter(estimate_tokens, "estimate")
PAGE = (
    "Alice Varga co-founded Nordlys Labs in 2015. She joined Helix Robotics as CTO in 2021. " * 3
    + "Footer: cookie settings, privacy, terms. " * 40
    + "Commit 3f9a2c1d fixed the ingest bug; ticket NL-4521."
)


def _session(store=None, rounds: int = 4) -> Session:
    s = Session.start(Prefix.build("sys"), store=store)
    s.add_user("Find where Alice works.")
    for i in range(rounds):
        c = ToolCall(f"c{i}", "fetch_page", f'{{"page": {i}}}')
        s.add_assistant(Message(role="assistant", content=f"checking page {i}", tool_calls=(c,)))
        s.add_tool_result(c.id, PAGE, tool_name="fetch_page", budget=BudgetRecord(c.id))
    s.add_assistant(Message(role="assistant", content="still looking"))
    return s


def _state(tmp_path, s: Session, *, window: int = 4000, spaced: bool = True, **cfg) -> PassState:
    m = ContextManager(CompactionConfig(results_dir=tmp_path, **cfg), COUNT, window)
    m.bind(s)
    return PassState(m, s, call_index=7, tokens=m.request_tokens(s), spaced=spaced)


@dataclass
class Scripted:
    """A tier that plans whatever it is given, and notes when it was asked."""

    name: str
    planned: Plan | None
    after_trigger: bool = True
    asked_at: int | None = None

    @property
    def layer(self) -> str:
        return self.name

    def wants(self, state: PassState) -> bool:
        self.asked_at = state.tokens
        return True

    def plan(self, state: PassState) -> Plan | None:
        return self.planned


def _tool_seqs(s: Session) -> list[int]:
    return [ev.seq for ev in s.events if isinstance(ev, ToolEvent)]


# -- the order ---------------------------------------------------------------------------------
def names(cfg: CompactionConfig) -> list[str]:
    return [t.name for t in tiers_for(cfg)]


def test_tier_order_comes_from_the_config_cheapest_first():
    assert names(CompactionConfig()) == ["noise", "clearing", "trim"]
    assert names(CompactionConfig(drop_unused=False)) == ["clearing", "trim"]
    everything = CompactionConfig(strategy="adaptive", archival_summaries=True, full_compaction=True)
    assert names(everything) == ["adaptive", "noise", "archival", "clearing", "full_stage1", "full_stage2", "trim"]
    assert [t.layer for t in tiers_for(everything)][4:6] == ["full", "full"]
    assert [t.after_trigger for t in tiers_for(everything)] == [False, *[True] * 6]
    # a record-time strategy is not a tier: it ran when the results were recorded
    assert names(CompactionConfig(strategy="context_aware")) == ["noise", "clearing", "trim"]


# -- the shared step refuses an invalid plan ------------------------------------------------------
@pytest.mark.parametrize(
    "bad, broken",
    [
        (lambda s: Plan(1, drop=[_tool_seqs(s)[0] - 1]), "answers no open tool call"),  # the call, not its result
        (lambda s: Plan(1, drop=[_tool_seqs(s)[0]]), "unanswered"),  # the result, not its call
        (lambda s: Plan(1, replace={0: "a different task"}), "first user message"),
        (lambda s: Plan(3, drop=[0, 1, 2]), "first user message"),
    ],
)
def test_a_plan_that_breaks_an_invariant_is_refused_and_nothing_is_recorded(store, tmp_path, bad, broken):
    s = _session(store)
    state = _state(tmp_path, s)
    before = ([ev.seq for ev in s.events], [m.canonical() for m in s.trajectory()], len(store.events(s.id)))
    tier = Scripted("careless", bad(s))
    with pytest.raises(AssertionError, match="nothing recorded") as err:
        pipeline.run([tier], state)
    assert broken in str(err.value) and "'careless'" in str(err.value)
    after = ([ev.seq for ev in s.events], [m.canonical() for m in s.trajectory()], len(store.events(s.id)))
    assert after == before  # no compaction event, in memory or in the store
    assert state.manager.last_compaction_call < 0  # nor does it count for the spacing
    resumed = Session.resume(store, s.id)  # the session stays usable
    assert violations([m for _, m in resumed.recorded_messages()], resumed.trajectory()) == []


def test_the_check_sees_the_view_the_session_will_render(tmp_path):
    """The preview the check runs on is byte for byte what the session renders once the plan
    is recorded -- for every kind of plan: replace, drop with a note, a note replacing all."""
    s = _session(rounds=6)
    state = _state(tmp_path, s)
    seqs = _tool_seqs(s)
    plans = [
        ("clearing", Plan(1, replace={seqs[0]: "[cleared]"})),
        ("trim", Plan(4, drop=[seqs[1] - 1, seqs[1]], note=(seqs[1] - 1, "[trimmed 2]"))),
        ("trim", Plan(2, drop=[seqs[2] - 1, seqs[2]], note=(seqs[2] - 1, "[trimmed 4]"))),
        ("full", Plan(2, drop=[seqs[3] - 1, seqs[3]], note=(seqs[3] - 1, "[summary]"), note_replaces_all=True)),
    ]
    for layer, plan in plans:
        expected = [m.canonical() for m in pipeline.preview(s, layer, plan)]
        pipeline.apply(state, Scripted(layer, plan), plan)
        assert [m.canonical() for m in s.trajectory()] == expected


# -- the trigger gate ---------------------------------------------------------------------------
def test_tiers_behind_the_trigger_wait_for_spacing_unless_the_request_is_over_the_window(tmp_path):
    s = _session()
    seqs = _tool_seqs(s)
    own = Scripted("own_threshold", Plan(1, replace={seqs[0]: "[x]"}), after_trigger=False)
    gated = Scripted("gated", Plan(1, replace={seqs[1]: "[y]"}))
    state = _state(tmp_path, s, window=4000, spaced=False, trigger_ratio=0.1)
    assert state.over_trigger() and state.tokens < state.window
    reports = pipeline.run([own, gated], state)
    assert [r.layer for r in reports] == ["own_threshold"] and gated.asked_at is None

    s = _session()
    gated = Scripted("gated", Plan(1, replace={_tool_seqs(s)[1]: "[y]"}))
    state = _state(tmp_path, s, window=600, spaced=False)
    assert state.tokens > state.window  # over the window: no choice
    assert [r.layer for r in pipeline.run([gated], state)] == ["gated"]


def test_the_gate_is_decided_once_per_pass(tmp_path):
    """Begun over the window, a pass runs on to the trigger even after its first tier brought
    the request under the window (otherwise an unspaced pass would stop half way)."""
    s = _session()
    seqs = _tool_seqs(s)
    state = _state(tmp_path, s, window=1400, spaced=False, trigger_ratio=0.1)
    assert state.tokens > state.window
    first = Scripted("first", Plan(3, replace={q: "[gone]" for q in seqs[:3]}))
    second = Scripted("second", Plan(1, replace={seqs[3]: "[gone]"}))
    reports = pipeline.run([first, second], state)
    assert [r.layer for r in reports] == ["first", "second"]
    assert reports[0].tokens_after < state.window  # under the window before the second tier
    assert second.asked_at == reports[0].tokens_after  # and it saw the size measured again


# -- every tier reports through the same step ------------------------------------------------------
def _agent(store, tmp_path, window: int, **cfg) -> Agent:
    reg = ToolRegistry()

    @tool
    def fetch_page(page: int) -> str:
        """Fetch a page.

        Args:
            page: id
        """
        return PAGE.replace("Alice", f"Person{page}") * (1 + page % 3)

    reg.register(fetch_page)
    reg.register(ResultReader().tool())
    replies = [
        Message(role="assistant", content=f"step {i}", tool_calls=(call("fetch_page", {"page": i}, f"p{i}"),))
        for i in range(14)
    ]
    replies.append("Person0 works at Helix Robotics.")
    s = Session.start(Prefix.build("sys", reg.specs()), store=store)
    summary = ScriptedBackend([lambda req: "calls: fetch_page\nfacts: Helix Robotics, 2021, NL-4521"] * 200)
    comp = CompactionConfig(results_dir=tmp_path, window_tokens=window, **cfg)
    return Agent(
        s,
        ScriptedBackend(replies),
        reg,
        AgentConfig(compaction=comp, max_iterations=40),
        counter=COUNT,
        summary_backend=summary,
    )


@pytest.mark.parametrize(
    "cfg, expected",
    [
        (dict(strategy="extractive"), {"noise", "trim"}),
        (dict(archival_summaries=True, keep_recent_results=2), {"archival", "clearing", "trim"}),
        (dict(full_compaction=True, drop_unused=False, policy="eager"), {"clearing", "full_stage1"}),
        # the cost planner goes deep: stage 2 as well, in the same pass
        (dict(full_compaction=True, drop_unused=False), {"clearing", "full_stage1", "full_stage2"}),
        (dict(strategy="adaptive", adaptive_ratio=0.6), {"adaptive"}),
    ],
)
def test_every_tier_reports_the_event_it_recorded(store, tmp_path, monkeypatch, cfg, expected):
    applied: list[tuple[str, PassState]] = []
    real_apply = pipeline.apply

    def watched(state: PassState, tier: Tier, plan: Plan) -> CompactionReport:
        applied.append((tier.name, state))
        shown = [m.canonical() for m in pipeline.preview(state.session, tier.layer, plan)]
        report = real_apply(state, tier, plan)
        assert [m.canonical() for m in state.session.trajectory()] == shown
        return report

    monkeypatch.setattr(pipeline, "apply", watched)
    agent = _agent(store, tmp_path, 3000, **cfg)
    r = agent.run("Where does each person work now?")
    assert r.stop_reason == "final_answer"
    s = agent.session
    reports = [(k, rep) for k, c in enumerate(r.calls) for rep in c.compactions]
    assert {rep.layer for _, rep in reports} == expected
    assert [name for name, _ in applied] == [rep.layer for _, rep in reports]  # all through the one step
    compactions = [ev for ev in s.events if isinstance(ev, CompactionEvent)]
    assert [ev.seq for ev in compactions] == [rep.event_seq for _, rep in reports]  # one event per report
    for k, rep in reports:
        p = s.events[rep.event_seq]
        assert isinstance(p, CompactionEvent)
        assert p.layer == ("full" if rep.layer.startswith("full_stage") else rep.layer)
        assert p.tokens_before == rep.tokens_before and p.call_index == k
        assert rep.messages_changed > 0
    for (k, a), (k2, b) in itertools.pairwise(reports):
        if k == k2:  # within one pass each tier starts from the size the last one measured
            assert b.tokens_before == a.tokens_after
    assert violations([m for _, m in s.recorded_messages()], s.trajectory()) == []
