"""The progress events of the agent loop whose data are objects of the layers above ``core``
(the call's report, a compaction layer's report, the confirmation gate's decision), and
:class:`CallReport`, what one model call cost and reused.

They are :class:`~ctxwright.core.progress.ProgressEvent` subclasses like every other
event (``core/progress.py`` has the base and the rest, ``docs/events.md`` lists them all);
they live here, one layer above ``compaction`` and ``defence`` and below the agent that
emits them, because ``core`` must not import ``agent``, ``compaction`` or ``defence`` and the
observers beside the agent (``telemetry/``) must not import the agent either
(``tests/test_layering.py``); an event's fields keep their real types.
``ctxwright.agent.progress`` names the same classes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from ctxwright.compaction.pipeline import CompactionReport
from ctxwright.core.messages import Message, ToolCall, Usage
from ctxwright.core.progress import ProgressEvent
from ctxwright.core.tokens import Ledger
from ctxwright.defence.gate import GateDecision, GateRequest

__all__ = ["AssistantReply", "CallReport", "Compacted", "GateDecided"]


@dataclass
class CallReport:
    """What one model call cost and reused; printed in the per-call table."""

    index: int
    prompt_tokens: int | None
    cached_tokens: int | None
    completion_tokens: int | None
    prefill_ms: float | None
    decode_ms: float | None
    ledger: Ledger
    tool_calls: int
    reusable_tokens: int | None = None
    cause: str | None = None
    divergence: str | None = None
    #: ctxwright's own time for this turn (status, layers, render, count, audit, store), not the model's
    overhead_ms: float | None = None
    compactions: list[CompactionReport] = field(default_factory=list)
    #: the backend call's wall time (retries included): shows prompt reuse on servers that
    #: report no cached tokens
    wall_ms: float | None = None
    #: what probably happened when the server's prompt tokens are far from the ledger's
    mismatch: str | None = None
    #: the provider's cache verdict (``audit/live.py: cache_record``) on a provider-caching backend
    cache: dict[str, Any] | None = None
    #: what an observer of the call needs beyond the table's row (``telemetry/``): the usage as the
    #: backend reported it (its raw object included), the reply's finish reason and model, and the
    #: live audit as stored with the call
    usage: Usage | None = None
    finish_reason: str | None = None
    response_model: str | None = None
    audit: dict[str, Any] | None = None


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
