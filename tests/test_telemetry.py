"""OpenTelemetry export (``--otlp``): the spans that reach a real OTLP/HTTP receiver, field by
field, and a collector that misbehaves.

Real parts: the OpenTelemetry SDK and its OTLP/HTTP exporter, a receiver on 127.0.0.1 that
decodes every ``ExportTraceServiceRequest`` (``tests/otlp_receiver.py``, gzip bodies too), the
harness on the scripted backend (where the model's output must be exact: a tool call, a
compaction, a sub-agent) and on the embedded model (``slow``), the proxy in front of the
loopback upstream (``tests/proxy_upstream.py``) through the official ``openai`` and
``anthropic`` SDKs, and ``ctxwright proxy`` / ``ctxwright run`` as subprocesses. Every expected
value is read from what ctxwright stored (the calls, events and exchanges), so a span that
says something else fails.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from ctxwright import Context, Harness, ScriptedBackend, tool
from ctxwright.backends.scripted import call
from ctxwright.compaction import CompactionConfig
from ctxwright.core.events import AssistantEvent, CompactionEvent, ToolEvent
from ctxwright.core.messages import Message
from ctxwright.core.records import CallAudit, CallRecord
from ctxwright.errors import ConfigError
from ctxwright.proxy.log import proxy_session_requests
from ctxwright.proxy.serve import RecordingProxy
from ctxwright.proxy.server import ProxyConfig
from ctxwright.recipe import Recipe, backend_defaults
from ctxwright.store.sessions import Store
from ctxwright.telemetry import attributes as A
from ctxwright.telemetry import content as C
from ctxwright.telemetry.exchanges import ExchangeTracer
from ctxwright.telemetry.exporter import (
    CLOSE_TIMEOUT_S,
    EXPORT_TIMEOUT_S,
    MAX_ATTRIBUTE_CHARS,
    MAX_ATTRIBUTES,
    Exporter,
    endpoint_of,
)

sys.path.insert(0, str(Path(__file__).parent))
from otlp_receiver import Receiver, Span, dead_url
from ports import free_port, wait_listening
from proxy_upstream import Upstream

SRC = Path(__file__).resolve().parents[1] / "src"
ENV = {**os.environ, "PYTHONPATH": str(SRC)}
KEY = "sk-proj-NEVERSTORE-0123456789abcdef"
SYSTEM = "You read reports for the auditors of Zanzibar."
PROMPT = "Read pages 0 and 1 of the quarterly kumquat report."
PAGE_TEXT = "the kumquat harvest rose by eleven percent"
LEDGER_PARTS = ("system_and_tools", "skills_catalog", "tool_results", "history", "latest_user", "framing", "tools")


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver().start()
    yield r
    r.stop()


@tool
def fetch(page: int) -> str:
    """Fetch one page of the report."""
    return f"page {page}: {PAGE_TEXT}. " + "Filler about orchards and rain. " * 50


def _pages(n: int) -> list[Any]:
    """A scripted model that reads ``n`` pages, one call each, then answers."""
    calls: list[Any] = [
        Message(role="assistant", tool_calls=(call("fetch", {"page": i}, f"call_{i}"),)) for i in range(n)
    ]
    return [*calls, "The harvest rose by eleven percent."]


#: a window in which the third call's request is over the trigger: one clearing before it
COMPACTION = CompactionConfig(window_tokens=3300, keep_recent_results=1, trigger_ratio=0.5, policy="eager")


def _by_id(spans: list[Span]) -> dict[str, Span]:
    return {s.span_id: s for s in spans}


def _root(spans: list[Span]) -> Span:
    roots = [s for s in spans if not s.parent_id]
    assert len(roots) == 1, [s.name for s in roots]
    return roots[0]


def _values(spans: list[Span]) -> str:
    """Every attribute and event value of every span, and the resources, as one text to search."""
    parts = []
    for s in spans:
        parts.append(s.name)
        parts += [json.dumps(v, ensure_ascii=False) for v in s.attributes.values()]
        parts += [json.dumps(a, ensure_ascii=False) for _, a in s.events]
        parts += [json.dumps(v, ensure_ascii=False) for v in s.resource.values()]
    return "\n".join(parts)


def _check_call(span: Span, rec: CallRecord, *, provider: str, finish: str | None) -> None:
    """A ``chat`` span against the call the store recorded: every GenAI and ctxwright attribute."""
    a = span.attributes
    assert span.name == f"chat {rec.model}"
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.provider.name"] == provider
    assert a["gen_ai.request.model"] == rec.model
    assert a["gen_ai.conversation.id"] == rec.session_id == a["session.id"]
    assert a["gen_ai.request.max_tokens"] == rec.max_tokens
    assert a["gen_ai.request.temperature"] == rec.temperature
    assert a["gen_ai.usage.input_tokens"] == rec.prompt_tokens
    assert a["gen_ai.usage.output_tokens"] == rec.completion_tokens
    if rec.cached_tokens is None:
        assert "gen_ai.usage.cache_read.input_tokens" not in a
    else:
        assert a["gen_ai.usage.cache_read.input_tokens"] == rec.cached_tokens
    if finish is not None:
        assert a["gen_ai.response.finish_reasons"] == [finish]
    assert "error.type" not in a
    assert a["ctxwright.call.index"] == rec.call_index
    audit = rec.audit
    assert a["ctxwright.cache.cause"] == audit.cause
    assert a["ctxwright.cache.reusable_tokens"] == audit.reusable_prefix_tokens
    assert a["ctxwright.cache.prefix_changed"] is (audit.cause not in ("first", "append"))
    div = audit.raw.get("first_divergence")
    if div:
        assert a["ctxwright.cache.divergence.offset"] == div["byte_offset"]
        assert a["ctxwright.cache.divergence.where"] == audit.where
        assert a["ctxwright.cache.divergence.field"] == div["field"]
    else:
        assert "ctxwright.cache.divergence.offset" not in a
    for part in LEDGER_PARTS:
        assert a[f"ctxwright.ledger.{part}"] == rec.ledger[part], part
    assert a["ctxwright.ledger.total"] == rec.ledger["total"]


# -- (a) a harness run, exact, on the scripted backend --------------------------------------------------


def test_a_scripted_run_is_one_trace_with_every_attribute_as_stored(receiver: Receiver, tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    seen: list[Any] = []
    with Harness(
        SYSTEM,
        [fetch],
        backend=ScriptedBackend(_pages(2)),
        db=db,
        status=False,
        summaries=False,
        compaction=COMPACTION,
        max_tool_rounds=10,
        otlp=receiver.url,
        on_event=seen.append,
    ) as h:
        result = h.run(PROMPT)
        sid = h.session_id
    assert result.stop_reason == "final_answer"
    spans = receiver.spans  # close() flushed them: no waiting
    store = Store(db)
    calls, events = store.calls(sid), store.events(sid)
    store.close()
    # the caller's own sink still got every event, first
    assert [type(e).__name__ for e in seen].count("AssistantReply") == len(calls) == 3
    root = _root(spans)
    assert root.name == "invoke_agent ctxwright"
    assert root.attributes == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "ctxwright",
        "gen_ai.provider.name": "scripted",
        "gen_ai.request.model": "scripted",
        "gen_ai.conversation.id": sid,
        "session.id": sid,
        "ctxwright.backend": "scripted",
        "ctxwright.run.stop_reason": "final_answer",
        "ctxwright.run.iterations": 3,
        "ctxwright.run.calls": 3,
    }
    assert root.resource["service.name"] == "ctxwright" and root.scope == "ctxwright"
    # one trace, every other span a child of the root, in time order inside it
    assert {s.trace_id for s in spans} == {root.trace_id}
    assert all(s.parent_id == root.span_id for s in spans if s is not root)
    assert all(root.start_ns <= s.start_ns <= s.end_ns <= root.end_ns for s in spans)
    order = [s.name for s in sorted(spans, key=lambda s: s.start_ns) if s is not root]
    assert order == [
        "chat scripted",
        "execute_tool fetch",
        "chat scripted",
        "execute_tool fetch",
        "compaction clearing",
        "chat scripted",
    ]
    chats = sorted((s for s in spans if s.name == "chat scripted"), key=lambda s: s.attributes["ctxwright.call.index"])
    finishes = ["tool_calls", "tool_calls", "stop"]
    for span, rec, finish in zip(chats, calls, finishes, strict=True):
        _check_call(span, rec, provider="scripted", finish=finish)
        assert span.attributes["gen_ai.response.model"] == "scripted"
        assert span.attributes["ctxwright.call.tool_calls"] == (1 if finish == "tool_calls" else 0)
    # the cache break the compaction made: cause, byte offset, segment (cache/verdict.py's name)
    broken = chats[2].attributes
    assert calls[2].audit.cause == "compaction"
    assert broken["ctxwright.cache.prefix_changed"] is True
    assert broken["ctxwright.cache.divergence.segment"] == "messages"
    assert broken["ctxwright.cache.divergence.message_index"] == calls[2].audit.raw["first_divergence"]["message_index"]
    assert "ctxwright.cache.divergence.segment" not in chats[1].attributes  # an append changes nothing
    # the tools: name, call id, outcome
    tools = sorted((s for s in spans if s.name == "execute_tool fetch"), key=lambda s: s.start_ns)
    ran = [ev for ev in events if isinstance(ev, ToolEvent)]
    assert [t.attributes["gen_ai.tool.call.id"] for t in tools] == [ev.message.tool_call_id for ev in ran]
    for t, ev in zip(tools, ran, strict=True):
        assert t.attributes["gen_ai.operation.name"] == "execute_tool"
        assert t.attributes["gen_ai.tool.name"] == "fetch"
        assert t.attributes["gen_ai.tool.type"] == "function"
        assert t.attributes["gen_ai.conversation.id"] == sid
        assert t.attributes["ctxwright.tool.ok"] is True
        assert t.attributes["ctxwright.tool.result_chars"] == len(ev.message.content or "")
        assert "error.type" not in t.attributes
    # the compaction: layer, kind, tokens before and after, the call it preceded
    (comp,) = [s for s in spans if s.name.startswith("compaction")]
    (report,) = [e.report for e in seen if type(e).__name__ == "Compacted"]
    (stored,) = [ev for ev in events if isinstance(ev, CompactionEvent)]
    assert comp.attributes == {
        "ctxwright.compaction.layer": "clearing",
        "ctxwright.compaction.kind": stored.layer,
        "ctxwright.compaction.messages_changed": report.messages_changed,
        "ctxwright.compaction.tokens_before": report.tokens_before,
        "ctxwright.compaction.tokens_after": report.tokens_after,
        "ctxwright.compaction.event_seq": stored.seq,
        "ctxwright.call.index": 2,
        "gen_ai.conversation.id": sid,
        "session.id": sid,
    }
    assert report.tokens_after < report.tokens_before
    assert comp.end_ns <= chats[2].start_ns
    # no content without otlp_content: not the system prompt, the task, a tool's arguments or result
    text = _values(spans)
    for secret in (SYSTEM, PROMPT, "kumquat", PAGE_TEXT, '{"page":', "Zanzibar", "eleven percent"):
        assert secret not in text


def test_content_only_when_asked_for_and_as_the_conventions_shape_it(receiver: Receiver) -> None:
    with Harness(
        SYSTEM, [fetch], backend=ScriptedBackend(_pages(1)), db=None, status=False, otlp=receiver.url, otlp_content=True
    ) as h:
        h.run(PROMPT)
        requests = list(h.backend.requests)  # type: ignore[attr-defined]
    spans = receiver.spans
    chats = sorted((s for s in spans if s.name.startswith("chat")), key=lambda s: s.attributes["ctxwright.call.index"])
    first_in = json.loads(chats[0].attributes["gen_ai.input.messages"])
    assert first_in[0] == {"role": "system", "parts": [{"type": "text", "content": requests[0].messages[0].content}]}
    assert first_in[-1] == {"role": "user", "parts": [{"type": "text", "content": PROMPT}]}
    assert json.loads(chats[0].attributes["gen_ai.output.messages"]) == [
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "id": "call_0", "name": "fetch", "arguments": {"page": 0}}],
            "finish_reason": "tool_calls",
        }
    ]
    second_in = json.loads(chats[1].attributes["gen_ai.input.messages"])
    assert len(second_in) == len(requests[1].messages)
    response = second_in[-1]["parts"][0]
    assert response["type"] == "tool_call_response" and response["id"] == "call_0"
    assert PAGE_TEXT in response["response"]
    assert json.loads(chats[1].attributes["gen_ai.output.messages"])[0]["parts"] == [
        {"type": "text", "content": "The harvest rose by eleven percent."}
    ]
    (tool_span,) = [s for s in spans if s.name == "execute_tool fetch"]
    assert tool_span.attributes["gen_ai.tool.call.arguments"] == '{"page": 0}'
    assert PAGE_TEXT in tool_span.attributes["gen_ai.tool.call.result"]


def test_a_sub_agent_s_calls_go_under_the_delegate_call_that_ran_it(receiver: Receiver, tmp_path: Path) -> None:
    script = [
        Message(role="assistant", tool_calls=(call("delegate", {"task": "Count the pages."}, "call_d"),)),
        "Two pages.",  # the child's answer
        "The report has two pages.",  # the parent's
    ]
    with Harness(
        SYSTEM, [fetch], backend=ScriptedBackend(script), db=tmp_path / "d.db", delegate=True, otlp=receiver.url
    ) as h:
        assert h.run(PROMPT).stop_reason == "final_answer"
        sid = h.session_id
        (child,) = h.delegator.children  # type: ignore[union-attr]
    spans = receiver.spans
    by_id = _by_id(spans)
    root = _root(spans)
    (delegate,) = [s for s in spans if s.name == "execute_tool delegate"]
    child_calls = [s for s in spans if s.attributes.get("gen_ai.conversation.id") == child]
    assert [s.name for s in child_calls] == ["chat scripted"]
    assert child_calls[0].parent_id == delegate.span_id and by_id[delegate.parent_id] is root
    assert delegate.start_ns <= child_calls[0].start_ns <= child_calls[0].end_ns <= delegate.end_ns
    parent_calls = [s for s in spans if s.name == "chat scripted" and s.attributes["gen_ai.conversation.id"] == sid]
    assert len(parent_calls) == 2 and all(s.parent_id == root.span_id for s in parent_calls)
    assert root.attributes["ctxwright.run.calls"] == 2  # the run's own calls


def test_a_context_driven_by_your_own_loop_gets_one_trace_per_user_message(receiver: Receiver) -> None:
    reply = {
        "model": "gpt-x-2025",
        "choices": [{"message": {"role": "assistant", "content": "Fine."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 0}},
    }
    with Context(SYSTEM, [fetch], model="gpt-x", otlp=receiver.url) as ctx:
        for text in ("first question", "second question"):
            ctx.add_user(text)
            ctx.request()
            ctx.record(reply)
        sid = ctx.session_id
    spans = receiver.spans
    roots = [s for s in spans if not s.parent_id]
    assert [r.name for r in roots] == ["invoke_agent ctxwright"] * 2
    assert len({r.trace_id for r in roots}) == 2
    for r in roots:
        (chat,) = [s for s in spans if s.parent_id == r.span_id]
        assert chat.trace_id == r.trace_id and chat.name == "chat gpt-x"
        assert chat.attributes["gen_ai.provider.name"] == "openai"  # read off the reply's usage
        assert chat.attributes["gen_ai.response.model"] == "gpt-x-2025"
        assert chat.attributes["gen_ai.usage.input_tokens"] == 50
        assert chat.attributes["gen_ai.conversation.id"] == sid


# -- (a) on the embedded model ---------------------------------------------------------------------------


@pytest.mark.slow
def test_an_embedded_run_exports_what_the_store_recorded(receiver: Receiver, tmp_path: Path) -> None:
    db = tmp_path / "e.db"
    with Harness(
        backend="embedded",
        db=db,
        tool_choice_first="required",
        max_tool_rounds=1,
        max_tokens=160,
        otlp=receiver.url,
    ) as h:
        result = h.run("What's the current time and weather in Vancouver?")
        sid, model = h.session_id, h.backend.model
    spans = receiver.spans
    store = Store(db)
    calls, events = store.calls(sid), store.events(sid)
    store.close()
    assert result.stop_reason == "final_answer" and len(calls) == 2
    root = _root(spans)
    assert root.attributes["gen_ai.provider.name"] == "llama_cpp"
    assert root.attributes["gen_ai.request.model"] == model
    assert {s.trace_id for s in spans} == {root.trace_id}
    assert all(s.parent_id == root.span_id for s in spans if s is not root)
    chats = sorted((s for s in spans if s.name.startswith("chat")), key=lambda s: s.attributes["ctxwright.call.index"])
    replies = [ev for ev in events if isinstance(ev, AssistantEvent)]
    assert len(chats) == len(calls)
    for span, rec, reply in zip(chats, calls, replies, strict=True):
        _check_call(span, rec, provider="llama_cpp", finish=reply.finish_reason)
        assert span.attributes["ctxwright.call.prefill_ms"] == rec.prefill_ms
    assert chats[0].attributes["ctxwright.cache.cause"] == "first"
    tools = [s for s in spans if s.name.startswith("execute_tool")]
    ran = [ev for ev in events if isinstance(ev, ToolEvent)]
    assert sorted(t.attributes["gen_ai.tool.call.id"] for t in tools) == sorted(
        ev.message.tool_call_id or "" for ev in ran
    )
    assert all(t.attributes["gen_ai.tool.name"] == f"{t.name.split(' ', 1)[1]}" for t in tools)
    assert "Vancouver" not in _values(spans)


# -- (b) the proxy --------------------------------------------------------------------------------------


def test_the_proxy_exports_one_trace_per_relayed_call(
    upstream: Upstream, receiver: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "gzip")  # the receiver decodes gzip bodies too
    store = Store(tmp_path / "p.db")
    tracer = ExchangeTracer(Exporter(endpoint_of(receiver.url)), upstream=upstream.url)
    msgs: list[Any] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}]
    with RecordingProxy.start(ProxyConfig(upstream=upstream.url), store, observer=tracer) as proxy:
        client = openai.OpenAI(base_url=proxy.url + "/v1", api_key=KEY, max_retries=0)
        client.chat.completions.create(model="gpt-4o", messages=msgs, max_tokens=20, temperature=0.5)
        msgs += [{"role": "assistant", "content": "Hello there."}, {"role": "user", "content": "and page 2?"}]
        stream = client.chat.completions.create(
            model="gpt-4o", messages=msgs, max_tokens=20, stream=True, stream_options={"include_usage": True}
        )
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "Hello there."
        ant = anthropic.Anthropic(base_url=proxy.url, api_key=KEY, max_retries=0)
        ant.messages.create(
            model="claude-x", max_tokens=30, system="Another agent.", messages=[{"role": "user", "content": PROMPT}]
        )
        assert proxy.recorder.wait_idle(60, at_least=3)
    tracer.close()
    spans = receiver.spans
    assert set(receiver.encodings) == {"gzip"}
    assert len(spans) == 3 and all(not s.parent_id for s in spans)  # each call its own root
    assert len({s.trace_id for s in spans}) == 3
    chat = sorted((s for s in spans if s.name == "chat gpt-4o"), key=lambda s: s.attributes["ctxwright.call.index"])
    (claude,) = [s for s in spans if s.name == "chat claude-x"]
    sid = chat[0].attributes["gen_ai.conversation.id"]
    records = proxy_session_requests(store, sid)
    assert len(records) == 2 and records[0]["proxy"]["audit"]["cause"] == "first"
    u = upstream.usage
    for span, rec, streamed in zip(chat, records, (False, True), strict=True):
        a = span.attributes
        audit = rec["proxy"]["audit"]
        assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.provider.name"] == "openai"
        assert a["gen_ai.request.model"] == a["gen_ai.response.model"] == "gpt-4o"
        assert a["gen_ai.request.max_tokens"] == 20
        assert a["gen_ai.usage.input_tokens"] == u["prompt"]
        assert a["gen_ai.usage.cache_read.input_tokens"] == u["cached"]
        assert a["gen_ai.usage.output_tokens"] == u["completion"]
        assert "gen_ai.usage.cache_creation.input_tokens" not in a  # OpenAI reported no writes
        assert a["gen_ai.response.finish_reasons"] == ["stop"]
        assert a["gen_ai.conversation.id"] == a["session.id"] == sid
        assert a["http.response.status_code"] == 200 and a["server.address"] == "127.0.0.1"
        assert a["ctxwright.proxy.api"] == "openai_chat" and a["ctxwright.proxy.streamed"] is streamed
        assert a["ctxwright.proxy.outcome"] == "complete"
        assert a["ctxwright.cache.cause"] == audit["cause"]
        assert a["ctxwright.cache.reusable_tokens"] == audit["reusable_prefix_tokens"]
        assert a["ctxwright.proxy.grouped_by"] == audit["grouped_by"]
        assert "error.type" not in a
        started, ended = rec["proxy"]["started_at"], rec["proxy"]["ended_at"]
        assert span.start_ns == int(started * 1e9) and span.end_ns == int(ended * 1e9)
    assert chat[0].attributes["gen_ai.request.temperature"] == 0.5
    assert [s.attributes["ctxwright.call.index"] for s in chat] == [0, 1]
    c = claude.attributes
    assert c["gen_ai.provider.name"] == "anthropic"
    assert c["gen_ai.usage.input_tokens"] == u["prompt"]  # Anthropic's input + cache read, as the conventions count
    assert c["gen_ai.usage.cache_read.input_tokens"] == u["cached"]
    assert c["gen_ai.usage.cache_creation.input_tokens"] == 0
    assert c["gen_ai.response.finish_reasons"] == ["end_turn"]
    assert c["gen_ai.conversation.id"] != sid
    # no content, and the key the clients sent in their headers nowhere
    text = _values(spans)
    for secret in (KEY, SYSTEM, PROMPT, "Hello there.", "Zanzibar"):
        assert secret not in text
    store.close()


def test_the_proxy_s_content_spans_carry_messages_but_never_the_key(
    upstream: Upstream, receiver: Receiver, tmp_path: Path
) -> None:
    store = Store(tmp_path / "c.db")
    tracer = ExchangeTracer(Exporter(endpoint_of(receiver.url)), upstream=upstream.url, content=True)
    with RecordingProxy.start(ProxyConfig(upstream=upstream.url), store, observer=tracer) as proxy:
        ant = anthropic.Anthropic(base_url=proxy.url, api_key=KEY, max_retries=0)
        with ant.messages.stream(
            model="claude-x", max_tokens=30, system=SYSTEM, messages=[{"role": "user", "content": PROMPT}]
        ) as s:
            assert s.get_final_text() == "Hello there."
        assert proxy.recorder.wait_idle(60, at_least=1)
    tracer.close()
    (span,) = receiver.spans
    a = span.attributes
    assert json.loads(a["gen_ai.system_instructions"]) == [{"type": "text", "content": SYSTEM}]
    assert json.loads(a["gen_ai.input.messages"]) == [{"role": "user", "parts": [{"type": "text", "content": PROMPT}]}]
    assert json.loads(a["gen_ai.output.messages"]) == [
        {"role": "assistant", "parts": [{"type": "text", "content": "Hello there."}], "finish_reason": "end_turn"}
    ]
    assert KEY not in _values(receiver.spans)
    store.close()


class _Proxy:
    """``ctxwright proxy ...`` in a subprocess, ready once its port accepts connections."""

    def __init__(self, *args: str) -> None:
        self.port = free_port()
        cmd = [sys.executable, "-m", "ctxwright.cli.main", "proxy", "--port", str(self.port), *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
        wait_listening(self.port, self.proc, 60, "the proxy")

    def stop(self) -> tuple[str, str]:
        self.proc.send_signal(signal.SIGINT)
        out, err = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0, err
        return out, err


def test_ctxwright_proxy_otlp_sends_its_spans_before_it_exits(
    upstream: Upstream, receiver: Receiver, tmp_path: Path
) -> None:
    p = _Proxy("--upstream", upstream.url, "--db", str(tmp_path / "cli.db"), "--otlp", receiver.url, "--quiet")
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{p.port}/v1", api_key=KEY, max_retries=0)
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": PROMPT}])
    finally:
        _out, err = p.stop()
    (span,) = receiver.spans  # flushed at exit, within the bounded close
    assert span.name == "chat gpt-4o" and span.attributes["ctxwright.call.index"] == 0
    assert span.attributes["gen_ai.usage.input_tokens"] == upstream.usage["prompt"]
    assert "Traceback" not in err
    assert KEY not in _values([span]) and PROMPT not in _values([span])


def test_ctxwright_run_otlp_exports_the_run_and_never_the_key(
    receiver: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ctxwright.cli.main import main
    from fakeserver import FakeOpenAIServer

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    usage = {"prompt_tokens": 300, "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 256}}
    with FakeOpenAIServer([FakeOpenAIServer.reply_text("Eleven percent.", usage=usage)]) as srv:
        code = main(
            [
                "run",
                "--backend",
                "openai",
                "--model",
                "fake-model",
                "--base-url",
                srv.url,
                "--db",
                str(tmp_path / "run.db"),
                "--system-text",
                SYSTEM,
                "--otlp",
                receiver.url,
                PROMPT,
            ]
        )
        assert srv.recorded[0].headers.get("authorization") == f"Bearer {KEY}"
    capsys.readouterr()
    assert code == 0
    spans = receiver.spans
    root = _root(spans)
    (chat,) = [s for s in spans if s.name == "chat fake-model"]
    assert chat.parent_id == root.span_id and root.attributes["ctxwright.run.stop_reason"] == "final_answer"
    assert chat.attributes["gen_ai.provider.name"] == "openai"
    assert chat.attributes["gen_ai.usage.input_tokens"] == 300
    assert chat.attributes["gen_ai.usage.cache_read.input_tokens"] == 256
    text = _values(spans)
    for secret in (KEY, SYSTEM, PROMPT, "Eleven percent"):
        assert secret not in text


# -- (c) the options ----------------------------------------------------------------------------------


def test_the_options_are_checked_before_anything_starts() -> None:
    r = Recipe.resolve({"otlp": True}, None, backend_defaults("openai"))
    assert r.telemetry.otlp == "env" and r.telemetry.content is False
    r = Recipe.resolve({"otlp": "http://h:4318", "otlp_content": True}, None, backend_defaults("openai"))
    assert (r.telemetry.otlp, r.telemetry.content) == ("http://h:4318", True)
    assert Recipe.resolve({}, None, backend_defaults("openai")).telemetry.otlp is None
    for bad in ("localhost:4318", "ftp://h", "http://", 4318):
        with pytest.raises(ConfigError, match="OTLP/HTTP endpoint"):
            Recipe.resolve({"otlp": bad}, None, backend_defaults("openai"))
    with pytest.raises(ConfigError, match="give --otlp URL too"):
        Recipe.resolve({"otlp_content": True}, None, backend_defaults("openai"))


def test_the_endpoint_follows_the_specification_s_reading() -> None:
    assert endpoint_of("http://localhost:4318") == "http://localhost:4318/v1/traces"
    assert endpoint_of("http://localhost:4318/") == "http://localhost:4318/v1/traces"
    assert endpoint_of("http://localhost:6006/v1/traces") == "http://localhost:6006/v1/traces"
    assert endpoint_of("https://c.example/otlp/v1/traces") == "https://c.example/otlp/v1/traces"
    assert endpoint_of("env", {}) == "http://localhost:4318/v1/traces"
    assert endpoint_of("env", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}) == "http://c:4318/v1/traces"
    both = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:1/x"}
    assert endpoint_of("env", both) == "http://t:1/x"


@pytest.mark.parametrize("command", ["run", "proxy", "env"])
def test_an_otlp_url_that_does_not_parse_is_one_line_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    """``http://[::1`` made urllib raise ValueError, which ended a run as "unexpected ValueError";
    ``env``: the same URL in the environment's variable."""
    from ctxwright.cli.main import main

    bad = "http://[::1"
    db = tmp_path / "never.db"
    otlp = bad
    if command == "env":
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", bad)
        otlp = "env"
    if command == "proxy":
        argv = ["proxy", "--upstream", "http://127.0.0.1:9", "--port", str(free_port()), "--otlp", otlp]
    else:
        argv = ["run", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--otlp", otlp, "q"]
    code = main(["--db", str(db), *argv])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and "is not a URL (Invalid IPv6 URL)" in lines[0], lines
    assert "unexpected" not in err and "Traceback" not in err
    assert ("OTEL_EXPORTER_OTLP_ENDPOINT" if command == "env" else "--otlp http://[::1") in lines[0]
    assert out == ""  # refused before a session started


def test_an_otlp_port_out_of_range_is_refused() -> None:
    for bad, why in (("http://h:99999", "Port out of range"), ("http://h:port", "Port could not be cast")):
        with pytest.raises(ConfigError, match=why):
            endpoint_of(bad)
        with pytest.raises(ConfigError, match="OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
            endpoint_of("env", {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": bad})


_NO_OTEL = (
    "import sys\n"
    "sys.modules['opentelemetry.sdk'] = None  # the otel extra not installed (the API comes with mcp)\n"
    "sys.modules['opentelemetry.exporter'] = None\n"
    "from ctxwright.cli.main import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


@pytest.mark.parametrize(
    "argv",
    [
        [
            "run",
            "--backend",
            "openai",
            "--model",
            "m",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--otlp",
            "http://h:4318",
            "q",
        ],
        ["proxy", "--upstream", "http://127.0.0.1:9", "--otlp", "http://h:4318"],
    ],
)
def test_without_the_otel_extra_otlp_is_one_line(tmp_path: Path, argv: list[str]) -> None:
    db = tmp_path / "never.db"
    port = [] if argv[0] == "run" else ["--port", str(free_port())]
    done = subprocess.run(
        [sys.executable, "-c", _NO_OTEL, *argv, *port, "--db", str(db)],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and "pip install 'ctxwright[otel]'" in lines[0], lines
    assert "Traceback" not in done.stderr


# -- the attributes, without a collector -------------------------------------------------------------------


def test_anthropic_usage_counts_cache_tokens_in_the_input() -> None:
    usage = {
        "raw": {
            "provider": "anthropic",
            "usage": {
                "input_tokens": 10,
                "cache_read_input_tokens": 100,
                "cache_creation_input_tokens": 50,
                "output_tokens": 7,
            },
        }
    }
    rec = CallRecord(
        session_id="s1",
        call_index=3,
        request_sha256="",
        request_bytes=0,
        prefix_sha256="",
        prompt_tokens=160,
        cached_tokens=100,
        completion_tokens=7,
        model="claude-x",
        max_tokens=64,
        usage=usage,
        audit=CallAudit.from_dict(
            {
                "cause": "tools_changed",
                "reusable_prefix_tokens": 12,
                "first_divergence": {"message_index": None, "field": "tools", "byte_offset": 77},
                "where": "tools @77",
                "context": {"before": "SECRET-BEFORE", "after": "SECRET-AFTER"},
                "cache": {"cause": "byte_change", "agree": True},
            }
        ),
    )
    a = A.model_call(rec, provider="anthropic", finish_reason="end_turn", response_model="claude-x-1")
    assert a["gen_ai.usage.input_tokens"] == 160
    assert a["gen_ai.usage.cache_read.input_tokens"] == 100
    assert a["gen_ai.usage.cache_creation.input_tokens"] == 50
    assert a["gen_ai.usage.output_tokens"] == 7
    assert a["gen_ai.response.model"] == "claude-x-1"
    assert "gen_ai.request.temperature" not in a  # not set: not sent
    assert a["ctxwright.cache.divergence.offset"] == 77
    assert a["ctxwright.cache.divergence.segment"] == "tools"
    assert a["ctxwright.cache.verdict"] == "byte_change" and a["ctxwright.cache.verdict.agree"] is True
    assert "SECRET" not in json.dumps(a)
    failed = A.model_call(
        CallRecord("s1", 4, "", 0, "", error="BackendUnavailable: http://x refused: key sk-abc"), provider="openai"
    )
    assert failed["error.type"] == "BackendUnavailable"
    assert "sk-abc" not in json.dumps(failed)


def test_the_stored_audit_gives_back_the_evidence_the_cache_verdict_judges() -> None:
    """``ctxwright.cache.*`` is read from the stored audit through ``audit/live.stored_evidence``:
    the same evidence ``byte_evidence`` hands ``cache/verdict.py`` live, for every kind of change."""
    from ctxwright.audit.compare import Auditor, AuditRequest
    from ctxwright.audit.live import audit_record, byte_evidence, stored_evidence

    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    hist = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]
    more = {"role": "user", "content": "and then?"}
    base = AuditRequest(system="S", tools=tools, messages=hist, options={"max_tokens": 5})
    follow_ups = [
        AuditRequest(system="S", tools=tools, messages=[*hist, more], options={"max_tokens": 5}),
        AuditRequest(system="S!", tools=tools, messages=hist, options={"max_tokens": 5}),
        AuditRequest(system="S", tools=[], messages=hist, options={"max_tokens": 5}),
        AuditRequest(system="S", tools=tools, messages=[hist[0], {"role": "assistant", "content": "HI"}, more]),
        AuditRequest(system="S", tools=tools, messages=hist, options={"max_tokens": 9}),
    ]
    segments = []
    for req in follow_ups:
        auditor = Auditor()
        auditor.add(base)
        row = auditor.add(req)
        assert stored_evidence(audit_record(row)) == byte_evidence(row), row.cause
        attrs = A.cache_attributes(audit_record(row))
        assert attrs["ctxwright.cache.cause"] == row.cause
        segments.append(attrs.get("ctxwright.cache.divergence.segment"))
    assert segments == [None, "system", "tools", "messages", None]


def test_provider_names() -> None:
    assert A.provider_name("embedded") == "llama_cpp"
    assert A.provider_name("openai") == A.provider_name("openai-responses") == "openai"
    assert A.provider_name("openai", "deepseek") == "deepseek"
    assert A.provider_name("openai", "llama.cpp") == "llama_cpp"
    assert A.provider_name("anthropic") == "anthropic"
    assert A.provider_name("anthropic_messages") == "anthropic" and A.provider_name("openai_chat") == "openai"
    assert A.provider_name("external") == "external" and A.provider_name("external", "openai") == "openai"
    assert A.provider_name("my-backend") == "my-backend"


def test_content_is_bounded_and_stays_json() -> None:
    messages = [
        {"role": "user", "parts": [{"type": "text", "content": f"message {i} " + "x" * 1000}]} for i in range(100)
    ]
    text, omitted = C.bounded_json(messages, limit=10_000)
    kept = json.loads(text)
    assert len(text) <= 10_000 and omitted == 100 - len(kept) > 0
    assert kept[-1] == messages[-1]  # the newest kept whole
    huge = [{"role": "tool", "parts": [{"type": "tool_call_response", "id": "c", "response": "y" * 1_000_000}]}]
    text, omitted = C.bounded_json(huge, limit=5_000)
    assert len(text) <= 5_000 and omitted == 0
    assert "characters cut]" in json.loads(text)[0]["parts"][0]["response"]
    assert len(C.bounded_text("z" * 100_000, 1_000)) <= 1_000


# -- (d) a collector that misbehaves ---------------------------------------------------------------------


def _run_scripted(url: str, db: Path) -> tuple[float, float, str]:
    """A three-call session exported to ``url``: seconds in ``run``, seconds in ``close``, session id."""
    h = Harness(
        SYSTEM,
        [fetch],
        backend=ScriptedBackend(_pages(2)),
        db=db,
        status=False,
        summaries=False,
        compaction=COMPACTION,
        max_tool_rounds=10,
        otlp=url,
    )
    t0 = time.monotonic()
    assert h.run(PROMPT).stop_reason == "final_answer"
    t1 = time.monotonic()
    sid = h.session_id
    h.close()
    return t1 - t0, time.monotonic() - t1, sid


def _stored(db: Path, sid: str) -> tuple[list[str], list[tuple[int, int | None, str]]]:
    store = Store(db)
    try:
        kinds = [type(ev).__name__ for ev in store.events(sid)]
        calls = [(c.call_index, c.prompt_tokens, c.audit.cause) for c in store.calls(sid)]
    finally:
        store.close()
    return kinds, calls


@pytest.mark.parametrize("collector", ["stalled", "down", "failing"])
def test_a_collector_that_misbehaves_never_holds_the_agent_up_or_loses_a_row(
    collector: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    reference = _run_scripted(dead_url(), tmp_path / "ref.db")  # what the store holds after such a run
    expected = _stored(tmp_path / "ref.db", reference[2])
    r = Receiver(mode={"stalled": "stall", "failing": "fail"}[collector]).start() if collector != "down" else None
    caplog.clear()
    try:
        with caplog.at_level(logging.WARNING):
            run_s, close_s, sid = _run_scripted(r.url if r is not None else dead_url(), tmp_path / "x.db")
    finally:
        if r is not None:
            r.stop()
    # the run never waits on the collector; the close waits at most its bound (plus a loaded machine's slack)
    assert run_s < 20.0
    assert close_s < CLOSE_TIMEOUT_S + 15.0
    assert _stored(tmp_path / "x.db", sid) == expected
    assert len(expected[1]) == 3
    warnings = [rec for rec in caplog.records if rec.levelno >= logging.WARNING]
    assert len(warnings) == 1, [rec.getMessage() for rec in warnings]  # said once, by ctxwright
    assert warnings[0].name == "ctxwright.telemetry" and "store is complete" in warnings[0].getMessage()
    if r is not None:
        assert r.requests >= 1


def test_a_failing_collector_is_logged_once_however_many_batches_fail(caplog: pytest.LogCaptureFixture) -> None:
    with Receiver(mode="fail").start() as r:
        exporter = Exporter(endpoint_of(r.url), schedule_delay_ms=50)
        with caplog.at_level(logging.DEBUG):
            for i in range(6):
                exporter.tracer.start_span(f"s{i}").end()
                deadline = time.monotonic() + 30
                while r.requests <= i and time.monotonic() < deadline:
                    time.sleep(0.02)
            exporter.close()
        assert r.requests >= 6  # six batches refused
    assert exporter.lost == 6 and exporter.delivered == 0
    records = [rec for rec in caplog.records if rec.levelno >= logging.WARNING]
    assert len(records) == 1 and "500" in records[0].getMessage(), [rec.getMessage() for rec in records]


def test_a_stalled_collector_cannot_stretch_the_close(tmp_path: Path) -> None:
    """Many batches queued behind a collector that never answers: close gives up at its bound
    instead of trying each batch for another export timeout."""
    with Receiver(mode="stall").start() as r:
        exporter = Exporter(endpoint_of(r.url), close_timeout=1.0)
        for i in range(2000):
            exporter.tracer.start_span(f"s{i}").end()
        t0 = time.monotonic()
        exporter.close()
        took = time.monotonic() - t0
    # unbounded, the 8 batches would take EXPORT_TIMEOUT_S each, one after the other
    assert took < 1.0 + 10.0 < 8 * EXPORT_TIMEOUT_S
    assert exporter.delivered == 0


_FORGOTTEN = """
import sys
from ctxwright import Harness, ScriptedBackend
h = Harness("You answer.", [], backend=ScriptedBackend(["Fine."]), db=None, otlp=sys.argv[1])
h.run("How are you?")
# never closed: the exit hook sends what is queued
"""


def test_a_harness_never_closed_still_sends_its_spans_at_exit(receiver: Receiver) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _FORGOTTEN, receiver.url], capture_output=True, text=True, env=ENV, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert sorted(s.name for s in receiver.spans) == ["chat scripted", "invoke_agent ctxwright"]


def test_huge_values_are_bounded_by_the_span_limits(receiver: Receiver) -> None:
    exporter = Exporter(endpoint_of(receiver.url))
    span = exporter.tracer.start_span("huge")
    span.set_attribute("big", "x" * 1_000_000)
    span.set_attributes({f"a{i}": i for i in range(1000)})
    span.end()
    exporter.close()
    (got,) = receiver.spans
    assert len(got.attributes) == MAX_ATTRIBUTES
    big = got.attributes.get("big")
    assert big is None or len(big) == MAX_ATTRIBUTE_CHARS


def test_a_huge_tool_result_with_content_stays_bounded_json(receiver: Receiver) -> None:
    @tool
    def dump() -> str:
        """Dump everything."""
        return "w" * 3_000_000

    script = [Message(role="assistant", tool_calls=(call("dump", {}, "call_dump"),)), "ok"]
    with Harness(
        SYSTEM, [dump], backend=ScriptedBackend(script), db=None, compaction=False, otlp=receiver.url, otlp_content=True
    ) as h:
        assert h.run(PROMPT).stop_reason == "final_answer"
    spans = receiver.spans
    (tool_span,) = [s for s in spans if s.name == "execute_tool dump"]
    assert len(tool_span.attributes["gen_ai.tool.call.result"]) <= MAX_ATTRIBUTE_CHARS
    assert tool_span.attributes["ctxwright.tool.result_chars"] > MAX_ATTRIBUTE_CHARS
    for s in spans:
        for key in ("gen_ai.input.messages", "gen_ai.output.messages"):
            if key in s.attributes:
                assert len(s.attributes[key]) <= MAX_ATTRIBUTE_CHARS
                json.loads(s.attributes[key])  # still JSON a viewer can parse
