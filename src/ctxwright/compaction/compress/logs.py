"""Rule ``log_fold``: in logs and shell output, a run of consecutive lines that are the same
once digits, hex ids and times are masked folds into its first line, ``[… N more like this]``
and its last line (the final count, the last file). A line that names an error, warning,
failure, exception or traceback, and a line holding an identifier not already shown, is
always kept verbatim. Rows of numbers (CSV, TSV, a Markdown table: two or more numeric
fields between delimiters) are data, not progress, and are never folded.

Why: build and test logs print progress counters, download percentages and per-file lines
by the hundred; the model needs that it happened and how often, not every copy. What it
needs verbatim -- the failing test, the error text, the commit, path, URL or port a later
call must repeat exactly -- is what the keep-rules keep (identifiers come from the loss
ledger's extractor, ``compaction/identifiers.py``, so a fact the ledger tracks is never
folded; a time of day is blanked first, its ``:MM`` is not a port).

Bounded: texts over ``MAX_CHARS`` or with fewer than ``MIN_LINES`` lines are not touched (a
100 MB single-line output costs one ``count``); a line over ``MAX_LINE`` characters is never
folded nor scanned; identifiers are looked for a block at a time (a run whole, then line by
line only when the run holds a new one), at most ``MAX_SCANS`` passes; the masks are single
character classes and the alert words plain substring searches (no backtracking).
"""

from __future__ import annotations

import re

from ctxwright.compaction.identifiers import _PATTERNS, extract

MAX_CHARS = 4_000_000
MIN_LINES = 8
MAX_LINE = 2_000
#: a run must hold at least this many lines to be folded
MIN_RUN = 3
MIN_SAVING = 0.15
#: extractor passes at most (a log whose every line holds a new id folds nothing anyway)
MAX_SCANS = 3_000

_HEX = re.compile(r"\b[0-9A-Fa-f]{6,}\b")  # hash-like words (before digits are masked)
_DIGITS = re.compile(r"\d+")
#: a time of day, blanked before looking for identifiers: its ``:MM`` is not a port
_CLOCK = re.compile(r"(?<!\d)\d{1,2}:\d{2}(?::\d{2})?(?:[.,]\d{1,9})?(?!\d)")
#: whether a line may hold an identifier at all: the extractor's patterns in one search, so
#: the common progress line costs one pass, not one per kind
_MAY_HOLD = re.compile("|".join(f"(?:{pattern.pattern})" for _kind, pattern in _PATTERNS))
#: a line naming one of these (in any case) is always kept; found by ``str`` search on the
#: lower-cased text, which is C-speed where a case-blind regular expression is not
ALERTS = ("error", "warn", "fail", "exception", "traceback", "fatal", "panic", "critical", "denied", "refused")


def mask(line: str) -> str:
    """The line with what varies between near-identical lines made equal."""
    return _DIGITS.sub("0", _HEX.sub("#", line))


def compress(text: str) -> str | None:
    """The folded text, or ``None`` (not a log, folding would not save enough, or telling
    which lines hold a new identifier would take more than ``MAX_SCANS`` scans)."""
    if len(text) > MAX_CHARS or text.count("\n", 0, MAX_CHARS) + 1 < MIN_LINES:
        return None
    lines = text.split("\n")
    keys = [mask(line) if len(line) <= MAX_LINE else None for line in lines]
    out: list[str] = []
    ids = _Shown()
    folded_any = False
    i = 0
    while i < len(lines):
        j = i + 1
        while j < len(lines) and keys[j] is not None and keys[j] == keys[i]:
            j += 1
        if j - i < MIN_RUN or _tabular(keys[i]):
            out.extend(lines[i:j])
            ids.pending.extend(lines[i:j])
            i = j
            continue
        out.append(lines[i])
        ids.pending.append(lines[i])
        inner = lines[i + 1 : j - 1]
        keep = _alerts(inner)
        if ids.any_new(inner):  # else (the common case) one scan of the run found nothing new
            keep = [kept or ids.new_in_line(line) for line, kept in zip(inner, keep, strict=True)]
        if ids.scans > MAX_SCANS:
            return None
        hidden = 0
        for line, kept in zip(inner, keep, strict=True):
            if kept:
                if hidden:
                    out.append(_more(hidden))
                    hidden = 0
                out.append(line)
            else:
                hidden += 1
        if hidden:
            out.append(_more(hidden))
            folded_any = True
        out.append(lines[j - 1])
        ids.pending.append(lines[j - 1])
        i = j
    if not folded_any:
        return None
    result = "\n".join(out)
    return result if len(result) <= len(text) * (1 - MIN_SAVING) else None


def _tabular(key: str | None) -> bool:
    """Whether a masked line is a row of numbers: two or more fields that were numbers."""
    for delimiter in (",", "\t", "|", ";"):
        fields = key.split(delimiter) if key is not None and delimiter in key else []
        if len(fields) >= 3 and sum(f.strip().lstrip("-") in ("0", "0.0", "#", "0%", "0.0%") for f in fields) >= 2:
            return True
    return False


def _alerts(lines: list[str]) -> list[bool]:
    """Which lines name an error, warning, failure ...: one search of the block first."""
    block = "\n".join(lines).lower()
    if not any(word in block for word in ALERTS):
        return [False] * len(lines)
    return [any(word in low for word in ALERTS) for low in (line.lower() for line in lines)]


def _more(n: int) -> str:
    return f"[… {n} more like this]"


class _Shown:
    """The identifiers already shown. Lines shown are scanned in blocks, when a run needs
    to know (``pending``), and a run is first scanned whole: one extractor pass per block,
    not one per line. ``scans`` counts the passes (the work cap)."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.pending: list[str] = []
        self.scans = 0

    def _ids(self, lines: list[str]) -> list[str]:
        self.scans += 1
        if self.scans > MAX_SCANS:  # over the cap: the caller gives up, nothing more is scanned
            return []
        block = _CLOCK.sub(" ", "\n".join(line for line in lines if len(line) <= MAX_LINE))
        return extract(block, limit=len(block) + 1) if _MAY_HOLD.search(block) else []

    def _flush(self) -> None:
        if self.pending:
            self.seen.update(self._ids(self.pending))
            self.pending.clear()

    def any_new(self, lines: list[str]) -> bool:
        self._flush()
        return any(i not in self.seen for i in self._ids(lines))

    def new_in_line(self, line: str) -> bool:
        """Whether the line holds an identifier not shown yet (noted as shown if so)."""
        found = [i for i in self._ids([line]) if i not in self.seen]
        self.seen.update(found)
        return bool(found)
