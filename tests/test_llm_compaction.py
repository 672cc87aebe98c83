"""LLM compaction (issue 6) against a scripted summarizer: identifiers kept, every failure
mode of a summary, the circuit breaker, the strategies of experiment 2-9, archival round
summaries and two-stage full compaction -- always ending in a valid context, never losing
an event."""

from __future__ import annotations

import time

import pytest

from ctxwright.agent.loop import Agent, AgentConfig
from ctxwright.backends.scripted import ScriptedBackend, call
from ctxwright.compaction import CompactionConfig, ContextManager
from ctxwright.compaction.breaker import CircuitBreaker
from ctxwright.compaction.check import violations
from ctxwright.compaction.extractive import select_sentences
from ctxwright.compaction.identifiers import extract, missing, reattach
from ctxwright.compaction.retrieval import ResultReader
from ctxwright.compaction.strategies import STRATEGIES, NewResult, StrategyContext, compress_batch
from ctxwright.compaction.summarizer import Summarizer
from ctxwright.core.events import BreakerEvent, BudgetRecord, CompactionEvent, SummaryFailedEvent, ToolEvent
from ctxwright.core.messages import Message, ToolCall
from ctxwright.core.prefix import Prefix
from ctxwright.core.session import Session
from ctxwright.core.tokens import TokenCounter, estimate_tokens
from ctxwright.errors import BackendUnavailable, SummaryFailed
from ctxwright.status.bar import StatusBar, StatusConfig
from ctxwright.tools.registry import ToolRegistry, tool

COUNT = TokenCounter(estimate_tokens, "estimate")
PAGE = (
    "Navigation: Home | About | Careers | Contact.\n"
    + "Alice Varga co-founded Nordlys Labs in 2015. She joined Helix Robotics as CTO in 2021. " * 3
    + "Footer: cookie settings, privacy, terms. " * 40
    + "Commit 3f9a2c1d fixed the ingest bug; see https://nordlys.example/post/77 and ticket NL-4521."
)


def summarizer(*replies, **kw) -> tuple[Summarizer, ScriptedBackend]:
    b = ScriptedBackend(list(replies))
    return Summarizer(b, COUNT, **kw), b


# -- identifiers -------------------------------------------------------------------------------
def test_identifiers_extracted_checked_and_reattached():
    ids = extract(PAGE)
    assert {"3f9a2c1d", "https://nordlys.example/post/77", "NL-4521"} <= set(ids)
    lost = missing(ids, "Alice joined Helix in 2021.")
    fixed = reattach("Alice joined Helix in 2021.", lost)
    assert missing(ids, fixed) == [] and fixed.startswith("Alice joined Helix in 2021.")


# -- the summarizer's failure modes ---------------------------------------------------------------
def test_summary_reattaches_dropped_identifiers():
    s, b = summarizer("Alice Varga co-founded Nordlys Labs (2015) and joined Helix Robotics as CTO in 2021.")
    out = s.summarize(PAGE, "Summarize.", max_chars=500)
    assert out.identifiers_reattached == 3 and "NL-4521" in out.text and "3f9a2c1d" in out.text
    req = b.requests[0]
    assert req.tools == () and req.messages[0].role == "system"  # its own request, not the session's


@pytest.mark.parametrize(
    "reply,reason", [("", "empty"), ("x" * 5000, "oversized"), (BackendUnavailable("connection refused"), "error")]
)
def test_bad_summaries_are_failures_with_a_reason(reply, reason):
    s, _ = summarizer(reply)
    with pytest.raises(SummaryFailed) as e:
        s.summarize(PAGE, "Summarize.", max_chars=500)
    assert e.value.reason == reason


def test_summary_timeout_is_a_failure_and_the_model_object_is_marked_busy():
    def slow(req):
        time.sleep(0.6)
        return "late"

    s, _ = summarizer(slow, timeout_s=0.1)
    with pytest.raises(SummaryFailed) as e:
        s.summarize(PAGE, "Summarize.", max_chars=500)
    assert e.value.reason == "timeout"
    with pytest.raises(SummaryFailed) as e2:
        s.summarize(PAGE, "Summarize.", max_chars=500)
    assert e2.value.reason == "busy"


def test_long_input_is_cut_to_the_summarizer_budget():
    s, b = summarizer("ok summary of it")
    big = PAGE * 200
    s.summarize(big, "Summarize.", max_chars=500, query="Where does Alice Varga work?")
    sent = b.requests[0].messages[1].content
    assert estimate_tokens(sent) < 3_000 + 200 and "Helix Robotics" in sent
    s2, b2 = summarizer("ok summary of it", input_budget_tokens=300)
    s2.summarize(big, "Summarize.", max_chars=500)
    assert "input cut here" in b2.requests[0].messages[1].content


