"""Markdown headings, found as CommonMark finds them: one reader for every place that cuts a
prompt at its headings -- the gate's segments (``ci/segments.py``), the ablation's arms
(``ablation/sections.py``) and the sections of an attention map (``attention/spans.py``).

Why one: a prompt is cut the same way everywhere, or a section the gate names would not be the
section the ablation removes. The rules that matter for prompts:

* an ATX heading is up to three spaces, 1-6 ``#``, then a space, a tab or the line's end
  (``#5`` and ``#hashtag`` are text); an optional closing run of ``#`` after a space is not
  part of the title (``# C#`` keeps its ``#``);
* nothing inside a fenced code block is a heading (a shell comment in a code sample is not a
  section): a fence opens with three or more backticks or tildes and closes with at least as
  many of the same character and nothing else on the line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

_ATX = re.compile(r" {0,3}(#{1,6})(?=[ \t]|$)(.*)")
_CLOSING = re.compile(r"(?:^|[ \t]+)#+[ \t]*$")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")


@dataclass(frozen=True)
class Heading:
    #: the heading's line index in the lines given
    index: int
    level: int
    #: its text, without the ``#`` marks (may be empty: ``#`` alone is a heading)
    title: str


def headings(lines: Sequence[str]) -> list[Heading]:
    """Every ATX heading of ``lines`` (line endings allowed) outside fenced code blocks."""
    found: list[Heading] = []
    fence: str | None = None
    for i, raw in enumerate(lines):
        line = raw.rstrip("\r\n")
        m = _FENCE.match(line)
        if m is not None:
            mark = m.group(1)
            if fence is None:
                fence = mark
            elif mark[0] == fence[0] and len(mark) >= len(fence) and not line.strip()[len(mark) :].strip():
                fence = None
            continue
        if fence is not None:
            continue
        h = _ATX.match(line)
        if h is not None:
            found.append(Heading(i, len(h.group(1)), _CLOSING.sub("", h.group(2).strip()).strip()))
    return found
