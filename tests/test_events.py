"""Typed events: every kind round-trips through its stored payload and its export form, an
unknown kind from a newer writer is kept verbatim, and a malformed payload is one clear error."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from ctxwright.core.events import (
    KINDS,
    AssistantEvent,
    BreakerEvent,
    CompactionEvent,
    CompactionNote,
    Event,
    GateEvent,
    HookEvent,
    Offload,
    PinEvent,
    ProviderCompactionEvent,
    StatusEvent,
    SummaryFailedEvent,
    TodoEvent,
    TodoItem,
    ToolEvent,
    UnknownEvent,
    UserEvent,
    event_from_dict,
    event_from_row,
)
from ctxwright.core.messages import Message, ToolCall, Usage, canonical_json
from ctxwright.core.prefix import Prefix
from ctxwright.core.render import render
from ctxwright.core.session import Session
from ctxwright.errors import EventFormatError
from ctxwright.store.export import session_export
from ctxwright.store.sessions import Store

SRC = Path(__file__).parent.parent / "src" / "ctxwright"

EXAMPLES: list[Event] = [
    UserEvent(seq=0, created_at=1.5, message=Message(role="user", content="你好"), extra={"source": "cli"}),
    AssistantEvent(
        seq=1,
        created_at=2.0,
        message=Message(
            role="assistant", content=None, tool_calls=(ToolCall("c1", "f", '{"a": 1}'),), reasoning_content="why"
        ),
        usage=Usage(prompt_tokens=10, cached_tokens=None, raw={"x": 1}),
        call_index=0,
        finish_reason=None,
    ),
    ToolEvent(
        seq=2,
        created_at=3.0,
        message=Message(role="tool", content="r", tool_call_id="c1"),
        tool_name="f",
        ok=False,
        elapsed_ms=1.25,
        error_type="timeout",
        result_id="c1",
        chars=1,
        tokens=1,
        sha256="ab",
        offload=Offload("/tmp/x.txt", 10, 12),
        repeat_of="c0",
        compressed="extractive",
        invalid_utf8=3,
        extra={"future_field": [1, 2]},
    ),
    StatusEvent(seq=3, created_at=4.0, message=Message(role="user", content="<agent_status>\n</agent_status>")),
    CompactionEvent(
        seq=4,
        created_at=5.0,
        layer="full",
        replace={2: "[cleared]"},
        drop=(0, 1),
        note=CompactionNote(0, "summary", replaces_all=True),
        call_index=3,
        tokens_before=900,
        stage=1,
    ),
    BreakerEvent(seq=5, created_at=6.0, state="open", failures=3, reason="error", call_index=4, retry_at_call=14),
    SummaryFailedEvent(seq=6, created_at=7.0, reason="timeout", detail="slow", call_index=4),
    TodoEvent(seq=7, created_at=8.0, items=(TodoItem(1, "plan", "in_progress", 1.0, 2.0),), next_id=2),
    GateEvent(
        seq=9,
        created_at=10.0,
        call_id="c2",
        tool="send_email",
        effects="external",
        decision="deny",
        by="no_approver",
        reason="to='eve@evil.example' came from read_webpage (c1)",
        mode="ask",
        flags=({"type": "provenance", "argument": "to", "seen": [{"tool": "read_webpage", "call_id": "c1"}]},),
    ),
    HookEvent(
        seq=11,
        created_at=12.0,
        hook="before_compaction",
        tier="trim",
        layer="trim",
        decision="edited",
        call_index=6,
        duration_ms=1.5,
        kept=(3, 4),
        note="keep the freeze",
        reason="",
    ),
    ProviderCompactionEvent(
        seq=20,
        created_at=21.0,
        provider="openai-responses",
        edit="compaction",
        call_index=4,
        item={"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAA.sig"},
        score={"kept": 1, "lost": 0, "items": [{"kind": "ticket", "value": "REC-1", "how": "answered"}]},
    ),
    PinEvent(seq=10, created_at=11.0, targets=(2, 3), text="deploy to eu-west-3", by="user"),
    UnknownEvent(seq=8, created_at=9.0, name="thought", payload={"text": "from a newer writer", "n": [1]}),
]


def test_every_kind_has_an_example():
    assert {type(e) for e in EXAMPLES} >= set(KINDS.values())


@pytest.mark.parametrize("ev", EXAMPLES, ids=lambda e: e.kind)
def test_round_trip_through_the_stored_row_and_the_export_form(ev):
    payload = json.loads(canonical_json(ev.to_payload()))  # what the store keeps
    assert event_from_row(ev.seq, ev.kind, ev.created_at, payload) == ev
    as_dict = json.loads(canonical_json(ev.to_dict()))  # what a session export holds
    assert Event.from_dict(as_dict) == ev
    assert type(ev).from_dict(as_dict) == ev
    assert "seq" not in payload and as_dict["kind"] == ev.kind


def test_the_stored_payload_keeps_its_v1_shape():
    user, assistant, tool = EXAMPLES[0], EXAMPLES[1], EXAMPLES[2]
    assert user.to_payload() == {"message": {"role": "user", "content": "你好"}, "source": "cli"}
    assert set(assistant.to_payload()) == {"message", "usage", "call_index", "finish_reason"}
    assert tool.to_payload()["offload"] == {"path": "/tmp/x.txt", "chars": 10, "bytes": 12}
    comp = EXAMPLES[4].to_payload()
    assert comp["replace"] == {"2": "[cleared]"} and comp["note"] == {
        "before_seq": 0,
        "text": "summary",
        "replaces": "all",
    }


def test_a_malformed_payload_is_one_clear_error():
    with pytest.raises(EventFormatError, match=r"^tool event 3 has no message$"):
        event_from_row(3, "tool", 0.0, {"tool_name": "x"})
    with pytest.raises(EventFormatError, match="status event 1: mode 'sideways'"):
        event_from_row(1, "status", 0.0, {"message": {"role": "user", "content": "s"}, "mode": "sideways"})
    with pytest.raises(EventFormatError, match="'call_index' is str"):
        event_from_row(2, "assistant", 0.0, {"message": {"role": "assistant", "content": "a"}, "call_index": "0"})
    with pytest.raises(EventFormatError, match="compaction event 4: 'drop'"):
        event_from_row(4, "compaction", 0.0, {"layer": "trim", "drop": "1,2"})
    with pytest.raises(EventFormatError, match="no kind"):
        event_from_dict({"seq": 1})
    with pytest.raises(EventFormatError, match="not a tool event"):
        ToolEvent.from_dict(EXAMPLES[0].to_dict())


def test_an_unknown_kind_from_a_newer_writer_survives_resume_render_and_export(store):
    s = Session.start(Prefix.build("sys"), store=store)
    s.add_user("q")
    s.add_assistant(Message(role="assistant", content="a"))
    con = sqlite3.connect(store.path)  # a newer ctxwright appended a kind this build does not know
    con.execute(
        "INSERT INTO events (session_id, seq, kind, created_at, payload_json) VALUES (?, 2, 'thought', 3.0, ?)",
        (s.id, '{"text":"kept","weights":[0.5]}'),
    )
    con.commit()
    con.close()
    resumed = Session.resume(Store(store.path), s.id)
    unknown = resumed.events[2]
    assert isinstance(unknown, UnknownEvent) and unknown.kind == "thought"
    assert unknown.payload == {"text": "kept", "weights": [0.5]}
    assert render(resumed.prefix, resumed.events) == s.messages()  # not a message: not rendered
    resumed.add_user("next")  # appending goes on after it
    assert [e.seq for e in resumed.events] == [0, 1, 2, 3]
    exported = session_export(store, s.id)["events"][2]
    assert exported == {"seq": 2, "kind": "thought", "created_at": 3.0, "text": "kept", "weights": [0.5]}


def test_append_assigns_seq_and_persists_typed_events(store):
    s = Session.start(Prefix.build("sys"), store=store)
    ev = s.append(SummaryFailedEvent(reason="error", detail="x", call_index=0))
    legacy = s.append("breaker", {"state": "closed", "call_index": 1})  # the form before typed events
    assert (ev.seq, legacy.seq) == (0, 1) and isinstance(legacy, BreakerEvent) and legacy.state == "closed"
    assert Store(store.path).events(s.id) == s.events
    with pytest.raises(EventFormatError):
        s.append("breaker", {"state": "ajar"})
    assert len(s.events) == 2  # nothing recorded for a malformed event


def test_no_kind_strings_or_payload_keys_read_outside_events_py():
    """The point of typed events: one module knows kind names and payload keys. (A session has
    a kind too -- run, proxy, framework -- and one module knows those: cli/sessions.py.)"""
    bad = re.compile(r"\.kind\s*(==|!=|in\b)|\.payload\s*[\[.]|\bev\.get\(\"kind\"\)")
    owners = {Path("core/events.py"), Path("cli/sessions.py")}
    offenders = [
        f"{p.relative_to(SRC)}:{n}"
        for p in SRC.rglob("*.py")
        if p.relative_to(SRC) not in owners
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if bad.search(line)
    ]
    assert offenders == []
