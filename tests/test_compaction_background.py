"""No stalls: summaries written ahead in the background and applied at a call boundary with
the bytes the synchronous path sends, stale ones discarded, the stall recorded per
compaction, and a server's context-length error compacted and retried once."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable

import pytest

from ctxwright.agent.loop import Agent, AgentConfig
from ctxwright.backends.scripted import ScriptedBackend
from ctxwright.compaction import CompactionConfig, ContextManager
from ctxwright.compaction.background import Ahead, stall_summary
from ctxwright.compaction.summarizer import Summarizer
from ctxwright.core.events import BudgetRecord, CompactionEvent, SummaryFailedEvent, event_from_dict
from ctxwright.core.messages import Message, ToolCall
from ctxwright.core.prefix import Prefix
from ctxwright.core.request import ChatRequest
from ctxwright.core.session import Session
from ctxwright.core.tokens import TokenCounter, estimate_tokens
from ctxwright.errors import ContextWindowExceeded
from ctxwright.store.sessions import Store
from ctxwright.tools.registry import ToolRegistry, tool

COUNT = TokenCounter(estimate_tokens, "estimate")
SUMMARY_S = 0.3
PAGE = "lorem ipsum dolor sit amet, consectetur adipiscing elit " * 20


def notes(req: ChatRequest) -> str:
    """A deterministic summary: the same text in gives the same summary out."""
    time.sleep(SUMMARY_S)
    body = req.messages[1].content or ""
    return "notes " + hashlib.sha256(body.encode()).hexdigest()[:16]


def poll(cond: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


@tool
def fetch(page: int) -> str:
    """Fetch a page."""
    return f"page {page}: {PAGE}"


def config(tmp_path, background: bool, **kw) -> CompactionConfig:
    base = {
        "results_dir": tmp_path,
        "window_tokens": 30_000,
        "full_compaction": True,
        "drop_unused": False,
        "min_clear_tokens": 10**9,
        "policy": "eager",
        "soft_ratio": 0.45,
        "background": background,
        # the synchronous run compacts where the background one starts writing its summary
        "trigger_ratio": 0.9 if background else 0.45,
    }
    return CompactionConfig(**{**base, **kw})


def run_agent(tmp_path, background: bool, n: int, db=None):
    """n tool rounds; in background mode each main call waits until a summary being written
    ahead is done, so it is applied at the very next boundary whatever the machine's load."""
    holder: dict[str, Agent] = {}
    k = [0]

    def reply(req: ChatRequest) -> Message:
        ahead = holder["agent"].context.ahead if "agent" in holder else None
        if ahead is not None and ahead.job is not None:
            poll(ahead.job.done.is_set)
        k[0] += 1
        args = json.dumps({"page": k[0]})
        return Message(role="assistant", content=f"step {k[0]}", tool_calls=(ToolCall(f"c{k[0]}", "fetch", args),))

    main, sb = ScriptedBackend([reply]), ScriptedBackend([notes])
    reg = ToolRegistry([fetch])
    s = Session.start(Prefix.build("sys", tools=reg.specs()), store=db)
    cfg = AgentConfig(compaction=config(tmp_path / ("bg" if background else "sync"), background), max_iterations=n)
    cfg.max_repeats = None
    agent = Agent(s, main, reg, cfg, counter=COUNT, summary_backend=sb)
    holder["agent"] = agent
    result = agent.run("read every page")
    assert result.stop_reason == "max_iterations"
    return s, main, sb


def body(req: ChatRequest) -> str:
    return json.dumps(req.openai_body("m"), sort_keys=True)


@pytest.mark.slow
def test_background_summary_applied_later_with_the_synchronous_bytes(tmp_path):
    sync_s, sync_main, _ = run_agent(tmp_path, False, 90)
    store = Store(str(tmp_path / "bg.db"))
    bg_s, bg_main, bg_sb = run_agent(tmp_path, True, 90, db=store)
    sync_ev = [e for e in sync_s.events if isinstance(e, CompactionEvent)]
    bg_ev = [e for e in bg_s.events if isinstance(e, CompactionEvent)]
    assert len(bg_ev) >= 2 and len(sync_ev) >= len(bg_ev)
    for ev in bg_ev:
        assert ev.layer == "full" and ev.extra["background"] is True
        prepared = ev.extra["prepared_at_call"]
        assert ev.call_index is not None and ev.call_index > prepared  # applied at a later boundary
        # the synchronous run compacted that same span where the summary was started: from the
        # boundary that applies it on, both send the same bytes
        assert any(e.call_index == prepared for e in sync_ev)
        assert body(bg_main.requests[ev.call_index]) == body(sync_main.requests[ev.call_index])
        assert ev.note is not None and ev.note.text.splitlines()[-1] in body(bg_main.requests[ev.call_index])
    # the stall is recorded per compaction: the synchronous one waited for the summary
    assert all(e.stall_ms is not None and e.stall_ms >= SUMMARY_S * 1000 for e in sync_ev)
    assert all(e.stall_ms is not None and e.stall_ms < min(x.stall_ms or 0 for x in sync_ev) for e in bg_ev)
    assert len(bg_sb.requests) == len(bg_ev)  # one summary per compaction, none wasted
    # recorded byte-stable: the stored session renders the request the live one sent last
    again = Session.resume(store, bg_s.id)
    assert body(again.build_request()) == body(bg_s.build_request())
    store.close()


