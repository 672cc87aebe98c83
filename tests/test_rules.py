"""The named rules (``audit/rules/``): each fires on its fixture pair ``fires.json`` and stays
quiet on ``quiet.json`` (a near miss: a change of the same part that is not the bug), run the
way ``ctxwright audit`` runs them -- after the audit's cause for the pair, so a rule the cause
gate would skip cannot pass here."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from ctxwright.audit.compare import Auditor, AuditRequest
from ctxwright.audit.logs import request_from_record
from ctxwright.audit.rules import BY_NAME, RULES, RuleRunner, Settings, run_rules
from ctxwright.audit.rules.base import STRICT_DATE, looks_like_id
from ctxwright.compaction.survival import contract

FIXTURES = Path(__file__).parent / "fixtures" / "rules"
PAIRS = [(r.name, kind) for r in RULES for kind in ("fires", "quiet")]


def load(rule: str, kind: str) -> tuple[AuditRequest | None, AuditRequest, Settings]:
    doc: dict[str, Any] = json.loads((FIXTURES / rule / f"{kind}.json").read_text())
    prev = doc["previous"]
    reqs = [None if prev is None else request_from_record(prev), request_from_record(doc["current"])]
    previous, current = (None if r is None else dataclasses.replace(r, conversation="fixture") for r in reqs)
    assert current is not None
    given = dict(doc["settings"])
    if "keep" in given:  # the survival contract, declared as CompactionConfig(keep=...) and --keep declare it
        given["keep"] = contract(given["keep"])
    return previous, current, Settings(**given)


def audited(previous: AuditRequest | None, current: AuditRequest, settings: Settings) -> list[str]:
    """The rules that fire on the pair as the audit runs them (cause first, then the rules)."""
    auditor, runner = Auditor(), RuleRunner(settings)
    found = []
    for req in (previous, current):
        if req is not None:
            row = auditor.add(req)
            found = runner.add(row.conversation, req, row.cause)
    return [f.rule for f in found]


def test_every_rule_has_both_fixtures_and_no_fixture_lacks_a_rule() -> None:
    for rule in RULES:
        for kind in ("fires", "quiet"):
            assert (FIXTURES / rule.name / f"{kind}.json").is_file(), f"{rule.name} has no {kind}.json"
    assert {p.name for p in FIXTURES.iterdir() if p.is_dir()} == set(BY_NAME)


@pytest.mark.parametrize(("rule", "kind"), PAIRS)
def test_fixture_pair(rule: str, kind: str) -> None:
    previous, current, settings = load(rule, kind)
    found = BY_NAME[rule].check(previous, current, settings)
    if kind == "fires":
        assert found is not None, f"{rule} did not fire on its fires.json"
        assert found.rule == rule and found.fix == BY_NAME[rule].fix and found.line and "\n" not in found.line
        assert rule in audited(previous, current, settings), "the audit's cause gate skipped it"
    else:
        assert found is None, f"{rule} fired on its quiet.json: {found.line}"
        assert rule not in audited(previous, current, settings)


def test_each_rule_has_a_fix_a_source_and_a_behaviour() -> None:
    for rule in RULES:
        assert rule.fix and "\n" not in rule.fix
        assert "Provider behaviour protected" in rule.doc
        assert "Public" in rule.doc and ("github" in rule.doc.lower() or "#" in rule.doc)


def test_lines_name_the_place() -> None:
    previous, current, settings = load("date_in_prefix", "fires")
    f = BY_NAME["date_in_prefix"].check(previous, current, settings)
    assert f is not None and "system prompt @" in f.line and "2026-12-06 15:48 UTC" in f.line
    previous, current, settings = load("session_id_in_tool", "fires")
    f = BY_NAME["session_id_in_tool"].check(previous, current, settings)
    assert f is not None and "'mcp__docs__search'" in f.line and "URL" in f.line
    previous, current, settings = load("tools_reordered", "fires")
    f = BY_NAME["tools_reordered"].check(previous, current, settings)
    assert f is not None and f.line.startswith("tools[0]: 'run_tests'")
    previous, current, settings = load("ttl_changed", "fires")
    f = BY_NAME["ttl_changed"].check(previous, current, settings)
    assert f is not None and "system[0]" in f.line and "1h → 5m" in f.line


@pytest.mark.parametrize(
    "text",
    [
        "Today is 2026-12-06.",
        "Date: Dec 6, 2026",
        "It is Sunday, 6 December",
        "now 15:48:02",
        "at 3:45 PM",
        "2026/12/06",
    ],
)
def test_a_date_in_a_first_request_is_a_warning(text: str) -> None:
    req = AuditRequest(system=f"You are an agent. {text}", tools=[], messages=[{"role": "user", "content": "hi"}])
    found = run_rules(None, req)
    assert [(f.rule, f.severity) for f in found] == [("date_in_prefix", "warning")]


@pytest.mark.parametrize(
    "text",
    [
        "Python 3.11.12",
        "version 2.0.1",
        "v2024.1",
        "see RFC 2616 section 14.9",
        "ratio 16:9",
        "port 8080",
        "a 10-digit 1234567890 id",
    ],
)
def test_versions_and_numbers_are_no_date(text: str) -> None:
    assert STRICT_DATE.search(text) is None
    req = AuditRequest(system=f"You are an agent. {text}", tools=[], messages=[{"role": "user", "content": "hi"}])
    assert run_rules(None, req) == []


def test_ids_and_words() -> None:
    for word in ("9f2c41d07ab34e55", "c03e8a1b-55f9-4d21-8a1b-55f94d21c03e", "sess_8Kq2Zp91xLm4", "tok-A81bC9dE0fG2"):
        assert looks_like_id(word), word
    for word in ("read_file", "run_tests", "documentation", "mcp__docs__search", "utf-8", "x86_64"):
        assert not looks_like_id(word), word


def test_cheap_rules_run_on_appends_only() -> None:
    """After an append only the TTL and budget rules run: a tool list that grew past the budget
    mid-conversation is still named, a prefix rule is not even called."""
    tools = [{"type": "function", "function": {"name": f"t{i}", "description": "x " * 200}} for i in range(5)]
    first = AuditRequest("s", [], [{"role": "user", "content": "a"}])
    second = AuditRequest("s", tools, [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
    found = run_rules(first, second, Settings(max_tool_tokens=100), cause="append")
    assert [f.rule for f in found] == ["tool_budget"]
    assert run_rules(second, dataclasses.replace(second), Settings(max_tool_tokens=100), cause="append") == []


def test_the_runner_forgets_closed_conversations_and_bounds_what_it_keeps() -> None:
    runner = RuleRunner(max_open=2)
    req = AuditRequest("s", [], [{"role": "user", "content": "a"}])
    for key in range(5):
        runner.add(key, req, "first")
    assert len(runner._last) == 2
    runner.forget(4)
    assert list(runner._last) == [3]
