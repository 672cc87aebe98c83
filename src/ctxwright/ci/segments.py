"""The frozen prefix of a request -- system prompt and tools -- cut into named segments, and
the difference of two prefixes, segment by segment.

Provider rule protected: a prompt cache serves only the longest byte-identical prefix of a
request, so one changed byte in the system prompt or one reordered tool makes every token after
it a cache write again, on every call (OpenAI, Anthropic, DeepSeek, vLLM and llama.cpp alike).
"The prefix changed" is not enough to fix such a change; a reviewer needs *which part*: the
section of the system prompt by its heading, the tool by its name, the field by its JSON path,
and the byte where it starts.

**Segments.** The system prompt is cut at its Markdown headings (ATX headings, ``#`` to
``######`` at the start of a line, outside fenced code blocks): a section is a heading line
and the lines up to the next heading; text before the first heading is a section of its own.
ctxwright builds its own prompts from named sections joined by blank lines
(``core/sections.py``), and prompts written by hand are organised the same way, so the
headings are the names their authors know. A prompt with no heading is cut into blank-line
paragraphs instead, each named by its first line. A section keeps its bytes exactly (its line
ends and the blank lines after it): the sections of a prompt, joined, are the prompt.

Each tool schema is one segment, named by the tool's name, in request order, in any of the
three API shapes (chat completions ``{"type": "function", "function": {...}}``, Responses
``{"type": "function", "name": ...}``, Anthropic ``{"name", "description", "input_schema"}``).
A tool is serialized exactly as the audit serializes the tool list (``audit/compare.py``:
canonical JSON, ``core/messages.py``): the tool list's bytes are ``[`` + the tools' bytes
joined by ``,`` + ``]``. Tokens are counted by the audit's counter (``core/tokens.py``), so a
segment's count is the count ``ctxwright audit`` shows for the same text; ``sha256`` is of the
segment's exact UTF-8 bytes.

**Order.** Segments are listed in the order the provider's cache reads them: Anthropic caches
``tools``, then ``system``, then the messages (its prompt-caching guide); OpenAI-style APIs
(chat completions, Responses, and the servers that copy them) are taken as system prompt first,
then tools, the order the audit linearises a request in. So "everything from the first changed
segment on" is what stops being reusable (:func:`cache_break`).

**Difference.** Tools are matched by name: a tool whose bytes differ is ``changed`` (with the
JSON path of its first differing field, e.g. ``$.tools[2].function.description``), one present
on one side only is ``added`` or ``removed``, and one whose place among the others changed is
``moved`` (two tools swapped are both named, each with the other). System sections are matched
by aligning their hashes (a section inserted before others does not rename them), an edited
one is ``changed`` with the byte offset of the first difference inside it.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from ctxwright.audit.compare import _bytes_divergence, utf8
from ctxwright.core.markdown import headings
from ctxwright.core.messages import canonical_json
from ctxwright.core.request import tool_name
from ctxwright.core.tokens import TokenCounter
from ctxwright.core.wire_order import wire_order
from ctxwright.core.words import counted

SegmentKind = Literal["system", "tool"]
ChangeKind = Literal["changed", "added", "removed", "moved"]

_LINES = re.compile(r"[^\n]*\n|[^\n]+")
#: the longest section or tool name shown, in characters (a name is read in a list)
_NAME_CHARS = 48
#: characters of text shown on each side of a difference
_WINDOW = 40


@dataclass(frozen=True)
class Segment:
    """One part of a frozen prefix.

    ``name`` says which part ("system § '## Tools'", "system line 1 'You are a ...'", "tool
    'read_file'"; unique within a prefix: a repeated name gets " (2)", " (3)"), ``text`` is its
    exact serialized text, ``tokens`` its count by the audit's counter, ``sha256`` the hex digest
    of its UTF-8 bytes. ``path`` is where it sits in the request (``$.tools[2]``, or the system
    prompt's field: ``$.messages[0].content``, ``$.system``, ``$.instructions``), ``start`` the
    byte offset of a system section inside the system prompt (0 for a tool), ``line`` its
    1-based line there (0 for a tool), and ``key`` what it is matched by across two prefixes (a
    tool's name).
    """

    name: str
    part: SegmentKind
    text: str
    tokens: int
    sha256: str
    path: str = ""
    start: int = 0
    line: int = 0
    key: str = ""


@dataclass(frozen=True)
class SegmentChange:
    """One difference between two prefixes.

    ``segment`` names the segment (the run's name; the golden's for a removed one), ``change``
    is ``changed``, ``added``, ``removed`` or ``moved``, ``path`` the JSON path inside the
    request of the first differing field (``$.tools[2].function.description``; for a system
    section the system prompt's field), ``offset`` the byte offset of the first difference
    inside the segment's serialized text (0 when the segment is added, removed or moved, or
    when only hashes were compared), ``before``/``after`` up to 40 characters of the run's text
    on each side of that offset, ``was`` the golden's text after it, and ``line`` one printable
    line saying all of it.
    """

    segment: str
    change: ChangeKind
    path: str
    offset: int
    before: str
    after: str
    line: str
    was: str = ""


class SegmentLike(Protocol):
    """What :func:`diff_segments` compares: a :class:`Segment`, or a segment read back from a
    ``ctxwright.lock`` (name, kind, tokens and hash, no text)."""

    @property
    def name(self) -> str: ...
    @property
    def part(self) -> str: ...
    @property
    def tokens(self) -> int: ...
    @property
    def sha256(self) -> str: ...


# -- the provider's shape -------------------------------------------------------------------


def tools_first(provider: str | None) -> bool:
    """Whether ``provider``'s cache reads the tools before the system prompt (Anthropic's
    order: tools, system, messages); OpenAI-style APIs read the system prompt first
    (``core/wire_order.py``)."""
    return wire_order(str(provider) if provider else None)[0] == "tools"


def cache_order(provider: str | None) -> str:
    """The order :func:`prefix_segments` lists segments in, in words (what reports say they assumed)."""
    if tools_first(provider):
        return "tools, then system: Anthropic caches the tools before the system prompt"
    return "system, then tools: OpenAI-style, the system prompt first"


def infer_provider(provider: str | None, tools: Sequence[Any]) -> str | None:
    """``provider`` when known, else the API the tool schemas are written for (``input_schema``:
    Anthropic; a top-level ``name`` with ``"type": "function"``: Responses; ``function``: chat
    completions), else ``None``."""
    if provider:
        return provider
    for t in tools:
        if isinstance(t, dict):
            if "input_schema" in t:
                return "anthropic"
            if isinstance(t.get("function"), dict):
                return "openai"
            if t.get("type") == "function" and "name" in t:
                return "openai-responses"
    return None


def system_path(provider: str | None) -> str:
    """The JSON path of the system prompt in a request of ``provider``'s API."""
    p = (provider or "").lower()
    if p.startswith("anthropic"):
        return "$.system"
    if "responses" in p:
        return "$.instructions"
    return "$.messages[0].content"


# -- cutting a prefix into segments ---------------------------------------------------------


def _short(text: str) -> str:
    """``text`` on one line, at most :data:`_NAME_CHARS` characters, quoted (control
    characters and lone surrogates escaped: a name is printed and written into a lock file)."""
    text = " ".join(text.split())
    if len(text) > _NAME_CHARS:
        text = text[: _NAME_CHARS - 1] + "…"
    return repr(text)


@dataclass(frozen=True)
class _Section:
    title: str  # the heading line, or the section's first line
    heading: bool
    line: int  # 1-based
    start: int  # character offset in the prompt
    text: str


def system_sections(system: str) -> list[tuple[str, int, int, str]]:
    """The system prompt cut into sections (see the module docstring): (name, 1-based line,
    character offset, text) each; the texts joined are ``system``."""
    return [(_section_name(s), s.line, s.start, s.text) for s in _sections(system)]


def _section_name(s: _Section) -> str:
    if s.heading:
        return f"system § {_short(s.title)}"
    return f"system line {s.line} {_short(s.title)}"


def spoken(name: str) -> str:
    """A segment's name as it reads inside a sentence: ``system § '# Role'`` is "the system
    prompt's section '# Role'", ``system line 3 'You are'`` "the system prompt's line 3
    ('You are')", ``tool 'read_file'`` "the tool 'read_file'". The short names stay what a
    lock file and a table print; this is for the lines around them."""
    if name.startswith("system § "):
        return f"the system prompt's section {name[len('system § ') :]}"
    if name.startswith("system line "):
        number, _, title = name[len("system line ") :].partition(" ")
        return f"the system prompt's line {number} ({title})" if title else f"the system prompt's line {number}"
    if name.startswith("tool "):
        return f"the {name}"
    return name


def _sections(system: str) -> list[_Section]:
    lines = _LINES.findall(system)
    headings = _heading_lines(lines)
    starts: list[int] = []
    if headings:
        first_heading = min(headings)
        preamble = any(line.strip() for line in lines[:first_heading])
        # blank lines before the first heading belong to it, not to a section of their own
        starts = sorted({0} | (headings if preamble else headings - {first_heading}))
    else:  # no heading: blank-line paragraphs, a paragraph starting at a line after a blank one
        blank_before = True
        for i, line in enumerate(lines):
            if line.strip() and blank_before:
                starts.append(i)
            blank_before = not line.strip()
        if not starts or starts[0] != 0:
            starts = [0, *starts[1:]] if starts else [0]
    out: list[_Section] = []
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    for k, first in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(lines)
        chunk = lines[first:end]
        title_at = next((i for i, line in enumerate(chunk) if line.strip()), 0)
        title = chunk[title_at] if chunk else ""
        out.append(_Section(title, first + title_at in headings, first + title_at + 1, offsets[first], "".join(chunk)))
    return [s for s in out if s.text]


def _heading_lines(lines: list[str]) -> set[int]:
    return {h.index for h in headings(lines)}


def _unique(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n} ({seen[n]})")
    return out


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def prefix_segments(
    system: str, tools: Sequence[Any], *, provider: str | None = None, counter: TokenCounter | None = None
) -> list[Segment]:
    """The prefix ``system`` + ``tools`` as segments, in the provider's cache order (see the
    module docstring; the provider is inferred from the tool schemas when not given)."""
    counter = counter or TokenCounter()
    provider = infer_provider(provider, tools)
    spath = system_path(provider)
    sections = _sections(system)
    names = _unique([_section_name(s) for s in sections])
    encoded = 0
    sys_segs: list[Segment] = []
    for name, s in zip(names, sections, strict=True):
        data = utf8(s.text)
        sys_segs.append(
            Segment(name, "system", s.text, counter.count(s.text), _sha(data), spath, encoded, s.line, s.title)
        )
        encoded += len(data)
    tool_names = [tool_name(t) for t in tools]
    labels = _unique([f"tool {_short(n)}" if n is not None else f"tool #{i}" for i, n in enumerate(tool_names)])
    tool_segs = []
    for i, (label, t) in enumerate(zip(labels, tools, strict=True)):
        text = canonical_json(t)
        tool_segs.append(
            Segment(label, "tool", text, counter.count(text), _sha(utf8(text)), f"$.tools[{i}]", key=label)
        )
    return tool_segs + sys_segs if tools_first(provider) else sys_segs + tool_segs


# -- where two JSON values first differ -----------------------------------------------------

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _key_path(key: str) -> str:
    return f".{key}" if _IDENT.fullmatch(key) else f"[{canonical_json(key)}]"


def first_difference_path(a: Any, b: Any, path: str = "$") -> str:
    """The JSON path of the first field where ``a`` and ``b`` differ, in the order of their
    canonical JSON (keys sorted): the field the first differing byte of their serialization
    belongs to. A key present on one side only is that key's path; a list longer on one side,
    the first extra element's. ``path`` itself when they differ as wholes (other types,
    other scalars)."""
    while True:
        if isinstance(a, dict) and isinstance(b, dict):
            ka, kb = sorted(a), sorted(b)
            for x, y in zip(ka, kb, strict=False):
                if x != y:
                    return path + _key_path(min(x, y))
                if a[x] != b[x]:
                    a, b, path = a[x], b[x], path + _key_path(x)
                    break
            else:
                if len(ka) == len(kb):
                    return path
                return path + _key_path((ka if len(ka) > len(kb) else kb)[min(len(ka), len(kb))])
            continue
        if isinstance(a, list) and isinstance(b, list):
            for i, (x, y) in enumerate(zip(a, b, strict=False)):
                if x != y:
                    a, b, path = x, y, f"{path}[{i}]"
                    break
            else:
                return path if len(a) == len(b) else f"{path}[{min(len(a), len(b))}]"
            continue
        return path


# -- the difference of two prefixes ---------------------------------------------------------


@dataclass(frozen=True)
class _Raw:
    change: ChangeKind
    before: int | None  # index into the golden's segments
    after: int | None  # index into the run's segments
    partner: int | None = None  # a moved tool swapped with this one (index into the run's)
    moved_from: int | None = None  # a changed tool that also moved: its golden index


def _match(before: Sequence[SegmentLike], after: Sequence[SegmentLike]) -> list[_Raw]:
    out: list[_Raw] = []
    out.extend(_match_system(before, after))
    out.extend(_match_tools(before, after))
    return out


def _match_system(before: Sequence[SegmentLike], after: Sequence[SegmentLike]) -> Iterator[_Raw]:
    ib = [i for i, s in enumerate(before) if s.part == "system"]
    ia = [i for i, s in enumerate(after) if s.part == "system"]
    sm = difflib.SequenceMatcher(None, [before[i].sha256 for i in ib], [after[i].sha256 for i in ia], autojunk=False)
    for op, b1, b2, a1, a2 in sm.get_opcodes():
        if op == "equal":
            continue
        by_name: dict[str, list[int]] = {}
        for a in reversed(ia[a1:a2]):
            by_name.setdefault(after[a].name, []).append(a)
        pairs: list[tuple[int, int]] = []
        paired: set[int] = set()
        bs = []
        for b in ib[b1:b2]:  # the same heading on both sides is that section, edited
            same = by_name.get(before[b].name)
            if same:
                a = same.pop()
                pairs.append((b, a))
                paired.add(a)
            else:
                bs.append(b)
        as_ = [a for a in ia[a1:a2] if a not in paired]
        pairs.extend(zip(bs, as_, strict=False))  # the rest in order
        n = min(len(bs), len(as_))
        for b, a in pairs:
            yield _Raw("changed", b, a)
        for b in bs[n:]:
            yield _Raw("removed", b, None)
        for a in as_[n:]:
            yield _Raw("added", None, a)


def _match_tools(before: Sequence[SegmentLike], after: Sequence[SegmentLike]) -> Iterator[_Raw]:
    tb = {s.name: i for i, s in enumerate(before) if s.part == "tool"}
    ta = {s.name: i for i, s in enumerate(after) if s.part == "tool"}
    seq_b = [n for n in tb if n in ta]
    seq_a = [n for n in ta if n in tb]
    sm = difflib.SequenceMatcher(None, seq_b, seq_a, autojunk=False)
    kept = {seq_b[blk.a + k] for blk in sm.get_matching_blocks() for k in range(blk.size)}
    moved = {n: None for n in seq_a if n not in kept}  # name -> the name it swapped with
    pos_b = {n: k for k, n in enumerate(seq_b)}
    pos_a = {n: k for k, n in enumerate(seq_a)}
    partners: dict[str, str] = {}
    for n in list(moved):
        other = seq_b[pos_a[n]]
        if other != n and seq_a[pos_b[n]] == other:  # n and other traded places
            partners[n], partners[other] = other, n
    for n in partners:
        moved.setdefault(n, None)
    for n in seq_a:
        b, a = tb[n], ta[n]
        if before[b].sha256 != after[a].sha256:
            yield _Raw("changed", b, a, moved_from=b if n in moved else None)
        elif n in moved:
            yield _Raw("moved", b, a, partner=ta[partners[n]] if n in partners else None)
    for n, b in tb.items():
        if n not in ta:
            yield _Raw("removed", b, None)
    for n, a in ta.items():
        if n not in tb:
            yield _Raw("added", None, a)


def _ordered(raws: list[_Raw], before: Sequence[SegmentLike], after: Sequence[SegmentLike]) -> list[_Raw]:
    """In the run's cache order; a removed segment where it stood, before the first
    segment that came after it in the golden."""
    matched = {r.before: r.after for r in raws if r.before is not None and r.after is not None}
    tb = {s.name: i for i, s in enumerate(before) if s.part == "tool"}
    ta = {s.name: i for i, s in enumerate(after) if s.part == "tool"}
    matched.update({tb[n]: ta[n] for n in tb if n in ta})

    def key(r: _Raw) -> tuple[int, int]:
        if r.after is not None:
            return (r.after, 0)
        later = [a for b, a in matched.items() if b is not None and r.before is not None and b > r.before]
        return (min(later, default=len(after)), -1)

    return sorted(raws, key=key)


def _place(s: SegmentLike) -> str:
    path = getattr(s, "path", "")
    return path if isinstance(path, str) else ""


def diff_segments(before: Sequence[SegmentLike], after: Sequence[SegmentLike]) -> list[SegmentChange]:
    """The changes from ``before`` (a golden's, or a lock's segments) to ``after`` by hash only,
    in the run's cache order: which segments changed, were added, removed or moved, with no
    byte offset (``offset`` 0; ``path`` the run's segment, ``""`` for a removed one from a lock)."""
    out = []
    for r in _ordered(_match(before, after), before, after):
        seg = after[r.after] if r.after is not None else before[r.before] if r.before is not None else None
        assert seg is not None
        text = _describe(r, before, after)
        out.append(SegmentChange(seg.name, r.change, _place(seg), 0, "", "", text))
    return out


def _describe(r: _Raw, before: Sequence[SegmentLike], after: Sequence[SegmentLike]) -> str:
    if r.change == "moved" and r.before is not None and r.after is not None:
        b, a = before[r.before], after[r.after]
        where = f" from {_place(b)}" if _place(b) else ""
        where += f" to {_place(a)}" if _place(a) else ""
        swap = f" (swapped with {after[r.partner].name})" if r.partner is not None else ""
        return f"{a.name} moved{where}{swap}: same bytes, another place in the prefix"
    if r.change == "added" and r.after is not None:
        a = after[r.after]
        return f"{a.name} added{' at ' + _place(a) if _place(a) else ''} ({counted(a.tokens, 'token')})"
    if r.change == "removed" and r.before is not None:
        b = before[r.before]
        return f"{b.name} removed ({counted(b.tokens, 'token')})"
    assert r.after is not None
    a = after[r.after]
    also = ""
    if r.moved_from is not None:
        also = f", and moved{' from ' + _place(before[r.moved_from]) if _place(before[r.moved_from]) else ''}"
    return f"{a.name} changed{' at ' + _place(a) if _place(a) else ''}{also}"


def diff_prefix(
    golden: tuple[str, Sequence[Any]],
    run: tuple[str, Sequence[Any]],
    *,
    provider: str | None = None,
    counter: TokenCounter | None = None,
) -> list[SegmentChange]:
    """The changes from the golden's prefix ``(system, tools)`` to the run's, in the run's
    cache order; ``[]`` when the two are byte-identical. A changed segment says the JSON path of
    its first differing field, the byte offset of the first difference inside the segment and
    the text on both sides (see :class:`SegmentChange`)."""
    gs, gt = golden
    rs, rt = run
    if gs == rs and canonical_json(list(gt)) == canonical_json(list(rt)):
        return []
    counter = counter or TokenCounter()
    provider = infer_provider(provider, rt) or infer_provider(None, gt)
    before = prefix_segments(gs, gt, provider=provider, counter=counter)
    after = prefix_segments(rs, rt, provider=provider, counter=counter)
    out = []
    for r in _ordered(_match(before, after), before, after):
        out.append(_detail(r, before, after, gt, rt))
    return out


def _detail(
    r: _Raw, before: list[Segment], after: list[Segment], gt: Sequence[Any], rt: Sequence[Any]
) -> SegmentChange:
    line = _describe(r, before, after)
    if r.change == "removed" and r.before is not None:
        b = before[r.before]
        return SegmentChange(b.name, "removed", b.path, 0, "", "", line, was=b.text[:_WINDOW])
    assert r.after is not None
    a = after[r.after]
    if r.change == "added":
        return SegmentChange(a.name, "added", a.path, 0, "", a.text[:_WINDOW], line)
    if r.change == "moved":
        return SegmentChange(a.name, "moved", a.path, 0, "", "", line)
    assert r.before is not None
    b = before[r.before]
    old, new = utf8(b.text), utf8(a.text)
    off, left, right = _bytes_divergence(old, new)
    was = old[off:].decode("utf-8", "ignore")[:_WINDOW]
    path = a.path
    if a.part == "tool":
        path = first_difference_path(gt[_tool_index(b)], rt[_tool_index(a)], a.path)
    if a.part == "system":
        where = f"{a.name} changed at {path}, byte {off:,} of the section ({a.start + off:,} of the system prompt)"
    else:
        where = f"{a.name} changed at {path}, byte {off:,} of the tool"
    if r.moved_from is not None:
        where += f" (and moved from {b.path})"
    text = f"{where}: {left!r} | {right!r} (was {was!r})"
    return SegmentChange(a.name, "changed", path, off, left, right, text, was=was)


def _tool_index(s: Segment) -> int:
    return int(s.path[len("$.tools[") : -1])


def cache_break(before: Sequence[SegmentLike], after: Sequence[SegmentLike]) -> tuple[int | None, int]:
    """(index of the first segment of ``after`` a cache filled by ``before`` cannot serve, the
    tokens of ``after`` from it on): both in cache order, a segment reusable only if it and
    every one before it are byte-identical. ``(None, 0)`` when all of ``after`` is served (it
    equals ``before``, or only drops segments at its end)."""
    for i, a in enumerate(after):
        if i >= len(before) or before[i].sha256 != a.sha256:
            return i, sum(s.tokens for s in after[i:])
    return None, 0


__all__ = [
    "ChangeKind",
    "Segment",
    "SegmentChange",
    "SegmentKind",
    "SegmentLike",
    "cache_break",
    "cache_order",
    "diff_prefix",
    "diff_segments",
    "first_difference_path",
    "infer_provider",
    "prefix_segments",
    "spoken",
    "system_path",
    "system_sections",
    "tools_first",
]
