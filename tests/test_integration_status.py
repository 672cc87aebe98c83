"""The status bar for framework agents (``integrations/status.py``), added on the wire by the
recorder: counted by code, at the end of every request, every earlier status back where it
was sent, so each request extends the one before. Real parts: the ``openai`` SDK through the
recorder, a LangChain ``create_agent`` agent, the loopback server that rejects what OpenAI
rejects (a user message between a tool call and its result would be one)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import openai
import pytest

from ctxwright.integrations.recording import FrameworkRecorder
from ctxwright.integrations.status import WireStatus
from ctxwright.proxy.store import ProxyLog
from fakeserver import FakeOpenAIServer as F


def _call(i: int, name: str = "lookup") -> dict[str, Any]:
    return {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": json.dumps({"q": i})}}


def test_the_status_is_last_counted_by_code_and_every_request_extends_the_one_before(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    status = WireStatus(max_calls=6, limits={"lookup": 2}, clock=iter(range(1000, 2000, 7)).__next__)
    with F([F.reply_text(f"answer {i}") for i in range(4)]) as srv, FrameworkRecorder(db, status=status) as rec:
        client = openai.OpenAI(base_url=srv.url, api_key="x", http_client=rec.http_client())
        msgs: list[dict[str, Any]] = [{"role": "system", "content": "S"}, {"role": "user", "content": "go"}]
        for i in range(3):
            client.chat.completions.create(model="m", messages=msgs)
            err = '{"error": {"message": "no such key"}}' if i == 1 else f"result {i}"
            msgs += [
                {"role": "assistant", "content": None, "tool_calls": [_call(i)]},
                {"role": "tool", "tool_call_id": f"c{i}", "content": err},
            ]
        client.chat.completions.create(model="m", messages=msgs)
        sent = srv.requests
        rows = ProxyLog(rec.store).exchange_rows(rec.session_id)
    assert srv.rejected == []
    assert [r["audit"]["cause"] for r in rows] == ["first", "append", "append", "append"]
    for before, after in itertools.pairwise(sent):
        assert after["messages"][: len(before["messages"])] == before["messages"]
    last = sent[-1]["messages"][-1]["content"]
    assert last.startswith("<agent_status>") and last.endswith("</agent_status>")
    assert "calls.lookup: 3 of 2 (limit reached)" in last and "iterations_left: 2" in last
    assert "last_error: no such key" in last
    assert sum(m["content"].startswith("<agent_status>") for m in sent[-1]["messages"] if m["role"] == "user") == 4
    # the framework's own messages are untouched: every one is in the request, in order
    assert [m for m in sent[-1]["messages"] if not str(m.get("content") or "").startswith("<agent_status>")] == msgs


def test_a_new_conversation_starts_without_the_old_statuses(tmp_path: Path) -> None:
    status = WireStatus()
    first = status([{"role": "user", "content": "one"}])
    again = status([{"role": "user", "content": "another task"}])
    assert len(first) == 2 and len(again) == 2 and status.calls == 1


def test_a_langchain_agent_gets_the_status_bar_through_its_recorder(tmp_path: Path) -> None:
    pytest.importorskip("langchain_openai", reason="the langchain extra is not installed")
    from langchain.agents import create_agent
    from langchain_core.tools import tool

    from ctxwright.integrations.langchain import recorded_chat_model

    @tool
    def lookup(q: int) -> str:
        """Look something up."""
        return f"found {q}"

    body = F.completion_body({"content": None, "tool_calls": [_call(0)]}, finish_reason="tool_calls")
    with F([F.reply_json(body), F.reply_text("done")]) as srv:
        rec = FrameworkRecorder(str(tmp_path / "l.db"), status=WireStatus(max_calls=4))
        model, _ = recorded_chat_model(model="m", base_url=srv.url, api_key="x", recorder=rec)
        with rec:
            agent = create_agent(model, tools=[lookup], system_prompt="S")
            agent.invoke({"messages": [{"role": "user", "content": "go"}]})
            rows = ProxyLog(rec.store).exchange_rows(rec.session_id)
        sent = srv.requests
    assert srv.rejected == [] and [r["audit"]["cause"] for r in rows] == ["first", "append"]
    assert sent[1]["messages"][: len(sent[0]["messages"])] == sent[0]["messages"]
    assert (
        "calls.lookup: 1" in sent[1]["messages"][-1]["content"]
        and "iterations_left: 2" in sent[1]["messages"][-1]["content"]
    )
