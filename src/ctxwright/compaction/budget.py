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
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ctxwright.compaction.offload import SLICE, ResultFiles

#: A BPE token covers at least about a third of a character (a rare CJK character can be
#: three byte-level tokens) and rarely more than eight characters on real tool output.
#: Texts shorter than cap/3 characters are under the cap without counting; texts longer
#: than cap*8 are over it without counting (offloading is lossless, so erring there is safe).
MIN_CHARS_PER_TOKEN = 1 / 3
MAX_CHARS_PER_TOKEN = 8


@dataclass
class BudgetedResult:
    content: str
    info: dict[str, Any] = field(default_factory=dict)


def sanitize(text: str) -> tuple[str, int]:
    """Replace lone surrogates by U+FFFD; returns the text and how many were replaced.

    Checked slice by slice so a valid 50 MB text is never encoded whole (no second copy)."""
    for start in range(0, len(text), SLICE):
        try:
            text[start : start + SLICE].encode("utf-8")
        except UnicodeEncodeError:
            break
    else:
        return text, 0
    bad = sum(1 for ch in text if 0xD800 <= ord(ch) <= 0xDFFF)
    # bytes decoded with surrogateescape come back as U+DC80..U+DCFF: decode them properly
    fixed = "".join("\ufffd" if 0xD800 <= ord(ch) <= 0xDFFF else ch for ch in text)
    return fixed, bad


def text_sha256(text: str) -> str:
    """Hash in 1 MB slices so a huge result is never encoded whole a second time."""
    h = hashlib.sha256()
    for start in range(0, len(text), SLICE):
        h.update(text[start : start + SLICE].encode("utf-8", "surrogatepass"))
    return h.hexdigest()


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
    then its head and tail. Sized to stay well inside the cap."""
    head_chars = min(head_chars, cap_tokens * 2)
    tail_chars = min(tail_chars, cap_tokens // 2)
    size = f"{len(text):,} characters" + (f" (~{tokens:,} tokens)" if tokens else "")
    header = (
        f"[ctxwright: the {tool_name} result is {size}, over the {cap_tokens:,}-token budget for one "
        f'result, so it was saved in full as result_id "{result_id}". Shown: the first {head_chars:,} '
        f'and the last {tail_chars:,} characters. Read the rest with read_result(result_id="{result_id}", '
        f"offset={head_chars}, limit=4000).{(' ' + note) if note else ''}]"
    )
    hidden = len(text) - head_chars - tail_chars
    tail = text[-tail_chars:] if tail_chars else ""
    return f"{header}\n{text[:head_chars]}\n[... {hidden:,} characters not shown ...]\n{tail}"


def apply_budget(
    text: str,
    *,
    tool_name: str,
    result_id: str,
    cap_tokens: int,
    count: Callable[[str], int],
    files: ResultFiles,
    head_chars: int,
    tail_chars: int,
) -> BudgetedResult:
    """The content to record for one tool result, and what to store about it."""
    text, replaced = sanitize(text)
    info: dict[str, Any] = {"result_id": result_id, "chars": len(text)}
    note = ""
    if replaced:
        info["invalid_utf8"] = replaced
        note = (
            f"{replaced:,} bytes of the output were not valid UTF-8 and are shown as U+FFFD; "
            "treat the output as binary or ask for an encoded form."
        )
    over, tokens = over_cap(text, cap_tokens, count)
    if tokens is not None:
        info["tokens"] = tokens
    if not over:
        return BudgetedResult((f"[ctxwright: {note}]\n" if note else "") + text, info)
    info["sha256"] = text_sha256(text)
    saved = files.save(result_id, text)
    info["offload"] = {"path": saved.path, "chars": saved.chars, "bytes": saved.bytes}
    return BudgetedResult(
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
        info,
    )
