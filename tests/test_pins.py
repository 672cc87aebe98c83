"""Pins (compaction/pins.py): a message, an event or a text pinned by the user, a tool's results
pinned by ``@tool(pin=True)``, a fact pinned by the model with the ``pin`` tool -- every
compaction tier keeps them whole, the check refuses a plan that touches one, the ledger lists
them as kept, and a resumed session keeps them (they are events)."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from ctxwright import CompactionConfig, CtxwrightError, Harness, ScriptedBackend, tool
from ctxwright.agent.loop import Agent, AgentConfig
from ctxwright.backends.scripted import call
from ctxwright.compaction import full, pipeline
from ctxwright.compaction.check import violations
from ctxwright.compaction.clearing import clear_old_results
from ctxwright.compaction.ledger import hidden_seqs, ledgers
from ctxwright.compaction.noise import unused_results
from ctxwright.compaction.pinned import catalog_messages
from ctxwright.compaction.pins import PIN_NOTE_KEY, PIN_TOOL, PinTool, pinned_messages, pinned_seqs
from ctxwright.compaction.pipeline import PassState, Plan
from ctxwright.compaction.trim import plan_trim
from ctxwright.core.events import CompactionEvent, PinEvent, ToolEvent, UserEvent, event_from_dict
from ctxwright.core.messages import Message, Usage
from ctxwright.core.prefix import Prefix
from ctxwright.core.request import Completion
from ctxwright.core.session import Session
from ctxwright.core.tokens import TokenCounter, estimate_tokens
from ctxwright.errors import EventFormatError
from ctxwright.store.sessions import Store
from ctxwright.tools.registry import ToolRegistry
from test_compaction import _session as scripted_session
from test_compaction import trajectories

COUNT = TokenCounter(estimate_tokens, "estimate")
PAGE = (
    "Alice Varga co-founded Nordlys Labs in 2015. She joined Helix Robotics as CTO in 2021. " * 3
    + "Footer: cookie settings, privacy, terms. " * 40
    + "Commit 3f9a2c1d fixed the ingest bug; ticket NL-4521."
)
FACT = "Deploy only to eu-west-3; never touch the billing tables."


@tool
def fetch_page(page: int) -> str:
    """Fetch a page.

    Args:
        page: id
    """
    return PAGE.replace("Alice", f"Person{page}") * (1 + page % 3)


@tool(pin=True)
def read_spec(name: str) -> str:
    """Read a specification the whole task depends on.

    Args:
        name: the spec's name
    """
    return f"Spec {name}: every order id is ORD-{name}-7731; totals are in cents.\n" + PAGE


def _fetch(i: int, text: str | None = None) -> Message:
    return Message(
        role="assistant", content=text or f"step {i}", tool_calls=(call("fetch_page", {"page": i}, f"p{i}"),)
    )


def _seq(s: Session, call_id: str) -> int:
    return next(ev.seq for ev in s.events if isinstance(ev, ToolEvent) and ev.message.tool_call_id == call_id)


def _kept(s: Session) -> list[str]:
    """The invariants, pins included, over the session's view."""
    return violations(
        [m for _, m in s.recorded_messages()], s.trajectory(), catalog_messages(s.events), pinned_messages(s.events)
    )


