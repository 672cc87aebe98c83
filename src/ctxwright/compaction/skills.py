"""Invariant: an activated skill's instructions stay in the context.

Why: a skill body (the ``Skill`` tool's ``<skill_content>`` result, ``skills/tools.py``) is not
a tool output whose value decays after a step or two -- it is the house rules the model
follows for the rest of the task. A layer that cleared it, marked it as noise or dropped it
with an old turn would leave an agent that keeps working without those rules, while a
second ``Skill(name)`` call would get a pointer to a body that is no longer there.

So, one rule for every layer:

* **exempt**: the layers that rewrite results (noise, repeats, clearing, archival and record-time
  compression) never pick an active skill body (:func:`body_seqs`);
* **carried**: a layer that drops turns (full compaction, trim) re-attaches, at the end of its
  note, every active skill body the view would no longer show, newest first, within
  :attr:`CompactionConfig.skill_budget_tokens` (:func:`carry_text`); the skills that do not fit
  are named in the closing line, so the model can load them again, and ``Skill(name)`` then
  returns the full body (:func:`shown_skills` is what the harness asks).

The note is part of the recorded ``compaction`` event, so the one renderer reproduces the
re-attached bytes on resume, in the audit and in an export. Which activation is a body is a
flag on the event (``ToolEvent.skill``), set by the ``Skill`` tool that returned it; events
stored before the flag existed get it from their text where they are decoded
(``core/events.py``), so this module never reads a result's text to decide.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from ctxwright.core.events import Event, ToolEvent
from ctxwright.core.messages import Message
from ctxwright.core.skill_content import SKILL_TOOL

if TYPE_CHECKING:
    from ctxwright.core.session import Session

#: First words of the line that closes a re-attachment (tests and readers find it by these).
CLOSING = "[ctxwright: skills re-attached"


def body_of(ev: Event) -> str | None:
    """The skill a recorded event's full instructions belong to (its ``skill`` flag), else
    ``None``. A result the budget layer offloaded (``ToolEvent.offload``) or a strategy
    compressed never carried the whole body to the model, so it is not one."""
    if not isinstance(ev, ToolEvent) or not ev.ok or ev.offload or ev.compressed or ev.repeat_of:
        return None
    return ev.skill


def body_seqs(events: Iterable[Event]) -> set[int]:
    """Seqs of every recorded full skill body: the layers that rewrite results skip them."""
    return {ev.seq for ev in events if body_of(ev) is not None}


def active_bodies(events: Sequence[Event]) -> list[tuple[str, str]]:
    """``(skill name, recorded content)`` of the newest full activation of each skill, newest first."""
    out: dict[str, str] = {}
    for ev in reversed(events):
        name = body_of(ev)
        if name is not None and name not in out:
            out[name] = ev.message.content if isinstance(ev, ToolEvent) and ev.message.content else ""
    return list(out.items())


def shown_skills(events: Sequence[Event], view: Iterable[Message]) -> set[str]:
    """Skills whose instructions ``view`` (the messages to send) shows byte for byte: as their
    tool result, or re-attached in a compaction note. Any full activation of a skill counts."""
    bodies: dict[str, set[str]] = {}
    for ev in events:
        name = body_of(ev)
        if name is not None and isinstance(ev, ToolEvent) and ev.message.content:
            bodies.setdefault(name, set()).add(ev.message.content)
    if not bodies:
        return set()
    texts = [m.content for m in view if m.content]
    return {name for name, contents in bodies.items() if any(c in t for c in contents for t in texts)}


def shown_in(session: Session) -> Callable[[str], bool]:
    """``SkillTools.is_shown`` for an agent on ``session`` (the harness's, a sub-agent's):
    whether the view its next request renders still shows a skill's instructions."""
    return lambda name: name in shown_skills(session.events, session.trajectory())


def carry_text(missing: list[tuple[str, str]], budget: int, count: Callable[[str], int]) -> tuple[str, list[str]]:
    """The text a dropping layer appends to its note for ``missing`` skill bodies (newest
    first), and the names re-attached. Each body goes in whole while the total stays within
    ``budget`` tokens; one that does not fit is named instead (an older, smaller one may still
    fit). Empty text when nothing is missing."""
    if not missing:
        return "", []
    kept: list[tuple[str, str]] = []
    over: list[str] = []
    used = 0
    for name, content in missing:
        n = count(content)
        if used + n <= budget:
            kept.append((name, content))
            used += n
        else:
            over.append(name)
    parts: list[str] = []
    if kept:
        parts.append(
            "[ctxwright: the instructions of skills loaded earlier in this session follow, as they were "
            "returned; they still apply]"
        )
        parts += [content for _, content in kept]
    closing = f"{CLOSING} after the compaction, newest first: "
    closing += ", ".join(n for n, _ in kept) if kept else "none"
    closing += f" ({used:,} of the {budget:,}-token skill budget)."
    if over:
        closing += f" Not re-attached, over the budget: {', '.join(over)}; call {SKILL_TOOL}(name) to load one again."
    parts.append(closing + "]")
    return "\n\n".join(parts), [n for n, _ in kept]


_OVER = re.compile(re.escape(CLOSING) + r".*? Not re-attached, over the budget: (.*?); call ")


def named_over_budget(view: Iterable[Message]) -> set[str]:
    """Skills a re-attachment's closing line in ``view`` names as over the budget."""
    out: set[str] = set()
    for m in view:
        for found in _OVER.findall(m.content or ""):
            out.update(n.strip() for n in found.split(", "))
    return out


def lost_skills(events: Sequence[Event], before: Iterable[Message], after: list[Message]) -> list[str]:
    """Skills ``before`` (a view) showed that ``after`` neither shows nor names as over the
    budget: what a compaction must never do (``pipeline.apply`` refuses such a plan)."""
    return sorted(shown_skills(events, before) - shown_skills(events, after) - named_over_budget(after))
