"""Every bad input of a skill folder at once, in one real session: each gets one clear line (a
loader warning or a tool error the model reads) and the session goes on to its answer.

The rules one by one are tested in test_skills_loading.py (loader and validator) and
test_skills_tools.py (the tools); this file checks that together they never stop an agent.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ctxwright import Harness, ScriptedBackend
from ctxwright.backends.scripted import call
from ctxwright.core.messages import Message
from ctxwright.core.progress import ProgressEvent, SkillsWarning
from ctxwright.skills import load_skills
from ctxwright.skills.tools import MAX_READ_BYTES, SkillTools


def write(path: Path, data: bytes | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data, encoding="utf-8")


def bad_skills(root: Path, outside: Path) -> None:
    """One good skill with binary and huge resources, and one folder per bad input."""
    good = root / "good"
    write(
        good / "SKILL.md", "---\nname: good\ndescription: The one that works. Use when asked.\n---\nRead the notes.\n"
    )
    write(good / "assets" / "logo.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 8)
    write(good / "references" / "huge.md", "# Huge\n" + "a long line of reference text\n" * 200_000)  # ~6 MB
    write(good / "references" / "notes.md", "Be brief.\n")
    write(root / "no-front" / "SKILL.md", "# Only a body, no front matter\n")
    write(root / "open-front" / "SKILL.md", "---\nname: open-front\ndescription: never closed\nBody.\n")
    write(root / "bad-yaml" / "SKILL.md", "---\nname: bad-yaml\ndescription: [unclosed\n---\nBody.\n")
    write(root / "huge-body" / "SKILL.md", "---\nname: huge-body\ndescription: d\n---\n" + "x" * 1_048_576)
    write(root / "latin1" / "SKILL.md", b"---\nname: latin1\ndescription: caf\xe9 notes\n---\nBody.\n")
    os.symlink(root / "loop", root / "loop")  # a skill folder that is a symlink loop
    write(root / "twin" / "SKILL.md", "---\nname: good\ndescription: A second skill named good.\n---\nNo.\n")
    write(outside, "secret")


def test_every_bad_input_is_one_line_and_the_session_goes_on(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "skills"
    bad_skills(root, tmp_path / "secret.txt")
    reads = [
        ("good", "assets/logo.png"),  # binary
        ("good", "references/huge.md"),  # huge: cut
        ("good", "../../secret.txt"),  # leaves the folder
        ("good", str(tmp_path / "secret.txt")),  # absolute
        ("no-front", "SKILL.md"),  # a skill that did not load
    ]
    backend = ScriptedBackend(
        [
            Message(role="assistant", tool_calls=(call("Skill", {"name": "good"}),)),
            Message(
                role="assistant",
                tool_calls=tuple(call("read_skill_file", {"name": n, "path": p}) for n, p in reads),
            ),
            "Done, briefly.",
        ]
    )
    events: list[ProgressEvent] = []
    with Harness(
        system="S.",
        tools=[],
        backend=backend,
        skills=[root],
        status=False,
        max_tool_rounds=3,
        db=tmp_path / "s.db",
        on_event=events.append,
    ) as h:
        result = h.run("use the good skill")
        warnings = h.skill_warnings
        names = [s.name for s in h.skills]

    # the loader: one line per problem, each naming its folder; only usable skills load
    assert names == ["good", "latin1"]
    assert all("\n" not in w and "Traceback" not in w for w in warnings)
    expected = {
        "no-front": "skipped: no front matter",
        "open-front": "skipped: front matter not closed",
        "bad-yaml": "skipped: front matter is not valid YAML",
        "huge-body": "skipped: SKILL.md: 1048615 bytes, more than the 1000000",
        "latin1": "not valid UTF-8",
        "loop": "cannot follow it",
        "twin": "two skills named 'good'",
    }
    for folder, fragment in expected.items():
        assert any(str(root / folder) in w and fragment in w for w in warnings), (folder, warnings)
    assert [e.message for e in events if isinstance(e, SkillsWarning)] == warnings

    # the tools: the Skill result lists the resources without reading them; each bad read is
    # an error the model can read, the huge one a cut text; the run reaches its answer
    assert result.stop_reason == "final_answer" and result.final_answer == "Done, briefly."
    tool_msgs = [m.content or "" for m in backend.requests[2].messages if m.role == "tool"]
    skill_result, binary, huge, up, absolute, unloaded = tool_msgs
    assert '<file path="assets/logo.png" bytes="2064"/>' in skill_result
    assert '<file path="references/huge.md" bytes="6000007"/>' in skill_result
    assert len(skill_result) < 1000
    assert "is a binary file (2064 bytes)" in json.loads(binary)["error"]["message"]
    assert f"[cut: the file is 6000007 bytes; the first {MAX_READ_BYTES} are shown]" in huge
    assert len(huge) < MAX_READ_BYTES + 200
    assert "contains '..'" in json.loads(up)["error"]["message"]
    assert "absolute path" in json.loads(absolute)["error"]["message"]
    unknown = json.loads(unloaded)["error"]["message"]
    assert "there is no skill named 'no-front'" in unknown and "Known skills: good, latin1" in unknown
    assert all(t != "secret" for t in tool_msgs)


def test_a_resource_that_is_a_symlink_loop_or_a_device_is_refused(tmp_path):
    root = tmp_path / "skills"
    write(root / "s1" / "SKILL.md", "---\nname: s1\ndescription: d\n---\nB\n")
    os.symlink(root / "s1" / "loop.md", root / "s1" / "loop.md")
    os.symlink("/dev/zero", root / "s1" / "zero.md")  # a device, through a link that leaves the folder
    st = SkillTools(load_skills([root], project_dir=tmp_path / "p", home=tmp_path / "h").skills)
    for path, why in [("loop.md", "has no file"), ("zero.md", "outside the skill's folder")]:
        try:
            st.read("s1", path)
        except Exception as exc:
            assert why in str(exc)
        else:
            raise AssertionError(f"{path} was read")
    assert "loop.md" not in st.activate("s1") and "zero.md" not in st.activate("s1")
