"""Rule ``code_outline``: source code is kept exact; only when the result budget would
otherwise cut it does it become an outline -- every ``def``/``class``/``function``/``fn``
signature line and decorator (with its line number), every top-level constant, every line
holding an identifier or a number (the loss ledger's ``identifiers.FACT``: a URL, a path, a
port, a version, a limit), and every line naming something the task or an error named.

Why: a model that edits code needs the exact bytes (an edit tool matches them literally),
so no lossy rule runs on source that fits. But when a file is over the budget, a head and a
tail hide every definition in the middle; an outline shows where everything is, and the
full text stays readable by line (the budget layer offloads the original, losslessly).

Bounded: texts over ``MAX_CHARS`` are not outlined; one pass over the lines, lines over
``MAX_LINE`` characters skipped; the signature pattern is anchored and has no nested repeats.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ctxwright.compaction.identifiers import FACT

MAX_CHARS = 8_000_000
MAX_LINE = 500
MIN_LINES = 20
MIN_SAVING = 0.3

_SIGNATURE = re.compile(
    r"[ \t]*(?:(?:export|pub(?:\([a-z]+\))?|public|private|protected|static|async|abstract|final|default)[ \t]+)*"
    r"(?:def|class|function|func|fn|interface|struct|enum|trait|impl|type|module|package)[ \t(]"
)
_DECORATOR = re.compile(r"[ \t]*@[\w.]+")
_CONSTANT = re.compile(
    r"(?:export[ \t]+)?(?:const[ \t]+|static[ \t]+|final[ \t]+)?[A-Z][A-Z0-9_]*[ \t]*(?::[^=]{0,80})?="
)
_ALERT = re.compile(r"error|fail|exception", re.IGNORECASE)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,80}")
#: the characters of a task's text searched for names, and the most names kept
NAMES_CHARS = 4_000
MAX_NAMES = 20


def names_in(query: str) -> tuple[str, ...]:
    """The code names a task's text mentions (``parse_header``, ``HttpClient``, ``MAX_SIZE``:
    a word with an underscore or a capital after its first letter), in order, at most
    ``MAX_NAMES`` -- an outline keeps every line naming one."""
    out: dict[str, None] = {}
    for word in _WORD.findall(query[:NAMES_CHARS]):
        if "_" in word.strip("_") or any(c.isupper() for c in word[1:]):
            out.setdefault(word)
            if len(out) >= MAX_NAMES:
                break
    return tuple(out)


def looks_like_code(lines: list[str]) -> bool:
    """At least one line in 40 opens a definition (prose and logs rarely do)."""
    defs = sum(1 for line in lines if len(line) <= MAX_LINE and _SIGNATURE.match(line))
    return defs >= 2 and defs * 40 >= len(lines)


def outline(text: str, names: Iterable[str] = ()) -> str | None:
    """The outline, or ``None`` (not code, too short, or not much shorter)."""
    if len(text) > MAX_CHARS or text.count("\n") + 1 < MIN_LINES:
        return None
    lines = text.split("\n")
    if not looks_like_code(lines):
        return None
    wanted = sorted({n for n in names if len(n) >= 3})
    width = len(str(len(lines)))
    out = [
        f"[source outline, {len(lines):,} lines: the definitions, constants, lines holding an identifier "
        f"or a number, and lines naming {', '.join(wanted) + ' or ' if wanted else ''}an error, "
        "each with its line number]"
    ]
    for number, line in enumerate(lines, 1):
        if len(line) > MAX_LINE:
            continue
        if (
            _SIGNATURE.match(line)
            or _DECORATOR.match(line)
            or _CONSTANT.match(line)
            or _ALERT.search(line)
            or any(n in line for n in wanted)
            or FACT.search(line)
        ):
            out.append(f"{number:>{width}}| {line}")
    result = "\n".join(out)
    return result if len(result) <= len(text) * (1 - MIN_SAVING) else None
