"""Fusing two rankings of the same tools: BM25's and the embedding model's.

Why reciprocal-rank fusion (RRF): BM25 scores are unbounded and depend on the query's length
and the catalog's word statistics, cosine similarities sit in a narrow band that depends on
the model; adding them needs a per-catalog scale that a user cannot tune. RRF uses ranks
only: a tool's fused score is Σ 1/(k + rank) over the lists it appears in, so a tool both
rankers place high wins, and a tool only one ranker finds still gets in. ``k`` = 60 is the
constant of Cormack, Clarke and Büttcher (SIGIR 2009), where RRF was introduced; it flattens
the difference between ranks 1 and 3 (both rankers' top few are all plausible) while keeping
rank 50 well below. ``benchmarks/tool_catalogs.py`` measures RRF against a weighted sum of
max-normalised scores (w·BM25/max + (1−w)·cosine) on the real catalogs, side by side;
docs/tools.md has the figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, get_args

#: how a tool index ranks: words (BM25), meaning (a sentence-embedding model), or both fused.
#: Here, not in ``search.py``, so the command line lists them without importing the index.
Ranker = Literal["bm25", "embed", "hybrid"]
RANKERS: tuple[str, ...] = get_args(Ranker)
#: RRF's constant (Cormack et al. 2009)
RRF_K = 60
#: how many of each ranker's best go into the fusion. Measured at 10, 30 and 100 on the public
#: sets (``benchmarks/tool_catalogs.py``): 10 was best or tied on 7 of 8 -- past each ranker's
#: first ten, a tool is more often noise (every tool has some cosine with every query) than a
#: miss the other ranker would rescue
DEPTH = 10


def reciprocal_rank(rankings: Sequence[Sequence[int]], k: int = RRF_K) -> list[tuple[int, float]]:
    """Positions ranked by Σ 1/(k + rank) over ``rankings`` (each best first, rank from 1);
    ties keep the order of first appearance (the first ranking's order first)."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, position in enumerate(ranking, start=1):
            scores[position] = scores.get(position, 0.0) + 1.0 / (k + rank)
    order = {p: i for i, p in enumerate(scores)}
    return sorted(scores.items(), key=lambda item: (-item[1], order[item[0]]))
