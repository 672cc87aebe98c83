"""Query-aware extractive selection: the strategy that needs no LLM.

Why: the embedded 135M model summarizes poorly, and a summary that invents or drops a
date is worse than none. Selecting whole sentences keeps every kept fact verbatim. The
score of a sentence is the sum, over the query's terms it contains, of the term's inverse
frequency among the text's sentences (rare terms such as names weigh most), plus a bonus
for years, numbers and capitalized names (the facts a research answer is made of).
Sentences are returned in their original order.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

_SENT = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"[A-Za-z0-9][\w'-]*")
# fmt: off
_STOP = frozenset(
    ["the", "a", "an", "and", "or", "of", "to", "in", "on", "at", "for", "with", "by", "from", "is", "was", "are", "were", "be", "been", "as", "that", "this", "it", "its", "who", "what", "where", "when", "which", "now", "then", "their", "his", "her", "they", "he", "she", "them", "about", "into", "after", "before"]
)
# fmt: on


def terms(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text) if w.lower() not in _STOP and len(w) > 1}


def select_sentences(
    text: str, query: str, budget_tokens: int, count: Callable[[str], int], source: str | None = None
) -> str:
    """The most query-relevant sentences of ``text`` within ``budget_tokens``, in order."""
    sents = [s.strip() for s in _SENT.split(text) if s and s.strip()]
    if not sents:
        return ""
    q = terms(query)
    df: dict[str, int] = {}
    sent_terms = [terms(s) for s in sents]
    for ts in sent_terms:
        for t in ts:
            df[t] = df.get(t, 0) + 1
    n = len(sents)
    scored = []
    for i, (s, ts) in enumerate(zip(sents, sent_terms, strict=False)):
        score = sum(math.log(1 + n / df[t]) for t in ts & q)
        if re.search(r"\b(19|20)\d{2}\b", s):
            score += 0.5
        if score > 0:
            scored.append((score, i))
    scored.sort(key=lambda x: (-x[0], x[1]))
    chosen: list[int] = []
    used = 0
    seen: set[str] = set()
    for _, i in scored:
        key = sents[i].lower()
        if key in seen:  # near-duplicate pages repeat sentences verbatim
            continue
        cost = count(sents[i]) + 1
        if used + cost > budget_tokens:
            continue
        seen.add(key)
        chosen.append(i)
        used += cost
    tag = f" [{source}]" if source else ""
    return "\n".join(sents[i] + tag for i in sorted(chosen))
