"""What every named rule shares: the :class:`Finding` it returns, the :class:`Settings` it
may read, and the text helpers several rules use (where two texts first differ, the spans that
look like a date, an id or a URL, a tool's name and descriptions).

Why shared helpers: a rule names the segment, the tool and the byte where a request broke the
cache, and two rules reading the same change (a tool description that holds a session URL
*and* changed after approval) must agree on where it is and on what a date or an id looks like.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from ctxwright.audit.compare import AuditRequest, utf8
from ctxwright.core.incremental import common_prefix_len
from ctxwright.core.messages import canonical_json
from ctxwright.core.request import tool_body, tool_name
from ctxwright.core.tokens import TokenCounter

Severity = Literal["error", "warning"]
#: characters of text shown on each side of a change
WINDOW = 24


@dataclass(frozen=True)
class Finding:
    """One named rule that fired: ``rule`` (its name), ``line`` (one printable line naming the
    segment, tool and byte), ``fix`` (one line), ``severity`` (``warning``: a risk seen in one
    request, not yet a break) and ``details`` for ``--json``."""

    rule: str
    line: str
    fix: str
    severity: Severity = "error"
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "severity": self.severity, "line": self.line, "fix": self.fix, **dict(self.details)}


class KeepContract(Protocol):
    """What the rule ``compaction_lost_item`` asks of a survival contract: the declared items
    of a request's messages -- ``turns``, each (role, text with any tool-call arguments, the
    tool a result came from, whether it reports a failure) -- that the next request no longer
    holds (``hidden``: their indices) and none of its texts (``seen``) shows, as (kind, text,
    index) each."""

    def lost_items(
        self, turns: Sequence[tuple[str, str, str | None, bool]], hidden: Collection[int], seen: Sequence[str]
    ) -> list[tuple[str, str, int]]: ...


@dataclass
class Settings:
    """What the rules may be told (``--max-tool-tokens``) and what they may keep between two
    checks: the token counter and the tool lists' counts, memoized by the list object (a log
    repeats one tool list object on every line, ``audit/logs.py``)."""

    max_tool_tokens: int | None = None
    counter: TokenCounter = field(default_factory=TokenCounter)
    _tool_tokens: tuple[Sequence[Any], list[tuple[str, int]]] | None = field(default=None, repr=False)
    #: ``--keep``: the survival contract the rule ``compaction_lost_item`` holds requests to
    #: (``compaction/survival.py``'s ``Contract``, built by the caller: the audit does not
    #: import the compaction layer); ``None``: nothing declared, the rule is quiet
    keep: KeepContract | None = None

    def tool_tokens(self, tools: Sequence[Any]) -> list[tuple[str, int]]:
        """(name, tokens of its canonical JSON) of each tool, counted once per tool list object."""
        known = self._tool_tokens
        if known is not None and known[0] is tools:
            return known[1]
        counts = [(tool_name(t) or f"#{i}", self.counter.count(canonical_json(t))) for i, t in enumerate(tools)]
        self._tool_tokens = (tools, counts)
        return counts


# -- tools ------------------------------------------------------------------------------------


def descriptions(tool: Any) -> list[str]:
    """Every ``description`` string of a tool, its own first, then its parameters' in the order
    of their canonical JSON: what a model reads as instructions, and what an MCP server can
    change after a user approved the tool."""
    out: list[str] = []
    stack: list[Any] = [tool_body(tool)]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            d = v.get("description")
            if isinstance(d, str):
                out.append(d)
            stack.extend(v[k] for k in sorted(v, reverse=True) if isinstance(v[k], dict | list))
        elif isinstance(v, list):
            stack.extend(reversed(v))
    return out


def by_name(tools: Sequence[Any]) -> dict[str, Any]:
    """The tools by name (an unnamed one by its place, ``#i``); a repeated name keeps the first."""
    out: dict[str, Any] = {}
    for i, t in enumerate(tools):
        out.setdefault(tool_name(t) or f"#{i}", t)
    return out


def changed_tools(before: Sequence[Any], after: Sequence[Any]) -> list[tuple[str, Any, Any]]:
    """(name, before, after) of each tool present on both sides whose schema differs, in the
    order of ``after``."""
    if before is after or before == after:
        return []
    old = by_name(before)
    return [(n, old[n], t) for n, t in by_name(after).items() if n in old and old[n] != t]


# -- where two texts differ -------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """Where ``after`` first differs from ``before``: the character ``at`` and the UTF-8
    ``byte`` offsets, and the text around it on both sides."""

    at: int
    byte: int
    before: str
    after: str

    def shown(self) -> str:
        """``'…old|' → '…new|'`` for a line."""
        return f"{_one_line(self.before)!r} → {_one_line(self.after)!r}"


def _one_line(text: str) -> str:
    return text.replace("\n", "⏎").replace("\t", "⇥")


def first_change(before: str, after: str) -> Change | None:
    """Where ``after`` first differs from ``before`` (``None`` when equal)."""
    if before == after:
        return None
    at = common_prefix_len(before, after)
    return Change(
        at,
        len(utf8(after[:at])),
        before[max(0, at - WINDOW) : at + WINDOW],
        after[max(0, at - WINDOW) : at + WINDOW],
    )


def common_suffix_len(a: str, b: str) -> int:
    """How many characters ``a`` and ``b`` share at their ends (compared as slices, by the
    binary search of :func:`common_prefix_len`)."""
    return common_prefix_len(a[::-1], b[::-1])


def span_at(spans: Sequence[tuple[int, int]], at: int) -> tuple[int, int] | None:
    """The span holding character ``at`` (or ending right there: a date that grew by a digit)."""
    for s, e in spans:
        if s <= at <= e:
            return s, e
    return None


# -- what a date, an id or a URL looks like ---------------------------------------------------

_MONTH = (
    r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|"
    r"Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)"
)
_DAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*"
_CLOCK = r"(?:[01]?\d|2[0-3]):[0-5]\d"
#: dates and times whose shape no version number, ratio or path takes: ISO 8601 dates (and
#: date-times), month names with a day, weekdays with a month, clocks with seconds, AM/PM or a zone
STRICT_DATE = re.compile(
    r"\b(?:19|20)\d\d-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])"
    r"(?:[T ]" + _CLOCK + r"(?::[0-5]\d(?:\.\d+)?)?(?:Z|[+-]\d\d:?\d\d|\s?UTC\b|\s?GMT\b)?)?"
    r"|\b(?:19|20)\d\d/(?:0[1-9]|1[0-2])/(?:0[1-9]|[12]\d|3[01])\b"
    r"|\b(?:" + _DAY + r",?\s+)?" + _MONTH + r"\.?\s+\d{1,2}(?:st|nd|rd|th)?\b(?:,?\s+(?:19|20)\d\d\b)?"
    r"|\b\d{1,2}\s+" + _MONTH + r"\.?,?\s+(?:19|20)\d\d\b"
    r"|\b" + _DAY + r"\b,?\s+\d{1,2}\s+" + _MONTH + r"\b"
    r"|\b" + _CLOCK + r":[0-5]\d(?:\.\d+)?\b"
    r"|\b" + _CLOCK + r"\s?(?:[AaPp]\.?[Mm]\.?|UTC|GMT|Z)\b"
)
#: what may be a date or time once it is seen to change: the strict shapes, a clock, a day/month/year
#: with slashes or dots, an epoch timestamp in seconds or milliseconds
LOOSE_DATE = re.compile(
    STRICT_DATE.pattern
    + r"|\b"
    + _CLOCK
    + r"\b"
    + r"|\b\d{1,2}/\d{1,2}/(?:19|20)?\d\d\b|\b\d{1,2}\.\d{1,2}\.(?:19|20)\d\d\b"
    + r"|\b1[5-9]\d{8}(?:\d{3})?\b"
)

_UUID = re.compile(r"\b[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}\b")
_URL = re.compile(r"\b(?:https?|wss?)://[^\s\"'<>`]+")
_WORD = re.compile(r"[A-Za-z0-9_\-]+")


def spans(pattern: re.Pattern[str], text: str) -> list[tuple[int, int]]:
    return [m.span() for m in pattern.finditer(text)]


def word_at(text: str, at: int) -> str:
    """The run of letters, digits, ``_`` and ``-`` holding character ``at`` (or just before it)."""
    for m in _WORD.finditer(text, max(0, at - 256), at + 256):
        if m.start() <= at <= m.end():
            return m.group()
    return ""


def words_in(text: str) -> list[str]:
    """The runs of letters, digits, ``_`` and ``-`` of ``text`` (what :func:`word_at` reads)."""
    return _WORD.findall(text)


def looks_like_id(word: str) -> bool:
    """Whether ``word`` reads as a generated id rather than a word a person wrote: a UUID, a
    hex token of 12+ digits, or a run of 12+ characters mixing letters and digits (base62/base64
    tokens, ``sess_9f2k…``)."""
    if _UUID.search(word):
        return True
    core = word.strip("_-")
    for part in re.split(r"[_-]", core) if len(core) < 12 else [core, *re.split(r"[_-]", core)]:
        if len(part) >= 12 and re.fullmatch(r"[0-9a-fA-F]+", part) and re.search(r"\d", part):
            return True
        if len(part) >= 12 and re.search(r"\d", part) and re.search(r"[A-Za-z]", part):
            digits = sum(c.isdigit() for c in part)
            if digits >= 2:
                return True
    return False


def url_spans(text: str) -> list[tuple[int, int]]:
    return spans(_URL, text)


def prefix_texts(req: AuditRequest) -> list[tuple[str, str]]:
    """The frozen prefix as (where, text) pairs: the system prompt, then each tool's canonical JSON."""
    return [("system prompt", req.system), *((f"tool {n!r}", canonical_json(t)) for n, t in by_name(req.tools).items())]


__all__ = [
    "LOOSE_DATE",
    "STRICT_DATE",
    "Change",
    "Finding",
    "KeepContract",
    "Settings",
    "by_name",
    "changed_tools",
    "common_suffix_len",
    "descriptions",
    "first_change",
    "looks_like_id",
    "prefix_texts",
    "span_at",
    "spans",
    "url_spans",
    "word_at",
    "words_in",
]