def _long_session(n: int) -> Session:
    s = Session.start(Prefix.build("sys"))
    s.add_user("Read the pages. Constraint: never call the billing API.")
    for i in range(n):
        c = ToolCall(f"c{i}", "fetch", json.dumps({"page": i}))
        s.add_assistant(Message(role="assistant", content=f"checking page {i}", tool_calls=(c,)))
        s.add_tool_result(c.id, f"page {i}: {PAGE}", tool_name="fetch", budget=BudgetRecord(c.id))
    return s


def _manager(tmp_path, window: int) -> tuple[ContextManager, ScriptedBackend]:
    sb = ScriptedBackend([notes])
    m = ContextManager(config(tmp_path, True, window_tokens=window, trigger_ratio=0.8), COUNT, window)
    m.summarizer = Summarizer(sb, COUNT, timeout_s=30.0)
    m.ahead = Ahead(m.summarizer)
    return m, sb


def test_a_stale_background_summary_is_discarded(tmp_path):
    s = _long_session(12)
    m, _sb = _manager(tmp_path, 0)
    m.window_tokens = int(m.request_tokens(s) / 0.5) + m.config.reserve_output_tokens  # over soft, under trigger
    m.bind(s)
    assert m.before_call(s, 12) == []  # started ahead, nothing applied: the loop goes on
    job = m.ahead.job
    assert job is not None and m.ahead.running
    picked = next(seq for seq, _ in job.picked if seq is not None and s.events[seq].kind == "tool")
    s.add_compaction("clearing", replace={picked: "[cleared]"}, call_index=12)  # the span changed meanwhile
    poll(job.done.is_set)
    m.last_compaction_call = -100
    reports = m.before_call(s, 13)
    stale = [e for e in s.events if isinstance(e, SummaryFailedEvent)]
    assert [e.reason for e in stale] == ["stale"] and "discarded" in stale[0].detail
    assert all(r.kind != "full" for r in reports)
    assert not any(isinstance(e, CompactionEvent) and e.layer == "full" for e in s.events)
    assert m.ahead.discarded == 1 and m.ahead.applied == 0


def test_the_trigger_waits_for_the_summary_ahead_instead_of_starting_another(tmp_path):
    s = _long_session(12)
    m, sb = _manager(tmp_path, 0)
    m.window_tokens = int(m.request_tokens(s) / 0.5) + m.config.reserve_output_tokens
    m.bind(s)
    assert m.before_call(s, 12) == [] and m.ahead.running
    for i in range(12, 30):  # the loop goes on past the trigger before the summary is ready
        c = ToolCall(f"c{i}", "fetch", json.dumps({"page": i}))
        s.add_assistant(Message(role="assistant", content=f"checking page {i}", tool_calls=(c,)))
        s.add_tool_result(c.id, f"page {i}: {PAGE}", tool_name="fetch", budget=BudgetRecord(c.id))
    assert m.request_tokens(s) > m.config.trigger_ratio * m.effective_window
    reports = m.before_call(s, 13)
    full = [e for e in s.events if isinstance(e, CompactionEvent) and e.layer == "full"]
    assert full and full[0].extra.get("background") is True and full[0].extra["prepared_at_call"] == 12
    assert reports[0].kind == "full"
    # stage 1 of the summary prepared ahead, then any further summary this pass needed: never the same span twice
    spans = [r.messages[1].content for r in sb.requests]
    assert len(spans) == len(set(spans)) == len(full)


def _rounds(n: int) -> list[Message]:
    return [
        Message(role="assistant", content=f"step {i}", tool_calls=(ToolCall(f"c{i}", "fetch", f'{{"page": {i}}}'),))
        for i in range(n)
    ]


def _overflow_agent(tmp_path, replies) -> tuple[Agent, Session]:
    reg = ToolRegistry([fetch])
    s = Session.start(Prefix.build("sys", tools=reg.specs()), store=Store(str(tmp_path / "o.db")))
    cfg = CompactionConfig(results_dir=tmp_path, window_tokens=200_000, keep_recent_results=2, min_clear_tokens=8)
    agent = Agent(s, ScriptedBackend(replies), reg, AgentConfig(compaction=cfg, max_iterations=30), counter=COUNT)
    return agent, s


