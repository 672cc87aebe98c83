"""Progress events: what a run reports while it works, one frozen dataclass per kind.

A library user passes ``on_event`` (an :data:`EventSink`) to the ``Harness`` or to a
backend's ``complete``; the CLI's printer (``cli/progress.py``) is one such sink. Each event
is a :class:`ProgressEvent`: its class says what happened, its fields carry the data, and
``kind`` (a class attribute) is the short name used in logs and JSON (``to_dict``).
``docs/events.md`` lists every event with its fields; ``tests/test_progress_events.py``
fails when one is added here or in ``agent/progress.py`` and not there.

Why typed and not ``(kind, data)`` pairs: a sink that reads ``data["elapsed_ms"]`` from a
dict breaks silently when an emitter renames a key; a field is checked by mypy at every
emitter and every sink.

The events whose data are objects of higher layers (the loop's ``CallReport``, the
compaction report, the gate's decision) live in ``agent/progress.py``: this module is
imported by the backends and MCP code, which must not import those layers
(``tests/test_layering.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from ctxwright.core.messages import ToolCall
from ctxwright.core.request import ChatRequest
from ctxwright.core.tokens import LedgerMismatch

__all__ = [
    "TO_DICT",
    "BackendFailed",
    "CompactionAhead",
    "EventSink",
    "LedgerWarning",
    "McpToolsChanged",
    "McpWarning",
    "ProgressEvent",
    "RepeatedCall",
    "RequestSent",
    "Retry",
    "SkillsCatalog",
    "SkillsWarning",
    "StatusShown",
    "Stopped",
    "StreamFallback",
    "Token",
    "ToolDone",
    "ToolStart",
    "ToolsDeferred",
    "UserInput",
    "ignore",
]


@dataclass(frozen=True, kw_only=True)
class ProgressEvent:
    """One thing a run reports as it happens.

    ``child``: the session id of the sub-agent that emitted the event (``agent/delegate.py``
    sets it with :func:`dataclasses.replace`), ``None`` for the run's own events -- a sink
    can show a sub-agent's work apart, or not at all."""

    kind: ClassVar[str] = "event"
    child: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """``{"kind": ..., field: value, ...}``: dataclass values as dicts, tuples as lists
        (JSON-friendly for dataclass data; other objects are left as they are)."""
        out: dict[str, Any] = {"kind": self.kind}
        for f in fields(self):
            out[f.name] = _plain(getattr(self, f.name))
        return out


#: A dataclass field whose metadata says ``{TO_DICT: False}`` is left out of :meth:`ProgressEvent.to_dict`:
#: data an observer reads from the live object (a call's whole request, ``agent/context.py``) but a
#: JSON log of the events must not copy at every call.
TO_DICT = "ctxwright.to_dict"


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value) if f.metadata.get(TO_DICT, True)}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


#: Receives every progress event of a run (``Harness(on_event=...)``, ``Backend.complete(on_event=...)``).
EventSink = Callable[[ProgressEvent], None]


def ignore(event: ProgressEvent) -> None:
    """The sink used when none is given."""


# -- the loop (agent/loop.py) -------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class UserInput(ProgressEvent):
    """The user's message was appended (as given, before any timestamp)."""

    kind: ClassVar[str] = "user"
    content: str


@dataclass(frozen=True, kw_only=True)
class StatusShown(ProgressEvent):
    """The status bar was appended before a model call (``status/bar.py``); ``content`` is
    the whole ``<agent_status>`` message."""

    kind: ClassVar[str] = "status"
    content: str


@dataclass(frozen=True, kw_only=True)
class CompactionAhead(ProgressEvent):
    """A deep compaction is about to happen (``compaction/pipeline.py``: a full compaction, or
    any layer about to hide many events), sent *before* it -- before its summary is written
    and before anything is recorded: ``layer`` (and ``stage`` of a full compaction), the
    ``events`` it will hide and their ``hidden_tokens``, the request's ``tokens_before``, and
    ``reprefill_tokens``, the expected cache cost: the tokens after its cut that stay in the
    request and must be prefilled again on the next call."""

    kind: ClassVar[str] = "compaction_ahead"
    layer: str
    #: 1 or 2 for a full compaction's stage, 0 for a layer without stages
    stage: int
    call_index: int
    events: int
    hidden_tokens: int
    tokens_before: int
    reprefill_tokens: int


@dataclass(frozen=True, kw_only=True)
class RequestSent(ProgressEvent):
    """A model call starts: ``index`` is its number in the session (as in the per-call
    table), ``messages`` how many messages the request has, ``request`` the request itself as
    it is sent (for an observer such as ``telemetry/``; left out of :meth:`to_dict`, which
    would otherwise copy the whole conversation at every call)."""

    kind: ClassVar[str] = "request"
    index: int
    messages: int
    request: ChatRequest | None = field(default=None, repr=False, compare=False, metadata={TO_DICT: False})


