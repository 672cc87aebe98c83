"""What else was tried for the hybrid ranker on pooled catalogs, measured on one run.

``tool_catalogs.py`` measures the rankers the library ships. This script measures the knobs that
were tried to lift the hybrid's recall@5 on BFCL's six sets pooled into one catalog
(``bfcl/all``) and on LiveMCPBench, and kept only where they helped:

* **fusion**: BM25's weight 0.2-0.5, with the cosine as it is, min-max scaled per query, or as
  a z-score; reciprocal-rank fusion with k = 5, 20, 60;
* **BM25 field weights** (``search.FIELD_WEIGHTS``: name, description, parameter names,
  parameter descriptions), the hybrid at 0.3 over each;
* **parameter text in the embedded document** (names; names and descriptions), alone and
  averaged with the shipped text's cosine;
* **the query split into its sentences** ("... . Also ..."), each embedded: a tool's cosine the
  best of the whole query's and its parts' (``max``), or their mean (``mix``).

Each figure is recall@5 over every query, and over the even- and odd-numbered queries apart
(``dev``/``test``: a knob that helps only one half is noise). Vectors are cached in a temporary
file for the run.

    python benchmarks/tool_search_variants.py --json benchmarks/results/tool_search_variants.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import ctxwright.tools.search as search
from catalogs import SearchSet, bfcl_sets, livemcp_set
from common import console, machine, save, table
from ctxwright.core.request import ToolSpec
from ctxwright.tools.embeddings import VectorCache, embed_cached, load_embedder
from tool_catalogs import clip

Matrix = np.ndarray[Any, np.dtype[np.float32]]
#: where a query is split into parts: after a sentence's end, at a line break, and before
#: "and then", "also", "additionally" and the like
SPLIT = re.compile(
    r"(?<=[.?!;。？！])\s+|\n+|,?\s+(?:and then|and also|then|also|additionally|as well as)\s+", re.IGNORECASE
)
FIELD_VARIANTS: list[dict[str, int]] = [
    {"name": 3, "description": 2, "parameter_names": 1, "parameter_descriptions": 1},  # shipped
    {"name": 2, "description": 2, "parameter_names": 1, "parameter_descriptions": 1},
    {"name": 3, "description": 3, "parameter_names": 1, "parameter_descriptions": 1},
    {"name": 4, "description": 2, "parameter_names": 1, "parameter_descriptions": 1},
    {"name": 2, "description": 1, "parameter_names": 1, "parameter_descriptions": 1},
    {"name": 3, "description": 2, "parameter_names": 2, "parameter_descriptions": 1},
    {"name": 3, "description": 2, "parameter_names": 1, "parameter_descriptions": 0},
    {"name": 3, "description": 2, "parameter_names": 0, "parameter_descriptions": 0},
]


def recall(scores: Matrix, names: Sequence[str], queries: Sequence[tuple[str, frozenset[str]]]) -> dict[str, float]:
    """recall@5 of ranking every tool by ``scores`` (one row per query): all, even, odd."""
    found = []
    for row, (_, gold) in zip(scores, queries, strict=True):
        top = np.argsort(-row, kind="stable")[:5]
        found.append(len(gold & {names[p] for p in top}) / len(gold))
    r = np.array(found)
    return {
        "all": round(float(r.mean()), 4),
        "dev": round(float(r[0::2].mean()), 4),
        "test": round(float(r[1::2].mean()), 4),
    }


def bm25_rows(s: SearchSet, weights: dict[str, int] | None = None) -> Matrix:
    saved = dict(search.FIELD_WEIGHTS)
    if weights:
        search.FIELD_WEIGHTS.update(weights)
    try:
        index = search.ToolIndex(s.tools)
        out = np.zeros((len(s.queries), len(s.tools)), np.float32)
        for i, (q, _) in enumerate(s.queries):
            words = index.scores(clip(q))[1]
            if words is not None:
                out[i] = words
        return out
    finally:
        search.FIELD_WEIGHTS.clear()
        search.FIELD_WEIGHTS.update(saved)


def by_max(rows: Matrix) -> Matrix:
    top = rows.max(axis=-1, keepdims=True)
    return rows / np.where(top > 0, top, 1.0)


def fuse(bm25: Matrix, cosine: Matrix, w: float, scale: str = "raw") -> Matrix:
    if scale == "minmax":
        lo, hi = cosine.min(axis=1, keepdims=True), cosine.max(axis=1, keepdims=True)
        cosine = (cosine - lo) / np.maximum(hi - lo, 1e-6)
    elif scale == "z":
        cosine = (
            (cosine - cosine.mean(axis=1, keepdims=True)) / np.maximum(cosine.std(axis=1, keepdims=True), 1e-6) / 10
        )
    return w * by_max(bm25) + (1 - w) * cosine


def rrf(bm25: Matrix, cosine: Matrix, k: int, depth: int = 10) -> Matrix:
    out = np.zeros_like(bm25)
    for rows, need_match in ((bm25, True), (cosine, False)):
        order = np.argsort(-rows, axis=1, kind="stable")[:, :depth]
        for i in range(rows.shape[0]):
            for rank, p in enumerate(order[i], start=1):
                if not need_match or rows[i, p] > 0:
                    out[i, p] += 1.0 / (k + rank)
    return out


def with_parameters(spec: ToolSpec, descriptions: bool) -> str:
    names: list[str] = []
    texts: list[str] = []
    search._walk_schema(json.loads(spec.parameters_json), names, texts)
    extra = " ".join(names) + (". " + " ".join(texts) if descriptions else "")
    return f"{search.tool_text(spec)} ({extra})"[:1500]


def parts(query: str) -> list[str]:
    found = [p.strip() for p in SPLIT.split(query) if p and len(p.strip()) > 15]
    return found if len(found) > 1 else []


def measure(s: SearchSet, embed: Callable[[list[str]], Matrix]) -> dict[str, Any]:
    names = [t.name for t in s.tools]
    queries = s.queries
    bm25 = bm25_rows(s)
    tools = embed([search.tool_text(t) for t in s.tools])
    asked = embed([clip(q) for q, _ in queries])
    cosine = asked @ tools.T
    out: dict[str, Any] = {"bm25": recall(bm25, names, queries), "embed": recall(cosine, names, queries)}
    for w in (0.2, 0.3, 0.4, 0.5):
        for scale in ("raw", "minmax", "z"):
            out[f"hybrid w={w} cosine {scale}"] = recall(fuse(bm25, cosine, w, scale), names, queries)
    for k in (5, 20, 60):
        out[f"rrf k={k}"] = recall(rrf(bm25, cosine, k), names, queries)
    for weights in FIELD_VARIANTS:
        label = "fields " + "/".join(str(weights[f]) for f in search.FIELD_WEIGHTS)
        rows = bm25_rows(s, weights)
        out[f"{label}: bm25"] = recall(rows, names, queries)
        out[f"{label}: hybrid 0.3"] = recall(fuse(rows, cosine, 0.3), names, queries)
    for label, descriptions in (("parameter names", False), ("parameter names and descriptions", True)):
        other = asked @ embed([with_parameters(t, descriptions) for t in s.tools]).T
        out[f"embedded text + {label}: hybrid 0.3"] = recall(fuse(bm25, other, 0.3), names, queries)
        out[f"embedded text + {label}, cosines averaged: hybrid 0.3"] = recall(
            fuse(bm25, (cosine + other) / 2, 0.3), names, queries
        )
    best, mixed = cosine.copy(), cosine.copy()
    split = 0
    for i, (q, _) in enumerate(queries):
        pieces = parts(clip(q))
        if pieces:
            split += 1
            each = (embed(pieces) @ tools.T).max(axis=0)
            best[i] = np.maximum(cosine[i], each)
            mixed[i] = (cosine[i] + each) / 2
    out["query split, max: hybrid 0.3"] = recall(fuse(bm25, best, 0.3), names, queries)
    out["query split, mix: hybrid 0.3"] = recall(fuse(bm25, mixed, 0.3), names, queries)
    return {"set": s.name, "tools": len(s.tools), "queries": len(queries), "queries_split": split, "recall_at_5": out}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    wall = time.perf_counter()
    sets = [s for s in bfcl_sets() if s.name == "bfcl/all"] + [livemcp_set()]
    model = load_embedder()
    with tempfile.TemporaryDirectory() as tmp:
        cache = VectorCache(Path(tmp) / "v.sqlite")
        results = [measure(s, lambda texts: embed_cached(model, texts, cache)) for s in sets]
    for r in results:
        console.print(
            table(
                f"{r['set']}: {r['tools']} tools, {r['queries']} queries ({r['queries_split']} split): recall@5",
                ["variant", "all", "even (dev)", "odd (test)"],
                [[k, *(f"{v[h]:.4f}" for h in ("all", "dev", "test"))] for k, v in r["recall_at_5"].items()],
            )
        )
    save(args, {"sets": results, "wall_s": round(time.perf_counter() - wall, 1), "machine": machine()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