# -- the breaker -------------------------------------------------------------------------------
def test_breaker_opens_after_three_failures_and_closes_after_a_successful_trial():
    s = Session.start(Prefix.build("sys"))
    br = CircuitBreaker(threshold=3, cooldown_calls=10)
    assert not br.failure("empty", s, 1) and not br.failure("error", s, 2)
    assert br.failure("timeout", s, 3) and br.state(4) == "open" and not br.allow(12)
    line = StatusBar(StatusConfig(items=("compaction",))).values(s)["compaction"]
    assert "paused after 3 failures (timeout)" in line and "next try at call 13" in line
    assert br.allow(13) and br.state(13) == "half_open"
    assert br.failure("empty", s, 13) and not br.allow(14)  # a failed trial re-opens at once
    br.success(s, 23)
    assert br.state(24) == "closed" and br.failures == 0
    assert "compaction" not in StatusBar(StatusConfig(items=("compaction",))).values(s)
    again = CircuitBreaker()
    again.restore(s)
    assert again.state(30) == "closed"


# -- strategies ------------------------------------------------------------------------------------
def _results(n=3):
    return [NewResult("fetch_page", f"r{i}", PAGE.replace("Alice", f"Alice{i}"), "content") for i in range(n)]


def test_strategy_names():
    assert STRATEGIES == (
        "none",
        "per_result",
        "combined",
        "context_aware",
        "context_aware_cited",
        "adaptive",
        "extractive",
    )


def test_per_result_combined_and_context_aware():
    s, b = summarizer(lambda req: "Alice founded Nordlys Labs in 2015.")
    ctx = StrategyContext(
        query="Where does Alice work now?",
        known=["Bob joined Acme in 2020."],
        summarize=lambda text, instr, max_chars, query: s.summarize(text, instr, max_chars=max_chars, query=query).text,
        count=COUNT.count,
    )
    per = compress_batch("per_result", _results(), ctx)
    assert len(b.requests) == 3 and all(p and 'read_result(result_id="r' in p for p in per)
    b.requests.clear()
    comb = compress_batch("combined", _results(), ctx)
    assert len(b.requests) == 1 and comb[0].startswith("[combined summary of results r0, r1, r2")
    assert "summarized with result r0 above" in comb[1]
    b.requests.clear()
    compress_batch("context_aware", _results(1), ctx)
    prompt = b.requests[0].messages[1].content
    assert "Given the search query: Where does Alice work now?" in prompt and "Bob joined Acme in 2020." in prompt
    b.requests.clear()
    compress_batch("context_aware_cited", _results(1), ctx)
    assert "[r0]" in b.requests[0].messages[1].content
    assert compress_batch("none", _results(), ctx) == [None, None, None]


def test_extractive_needs_no_llm_and_keeps_the_relevant_sentences():
    ctx = StrategyContext(query="Where does Alice0 Varga work now? Helix", count=COUNT.count)
    (out,) = compress_batch("extractive", _results(1), ctx)
    assert "joined Helix Robotics as CTO in 2021. [r0]" in out and "cookie" not in out
    assert out.count("She joined Helix Robotics") == 1  # repeated sentences kept once
    assert select_sentences("", "q", 100, COUNT.count) == ""


def _research_session(store, tmp_path, strategy, summary, window=6000, **cfg):
    reg = ToolRegistry()

    @tool
    def fetch_page(page: int) -> str:
        """Fetch a page.

        Args:
            page: id
        """
        return PAGE.replace("Alice", f"Person{page}")

    reg.register(fetch_page)
    reg.register(ResultReader().tool())
    replies = [Message(role="assistant", tool_calls=(call("fetch_page", {"page": i}, f"p{i}"),)) for i in range(8)]
    replies.append("Person0 works at Helix Robotics.")
    s = Session.start(Prefix.build("sys", reg.specs()), store=store)
    sb = ScriptedBackend([summary])
    comp = CompactionConfig(results_dir=tmp_path, window_tokens=window, strategy=strategy, **cfg)
    agent = Agent(
        s,
        ScriptedBackend(replies),
        reg,
        AgentConfig(compaction=comp, max_iterations=20),
        counter=COUNT,
        summary_backend=sb,
    )
    return agent, sb


def test_context_aware_strategy_compresses_at_record_time_and_keeps_originals(store, tmp_path):
    agent, sb = _research_session(
        store, tmp_path, "context_aware", lambda req: "Person joined Helix Robotics as CTO in 2021."
    )
    r = agent.run("Where does each person work now?")
    assert r.stop_reason == "final_answer"
    tools = [ev for ev in agent.session.events if isinstance(ev, ToolEvent)]
    assert all(ev.compressed == "context_aware" for ev in tools)
    assert all((ev.message.content or "").startswith("[task-aware summary of the fetch_page") for ev in tools)
    assert "NL-4521" in (tools[0].message.content or "")  # identifier re-attached verbatim
    assert agent.context.reader.read("p3", 0, 8000).count("Person3 Varga") == 3  # original restorable
    assert len(sb.requests) == 8


