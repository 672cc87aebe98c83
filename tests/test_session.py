"""Prefix freezing, canonical bytes, the append-only log, persistence and resume."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxwright.core.messages import Message, ToolCall, Usage, canonical_json
from ctxwright.core.prefix import Prefix
from ctxwright.core.request import ToolSpec
from ctxwright.core.session import Session
from ctxwright.errors import PrefixFrozenError, SessionNotFound
from ctxwright.store.sessions import Store

TOOLS = (
    ToolSpec.create("zeta", "last alphabetically, first in order", {"type": "object", "properties": {}}),
    ToolSpec.create("alpha", "second", {"type": "object", "properties": {"x": {"type": "string"}}}),
)


def test_prefix_refuses_changes_and_says_why():
    p = Prefix.build("sys", TOOLS)
    with pytest.raises(PrefixFrozenError, match="prompt cache"):
        p.system_prompt = "other"  # type: ignore[misc]
    with pytest.raises(PrefixFrozenError):
        p.tools = ()  # type: ignore[misc]
    with pytest.raises(PrefixFrozenError):
        del p.tools


def test_session_prefix_cannot_be_replaced():
    s = Session.start(Prefix.build("sys", TOOLS))
    with pytest.raises(PrefixFrozenError, match="new session"):
        s.prefix = Prefix.build("other")


def test_tool_order_kept_exactly():
    p = Prefix.build("sys", TOOLS)
    assert p.tool_names() == ("zeta", "alpha")
    req = Session.start(p).build_request()
    assert [t["function"]["name"] for t in req.to_wire()["tools"]] == ["zeta", "alpha"]


def test_duplicate_tool_names_refused():
    with pytest.raises(ValueError, match="duplicate"):
        Prefix.build("s", (TOOLS[0], TOOLS[0]))


@given(st.dictionaries(st.text(max_size=5), st.one_of(st.integers(), st.text(max_size=10)), max_size=6))
def test_canonical_json_is_order_independent(d):
    reordered = dict(reversed(list(d.items())))
    assert canonical_json(d) == canonical_json(reordered)


def test_canonical_json_keeps_utf8():
    assert canonical_json({"b": "温哥华", "a": 1}) == '{"a":1,"b":"温哥华"}'


def test_message_roundtrip_and_validation():
    m = Message(
        role="assistant", content=None, tool_calls=(ToolCall("c1", "alpha", '{"x": "1"}'),), reasoning_content="think"
    )
    assert Message.from_wire(m.to_wire()) == m
    assert "reasoning_content" not in m.to_wire(include_reasoning=False)
    with pytest.raises(ValueError, match="tool_call_id"):
        Message(role="tool", content="x")
    with pytest.raises(ValueError, match="unknown role"):
        Message(role="robot", content="x")  # type: ignore[arg-type]


def test_toolcall_bad_json_reports_reason():
    with pytest.raises(ValueError, match="not valid JSON"):
        ToolCall("c", "f", "{oops").parsed_arguments()
    with pytest.raises(ValueError, match="JSON object"):
        ToolCall("c", "f", "[1]").parsed_arguments()


def _fill(s: Session) -> None:
    s.add_user("hello 你好")
    s.add_assistant(
        Message(role="assistant", tool_calls=(ToolCall("c1", "alpha", '{"x":"1"}'),)),
        Usage(prompt_tokens=10, cached_tokens=None),
    )
    s.add_tool_result("c1", "result one", tool_name="alpha")
    s.add_assistant(Message(role="assistant", content="done"), Usage(prompt_tokens=20, cached_tokens=8))


def test_events_persist_as_they_happen_and_resume_renders_identical_bytes(store):
    s = Session.start(Prefix.build("sys", TOOLS), store=store, backend="scripted", model="m")
    _fill(s)
    req = s.build_request()
    s.record_call(req, Usage(prompt_tokens=5))
    # a second connection sees every event already (no commit at the end needed)
    other = sqlite3.connect(store.path)
    assert other.execute("select count(*) from events where session_id=?", (s.id,)).fetchone()[0] == 4
    assert other.execute("pragma journal_mode").fetchone()[0] == "wal"
    r = Session.resume(Store(store.path), s.id)
    assert r.build_request().canonical_bytes() == req.canonical_bytes()
    assert r.prefix.canonical() == s.prefix.canonical()
    assert r.call_count == 1
    assert [m.role for m in r.messages()] == ["system", "user", "assistant", "tool", "assistant"]


def test_resume_by_unique_id_prefix(store):
    s = Session.start(Prefix.build("sys"), store=store)
    assert Session.resume(store, s.id[:6]).id == s.id


def test_unknown_session_is_clear(store):
    with pytest.raises(SessionNotFound, match="ctxwright sessions"):
        Session.resume(store, "nope")


def test_list_sessions_and_children(store):
    parent = Session.start(Prefix.build("sys"), store=store)
    parent.add_user("first question")
    child = Session.start(Prefix.build("sys"), store=store, parent_id=parent.id)
    rows = store.list_sessions()
    assert [r["id"] for r in rows] == [parent.id]
    assert rows[0]["first_user"] == "first question"
    assert store.children(parent.id) == [child.id]


def test_rendering_is_incremental_and_append_only():
    s = Session.start(Prefix.build("sys", TOOLS))
    s.add_user("a")
    first = s.build_request().canonical_bytes()
    s.add_assistant(Message(role="assistant", content="b"))
    second = s.build_request().canonical_bytes()
    # the earlier request's messages are a byte prefix of the later one (minus closing brackets)
    assert second.startswith(first[: first.index(b'"role":"user"')])
    assert len(s.base_messages()) == 2
