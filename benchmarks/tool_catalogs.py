"""Tool search on real tool sets: every ranker, side by side, on public catalogs it never saw.

``benchmarks/tool_search.py`` measures recall on a catalog and queries that our own code
generated, with a synonym table written beside the generator: an upper bound. This benchmark
ranks public function-calling data instead (``catalogs.py`` loads them):

* **BFCL** (the Berkeley Function Calling Leaderboard's data in the ``bfcl-eval`` package,
  Apache-2.0): per category every function pooled into one catalog; a query is the user's
  question, its gold the functions of its answer; ``bfcl/all`` pools the six categories;
* **LiveMCPBench**'s MCP tool catalog (70 servers) and its annotated tasks, when its wheel is
  in the data folder (the Makefile downloads it);
* the **generated** set of ``tool_search.py``, reported apart.

Rankers (``ToolIndex(ranker=...)``; one index per set, each ranker a ``mode`` of it, so
every ranker sees the same tools and the same queries):

* ``bm25``: the default (BM25 over name, description and parameters; the query's action
  words expanded); ``bm25 -exp``: the same without the expansion; ``bm25 before``: with
  the expansion table as it was before this benchmark removed its ``send`` group;
* ``bm25 name+desc``: plain BM25 over the name and description only (a baseline);
* ``embed``: all-MiniLM-L6-v2 cosine (``tools/embeddings.py``);
* ``hybrid``: the library's hybrid, 0.3·BM25/max + 0.7·cosine (``tools/fusion.py``),
  ``hybrid -exp`` without the expansion;
* ``rrf``: reciprocal-rank fusion of BM25's and embed's first ten (the alternative measured);
* ``weighted w``: w·BM25/max + (1−w)·cosine for the other weights in ``--weights``.

Metrics: recall@1/5/10 (the share of a query's gold tools in the first k, averaged over
queries), MRR@10 (1/rank of the first gold tool, 0 past 10), query latency median and p99
(wall, this run). Part ``scale``: a 10,000-tool catalog (the generated one under server
prefixes) indexed with the hybrid ranker on an empty vector cache, then again from the disk
cache, and the hybrid query latency on it -- with the query path as it was before (``Before``:
numpy's BLAS product, spinning ONNX threads, no query cache) timed in turns with the new one,
and both builds on ``--before-tools`` tools (2,000: the old build at 10,000 takes minutes on a
loaded machine), beside a build by the model's shipped export run unquantized (float32
MatMuls; ``tools/embeddings.py``), and the time to make the quantized copy once. Targets: hybrid recall@5 ≥ 0.92 over the six BFCL category sets (each
category its own catalog; the query-weighted average) and on ``bfcl/all``, the six pooled into
one 861-tool catalog, as a user with several servers has them; LiveMCPBench's figure is stated
beside it; BM25 on no BFCL set below the ranking before this benchmark (``bm25 before``); hybrid
query median ≤ 20 ms and p99 ≤ 100 ms at 10,000 tools; index build ≤ 60 s, and ≤ 2 s from the
cache. What else was tried for the pooled recall is ``tool_search_variants.py``.

    python benchmarks/tool_catalogs.py [--quick] [--sets bfcl,livemcp,generated] [--json PATH]
    python benchmarks/tool_catalogs.py --rankers bm25,hybrid --big 0   # the shipped rankers only

``--rankers`` measures only the rankers named (every ranker but ``bm25`` embeds the query once
more per query, the slow part on a loaded machine); a verdict whose rankers were left out is not given.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from catalogs import SearchSet, SetUnavailable, bfcl_sets, generated_set, livemcp_set
from common import console, machine, save, table
from ctxwright.core.request import ToolSpec
from ctxwright.tools.embeddings import MiniLM, VectorCache
from ctxwright.tools.fusion import reciprocal_rank, weighted_sum
from ctxwright.tools.search import (
    ACTION_SYNONYMS,
    MAX_QUERY_CHARS,
    MIN_COSINE,
    ToolIndex,
    best_scored,
    bm25_index,
    bm25_scores,
    tokenize,
)
from toolgen import generate_catalog, scale_catalog

TARGETS = {
    "hybrid_recall_at_5_bfcl": 0.92,
    "hybrid_recall_at_5_bfcl_pooled": 0.92,
    "hybrid_query_median_ms_10k": 20.0,
    "hybrid_query_p99_ms_10k": 100.0,
    "index_build_s_10k": 60.0,
    "index_rebuild_from_cache_s_10k": 2.0,
}
KS = (1, 5, 10)
#: the query expansion as it was before this benchmark decided it: with the ``send``
#: group, which the measurement removed -- the "today's ranking" BM25 must not fall below
BEFORE_SYNONYMS = {**ACTION_SYNONYMS, "send": ("deliver", "post", "email", "notify", "tell")}
#: the BFCL categories' sets, each its own catalog, whose query-weighted average is "overall"
SIX = "bfcl (6 sets)"
Ranked = Callable[[str], list[str]]


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class NameDescription:
    """Plain BM25 over each tool's name and description: the baseline every tool-search
    write-up starts from (no parameters, no field weights, no expansion)."""

    def __init__(self, tools: Sequence[ToolSpec]) -> None:
        self.names = [t.name for t in tools]
        self.bm25 = bm25_index([tokenize(t.name, identifiers=True) + tokenize(t.description) for t in tools])

    def __call__(self, query: str) -> list[str]:
        scores = bm25_scores(self.bm25, tokenize(query)) if self.bm25 is not None else None
        return [] if scores is None else [self.names[p] for p, _ in best_scored(scores, 10)]


def weighted(index: ToolIndex, weight: float) -> Ranked:
    def rank(query: str) -> list[str]:
        names, words, cosine = index.scores(query)
        fused = weighted_sum(words, cosine, weight)
        return [names[p] for p, _ in best_scored(fused + 1.0, 10)]  # +1: cosines may be negative

    return rank


def rankers(
    index: ToolIndex, plain: ToolIndex, tools: Sequence[ToolSpec], weights: Sequence[float]
) -> dict[str, Ranked]:
    def mode(ix: ToolIndex, m: Any) -> Ranked:
        return lambda q: [h.name for h in ix.search(q, 10, mode=m)]

    before = ToolIndex(tools, synonyms=BEFORE_SYNONYMS)
    out: dict[str, Ranked] = {
        "bm25 before": mode(before, "bm25"),
        "bm25": mode(index, "bm25"),
        "bm25 -exp": mode(plain, "bm25"),
        "bm25 name+desc": NameDescription(tools),
        "embed": mode(index, "embed"),
        "hybrid": mode(index, "hybrid"),
        "hybrid -exp": mode(plain, "hybrid"),
    }
    out["rrf"] = rrf(index)
    for w in weights:
        out[f"weighted {w:g}"] = weighted(index, w)
    return out


def rrf(index: ToolIndex, depth: int = 10) -> Ranked:
    """Reciprocal-rank fusion of BM25's and the embedding's first ``depth``: the alternative to
    the hybrid ranker's weighted sum (``tools/fusion.py`` says which won and why)."""

    def rank(query: str) -> list[str]:
        names, words, cosine = index.scores(query)
        by_words = [p for p, _ in best_scored(words, depth)] if words is not None else []
        by_meaning = [p for p, _ in best_scored(cosine - MIN_COSINE, depth)]
        return [names[p] for p, _ in reciprocal_rank([by_words, by_meaning])][:10]

    return rank


