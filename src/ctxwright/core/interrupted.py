"""Tool rounds a run left open: answered as interrupted before the next request.

Why: a reply that asks for tools is stored the moment it arrives, and each result when its
tool finishes. Ctrl-C, a crash or ``kill -9`` in between leaves calls without results, and
the next request would carry an assistant message whose ``tool_calls`` are not all followed
by ``tool`` messages: OpenAI rejects it with HTTP 400 ("An assistant message with
'tool_calls' must be followed by tool messages responding to each 'tool_call_id'"), on
every later resume, so the session was lost for good (``compaction/pairing.py`` states the
rule; ``tests/fakeserver.py`` enforces it the way OpenAI does).

So before the next request, every call of the last round that has no result gets one: a
``tool`` event flagged ``interrupted`` (``core/events.py``) whose content tells the model
the call was not completed and may have partially run -- never that it failed or did
nothing, since a tool killed halfway may have written a file or sent a message. It is an
ordinary recorded event: appended, stored, rendered like any result, and still there on
every later resume.

A session written by an earlier release may also hold an open round *followed by* other
messages (the follow-up that was then rejected). An answer appended at the end would not
follow its call, so that round is shown differently instead: one ``compaction`` event
(layer ``interrupted:<seq>``) drops the round's assistant turn and its partial results from
the view and puts a note in their place saying which calls were interrupted. Nothing is
deleted; requests before it are unchanged, and every request after it was rejected anyway.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ctxwright.core.compaction_view import CompactionView
from ctxwright.core.events import AssistantEvent, CompactionEvent, CompactionNote, Event, MessageEvent, ToolEvent
from ctxwright.core.messages import ToolCall, canonical_json

if TYPE_CHECKING:
    from ctxwright.core.session import Session

#: ``error_type`` of an interrupted answer, as the registry's error results name theirs.
ERROR_TYPE = "interrupted"


@dataclass(frozen=True)
class OpenRound:
    """An assistant turn with tool calls that not every result answers."""

    assistant_seq: int
    missing: tuple[ToolCall, ...]
    answered_seqs: tuple[int, ...]
    #: no message follows the round: its answers can be appended
    at_end: bool


def open_rounds(events: list[Event]) -> list[OpenRound]:
    """Every open round of ``events``, oldest first; one a compaction already dropped is not
    open (the provider never sees it)."""
    view = CompactionView()
    for ev in events:
        if isinstance(ev, CompactionEvent):
            view.add(ev)
    out: list[OpenRound] = []
    current: AssistantEvent | None = None
    pending: dict[str, ToolCall] = {}
    answered: list[int] = []

    def close(at_end: bool) -> None:
        if current is not None and pending and current.seq not in view.drop:
            out.append(OpenRound(current.seq, tuple(pending.values()), tuple(answered), at_end))

    for ev in events:
        if isinstance(ev, ToolEvent):
            if pending.pop(ev.message.tool_call_id or "", None) is not None:
                answered.append(ev.seq)
            continue
        if not isinstance(ev, MessageEvent):
            continue  # compactions, TODO changes, breaker states: not messages of the trajectory
        close(at_end=False)
        current, pending, answered = None, {}, []
        if isinstance(ev, AssistantEvent) and ev.message.tool_calls:
            current = ev
            pending = {tc.id: tc for tc in ev.message.tool_calls}
    close(at_end=True)
    return out


def interrupted_content(call: ToolCall) -> str:
    """The result recorded for an interrupted call, in the tool registry's error shape."""
    body = {
        "error": {
            "type": ERROR_TYPE,
            "message": f"the run was interrupted (Ctrl-C, a crash or a kill) while {call.name} was pending: the "
            "call was not completed, and it may have partially run",
            "tool": call.name,
            "arguments": call.arguments,
            "hint": "check whether its effect already happened before calling it again; repeat it only if that is safe",
        }
    }
    return canonical_json(body)


def close_open_rounds(session: Session, stamp: Callable[[str], str] = str) -> list[tuple[ToolCall, ToolEvent]]:
    """Answer the last round's unanswered calls as interrupted, and hide older open rounds
    behind a note (module docstring). Returns the calls answered and their new events."""
    answered: list[tuple[ToolCall, ToolEvent]] = []
    for rnd in open_rounds(session.events):
        if rnd.at_end:
            for call in rnd.missing:
                ev = session.add_tool_result(
                    call.id,
                    stamp(interrupted_content(call)),
                    tool_name=call.name,
                    ok=False,
                    error_type=ERROR_TYPE,
                    interrupted=True,
                )
                answered.append((call, ev))
            continue
        names = ", ".join(f"{c.name} ({c.id})" for c in rnd.missing)
        session.append(
            CompactionEvent(
                layer=f"{ERROR_TYPE}:{rnd.assistant_seq}",
                drop=(rnd.assistant_seq, *rnd.answered_seqs),
                note=CompactionNote(
                    rnd.assistant_seq,
                    f"[ctxwright: a tool round was interrupted here and its calls {names} were not completed "
                    "(they may have partially run); the round is not shown.]",
                ),
            )
        )
    return answered


__all__ = ["ERROR_TYPE", "OpenRound", "close_open_rounds", "interrupted_content", "open_rounds"]
