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


def test_session_part_counts_breaks_only_in_the_anti_pattern(tmp_path: Path) -> None:
    """The session arms through the real harness and the audit: the search arm never breaks the
    prefix and sends far fewer tokens than every schema in it; appending found tools breaks it."""
    out = tmp_path / "s.json"
    assert tool_search.main(["--part", "session", "--calls", "8", "--json", str(out)]) == 0
    sizes = json.loads(out.read_text())["session"]["sizes"]
    assert set(sizes) == {"10", "100", "500"}
    big = sizes["500"]
    assert big["search_call_tool"]["prefix_breaks"] == 0 and big["search_call_tool"]["reuse_efficiency"] == 1.0
    assert big["search_call_tool"]["calls"] == big["all_in_prefix"]["calls"] == 8
    assert big["search_call_tool"]["vs_all_in_prefix"] < 0.15
    assert big["append_to_tools"]["prefix_breaks"] >= 3 and big["append_to_tools"]["break_causes"] == ["tools_changed"]
    assert big["append_to_tools"]["reuse_efficiency"] < 1.0
    # the search arm re-run with the hybrid ranker: the same prefix discipline, and its searches
    # scored for whether they listed each task's tool
    hybrid = big["search_call_tool (hybrid)"]
    assert hybrid["prefix_breaks"] == 0 and hybrid["reuse_efficiency"] == 1.0 and hybrid["calls"] == 8
    for arm in (big["search_call_tool"], hybrid):
        assert arm["search"]["searches"] == 4 and 0.0 <= arm["search"]["target_first"] <= arm["search"]["target_listed"]
    assert hybrid["search"]["target_listed"] > 0


def test_e2e_scoring_is_by_code_against_the_schema() -> None:
    """A call through call_tool with valid arguments succeeds; the wrong tool, or arguments that
    miss a required field, do not."""
    from ctxwright import Harness
    from ctxwright.backends.scripted import ScriptedBackend
    from ctxwright.core.messages import Message, ToolCall

    tools = toolgen.generate_catalog(0)
    specs, _ = tool_search.spread_catalog(tools, [])
    target, other = specs[0], specs[1]
    good = tool_search.example_arguments(target.parameters)
    assert tool_search.valid_arguments(target, good)
    assert not tool_search.valid_arguments(target, "not an object")
    cases = [
        ("call_tool", {"name": target.name, "arguments": good}, True),
        ("call_tool", {"name": other.name, "arguments": tool_search.example_arguments(other.parameters)}, False),
        ("call_tool", {"name": target.name, "arguments": {}}, not target.parameters.get("required")),
    ]
    for name, args, success in cases:
        reply = Message(
            role="assistant", content="", tool_calls=(ToolCall(id="c1", name=name, arguments=json.dumps(args)),)
        )
        h = Harness(
            "s",
            [tool_search.executable(s) for s in specs[:5]],
            backend=ScriptedBackend([reply, "done"]),
            defer_tools="all",
            status=False,
            todo=False,
            delegate=False,
            read_result=False,
            recall=False,
        )
        h.run("task")
        score = tool_search.score_e2e(h, target)
        assert score["success"] is success and score["right_tool"] is (args["name"] == target.name)
        h.close()


@pytest.mark.slow
def test_the_real_catalog_benchmark_runs_every_ranker_and_judges_by_its_targets(tmp_path: Path) -> None:
    """``tool_catalogs.py`` on the smallest public set (BFCL live_parallel, 7 tools) and a
    300-tool scale part: every ranker measured on the same queries, the verdict computed from
    what was measured (the BM25 rule compares the ranking to the one before the measurement)."""
    import catalogs
    import tool_catalogs

    small = [s for s in catalogs.bfcl_sets(("live_parallel",))]
    assert [s.name for s in small] == ["bfcl/live_parallel"]
    out = tmp_path / "c.json"
    real = tool_catalogs.load_sets
    tool_catalogs.load_sets = lambda which, quick: (small, {})  # type: ignore[assignment]
    try:
        assert tool_catalogs.main(["--big", "300", "--before-tools", "60", "--weights", "0.3", "--json", str(out)]) == 0
    finally:
        tool_catalogs.load_sets = real
    data = json.loads(out.read_text())
    (only,) = data["sets"]
    assert only["queries"] == 16 and only["tools"] == 7
    rankers = only["rankers"]
    assert set(rankers) == {
        "bm25 before",
        "bm25",
        "bm25 -exp",
        "bm25 name+desc",
        "embed",
        "hybrid",
        "hybrid -exp",
        "rrf",
        "weighted 0.3",
    }
    for m in rankers.values():
        assert 0.0 <= m["recall_at_1"] <= m["recall_at_5"] <= m["recall_at_10"] <= 1.0
    assert data["bfcl_overall"]["hybrid"]["recall_at_5"] == rankers["hybrid"]["recall_at_5"]
    assert data["pass"]["hybrid_recall_at_5_bfcl"] == (rankers["hybrid"]["recall_at_5"] >= 0.92)
    scale = data["scale"]
    assert scale["tools"] == 300 and scale["index_rebuild_from_cache_s"] < scale["index_build_s"]
    # the old settings measured beside the new in the same run
    assert scale["build_compared_tools"] == 60 and scale["before_index_build_s"] > 0 < scale["after_index_build_s"]
    assert scale["before_hybrid_query_ms_median"] > 0 and scale["repeated_query_ms_median"] > 0


@pytest.mark.slow
def test_the_catalog_benchmark_measures_only_the_rankers_asked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--rankers bm25,hybrid``: those two arms only, and no verdict on an arm left out (the
    BM25 rule needs ``bm25 before``); a misspelt ranker is refused before anything runs."""
    import catalogs
    import tool_catalogs

    small = catalogs.bfcl_sets(("live_parallel",))
    out = tmp_path / "c.json"
    real = tool_catalogs.load_sets
    tool_catalogs.load_sets = lambda which, quick: (small, {})  # type: ignore[assignment]
    try:
        assert tool_catalogs.main(["--big", "0", "--rankers", "bm25,hybrid", "--json", str(out)]) == 0
        with pytest.raises(SystemExit):
            tool_catalogs.main(["--big", "0", "--rankers", "bm25,hybird"])
    finally:
        tool_catalogs.load_sets = real
    assert "unknown ranker(s) hybird; use bm25 before, bm25," in capsys.readouterr().err
    data = json.loads(out.read_text())
    assert set(data["sets"][0]["rankers"]) == {"bm25", "hybrid"}
    assert set(data["pass"]) == {"hybrid_recall_at_5_bfcl"}