@dataclass(frozen=True, kw_only=True)
class ToolStart(ProgressEvent):
    """A tool call starts running (the calls of one reply run concurrently)."""

    kind: ClassVar[str] = "tool_start"
    call: ToolCall


@dataclass(frozen=True, kw_only=True)
class ToolDone(ProgressEvent):
    """A tool call's result was recorded: ``content`` is what the model sees (after budget,
    offload, marking and notes), ``ok`` whether the call succeeded. A call a crash left
    unanswered is reported with ``ok=False`` and ``elapsed_ms=0.0`` when the run resumes."""

    kind: ClassVar[str] = "tool"
    call: ToolCall
    content: str
    ok: bool
    elapsed_ms: float


@dataclass(frozen=True, kw_only=True)
class RepeatedCall(ProgressEvent):
    """``call`` is the ``count``-th identical call in a row, at the limit: ``note`` was added
    to its result (``core/repeats.py``); one more ends the run."""

    kind: ClassVar[str] = "repeated_call"
    call: ToolCall
    count: int
    note: str


@dataclass(frozen=True, kw_only=True)
class BackendFailed(ProgressEvent):
    """The backend raised (after its retries): the run ends with ``backend_error``;
    ``error`` is ``"ExceptionType: message"``."""

    kind: ClassVar[str] = "error"
    error: str


@dataclass(frozen=True, kw_only=True)
class Stopped(ProgressEvent):
    """The run ended without an answer: ``reason`` is ``max_iterations`` or
    ``repeated_tool_call``."""

    kind: ClassVar[str] = "stop"
    reason: str


@dataclass(frozen=True, kw_only=True)
class LedgerWarning(ProgressEvent):
    """The server's prompt tokens for call ``index`` are far from ctxwright's ledger
    (``core/tokens.py``: a dropped tools array, a cut prompt); reported once per
    ``mismatch.kind`` in a run."""

    kind: ClassVar[str] = "ledger_mismatch"
    index: int
    mismatch: LedgerMismatch


# -- the backends (backends/openai_compat.py, backends/embedded.py) -------------------------


@dataclass(frozen=True, kw_only=True)
class Token(ProgressEvent):
    """A piece of streamed answer text, during the model call (only from a backend that
    streams; the finished answer comes in the ``assistant`` event either way)."""

    kind: ClassVar[str] = "token"
    text: str


@dataclass(frozen=True, kw_only=True)
class Retry(ProgressEvent):
    """The server did not answer usably; the backend waits ``wait_s`` seconds and tries again
    (``attempt`` of ``max_retries``). ``url`` is the server's, with credentials redacted."""

    kind: ClassVar[str] = "retry"
    attempt: int
    max_retries: int
    reason: str
    wait_s: float
    url: str


@dataclass(frozen=True, kw_only=True)
class StreamFallback(ProgressEvent):
    """Streaming was switched off for this backend (the server cannot stream, or sends no
    usage in streamed replies); the call is sent again without streaming."""

    kind: ClassVar[str] = "stream_fallback"
    reason: str
    url: str


# -- skills, MCP and deferred tools (harness.py, agent/delegate.py, mcp/tools.py) ------------


@dataclass(frozen=True, kw_only=True)
class SkillsWarning(ProgressEvent):
    """A skill folder was loaded leniently or skipped (``skills/``): what was wrong."""

    kind: ClassVar[str] = "skills_warning"
    message: str


@dataclass(frozen=True, kw_only=True)
class SkillsCatalog(ProgressEvent):
    """The skills catalog was appended as a reminder (``skills_catalog="reminder"``):
    the skills it names and the message's text."""

    kind: ClassVar[str] = "skills_catalog"
    names: tuple[str, ...]
    content: str


@dataclass(frozen=True, kw_only=True)
class McpWarning(ProgressEvent):
    """An MCP tool was skipped (a name clash, a schema that cannot be used) or a changed
    server could not be listed again (``mcp/tools.py``)."""

    kind: ClassVar[str] = "mcp_warning"
    message: str


@dataclass(frozen=True, kw_only=True)
class McpToolsChanged(ProgressEvent):
    """MCP servers' tools changed (``tools/list_changed``): the model was told, in
    ``content``, which were ``added`` and ``removed``."""

    kind: ClassVar[str] = "mcp_tools_changed"
    added: tuple[str, ...]
    removed: tuple[str, ...]
    content: str


@dataclass(frozen=True, kw_only=True)
class ToolsDeferred(ProgressEvent):
    """These tools left the request's ``tools`` array and are found with ``search_tools``
    (``tools/deferred.py``); ``index`` is the ``tool_index`` mode (``none`` or ``prefix``)."""

    kind: ClassVar[str] = "tools_deferred"
    names: tuple[str, ...]
    index: str
