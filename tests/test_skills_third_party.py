"""Real skills written for other agents, and our validator against the reference one.

``tests/fixtures/skills/third_party/`` holds skill folders copied from anthropics/skills and
openai/skills (its README names the commits and licenses). Each must load with our loader, and
``ctxwright skills validate --json`` must agree with ``skills-ref`` (the specification's reference
validator) on valid/invalid -- for those folders and for our own bad-input folders, except where
this file says we differ and why: there, the specification (agentskills.io/specification) and
its client guide decide, and the table says which side follows them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import skills_ref

from ctxwright import Harness, ScriptedBackend
from ctxwright.backends.scripted import call
from ctxwright.cli.main import main
from ctxwright.core.messages import Message
from ctxwright.skills import load_skills

THIRD_PARTY = Path(__file__).resolve().parent / "fixtures" / "skills" / "third_party"

#: folder -> valid by the specification (both validators must say so)
EXPECTED = {
    "brand-guidelines": True,
    "webapp-testing": True,
    "gh-fix-ci": True,  # metadata.short-description: a vendor extension where it belongs
    "create-plan": True,
    "claude-api": False,  # description of 1,068 characters, over the 1,024 limit
}


def reference_verdict(folder: Path) -> bool | str:
    """skills-ref's verdict: True/False, or the name of the exception it raised."""
    try:
        return skills_ref.validate(folder) == []
    except Exception as exc:  # it reads SKILL.md as UTF-8 without catching the decode error
        return type(exc).__name__


def our_verdicts(capsys: pytest.CaptureFixture[str], *paths: Path) -> dict[str, dict[str, object]]:
    main(["skills", "validate", *map(str, paths), "--json"])
    return {Path(e["path"]).name: e for e in json.loads(capsys.readouterr().out)["skills"]}


def test_the_fixtures_are_the_documented_selection():
    folders = sorted(p.name for p in THIRD_PARTY.iterdir() if p.is_dir())
    assert folders == sorted(EXPECTED)
    readme = (THIRD_PARTY / "README.md").read_text(encoding="utf-8")
    for name in folders:
        assert f"`{name}/`" in readme
        assert "Apache License" in (THIRD_PARTY / name / "LICENSE.txt").read_text(encoding="utf-8")


def test_third_party_skills_load_with_our_loader():
    r = load_skills([THIRD_PARTY], project_dir=THIRD_PARTY / "none", home=THIRD_PARTY / "none")
    assert sorted(s.name for s in r.skills) == sorted(EXPECTED)  # claude-api included: lenient
    assert r.warnings == [
        f"{THIRD_PARTY / 'claude-api'}: description: 1068 characters, the limit is 1024; loaded anyway"
    ]
    api = next(s for s in r.skills if s.name == "claude-api")
    assert len(api.description) == 1068  # whole: its "SKIP when" sentence is at the end


def test_validate_agrees_with_skills_ref_on_third_party_skills(capsys):
    ours = our_verdicts(capsys, THIRD_PARTY)
    assert set(ours) == set(EXPECTED)
    for name, valid in EXPECTED.items():
        folder = THIRD_PARTY / name
        assert ours[name]["valid"] is valid, (name, ours[name]["errors"])
        assert reference_verdict(folder) is valid, name
        props = skills_ref.read_properties(folder)
        assert ours[name]["name"] == props.name
        assert ours[name]["description_chars"] == len(props.description)
    assert ours["claude-api"]["errors"] == ["description: 1068 characters, the limit is 1024"]
    assert ours["webapp-testing"]["resource_files"] == 4 and ours["gh-fix-ci"]["resource_files"] == 1


def test_the_reference_cli_agrees_too():
    """The `agentskills` command as installed, in its own process."""
    exe = Path(sys.executable).with_name("agentskills")
    for name, valid in EXPECTED.items():
        done = subprocess.run([str(exe), "validate", str(THIRD_PARTY / name)], capture_output=True, text=True)
        assert (done.returncode == 0) is valid, (name, done.stdout, done.stderr)


def _front(name: str, extra: str = "") -> str:
    return f"---\nname: {name}\ndescription: Does {name} things. Use when asked.\n{extra}---\nBody.\n"


#: folder -> (SKILL.md bytes, ours valid, skills-ref verdict). Where they differ, ``WHY`` says
#: which side follows the specification.
CASES: dict[str, tuple[bytes | None, bool, bool | str]] = {
    "plain": (_front("plain").encode(), True, True),
    "no-front-matter": (b"# Only a body\n", False, False),
    "never-closed": (b"---\nname: never-closed\ndescription: d\nBody.\n", False, False),
    "invalid-yaml": (b"---\nname: invalid-yaml\ndescription: [unclosed\n---\nB\n", False, False),
    "unquoted-colon": (b"---\nname: unquoted-colon\ndescription: Use when: asked\n---\nB\n", False, False),
    "Upper": (b"---\nname: Upper\ndescription: d\n---\nB\n", False, False),
    "mismatch": (b"---\nname: other\ndescription: d\n---\nB\n", False, False),
    "long-description": (
        ("---\nname: long-description\ndescription: " + "x" * 1025 + "\n---\nB\n").encode(),
        False,
        False,
    ),
    "unknown-field": (_front("unknown-field", "version: '1'\n").encode(), False, False),
    "duplicate-key": (_front("duplicate-key", "name: duplicate-key\n").encode(), False, False),
    "技能": (b"---\nname: \xe6\x8a\x80\xe8\x83\xbd\ndescription: d\n---\nB\n", True, True),
    # -- where we differ ------------------------------------------------------------------
    "not-utf8": (b"---\nname: not-utf8\ndescription: caf\xe9\n---\nB\n", False, "UnicodeDecodeError"),
    "dashes-in-value": (b'---\nname: dashes-in-value\ndescription: "Turns a---b into c"\n---\nB\n', True, False),
    "flow-metadata": (_front("flow-metadata", "metadata: {author: me}\n").encode(), True, False),
    "empty-compatibility": (_front("empty-compatibility", 'compatibility: ""\n').encode(), False, True),
    "metadata-number": (_front("metadata-number", "metadata:\n  version: 1\n").encode(), False, True),
    "tools-as-list": (_front("tools-as-list", "allowed-tools:\n  - Read\n").encode(), False, True),
    "lowercase-file": (None, False, True),
    "huge": ((_front("huge") + "x" * 1_000_001).encode(), False, True),
}

