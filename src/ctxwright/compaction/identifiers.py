"""Identifiers that a summary must keep verbatim.

Why: one wrong character in a PR number, commit hash or port makes every later tool call
fail, and summarizers drop or "round" exactly these first (they look re-fetchable). So
identifiers are extracted from the text *before* summarizing, checked in the summary
*after*, and any missing one is re-attached verbatim.
"""

from __future__ import annotations

import re

_FILE_EXTS = "py|js|ts|tsx|go|rs|java|c|h|cpp|md|json|ya?ml|toml|txt|log|sql|sh|cfg|ini"
#: the folders a file name may carry before it: every "/" of a long chain ("/a/a/a...") is a
#: start of the file pattern, and an unbounded chain made each start scan to its end -- the
#: square of the chain's length (50,000 characters took 16 s). Bounded, each start costs at
#: most this many folders; a real path deeper than this is still found, by its last folders.
FILE_DEPTH = 32

# Order matters: URLs first so their paths and hosts are not also reported piecemeal.
_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("url", re.compile(r"\bhttps?://[^\s<>\"')\]]+")),
    ("uuid", re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")),
    ("ip", re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d{1,5})?\b")),
    ("hash", re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,64}\b")),
    ("path", re.compile(r"(?<![\w/])(?:~|\.{1,2})?/(?:[\w.@-]+/)*[\w.@-]+")),
    (
        "file",
        re.compile(
            # tried only where a run of [\w-] begins (its leading dashes skipped, the name is
            # group 1) or at a "-" right after an extension (where the plain pattern resumed
            # after a match): any other start in a run fails where the run's first start did,
            # and trying each one cost the square of the run's length. Same matches.
            r"(?:(?<![\w-])-*|(?=-)(?:"
            + "|".join(f"(?<=\\.{ext})" for ext in _FILE_EXTS.replace("ya?ml", "yaml|yml").split("|"))
            + rf"))(\b[\w-]+(?:/[\w.-]+){{0,{FILE_DEPTH}}}\.(?:{_FILE_EXTS})\b)"
        ),
    ),
    ("port", re.compile(r"\b(?:port|localhost:|:)\s?(\d{2,5})\b")),
    ("ticket", re.compile(r"\b[A-Z][A-Z0-9]{1,9}-\d{1,7}\b|(?<!\w)#\d{2,7}\b")),
]


#: a number worth keeping: three or more digits, or a decimal (a line count, an amount, a
#: status code); "1" and "42" are everywhere in text and would say nothing
NUMBER = re.compile(r"(?<![\w.])(?:\d{3,}(?:\.\d+)?|\d+\.\d+)(?![\w])")

#: any identifier or number, in one pattern: whether a line holds a fact at all
FACT = re.compile("|".join(f"(?:{pat.pattern})" for _kind, pat in _PATTERNS) + f"|(?:{NUMBER.pattern})")


def extract(text: str, limit: int = 200) -> list[str]:
    """Identifiers in ``text``, in order of first appearance, without repeats."""
    return [value for _kind, value in extract_kinds(text, limit)]


def extract_kinds(text: str, limit: int = 200) -> list[tuple[str, str]]:
    """:func:`extract` with each identifier's kind (``url``, ``uuid``, ``ip``, ``hash``,
    ``path``, ``file``, ``port``, ``ticket``): the kind of its first appearance."""
    found: list[tuple[int, str, str]] = []
    # the characters already inside an identifier: one lookup per match, not one per earlier
    # match (a result of thousands of identifiers stays linear)
    taken = bytearray(len(text))
    for kind, pat in _PATTERNS:
        for m in pat.finditer(text):
            a, b = m.span(1) if kind == "file" else m.span()  # a file's match may hold dashes before it
            if 1 in taken[a:b]:  # inside a longer identifier already found
                continue
            value = (m.group(1) if pat.groups else m.group(0)).rstrip(".,;:")
            taken[a:b] = b"\x01" * (b - a)
            found.append((a, kind, value))
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for _, kind, v in sorted(found):
        if v not in seen:
            seen.add(v)
            out.append((kind, v))
        if len(out) >= limit:
            break
    return out


def missing(identifiers: list[str], summary: str) -> list[str]:
    return [i for i in identifiers if i not in summary]


def reattach(summary: str, lost: list[str]) -> str:
    """The summary with every lost identifier appended verbatim on one line."""
    if not lost:
        return summary
    return summary.rstrip() + "\nIdentifiers (verbatim from the original): " + ", ".join(lost)