# -- every tier ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "cfg, tier",
    [
        (dict(policy="eager"), "clearing"),
        (dict(strategy="extractive"), "noise"),
        (dict(strategy="extractive"), "trim"),
        (dict(archival_summaries=True, keep_recent_results=2), "archival"),
        (dict(full_compaction=True, drop_unused=False, policy="eager"), "full_stage1"),
        (dict(full_compaction=True, drop_unused=False), "full_stage2"),
        (dict(strategy="adaptive", adaptive_ratio=0.6), "adaptive"),
    ],
)
def test_a_pinned_message_survives_every_tier(store, tmp_path, cfg, tier):
    reg = ToolRegistry()
    reg.register(fetch_page)
    replies: list = [_fetch(0), "Page 0 read: Person0 is CTO at Helix Robotics."]
    replies += [_fetch(i) for i in range(1, 15)] + ["Person0 works at Helix Robotics."]
    s = Session.start(Prefix.build("sys", reg.specs()), store=store)
    summary = ScriptedBackend([lambda req: "calls: fetch_page\nfacts: Helix Robotics, 2021, NL-4521"] * 200)
    comp = CompactionConfig(results_dir=tmp_path, window_tokens=3000, **cfg)
    agent = Agent(
        s,
        ScriptedBackend(replies),
        reg,
        AgentConfig(compaction=comp, max_iterations=40),
        counter=COUNT,
        summary_backend=summary,
    )
    assert agent.run("Read page 0.").stop_reason == "final_answer"
    ctx = agent.ctx
    page0, answer = _seq(s, "p0"), len(s.events) - 1
    ctx.pin(page0)  # a tool result, by seq
    ctx.pin(s.events[answer].message)  # an assistant message, by the Message
    fact = ctx.pin(FACT)  # a text the user states
    pinned = {page0, answer, *fact.targets}
    recorded = {q: s.events[q].message for q in pinned}

    r = agent.run("Where does each person work now?")
    assert r.stop_reason == "final_answer"
    layers = [rep.layer for c in r.calls for rep in c.compactions]
    assert tier in layers
    view = s.trajectory()
    for q, m in recorded.items():
        assert m in view, f"pinned event {q} ({m.role}) is not in the view whole after {layers}"
    assert _kept(s) == []
    # the tiers did compact the neighbours: page 1, as old, is hidden or shortened
    assert _seq(s, "p1") in hidden_seqs(s.events)
    assert not pinned & hidden_seqs(s.events)
    # every compaction's ledger lists the pins as kept
    for ev, led in ledgers(s.events):
        assert led is not None and {p.seq for p in led.pinned} == pinned, ev.layer
        assert {p.by for p in led.pinned} == {"user"}


# -- resume ----------------------------------------------------------------------------------------
def test_pins_survive_a_resume_and_the_compactions_after_it(tmp_path):
    db = tmp_path / "agent.db"
    opts = dict(
        db=db,
        compaction=CompactionConfig(results_dir=tmp_path / "r", window_tokens=3000),
        status=False,
        summaries=False,
    )
    first = ScriptedBackend([_fetch(0), "Page 0 read."])
    with Harness("You read pages.", [fetch_page], backend=first, **opts) as h:
        h.run("Read page 0.")
        sid = h.session_id
        page0 = _seq(h.session, "p0")
        pin = h.pin(page0)
        note = h.pin(FACT)
        assert (pin.targets, pin.by) == ((page0,), "user")
        assert h.pin(page0) == pin  # pinning again adds nothing
        recorded = {q: h.session.events[q].message for q in (page0, *note.targets)}
    store = Store(db)
    try:
        assert [ev.kind for ev in store.events(sid)].count("pin") == 2
    finally:
        store.close()
    second = ScriptedBackend([_fetch(i) for i in range(1, 15)] + ["done"])
    with Harness.resume(sid, tools=[fetch_page], backend=second, **opts) as h2:
        r = h2.run("Read pages 1 to 14.")
        assert r.stop_reason == "final_answer"
        s = h2.session
        layers = {ev.layer for ev in s.events if isinstance(ev, CompactionEvent)}
        assert {"clearing", "trim"} <= layers
        view = s.trajectory()
        assert all(m in view for m in recorded.values())
        assert _kept(s) == [] and _seq(s, "p1") in hidden_seqs(s.events)
        # the model saw the pinned note whole in the last request
        assert any(FACT in (m.content or "") for m in second.requests[-1].messages)
    from ctxwright.cli.show import render_compactions

    store = Store(db)
    try:
        out = io.StringIO()
        render_compactions(store, sid, Console(file=out, width=200))
        assert f"event {page0} pinned by user: kept whole" in out.getvalue()
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            render_compactions(store, sid, Console(file=io.StringIO()), as_json=True)
    finally:
        store.close()
    comps = json.loads(buf.getvalue())["compactions"]
    assert comps and all({p["seq"] for p in c["pinned"]} == set(recorded) for c in comps)