def test_context_length_error_is_compacted_and_retried_once(tmp_path, capsys):
    overflow = ContextWindowExceeded("This model's maximum context length is 8192 tokens")
    agent, s = _overflow_agent(tmp_path, [*_rounds(8), overflow, "the answer"])
    result = agent.run("read the pages")
    assert result.stop_reason == "final_answer" and result.final_answer == "the answer"
    forced = [e for e in s.events if isinstance(e, CompactionEvent) and e.overflow_retry]
    assert forced and all(e.call_index == 9 for e in forced)  # after the failed call 8, before its retry
    assert s.store is not None
    failed = [c for c in s.store.calls(s.id) if c.error]
    assert len(failed) == 1 and "maximum context length" in (failed[0].error or "")
    assert not any(isinstance(e, CompactionEvent) and not e.overflow_retry for e in s.events)
    # the stall of each compaction, p50/p95, under the ledgers of ``show --compactions``
    from ctxwright.cli.main import main

    capsys.readouterr()
    assert main(["--db", str(tmp_path / "o.db"), "show", s.id, "--compactions", "--json"]) in (0, None)
    stall = json.loads(capsys.readouterr().out)["stall"]
    assert stall["n"] == len(forced) and stall["p95_ms"] >= stall["p50_ms"] >= 0
    assert main(["--db", str(tmp_path / "o.db"), "show", s.id, "--compactions"]) in (0, None)
    assert f"over {len(forced)} compaction(s)" in capsys.readouterr().out
    # and in the HTML report: the summary line above the compactions table, a column per row
    from ctxwright.report import from_store, render_html

    data = from_store(s.store, s.id)
    page = data.sessions[0]
    assert page.stall == stall and page.compactions[0].stall_ms is not None
    assert f"ms over {len(forced)} compaction(s)" in render_html(data)


def test_a_second_context_length_error_ends_the_run_with_the_error(tmp_path):
    overflow = ContextWindowExceeded("This model's maximum context length is 8192 tokens")
    agent, s = _overflow_agent(tmp_path, [*_rounds(8), overflow, overflow, "never"])
    result = agent.run("read the pages")
    assert result.stop_reason == "backend_error"
    assert result.error is not None and "ContextWindowExceeded" in result.error and "8192" in result.error
    assert s.store is not None
    assert len([c for c in s.store.calls(s.id) if c.error]) == 2  # the call and its one retry
    forced_calls = {e.call_index for e in s.events if isinstance(e, CompactionEvent) and e.overflow_retry}
    assert forced_calls == {9}  # one forced compaction, not two


def test_stall_ms_is_recorded_and_old_events_stay_readable(tmp_path):
    s = _long_session(12)
    m = ContextManager(CompactionConfig(results_dir=tmp_path, policy="eager", min_clear_tokens=8), COUNT, 0)
    m.window_tokens = int(m.request_tokens(s) / 0.7) + m.config.reserve_output_tokens
    m.bind(s)
    assert m.before_call(s, 12)
    ev = next(e for e in s.events if isinstance(e, CompactionEvent))
    assert ev.stall_ms is not None and ev.stall_ms >= 0
    back = event_from_dict(ev.to_dict())
    assert isinstance(back, CompactionEvent) and back.stall_ms == ev.stall_ms
    old = {k: v for k, v in ev.to_dict().items() if k != "stall_ms"}
    before = event_from_dict(old)
    assert isinstance(before, CompactionEvent) and before.stall_ms is None and not before.overflow_retry
    assert stall_summary([5.0, 1.0, 3.0, 200.0]) == {"n": 4, "p50_ms": 3.0, "p95_ms": 200.0, "max_ms": 200.0}
    assert stall_summary([]) is None


def test_summarizer_is_another_backend_or_a_model_served_like_the_backend():
    from ctxwright import Harness
    from ctxwright.errors import ConfigError

    sb = ScriptedBackend(["notes"])
    with Harness("sys", backend=ScriptedBackend(["hi"]), summarizer=sb, summaries=True) as h:
        assert h.context.compaction is not None and h.context.compaction.summarizer is not None
        assert h.context.compaction.summarizer.backend is sb
    with Harness(
        "sys", backend="openai", model="big", base_url="http://127.0.0.1:9/v1", api_key="k", summarizer="small"
    ) as h:
        assert h.context.compaction is not None and h.context.compaction.summarizer is not None
        made = h.context.compaction.summarizer.backend
        assert (made.model, h.backend.model) == ("small", "big")
        assert getattr(made, "base_url", None) == getattr(h.backend, "base_url", None)
    with pytest.raises(ConfigError, match="summarizer"):
        Harness("sys", backend=ScriptedBackend(["hi"]), summarizer="small", summaries=True)
