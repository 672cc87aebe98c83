"""Compaction keeps skills (compaction/skills.py, compaction/pinned.py): an activated skill's
instructions are never rewritten by noise, repeats, clearing or record-time compression; full
compaction and trim re-attach them within the skill budget or name them; the task after a
skills catalog is pinned and so is every catalog; ``Skill(name)`` returns the body again once
a compaction took it away, live and on resume. A property test drives random sessions with
skill activations through every layer."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ctxwright import Harness, ScriptedBackend
from ctxwright.backends.scripted import call
from ctxwright.compaction import CompactionConfig, ContextManager
from ctxwright.compaction.check import violations
from ctxwright.compaction.pinned import catalog_messages
from ctxwright.compaction.pipeline import Clearing, Noise, PassState
from ctxwright.compaction.skills import CLOSING, body_of, body_seqs, carry_text, shown_skills
from ctxwright.compaction.summarizer import Summarizer
from ctxwright.compaction.trim import plan_trim
from ctxwright.core.events import (
    SKILLS_CATALOG_KEY,
    BudgetRecord,
    CompactionEvent,
    ToolEvent,
    UserEvent,
    event_from_row,
)
from ctxwright.core.messages import Message, ToolCall, canonical_json
from ctxwright.core.prefix import Prefix
from ctxwright.core.render import render
from ctxwright.core.results import ResultDraft
from ctxwright.core.session import Session
from ctxwright.core.tokens import TokenCounter, estimate_tokens
from ctxwright.errors import ContextWindowExceeded
from ctxwright.skills import load_skills
from ctxwright.skills.tools import SkillTools, catalog_message
from ctxwright.store.sessions import Store
from ctxwright.tools.registry import tool

COUNT = TokenCounter(estimate_tokens, "estimate")
PAGE = (
    "Alice Varga co-founded Nordlys Labs in 2015. She joined Helix Robotics as CTO in 2021. " * 3
    + "Footer: cookie settings, privacy, terms. " * 40
    + "Commit 3f9a2c1d fixed the ingest bug; ticket NL-4521."
)
TASK = "Write the quarterly report. Constraint: never call the billing API."
RULES = "House style: start with `Report:`, cite ticket HS-2031, use ISO dates, never say FooBar_9."


def make_skill(root: Path, name: str, body: str) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: Use for {name} tasks.\n---\n{body}\n")
    (folder / "ref.md").write_text("reference")


def skill_tools(root: Path) -> SkillTools:
    return SkillTools(load_skills([root], home=root / "nohome", project_dir=root / "noproject").skills)


@pytest.fixture(scope="module")
def skills_root(tmp_path_factory) -> Path:
    """Three skills of very different sizes: small (~40 tokens), medium (~400), big (~1,300)."""
    root = tmp_path_factory.mktemp("skills")
    make_skill(root, "alpha", RULES)
    make_skill(root, "beta", RULES + "\n" + "Beta rule: tables have a caption and units. " * 36)
    make_skill(root, "gamma", RULES + "\n" + "Gamma rule: every figure is checked twice. " * 120)
    return root


def start(tools: SkillTools, store: Store | None = None) -> Session:
    """A session as the harness begins one: the catalog first, then the task."""
    s = Session.start(Prefix.build("sys"), store=store)
    skills = list(tools.skills.values())
    s.add_user(catalog_message(skills), **{SKILLS_CATALOG_KEY: [k.name for k in skills]})
    s.add_user(TASK)
    return s


def activate(s: Session, tools: SkillTools, name: str, cid: str) -> ToolEvent:
    c = ToolCall(cid, "Skill", f'{{"name": "{name}"}}')
    s.add_assistant(Message(role="assistant", content=f"loading {name}", tool_calls=(c,)))
    return s.add_tool_result(cid, tools.activate(name), tool_name="Skill", budget=BudgetRecord(cid))


def fetch(s: Session, i: int, text: str = PAGE) -> ToolEvent:
    c = ToolCall(f"f{i}", "fetch_page", f'{{"page": {i}}}')
    s.add_assistant(Message(role="assistant", content=f"checking page {i}", tool_calls=(c,)))
    return s.add_tool_result(c.id, text, tool_name="fetch_page", budget=BudgetRecord(c.id))


def manager(tmp_path: Path, window: int, **cfg) -> ContextManager:
    m = ContextManager(CompactionConfig(results_dir=tmp_path, **cfg), COUNT, window)
    return m


def state(m: ContextManager, s: Session) -> PassState:
    m.bind(s)
    return PassState(m, s, call_index=9, tokens=m.request_tokens(s), spaced=True)


def budget_line(view: list[Message]) -> tuple[int, int] | None:
    for msg in view:
        found = re.search(re.escape(CLOSING) + r".*?\(([\d,]+) of the ([\d,]+)-token skill budget\)", msg.content or "")
        if found:
            return int(found.group(1).replace(",", "")), int(found.group(2).replace(",", ""))
    return None


# -- exempt from the layers that rewrite results -------------------------------------------------
def test_noise_and_clearing_never_pick_a_skill_body(tmp_path, skills_root):
    tools = skill_tools(skills_root)
    s = start(tools)
    body = activate(s, tools, "alpha", "s1")
    for i in range(5):  # five later steps that never mention the house style's terms
        fetch(s, i)
        s.add_assistant(Message(role="assistant", content=f"page {i} read"))
    m = manager(tmp_path, 4000, keep_recent_results=0, min_clear_tokens=1)
    st_ = state(m, s)
    noise = Noise().plan(st_)
    cleared = Clearing().plan(st_)
    assert noise is not None and cleared is not None
    assert body.seq not in noise.replace and body.seq not in cleared.replace
    assert len(cleared.replace) == 5  # every other result is cleared
    m.before_call(s, 9)
    assert body.message.content in [v.content for v in s.trajectory()]  # byte for byte


def test_a_skill_loaded_again_is_its_body_not_a_repeat_marker(tmp_path, skills_root):
    tools = skill_tools(skills_root)
    m = manager(tmp_path, 8000)
    m.bind(Session.start(Prefix.build("sys")))
    text = tools.activate("beta")
    first, _ = m.process_result("Skill", "s1", text, True)
    again, info = m.process_result("Skill", "s2", text, True)
    assert first == again == text and info.repeat_of is None
    m.process_result("fetch_page", "f1", PAGE, True)
    assert m.process_result("fetch_page", "f2", PAGE, True)[0].startswith("[ctxwright: identical")  # others still


def test_record_time_compression_leaves_skill_bodies_whole(tmp_path, skills_root):
    tools = skill_tools(skills_root)
    m = manager(tmp_path, 8000, strategy="extractive")
    s = start(tools)
    m.bind(s)
    text = tools.activate("beta")
    out = m.process_batch(
        s, [ResultDraft(ToolCall("s1", "Skill", "{}"), text), ResultDraft(ToolCall("f1", "fetch_page", "{}"), PAGE)]
    )
    assert out[0].content == text and out[0].budget is not None and out[0].budget.compressed is None
    assert out[1].budget is not None and out[1].budget.compressed == "extractive"


# -- carried through full compaction and trim ------------------------------------------------------
def _three_skill_session(tools: SkillTools, store: Store | None = None) -> tuple[Session, dict[str, ToolEvent]]:
    s = start(tools, store)
    bodies = {}
    for k, name in enumerate(["alpha", "gamma", "beta"]):  # oldest to newest
        bodies[name] = activate(s, tools, name, f"s{k}")
        for i in range(4):
            fetch(s, 10 * k + i)
    return s, bodies


def _summarizer() -> Summarizer:
    return Summarizer(ScriptedBackend([lambda req: "Decision: never call the billing API. Pages read: 12."]), COUNT)


def test_full_compaction_reattaches_skills_newest_first_and_names_the_rest(tmp_path, skills_root, store):
    tools = skill_tools(skills_root)
    s, bodies = _three_skill_session(tools, store)
    # budget: beta (~400) and alpha (~40) fit, gamma (~1,300) does not
    cfg = dict(full_compaction=True, drop_unused=False, keep_recent_results=30, min_clear_tokens=10**9)
    m = manager(tmp_path, 8000, skill_budget_tokens=1_000, **cfg)
    m.summarizer = _summarizer()
    m.bind(s)
    reports = m.before_call(s, 30)
    assert any(r.layer.startswith("full") for r in reports)
    view = s.trajectory()
    note = next(v.content or "" for v in view if "full compaction" in (v.content or ""))
    beta, alpha = bodies["beta"].message.content or "", bodies["alpha"].message.content or ""
    assert beta in note and alpha in note and note.index(beta) < note.index(alpha)  # newest first
    assert (bodies["gamma"].message.content or "") not in note
    assert "Not re-attached, over the budget: gamma; call Skill(name)" in note
    used, budget = budget_line(view) or (0, 0)
    assert budget == 1_000 and 0 < used <= budget
    assert not any(v.role == "tool" and v.content in (beta, alpha) for v in view)  # moved, not duplicated
    assert shown_skills(s.events, view) == {"alpha", "beta"}
    cats = catalog_messages(s.events)
    assert violations([mm for _, mm in s.recorded_messages()], view, cats) == []
    assert view[0] in cats and view[1].content.startswith("Write the quarterly report")  # catalog, task pinned

    # the harness's question, answered from the view: gamma comes back whole, alpha is a pointer
    tools.is_shown = lambda name: name in shown_skills(s.events, s.trajectory())
    assert tools.activate("gamma") == bodies["gamma"].message.content
    assert "Already loaded above" in tools.activate("alpha")

    resumed = Session.resume(store, s.id)  # the same bytes from the stored events alone
    assert resumed.trajectory() == view
    assert shown_skills(resumed.events, resumed.trajectory()) == {"alpha", "beta"}


def test_trim_reattaches_skills_and_a_later_trim_carries_them_again(tmp_path, skills_root):
    tools = skill_tools(skills_root)
    s, _ = _three_skill_session(tools)
    m = manager(tmp_path, 3000, drop_unused=False, min_clear_tokens=10**9, skill_budget_tokens=600)
    m.bind(s)
    m.before_call(s, 30)
    assert s.events[-1].layer == "trim"  # type: ignore[attr-defined]
    view = s.trajectory()
    assert shown_skills(s.events, view) == {"alpha", "beta"}
    assert "over the budget: gamma" in "".join(v.content or "" for v in view)
    for i in range(6):  # more work, then a second trim: its note supersedes the first one
        fetch(s, 100 + i)
    m.before_call(s, 40)
    trims = [ev for ev in s.events if isinstance(ev, CompactionEvent) and ev.layer == "trim"]
    assert len(trims) == 2
    view = s.trajectory()
    assert shown_skills(s.events, view) == {"alpha", "beta"}
    assert violations([mm for _, mm in s.recorded_messages()], view, catalog_messages(s.events)) == []
    assert m.request_tokens(s) <= m.effective_window


def test_a_plan_that_would_hide_a_skill_body_is_refused(tmp_path, skills_root):
    from ctxwright.compaction import pipeline
    from ctxwright.compaction.pipeline import Plan

    tools = skill_tools(skills_root)
    s, bodies = _three_skill_session(tools)
    st_ = state(manager(tmp_path, 8000), s)
    n = len(s.events)
    with pytest.raises(AssertionError, match="skill"):
        pipeline.apply(st_, Clearing(), Plan(1, replace={bodies["alpha"].seq: "[cleared]"}))
    assert len(s.events) == n  # nothing recorded


# -- the task after a catalog ------------------------------------------------------------------------
def test_the_task_after_a_catalog_is_pinned_and_catalogs_are_kept(tmp_path, skills_root):
    tools = skill_tools(skills_root)
    s = start(tools)
    for i in range(6):
        fetch(s, i)
    s.add_assistant(Message(role="assistant", content="half done"))
    late = s.add_user(catalog_message([tools.skills["beta"]], first=False), **{SKILLS_CATALOG_KEY: ["beta"]})
    s.add_user("and add a summary table")
    for i in range(6, 12):
        fetch(s, i)
    cats = catalog_messages(s.events)
    assert len(cats) == 2
    users = {ev.seq for ev in s.events if isinstance(ev, UserEvent)}
    drop, _ = plan_trim(s.base_entries(), lambda m: estimate_tokens(m.content or "") + 4, 10**9, users, cats)
    assert 0 not in drop and 1 not in drop and late.seq not in drop  # catalogs and the task stay
    assert drop  # the pages may go

    m = manager(tmp_path, 2500, drop_unused=False, min_clear_tokens=10**9)
    m.bind(s)
    m.before_call(s, 30)
    view = s.trajectory()
    assert view[1].content.startswith("Write the quarterly report")
    assert late.message in view
    assert violations([mm for _, mm in s.recorded_messages()], view, cats) == []
    assert violations([mm for _, mm in s.recorded_messages()], [view[0], *view[2:]], cats) == [
        "the first user message is missing or changed in the view"
    ]
    assert (
        "1 skills catalog message(s) missing"
        in violations([mm for _, mm in s.recorded_messages()], [v for v in view if v != late.message], cats)[0]
    )


# -- Skill(name) after a compaction, live and on resume ------------------------------------------------
def test_skill_returns_the_body_again_once_a_compaction_took_it_away(tmp_path, skills_root, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(home)
    db = tmp_path / "a.db"
    opts = dict(system="S.", tools=[], skills=[skills_root], db=db, status=False, compaction=False)
    load = Message(role="assistant", tool_calls=(call("Skill", {"name": "alpha"}, "k1"),))
    with Harness(backend=ScriptedBackend([load, "done"]), **opts) as h:
        h.run("write the report")
        sid = h.session_id
        s = h.session
        first = next(ev for ev in s.events if isinstance(ev, ToolEvent))
        assert first.message.content == skill_tools(skills_root).activate("alpha")
        # a trim took the skill's round away and could only name it (a budget of 0 tokens)
        text, kept = carry_text([("alpha", first.message.content or "")], 0, COUNT.count)
        assert kept == [] and "over the budget: alpha" in text
        s.add_compaction("trim", drop=[first.seq - 1, first.seq], note=(first.seq - 1, text))
        again = Message(role="assistant", tool_calls=(call("Skill", {"name": "alpha"}, "k2"),))
        h.agent.backend = backend = ScriptedBackend([again, "done"])  # type: ignore[misc]
        h.run("go on")
    second = [m for m in backend.requests[1].messages if m.role == "tool"][-1]
    assert second.content == first.message.content  # whole again, not a pointer to nothing

    third = ScriptedBackend([Message(role="assistant", tool_calls=(call("Skill", {"name": "alpha"}, "k3"),)), "ok"])
    with Harness.resume(sid, backend=third, **opts) as h2:  # the resumed view shows the second copy
        h2.run("once more")
    assert "Already loaded above" in ([m for m in third.requests[1].messages if m.role == "tool"][-1].content or "")


# -- which result is a body: a flag on the event, set by the Skill tool ------------------------------------
def test_the_skill_tool_flags_its_body_on_the_event_and_the_store_keeps_the_flag(tmp_path, skills_root, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(home)
    db = tmp_path / "f.db"
    opts = dict(system="S.", tools=[], skills=[skills_root], db=db, status=False, compaction=False)
    twice = [Message(role="assistant", tool_calls=(call("Skill", {"name": "alpha"}, f"k{i}"),)) for i in (1, 2)]
    with Harness(backend=ScriptedBackend([*twice, "done"]), **opts) as h:
        h.run("write the report")
        sid = h.session_id
        body, pointer = [ev for ev in h.session.events if isinstance(ev, ToolEvent)]
    assert (body.skill, body.skill_inferred) == ("alpha", False)
    assert "Already loaded above" in (pointer.message.content or "") and pointer.skill is None
    assert body.to_payload()["skill"] == "alpha" and "skill" not in pointer.to_payload()
    stored = [ev for ev in Store(db).events(sid) if isinstance(ev, ToolEvent)]
    assert [(ev.skill, ev.skill_inferred) for ev in stored] == [("alpha", False), (None, True)]
    assert body_seqs(stored) == {body.seq}


def test_a_tool_event_stored_without_the_flag_is_decided_from_its_text_once(skills_root):
    """A row written before ``ToolEvent.skill`` existed: the Skill tool's result, no flag."""
    text = skill_tools(skills_root).activate("alpha")
    legacy = {
        "message": {"role": "tool", "content": text, "tool_call_id": "k1"},
        "tool_name": "Skill",
        "ok": True,
        "elapsed_ms": 1.0,
        "error_type": None,
        "result_id": "k1",
    }
    ev = event_from_row(3, "tool", 0.0, legacy)
    assert isinstance(ev, ToolEvent) and (ev.skill, ev.skill_inferred) == ("alpha", True)
    assert body_seqs([ev]) == {3}
    assert canonical_json(ev.to_payload()) == canonical_json(legacy)  # written back byte for byte
    other = event_from_row(4, "tool", 0.0, {**legacy, "tool_name": "fetch_page"})
    assert isinstance(other, ToolEvent) and other.skill is None