WHY = {
    "not-utf8": "skills-ref raises UnicodeDecodeError (a traceback); we report one line. Invalid either way: "
    "the front matter is YAML, which is Unicode text.",
    "dashes-in-value": "skills-ref splits the file at the first '---' anywhere, inside a quoted value too, and "
    "then fails to parse; the specification (and its client guide) closes the front matter with a '---' "
    "delimiter line, so the value is fine. We follow the specification.",
    "flow-metadata": "skills-ref parses with strictyaml, which refuses YAML's flow style ({...}); the "
    "specification asks for YAML front matter, and {author: me} is a YAML map of strings. We follow it.",
    "empty-compatibility": "the specification says compatibility 'must be 1-500 characters if provided'; "
    "skills-ref only checks the upper bound. We follow the specification.",
    "metadata-number": "the specification says metadata is 'a map from string keys to string values' and quotes "
    'version: "1.0" in its example; YAML reads an unquoted 1 as a number. skills-ref\'s strictyaml reads '
    "every scalar as a string, so it cannot tell. We follow the specification.",
    "tools-as-list": "the specification defines allowed-tools as 'a space-delimited list' (one string); "
    "skills-ref does not check its type. We follow the specification.",
    "lowercase-file": "skills-ref also accepts skill.md; the specification and the client guide name the "
    "file SKILL.md exactly (on a case-sensitive file system another client would not find it). We follow them.",
    "huge": "the specification sets no file size; skills-ref follows it and accepts 1 MB. Ours refuses a SKILL.md "
    "over 1,000,000 bytes, a limit of this client (the loader does not read it, so validate says it would "
    "not load): here skills-ref is the one that follows the specification to the letter.",
}


@pytest.mark.parametrize("folder", sorted(CASES))
def test_validate_agrees_with_skills_ref_or_says_why(tmp_path, capsys, folder):
    content, ours_valid, reference = CASES[folder]
    d = tmp_path / folder
    d.mkdir()
    if content is None:  # the lowercase-file case
        (d / "skill.md").write_text(_front(folder), encoding="utf-8")
    else:
        (d / "SKILL.md").write_bytes(content)
    assert our_verdicts(capsys, d)[folder]["valid"] is ours_valid
    assert reference_verdict(d) == reference
    assert (ours_valid == reference) is (folder not in WHY), "a disagreement needs its reason in WHY, and only then"


def test_a_symlink_loop_is_invalid_for_both(tmp_path, capsys):
    os.symlink(tmp_path / "loop", tmp_path / "loop")
    assert our_verdicts(capsys, tmp_path / "loop")["loop"]["valid"] is False
    assert reference_verdict(tmp_path / "loop") is False


def test_third_party_skills_in_an_agent_and_their_scripts_run(tmp_path):
    """The catalog lists all five; Skill() of one with scripts offers run_skill_script; a real
    third-party script (argparse --help, standard library only) runs in its folder."""
    backend = ScriptedBackend(
        [
            Message(role="assistant", tool_calls=(call("Skill", {"name": "gh-fix-ci"}),)),
            Message(
                role="assistant",
                tool_calls=(
                    call(
                        "run_skill_script",
                        {"name": "gh-fix-ci", "script": "scripts/inspect_pr_checks.py", "args": ["--help"]},
                    ),
                    call(
                        "run_skill_script", {"name": "webapp-testing", "script": "with_server.py", "args": ["--help"]}
                    ),
                ),
            ),
            "done",
        ]
    )
    with Harness(
        system="S.",
        tools=[],
        backend=backend,
        skills=[THIRD_PARTY],
        allow_skill_scripts=True,
        status=False,
        max_tool_rounds=3,
    ) as h:
        result = h.run("fix the CI")
        warnings = h.skill_warnings
    assert result.final_answer == "done"
    assert any("claude-api" in w and "loaded anyway" in w for w in warnings)
    catalog = backend.requests[0].messages[1].content or ""
    for name in EXPECTED:
        assert f"\n- {name}: " in catalog
    skill, inspect, server = (m.content or "" for m in backend.requests[2].messages if m.role == "tool")
    assert '<file path="scripts/inspect_pr_checks.py"' in skill and "run_skill_script(name='gh-fix-ci'" in skill
    assert "exited with code 0" in inspect and "usage: inspect_pr_checks.py" in inspect
    assert "exited with code 0" in server and "usage: with_server.py" in server
