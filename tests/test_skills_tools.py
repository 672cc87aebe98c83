"""Skills in an agent: the Skill and read_skill_file tools, the catalog message, resume."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ctxwright import Harness, ScriptedBackend
from ctxwright.backends.scripted import call
from ctxwright.core.events import UserEvent
from ctxwright.core.messages import Message
from ctxwright.core.render import render
from ctxwright.core.session import Session
from ctxwright.defence.marking import TAGS_SECTION
from ctxwright.errors import SkillToolError
from ctxwright.skills import load_skills
from ctxwright.skills.tools import SkillTools
from ctxwright.store.sessions import Store
from skill_folders import make_skill, no_conventional_skills  # noqa: F401 -- the fixture is autouse


def tools_for(root: Path) -> SkillTools:
    loaded = load_skills([root], home=root / "nohome", project_dir=root / "noproject")
    return SkillTools(loaded.skills)


def test_skill_returns_wrapped_body_and_resources(tmp_path):
    root = tmp_path / "skills"
    make_skill(root, "house-style", "Write `Report:` first.", {"scripts/run.py": "print(1)\n", "ref.md": "abc"})
    st = tools_for(root)
    out = st.activate("house-style")
    assert out.startswith('<skill_content name="house-style">\nWrite `Report:` first.\n</skill_content>')
    assert '<file path="ref.md" bytes="3"/>' in out and '<file path="scripts/run.py" bytes="9"/>' in out
    assert "SKILL.md" not in out


def test_unknown_name_lists_the_closest(tmp_path):
    root = tmp_path / "skills"
    make_skill(root, "house-style")
    make_skill(root, "pdf-tools")
    with pytest.raises(SkillToolError, match="Closest: house-style"):
        tools_for(root).activate("house-styles")


def test_second_activation_points_to_the_first(tmp_path):
    root = tmp_path / "skills"
    make_skill(root, "house-style", "Long instructions.")
    st = tools_for(root)
    st.activate("house-style")
    again = st.activate("house-style")
    assert "Already loaded above" in again and "Long instructions." not in again


def test_read_skill_file_reads_inside_and_refuses_escapes(tmp_path):
    root = tmp_path / "skills"
    folder = make_skill(root, "s1", files={"refs/a.md": "hello"})
    (tmp_path / "secret.txt").write_text("secret")
    os.symlink(tmp_path / "secret.txt", folder / "out.txt")
    os.symlink(folder / "refs" / "a.md", folder / "inside.md")
    os.mkfifo(folder / "pipe")
    st = tools_for(root)
    assert st.read("s1", "refs/a.md") == "hello"
    assert st.read("s1", "inside.md") == "hello"  # a link that stays inside is fine
    for path, why in [
        ("../secret.txt", "'..'"),
        ("refs/../../secret.txt", "'..'"),
        (str(tmp_path / "secret.txt"), "absolute"),
        ("out.txt", "outside"),
        ("pipe", "not a regular file"),
        ("refs", "not a regular file"),
        ("missing.md", "no file"),
    ]:
        with pytest.raises(SkillToolError, match=why):
            st.read("s1", path)


def test_read_skill_file_caps_bytes(tmp_path):
    root = tmp_path / "skills"
    make_skill(root, "s1", files={"big.txt": "x" * 100})
    st = SkillTools(load_skills([root]).skills, max_read_bytes=10)
    out = st.read("s1", "big.txt")
    assert out.startswith("x" * 10 + "\n[cut: the file is 100 bytes")


def test_tool_errors_reach_the_model_through_the_harness(tmp_path):
    root = tmp_path / "skills"
    make_skill(root, "house-style")
    backend = ScriptedBackend(
        [
            Message(role="assistant", tool_calls=(call("read_skill_file", {"name": "house-style", "path": "../x"}),)),
            "done",
        ]
    )
    with Harness(system="S.", tools=[], backend=backend, skills=[root], status=False) as h:
        h.run("go")
    tool_msg = next(m for m in backend.requests[1].messages if m.role == "tool")
    assert json.loads(tool_msg.content or "")["error"]["type"] == "SkillToolError"


def test_catalog_is_a_user_message_and_adding_a_skill_keeps_the_prefix(tmp_path):
    root = tmp_path / "skills"
    make_skill(root, "house-style")
    db = tmp_path / "a.db"
    opts = dict(system="S.", tools=[], skills=[root], db=db, status=False)
    first = ScriptedBackend([Message(role="assistant", tool_calls=(call("Skill", {"name": "house-style"}),)), "ok"])
    with Harness(backend=first, **opts) as h:
        h.run("write a report")
        sid = h.session_id
        prefix_sha = h.session.prefix.sha256
    msgs = first.requests[0].messages
    assert [m.role for m in msgs] == ["system", "user", "user"]
    assert msgs[0].content == "S.\n\n" + TAGS_SECTION  # the catalog is never in the system prompt
    catalog = msgs[1].content or ""
    assert catalog.startswith("<system-reminder>") and "\n- house-style: Use for house-style tasks. (" in catalog
    assert msgs[2].content == "write a report"
    tool_msg = next(m for m in first.requests[1].messages if m.role == "tool")
    assert (tool_msg.content or "").startswith('<skill_content name="house-style">')
    assert [t.name for t in first.requests[0].tools][-2:] == ["Skill", "read_skill_file"]

    make_skill(root, "pdf-tools")  # a new skill folder between two runs
    second = ScriptedBackend(["again"])
    with Harness.resume(sid, backend=second, **opts) as h2:
        assert h2.session.prefix.sha256 == prefix_sha
        h2.run("and a pdf")
        events = h2.session.events
    req = second.requests[0]
    assert req.tools == first.requests[0].tools and req.messages[0] == msgs[0]
    catalogs = [ev for ev in events if isinstance(ev, UserEvent) and ev.skills_announced is not None]
    assert [ev.skills_announced for ev in catalogs] == [("house-style",), ("pdf-tools",)]
    added = catalogs[1].message.content or ""
    assert "\n- pdf-tools: " in added and "house-style" not in added
    assert req.messages[-2].content == added and req.messages[-1].content == "and a pdf"

    # a third run with the same skills announces nothing more, and remembers the activation
    third = ScriptedBackend([Message(role="assistant", tool_calls=(call("Skill", {"name": "house-style"}),)), "fine"])
    with Harness.resume(sid, backend=third, **opts) as h3:
        h3.run("thanks")
        assert sum(1 for ev in h3.session.events if isinstance(ev, UserEvent) and ev.skills_announced is not None) == 2
        live = render(h3.session.prefix, h3.session.events)
    pointer = [m for m in third.requests[1].messages if m.role == "tool"][-1]
    assert "Already loaded above" in (pointer.content or "")
    store = Store(db)
    try:
        stored = Session.resume(store, sid)
        assert render(stored.prefix, stored.events) == live  # resume reproduces the same messages
        assert [m.content for m in live[:3]] == [m.content for m in msgs]
        # the session list shows the user's first message, not the catalog
        assert [r["first_user"] for r in store.list_sessions()] == ["write a report"]
    finally:
        store.close()


def test_no_skills_no_tools_no_catalog(tmp_path):
    backend = ScriptedBackend(["hi"])
    with Harness(system="S.", tools=[], backend=backend, skills=[], status=False) as h:
        h.run("hello")
    assert "Skill" not in [t.name for t in backend.requests[0].tools]
    assert [m.role for m in backend.requests[0].messages] == ["system", "user"]


def test_cli_run_takes_skills(tmp_path, capsys):
    from ctxwright.cli.main import main
    from fakeserver import FakeOpenAIServer as F

    root = tmp_path / "skills"
    make_skill(root, "house-style")
    (root / "broken").mkdir()
    (root / "broken" / "SKILL.md").write_text("no front matter\n")
    db = tmp_path / "c.db"
    with F([F.reply_text("done")]) as srv:
        rc = main(["--db", str(db), "run", "--base-url", srv.url, "--model", "m", "--skills", str(root), "go"])
        body = srv.requests[0]
    captured = capsys.readouterr()
    assert rc == 0
    assert "skills  house-style" in captured.out
    assert "broken" in captured.err and "no front matter" in captured.err
    text = json.dumps(body)
    assert "<available_skills>" in text and '"Skill"' in text


def test_skills_given_to_a_session_started_without_them_are_refused(tmp_path):
    from ctxwright.errors import PrefixMismatch

    root = tmp_path / "skills"
    make_skill(root, "house-style")
    db = tmp_path / "a.db"
    with Harness(system="S.", tools=[], backend=ScriptedBackend(["a"]), db=db, status=False) as h:
        h.run("hi")
        sid = h.session_id
    with pytest.raises(PrefixMismatch, match="not in the session: Skill, read_skill_file"):
        Harness.resume(sid, backend=ScriptedBackend(["b"]), db=db, status=False, tools=[], skills=[root])
