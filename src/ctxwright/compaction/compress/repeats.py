"""Rule ``repeat``: a result identical or near-identical to an earlier result of the session
(the same command run again) becomes a reference to that call plus the lines that differ.

Why: an agent re-runs ``pytest``, ``git status`` or ``kubectl get pods`` after each edit, and
every run prints mostly what the last one did. Sent whole, each run costs its full size on
every later request; as a reference plus a unified-diff-like list of changed lines, the
model still sees every line that is new (the facts that changed) and knows where the rest is.

Bounded: only the newest few earlier texts are compared (``Earlier`` in ``__init__.py``),
only texts of at most ``MAX_LINES`` lines are diffed, and a candidate is diffed only when
most of its lines (as a set) are shared -- ``difflib``'s cost is then close to linear.
Deterministic: the candidate with the largest share of common lines wins, the newest on a tie.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass

#: texts with more lines than this are compared by hash only (exact repeats)
MAX_LINES = 5_000
#: the share of lines two texts must have in common to be diffed at all
MIN_SHARED = 0.6
#: the reference must save at least this share of the text to be used
MIN_SAVING = 0.15


@dataclass(frozen=True)
class Known:
    """An earlier result's text, split once into lines (``None`` when too long to diff)."""

    text: str
    lines: tuple[str, ...] | None
    line_set: frozenset[str]

    @classmethod
    def of(cls, text: str) -> Known:
        if text.count("\n") >= MAX_LINES:
            return cls(text, None, frozenset())
        lines = tuple(text.split("\n"))
        return cls(text, lines, frozenset(lines))


def identical(call_id: str) -> str:
    return f"[same as the result of call {call_id}]"


def near(text: str, candidates: Sequence[tuple[str, Known]]) -> str | None:
    """The reference-plus-diff form of ``text`` against the best candidate, or ``None``
    when none is close enough or the form would not save ``MIN_SAVING``."""
    if not candidates or text.count("\n") >= MAX_LINES:
        return None
    lines = text.split("\n")
    mine = frozenset(lines)
    best: tuple[float, str, Known] | None = None
    for call_id, known in candidates:  # newest first: a tie keeps the newest
        if known.lines is None or not known.line_set:
            continue
        shared = len(mine & known.line_set) / max(len(mine | known.line_set), 1)
        if shared >= MIN_SHARED and (best is None or shared > best[0]):
            best = (shared, call_id, known)
    if best is None:
        return None
    _, call_id, known = best
    assert known.lines is not None
    out = [
        f"[same as the result of call {call_id} except the lines below "
        f"(@@ line numbers there and here; - its line, + this one's)]"
    ]
    matcher = difflib.SequenceMatcher(None, known.lines, lines)  # autojunk: bounded on popular lines
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        out.append(f"@@ -{_span(i1, i2)} +{_span(j1, j2)} @@")
        out.extend("-" + line for line in known.lines[i1:i2])
        out.extend("+" + line for line in lines[j1:j2])
    if len(out) == 1:  # the same text as another earlier result (this call held the hash first)
        return identical(call_id)
    result = "\n".join(out)
    return result if len(result) <= len(text) * (1 - MIN_SAVING) else None


def _span(start: int, end: int) -> str:
    """Unified-diff line numbers: ``start+1,count`` (``start,0`` for none)."""
    count = end - start
    return f"{start + 1}" if count == 1 else f"{start + (1 if count else 0)},{count}"