def test_adaptive_waits_for_80_percent_then_compresses_each_once(store, tmp_path):
    agent, _sb = _research_session(
        store,
        tmp_path,
        "adaptive",
        lambda req: "Person joined Helix in 2021.",
        window=3000,
        trigger_ratio=0.95,
        drop_unused=False,
    )
    r = agent.run("Where does each person work now?")
    assert r.stop_reason == "final_answer"
    comps = [ev for ev in agent.session.events if isinstance(ev, CompactionEvent) and ev.layer == "adaptive"]
    assert comps and len(comps) < len(r.calls)
    assert r.calls[0].compactions == []  # nothing before the threshold
    replaced = [k for ev in comps for k in ev.replace]
    assert len(replaced) == len(set(replaced))  # never compressed twice
    assert all(v.startswith("[COMPRESSED]") for ev in comps for v in ev.replace.values())
    assert violations([m for _, m in agent.session.recorded_messages()], agent.session.trajectory()) == []


def test_three_failing_summaries_open_the_breaker_and_the_layers_without_llm_take_over(store, tmp_path):
    agent, sb = _research_session(store, tmp_path, "context_aware", BackendUnavailable("summarizer down"), window=3000)
    r = agent.run("Where does each person work now?")
    assert r.stop_reason == "final_answer"
    s = agent.session
    assert len(sb.requests) == 3  # no LLM call after the breaker opened
    assert [ev.reason for ev in s.events if isinstance(ev, SummaryFailedEvent)] == ["error"] * 3
    assert any(isinstance(ev, BreakerEvent) and ev.state == "open" for ev in s.events)
    assert any(isinstance(ev, CompactionEvent) and ev.layer in ("clearing", "trim") for ev in s.events)
    assert max(c.prompt_tokens or 0 for c in r.calls) <= 3000
    assert violations([m for _, m in s.recorded_messages()], s.trajectory()) == []
    assert len(store.events(s.id)) == len(s.events)


# -- layers 4 and 5 ------------------------------------------------------------------------------
def _long_session(n_rounds=10):
    s = Session.start(Prefix.build("sys"))
    s.add_user("Find where Alice works. Constraint: never call the billing API.")
    for i in range(n_rounds):
        c = ToolCall(f"c{i}", "fetch_page", f'{{"page": {i}}}')
        s.add_assistant(Message(role="assistant", content=f"checking page {i}", tool_calls=(c,)))
        s.add_tool_result(c.id, PAGE, tool_name="fetch_page", budget=BudgetRecord(c.id))
    return s


def test_archival_summaries_one_per_round_in_order(tmp_path):
    # policy eager: the layers stop as soon as the request fits, so the archival layer's own
    # work stays in view (the cost policy goes on to clear and trim to its target, test_planner.py)
    s = _long_session()
    m = ContextManager(
        CompactionConfig(
            results_dir=tmp_path, archival_summaries=True, keep_recent_results=2, drop_unused=False, policy="eager"
        ),
        COUNT,
        4000,
    )
    m.summarizer, _sb = summarizer(lambda req: "calls: fetch_page\nfacts: Alice, Helix Robotics, 2021\nerrors: none")
    m.bind(s)
    reports = m.before_call(s, 10)
    assert reports[0].layer == "archival"
    view = s.trajectory()
    tools = [t.content for t in view if t.role == "tool"]
    assert [t.split("]")[0] for t in tools[:3]] == [
        "[round 1 summary of results c0; read_result(result_id=...) restores each",
        "[round 2 summary of results c1; read_result(result_id=...) restores each",
        "[round 3 summary of results c2; read_result(result_id=...) restores each",
    ]
    assert tools[-1] == PAGE  # the newest result stays whole (clearing keeps what fits 20% of the window)
    assert violations([mm for _, mm in s.recorded_messages()], view) == []


def test_full_compaction_two_stages_keeps_task_and_identifiers(tmp_path):
    s = _long_session(24)
    cfg = CompactionConfig(
        results_dir=tmp_path, full_compaction=True, drop_unused=False, keep_recent_results=30, min_clear_tokens=10**9
    )
    m = ContextManager(cfg, COUNT, 6000)
    m.summarizer, sb = summarizer(lambda req: "Decision: never call the billing API. Alice works at Helix Robotics.")
    m.bind(s)
    reports = m.before_call(s, 30)
    layers = [r.layer for r in reports]
    assert layers[0] == "full_stage1" and set(layers) <= {"full_stage1", "full_stage2", "trim"}
    view = s.trajectory()
    assert view[0].content.startswith("Find where Alice works")  # the first user message is pinned
    notes = [v for v in view if v.role == "user" and "full compaction" in (v.content or "")]
    assert len(notes) == 1 and "NL-4521" in notes[0].content and "billing API" in notes[0].content
    assert m.request_tokens(s) <= m.effective_window
    assert violations([mm for _, mm in s.recorded_messages()], view) == []
    assert "checking page 0" in sb.requests[0].messages[1].content  # stage 1 saw the oldest turns


def test_cli_compaction_flag_selects_a_strategy(tmp_path, capsys):
    from ctxwright.cli.main import build_parser

    args = build_parser().parse_args(["run", "--compaction", "context_aware", "hi"])
    assert args.compaction == "context_aware"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--compaction", "squash", "hi"])
