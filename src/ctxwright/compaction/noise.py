"""Layer 2, noise: results that carry nothing new become one-line markers, with no LLM call.

Two rules, both decided from recorded events alone (so they are reproducible):

* **Repeats.** A result whose full text is identical to an earlier result of the same
  tool is recorded as a pointer to that one. This is decided when the result arrives
  (it was never sent, so no cache is touched).
* **Unused results.** At a compaction trigger, a successful tool result is *unused* when
  at least ``unused_after_turns`` assistant messages followed it and none of them (text or
  tool-call arguments) mentions any of its *salient terms* -- the words of four or more
  characters that contain a digit, an upper-case letter, ``_``, ``/``, ``.`` or ``:``
  (numbers, names, identifiers, paths, URLs). A result with no salient term is never
  judged unused (there is nothing to test). A failed result is unused once a later call
  of the same tool succeeded (the error has taught what it could).

Each marker says how to see the original again (``read_result``), so nothing is lost.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

from ctxwright.core.events import ToolEvent
from ctxwright.core.messages import Message

_TERM = re.compile(r"[\w./:-]{4,}")
SCAN_CHARS = 20_000  # salient terms come from a result's first characters only: bounded cost


def salient_terms(text: str) -> set[str]:
    return set(_salient_terms(text[:SCAN_CHARS]))


@lru_cache(maxsize=1024)
def _salient_terms(head: str) -> frozenset[str]:
    """Cached by the text itself: every compaction trigger asks again for the terms of each
    result still in view, and a result's recorded text never changes."""
    return frozenset(
        t.strip(".:-/").lower()
        for t in set(_TERM.findall(head))  # each distinct word once: a log repeats its words
        if any(c.isdigit() or c.isupper() or c in "_/.:" for c in t) and len(t.strip(".:-/")) >= 4
    )


def _assistant_text(m: Message) -> str:
    return " ".join([m.content or "", *(tc.arguments for tc in m.tool_calls)]).lower()


def repeat_marker(tool_name: str, earlier_id: str) -> str:
    return (
        f"[ctxwright: identical to the earlier {tool_name} result {earlier_id}; "
        f'read_result(result_id="{earlier_id}") shows it]'
    )


def unused_marker(tool_name: str, result_id: str, tokens: int | None, why: str) -> str:
    size = f"{tokens:,} tokens, " if tokens else ""
    return (
        f"[ctxwright: {tool_name} result {result_id} ({size}{why}) removed as noise; "
        f'read_result(result_id="{result_id}") shows it]'
    )


def unused_results(
    entries: Iterable[tuple[int | None, Message]], meta: dict[int, ToolEvent], after_turns: int, already: set[int]
) -> dict[int, str]:
    """Event seq -> marker for every result the rule finds unused.

    ``meta`` maps a tool event's seq to the event (tool name, ok, result id, tokens)."""
    items = list(entries)
    out: dict[int, str] = {}
    later_texts: list[str] = []  # assistant texts after position i, built backwards
    # the same texts joined by NUL (which no term holds): one C search per term, not one per text
    later = ""
    later_ok_tools: set[str] = set()
    for seq, m in reversed(items):
        if m.role == "assistant":
            later_texts.append(_assistant_text(m))
            later = later_texts[-1] + "\0" + later
            continue
        if m.role != "tool" or seq is None or seq in already:
            continue
        info = meta.get(seq)
        name = (info.tool_name if info else None) or "tool"
        rid = (info.result_id if info else None) or m.tool_call_id or str(seq)
        tokens = info.tokens if info else None
        if info is not None and not info.ok:
            if name in later_ok_tools:
                out[seq] = unused_marker(name, rid, tokens, "an error a later successful call superseded")
            continue
        later_ok_tools.add(name)
        if len(later_texts) < after_turns or (m.content or "").startswith("[ctxwright:"):
            continue
        terms = salient_terms(m.content or "")
        if terms and not any(t in later for t in terms):
            out[seq] = unused_marker(name, rid, tokens, f"not used by the {len(later_texts)} later steps")
    return out
