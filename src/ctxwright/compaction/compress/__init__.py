"""Content-aware compressors: a tool result rewritten shorter *without dropping a fact*,
before the result budget cuts anything (``compaction/budget.py``).

Why: a head-and-tail preview hides whatever sits in the middle of a result, and a model
cannot ask for what it does not know is there. Most large tool output is redundant in a
way that can be removed losslessly -- a JSON listing repeats its keys in every item, a
second run of the same command prints what the first did, a build log prints the same
line hundreds of times with a different counter. Each rule is one small module:

* ``json_table``  -- a JSON array of objects becomes a table (keys once, a row per item);
* ``repeats``     -- a result (near-)identical to an earlier one becomes a reference to that
  call plus the lines that differ;
* ``logs``        -- runs of lines that differ only in numbers fold into one line and a
  count; error, warning and identifier lines always stay;
* ``code``        -- source stays exact; an outline only when the budget forces a cut.

Provider rule protected: a request's prefix is cached by its exact bytes. So every rule is
deterministic -- the same text and the same :class:`Earlier` state give the same bytes --
and a result is rewritten once, when it is recorded, never again.

Bounded on hostile input: each rule caps the characters it looks at, JSON nested past the
parser's depth is left alone (``RecursionError`` caught), no regular expression can
backtrack, and :class:`Earlier` keeps hashes plus a capped number of recent texts.

Usage: ``c = compress_result(text, call_id=cid, earlier=e)``, then ``e.add(cid, text)``
with the *original* text (the caller decides which results a later one may refer to).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from ctxwright.compaction.compress import code, json_table, logs, repeats
from ctxwright.compaction.compress.code import names_in
from ctxwright.compaction.offload import text_sha256

__all__ = ["RULES", "Compressed", "Earlier", "compress_result", "names_in", "outline"]

#: every value :attr:`Compressed.rule` takes
RULES = ("json_table", "repeat", "log_fold", "code_outline", "none")


@dataclass(frozen=True)
class Compressed:
    """A result as the model sees it (``text`` is the input itself when no rule applied)."""

    text: str
    rule: str  # one of RULES
    original_chars: int
    saved_chars: int


class Earlier:
    """A session's earlier results, for the repeat rule: the hash of every one (the newest
    ``max_hashes``) and the full text of the newest ``max_texts`` of at most
    ``max_text_chars`` characters each. Memory stays bounded however long the session."""

    def __init__(self, *, max_texts: int = 16, max_text_chars: int = 1 << 20, max_hashes: int = 20_000) -> None:
        self.max_texts = max_texts
        self.max_text_chars = max_text_chars
        self.max_hashes = max_hashes
        self._by_hash: OrderedDict[str, str] = OrderedDict()  # sha256 -> first call id with it
        self._texts: OrderedDict[str, repeats.Known] = OrderedDict()  # call id -> text, newest last

    def add(self, call_id: str, original: str, *, sha256: str | None = None) -> None:
        """Note a result (its original text; ``sha256``: its :func:`text_sha256`, when the
        caller has it already). Adding a call id again replaces nothing."""
        if call_id in self._texts:
            return
        self.add_digest(call_id, sha256 or text_sha256(original))
        if len(original) <= self.max_text_chars:
            self._texts[call_id] = repeats.Known.of(original)
            while len(self._texts) > self.max_texts:
                self._texts.popitem(last=False)

    def add_digest(self, call_id: str, sha256: str) -> None:
        """Note a result known only by its hash (too large to keep, or not decoded whole)."""
        if sha256 not in self._by_hash:
            self._by_hash[sha256] = call_id
            while len(self._by_hash) > self.max_hashes:
                self._by_hash.popitem(last=False)

    def same_as(self, sha256: str) -> str | None:
        """The first call whose result had this hash."""
        return self._by_hash.get(sha256)

    def recent(self) -> Iterable[tuple[str, repeats.Known]]:
        """The kept texts, newest first."""
        return reversed(self._texts.items())


def compress_result(
    text: str, *, call_id: str, earlier: Earlier | None = None, sha256: str | None = None
) -> Compressed:
    """The lossless form of one result under the first rule that saves enough: a repeat of
    an earlier result, a JSON table, a folded log (never over source code, which is kept
    exact); else the text itself. ``call_id`` is this result's own id (never referred to as
    "earlier"); ``sha256``: the text's :func:`text_sha256`, when the caller has it already."""
    n = len(text)
    if earlier is not None:
        same = earlier.same_as(sha256 or text_sha256(text))
        if same is not None and same != call_id:
            out: str | None = repeats.identical(same)
        else:
            out = repeats.near(text, [(cid, k) for cid, k in earlier.recent() if cid != call_id])
        if out is not None and len(out) < n:
            return Compressed(out, "repeat", n, n - len(out))
    out = json_table.compress(text)
    if out is not None:
        return Compressed(out, "json_table", n, n - len(out))
    out = logs.compress(text)
    if out is not None and not code.looks_like_code(text.split("\n")):
        return Compressed(out, "log_fold", n, n - len(out))
    return Compressed(text, "none", n, 0)


def outline(text: str, names: Iterable[str] = ()) -> Compressed | None:
    """Source code's outline (``code.py``), for when the budget forces a cut; ``None`` when
    the text is not source code or the outline would not be much shorter."""
    out = code.outline(text, names)
    if out is None:
        return None
    return Compressed(out, "code_outline", len(text), len(text) - len(out))
