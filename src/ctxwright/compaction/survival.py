"""The survival contract: what the user declared must outlive a compaction, and whether it did.

Why: the ledger (``ledger.py``) lists every identifier a compaction hid, but a user cares most
about a few facts that are not identifiers at all -- the task, the open steps of the plan, the
files touched, the error still to fix, the rule they gave once ("never edit setup.py"). The
complaint against every agent is the same: a compaction drops exactly these, silently. So
``CompactionConfig(keep=[...])`` declares them, and after each compaction ctxwright takes the
declared items out of what the compaction hid and checks each one is still in view -- in the
compaction's note or summary, in a message it kept, in the system prompt or the status bar --
with the ledger's own matcher (:class:`~ctxwright.compaction.ledger.Seen`: the item stands there
verbatim, as a whole). The result is stored in the compaction event's ledger payload under
``"survival"``: each item's kind, its text, kept or lost, and where it was found.

The declarations (strings, or :class:`Keep` for a named pattern):

``"task"``
    the task: the first user message (its first :data:`MAX_TEXT` characters, cut at a word
    end). Checked on every compaction, hidden or not -- ctxwright's tiers never cut it
    (``pinned.py``), so a lost task is a bug, and the report shows it kept.
``"todos"``
    the open TODO items (pending or in progress) of the session's list (``status/todo.py``)
    whose text stood in a hidden event: the plan the model wrote down must still be readable.
``"files"``
    the paths and file names (the ledger's ``path`` and ``file`` kinds, ``identifiers.py``) in
    the hidden assistant turns (their tool calls' arguments included) and tool results: the
    files the agent touched.
``"errors"``
    the first line of each hidden failed tool result whose tool has not succeeded since: the
    error not yet fixed.
``"constraints"``
    each sentence of a hidden user message that holds one of the words of :data:`CONSTRAINT`
    (must, never, always, only, don't, do not, make sure, avoid, ...): one rule, no guessing --
    a sentence with such a word is a constraint, whole.
any other string, or ``Keep(name, pattern)``
    a regular expression: each match in a hidden event's text is an item (of kind ``name``;
    the pattern itself for a bare string).

Bookkeeping only, like the ledger: nothing here changes a request, and the result is bounded
(:data:`MAX_ITEMS` listed, lost first; the counts cover all).

The same contract judges requests where no session is at hand (``ctxwright gate --keep``):
:meth:`Contract.lost_items` takes the turns of a request and the ones the next request no
longer holds (the named rule ``compaction_lost_item``, ``audit/rules/``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ctxwright.compaction.identifiers import extract_kinds
from ctxwright.compaction.ledger import ItemCache, Seen, appears, candidate_lines
from ctxwright.core.events import (
    AssistantEvent,
    Event,
    MessageEvent,
    TodoEvent,
    ToolEvent,
    UserEvent,
)
from ctxwright.defence.marking import TAG, unwrap

VERSION = 1
#: the built-in kinds, in the order a report lists them
KINDS = ("task", "todos", "files", "errors", "constraints")
#: characters of one item's text (a task, an error line, a constraint) kept and checked
MAX_TEXT = 200
#: items listed per compaction (lost first); the counts cover every item
MAX_ITEMS = 100
#: items taken per kind and compaction (a hidden log of 10,000 paths is not 10,000 items)
MAX_PER_KIND = 200
#: characters of one hidden event's text scanned (the ledger's bound)
SCAN_CHARS = 50_000

#: the words that make a sentence of a user message a constraint
CONSTRAINT = re.compile(
    r"\b(?:must(?:n't| not)?|never|always|only|do(?:n't| not)|does(?:n't| not)|avoid|make sure|"
    r"should(?:n't| not)|no longer|at most|at least)\b",
    re.IGNORECASE,
)
#: what the path pattern reads in the closing tag of an untrusted result's wrapper
#: (``defence/marking.py``): on every such result, and no file
_WRAPPER_END = f"/{TAG}"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_LIST_MARK = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")


@dataclass(frozen=True)
class Keep:
    """A named pattern to keep: each match of ``pattern`` (a regular expression) in what a
    compaction hides is an item of kind ``name``."""

    name: str
    pattern: str

    def __post_init__(self) -> None:
        if not self.name or self.name in KINDS:
            raise ValueError(f"compaction keep: Keep name {self.name!r} must be a new, non-empty name")
        _compile(self.pattern)


def _compile(pattern: str) -> re.Pattern[str]:
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        raise ValueError(
            f"compaction keep: {pattern!r} is neither a kind ({', '.join(KINDS)}) nor a valid regular "
            f"expression ({exc}); give a kind or a pattern"
        ) from None
    if rx.match(""):
        raise ValueError(f"compaction keep: the pattern {pattern!r} matches the empty text; give one that needs text")
    return rx


@dataclass(frozen=True)
class Turn:
    """One message as the contract reads it: its role (``user``, ``assistant``, ``tool``), its
    text, the arguments of its tool calls (an assistant's), the tool a result came from, and
    whether that result reports a failure."""

    role: str
    text: str
    calls: str = ""
    tool: str | None = None
    failed: bool = False


@dataclass(frozen=True)
class Declared:
    """One item at stake: its kind, its text and the turn (event seq or message index) it came from."""

    kind: str
    text: str
    at: int


class Contract:
    """The parsed ``keep`` declarations (:func:`contract`); raises ``ValueError`` on a bad one."""

    def __init__(self, keep: Iterable[str | Keep]) -> None:
        kinds: list[str] = []
        patterns: list[tuple[str, re.Pattern[str]]] = []
        for k in keep:
            if isinstance(k, Keep):
                patterns.append((k.name, _compile(k.pattern)))
            elif isinstance(k, str) and k in KINDS:
                if k not in kinds:
                    kinds.append(k)
            elif isinstance(k, str):
                patterns.append((k, _compile(k)))
            else:
                raise ValueError(f"compaction keep: {k!r} is not a kind name, a pattern or a Keep(name, pattern)")
        self.kinds = tuple(kinds)
        self.patterns = tuple(patterns)

    @property
    def declared(self) -> list[str]:
        return [*self.kinds, *(n for n, _ in self.patterns)]

    def __bool__(self) -> bool:
        return bool(self.kinds or self.patterns)

    def items(
        self,
        turns: Sequence[tuple[int, Turn]],
        hidden: Collection[int],
        todos: Sequence[str] = (),
        known: Callable[[int], Sequence[tuple[str, str]] | None] | None = None,
    ) -> list[Declared]:
        """The declared items at stake when the turns at ``hidden`` are hidden: ``turns`` every
        turn in order (by seq or index), ``todos`` the open TODO items' texts, ``known`` the
        identifiers (kind, value) of a turn when already found (the ledger's :class:`ItemCache
        <ctxwright.compaction.ledger.ItemCache>`: scanning a large result again with every
        pattern was most of a check's time)."""
        out: list[Declared] = []
        seen: set[tuple[str, str]] = set()

        per_kind: dict[str, int] = {}

        def add(kind: str, text: str, at: int) -> bool:
            """Take the item unless it is a repeat; ``False`` once the kind has its fill."""
            if text and (kind, text) not in seen and per_kind.get(kind, 0) < MAX_PER_KIND:
                seen.add((kind, text))
                out.append(Declared(kind, text, at))
                per_kind[kind] = per_kind.get(kind, 0) + 1
            return per_kind.get(kind, 0) < MAX_PER_KIND

        hidden_turns = [(at, t) for at, t in turns if at in hidden]
        if "task" in self.kinds:
            task = next(((at, t) for at, t in turns if t.role == "user"), None)
            if task is not None:
                add("task", clip(task[1].text), task[0])
        if "todos" in self.kinds:
            for item in todos:
                where = next((at for at, t in hidden_turns if appears(item, _all(t)[:SCAN_CHARS])), None)
                if where is not None:
                    add("todos", item, where)
        if "files" in self.kinds:
            for at, t in hidden_turns:
                if t.role not in ("assistant", "tool"):
                    continue
                found = known(at) if known is not None else None
                if found is None:
                    found = extract_kinds(candidate_lines(_all(t)[:SCAN_CHARS]), limit=MAX_PER_KIND)
                paths = (v for k, v in found if k in ("path", "file") and v != _WRAPPER_END)
                if not all(add("files", value, at) for value in paths):
                    break
        if "errors" in self.kinds:
            last_ok = {t.tool: i for i, (_, t) in enumerate(turns) if t.role == "tool" and not t.failed}
            for i, (at, t) in enumerate(turns):
                fixed = t.tool is not None and last_ok.get(t.tool, -1) > i  # the same tool succeeded since
                if at in hidden and t.role == "tool" and t.failed and not fixed:
                    add("errors", clip(_first_line(t.text)), at)
        if "constraints" in self.kinds:
            for at, t in hidden_turns:
                if t.role == "user":
                    for sentence in constraints(t.text):
                        add("constraints", sentence, at)
        for name, rx in self.patterns:
            for at, t in hidden_turns:
                if not all(add(name, m.group(0).strip(), at) for m in rx.finditer(_all(t)[:SCAN_CHARS])):
                    break
        return out

    def lost_items(
        self, turns: Sequence[tuple[str, str, str | None, bool]], hidden: Collection[int], seen: Sequence[str]
    ) -> list[tuple[str, str, int]]:
        """The declared items of a request's messages ``turns`` (role, text with any call
        arguments, the tool of a result, failed) that the next request no longer holds
        (``hidden``: their indices) and no text of it shows (``seen``): (kind, text, index)
        each. What the named rule ``compaction_lost_item`` asks (``audit/rules/``)."""
        parsed = [
            (i, Turn(role, text, calls=text if role == "assistant" else "", tool=tool, failed=failed))
            for i, (role, text, tool, failed) in enumerate(turns)
        ]
        view = Seen(seen)
        return [(d.kind, d.text, d.at) for d in self.items(parsed, hidden) if not view.shows(d.text)]


@lru_cache(maxsize=64)
def _cached(keep: tuple[str | Keep, ...]) -> Contract:
    return Contract(keep)


def contract(keep: Iterable[Any]) -> Contract:
    """The contract of ``CompactionConfig.keep`` (parsed once per distinct declaration list).
    A ``Keep`` read back from a session's recorded config is a mapping (``name``, ``pattern``):
    taken as the ``Keep`` it was, so a resumed session checks what the first run declared."""
    return _cached(tuple(_declaration(k) for k in keep))


def _declaration(k: Any) -> str | Keep:
    if isinstance(k, str | Keep):
        return k
    if isinstance(k, Mapping) and isinstance(k.get("name"), str) and isinstance(k.get("pattern"), str):
        return Keep(k["name"], k["pattern"])
    raise ValueError(f"compaction keep: {k!r} is not a kind name, a pattern or a Keep(name, pattern)")


def _all(t: Turn) -> str:
    return t.text if t.calls in ("", t.text) else f"{t.text}\n{t.calls}"


def _first_line(text: str) -> str:
    """The first line with text of a result, inside its ``<external_content>`` wrapper when it
    has one (``defence/marking.py``: the wrapper's tag is on every untrusted result)."""
    inner = unwrap(text)
    body = inner[2] if inner is not None else text
    return next((line.strip() for line in body.splitlines() if line.strip()), "")


def clip(text: str) -> str:
    """``text`` stripped, at most :data:`MAX_TEXT` characters of it, cut after a word (a cut
    inside a word would not stand whole in the view, and
    :func:`~ctxwright.compaction.ledger.appears` would call it lost). The start of the text as
    it stands, whitespace and all: an item is checked verbatim."""
    text = text.strip()
    if len(text) <= MAX_TEXT:
        return text
    cut = _LAST_SPACE.search(text[: MAX_TEXT + 1])
    return text[: cut.start()].rstrip() if cut is not None else ""


_LAST_SPACE = re.compile(r"\s+(?=\S*$)")


def constraints(text: str) -> list[str]:
    """The sentences of a user message that are constraints (:data:`CONSTRAINT`), each as it
    stands (a list mark dropped), at most :data:`MAX_TEXT` characters."""
    out: list[str] = []
    for part in _SENTENCE_END.split(text[:SCAN_CHARS]):
        sentence = _LIST_MARK.sub("", part).strip()
        if len(sentence) >= 8 and CONSTRAINT.search(sentence):
            clipped = clip(sentence)
            if clipped:
                out.append(clipped)
    return out


# -- a session's compaction ------------------------------------------------------------------
def turns_of(events: Sequence[Event], text_of: Collection[int]) -> list[tuple[int, Turn]]:
    """Every message event as a :class:`Turn`; only the events in ``text_of`` (the hidden ones,
    and the task) carry their tool-call arguments (joined only where they are read)."""
    out: list[tuple[int, Turn]] = []
    for ev in events:
        if not isinstance(ev, MessageEvent):
            continue
        m = ev.message
        if isinstance(ev, UserEvent):
            if ev.skills_announced is None:  # a skills catalog is no task and holds no rule
                out.append((ev.seq, Turn("user", m.content or "")))
        elif isinstance(ev, AssistantEvent):
            calls = "\n".join(f"{c.name} {c.arguments}" for c in m.tool_calls or ()) if ev.seq in text_of else ""
            out.append((ev.seq, Turn("assistant", m.content or "", calls=calls)))
        elif isinstance(ev, ToolEvent):
            out.append((ev.seq, Turn("tool", m.content or "", tool=ev.tool_name, failed=not ev.ok)))
    return out


def open_todos(events: Sequence[Event]) -> list[str]:
    """The texts of the pending and in-progress items of the session's latest TODO list."""
    latest = next((ev for ev in reversed(events) if isinstance(ev, TodoEvent)), None)
    if latest is None:
        return []
    return [clip(i.text) for i in latest.items if i.status in ("pending", "in_progress") and i.text.strip()]


def check(
    keep: Iterable[str | Keep],
    events: Sequence[Event],
    hidden: Collection[int],
    seen: Seen,
    *,
    note: str = "",
    replaced: Iterable[str] = (),
    system: str = "",
    known: Callable[[int], Sequence[tuple[str, str]] | None] | None = None,
) -> dict[str, Any] | None:
    """The survival record of one compaction (``None`` when nothing is declared): ``hidden``
    the event seqs it hides, ``seen`` what the model sees after it (the ledger's index),
    ``note`` its note, ``replaced`` the contents it put in place of others (summaries,
    placeholders), ``system`` the system prompt -- to say *where* a kept item was found;
    ``known``: the identifiers the ledger found in an event, by seq (:meth:`Contract.items`)."""
    c = contract(keep)
    if not c:
        return None
    turns = turns_of(events, hidden)
    found = c.items(turns, hidden, open_todos(events) if "todos" in c.kinds else (), known)
    summaries = [r for r in replaced if r]
    marked: list[dict[str, Any]] = []
    for d in found:
        where = _where(d.text, seen, note, summaries, system)
        marked.append({"kind": d.kind, "text": d.text, "kept": where is not None, "where": where, "seq": d.at})
    lost = [m for m in marked if not m["kept"]]
    kept = [m for m in marked if m["kept"]]
    listed = (lost + kept)[:MAX_ITEMS]
    out: dict[str, Any] = {
        "version": VERSION,
        "declared": c.declared,
        "kept": len(kept),
        "lost": len(lost),
        "items": listed,
    }
    if len(marked) > len(listed):
        out["items_omitted"] = len(marked) - len(listed)
    return out


def _where(text: str, seen: Seen, note: str, summaries: Sequence[str], system: str) -> str | None:
    """Where ``text`` stands after the compaction: its ``note``, a ``summary`` it put in place
    of a hidden content, the ``system prompt``, or the ``view`` (a kept message, the status
    bar); ``None``: nowhere -- lost."""
    if not seen.shows(text):
        return None
    if note and appears(text, note):
        return "note"
    if any(appears(text, s) for s in summaries):
        return "summary"
    if system and appears(text, system):
        return "system prompt"
    return "view"


def ledger_fields(
    keep: Iterable[Any],
    events: Sequence[Event],
    hidden: Collection[int],
    seen: Seen,
    note: tuple[int, str] | None,
    replaced: Mapping[int, str],
    system: str,
    cache: ItemCache | None = None,
) -> dict[str, Any]:
    """What a compaction's ledger payload gets from the contract: ``{"survival": ...}``
    (:func:`check`), or nothing when ``keep`` declares nothing. ``note`` and ``replaced`` are
    the plan's (``pipeline.py``); ``cache`` the ledger's, holding the identifiers of every
    event it hid."""
    if not keep:
        return {}
    known = cache.items.get if cache is not None else None
    found = check(
        keep, events, hidden, seen, note=note[1] if note else "", replaced=replaced.values(), system=system, known=known
    )
    return {"survival": found} if found is not None else {}


# -- reading -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Item:
    kind: str
    text: str
    kept: bool
    where: str | None
    seq: int | None


@dataclass(frozen=True)
class Survival:
    """A compaction's survival record as read from its ledger payload (:func:`read`)."""

    declared: tuple[str, ...]
    kept: int
    lost: int
    items: tuple[Item, ...]
    items_omitted: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "declared": list(self.declared),
            "kept": self.kept,
            "lost": self.lost,
            "items": [
                {"kind": i.kind, "text": i.text, "kept": i.kept, "where": i.where, "seq": i.seq} for i in self.items
            ],
            "items_omitted": self.items_omitted,
        }


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def read(ledger_payload: Any) -> Survival | None:
    """The survival record in a stored ledger payload; ``None`` when it has none (nothing was
    declared, or recorded before the contract existed). Tolerant as the ledger's reader: a
    malformed item is skipped, never raised."""
    raw = ledger_payload.get("survival") if isinstance(ledger_payload, Mapping) else None
    if not isinstance(raw, Mapping):
        return None
    items = tuple(
        Item(
            i["kind"],
            i["text"],
            i.get("kept") is True,
            i["where"] if isinstance(i.get("where"), str) else None,
            i["seq"] if isinstance(i.get("seq"), int) else None,
        )
        for i in raw.get("items") or ()
        if isinstance(i, Mapping) and isinstance(i.get("kind"), str) and isinstance(i.get("text"), str)
    )
    declared = raw.get("declared")
    return Survival(
        declared=tuple(str(d) for d in declared) if isinstance(declared, list) else (),
        kept=_int(raw.get("kept")),
        lost=_int(raw.get("lost")),
        items=items,
        items_omitted=_int(raw.get("items_omitted")),
    )


__all__ = [
    "KINDS",
    "Contract",
    "Declared",
    "Item",
    "Keep",
    "Survival",
    "Turn",
    "check",
    "clip",
    "constraints",
    "contract",
    "open_todos",
    "read",
    "turns_of",
]