def test_compaction_reads_the_flag_not_the_text():
    looks_like_a_body = '<skill_content name="alpha">\nrules\n</skill_content>'
    said_no = ToolEvent.build(
        Message(role="tool", content=looks_like_a_body, tool_call_id="a"), tool_name="Skill", skill=None
    )
    said_yes = ToolEvent.build(
        Message(role="tool", content="plain text", tool_call_id="b"), tool_name="x", skill="beta"
    )
    assert body_of(said_no) is None and body_of(said_yes) == "beta"
    parsed = event_from_row(0, "tool", 0.0, said_yes.to_payload())
    assert isinstance(parsed, ToolEvent) and body_of(parsed) == "beta"


# -- the property: no layer ever drops an active skill body ------------------------------------------------
@st.composite
def skill_sessions(draw):
    ops = []
    for _ in range(draw(st.integers(4, 40))):
        kind = draw(st.sampled_from(["skill", "fetch", "fetch", "text", "user", "error"]))
        if kind == "skill":
            ops.append(("skill", draw(st.sampled_from(["alpha", "beta", "gamma"]))))
        elif kind == "fetch":
            ops.append(("fetch", draw(st.integers(0, 3))))
        else:
            ops.append((kind, 0))
    cfg = dict(
        full_compaction=draw(st.sampled_from([True, True, False])),
        archival_summaries=draw(st.sampled_from([True, False, False])),
        drop_unused=draw(st.booleans()),
        keep_recent_results=draw(st.integers(0, 4)),
        min_clear_tokens=draw(st.sampled_from([1, 64, 10**9])),
        min_calls_between=draw(st.integers(0, 3)),
        skill_budget_tokens=draw(st.sampled_from([0, 100, 600, 2_000, 5_000])),
        strategy=draw(st.sampled_from(["none", "none", "extractive"])),
    )
    return ops, draw(st.sampled_from([2500, 4000, 8000])), cfg


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=skill_sessions())
def test_no_layer_ever_drops_an_active_skill_body(tmp_path_factory, skills_root, case):
    ops, window, cfg = case
    tools = skill_tools(skills_root)
    s = start(tools)
    m = ContextManager.for_backend(
        CompactionConfig(results_dir=tmp_path_factory.mktemp("r"), window_tokens=window, **cfg),
        COUNT,
        None,
        summary_backend=ScriptedBackend([lambda req: "Decision: keep the house style. Pages read."]),
    )
    m.bind(s)
    tools.is_shown = lambda name: name in shown_skills(s.events, s.trajectory())
    budget = m.config.skill_budget(m.effective_window)
    k = 0
    for call_index, (kind, arg) in enumerate(ops):
        k += 1
        if kind == "user":
            s.add_user(f"follow-up {k}")
            continue
        if kind == "text":
            s.add_assistant(Message(role="assistant", content=f"step {k} done"))
            continue
        if kind == "skill":
            name, text, ok = "Skill", tools.activate(str(arg)), True
        elif kind == "fetch":
            name, text, ok = "fetch_page", f"Page {k} ID-{k}X\n" + PAGE * (1 + int(arg)), True
        else:
            name, text, ok = "fetch_page", f"error: page {k} not found", False
        cid = f"c{k}"
        s.add_assistant(Message(role="assistant", content=f"step {k}", tool_calls=(ToolCall(cid, name, "{}"),)))
        (draft,) = m.process_batch(s, [ResultDraft(ToolCall(cid, name, "{}"), text, ok=ok)])
        s.add_result(draft)
        s.add_assistant(Message(role="assistant", content=f"used {k}"))

        before = s.trajectory()
        shown_before = shown_skills(s.events, before)
        try:
            for r in m.before_call(s, call_index):
                event(f"layer {r.layer}")
        except ContextWindowExceeded:
            event("window exceeded")  # nothing more could go; what was recorded is still checked below
        view = s.trajectory()
        shown_after = shown_skills(s.events, view)
        named = set()
        line = budget_line(view)
        for v in view:  # independent of the module's own parser: the names on the closing line
            found = re.search(r"Not re-attached, over the budget: ([a-z, -]+);", v.content or "")
            if found:
                named.update(found.group(1).split(", "))
        if any(
            "re-attached after the compaction, newest first: " in (v.content or "") and line and line[0] for v in view
        ):
            event("skill bodies re-attached")
        for lost in shown_before - shown_after:
            event("a skill named over the budget")
            assert lost in named, f"skill {lost} dropped without being re-attached or named"
        if line is not None:
            assert line[0] <= line[1] == budget
        bodies = {ev.message.content for ev in s.events if isinstance(ev, ToolEvent) and ev.tool_name == "Skill"}
        for v in view:  # counted here too: the re-attached bodies of one note fit the budget
            if v.role == "user" and CLOSING in (v.content or ""):
                assert sum(COUNT.count(b) for b in bodies if b and b in (v.content or "")) <= budget
        cats = catalog_messages(s.events)
        assert violations([mm for _, mm in s.recorded_messages()], view, cats) == []
        assert view[:2] == [s.events[0].message, s.events[1].message]  # the catalog, then the task
        assert render(s.prefix, s.events)[1:] == view  # the renderer alone reproduces it


