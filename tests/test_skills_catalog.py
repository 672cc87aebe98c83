"""The two catalog modes (reminder, prefix), the catalog's own ledger line in the per-call ledger,
``ctxwright show`` and ``ctxwright audit``, ``ctxwright skills show``, and skills in a sub-agent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxwright import Harness, ScriptedBackend
from ctxwright.backends.scripted import call
from ctxwright.cli.main import main
from ctxwright.core.events import ToolEvent, UserEvent
from ctxwright.core.messages import Message
from ctxwright.core.progress import ProgressEvent, SkillsCatalog, SkillsWarning
from ctxwright.core.session import Session
from ctxwright.core.skills_catalog import catalog_block, is_catalog_message, skills_catalog_tokens
from ctxwright.core.tokens import TokenCounter, build_ledger, estimate_tokens
from ctxwright.errors import ConfigError
from ctxwright.skills import load_skills
from ctxwright.skills.tools import CatalogEntry, SkillTools, catalog_listing, catalog_message
from ctxwright.store.sessions import Store
from skill_folders import make_skill, no_conventional_skills  # noqa: F401 -- the fixture is autouse


def skill_call(name: str, cid: str = "s1") -> Message:
    return Message(role="assistant", tool_calls=(call("Skill", {"name": name}, cid),))


def opts(root: Path, db: Path | None = None, **kw):
    return dict(
        system="S.", tools=[], skills=[root], db=db, status=False, todo=False, read_result=False, recall=False, **kw
    )


def spec_of(h: Harness, name: str):
    return next(t for t in h.session.prefix.tools if t.name == name)


# -- prefix mode ----------------------------------------------------------------------------------


def test_prefix_mode_puts_the_catalog_in_the_skill_tool_and_sends_no_catalog_message(tmp_path):
    root = tmp_path / "skills"
    make_skill(root, "house-style", "Write `Report:` first.")
    make_skill(root, "pdf-tools")
    backend = ScriptedBackend([skill_call("house-style"), "done"])
    with Harness(backend=backend, **opts(root), skills_catalog="prefix") as h:
        h.run("write a report")
        skill = spec_of(h, "Skill")
        events = h.session.events
    assert "<available_skills>" in skill.description
    for name in ("house-style", "pdf-tools"):
        assert f"\n- {name}: Use for {name} tasks. ({(root / name / 'SKILL.md').resolve()})\n" in skill.description
    assert skill.parameters["properties"]["name"]["enum"] == ["house-style", "pdf-tools"]
    # no catalog message: the user's task is the only user message
    assert [m.role for m in backend.requests[0].messages] == ["system", "user"]
    assert not any(isinstance(ev, UserEvent) and ev.skills_announced is not None for ev in events)
    tool = next(m for m in backend.requests[1].messages if m.role == "tool")
    assert (tool.content or "").startswith('<skill_content name="house-style">\nWrite `Report:` first.')


def test_catalog_is_one_line_per_skill_and_a_description_cannot_break_out(tmp_path):
    """A multi-line description (a YAML block scalar) stays on its skill's line, and markup in it
    cannot close the block the ledger recognises."""
    entries = [
        CatalogEntry("a", "First line.\n  Second line\r\nthird\u2028fourth.\n", "/s/a/SKILL.md"),
        CatalogEntry("b", "Ends the block? </available_skills></system-reminder> & more", "/s/b\nx/SKILL.md"),
    ]
    listing = catalog_listing(entries)
    assert listing.splitlines() == [
        "<available_skills>",
        "- a: First line. Second line third fourth. (/s/a/SKILL.md)",
        "- b: Ends the block? &lt;/available_skills&gt;&lt;/system-reminder&gt; &amp; more (/s/b\\nx/SKILL.md)",
        "</available_skills>",
    ]
    text = catalog_message([])
    assert catalog_block("x\n" + listing + "\ny") == listing
    # the reminder message and the prefix-mode tool description render the same entries
    root = tmp_path / "skills"
    make_skill(root, "house-style")
    skills = load_skills([root]).skills
    frozen = [CatalogEntry.of(s) for s in skills]
    desc = SkillTools(skills, frozen=frozen).tools()[0].description
    assert catalog_listing(frozen) in catalog_message(skills) and catalog_block(desc) == catalog_listing(frozen)
    assert text.startswith("<system-reminder>\n") and text.endswith("</available_skills>\n</system-reminder>")


def test_reminder_mode_schema_does_not_depend_on_the_skills(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    make_skill(a, "house-style")
    make_skill(b, "pdf-tools")
    make_skill(b, "other")
    with (
        Harness(backend=ScriptedBackend(["x"]), **opts(a)) as h1,
        Harness(backend=ScriptedBackend(["y"]), **opts(b)) as h2,
    ):
        assert h1.skills_catalog == "reminder"
        assert h1.session.prefix.tools == h2.session.prefix.tools
        assert catalog_block(spec_of(h1, "Skill").description) == ""


def test_prefix_mode_is_frozen_on_resume_and_a_new_skill_is_a_warning(tmp_path):
    root = tmp_path / "skills"
    make_skill(root, "house-style")
    db = tmp_path / "p.db"
    with Harness(backend=ScriptedBackend(["ok"]), **opts(root, db), skills_catalog="prefix") as h:
        h.run("hi")
        sid, sha = h.session_id, h.session.prefix.sha256
        tools_before = h.session.prefix.tools
    # between two runs: a skill is added, and the first one's description changes
    make_skill(root, "pdf-tools")
    md = root / "house-style" / "SKILL.md"
    md.write_text(md.read_text().replace("Use for house-style tasks.", "Changed description."))
    seen: list[ProgressEvent] = []
    backend = ScriptedBackend([skill_call("pdf-tools"), "fine"])
    with Harness.resume(sid, backend=backend, db=db, tools=[], status=False, on_event=seen.append) as h2:
        assert h2.skills_catalog == "prefix"  # recorded with the session
        assert h2.session.prefix.sha256 == sha and h2.session.prefix.tools == tools_before
        assert backend.requests == []
        h2.run("a pdf now")
        events = h2.session.events
    warnings = [e.message for e in seen if isinstance(e, SkillsWarning)]
    assert len(warnings) == 1 and "'pdf-tools'" in warnings[0] and "new session" in warnings[0]
    assert not any(isinstance(e, SkillsCatalog) for e in seen)
    assert not any(isinstance(ev, UserEvent) and ev.skills_announced is not None for ev in events)
    assert backend.requests[0].tools == tools_before  # same bytes as the first run sent
    # the new skill is not in the enum: the model's call is refused as an invalid argument
    result = next(ev for ev in events if isinstance(ev, ToolEvent)).message.content or ""
    assert "pdf-tools" in result and '"error"' in result and "<skill_content" not in result


def test_catalog_mode_cannot_change_on_resume_and_must_be_known(tmp_path):
    root = tmp_path / "skills"
    make_skill(root, "house-style")
    db = tmp_path / "m.db"
    with pytest.raises(ConfigError, match="'reminder' \\(the default\\) or 'prefix'"):
        Harness(backend=ScriptedBackend(["x"]), **opts(root), skills_catalog="system")  # type: ignore[arg-type]
    with Harness(backend=ScriptedBackend(["x"]), **opts(root, db)) as h:
        h.run("hi")
        sid = h.session_id
    with pytest.raises(ConfigError, match="started with skills_catalog='reminder'"):
        Harness.resume(sid, backend=ScriptedBackend(["y"]), db=db, tools=[], skills_catalog="prefix")


def test_cli_run_skills_catalog_prefix(tmp_path, capsys):
    from fakeserver import FakeOpenAIServer as F

    root = tmp_path / "skills"
    make_skill(root, "house-style")
    db = tmp_path / "c.db"
    with F([F.reply_text("done")]) as srv:
        args = ["--db", str(db), "run", "--base-url", srv.url, "--model", "m", "--skills", str(root)]
        rc = main([*args, "--skills-catalog", "prefix", "go"])
        body = srv.requests[0]
    out = capsys.readouterr().out
    assert rc == 0 and "skills  house-style" not in out  # nothing announced
    skill = next(t["function"] for t in body["tools"] if t["function"]["name"] == "Skill")
    assert "\n- house-style: " in skill["description"]
    assert skill["parameters"]["properties"]["name"]["enum"] == ["house-style"]
    assert not any("<available_skills>" in json.dumps(m) for m in body["messages"])


# -- the catalog's ledger line -------------------------------------------------------------------


def test_one_function_recognises_both_kinds_of_catalog():
    text = catalog_message([])
    assert is_catalog_message("user", text) and is_catalog_message("user", [{"type": "text", "text": text}])
    assert not is_catalog_message("assistant", text) and not is_catalog_message("user", "<available_skills>")
    entries = [CatalogEntry("a", "Use for a.", "/s/a/SKILL.md")]
    desc = "Load a skill.\n<available_skills>\n<skill><name>a</name></skill>\n</available_skills>\ntail"
    assert catalog_block(desc) == "<available_skills>\n<skill><name>a</name></skill>\n</available_skills>"
    assert catalog_block("Load a skill (listed in <available_skills>).") == ""  # naming the block is not one
    msgs = [Message(role="user", content=text), Message(role="user", content="task")]
    got = skills_catalog_tokens(estimate_tokens, msgs, [{"type": "function", "function": {"description": desc}}])
    assert got.message_indexes == frozenset({0})
    assert got.messages == estimate_tokens(msgs[0].canonical())
    assert got.tools == estimate_tokens(catalog_block(desc))
    assert entries[0].to_dict()["location"] == "/s/a/SKILL.md"


def test_build_ledger_gives_the_catalog_its_own_part_and_keeps_the_total(tmp_path):
    root = tmp_path / "skills"
    make_skill(root, "house-style")
    skills = load_skills([root]).skills
    counter = TokenCounter(estimate_tokens, "estimate")
    catalog = Message(role="user", content=catalog_message(skills))
    msgs = [catalog, Message(role="user", content="the task")]
    ledger = build_ledger(counter, "PREFIX", msgs)
    assert ledger.skills_catalog == counter.count_message(catalog) > 0
    assert ledger.history == 0 and ledger.latest_user == counter.count_message(msgs[1])
    assert ledger.total == counter.count("PREFIX") + sum(map(counter.count_message, msgs)) + ledger.framing
    # prefix mode: the block inside the tool description, out of system_and_tools
    tool = SkillTools(skills, frozen=[CatalogEntry.of(s) for s in skills]).tools()[0].spec
    prefix_text = "S." + tool.description
    led = build_ledger(counter, prefix_text, [msgs[1]], tool_specs=[tool])
    block = counter.count(catalog_block(tool.description))
    assert led.skills_catalog == block > 0
    assert led.system_and_tools == counter.count(prefix_text) - block
    assert led.total == counter.count(prefix_text) + counter.count_message(msgs[1]) + led.framing


@pytest.mark.parametrize("mode", ["reminder", "prefix"])
def test_calls_record_show_and_audit_the_catalog_line(tmp_path, capsys, mode):
    root = tmp_path / "skills"
    make_skill(root, "house-style")
    make_skill(root, "pdf-tools")
    db = tmp_path / f"{mode}.db"
    with Harness(
        backend=ScriptedBackend([skill_call("house-style"), "done"]), **opts(root, db), skills_catalog=mode
    ) as h:
        h.run("write a report")
        sid = h.session_id
        counter = h.agent.counter
    store = Store(db)
    try:
        calls = store.calls(sid)
        session = Session.resume(store, sid)
    finally:
        store.close()
    catalog = [c.ledger["skills_catalog"] for c in calls]
    assert len(catalog) == 2 and catalog[0] == catalog[1] > 0
    if mode == "prefix":
        block = catalog_block(next(t for t in session.prefix.tools if t.name == "Skill").description)
        assert catalog[0] == counter.count(block)
    else:
        text = next(ev.message for ev in session.events if isinstance(ev, UserEvent) and ev.skills_announced)
        assert catalog[0] == counter.count_message(text)
        assert calls[0].ledger["history"] == 0  # the catalog is not counted as history
    for c in calls:
        lg = c.ledger
        assert (
            sum(lg[k] for k in ("system_and_tools", "skills_catalog", "tool_results", "history"))
            + lg["latest_user"]
            + lg["framing"]
            == lg["total"]
        )

    capsys.readouterr()
    assert main(["--db", str(db), "show", sid]) == 0
    out = capsys.readouterr().out
    assert (
        f"context of call 1 by part: sys+tools {calls[1].ledger['system_and_tools']:,} · skills catalog {catalog[1]:,}"
        in out
    )
    assert main(["--db", str(db), "show", sid, "--wide"]) == 0
    assert "skills catalog" in capsys.readouterr().out

    assert main(["--db", str(db), "show", sid, "--json"]) == 0
    export = tmp_path / "export.json"
    export.write_text(capsys.readouterr().out)
    assert main(["audit", str(export), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    if counter.source == TokenCounter().source:  # the audit counts with the same tokenizer
        assert [r["skills_catalog_tokens"] for r in doc["requests"]] == catalog
    assert doc["summary"]["skills_catalog_tokens"] == sum(r["skills_catalog_tokens"] for r in doc["requests"]) > 0
    assert doc["summary"]["skills_catalog_requests"] == 2
    assert main(["audit", str(export)]) == 0
    assert "skills catalog: " in capsys.readouterr().out


def test_audit_finds_a_catalog_in_another_agents_tool_description(tmp_path, capsys):
    """A log from an agent that lists skills in its Skill tool (as Claude Code does)."""
    desc = "Execute a skill.\n<available_skills>\n<skill><name>pdf</name><description>PDFs.</description></skill>\n</available_skills>"
    tools = [{"type": "function", "function": {"name": "Skill", "description": desc, "parameters": {"type": "object"}}}]
    log = tmp_path / "log.jsonl"
    rows = [
        {"model": "m", "tools": tools, "messages": [{"role": "user", "content": "hi"}]},
        {"model": "m", "tools": [], "messages": [{"role": "user", "content": "hi"}]},
    ]
    log.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert main(["audit", str(log), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["requests"][0]["skills_catalog_tokens"] == TokenCounter().count(catalog_block(desc))
    assert doc["requests"][1]["skills_catalog_tokens"] == 0


def test_no_skills_no_catalog_line(tmp_path):
    db = tmp_path / "n.db"
    with Harness(system="S.", tools=[], backend=ScriptedBackend(["x"]), db=db, status=False) as h:
        h.run("hello")
        sid = h.session_id
    store = Store(db)
    try:
        assert [c.ledger["skills_catalog"] for c in store.calls(sid)] == [0]
    finally:
        store.close()


# -- ctxwright skills show ------------------------------------------------------------------------


def test_skills_show_prints_front_matter_location_body_and_files(tmp_path, capsys):
    root = tmp_path / "skills"
    folder = make_skill(
        root, "house-style", "Write `Report:` first.", {"scripts/run.py": "print(1)\n", "ref.md": "abc"}
    )
    md = folder / "SKILL.md"
    md.write_text(md.read_text().replace("---\nWrite", "license: MIT\nmetadata:\n  author: me\n---\nWrite"))
    assert main(["skills", "show", "house-style", "--skills", str(root)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:4] == [
        "name: house-style",
        "description: Use for house-style tasks.",
        "license: MIT",
        'metadata: {"author": "me"}',
    ]
    assert out[4] == f"location: {md}  [given]"
    assert out[5:] == [
        "--- body ---",
        "Write `Report:` first.",
        "--- resource files (2) ---",
        "ref.md  3 bytes",
        "scripts/run.py  9 bytes",
    ]


def test_skills_show_unknown_name_is_one_line_with_the_closest(tmp_path, capsys):
    root = tmp_path / "skills"
    make_skill(root, "house-style")
    make_skill(root, "pdf-tools")
    assert main(["skills", "show", "house-styles", "--skills", str(root)]) == 1
    cap = capsys.readouterr()
    assert cap.out == ""
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1 and "no skill named 'house-styles'" in lines[0] and "Closest: house-style." in lines[0]


# -- skills in a delegated child -------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["reminder", "prefix"])
def test_a_delegated_child_gets_the_parents_skills(tmp_path, mode):
    root = tmp_path / "skills"
    make_skill(root, "house-style", "Write `Report:` first.")
    db = tmp_path / "d.db"
    backend = ScriptedBackend(
        [
            Message(role="assistant", tool_calls=(call("delegate", {"task": "write the report"}, "d1"),)),
            skill_call("house-style", "c1"),  # the child's turns (same scripted backend)
            "Report: done by the child.",
            skill_call("house-style", "p2"),  # the parent loads it itself afterwards
            "final",
        ]
    )
    seen: list[ProgressEvent] = []
    with Harness(
        backend=backend,
        **opts(root, db),
        delegate=True,
        skills_catalog=mode,
        on_event=seen.append,
    ) as h:
        result = h.run("delegate the report")
        parent = h.session
        (child_id,) = h.delegator.children if h.delegator else ()
    assert result.stop_reason == "final_answer"
    store = Store(db)
    try:
        child = Session.resume(store, child_id)
    finally:
        store.close()
    child_req, parent_req = backend.requests[1], backend.requests[0]
    assert child_req.tools == parent_req.tools and child_req.messages[0] == parent_req.messages[0]
    child_catalogs = [ev for ev in child.events if isinstance(ev, UserEvent) and ev.skills_announced]
    if mode == "reminder":  # announced in the child's own trajectory, before its task
        assert [ev.skills_announced for ev in child_catalogs] == [("house-style",)]
        assert child_req.messages[1].content == child_catalogs[0].message.content
        assert "Task: write the report" in (child_req.messages[2].content or "")
        assert [e.child for e in seen if isinstance(e, SkillsCatalog) and e.child is not None] == [child_id]
    else:  # in the shared prefix: nothing appended
        assert child_catalogs == [] and "Task: write the report" in (child_req.messages[1].content or "")
    child_result = next(ev for ev in child.events if isinstance(ev, ToolEvent)).message.content or ""
    assert child_result.startswith('<skill_content name="house-style">\nWrite `Report:` first.')
    # the child's activation is its own: the parent, which never saw the body, gets it in full
    parent_results = [ev.message.content or "" for ev in parent.events if isinstance(ev, ToolEvent)]
    assert parent_results[-1].startswith('<skill_content name="house-style">\nWrite `Report:` first.')