# -- @tool(pin=True) and the pin tool ---------------------------------------------------------------
def test_results_of_a_pinned_tool_survive_clearing(store, tmp_path):
    reg = ToolRegistry()
    reg.register(fetch_page)
    reg.register(read_spec)
    assert read_spec.pin and not fetch_page.pin
    replies: list = [
        Message(role="assistant", content="spec first", tool_calls=(call("read_spec", {"name": "A"}, "s0"),))
    ]
    replies += [_fetch(i) for i in range(12)] + ["done"]
    s = Session.start(Prefix.build("sys", reg.specs()), store=store)
    comp = CompactionConfig(
        results_dir=tmp_path, window_tokens=3000, keep_recent_results=2, drop_unused=False, policy="eager"
    )
    agent = Agent(s, ScriptedBackend(replies), reg, AgentConfig(compaction=comp, max_iterations=30), counter=COUNT)
    assert agent.run("Read the spec, then the pages.").stop_reason == "final_answer"
    spec = _seq(s, "s0")
    pins = [ev for ev in s.events if isinstance(ev, PinEvent)]
    assert [(p.targets, p.by) for p in pins] == [((spec,), "tool")]
    assert any(ev.layer == "clearing" for ev in s.events if isinstance(ev, CompactionEvent))
    assert s.events[spec].message in s.trajectory()
    assert _seq(s, "p0") in hidden_seqs(s.events) and spec not in hidden_seqs(s.events)
    assert _kept(s) == []


def test_a_record_time_strategy_leaves_a_pinned_tools_results_whole(store, tmp_path):
    reg = ToolRegistry()
    reg.register(fetch_page)
    reg.register(read_spec)
    both = (call("read_spec", {"name": "A"}, "s0"), call("fetch_page", {"page": 1}, "p1"))
    replies: list = [Message(role="assistant", content="both", tool_calls=both), "done"]
    s = Session.start(Prefix.build("sys", reg.specs()), store=store)
    comp = CompactionConfig(results_dir=tmp_path, strategy="extractive")
    agent = Agent(s, ScriptedBackend(replies), reg, AgentConfig(compaction=comp), counter=COUNT)
    assert agent.run("Read the spec and page 1.").stop_reason == "final_answer"
    spec, page = s.events[_seq(s, "s0")], s.events[_seq(s, "p1")]
    assert isinstance(spec, ToolEvent) and isinstance(page, ToolEvent)
    assert page.compressed == "extractive"  # the strategy ran on the round
    assert spec.compressed is None and spec.message.content == read_spec("A")


def test_the_pin_tool_records_a_pin_event(store):
    reg = ToolRegistry()
    reg.register(PinTool().tool())
    fact = "The user's staging host is 10.4.0.12:8443."
    replies: list = [
        Message(role="assistant", tool_calls=(call(PIN_TOOL, {"fact": f"  {fact} "}, "k1"),)),
        Message(role="assistant", tool_calls=(call(PIN_TOOL, {"fact": "   "}, "k2"),)),  # refused: nothing pinned
        "Noted.",
    ]
    s = Session.start(Prefix.build("sys", reg.specs()), store=store)
    agent = Agent(s, ScriptedBackend(replies), reg, AgentConfig(max_iterations=5), counter=COUNT)
    assert agent.run("Remember the staging host 10.4.0.12:8443.").stop_reason == "final_answer"
    pins = [ev for ev in s.events if isinstance(ev, PinEvent)]
    k1 = _seq(s, "k1")
    assert [(p.targets, p.by, p.text) for p in pins] == [((k1,), "model", fact)]
    assert fact in (s.events[k1].message.content or "")
    assert not s.events[_seq(s, "k2")].ok
    resumed = Session.resume(store, s.id)
    assert pinned_seqs(resumed.events) == {k1}  # an event: read back on resume