def clip(query: str) -> str:
    """A question as a search query: the index refuses queries over MAX_QUERY_CHARS (a model
    writing a search_tools query writes a few words), and a few BFCL questions paste a whole
    document; those are cut at a word boundary before the limit."""
    if len(query) <= MAX_QUERY_CHARS:
        return query
    return query[:MAX_QUERY_CHARS].rsplit(None, 1)[0]


def measure(rank: Ranked, queries: Sequence[tuple[str, frozenset[str]]]) -> dict[str, Any]:
    """recall@k, MRR@10 and latency of one ranker over the queries."""
    hits = {k: 0.0 for k in KS}
    rr = 0.0
    times: list[float] = []
    for asked, gold in queries:
        query = clip(asked)
        start = time.perf_counter()
        found = rank(query)
        times.append((time.perf_counter() - start) * 1000)
        for k in KS:
            hits[k] += len(gold & set(found[:k])) / len(gold)
        first = next((i for i, name in enumerate(found[:10], start=1) if name in gold), None)
        rr += 1.0 / first if first else 0.0
    n = max(1, len(queries))
    return {
        **{f"recall_at_{k}": round(hits[k] / n, 4) for k in KS},
        "mrr_at_10": round(rr / n, 4),
        "query_ms_median": round(statistics.median(times), 3) if times else None,
        "query_ms_p99": round(percentile(times, 0.99), 3) if times else None,
    }


