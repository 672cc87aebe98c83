"""The progress events of the agent loop whose data are objects of the layers above ``core``:
the call's report, a compaction layer's report, the confirmation gate's decision.

They are :class:`~ctxwright.core.progress.ProgressEvent` subclasses like every other
event (``core/progress.py`` has the base and the rest, ``docs/events.md`` lists them all);
they live here because ``core`` must not import ``agent``, ``compaction`` or ``defence``
(``tests/test_layering.py``), and an event's fields keep their real types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ctxwright.compaction.pipeline import CompactionReport
from ctxwright.core.messages import Message, ToolCall
from ctxwright.core.progress import ProgressEvent
from ctxwright.defence.gate import GateDecision, GateRequest

if TYPE_CHECKING:  # agent/context.py imports this module
    from ctxwright.agent.context import CallReport

__all__ = ["AssistantReply", "Compacted", "GateDecided"]


@dataclass(frozen=True, kw_only=True)
class Compacted(ProgressEvent):
    """A compaction layer changed the view before a model call (``compaction/``): which
    layer, how many messages, the request's tokens before and after, the event it recorded."""

    kind: ClassVar[str] = "compaction"
    report: CompactionReport


@dataclass(frozen=True, kw_only=True)
class AssistantReply(ProgressEvent):
    """The model's reply was recorded: ``message`` (its text or tool calls) and ``report``,
    what the call cost and reused (a row of the per-call table)."""

    kind: ClassVar[str] = "assistant"
    message: Message
    report: CallReport


@dataclass(frozen=True, kw_only=True)
class GateDecided(ProgressEvent):
    """The confirmation gate decided on a call to a tool that writes or acts outside
    (``defence/gate.py``): what it was asked and what it decided; a denied call is not run."""

    kind: ClassVar[str] = "gate"
    call: ToolCall
    request: GateRequest
    decision: GateDecision