def test_harness_pin_tool_option_offers_the_tool(tmp_path):
    backend = ScriptedBackend([Message(role="assistant", tool_calls=(call(PIN_TOOL, {"fact": FACT}, "k1"),)), "ok"])
    with Harness("sys", [fetch_page], backend=backend, db=tmp_path / "a.db", pin_tool=True, status=False) as h:
        h.run("Keep this: " + FACT)
        assert PIN_TOOL in [t.name for t in backend.requests[0].tools]
        assert [p.by for p in h.session.events if isinstance(p, PinEvent)] == ["model"]
        sid = h.session_id
    with Harness.resume(sid, tools=[fetch_page], backend=ScriptedBackend(["x"]), db=tmp_path / "a.db") as h2:
        assert PIN_TOOL in h2.tools
    with Harness("sys", [fetch_page], backend=ScriptedBackend(["x"]), db=tmp_path / "b.db") as h3:
        assert PIN_TOOL not in h3.tools  # opt-in


def test_the_model_pins_within_a_budget_counted_across_a_resume(tmp_path):
    """Pinned context is never freed: the model's ``pin`` tool refuses a fact that would take its
    pins past ``MAX_MODEL_PIN_CHARS``, counted from the session's events, so a resumed session
    does not start the count again."""
    from ctxwright.compaction.pins import MAX_MODEL_PIN_CHARS

    fact = "F" * 1_900
    fits = MAX_MODEL_PIN_CHARS // len(fact)
    calls = [
        Message(role="assistant", tool_calls=(call(PIN_TOOL, {"fact": f"{i}{fact}"}, f"k{i}"),))
        for i in range(fits + 1)
    ]
    backend = ScriptedBackend([*calls, "ok"])
    db = tmp_path / "a.db"
    with Harness(
        "sys", [fetch_page], backend=backend, db=db, pin_tool=True, status=False, max_iterations=fits + 5
    ) as h:
        h.run("Keep these.")
        pins = [p for p in h.session.events if isinstance(p, PinEvent)]
        assert len(pins) == fits  # the last one was refused
        assert not h.session.events[_seq(h.session, f"k{fits}")].ok
        sid = h.session_id
    used = fits * (len(fact) + 1)
    over = "G" * (MAX_MODEL_PIN_CHARS - used + 1)  # fits alone, not after the pins already made
    assert len(over) <= 2_000
    again = ScriptedBackend([Message(role="assistant", tool_calls=(call(PIN_TOOL, {"fact": over}, "r1"),)), "ok"])
    with Harness.resume(sid, tools=[fetch_page], backend=again, db=db) as h2:
        h2.run("One more.")
        assert not h2.session.events[_seq(h2.session, "r1")].ok  # the count went on from the events
        assert len([p for p in h2.session.events if isinstance(p, PinEvent)]) == fits


def test_pins_that_fill_the_window_end_the_run_with_a_clear_error(store, tmp_path):
    reg = ToolRegistry()
    reg.register(fetch_page)
    replies: list = [_fetch(i) for i in range(3)] + ["read", "never"]
    s = Session.start(Prefix.build("sys", reg.specs()), store=store)
    comp = CompactionConfig(results_dir=tmp_path, window_tokens=4000, reserve_output_tokens=100)
    agent = Agent(s, ScriptedBackend(replies), reg, AgentConfig(compaction=comp), counter=COUNT)
    assert agent.run("Read pages 0 to 2.").stop_reason == "final_answer"
    for cid in ("p0", "p1", "p2"):
        agent.ctx.pin(_seq(s, cid))
    agent.ctx.compaction.window_tokens = 1500  # the window shrinks under the pinned results
    r = agent.run("And now?")
    assert r.stop_reason == "backend_error" and "pinned messages" in (r.error or "")
    assert all(_seq(s, c) not in hidden_seqs(s.events) for c in ("p0", "p1", "p2"))


