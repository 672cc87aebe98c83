"""Repeated tool calls: the same tool with the same arguments, again and again in a row.

Why: a tool's result does not change when it is called again with the same arguments, but
a model that did not take it in (a weak model, a long context, a result it did not expect)
asks again -- and again, one model call each time, until the iteration cap ends the run
with nothing. The book's status bar answers "how often did I call this?" by code for the
same reason: a model cannot count its own trajectory. So the loop (``agent/loop.py``)
counts identical calls in a row here, tells the model once the count passes the limit (a
note on that result, and a status-bar line, ``status/bar.py``), and ends the run with stop
reason ``repeated_tool_call`` if the model still goes on. One rule, read by both, so the
status bar says exactly what the loop enforces.

"In a row" runs over the tool calls since the latest user message, in order, across
replies and within a parallel batch; a different call (or different arguments) breaks it,
and a new user message starts afresh (a new task may rightly need the same call).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from ctxwright.core.events import AssistantEvent, Event, UserEvent
from ctxwright.core.incremental import EventFold
from ctxwright.core.messages import ToolCall, canonical_json

__all__ = ["DEFAULT_MAX_REPEATS", "RepeatTracker", "call_key", "repeat_counts", "repeat_note", "without_note"]

#: Identical calls in a row that are allowed before the model is told.
DEFAULT_MAX_REPEATS = 3


#: call_key's answers for the calls seen last: the loop and the status bar each ask for every call.
_KEYS: dict[ToolCall, tuple[str, str]] = {}
_KEYS_MAX = 4096


def call_key(call: ToolCall) -> tuple[str, str]:
    """The tool's name and its arguments as canonical JSON, so that spacing or key order
    does not make two calls differ; arguments that are not a JSON object are compared as
    sent."""
    key = _KEYS.get(call)  # a frozen call: equal calls have the same key
    if key is not None:
        return key
    try:
        args = canonical_json(call.parsed_arguments())
    except ValueError:
        args = call.arguments
    if len(_KEYS) >= _KEYS_MAX:
        _KEYS.clear()
    key = _KEYS[call] = (call.name, args)
    return key


def repeat_counts(events: Sequence[Event]) -> list[tuple[ToolCall, int]]:
    """Each tool call since the latest user message, in order, with how many identical
    calls in a row end with it (1 for a call unlike the one before)."""
    start = 0
    for i in range(len(events) - 1, -1, -1):
        if isinstance(events[i], UserEvent):
            start = i
            break
    out: list[tuple[ToolCall, int]] = []
    prev: tuple[str, str] | None = None
    n = 0
    for ev in events[start:]:
        if not isinstance(ev, AssistantEvent):
            continue
        for tc in ev.message.tool_calls:
            key = call_key(tc)
            n = n + 1 if key == prev else 1
            prev = key
            out.append((tc, n))
    return out


@dataclass
class _Run:
    out: list[tuple[ToolCall, int]] = field(default_factory=list)
    prev: tuple[str, str] | None = None
    n: int = 0


def _step(run: _Run, ev: Event) -> None:
    if isinstance(ev, UserEvent):  # a new user message starts afresh
        run.out, run.prev, run.n = [], None, 0
    elif isinstance(ev, AssistantEvent):
        for tc in ev.message.tool_calls:
            key = call_key(tc)
            run.n = run.n + 1 if key == run.prev else 1
            run.prev = key
            run.out.append((tc, run.n))


class RepeatTracker:
    """:func:`repeat_counts` kept up to date as events are appended, for the loop and the
    status bar that ask on every call: each call's arguments are parsed once, not once per
    turn for the whole session. A tracker follows one event list; given another, it starts over."""

    def __init__(self) -> None:
        self._fold = EventFold(_Run, _step)

    def tail(self, events: Sequence[Event], k: int) -> list[tuple[ToolCall, int]]:
        """``repeat_counts(events)[-k:]``."""
        return self._fold.over(events).out[-k:]


def repeat_note(call: ToolCall, count: int, limit: int) -> str:
    """What the model is told on the first call past the limit (appended to its result)."""
    return (
        f"[ctxwright: {call.name} was called with these same arguments {count} times in a row (limit {limit}); "
        "its result will not change. Use the result you have, or change the arguments or the approach: "
        "one more identical call ends the run.]"
    )


#: :func:`repeat_note` at the end of a result, as the loop appends it (after a line break)
_NOTE_AT_END = re.compile(
    r"\n?\[ctxwright: [^\n]* was called with these same arguments \d+ times in a row \(limit \d+\); "
    r"its result will not change\.[^\n]*\]\Z"
)


def without_note(content: str) -> str:
    """A result's content without the :func:`repeat_note` the loop appended to it, for a reader
    of the tool's own text: a failed call's structured error is JSON only without the note
    (the status bar's ``last_error``, ``status/bar.py``)."""
    return _NOTE_AT_END.sub("", content, count=1)
