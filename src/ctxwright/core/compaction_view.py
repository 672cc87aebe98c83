"""How recorded ``compaction`` events change the view of earlier message events.

One rule, applied by the one renderer (``core/render.py``) that the live session, resume,
the offline audit of a session export and ``ctxwright export --requests`` all use, so a
request rebuilt from the store is the request that was sent. A compaction never edits an event; it says, by event seq, which
contents are ``replace``\\ d, which events are ``drop``\\ ped, and where a ``note`` stands in for
what was removed. Later compactions win. A summary note (``replaces: "all"``) covers every
note before it; any other note replaces the earlier notes of its own layer (a trim note
counts all removals so far).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from ctxwright.core.events import CompactionEvent

T = TypeVar("T")


@dataclass
class CompactionView:
    replace: dict[int, str] = field(default_factory=dict)
    drop: set[int] = field(default_factory=set)
    notes: dict[int, tuple[str, str]] = field(default_factory=dict)  # before_seq -> (layer, text)

    def add(self, event: CompactionEvent) -> None:
        """Take one compaction event into account."""
        self.replace.update(event.replace)
        self.drop.update(event.drop)
        note = event.note
        if note is not None:
            if note.replaces_all:
                self.notes = {}
            else:
                self.notes = {k: v for k, v in self.notes.items() if v[0] != event.layer}
            self.notes[note.before_seq] = (event.layer, note.text)

    def apply(
        self, entries: Iterable[tuple[int, T]], note: Callable[[str], T], with_content: Callable[[T, str], T]
    ) -> list[tuple[int | None, T]]:
        """``(seq, message)`` entries as shown: notes inserted (``None`` seq), dropped events
        left out, replaced contents swapped in. Works on any message type through ``note``
        (make a note message) and ``with_content`` (a message with new content)."""
        pending = sorted(self.notes.items())
        out: list[tuple[int | None, T]] = []
        for seq, m in entries:
            while pending and pending[0][0] <= seq:
                out.append((None, note(pending.pop(0)[1][1])))
            if seq in self.drop:
                continue
            out.append((seq, with_content(m, self.replace[seq]) if seq in self.replace else m))
        out.extend((None, note(text)) for _, (_, text) in pending)
        return out
