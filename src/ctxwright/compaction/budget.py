"""Layer 1, the tool-result budget: a result over its cap goes to disk and the context gets
a preview.

Provider rule protected: a request larger than the window is rejected outright, and one
huge result can overflow the window before any other layer runs (a common failure in peer frameworks).
So the cap is applied *when the result is recorded*, and the preview string is decided
then, once, and stored as the tool message's content: a resumed session renders the same
bytes, and the provider's cache of that message stays valid forever.

Also here: text that is not valid UTF-8 (bytes decoded with ``surrogateescape``, or lone
surrogates from a tool) is replaced by U+FFFD and the model is told so -- such text cannot
be JSON-encoded for any provider and would break every later request.

And a large bytes result (over ``INLINE_BYTES`` of ``tools/registry.py``) arrives as bytes
and is decoded one slice at a time (:func:`decode_pieces`, :class:`ByteScan`): straight
into its offload file here, or into the head and tail that are kept when compaction is
off (``agent/loop.py``). Decoded whole, 50 MB of binary output would be a 100 MB string
next to the 50 MB of bytes: one character outside Latin-1 (each invalid byte becomes one)
makes Python store every character of a string in two bytes.
"""

from __future__ import annotations

import codecs
import hashlib
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from ctxwright.compaction.compress import Compressed, Earlier, compress_result, outline
from ctxwright.compaction.identifiers import FACT
from ctxwright.compaction.offload import SLICE, Offloaded, ResultFiles, text_sha256
from ctxwright.core.events import BudgetRecord, Offload

#: A BPE token covers at least about a third of a character (a rare CJK character can be
#: three byte-level tokens) and rarely more than eight characters on real tool output.
#: Texts shorter than cap/3 characters are under the cap without counting; texts longer
#: than cap*8 are over it without counting (offloading is lossless, so erring there is safe).
MIN_CHARS_PER_TOKEN = 1 / 3
MAX_CHARS_PER_TOKEN = 8


_SURROGATES = re.compile("[\ud800-\udfff]")


def sanitize(text: str) -> tuple[str, int]:
    """Replace lone surrogates by U+FFFD; returns the text and how many were replaced.

    Checked slice by slice so a valid 50 MB text is never encoded whole (no second copy);
    fixed in one regular-expression pass, not character by character in Python (bytes
    decoded with ``surrogateescape`` come back as U+DC80..U+DCFF, one per invalid byte)."""
    for start in range(0, len(text), SLICE):
        try:
            text[start : start + SLICE].encode("utf-8")
        except UnicodeEncodeError:
            break
    else:
        return text, 0
    return _SURROGATES.subn("\ufffd", text)


