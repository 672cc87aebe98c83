"""A tool result on its way into the session: one typed draft, changed by an ordered list of steps.

Between the tool's return and the ``tool`` event, a result passes through steps owned by
different packages, in an order that matters (``agent/results.py`` assembles them):

1. **sanitize** (``defence/record.py``): an untrusted result's text cleaned, and whether to
   wrap it -- before the budget, so an offload file, a preview and ``read_result``'s pages all
   hold the same cleaned text;
2. **budget / offload** (``compaction/manager.py``): the cap, the offload file and its
   preview, repeat markers, a record-time strategy -- or, with compaction off, the plain
   character cap (``agent/results.py``);
3. **mark** (``defence/record.py``): the text the budget chose, wrapped as external content.

Each step takes the round's drafts and returns them changed (a step that needs the whole
round, such as a record-time strategy, sees it). What a step learns is a typed field of the
draft -- :class:`~ctxwright.core.events.BudgetRecord` (with its
:class:`~ctxwright.core.events.Offload`), :class:`~ctxwright.core.events.Sanitization` -- never a string-keyed dict, and
:meth:`Session.add_result <ctxwright.core.session.Session.add_result>` stores those fields
on the :class:`~ctxwright.core.events.ToolEvent` as they always were, byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ctxwright.core.events import BudgetRecord, Sanitization
from ctxwright.core.messages import ToolCall

__all__ = ["ResultDraft", "ResultStep", "run_steps"]


@dataclass(frozen=True)
class ResultDraft:
    """One tool call's result between the tool and the session.

    ``content`` is the tool's output at first (``bytes`` for a large binary one, decoded by
    the budget step) and the text to record at the end. ``source``: the tool whose text it
    is, when not the one called (``call_tool`` runs a deferred tool; the defences name the
    deferred one). ``external``/``sanitized``/``wrap`` are the defences' part: ``external``
    starts as the registry's word (an untrusted tool's own text) and, after the sanitize step,
    says whether the event records the text as marked external content; ``wrap``: the mark
    step wraps it. ``budget`` is compaction's part (``None`` with compaction off).
    """

    call: ToolCall
    content: str | bytes
    ok: bool = True
    elapsed_ms: float | None = None
    error_type: str | None = None
    source: str | None = None
    external: bool = False
    sanitized: Sanitization | None = None
    wrap: bool = False
    budget: BudgetRecord | None = None
    #: the skill whose full instructions this is (the ``Skill`` tool says so): compaction
    #: keeps it in the context (``compaction/skills.py``)
    skill: str | None = None

    @property
    def origin(self) -> str:
        """The tool whose text this is: ``source``, else the tool called."""
        return self.source or self.call.name

    @property
    def text(self) -> str:
        """The content as text; a step after the budget step may rely on it."""
        if isinstance(self.content, bytes):
            raise TypeError(
                f"the result of {self.call.name} ({self.call.id}) is still bytes: run the budget step first"
            )
        return self.content


#: One step: the round's drafts in, the same drafts (in order) changed out.
ResultStep = Callable[[list[ResultDraft]], list[ResultDraft]]


def run_steps(steps: Sequence[ResultStep], drafts: list[ResultDraft]) -> list[ResultDraft]:
    """The drafts through every step, in order; each step's input is dropped as it returns,
    so a tool's full output is not held once the budget step has offloaded it."""
    for step in steps:
        drafts = step(drafts)
    return drafts
