"""Fusing two rankings of the same tools: BM25's and the embedding model's.

The hybrid ranker (``tools/search.py``) scores each tool as

    w·BM25/max(BM25) + (1−w)·cosine,  w = :data:`HYBRID_WEIGHT` = 0.3

over the tools either ranker matches (a BM25 score above 0, or a cosine of at least
``MIN_COSINE``). BM25 is divided by the query's best score because its scores are unbounded
and depend on the query's length and the catalog's words, while a cosine sits in [−1, 1]:
after the division both are on one scale and the weight means the same for every query.

Why a weighted sum and not reciprocal-rank fusion (RRF, Cormack, Clarke and Büttcher, SIGIR
2009, which needs no scale at all): both were measured side by side on nine public and
generated tool sets (``benchmarks/tool_catalogs.py``; docs/tools.md has the table). The
weighted sum had the higher recall@5 on five of the nine (by up to 3.8 points, on
LiveMCPBench), RRF on three (by at most 2.2 points, on a 24-query set), and the weighted sum's
MRR@10 was as high or higher on all nine. Using the scores keeps how far apart two tools are;
RRF turns a clear winner and a near tie into the same step of one rank. Weights 0.2 and 0.4
were measured beside 0.3. :func:`reciprocal_rank` stays here as the alternative the benchmark
measures.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, get_args

if TYPE_CHECKING:  # numpy is loaded by a ranking, not by the options that name the rankers
    import numpy as np

#: how a tool index ranks: words (BM25), meaning (a sentence-embedding model), or both fused.
#: Declared beside the fusion that defines ``hybrid``; the index, the options and the command
#: line all take the names from here.
Ranker = Literal["bm25", "embed", "hybrid"]
RANKERS: tuple[str, ...] = get_args(Ranker)

#: BM25's share of the hybrid score (the rest is the cosine), measured as above
HYBRID_WEIGHT = 0.3
#: RRF's constant (Cormack et al. 2009), for the measured alternative
RRF_K = 60


def finite(scores: np.ndarray[Any, np.dtype[np.float32]]) -> np.ndarray[Any, np.dtype[np.float32]]:
    """``scores`` with every NaN or infinity as 0 (no evidence either way). Why: a NaN
    compares false with everything and poisons every sum it enters, so one damaged vector
    (``tools/embeddings.py`` refuses those it can see) would sink its tool in both rankers,
    and an all-NaN side would blank the fused ranking -- BM25's exact word matches included."""
    import numpy as np

    scores = np.asarray(scores, dtype=np.float32)
    if bool(np.isfinite(scores).all()):
        return scores
    return np.where(np.isfinite(scores), scores, np.float32(0.0)).astype(np.float32)


def weighted_sum(
    bm25: np.ndarray[Any, np.dtype[np.float32]] | None,
    cosine: np.ndarray[Any, np.dtype[np.float32]],
    weight: float = HYBRID_WEIGHT,
) -> np.ndarray[Any, np.dtype[np.float32]]:
    """``weight``·BM25/max(BM25) + (1−``weight``)·cosine, per tool; BM25 ``None`` (no query
    word in the index) or all zero counts as zero, and a score that is not finite on either
    side counts as zero on that side (:func:`finite`): one bad side never blanks the other."""
    import numpy as np

    out = (1.0 - weight) * finite(cosine)
    if bm25 is not None:
        bm25 = finite(bm25)
        top = float(bm25.max()) if bm25.size else 0.0
        if top > 0:
            out = out + weight * (bm25 / top)
    return np.asarray(out, dtype=np.float32)


def reciprocal_rank(rankings: Sequence[Sequence[int]], k: int = RRF_K) -> list[tuple[int, float]]:
    """Positions ranked by Σ 1/(k + rank) over ``rankings`` (each best first, rank from 1);
    ties keep the order of first appearance (the first ranking's order first)."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, position in enumerate(ranking, start=1):
            scores[position] = scores.get(position, 0.0) + 1.0 / (k + rank)
    order = {p: i for i, p in enumerate(scores)}
    return sorted(scores.items(), key=lambda item: (-item[1], order[item[0]]))