# -- the check -------------------------------------------------------------------------------------
def _pinned_session(store=None) -> tuple[Session, int]:
    s = Session.start(Prefix.build("sys"), store=store)
    s.add_user("Find where Alice works.")
    for i in range(4):
        c = call("fetch_page", {"page": i}, f"c{i}")
        s.add_assistant(Message(role="assistant", content=f"checking page {i}", tool_calls=(c,)))
        s.add_tool_result(c.id, PAGE, tool_name="fetch_page")
    s.add_assistant(Message(role="assistant", content="still looking"))
    seq = _seq(s, "c1")
    s.append(PinEvent(targets=(seq,), by="user"))
    return s, seq


@pytest.mark.parametrize(
    "plan, what",
    [
        (lambda q: Plan(1, replace={q: "[cleared]"}), "replaced"),
        (lambda q: Plan(2, drop=[q - 1, q], note=(q - 1, "[trimmed 2]")), "dropped"),
        (lambda q: Plan(2, drop=[q - 1, q], note=(q - 1, "[summary]"), note_replaces_all=True), "summarized"),
    ],
)
def test_a_plan_that_touches_a_pinned_event_is_refused(store, tmp_path, plan, what):
    s, seq = _pinned_session(store)
    from ctxwright.compaction import ContextManager

    m = ContextManager(CompactionConfig(results_dir=tmp_path), COUNT, 4000)
    m.bind(s)
    state = PassState(m, s, call_index=3, tokens=m.request_tokens(s), spaced=True)
    before = len(store.events(s.id))
    bad = plan(seq)
    with pytest.raises(AssertionError, match="pinned message"):
        pipeline.apply(state, pipeline.Clearing(), bad)
    assert len(store.events(s.id)) == before  # nothing recorded
    # the same plan on the neighbour that is not pinned goes through
    other = _seq(s, "c2")
    pipeline.apply(state, pipeline.Clearing(), plan(other))
    assert _kept(s) == []


def test_the_tiers_skip_pinned_events_where_they_choose(tmp_path):
    s, seq = _pinned_session()
    assert seq in pipeline.exempt(s)
    entries = s.base_entries()
    users = {ev.seq for ev in s.events if isinstance(ev, UserEvent)}
    drop, _ = plan_trim(entries, lambda m: 1000, 10**9, users, catalog_messages(s.events), pinned_messages(s.events))
    assert drop and seq not in drop and seq - 1 not in drop  # the result and its call stay
    unpinned, _ = plan_trim(entries, lambda m: 1000, 10**9, users)
    assert seq in unpinned  # without the pin the same plan takes it


# -- Context.pin's edges ---------------------------------------------------------------------------
def test_context_pin_refuses_what_it_cannot_keep(tmp_path):
    backend = ScriptedBackend([_fetch(0), "done"])
    with Harness("sys", [fetch_page], backend=backend, db=tmp_path / "a.db") as h:
        h.run("Read page 0.")
        ctx = h.context
        n = len(h.session.events)
        with pytest.raises(ValueError, match="there is no event"):
            h.pin(n + 5)
        status = next(ev for ev in h.session.events if ev.kind == "status")
        with pytest.raises(ValueError, match="status message"):
            h.pin(status.seq)
        with pytest.raises(ValueError, match="not recorded"):
            h.pin(Message(role="user", content="never said"))
        with pytest.raises(ValueError, match="empty"):
            h.pin("   ")
        with pytest.raises(ValueError, match="cannot pin"):
            h.pin(3.5)  # type: ignore[arg-type]
        assert len(h.session.events) == n  # nothing recorded
        # a text while the last reply's calls are open would break the pairing
        ctx.add_user("and page 1")
        ctx.request()
        step = ctx.record(Completion(message=_fetch(1), usage=Usage(prompt_tokens=10, completion_tokens=5)))
        with pytest.raises(CtxwrightError, match="not answered yet"):
            ctx.pin(FACT)
        ctx.run_tools(step)
        assert ctx.pin(FACT).by == "user"


