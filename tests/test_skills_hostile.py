"""Hostile probes of skill folders, through the real ``ctxwright skills`` CLI in a subprocess: a
front matter that would expand without end, and a ``SKILL.md`` that links out of its folder.

The CLI child runs under an address-space limit, so a probe that regresses fails with a
MemoryError in the child instead of taking the machine's memory (the test must be able to
fail without harming the host)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import ctxwright
from ctxwright.skills import load_skills, validate
from skill_folders import make_skill, no_conventional_skills  # noqa: F401 -- the fixture is autouse

resource = pytest.importorskip("resource")

#: Address space of the CLI child: Python and ctxwright need far less; a front matter that
#: expands exhausts it in seconds.
CHILD_MEMORY = 1536 * 1024 * 1024
CLI_TIMEOUT_S = 180.0  # a loaded 2-core machine; the real run takes well under a second


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY, CHILD_MEMORY))


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``ctxwright skills ARGS`` in a child process with bounded memory."""
    env = {**os.environ, "PYTHONPATH": str(Path(ctxwright.__file__).resolve().parents[1])}
    return subprocess.run(
        [sys.executable, "-m", "ctxwright.cli.main", "skills", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        preexec_fn=_limit_memory,
    )


#: A "billion laughs": each level aliases the one before nine times (9**9 strings expanded),
#: in under a kilobyte of text.
BOMB = (
    "---\nname: bomb\ndescription: Use for nothing.\nmetadata:\n"
    '  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    + "".join(f"  {n}: &{n} [{','.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True))
    + "---\nBody.\n"
)


def bomb_skill(root: Path) -> Path:
    folder = root / "bomb"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(BOMB)
    return folder


def _one_warning(stderr: str, fragment: str) -> None:
    assert "Traceback" not in stderr and "unexpected" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if fragment in line]
    assert len(lines) == 1, stderr


def test_an_alias_bomb_is_refused_by_list_show_and_validate_in_bounded_memory(tmp_path):
    root = tmp_path / "skills"
    folder = bomb_skill(root)
    make_skill(root, "good")
    refused = "front matter refused at line 8: its aliases repeat more than 10,240 characters"

    listed = cli("list", "--skills", str(root), cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    _one_warning(listed.stderr, refused)
    assert "good" in listed.stdout and "bomb  [" not in listed.stdout  # not listed as a usable skill

    shown = cli("show", "bomb", "--skills", str(root), cwd=tmp_path)
    assert shown.returncode == 1, shown.stderr
    (line,) = shown.stderr.splitlines()  # the reason it was skipped, and nothing else
    assert line.startswith(f"ctxwright skills show: {folder}: skipped: {refused}"), shown.stderr
    assert shown.stdout == ""

    checked = cli("validate", str(folder), cwd=tmp_path)
    assert checked.returncode == 1, checked.stderr
    assert checked.stdout.splitlines() == [f"{folder}: INVALID", f"  error: {validate(folder).errors[0]}"]
    assert refused in checked.stdout
    assert "Traceback" not in checked.stderr


@pytest.mark.parametrize(
    ("metadata", "fragment"),
    [
        ("&a [*a]", "alias *a is inside the value it names"),  # a value that contains itself
        ("&m {self: *m}", "alias *m is inside the value it names"),
        ("[" * 5000 + "]" * 5000, "nested deeper than 32 levels"),  # PyYAML recurses per level
        ("{" * 5000 + "}" * 5000, "nested deeper than 32 levels"),
    ],
)
def test_endless_and_deep_front_matter_is_one_line(tmp_path, metadata, fragment):
    root = tmp_path / "skills"
    folder = root / "odd"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(f"---\nname: odd\ndescription: Use it.\nmetadata: {metadata}\n---\nBody.\n")
    loaded = load_skills([root])
    assert loaded.skills == []
    assert [w for w in loaded.warnings if fragment in w and "skipped: front matter refused" in w], loaded.warnings
    assert [e for e in validate(folder).errors if fragment in e]
    shown = cli("show", "odd", "--skills", str(root), cwd=tmp_path)
    assert shown.returncode == 1
    _one_warning(shown.stderr, fragment)


def test_a_few_aliases_still_load(tmp_path):
    """An author who shares a value loses nothing: the bound is on what aliases repeat."""
    root = tmp_path / "skills"
    folder = root / "shared"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(
        "---\nname: shared\ndescription: &d Use when sharing a value.\n"
        "metadata:\n  summary: *d\n  again: *d\n---\nBody.\n"
    )
    loaded = load_skills([root])
    assert [s.name for s in loaded.skills] == ["shared"] and loaded.warnings == []
    shared = "Use when sharing a value."
    assert loaded.skills[0].front_matter["metadata"] == {"summary": shared, "again": shared}
    assert validate(folder).valid


# --- a SKILL.md that is a symlink --------------------------------------------------------------


def test_a_skill_md_linking_out_of_its_folder_is_refused_everywhere(tmp_path):
    root = tmp_path / "skills"
    folder = root / "linked"
    folder.mkdir(parents=True)
    secret = tmp_path / "elsewhere.md"
    secret.write_text("---\nname: linked\ndescription: Looks fine.\n---\nTHE SECRET BODY\n")
    os.symlink(secret, folder / "SKILL.md")
    refused = "SKILL.md is a link that leads outside the skill's folder"

    loaded = load_skills([root])
    assert loaded.skills == []
    assert [w for w in loaded.warnings if refused in w and w.startswith(f"{folder}: skipped: ")], loaded.warnings
    assert [e for e in validate(folder).errors if refused in e]

    listed = cli("list", "--skills", str(root), cwd=tmp_path)
    assert listed.returncode == 0
    _one_warning(listed.stderr, refused)
    assert "linked  [" not in listed.stdout
    shown = cli("show", "linked", "--skills", str(root), cwd=tmp_path)
    assert shown.returncode == 1
    _one_warning(shown.stderr, refused)
    assert "THE SECRET BODY" not in shown.stdout + shown.stderr
    checked = cli("validate", str(folder), cwd=tmp_path)
    assert checked.returncode == 1 and refused in checked.stdout


def test_a_skill_md_linking_inside_its_folder_loads_as_read_skill_file_allows(tmp_path):
    """The same rule as ``read_skill_file``: a link whose real path stays in the folder is fine,
    and so is a skill folder that is itself a link (the user chose that folder)."""
    from ctxwright.skills.tools import SkillTools

    real = tmp_path / "checkout" / "inner"
    (real / "docs").mkdir(parents=True)
    (real / "docs" / "skill.md").write_text("---\nname: inner\ndescription: Use it.\n---\nThe real body.\n")
    os.symlink(real / "docs" / "skill.md", real / "SKILL.md")
    root = tmp_path / "skills"
    root.mkdir()
    os.symlink(real, root / "inner")
    loaded = load_skills([root])
    assert [s.name for s in loaded.skills] == ["inner"], loaded.warnings
    assert loaded.skills[0].body.strip() == "The real body."
    assert validate(root / "inner").valid
    tools = SkillTools(loaded.skills)
    assert "The real body." in tools.read("inner", "SKILL.md")  # the tool agrees
    shown = cli("show", "inner", "--skills", str(root), cwd=tmp_path)
    assert shown.returncode == 0 and "The real body." in shown.stdout
