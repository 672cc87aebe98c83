"""benchmarks/skills.py: its corpus loads and validates as the specification says, its checks
score answers by the skills' rules, and a run writes every figure it reports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ctxwright.core.tokens import estimate_tokens
from ctxwright.skills import load_skills, validate

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import skill_corpus as corpus

ROOT = Path(__file__).resolve().parent.parent


def test_corpus_is_twenty_valid_distinct_skills(tmp_path):
    names = corpus.install(tmp_path)
    assert len(names) == len(set(names)) == 20
    loaded = load_skills([tmp_path], project_dir=tmp_path / "none", home=tmp_path / "none")
    assert loaded.warnings == [] and sorted(s.name for s in loaded.skills) == sorted(names)
    for s in loaded.skills:
        result = validate(s.folder)
        assert result.valid, (s.name, result.errors)
        assert 150 <= estimate_tokens(s.body) <= 1000  # realistic bodies, not stubs
    assert corpus.ADDED.name not in names
    assert {t.skill for t in corpus.TASKS} <= set(names)


def test_checks_follow_each_skills_rules():
    good = {
        "house-style": "Report: website traffic\n- 12,400 visits, up 8%\n- most from search\n-- end",
        "incident-writeup": (
            "Incident: payments API errors\nImpact: about 1,900 card payments failed\n"
            "09:12 UTC errors start\nFix: config rolled back\nFiled by the on-call engineer."
        ),
        "release-notes": (
            "Release notes: 2.4.0\nAdded: CSV export\nFixed: login timeout\nChanged: dashboard loads twice as fast\n"
            "Thanks for upgrading."
        ),
        "customer-email": (
            "Subject: order N-5521, damaged parcel\nDear customer,\nA replacement leaves within 3 days.\n"
            "Best regards, Northwind Support"
        ),
    }
    for task in corpus.TASKS[:4]:
        assert all(corpus.check(task, good[task.skill]).values()), task.skill
    incident = corpus.TASKS[1]
    bad = good["incident-writeup"].replace("payments API errors", "payments API outage")
    assert corpus.check(incident, bad)["banned_word_absent"] is False
    assert corpus.check(incident, good["incident-writeup"] + "\nThanks!")["last_line"] is False
    four = "Report: x\n- a\n- b\n- c\n- d 12,400\n-- end"
    assert corpus.check(corpus.TASKS[0], four)["structure"] is False
    assert not any(corpus.check(corpus.TASKS[0], None).values())


def _run(tmp_path: Path, *args: str, timeout: float) -> dict:
    out = tmp_path / "skills.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "skills.py"), *args, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp_path,  # no project .agents/skills of the checkout leaks in
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "reuse across the addition" in proc.stdout
    return json.loads(out.read_text())


def _check_shape(data: dict, arms: list[str], tasks: int) -> None:
    assert data["skills_installed"] == 20 and data["tasks_per_arm"] == tasks
    assert [a["arm"] for a in data["arms"]] == arms
    for a in data["arms"]:
        assert 0.0 <= a["score"] <= 1.0 and a["tasks"] == tasks
        assert a["calls"] >= tasks and a["prompt_tokens_per_call"] > 0
    cat = data["catalog"]
    assert cat["catalog_tokens"] > cat["listed_tokens"] > 0 and cat["framing_per_skill"] > 0
    assert len(cat["body_tokens"]) == 20
    reminder, prefix = data["addition"]
    assert (reminder["mode"], prefix["mode"]) == ("reminder", "prefix")
    assert reminder["reminders"] == 2 and reminder["tokens_added"] > 0
    for a in (reminder, prefix):
        assert a["prompt_after"] > 0 and a["tokens_prefilled"] is not None
        assert 0.0 <= a["reuse_across_addition"] <= 1.0
    # the prefix mode re-prefills the conversation; the reminder only what it appends
    assert prefix["tokens_prefilled"] > reminder["tokens_prefilled"]
    assert [t["pass"] is None or isinstance(t["pass"], bool) for t in data["targets"]] == [True] * 3


def test_scripted_run_reports_every_figure(tmp_path):
    data = _run(tmp_path, "--scripted", "--quick", timeout=120)
    _check_shape(data, ["catalog", "paste_all", "none"], 2)
    by = {a["arm"]: a for a in data["arms"]}
    assert by["catalog"]["right_skill_loaded"] >= 1  # the word-overlap picker finds one at least
    assert by["catalog"]["prompt_tokens_per_call"] < by["paste_all"]["prompt_tokens_per_call"]
    assert by["paste_all"]["share_of_paste_all"] == 1.0
    assert all(isinstance(t["value"], float) for t in data["targets"])


@pytest.mark.slow
def test_embedded_run_reports_every_figure(tmp_path):
    data = _run(tmp_path, "--tasks", "1", "--count-only", "--arms", "catalog,none", timeout=1500)
    _check_shape(data, ["catalog", "none"], 1)
    assert data["backend"] == "embedded" and data["tokens_counted_by"] != "estimate"
    reminder = data["addition"][0]
    assert reminder["cached_after"] is not None and reminder["reuse_efficiency"] is not None