def decode_pieces(data: bytes) -> Iterator[str]:
    """``data`` decoded as UTF-8 a slice at a time (pieces of at most ``SLICE`` characters),
    invalid bytes shown as U+FFFD; a sequence cut at a slice edge is decoded whole. The
    ``replace`` handler runs in C: replacing ``surrogateescape`` output in Python took 50 s
    for 50 MB of random bytes."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    view = memoryview(data)
    for start in range(0, len(data), SLICE):
        yield decoder.decode(view[start : start + SLICE], start + SLICE >= len(data))


@dataclass
class ByteScan:
    """What :meth:`watch` decoded: the first ``head_chars`` and last ``tail_chars``
    characters, the length, how many bytes were not valid UTF-8, and the SHA-256 of the
    text (as :func:`text_sha256` hashes it)."""

    head_chars: int
    tail_chars: int
    head: str = ""
    tail: str = ""
    chars: int = 0
    replaced: int = 0
    _digest: Any = field(default_factory=hashlib.sha256)

    def watch(self, data: bytes) -> Iterator[str]:
        """The pieces of :func:`decode_pieces`, noted on the way through."""
        encoded = marks = 0
        for piece in decode_pieces(data):
            raw = piece.encode("utf-8")
            encoded += len(raw)
            self._digest.update(raw)
            marks += piece.count("\ufffd")
            self.chars += len(piece)
            if len(self.head) < self.head_chars:
                self.head += piece[: self.head_chars - len(self.head)]
            if self.tail_chars:
                self.tail = (self.tail + piece)[-self.tail_chars :]
            yield piece
        # the valid bytes are the text's UTF-8 less the 3 bytes of each inserted U+FFFD
        inserted = marks - data.count("\ufffd".encode())
        self.replaced = len(data) - (encoded - 3 * inserted)

    @property
    def sha256(self) -> str:
        return str(self._digest.hexdigest())


def measure(text: str, cap_tokens: int, count: Callable[[str], int]) -> int | None:
    """Tokens of ``text`` when it is near the cap; ``None`` when the length alone decides."""
    if len(text) <= cap_tokens * MIN_CHARS_PER_TOKEN:
        return None
    if len(text) > cap_tokens * MAX_CHARS_PER_TOKEN:
        return None
    return count(text)


def over_cap(text: str, cap_tokens: int, count: Callable[[str], int]) -> tuple[bool, int | None]:
    n = measure(text, cap_tokens, count)
    if n is None:
        return len(text) > cap_tokens * MIN_CHARS_PER_TOKEN, None
    return n > cap_tokens, n


#: characters of a preview given to the lines between head and tail that hold identifiers
#: or numbers (at most; never more than the cap in tokens)
FACT_CHARS = 6_000
#: characters of one such line shown (the rest of a longer line is elided)
FACT_LINE_CHARS = 240
#: lines and characters examined for facts, whatever the result's size: bounded time
FACT_SCAN_LINES = 10_000
FACT_SCAN_CHARS = 400_000


def preview(
    text: str,
    *,
    tool_name: str,
    result_id: str,
    cap_tokens: int,
    tokens: int | None,
    head_chars: int,
    tail_chars: int,
    note: str = "",
) -> str:
    """The frozen stand-in for an offloaded result: what it is, how big, how to read more,
    then its head, the lines between that hold identifiers and numbers, and its tail.

    Why the lines: a head and a tail alone hid every fact in the middle of a large result
    (the port in a config dump, the failing test in a long log, the id in a listing), and
    the model never saw them. The lines come from the loss ledger's extractor
    (``identifiers.FACT``), in their original order, each elided run of lines marked with
    its count, up to :data:`FACT_CHARS`. Deterministic -- the same text gives the same
    bytes -- so the prefix holds; bounded, whatever the text (:func:`fact_lines`)."""
    head_chars, tail_chars = preview_sizes(cap_tokens, head_chars, tail_chars)
    budget = min(FACT_CHARS, cap_tokens)  # about a quarter of the cap: the preview stays well inside it
    facts = None
    if len(text) > head_chars + tail_chars + budget // 4:
        # a smaller head and tail make room for the facts between them
        small_head, small_tail = head_chars // 2, tail_chars // 2
        facts = fact_lines(text, small_head, len(text) - small_tail, budget)
        if facts is not None:
            head_chars, tail_chars = small_head, small_tail
    tail = text[-tail_chars:] if tail_chars else ""
    return _preview(
        tool_name,
        result_id,
        cap_tokens,
        tokens,
        len(text),
        (text[:head_chars], head_chars),
        (tail, tail_chars),
        note,
        facts=facts,
    )


def preview_sizes(cap_tokens: int, head_chars: int, tail_chars: int) -> tuple[int, int]:
    """The characters of the head and of the tail a preview shows: fewer under a small cap."""
    return min(head_chars, cap_tokens * 2), min(tail_chars, cap_tokens // 2)


def _elided(lines: int) -> str:
    return f"[… {lines:,} line{'s' if lines != 1 else ''} …]"


def fact_lines(text: str, start: int, end: int, budget: int) -> str | None:
    """The lines of ``text[start:end]`` that hold an identifier or a number, in order, each
    run of other lines replaced by a marker with its count, in at most about ``budget``
    characters; ``None`` when there is none. The line cut by ``start`` is the head's.

    Bounded: at most :data:`FACT_SCAN_LINES` lines and :data:`FACT_SCAN_CHARS` characters
    are examined, and only the first :data:`FACT_LINE_CHARS` of each line (a 100 MB line
    costs what 240 characters do), so a hostile result costs a fixed amount on top of the
    C-speed line counts of the markers."""
    nl = text.find("\n", start, end)
    if nl < 0:
        return None
    pos = last = nl + 1  # ``last``: where the text not yet shown or counted begins
    out: list[str] = []
    used = lines = scanned = 0
    while pos < end and lines < FACT_SCAN_LINES and scanned < FACT_SCAN_CHARS:
        nl = text.find("\n", pos, end)
        stop = end if nl < 0 else nl
        window = min(stop, pos + FACT_LINE_CHARS)
        lines += 1
        scanned += window - pos
        if FACT.search(text, pos, window):
            shown = text[pos:window] + ("…" if window < stop else "")
            skipped = text.count("\n", last, pos)
            marker = _elided(skipped) if skipped else ""
            if used + len(marker) + len(shown) + 2 > budget:
                break
            if marker:
                out.append(marker)
            out.append(shown)
            used += len(marker) + len(shown) + 2
            last = stop + 1
        pos = stop + 1
    if not out:
        return None
    if last < end:
        out.append(_elided(text.count("\n", last, end) + 1))
    return "\n".join(out)


def _preview(
    tool_name: str,
    result_id: str,
    cap_tokens: int,
    tokens: int | None,
    chars: int,
    head: tuple[str, int],
    tail: tuple[str, int],
    note: str,
    facts: str | None = None,
) -> str:
    """The preview's text from its parts: each of ``head`` and ``tail`` is the text shown
    and the number of characters the header says it is; ``facts`` the lines between them
    that hold identifiers and numbers (:func:`fact_lines`), if any."""
    (head_text, head_chars), (tail_text, tail_chars) = head, tail
    size = f"{chars:,} characters" + (f" (~{tokens:,} tokens)" if tokens else "")
    between = ", the lines between them that hold identifiers or numbers," if facts else ""
    header = (
        f"[ctxwright: the {tool_name} result is {size}, over the {cap_tokens:,}-token budget for one "
        f'result, so it was saved in full as result_id "{result_id}". Shown: the first {head_chars:,}{between} '
        f'and the last {tail_chars:,} characters. Read the rest with read_result(result_id="{result_id}", '
        f"offset={head_chars}, limit=4000).{(' ' + note) if note else ''}]"
    )
    if facts:
        return f"{header}\n{head_text}\n{facts}\n{tail_text}"
    hidden = chars - head_chars - tail_chars
    return f"{header}\n{head_text}\n[... {hidden:,} characters not shown ...]\n{tail_text}"


def _invalid_note(replaced: int) -> str:
    return (
        f"{replaced:,} bytes of the output were not valid UTF-8 and are shown as U+FFFD; "
        "treat the output as binary or ask for an encoded form."
    )


#: results shorter than this are recorded as they are: a compressor's header would eat the saving
COMPRESS_MIN_CHARS = 1_000

#: what the header of a compressed result says each rule did
_RULE_SAYS = {
    "json_table": "a JSON array of objects shown as a table, every value kept",
    "repeat": "a repeat of an earlier result, shown as a reference to it and the lines that differ",
    "log_fold": "runs of lines that differ only in numbers folded, every error, warning and identifier line kept",
    "code_outline": "source code over the budget, shown as an outline",
}


def _compress(
    text: str,
    record: BudgetRecord,
    *,
    over: bool,
    cap_tokens: int,
    count: Callable[[str], int],
    files: ResultFiles,
    earlier: Earlier,
    digest: str,
    names: Iterable[str],
    note: str,
) -> tuple[str, BudgetRecord] | None:
    """A result rewritten by a lossless compressor (``compress/``) when that fits the cap,
    with the original offloaded so ``read_result`` returns it exactly; ``None``: record it
    as usual. Source code is outlined only when it is over the cap (a model editing code
    needs the bytes). When the compressed form is still over the cap, the preview is cut
    from the *original*: its offsets are those ``read_result`` pages by."""
    if len(text) < COMPRESS_MIN_CHARS:
        return None
    c: Compressed | None = compress_result(text, call_id=record.result_id, earlier=earlier, sha256=digest)
    if c is not None and c.rule == "none":
        c = outline(text, names) if over else None
    if c is None:
        return None
    header = (
        f"[ctxwright: {_RULE_SAYS[c.rule]}; the exact original: "
        f'read_result(result_id="{record.result_id}").{(" " + note) if note else ""}]'
    )
    content = f"{header}\n{c.text}"
    if len(content) >= len(text) or over_cap(content, cap_tokens, count)[0]:
        return None
    saved = files.save(record.result_id, text)
    return content, replace(
        record,
        sha256=digest,
        offload=offload_of(saved),
        compress_rule=c.rule,
        compress_saved=len(text) - len(content),
    )


def offload_of(saved: Offloaded) -> Offload:
    """The event's record of an offload file."""
    return Offload(saved.path, saved.chars, saved.bytes)


