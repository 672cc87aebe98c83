"""The proxy's storage (migration m005) and its reader: what ``ctxwright proxy`` recorded comes
back as the records of a request log, and ``audit/logs.py`` reads every shape the proxy sees
(OpenAI chat, OpenAI Responses, Anthropic Messages; whole bodies and streams)."""

from __future__ import annotations

import hashlib
import json
import sqlite3

import pytest

from ctxwright.audit.compare import Auditor
from ctxwright.audit.logs import ParseProblem, parse_log, split_body, usage_of
from ctxwright.core.tokens import TokenCounter
from ctxwright.errors import LogRecordRejected, SessionNotFound
from ctxwright.proxy.log import api_of, proxy_session_requests, proxy_sessions, sse_events
from ctxwright.proxy.store import ProxyLog
from ctxwright.store.migrations import SCHEMA_VERSION
from ctxwright.store.sessions import Store


def _row(sid: str | None, k: int, request: bytes, response: bytes, **kw):
    row = {
        "session_id": sid,
        "call_index": k,
        "started_at": 1.0 + k,
        "ended_at": 1.5 + k,
        "method": "POST",
        "path": "/v1/chat/completions",
        "api": "openai_chat",
        "streamed": 0,
        "status": 200,
        "outcome": "complete",
        "request_bytes": len(request),
        "request_sha256": hashlib.sha256(request).hexdigest(),
        "request_content_type": "application/json",
        "request_body": request,
        "request_parsed": 1,
        "response_bytes": len(response),
        "response_sha256": hashlib.sha256(response).hexdigest(),
        "response_content_type": "application/json",
        "response_body": response,
        "response_parsed": 1,
    }
    row.update(kw)
    return row


def test_a_new_store_has_the_proxy_tables(tmp_path):
    store = Store(tmp_path / "p.db")
    version, names = store.schema()
    assert version == SCHEMA_VERSION and names[4] == "m005_proxy"
    con = sqlite3.connect(tmp_path / "p.db")
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"proxy_sessions", "proxy_exchanges"} <= tables


def test_recorded_exchanges_read_back_as_audit_records(tmp_path):
    store = Store(tmp_path / "p.db")
    sid = ProxyLog(store).create_session(grouped_by="header", group_key="s1", api="openai_chat", upstream="http://u")
    sys_msg = {"role": "system", "content": "You are terse."}
    bodies = [
        {"model": "m", "messages": [sys_msg, {"role": "user", "content": "hi"}]},
        {
            "model": "m",
            "messages": [
                sys_msg,
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"},
                {"role": "user", "content": "more"},
            ],
        },
    ]
    usage = {"prompt_tokens": 30, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 16}}
    for k, b in enumerate(bodies):
        ProxyLog(store).record_exchange(_row(sid, k, json.dumps(b).encode(), json.dumps({"usage": usage}).encode()))
    ProxyLog(store).record_exchange(  # not a model call: recorded, in no session
        _row(None, 0, b"", b'{"data": []}', method="GET", path="/v1/models", api=None, request_parsed=0)
    )
    assert [s["id"] for s in proxy_sessions(store)] == [sid]
    assert proxy_sessions(store)[0]["calls"] == 2
    records = proxy_session_requests(store, sid[:6])  # a unique prefix is enough
    assert [r["request"] for r in records] == bodies
    assert records[1]["proxy"]["status"] == 200 and records[1]["proxy"]["outcome"] == "complete"
    # the records are exactly what `ctxwright audit` reads from a JSONL file
    data = b"\n".join(json.dumps(r).encode() for r in records)
    requests, problems = parse_log(data)
    assert problems == [] and len(requests) == 2 and requests[1].cached_tokens == 16
    auditor = Auditor(TokenCounter())
    assert [auditor.add(r).cause for r in requests] == ["first", "append"]
    assert [r["path"] for r in ProxyLog(store).exchange_rows(None)] == ["/v1/models"]
    with pytest.raises(SessionNotFound, match="ctxwright proxy --list"):
        proxy_session_requests(store, "px-nope")


def test_a_stream_reads_back_as_its_events_with_usage():
    openai_stream = (
        b'data: {"choices":[{"delta":{"content":"hi"}}],"usage":null}\n\n'
        b'data: {"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":3,'
        b'"prompt_tokens_details":{"cached_tokens":32}}}\n\n'
        b"data: [DONE]\n\n"
    )
    events = sse_events(openai_stream)
    assert len(events) == 2
    assert usage_of(events) == {"prompt_tokens": 40, "completion_tokens": 3, "cached_tokens": 32}
    anthropic_stream = (
        b"event: message_start\n"
        b'data: {"type":"message_start","message":{"usage":{"input_tokens":5,"cache_read_input_tokens":100,'
        b'"cache_creation_input_tokens":0,"output_tokens":1}}}\n\n'
        b": a comment\n\n"
        b"event: message_delta\n"
        b'data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":12}}\n\n'
    )
    assert usage_of(sse_events(anthropic_stream)) == {
        "prompt_tokens": 105,
        "completion_tokens": 12,
        "cached_tokens": 100,
    }
    responses_stream = (
        b'event: response.created\ndata: {"type":"response.created","response":{"id":"r1","usage":null}}\n\n'
        b'event: response.completed\ndata: {"type":"response.completed","response":{"id":"r1","usage":'
        b'{"input_tokens":50,"input_tokens_details":{"cached_tokens":48},"output_tokens":7}}}\n\n'
    )
    assert usage_of(sse_events(responses_stream)) == {"prompt_tokens": 50, "completion_tokens": 7, "cached_tokens": 48}


