"""The steps a round's tool results go through before they are recorded, assembled in one place.

``core/results.py`` says what a step is and why the order is what it is: sanitize
(``defence/record.py``) -> budget/offload (``compaction/manager.py``, or with compaction off
the plain character cap here) -> mark (``defence/record.py``) -> the side-channel timestamp.
The loop (``agent/loop.py``) builds one :class:`~ctxwright.core.results.ResultDraft` per
call from the tool's outcome, runs :func:`result_steps` over the round, and records each
draft with ``Session.add_result``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial

from ctxwright.compaction.budget import ByteScan, sanitize
from ctxwright.compaction.manager import ContextManager
from ctxwright.core.messages import ToolCall
from ctxwright.core.results import ResultDraft, ResultStep
from ctxwright.core.session import Session
from ctxwright.defence.levels import Features
from ctxwright.defence.record import Sanitize, mark
from ctxwright.tools.registry import ToolOutcome

__all__ = ["Cap", "drafts_of", "result_steps"]


def drafts_of(calls: Sequence[ToolCall], outcomes: Sequence[ToolOutcome]) -> list[ResultDraft]:
    """One draft per call, from what the registry (or the loop, for a timeout) returned."""
    return [
        ResultDraft(
            call,
            o.content,
            ok=o.ok,
            elapsed_ms=o.elapsed_ms,
            error_type=o.error_type,
            source=o.source,
            external=o.external,
            skill=o.skill,
        )
        for call, o in zip(calls, outcomes, strict=False)
    ]


@dataclass(frozen=True)
class Cap:
    """The budget step when compaction is off: a hard cap on one result's characters, so one
    huge output cannot fill the window; text that is not valid UTF-8 becomes U+FFFD (no
    provider accepts it). A large bytes result is decoded a slice at a time, keeping only
    the head and tail it shows (``compaction/budget.py`` says why)."""

    max_chars: int

    def __call__(self, drafts: list[ResultDraft]) -> list[ResultDraft]:
        return [replace(d, content=self.one(d.content)) for d in drafts]

    def one(self, content: str | bytes) -> str:
        n = self.max_chars
        if isinstance(content, bytes):
            scan = ByteScan(n * 3 // 4, n // 4)
            for _ in scan.watch(content):
                pass
            if scan.chars > n:
                return self._capped(scan.head, scan.tail, scan.chars)
            content = content.decode("utf-8", "surrogateescape")
        content = sanitize(content)[0]
        if len(content) <= n:
            return content
        return self._capped(content[: n * 3 // 4], content[-(n // 4) :], len(content))

    def _capped(self, head: str, tail: str, total: int) -> str:
        return (
            f"{head}\n[... ctxwright: {total - len(head) - len(tail):,} characters omitted; the "
            f"tool returned {total:,} characters, over the {self.max_chars:,}-character cap. Ask for a "
            f"smaller slice (offset/limit) if you need the middle ...]\n{tail}"
        )


def result_steps(
    session: Session,
    defence: Features,
    context: ContextManager | None,
    max_result_chars: int,
    stamp: Callable[[str], str] | None = None,
) -> list[ResultStep]:
    """The steps, in order: sanitize, budget (the compaction layers' record-time part, else
    the character cap), mark, and the timestamp (``stamp``) when timestamps are on."""
    budget: ResultStep = partial(context.process_batch, session) if context is not None else Cap(max_result_chars)
    steps: list[ResultStep] = [Sanitize(defence), budget, mark]
    if stamp is not None:
        steps.append(lambda drafts: [replace(d, content=stamp(d.text)) for d in drafts])
    return steps