def test_pinning_a_message_compaction_already_hid_appends_it_again(tmp_path):
    s, _ = _pinned_session()
    c0 = _seq(s, "c0")
    s.add_compaction("clearing", replace={c0: "[cleared]"})
    from ctxwright.agent.context import Context

    ctx = Context.over(s, ScriptedBackend(["x"]), ToolRegistry())
    pin = ctx.pin(c0)
    note = s.events[pin.targets[0]]
    assert isinstance(note, UserEvent) and PIN_NOTE_KEY in note.extra and pin.extra["restored"] == c0
    assert "Commit 3f9a2c1d" in (note.message.content or "") and note.message in s.trajectory()
    assert _kept(s) == []


def test_a_text_pin_is_never_taken_for_the_task():
    s = Session.start(Prefix.build("sys"))
    from ctxwright.agent.context import Context

    ctx = Context.over(s, ScriptedBackend(["x"]), ToolRegistry())
    ctx.pin(FACT)  # before the task
    s.add_user("the task")
    recorded = [m for _, m in s.recorded_messages()]
    # a view that lost the task but kept the note is refused as losing the task
    assert "the first user message is missing or changed in the view" in violations(
        recorded, recorded[:1], catalog_messages(s.events)
    )


def test_pin_events_parse_and_refuse_bad_payloads():
    ev = PinEvent(seq=4, targets=(1, 2), text="x", by="model")
    assert event_from_dict(ev.to_dict()) == ev
    with pytest.raises(EventFormatError, match="targets"):
        event_from_dict({"seq": 1, "kind": "pin", "targets": "3"})
    with pytest.raises(EventFormatError, match="'by'"):
        event_from_dict({"seq": 1, "kind": "pin", "targets": [3], "by": "someone"})
    with pytest.raises(EventFormatError, match="not an event seq"):
        event_from_dict({"seq": 1, "kind": "pin", "targets": [1.5]})


# -- random trajectories, pins included ----------------------------------------------------------
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    msgs=trajectories(),
    picks=st.lists(st.integers(0, 10**6), max_size=4),
    excess=st.integers(1, 5000),
    stage=st.sampled_from([0, 1, 2]),
)
def test_every_layer_keeps_every_pin(msgs, picks, excess, stage):
    """The property test of test_compaction.py with random pins: noise, clearing, then a full
    compaction (stage 1 or 2) or trim, and no invariant broken, no pinned event hidden."""
    s = scripted_session(msgs)
    candidates = [q for q, m in s.recorded_messages() if q > 0]
    chosen = sorted({candidates[p % len(candidates)] for p in picks}) if candidates else []
    if chosen:
        s.append(PinEvent(targets=tuple(chosen), by="user"))
    meta = {ev.seq: ev for ev in s.events if isinstance(ev, ToolEvent)}
    skip = set(pinned_seqs(s.events))
    s.add_compaction("noise", replace=unused_results(s.base_entries(), meta, 0, skip))
    s.add_compaction("clearing", replace=clear_old_results(s.base_entries(), meta, 0, 1, estimate_tokens, skip))
    pins = pinned_messages(s.events)
    entries = s.base_entries()
    if stage:
        idx = full.plan_span(entries, stage, lambda m: estimate_tokens(m.content or "") + 4, (), pins)
        seqs = [q for i in idx if (q := entries[i][0]) is not None]
        if seqs:
            s.add_compaction("full", drop=seqs, note=(min(seqs), "[summary]"), note_replaces_all=True)
    else:
        users = {ev.seq for ev in s.events if isinstance(ev, UserEvent)}
        drop, first = plan_trim(entries, lambda m: estimate_tokens(m.content or "") + 4, excess, users, (), pins)
        if drop:
            s.add_compaction("trim", drop=drop, note=(first, "[removed]"))
    assert violations(msgs, s.trajectory(), (), pins) == []
    assert not set(chosen) & hidden_seqs(s.events)
