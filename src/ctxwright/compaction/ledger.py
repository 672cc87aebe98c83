"""The loss ledger: what one compaction hid, and which of its facts the model can no longer see.

Why: a compaction's event says which events it hid and carries the summary, but not which
facts went with them. Users of every agent report the same thing -- they cannot tell what a
compaction dropped, and a summary that lost one ticket number or commit hash looks no
different from one that kept it. So every compaction records, as part of its event, per
hidden event the identifiers (the kinds :mod:`.identifiers` knows: URLs, paths, file names,
hashes, UUIDs, addresses, ports, tickets) and the numbers it contained, and whether each one
still appears anywhere in what the model sees after it (the summary, the retained messages,
the status bar, the system prompt). Those that appear nowhere are *lost from view*; the entry
also says where the hidden text can be read back (``read_result`` and the offload file, the
event id for ``recall``).

Bounded: a compaction may hide hundreds of events of thousands of identifiers each, and the
ledger is stored in the event (read on every resume and by every offline reader). It keeps at
most :data:`MAX_EVENTS` events, :data:`MAX_ITEMS_PER_EVENT` items per event and
:data:`MAX_ITEMS` in all -- lost items before visible ones -- and says how many it left out.

The ledger is bookkeeping only: the renderer never reads it, so it changes no request, and
an event stored without it (before it existed) loads and resumes byte for byte as it was.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from ctxwright.compaction.identifiers import NUMBER, extract_kinds
from ctxwright.core.events import AssistantEvent, CompactionEvent, Event, MessageEvent, ToolEvent
from ctxwright.core.messages import Message

VERSION = 1
#: hidden events listed per compaction (the count of all of them is kept)
MAX_EVENTS = 40
#: items (identifiers and numbers) listed per hidden event
MAX_ITEMS_PER_EVENT = 24
#: items listed per compaction, over all its events
MAX_ITEMS = 400
#: characters of a hidden event's text scanned for items (the start of a large result)
SCAN_CHARS = 50_000

_NUMBER = NUMBER

#: runs of lines that can hold no identifier and no number: not one character that every
#: identifier kind and every number needs one of (a digit, ``/ . : # -``), and not ending in
#: ``port`` (the port pattern reads "port" and the number on the next line)
_BARREN_LINES = re.compile(r"(?:^[^\d/.:#\n-]*(?<!port)\n)+", re.MULTILINE)


def candidate_lines(text: str) -> str:
    """``text`` with each run of lines that cannot hold an identifier or a number replaced by
    one empty line: the same identifiers and numbers, in the same order (no pattern spans a
    line but the port's one space, and the empty line keeps unrelated lines apart), found
    in one C-speed pass over the text instead of nine pattern scans of prose."""
    return _BARREN_LINES.sub("\n", text)


def items_of(text: str) -> list[tuple[str, str]]:
    """``(kind, value)`` of every identifier and number in ``text``, in order, without repeats.
    A number inside an identifier (the digits of ``PROJ-4821``) is not listed again."""
    text = candidate_lines(text[:SCAN_CHARS])
    out = extract_kinds(text, limit=10_000)
    seen = {v for _, v in out}
    joined = "\n".join(seen)
    for m in _NUMBER.finditer(text):
        v = m.group(0)
        if v in seen or v in joined:
            continue
        seen.add(v)
        out.append(("number", v))
    return out


def _is_word(ch: str) -> bool:
    """``ch`` matches ``\\w`` (a ``str`` pattern's: letters, digits of any script, ``_``)."""
    return ch.isalnum() or ch == "_"


def appears(value: str, text: str) -> bool:
    """Whether ``value`` stands in ``text`` as a whole: not as the start of a longer one
    (``.../page1`` inside ``.../page10``, ``4821`` inside ``48210``) nor the end of one.

    ``str.find`` over the occurrences and a look at the two characters around each: a
    regular expression that starts with a look-behind tries every position of ``text`` in
    turn, and was most of a compaction's time when ``text`` is a 128K-token context."""
    if not value:
        return False
    start = text.find(value)
    while start >= 0:
        end = start + len(value)
        if (start == 0 or not _is_word(text[start - 1])) and (
            end == len(text) or not (_is_word(text[end]) or text[end] == "/")
        ):
            return True
        start = text.find(value, start + 1)
    return False


_WORD = re.compile(r"\w+")


class Seen:
    """Everything the model sees after a compaction, indexed once per compaction: the text
    and the set of its words (maximal runs of ``\\w``).

    Why the words: a value that stands whole in the text (:func:`appears`) has each of its
    own words standing whole there too -- a word inside the value is bounded by the value's
    own punctuation or, at its ends, by the boundary :func:`appears` requires. So a value
    with one word not in the set is lost from view without searching the text, which is
    most lost values: one set lookup each instead of a scan of the whole context. Each
    part's words come from ``words_of`` (an :class:`ItemCache` keeps them across
    compactions: the view is mostly the same messages each time)."""

    def __init__(self, parts: Iterable[str], words_of: Callable[[str], frozenset[str]] | None = None) -> None:
        listed = list(parts)
        self.text = "\n".join(listed)
        scan = words_of or _words
        self.words: set[str] = set().union(*(scan(p) for p in listed)) if listed else set()

    def shows(self, value: str) -> bool:
        if any(w not in self.words for w in _WORD.findall(value)):
            return False
        return appears(value, self.text)


def _words(text: str) -> frozenset[str]:
    return frozenset(_WORD.findall(text))


def visible_parts(messages: Iterable[Message]) -> Iterator[str]:
    """The texts the model reads in ``messages``, one by one: contents, tool names and
    tool-call arguments."""
    for m in messages:
        yield m.content or ""
        for call in m.tool_calls or ():
            yield call.name
            yield call.arguments


def visible_text(messages: Iterable[Message]) -> str:
    """Everything the model reads in ``messages``: contents and tool-call arguments."""
    return "\n".join(visible_parts(messages))


def event_text(ev: Event, original: str | None = None) -> str:
    """The text a hidden event held: a result's original (``original``, read back from its
    offload file), else its recorded content; an assistant turn's text and call arguments."""
    if not isinstance(ev, MessageEvent):
        return ""
    if isinstance(ev, ToolEvent) and original is not None:
        return original
    if isinstance(ev, AssistantEvent):
        return visible_text([ev.message])
    return ev.message.content or ""


#: hidden events whose items an :class:`ItemCache` keeps (it starts over past this)
CACHE_EVENTS = 4_096


#: characters of visible text whose words an :class:`ItemCache` keeps (it starts over past this)
CACHE_WORD_CHARS = 16_000_000


@dataclass
class ItemCache:
    """The items of hidden events by seq, and the words of visible texts, kept across a
    session's compactions.

    Why: events never change once recorded (nor does a result's offload file), and later
    compactions hide many of the same events again (a cleared result then trimmed, an archived
    round then compacted in full); scanning up to :data:`SCAN_CHARS` characters with every
    identifier pattern again on each of them was most of a compaction's own time. Likewise
    the view after one compaction is mostly the messages the previous one saw: each
    message's words (:class:`Seen`) are found once, not on every compaction."""

    items: dict[int, list[tuple[str, str]]]
    words: dict[str, frozenset[str]]

    def __init__(self) -> None:
        self.items = {}
        self.words = {}
        self._word_chars = 0

    def get(self, seq: int, text: Callable[[], str]) -> list[tuple[str, str]]:
        found = self.items.get(seq)
        if found is None:
            if len(self.items) >= CACHE_EVENTS:
                self.items.clear()
            found = self.items[seq] = items_of(text())
        return found

    def scan(self, events: Sequence[Event], start: int, read: Callable[[int], str | None]) -> int:
        """Scan the message events from seq ``start`` on (``read``: a result's original by
        seq); returns where the next scan starts. Called before each model call, so every
        event is scanned once, soon after it is recorded, and a compaction that hides a
        hundred events finds them all scanned already."""
        for seq in range(start, len(events)):
            ev = events[seq]
            if isinstance(ev, MessageEvent):
                self.get(seq, partial(_full_text, ev, read, seq))
        return len(events)

    def words_of(self, text: str) -> frozenset[str]:
        """The words of one visible text (a message's content or a call's arguments)."""
        found = self.words.get(text)
        if found is None:
            if self._word_chars + len(text) > CACHE_WORD_CHARS:
                self.words.clear()
                self._word_chars = 0
            found = self.words[text] = _words(text)
            self._word_chars += len(text)
        return found


def _full_text(ev: Event, read: Callable[[int], str | None], seq: int) -> str:
    return event_text(ev, read(seq))


def build(
    events: Sequence[Event],
    hidden: Iterable[int],
    seen: str | Seen,
    original: Mapping[int, str] | Callable[[int], str | None] | None = None,
    cache: ItemCache | None = None,
) -> dict[str, Any]:
    """The ledger of one compaction: ``hidden`` the event seqs it hides, ``seen`` all the text
    the model sees after it (:func:`visible_text` of the view and the system prompt),
    ``original`` the full text of hidden results (their offload files) by seq, or a function
    that reads it (called only for events ``cache`` has not scanned yet). ``seen`` indexed
    (:class:`Seen`) makes each item's check a set lookup first."""
    seqs = sorted(set(hidden))
    cache = cache if cache is not None else ItemCache()
    if isinstance(seen, str):
        seen = Seen([seen], cache.words_of)
    if original is None:
        original = {}
    read: Callable[[int], str | None] = original if callable(original) else original.get
    listed: list[dict[str, Any]] = []
    budget = MAX_ITEMS
    lost_total = kept_total = 0
    for seq in seqs:
        ev = events[seq] if 0 <= seq < len(events) else None
        if ev is None:
            continue
        found = cache.get(seq, partial(_full_text, ev, read, seq))
        marked = [(kind, value, seen.shows(value)) for kind, value in found]
        lost_total += sum(1 for m in marked if not m[2])
        kept_total += sum(1 for m in marked if m[2])
        if len(listed) >= MAX_EVENTS:
            continue
        # lost first (what the ledger is for), each group in order of appearance
        ordered = [m for m in marked if not m[2]] + [m for m in marked if m[2]]
        take = ordered[: max(0, min(MAX_ITEMS_PER_EVENT, budget))]
        budget -= len(take)
        entry: dict[str, Any] = {"seq": seq, "role": ev.message.role if isinstance(ev, MessageEvent) else ev.kind}
        if isinstance(ev, ToolEvent):
            entry["tool"] = ev.tool_name
            if ev.result_id:
                entry["result_id"] = ev.result_id
            if ev.offload is not None:
                entry["file"] = ev.offload.path
            if ev.external:
                entry["external"] = True
        entry["items"] = [{"kind": k, "value": v, "visible": vis} for k, v, vis in take]
        if len(marked) > len(take):
            entry["items_omitted"] = len(marked) - len(take)
        listed.append(entry)
    out: dict[str, Any] = {"version": VERSION, "hidden": len(seqs), "lost": lost_total, "kept": kept_total}
    out["events"] = listed
    if len(seqs) > len(listed):
        out["events_omitted"] = len(seqs) - len(listed)
    return out


# -- reading ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Item:
    kind: str
    value: str
    visible: bool


@dataclass(frozen=True)
class HiddenEvent:
    """One hidden event of a ledger and where to read it back."""

    seq: int
    role: str
    tool: str | None
    result_id: str | None
    file: str | None
    external: bool
    items: tuple[Item, ...]
    items_omitted: int

    @property
    def lost(self) -> list[Item]:
        return [i for i in self.items if not i.visible]

    @property
    def read_back(self) -> str:
        """How the model (or a person) gets the hidden text back."""
        ways = [f'read_result(result_id="{self.result_id}")'] if self.result_id else []
        if self.file:
            ways.append(self.file)
        ways.append(f"recall (event {self.seq})")
        return ", ".join(ways)


@dataclass(frozen=True)
class PinnedItem:
    """A pinned event a compaction kept whole (``pins.py``), as its ledger lists it."""

    seq: int
    by: str
    text: str


@dataclass(frozen=True)
class Ledger:
    """A compaction's ledger as read from its event (:func:`read`)."""

    event_seq: int
    layer: str
    call_index: int | None
    hidden: int
    lost: int
    kept: int
    events: tuple[HiddenEvent, ...]
    events_omitted: int
    #: the pinned events it kept whole (the newest listed) and how many there were in all
    pinned: tuple[PinnedItem, ...] = ()
    pinned_total: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "event": self.event_seq,
            "layer": self.layer,
            "call_index": self.call_index,
            "hidden": self.hidden,
            "lost": self.lost,
            "kept": self.kept,
            "events_omitted": self.events_omitted,
            "events": [
                {
                    "seq": h.seq,
                    "role": h.role,
                    "tool": h.tool,
                    "result_id": h.result_id,
                    "file": h.file,
                    "external": h.external,
                    "read_back": h.read_back,
                    "lost": [{"kind": i.kind, "value": i.value} for i in h.lost],
                    "visible": [{"kind": i.kind, "value": i.value} for i in h.items if i.visible],
                    "items_omitted": h.items_omitted,
                }
                for h in self.events
            ],
            "pinned": [{"seq": p.seq, "by": p.by, "text": p.text} for p in self.pinned],
            "pinned_total": self.pinned_total,
        }


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _opt_str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def read(ev: CompactionEvent) -> Ledger | None:
    """The ledger of a stored compaction event; ``None`` when it has none (recorded before the
    ledger existed). Tolerant: a stored ledger is shown, never trusted to be well formed --
    a malformed entry or item is skipped, not raised."""
    raw = ev.ledger
    if not isinstance(raw, Mapping):
        return None
    hidden: list[HiddenEvent] = []
    for e in raw.get("events") or ():
        if not isinstance(e, Mapping) or not isinstance(e.get("seq"), int):
            continue
        items = tuple(
            Item(str(i["kind"]), str(i["value"]), bool(i.get("visible")))
            for i in (e.get("items") or ())
            if isinstance(i, Mapping) and isinstance(i.get("kind"), str) and isinstance(i.get("value"), str)
        )
        hidden.append(
            HiddenEvent(
                seq=e["seq"],
                role=str(e.get("role") or ""),
                tool=_opt_str(e.get("tool")),
                result_id=_opt_str(e.get("result_id")),
                file=_opt_str(e.get("file")),
                external=e.get("external") is True,
                items=items,
                items_omitted=_int(e.get("items_omitted")),
            )
        )
    raw_pins = raw.get("pinned")
    return Ledger(
        event_seq=ev.seq,
        layer=ev.layer,
        call_index=ev.call_index,
        hidden=_int(raw.get("hidden")),
        lost=_int(raw.get("lost")),
        kept=_int(raw.get("kept")),
        events=tuple(hidden),
        events_omitted=_int(raw.get("events_omitted")),
        pinned=tuple(
            PinnedItem(p["seq"], str(p.get("by") or ""), str(p.get("text") or ""))
            for p in (raw_pins if isinstance(raw_pins, list) else ())
            if isinstance(p, Mapping) and isinstance(p.get("seq"), int)
        ),
        pinned_total=_int(raw.get("pinned_total")),
    )


def ledgers(events: Iterable[Event]) -> list[tuple[CompactionEvent, Ledger | None]]:
    """Every compaction of a session with its ledger (``None``: recorded without one)."""
    return [(ev, read(ev)) for ev in events if isinstance(ev, CompactionEvent)]


def hidden_seqs(events: Iterable[Event]) -> set[int]:
    """Event seqs whose recorded text the view no longer shows as it was: replaced or dropped
    by a compaction (what ``recall`` searches)."""
    out: set[int] = set()
    for ev in events:
        if isinstance(ev, CompactionEvent):
            out.update(ev.replace)
            out.update(ev.drop)
    return out