def average(results: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Each ranker's metrics averaged over sets, weighted by their queries."""
    total = sum(r["queries"] for r in results)
    names = list(results[0]["rankers"])
    keys = [f"recall_at_{k}" for k in KS] + ["mrr_at_10"]
    return {
        n: {k: round(sum(r["rankers"][n][k] * r["queries"] for r in results) / total, 4) for k in keys} for n in names
    }


def run_set(
    s: SearchSet, cache: VectorCache, weights: Sequence[float], only: Sequence[str] | None = None
) -> dict[str, Any]:
    start = time.perf_counter()
    # no query cache: each ranker's latency below includes its own embedding of the query
    index = ToolIndex(s.tools, ranker="hybrid", cache=cache, query_cache=0)
    plain = ToolIndex(s.tools, ranker="hybrid", expand_actions=False, cache=cache, query_cache=0)
    index.search("warm up", 1, mode="bm25")
    plain.search("warm up", 1, mode="bm25")
    built = time.perf_counter() - start
    arms = rankers(index, plain, s.tools, weights)
    if only:
        arms = {name: arms[name] for name in only}
    results = {name: measure(rank, s.queries) for name, rank in arms.items()}
    console.print(f"[dim]{s.name}: {len(s.tools)} tools, {len(s.queries)} queries, indexed in {built:.1f} s[/]")
    clipped = sum(1 for q, _ in s.queries if len(q) > MAX_QUERY_CHARS)
    return {
        "set": s.name,
        "source": s.source,
        "tools": len(s.tools),
        "queries": len(s.queries),
        "queries_clipped": clipped,
        "rankers": results,
    }


def part_ablation(sets: Sequence[SearchSet]) -> dict[str, dict[str, float]]:
    """BM25 recall@5 per set with the action-word table as it was before this benchmark, with each of
    its groups removed in turn, and with no expansion: the measurement that decided the table."""
    variants: dict[str, dict[str, Any]] = {"before (every group)": {"synonyms": BEFORE_SYNONYMS}}
    for group in BEFORE_SYNONYMS:
        rest = {k: v for k, v in BEFORE_SYNONYMS.items() if k != group}
        variants[f"without {group}"] = {"synonyms": rest}
    variants["no expansion"] = {"expand_actions": False}
    out: dict[str, dict[str, float]] = {}
    for label, options in variants.items():
        out[label] = {}
        for s in sets:
            index = ToolIndex(s.tools, **options)
            out[label][s.name] = measure(lambda q, ix=index: [h.name for h in ix.search(q, 10)], s.queries)[
                "recall_at_5"
            ]
    return out


class Before(ToolIndex):
    """The hybrid's query path as it was before the scale work: the cosine by numpy's ``@``
    (BLAS and its thread pool) and no query cache. Paired with a :class:`MiniLM` whose ONNX
    threads spin, it is the floor the new path is measured beside in one run."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs, query_cache=0)

    def _cosines(self, matrix: Any, embedder: Any, query: str) -> Any:
        return matrix @ embedder.embed([query])[0]


def timed_build(make: Callable[[], ToolIndex]) -> tuple[ToolIndex, float]:
    start = time.perf_counter()
    index = make()
    index.search("warm up", 1)
    return index, time.perf_counter() - start


def part_scale(n: int, cache_dir: Path, before_n: int) -> dict[str, Any]:
    """``n`` tools, hybrid, the new settings beside the old (:class:`Before`, spinning ONNX
    threads) in one run. Builds on empty vector caches: the new settings at ``n`` tools, then
    both at ``before_n`` (the old build at ``n`` takes minutes on a loaded machine); a second
    build from the disk cache (a new process would do the same: a new cache object on the
    same file). Query latency at ``n`` tools: every generated query (all distinct) on both
    indexes, old and new in turns so load hits both alike; the old index reads its vectors from
    the new one's cache (the same model and texts: the same vectors). Then the last 100
    queries again on the new index: a repeated query skips the model (the query cache)."""
    tools = generate_catalog(0)
    big = [
        ToolSpec.create(o["function"]["name"], o["function"]["description"], o["function"]["parameters"])
        for o in scale_catalog(tools, n)
    ]
    start = time.perf_counter()
    new_model = MiniLM(models=cache_dir / "models")  # a new folder: the quantized copy made anew
    quantize_s = time.perf_counter() - start
    old_model, unquantized = MiniLM(spinning=True), MiniLM(quantize=False)
    path = cache_dir / "vectors.sqlite"
    builds: dict[str, float] = {}
    fresh = big[:before_n]
    build_arms: tuple[tuple[str, MiniLM, type[ToolIndex]], ...] = (
        ("before", old_model, Before),
        ("unquantized", unquantized, ToolIndex),
        ("after", new_model, ToolIndex),
    )
    for label, model, kind in build_arms:
        _, builds[label] = timed_build(
            lambda m=model, k=kind, lb=label: k(
                fresh, ranker="hybrid", embedder=m, cache=VectorCache(cache_dir / f"build_{lb}.sqlite")
            )
        )
    _, cold = timed_build(lambda: ToolIndex(big, ranker="hybrid", embedder=new_model, cache=VectorCache(path)))
    again, warm = timed_build(lambda: ToolIndex(big, ranker="hybrid", embedder=new_model, cache=VectorCache(path)))
    before, _ = timed_build(lambda: Before(big, ranker="hybrid", embedder=old_model, cache=VectorCache(path)))
    queries = [q for q, _ in generated_set().queries]
    times: dict[str, list[float]] = {"before": [], "after": []}
    for i, q in enumerate(queries):
        arms = (("before", before), ("after", again)) if i % 2 else (("after", again), ("before", before))
        for label, index in arms:
            t0 = time.perf_counter()
            index.search(q, 5)
            times[label].append((time.perf_counter() - t0) * 1000)
    repeated: list[float] = []
    for q in queries[-100:]:  # the last searched: still in the query cache
        t0 = time.perf_counter()
        again.search(q, 5)
        repeated.append((time.perf_counter() - t0) * 1000)
    return {
        "tools": len(big),
        "index_build_s": round(cold, 2),
        "index_rebuild_from_cache_s": round(warm, 3),
        "cache_file_mb": round(path.stat().st_size / 1e6, 1),
        "hybrid_query_ms_median": round(statistics.median(times["after"]), 3),
        "hybrid_query_ms_p99": round(percentile(times["after"], 0.99), 3),
        "before_hybrid_query_ms_median": round(statistics.median(times["before"]), 3),
        "before_hybrid_query_ms_p99": round(percentile(times["before"], 0.99), 3),
        "repeated_query_ms_median": round(statistics.median(repeated), 3),
        "queries": len(queries),
        "build_compared_tools": len(fresh),
        "before_index_build_s": round(builds["before"], 2),
        "unquantized_index_build_s": round(builds["unquantized"], 2),
        "after_index_build_s": round(builds["after"], 2),
        "model_quantize_s": round(quantize_s, 2),
        "load_average_1min": round(os.getloadavg()[0], 2),
    }


def load_sets(which: Sequence[str], quick: bool) -> tuple[list[SearchSet], dict[str, str]]:
    sets: list[SearchSet] = []
    missing: dict[str, str] = {}
    for name in which:
        try:
            if name == "bfcl":
                found = bfcl_sets()
                sets.extend(found if not quick else [x for x in found if x.name == "bfcl/all"])
            elif name == "livemcp":
                sets.append(livemcp_set())
            elif name == "generated":
                sets.append(generated_set())
            else:
                raise SetUnavailable(f"unknown set {name!r}: use bfcl, livemcp, generated")
        except SetUnavailable as exc:
            missing[name] = str(exc)
            console.print(f"[yellow]{name}: {exc}[/]")
    return sets, missing


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sets", default="bfcl,livemcp,generated")
    p.add_argument("--weights", default="0.2,0.4", help="BM25 weights of the weighted-sum arms")
    p.add_argument("--big", type=int, default=10_000, help="tools in the scale part (0: skip it)")
    p.add_argument("--before-tools", type=int, default=2_000, help="tools in the old-vs-new build comparison")
    p.add_argument("--quick", action="store_true", help="bfcl/all and the others, 2,000 tools in the scale part")
    p.add_argument("--rankers", default="", help="only these rankers, comma-separated (default: every one)")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    only = [r.strip() for r in args.rankers.split(",") if r.strip()]
    known = list(rankers(ToolIndex([]), ToolIndex([]), [], [float(w) for w in args.weights.split(",") if w]))
    unknown = [r for r in only if r not in known]
    if unknown:
        p.error(f"unknown ranker(s) {', '.join(unknown)}; use {', '.join(known)}")
    if args.quick:
        args.big = min(args.big, 2_000)
    weights = [float(w) for w in args.weights.split(",") if w]
    wall = time.perf_counter()
    sets, missing = load_sets([s for s in args.sets.split(",") if s], args.quick)
    with tempfile.TemporaryDirectory() as tmp:
        cache = VectorCache(Path(tmp) / "sets.sqlite")
        results = [run_set(s, cache, weights, only) for s in sets]
        ablation = part_ablation([s for s in sets if s.name != "bfcl/all"]) if sets else None
        scale = part_scale(args.big, Path(tmp), min(args.before_tools, args.big)) if args.big else None
    for r in results:
        rows = [
            [
                name,
                m["recall_at_1"],
                m["recall_at_5"],
                m["recall_at_10"],
                m["mrr_at_10"],
                m["query_ms_median"],
                m["query_ms_p99"],
            ]
            for name, m in r["rankers"].items()
        ]
        console.print(
            table(
                f"{r['set']}: {r['tools']} tools, {r['queries']} queries",
                ["ranker", "recall@1", "recall@5", "recall@10", "MRR@10", "ms median", "ms p99"],
                rows,
            )
        )
    if ablation:
        names = list(next(iter(ablation.values())))
        console.print(
            table(
                "The action-word table, each group removed in turn: BM25 recall@5",
                ["table", *[n.removeprefix("bfcl/") for n in names]],
                [[label, *row.values()] for label, row in ablation.items()],
            )
        )
    verdict: dict[str, bool | None] = {}
    six = [r for r in results if r["set"].startswith("bfcl/") and r["set"] != "bfcl/all"]
    overall = average(six) if six else None
    if overall is not None:
        console.print(
            table(
                f"{SIX}: each category its own catalog; the query-weighted average",
                ["ranker", "recall@1", "recall@5", "recall@10", "MRR@10"],
                [
                    [n, m["recall_at_1"], m["recall_at_5"], m["recall_at_10"], m["mrr_at_10"]]
                    for n, m in overall.items()
                ],
            )
        )
        if "hybrid" in overall:
            verdict["hybrid_recall_at_5_bfcl"] = overall["hybrid"]["recall_at_5"] >= TARGETS["hybrid_recall_at_5_bfcl"]
    pooled = {r["set"]: r["rankers"]["hybrid"]["recall_at_5"] for r in results if "hybrid" in r["rankers"]}
    if "bfcl/all" in pooled:
        verdict["hybrid_recall_at_5_bfcl_pooled"] = pooled["bfcl/all"] >= TARGETS["hybrid_recall_at_5_bfcl_pooled"]
    if pooled.keys() & {"bfcl/all", "livemcpbench"}:
        console.print(
            table(
                "Pooled catalogs: hybrid recall@5 (BFCL's six sets in one catalog: target ≥ 0.92; LiveMCPBench: stated)",
                ["set", "tools", "queries", "hybrid recall@5", "bm25 recall@5"],
                [
                    [
                        r["set"],
                        r["tools"],
                        r["queries"],
                        r["rankers"]["hybrid"]["recall_at_5"],
                        r["rankers"].get("bm25", {}).get("recall_at_5"),
                    ]
                    for r in results
                    if r["set"] in ("bfcl/all", "livemcpbench") and "hybrid" in r["rankers"]
                ],
            )
        )
    bfcl = [r for r in results if r["set"].startswith("bfcl/")]
    if bfcl and {"bm25", "bm25 before"} <= set(bfcl[0]["rankers"]):
        verdict["bm25_not_below_before_on_any_bfcl_set"] = all(
            r["rankers"]["bm25"]["recall_at_5"] >= r["rankers"]["bm25 before"]["recall_at_5"] for r in bfcl
        )
    if scale:
        verdict["hybrid_query_median_ms_10k"] = scale["hybrid_query_ms_median"] <= TARGETS["hybrid_query_median_ms_10k"]
        verdict["hybrid_query_p99_ms_10k"] = scale["hybrid_query_ms_p99"] <= TARGETS["hybrid_query_p99_ms_10k"]
        verdict["index_build_s_10k"] = scale["index_build_s"] <= TARGETS["index_build_s_10k"]
        verdict["index_rebuild_from_cache_s_10k"] = (
            scale["index_rebuild_from_cache_s"] <= TARGETS["index_rebuild_from_cache_s_10k"]
        )
        console.print(
            table(
                f"Scale: {scale['tools']:,} tools, hybrid; load average {scale['load_average_1min']} "
                f"on {os.cpu_count()} CPUs",
                ["build s (≤ 60)", "from cache s (≤ 2)", "query median ms (≤ 20)", "query p99 ms (≤ 100)", "cache MB"],
                [
                    [
                        scale["index_build_s"],
                        scale["index_rebuild_from_cache_s"],
                        scale["hybrid_query_ms_median"],
                        scale["hybrid_query_ms_p99"],
                        scale["cache_file_mb"],
                    ]
                ],
            )
        )
        console.print(
            table(
                f"Before and after, one run: query at {scale['tools']:,} tools ({scale['queries']} queries, in turns), "
                f"build of {scale['build_compared_tools']:,} tools on an empty cache; the model quantized once in "
                f"{scale['model_quantize_s']} s",
                ["settings", "query median ms", "query p99 ms", f"build {scale['build_compared_tools']:,} s"],
                [
                    [
                        "before (BLAS @, spinning ONNX threads, no query cache)",
                        scale["before_hybrid_query_ms_median"],
                        scale["before_hybrid_query_ms_p99"],
                        scale["before_index_build_s"],
                    ],
                    [
                        "after (einsum, threads sleep, query cache)",
                        scale["hybrid_query_ms_median"],
                        scale["hybrid_query_ms_p99"],
                        scale["after_index_build_s"],
                    ],
                    ["after, a repeated query", scale["repeated_query_ms_median"], None, None],
                    ["after, the model unquantized (float32 MatMuls)", None, None, scale["unquantized_index_build_s"]],
                ],
            )
        )
    for name, ok in verdict.items():
        console.print(f"{name}: {'[green]PASS[/]' if ok else '[red]FAIL[/]'}")
    data = {
        "sets": results,
        "bfcl_overall": overall,
        "expansion_ablation_recall_at_5": ablation,
        "unavailable": missing,
        "scale": scale,
        "targets": TARGETS,
        "pass": verdict,
        "wall_s": round(time.perf_counter() - wall, 1),
        "machine": machine(),
        "numpy": np.__version__,
    }
    save(args, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