def test_a_delegated_child_loads_a_skill_again_after_its_own_compaction(tmp_path, skills_root, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(home)
    reg = []

    @tool
    def note(i: int) -> str:
        """Take a note.

        Args:
            i: the note's number
        """
        return f"noted {i}"

    reg.append(note)
    thinking = "Checking the draft against every rule of the house style, line by line. " * 14
    child_turns = [
        Message(role="assistant", content=f"{thinking} ({i})", tool_calls=(call("note", {"i": i}, f"n{i}"),))
        for i in range(3)
    ]
    backend = ScriptedBackend(
        [
            Message(role="assistant", tool_calls=(call("delegate", {"task": "write the report"}, "d1"),)),
            Message(role="assistant", tool_calls=(call("Skill", {"name": "alpha"}, "k1"),)),  # the child
            *child_turns,
            Message(role="assistant", tool_calls=(call("Skill", {"name": "alpha"}, "k2"),)),
            "Report: done by the child.",
            "final",  # the parent
        ]
    )
    with Harness(
        backend=backend,
        system="S.",
        tools=reg,
        skills=[skills_root],
        db=tmp_path / "d.db",
        status=False,
        delegate=True,
        window=3000,
        compaction={"skill_budget_tokens": 0, "min_calls_between": 0},
        summaries=False,  # the scripted replies are the agents' turns, not summaries
    ) as h:
        assert h.run("delegate the report").stop_reason == "final_answer"
        (child_id,) = h.delegator.children if h.delegator else ()
        child = Session.resume(h.store, child_id)  # type: ignore[arg-type]
    trims = [ev for ev in child.events if isinstance(ev, CompactionEvent) and ev.layer == "trim"]
    assert trims and trims[0].note is not None and "over the budget: alpha" in trims[0].note.text
    loads = [ev.message.content or "" for ev in child.events if isinstance(ev, ToolEvent) and ev.tool_name == "Skill"]
    assert len(loads) == 2 and loads[1] == loads[0] and RULES in loads[1]  # whole again, not a pointer
