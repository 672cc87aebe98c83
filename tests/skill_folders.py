"""Skill folders for the skills tests: one way to write a minimal valid skill, and the fixture
that keeps a developer's own ``~/.agents/skills`` and the project's ``.agents/skills`` out of a
test (discovery searches both, so a real one on the machine would change what loads)."""

from __future__ import annotations

from pathlib import Path

import pytest


def make_skill(root: Path, name: str, body: str = "Do it well.", files: dict[str, str] | None = None) -> Path:
    """``root/name`` with a valid SKILL.md (``body`` after the front matter) and ``files``."""
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: Use for {name} tasks.\n---\n{body}\n")
    for rel, text in (files or {}).items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return folder


@pytest.fixture(autouse=True)
def no_conventional_skills(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HOME and the working folder are an empty folder of the test's own."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(home)