def test_stream_events_read_as_json_reads_them():
    """The events are parsed by orjson; what it reads differently (an integer past 64 bits,
    which it makes a float; NaN; a lone surrogate; a payload split over data lines) comes out
    as ``json.loads`` gives it, and what neither reads is left out."""
    payloads = [
        '{"seed": 123456789012345678901234567890, "n": -9223372036854775809}',
        '{"x": NaN}',
        '{"s": "\\ud800", "e": "\\u00e9"}',
        '{"f": 1e400, "g": 0.1}',
        "not json",
        "[" * 5000 + "]" * 5000,
    ]
    stream = "".join(f"data: {p}\n\n" for p in payloads) + 'data: {"a":\ndata: 1}\n\ndata: [DONE]\n\n'
    events = sse_events(stream.encode())
    expected = [json.loads(p) for p in payloads[:4]] + [{"a": 1}]
    assert repr(events) == repr(expected)
    assert type(events[0]["seed"]) is int and events[0]["seed"] == 123456789012345678901234567890


def test_responses_api_bodies_are_read():
    body = {
        "model": "gpt-5",
        "instructions": "Be brief.",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
            {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        ],
        "tools": [{"type": "function", "name": "weather", "parameters": {"type": "object"}}],
        "prompt_cache_key": "k",
    }
    system, items = split_body(body)
    assert system == "Be brief." and len(items) == 3
    assert split_body({"input": "hello"}) == ("", [{"role": "user", "content": "hello"}])
    assert split_body({"input": [{"role": "developer", "content": "D"}, {"role": "user", "content": "u"}]})[0] == "D"
    with pytest.raises(LogRecordRejected, match="'input' is empty"):
        split_body({"input": []})
    second = {**body, "input": [*body["input"], {"role": "assistant", "content": "Sunny."}]}
    log = b"\n".join(json.dumps(b).encode() for b in (body, second))
    requests, problems = parse_log(log)
    assert problems == []
    auditor = Auditor(TokenCounter())
    rows = [auditor.add(r) for r in requests]
    assert [r.cause for r in rows] == ["first", "append"]
    changed = {**second, "instructions": "Be very brief."}
    rows.append(auditor.add(parse_log(json.dumps(changed).encode())[0][0]))
    assert rows[-1].cause == "system_changed"


def test_a_record_without_a_readable_request_is_one_problem():
    requests, problems = parse_log(b'{"request": null, "response": null}\n{"input": "hi"}\n')
    assert len(requests) == 1 and isinstance(problems[0], ParseProblem) and problems[0].line == 1


@pytest.mark.parametrize(
    "method,path,api",
    [
        ("POST", "/v1/chat/completions", "openai_chat"),
        ("POST", "/openai/v1/chat/completions?x=1", "openai_chat"),
        ("POST", "/v1/responses", "openai_responses"),
        ("POST", "/v1/messages", "anthropic_messages"),
        ("POST", "/v1/messages/count_tokens", None),
        ("GET", "/v1/models", None),
        ("GET", "/v1/responses", None),
    ],
)
def test_api_of(method, path, api):
    assert api_of(method, path) == api


def test_the_live_auditors_stay_within_their_byte_bound(tmp_path):
    """``LiveAudits`` keeps a running sum of its auditors' held bytes instead of asking every
    kept auditor on every call: the sum stays the true one through adds, rebuilds and
    ``forget``, and the least recently used sessions go once it passes the bound."""
    from ctxwright.audit.logs import RecordReader
    from ctxwright.proxy.session_audit import LiveAudits

    store = Store(tmp_path / "p.db")
    try:
        reader = RecordReader()

        def req(session: int, turn: int) -> object:
            msgs = [{"role": "system", "content": f"agent {session} " + "rules " * 400}]
            msgs += [{"role": "user", "content": f"step {t} " * 50} for t in range(turn + 1)]
            (item,) = list(reader.read_record({"request": {"model": "m", "messages": msgs}}, 1))
            return item

        probe = LiveAudits(store, TokenCounter())
        probe.add("probe", req(0, 0), new=True)
        one = next(iter(probe._auditors.values())).held_bytes
        audits = LiveAudits(store, TokenCounter(), max_bytes=3 * one)
        for turn in range(3):
            for s in range(6):
                audits.add(f"s{s}", req(s, turn), new=True)  # (nothing stored: never rebuilt)
                held = sum(a.held_bytes for a in audits._auditors.values())
                assert audits._held_sum == held
                assert held <= audits.max_bytes or len(audits._auditors) == 1
        assert 1 <= len(audits._auditors) < 6  # the bound dropped some
        kept = next(reversed(audits._auditors))
        audits.forget(kept)
        assert audits._held_sum == sum(a.held_bytes for a in audits._auditors.values())
    finally:
        store.close()
