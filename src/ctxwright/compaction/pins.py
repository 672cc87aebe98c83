"""Pins: messages every compaction tier keeps whole, because the user, a tool or the model said so.

Why: the complaint about compaction heard most is that it loses what mattered -- a constraint
the user gave once, the plan, a path -- and that nobody can stop it. The task, the system
prompt and the skills catalogs are kept by rule (``pinned.py``); a pin extends that rule to
any message the session names.

A pin is a :class:`~ctxwright.core.events.PinEvent` naming event seqs, so a resumed session
(``Context.resume``, ``Harness.resume``) keeps its pins: they are read back from the events,
as everything else is. Three ways to pin:

* ``ctx.pin(seq | message | event)``: an existing message, by the user;
* ``ctx.pin("text")``: a fact the user states. It is appended as a user message, a
  ``<system-reminder>`` note (:func:`note_text`), and that note is pinned. Appended, not
  placed in the system prompt or in a compaction note: the prefix is frozen and every
  request is the last one plus new messages (the provider's cache reads the whole prefix
  again only when it changes), so a note at the end costs only its own tokens; and a fact
  carried in a summary would be at the mercy of the next summary, where a recorded message
  pinned by seq is kept byte for byte;
* ``@tool(pin=True)``: every result of that tool is pinned (``by="tool"``), and the opt-in
  ``pin`` tool (:class:`PinComponent`, ``pin_tool=True``) lets the model pin a fact: its
  result, which repeats the fact, is pinned (``by="model"``).

How the tiers keep them: the tiers that replace contents (adaptive, noise, archival,
clearing) skip :func:`pinned_seqs` (``pipeline.exempt``); the tiers that drop spans (full
compaction, trim) never cut a span holding a pinned message (``cutpoints.removable_spans``),
so a pinned tool result keeps its call and the rest of its batch; and ``check.violations``
refuses, before anything is recorded, a plan whose view lacks a pinned message as recorded.
The loss ledger lists the pins each compaction kept (:func:`ledger_fields`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ctxwright.core.events import Event, MessageEvent, PinBy, PinEvent, UserEvent
from ctxwright.core.messages import Message
from ctxwright.tools.component import Build, Component, register_core
from ctxwright.tools.registry import Tool, ToolResult

if TYPE_CHECKING:
    from ctxwright.core.session import Session

#: ``UserEvent.extra`` key of a note a text pin appended (its value: who pinned it): context
#: the user stated, never the task (``pinned.first_user_index`` skips it, as a skills catalog)
PIN_NOTE_KEY = "pin_note"
#: the name of the model's ``pin`` tool (``pin_tool=True``)
PIN_TOOL = "pin"
#: characters of a fact the model may pin in one call: a pin is a fact, not a document (the
#: context it holds is never freed); a longer one is refused with this number
MAX_PIN_CHARS = 2_000
#: characters the model may have pinned in all, over the session (resumes included: counted from
#: its ``pin`` events): pinned context is never freed, so a model pinning fact after fact would
#: otherwise fill the window until no compaction can make room; past it the tool says so
MAX_MODEL_PIN_CHARS = 16_000
#: characters of a pin's text the ledger shows
LEDGER_TEXT_CHARS = 80
#: pins a compaction's ledger lists (the newest; the count of all is kept): the ledger is
#: stored in the event and read on every resume
MAX_LEDGER_PINS = 40


def pin_events(events: Iterable[Event]) -> list[PinEvent]:
    """The session's pins, in order."""
    return [ev for ev in events if isinstance(ev, PinEvent)]


def pinned_seqs(events: Iterable[Event]) -> frozenset[int]:
    """Seqs of every pinned event: no tier replaces or drops them."""
    return frozenset(t for ev in events if isinstance(ev, PinEvent) for t in ev.targets)


def pinned_messages(events: Sequence[Event]) -> frozenset[Message]:
    """The pinned messages as recorded (what the view must still show, byte for byte)."""
    out: set[Message] = set()
    for seq in pinned_seqs(events):
        ev = events[seq] if 0 <= seq < len(events) else None
        if isinstance(ev, MessageEvent):
            out.add(ev.message)
    return frozenset(out)


