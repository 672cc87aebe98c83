"""The tool-search benchmark's generator is right by construction (sizes, valid schemas, queries
that never spell their tool's name, determinism), and the benchmark runs end to end."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import tool_search
import toolgen
from ctxwright.cli.main import main
from ctxwright.tools.catalog import tool_from_object


def test_catalog_is_large_varied_and_valid() -> None:
    tools = toolgen.generate_catalog(0)
    assert len(tools) >= 500 and len({t.domain for t in tools}) >= 20
    assert len({t.name for t in tools}) == len(tools)
    assert any("." in t.name for t in tools) and any("-" in t.name for t in tools)
    assert any(c.isupper() for t in tools for c in t.name)  # camelCase names too
    for t in tools:
        spec = tool_from_object(t.tool, t.name)  # valid JSON Schema, an object
        assert spec.name == t.name and spec.description
    # overlapping words: many services share the same object nouns and verbs
    assert sum(1 for t in tools if t.noun == "issue") >= 10
    assert sum(1 for t in tools if t.verb == "create") >= 40


def test_queries_are_paraphrases_aimed_at_existing_tools() -> None:
    tools = toolgen.generate_catalog(0)
    names = {t.name for t in tools}
    queries = toolgen.generate_queries(tools, 400, 0)
    assert len(queries) == 400 and len({q.id for q in queries}) == 400
    assert {q.expected for q in queries} <= names and len({q.expected for q in queries}) == 400
    for q in queries:
        assert q.expected.lower() not in q.query.lower()


def test_generation_is_deterministic_per_seed() -> None:
    one = toolgen.to_jsonl([t.tool for t in toolgen.generate_catalog(3)])
    assert one == toolgen.to_jsonl([t.tool for t in toolgen.generate_catalog(3)])
    assert one != toolgen.to_jsonl([t.tool for t in toolgen.generate_catalog(4)])
    tools = toolgen.generate_catalog(0)
    assert toolgen.generate_queries(tools, 50, 1) == toolgen.generate_queries(tools, 50, 1)


def test_scaled_catalog_has_unique_names() -> None:
    big = toolgen.scale_catalog(toolgen.generate_catalog(0), 2_000)
    assert len(big) == 2_000 and len({o["function"]["name"] for o in big}) == 2_000


def test_benchmark_runs_and_its_files_feed_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    assert (
        tool_search.main(["--part", "search", "--queries", "40", "--big", "600", "--runs", "1", "--json", str(out)])
        == 0
    )
    data = json.loads(out.read_text())
    section = data["search"]
    assert section["queries"] == 40 and section["index_tools"] == 600
    assert 0 <= section["recall_at_1"] <= section["recall_at_5"] <= section["recall_at_10"] <= 1
    assert set(section["pass"]) == {"recall_at_5", "index_10k_s", "query_median_ms"}

    catalog, queries = tmp_path / "catalog.jsonl", tmp_path / "queries.jsonl"
    assert tool_search.main(["--write-catalog", str(catalog), "--write-queries", str(queries), "--queries", "20"]) == 0
    capsys.readouterr()
    assert main(["tools", "search", "--catalog", str(catalog), "--queries", str(queries), "--limit", "10"]) == 0
    answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    expected = [json.loads(line)["expected"] for line in queries.read_text().splitlines()]
    assert len(answers) == 20
    assert sum(want in got["results"] for want, got in zip(expected, answers, strict=True)) >= 15
