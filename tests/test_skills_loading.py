"""Agent Skills: discovery, lenient loading, strict validation and the ``skills`` CLI, on real
folders made in ``tmp_path``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ctxwright.cli.main import main
from ctxwright.skills import load_skills, validate
from ctxwright.skills.loader import quote_colon_values

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "skills" / "house-style"


def make_skill(root: Path, folder: str, front: str | None = None, body: str = "Do the thing.\n") -> Path:
    """A skill folder ``root/folder`` whose SKILL.md has ``front`` (default: a valid name and description)."""
    d = root / folder
    d.mkdir(parents=True, exist_ok=True)
    if front is None:
        front = f"name: {folder}\ndescription: Does {folder} things. Use when asked.\n"
    (d / "SKILL.md").write_text(f"---\n{front}---\n{body}", encoding="utf-8")
    return d


def errors_of(tmp_path: Path, front: str, folder: str = "my-skill", body: str = "Body.\n") -> list[str]:
    return validate(make_skill(tmp_path, folder, front, body)).errors


def load(tmp_path: Path, *dirs: Path) -> tuple[list[str], list[str]]:
    """Names loaded and warnings, with no conventional location in the way."""
    r = load_skills(list(dirs), project_dir=tmp_path / "no-project", home=tmp_path / "no-home")
    return [s.name for s in r.skills], r.warnings


# --- the specification's rules, valid and invalid -----------------------------------------


def test_a_valid_skill_has_no_error_and_no_warning(tmp_path):
    r = validate(make_skill(tmp_path, "pdf-tools-2"))
    assert r.valid and r.errors == [] and r.warnings == []
    assert r.name == "pdf-tools-2"


@pytest.mark.parametrize(
    ("name", "folder", "fragment"),
    [
        ("PDF", "PDF", "lowercase"),
        ("my_skill", "my_skill", "lowercase"),
        ("-lead", "-lead", "starts or ends"),
        ("trail-", "trail-", "starts or ends"),
        ("double--hyphen", "double--hyphen", "double hyphen"),
        ("a" * 65, "a" * 65, "limit is 64"),
        ("other", "my-skill", "differs from its folder"),
        ('""', "my-skill", "empty"),
    ],
)
def test_name_rules(tmp_path, name, folder, fragment):
    errs = errors_of(tmp_path, f"name: {name}\ndescription: d\n", folder=folder)
    assert any(fragment in e for e in errs), errs


def test_name_64_chars_is_fine_and_nfkc_normalised(tmp_path):
    assert errors_of(tmp_path, f"name: {'a' * 64}\ndescription: d\n", folder="a" * 64) == []
    # full-width letters are the same name after NFKC
    assert errors_of(tmp_path, "name: ｐｄｆ\ndescription: d\n", folder="pdf") == []


def test_name_missing_or_not_a_string(tmp_path):
    assert any("name: missing" in e for e in errors_of(tmp_path, "description: d\n"))
    assert any("must be a string" in e for e in errors_of(tmp_path, "name: 12\ndescription: d\n", folder="12"))


def test_description_rules_count_code_points(tmp_path):
    assert errors_of(tmp_path, "name: my-skill\ndescription: " + "字" * 1024 + "\n") == []
    assert any(
        "1025 characters" in e for e in errors_of(tmp_path, "name: my-skill\ndescription: " + "字" * 1025 + "\n")
    )
    assert any("description: missing" in e for e in errors_of(tmp_path, "name: my-skill\n"))
    assert any("description: empty" in e for e in errors_of(tmp_path, "name: my-skill\ndescription: ''\n"))


def test_compatibility_at_most_500(tmp_path):
    ok = "name: my-skill\ndescription: d\ncompatibility: " + "x" * 500 + "\n"
    assert errors_of(tmp_path, ok) == []
    bad = "name: my-skill\ndescription: d\ncompatibility: " + "x" * 501 + "\n"
    assert any("compatibility: 501" in e for e in errors_of(tmp_path, bad))


def test_metadata_is_a_map_of_strings(tmp_path):
    assert errors_of(tmp_path, "name: my-skill\ndescription: d\nmetadata:\n  author: me\n  version: '1'\n") == []
    assert any(
        "quote the values of: version" in e
        for e in errors_of(tmp_path, "name: my-skill\ndescription: d\nmetadata:\n  version: 1.0\n")
    )
    assert any(
        "metadata: must be a map" in e for e in errors_of(tmp_path, "name: my-skill\ndescription: d\nmetadata: text\n")
    )


def test_allowed_tools_is_a_string(tmp_path):
    assert errors_of(tmp_path, "name: my-skill\ndescription: d\nallowed-tools: Bash(git:*) Read\n") == []
    assert any(
        "allowed-tools" in e for e in errors_of(tmp_path, "name: my-skill\ndescription: d\nallowed-tools: [Read]\n")
    )


def test_license_is_allowed_and_unknown_fields_are_errors(tmp_path):
    assert errors_of(tmp_path, "name: my-skill\ndescription: d\nlicense: MIT\n") == []
    errs = errors_of(tmp_path, "name: my-skill\ndescription: d\nversion: '1'\ndescripton: typo\n")
    assert any("unknown top-level field(s) descripton, version" in e for e in errs), errs


def test_front_matter_must_be_present_and_closed(tmp_path):
    d = tmp_path / "my-skill"
    d.mkdir()
    (d / "SKILL.md").write_text("# just a body\n", encoding="utf-8")
    assert any("no front matter" in e for e in validate(d).errors)
    (d / "SKILL.md").write_text("---\nname: my-skill\ndescription: d\n# body\n", encoding="utf-8")
    assert any("not closed" in e for e in validate(d).errors)


def test_long_body_is_a_warning_not_an_error(tmp_path):
    r = validate(make_skill(tmp_path, "my-skill", body="line\n" * 501))
    assert r.valid and any("501 lines" in w for w in r.warnings)
    r = validate(make_skill(tmp_path, "other-skill", body="word " * 5000))
    assert r.valid and any("tokens" in w for w in r.warnings)


def test_strict_validation_does_not_retry_an_unquoted_colon(tmp_path):
    errs = errors_of(tmp_path, "name: my-skill\ndescription: Use when: x\n")
    assert len(errs) == 1 and "not valid YAML" in errs[0] and "\n" not in errs[0]


def test_the_example_skill_validates():
    r = validate(EXAMPLE)
    assert r.valid, r.errors
    assert r.warnings == []
    assert r.name == "house-style"


# --- lenient loading: bad input never crashes ----------------------------------------------


def test_lenient_loading_warns_on_name_mismatch_and_length(tmp_path):
    make_skill(tmp_path / "s", "folder-a", "name: other-name\ndescription: d\n")
    make_skill(tmp_path / "s", "folder-b", f"name: {'b' * 70}\ndescription: d\n")
    names, warnings = load(tmp_path, tmp_path / "s")
    assert names == ["other-name", "b" * 70]
    assert any("differs from its folder" in w for w in warnings)
    assert any("limit is 64" in w for w in warnings)


def test_no_description_or_bad_yaml_is_skipped_with_a_warning(tmp_path):
    make_skill(tmp_path / "s", "no-desc", "name: no-desc\n")
    make_skill(tmp_path / "s", "bad-yaml", "name: [unclosed\ndescription: d\n")
    make_skill(tmp_path / "s", "good")
    names, warnings = load(tmp_path, tmp_path / "s")
    assert names == ["good"]
    assert any("no-desc: skipped: description: missing" in w for w in warnings)
    assert any("bad-yaml: skipped: front matter is not valid YAML" in w for w in warnings)


def test_unquoted_colon_is_retried_quoted(tmp_path):
    make_skill(tmp_path / "s", "colon", "name: colon\ndescription: Use when: the user asks\n")
    r = load_skills([tmp_path / "s"], project_dir=tmp_path, home=tmp_path)
    assert [s.description for s in r.skills] == ["Use when: the user asks"]
    assert any("after quoting" in w for w in r.warnings)
    assert quote_colon_values('a: b: "c"\n') == 'a: "b: \\"c\\""\n'


def test_missing_and_unclosed_front_matter_are_skipped(tmp_path):
    for folder, text in [("none", "# body only\n"), ("open", "---\nname: open\ndescription: d\n")]:
        (tmp_path / "s" / folder).mkdir(parents=True)
        (tmp_path / "s" / folder / "SKILL.md").write_text(text, encoding="utf-8")
    names, warnings = load(tmp_path, tmp_path / "s")
    assert names == []
    assert any("none: skipped: no front matter" in w for w in warnings)
    assert any("open: skipped: front matter not closed" in w for w in warnings)


def test_a_1mb_skill_is_skipped_and_invalid(tmp_path):
    d = make_skill(tmp_path / "s", "huge", body="x" * 1_000_001)
    names, warnings = load(tmp_path, tmp_path / "s")
    assert names == [] and any("huge: skipped" in w and "bytes" in w for w in warnings)
    assert not validate(d).valid


def test_non_utf8_is_a_warning_when_loading_and_an_error_when_validating(tmp_path):
    d = tmp_path / "s" / "latin"
    d.mkdir(parents=True)
    (d / "SKILL.md").write_bytes(b"---\nname: latin\ndescription: caf\xe9\n---\nbody\n")
    r = load_skills([tmp_path / "s"], project_dir=tmp_path, home=tmp_path)
    assert [s.name for s in r.skills] == ["latin"]
    assert r.skills[0].description == "caf\ufffd"
    assert any("not valid UTF-8" in w for w in r.warnings)
    errs = validate(d).errors
    assert len(errs) == 1 and "not valid UTF-8" in errs[0]


def test_a_symlink_loop_is_a_warning(tmp_path):
    root = tmp_path / "s"
    make_skill(root, "good")
    os.symlink(root / "loop", root / "loop")  # points at itself
    os.symlink(root, root / "good" / "back")  # a loop inside a skill folder: not followed when counting
    names, warnings = load(tmp_path, root)
    assert names == ["good"]
    assert any("loop: cannot follow it" in w for w in warnings)
    assert validate(root / "good").resource_files == 0


def test_two_skills_with_the_same_name_first_wins(tmp_path):
    make_skill(tmp_path / "a", "dup")
    make_skill(tmp_path / "b", "dup", "name: dup\ndescription: the second one\n")
    r = load_skills([tmp_path / "a", tmp_path / "b"], project_dir=tmp_path, home=tmp_path)
    assert [(s.name, s.folder) for s in r.skills] == [("dup", tmp_path / "a" / "dup")]
    assert any("two skills named 'dup'" in w and "the first found wins" in w for w in r.warnings)


def test_project_wins_over_user(tmp_path):
    project, home = tmp_path / "proj", tmp_path / "home"
    make_skill(project / ".agents" / "skills", "shared", "name: shared\ndescription: project copy\n")
    make_skill(home / ".agents" / "skills", "shared", "name: shared\ndescription: user copy\n")
    make_skill(home / ".agents" / "skills", "only-user")
    r = load_skills(project_dir=project, home=home)
    assert [(s.name, s.source, s.description) for s in r.skills][:1] == [("shared", "project", "project copy")]
    assert [s.name for s in r.skills] == ["shared", "only-user"]
    clash = [w for w in r.warnings if "two skills named 'shared'" in w]
    assert len(clash) == 1 and "project's skill wins" in clash[0]
    assert str(project) in clash[0] and str(home) in clash[0]


def test_a_given_directory_can_be_one_skill_folder(tmp_path):
    d = make_skill(tmp_path, "solo")
    names, _ = load(tmp_path, d)
    assert names == ["solo"]


# --- the CLI --------------------------------------------------------------------------------


def test_validate_json_shape_and_cjk_description(tmp_path, capsys):
    root = tmp_path / "skills"
    d = make_skill(root, "cjk", "name: cjk\ndescription: 总结一份报告\nlicense: MIT\n")
    (d / "LICENSE.txt").write_text("MIT", encoding="utf-8")
    (d / "scripts").mkdir()
    (d / "scripts" / "run.py").write_text("print(1)\n", encoding="utf-8")
    (d / "reference.md").write_text("more\n", encoding="utf-8")
    assert main(["skills", "validate", str(root), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {
        "skills": [
            {
                "path": str(d),
                "name": "cjk",
                "valid": True,
                "errors": [],
                "warnings": [],
                "description_chars": 6,
                "resource_files": 2,
            }
        ]
    }


def test_validate_exit_codes(tmp_path, capsys):
    good = make_skill(tmp_path / "ok", "good")
    bad = make_skill(tmp_path / "ko", "bad", "name: Bad\ndescription: d\n")
    assert main(["skills", "validate", str(good)]) == 0
    assert "valid" in capsys.readouterr().out
    assert main(["skills", "validate", str(good), str(bad)]) == 1
    out = capsys.readouterr().out
    assert "INVALID" in out and "error: name:" in out
    assert main(["skills", "validate", str(tmp_path / "missing"), "--json"]) == 1
    entry = json.loads(capsys.readouterr().out)["skills"][0]
    assert entry["valid"] is False and entry["name"] is None and entry["description_chars"] is None


def test_validate_the_example_from_the_cli(capsys):
    assert main(["skills", "validate", str(EXAMPLE.parent)]) == 0


def test_list_prints_skills_and_warnings(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    make_skill(tmp_path / "s", "alpha")
    make_skill(tmp_path / "s", "beta", "name: beta\n")
    assert main(["skills", "list", "--skills", str(tmp_path / "s")]) == 0
    captured = capsys.readouterr()
    assert "alpha" in captured.out and "beta" not in captured.out
    assert "beta: skipped: description: missing" in captured.err
