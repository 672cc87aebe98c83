"""Rule ``log_fold``: in logs and shell output, a run of consecutive lines that are the same
once digits, hex ids and timestamps are masked folds into its first line and
``[… N more like this]`` and its last line (the final count, the last file). A line that names an error, warning, failure, exception or
traceback, and a line holding an identifier not already shown, is always kept verbatim.

Why: build and test logs print progress counters, download percentages and per-file lines
by the hundred; the model needs that it happened and how often, not every copy. What it
needs verbatim -- the failing test, the error text, the commit, path, URL or port a later
call must repeat exactly -- is what the keep-rules keep (identifiers come from the loss
ledger's extractor, ``compaction/identifiers.py``, so a fact the ledger tracks is never folded).

Bounded: texts over ``MAX_CHARS`` or with fewer than ``MIN_LINES`` lines are not touched (a
100 MB single-line output costs one ``count``); a line over ``MAX_LINE`` characters is never
folded nor scanned; the masks are single character classes (no backtracking).
"""

from __future__ import annotations

import re

from ctxwright.compaction.identifiers import extract

MAX_CHARS = 8_000_000
MIN_LINES = 8
MAX_LINE = 2_000
#: a run must hold at least this many lines to be folded
MIN_RUN = 3
MIN_SAVING = 0.15

_HEX = re.compile(r"\b[0-9A-Fa-f]{6,}\b")  # hash-like words (before digits are masked)
_DIGITS = re.compile(r"\d+")
#: a time of day, blanked before looking for identifiers: its ``:MM`` is not a port
_CLOCK = re.compile(r"\b\d{1,2}:\d{2}(?::\d{2})?(?:[.,]\d{1,9})?\b")
_ALERT = re.compile(r"error|warn|fail|exception|traceback|fatal|panic|critical|denied|refused", re.IGNORECASE)


def mask(line: str) -> str:
    """The line with what varies between near-identical lines made equal."""
    return _DIGITS.sub("0", _HEX.sub("#", line))


def compress(text: str) -> str | None:
    """The folded text, or ``None`` (not a log, or folding would not save enough)."""
    if len(text) > MAX_CHARS or text.count("\n", 0, MAX_CHARS) + 1 < MIN_LINES:
        return None
    lines = text.split("\n")
    keys = [mask(line) if len(line) <= MAX_LINE else None for line in lines]
    out: list[str] = []
    shown: set[str] = set()
    folded_any = False
    i = 0
    while i < len(lines):
        j = i + 1
        while j < len(lines) and keys[j] is not None and keys[j] == keys[i]:
            j += 1
        if j - i < MIN_RUN:
            for line in lines[i:j]:
                out.append(line)
                _note(line, shown)
            i = j
            continue
        out.append(lines[i])
        _note(lines[i], shown)
        hidden = 0
        for line in lines[i + 1 : j - 1]:
            if _ALERT.search(line) or _new_identifier(line, shown):
                if hidden:
                    out.append(_more(hidden))
                    hidden = 0
                out.append(line)
                _note(line, shown)
            else:
                hidden += 1
        if hidden:
            out.append(_more(hidden))
            folded_any = True
        out.append(lines[j - 1])
        _note(lines[j - 1], shown)
        i = j
    if not folded_any:
        return None
    result = "\n".join(out)
    return result if len(result) <= len(text) * (1 - MIN_SAVING) else None


def _more(n: int) -> str:
    return f"[… {n} more like this]"


def _note(line: str, shown: set[str]) -> None:
    if len(line) <= MAX_LINE:
        shown.update(_identifiers(line))


def _new_identifier(line: str, shown: set[str]) -> bool:
    return any(i not in shown for i in _identifiers(line))


def _identifiers(line: str) -> list[str]:
    return extract(_CLOCK.sub(" ", line)) if len(line) <= MAX_LINE else []