def apply_budget(
    text: str | bytes,
    *,
    tool_name: str,
    result_id: str,
    cap_tokens: int,
    count: Callable[[str], int],
    files: ResultFiles,
    head_chars: int,
    tail_chars: int,
    earlier: Earlier | None = None,
    names: Iterable[str] = (),
) -> tuple[str, BudgetRecord]:
    """The content to record for one tool result, and what to store about it. A bytes result
    longer than the cap could be in characters is decoded slice by slice into its offload
    file (the module docstring says why).

    ``earlier``: the session's earlier results -- given, the lossless compressors run first
    (:func:`_compress`); the caller adds the result to it once recorded. ``names``: what the
    task names, kept in a source outline."""
    if isinstance(text, bytes):
        if len(text) > cap_tokens * MAX_CHARS_PER_TOKEN:
            scan = ByteScan(*preview_sizes(cap_tokens, head_chars, tail_chars))
            saved = files.save_pieces(result_id, scan.watch(text))
            if scan.chars > cap_tokens * MAX_CHARS_PER_TOKEN:  # over the cap without counting
                note = _invalid_note(scan.replaced) if scan.replaced else ""
                record = BudgetRecord(
                    result_id,
                    scan.chars,
                    invalid_utf8=scan.replaced or None,
                    sha256=scan.sha256,
                    offload=offload_of(saved),
                )
                shown = ((scan.head, scan.head_chars), (scan.tail, scan.tail_chars))
                return _preview(tool_name, result_id, cap_tokens, None, scan.chars, *shown, note), record
            files.discard(result_id)  # multi-byte text, few characters: budget it as text
        text = text.decode("utf-8", "surrogateescape")  # at most cap * MAX_CHARS_PER_TOKEN characters
    text, replaced = sanitize(text)
    note = _invalid_note(replaced) if replaced else ""
    over, tokens = over_cap(text, cap_tokens, count)
    record = BudgetRecord(result_id, len(text), tokens=tokens, invalid_utf8=replaced or None)
    if earlier is not None:
        digest = text_sha256(text)
        done = _compress(
            text,
            record,
            over=over,
            cap_tokens=cap_tokens,
            count=count,
            files=files,
            earlier=earlier,
            digest=digest,
            names=names,
            note=note,
        )
        if done is not None:
            return done
        if over:  # hashed once
            record = replace(record, sha256=digest)
    if not over:
        return (f"[ctxwright: {note}]\n" if note else "") + text, record
    saved = files.save(result_id, text)
    return (
        preview(
            text,
            tool_name=tool_name,
            result_id=result_id,
            cap_tokens=cap_tokens,
            tokens=tokens,
            head_chars=head_chars,
            tail_chars=tail_chars,
            note=note,
        ),
        replace(record, sha256=record.sha256 or text_sha256(text), offload=offload_of(saved)),
    )