def model_pinned_chars(events: Iterable[Event]) -> int:
    """Characters of the facts the model pinned so far (its ``pin`` tool's ``PinEvent`` texts)."""
    return sum(len(ev.text or "") for ev in events if isinstance(ev, PinEvent) and ev.by == "model")


def note_messages(events: Iterable[Event]) -> frozenset[Message]:
    """The notes text pins appended: never the task."""
    return frozenset(ev.message for ev in events if isinstance(ev, UserEvent) and PIN_NOTE_KEY in ev.extra)


def note_text(text: str, by: PinBy = "user") -> str:
    """The user message a text pin appends: marked as a reminder, so the model reads it as a
    standing fact and not a new request to act on."""
    who = {"user": "the user", "tool": "a tool", "model": "you"}[by]
    return f"<system-reminder>\nPinned by {who} (kept in view through every compaction):\n{text}\n</system-reminder>"


def restored_text(seq: int, content: str) -> str:
    """The note pinning a message a compaction had already hidden or shortened: its recorded
    text, appended again (the earlier view is never edited back: that would change bytes the
    provider has cached)."""
    return f"(event {seq}, which an earlier compaction had hidden or shortened)\n{content}"


def ledger_fields(events: Sequence[Event]) -> dict[str, Any]:
    """What a compaction's ledger says of the pins it kept whole: ``pinned``, each pinned
    seq with who pinned it and the start of its text (the newest :data:`MAX_LEDGER_PINS`),
    and ``pinned_total``. Empty when nothing is pinned."""
    out: list[dict[str, Any]] = []
    seen: set[int] = set()
    for pin in pin_events(events):
        for seq in pin.targets:
            if seq in seen:
                continue
            seen.add(seq)
            ev = events[seq] if 0 <= seq < len(events) else None
            text = (
                pin.text if pin.text is not None else (ev.message.content or "" if isinstance(ev, MessageEvent) else "")
            )
            entry: dict[str, Any] = {"seq": seq, "by": pin.by}
            if text:
                entry["text"] = text[:LEDGER_TEXT_CHARS]
            out.append(entry)
    if not out:
        return {}
    return {"pinned": out[-MAX_LEDGER_PINS:], "pinned_total": len(out)}


class PinTool:
    """The model's ``pin`` tool: its result is the fact, and the context pins the result.

    It refuses a fact that would take the model's pins past :data:`MAX_MODEL_PIN_CHARS`,
    counted from the bound session's events (:meth:`PinComponent.bind`)."""

    def __init__(self) -> None:
        self.events: Sequence[Event] = ()

    def pin(self, fact: str) -> ToolResult:
        """Pin a fact so it stays in your context whole through every compaction: a constraint the
        user gave, a decision, a path or identifier you will need later. Pin sparingly: a pinned
        fact is never removed.

        Args:
            fact: the fact to keep, in one or a few short lines
        """
        fact = fact.strip() if isinstance(fact, str) else ""
        if not fact:
            raise ValueError("the fact is empty: pass the text to keep")
        if len(fact) > MAX_PIN_CHARS:
            raise ValueError(
                f"the fact is {len(fact):,} characters; pin at most {MAX_PIN_CHARS:,} (the point that matters)"
            )
        used = model_pinned_chars(self.events)
        if used + len(fact) > MAX_MODEL_PIN_CHARS:
            raise ValueError(
                f"your pins already hold {used:,} of {MAX_MODEL_PIN_CHARS:,} characters and are never freed: "
                "keep this fact in your answer instead, or pin only what must outlive every compaction"
            )
        return ToolResult(f"[pinned: kept in view through every compaction]\n{fact}")

    def tool(self) -> Tool:
        # trusted: it repeats what the model wrote; effects read: it changes nothing outside
        return Tool.from_function(self.pin, name=PIN_TOOL, trust="trusted", effects="read", pin=True)


class PinComponent(Component):
    """``pin`` in the prefix (``pin_tool=True``)."""

    name = PIN_TOOL

    def __init__(self) -> None:
        self.pinner = PinTool()

    def bind(self, session: Session) -> None:
        self.pinner.events = session.events  # the live list: pins recorded later count too

    def add_tools(self, build: Build) -> None:
        register_core(build.tools, [self.pinner.tool()], "pin (pin_tool=)")

    def own_tools(self) -> list[Tool]:
        return [self.pinner.tool()]

    def fork(self) -> Component | None:
        return PinComponent()
