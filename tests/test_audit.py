"""The offline audit of request logs: every cause on constructed logs with one known change
per request, exact byte offsets (UTF-8, CJK), exact reusable bytes, usage of each provider,
the summary arithmetic and prices, malformed lines, session exports and the CLI."""

from __future__ import annotations

import json
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxwright.agent.loop import Agent, AgentConfig
from ctxwright.audit.compare import (
    Auditor,
    AuditRequest,
    AuditRow,
    PrefixIndex,
    Prices,
    common_prefix_len,
    segments_of,
    summarize,
)
from ctxwright.audit.logs import ParseProblem, load_requests, parse_log
from ctxwright.backends.scripted import ScriptedBackend, call
from ctxwright.cli.main import main
from ctxwright.core.events import CompactionEvent
from ctxwright.core.messages import Message, canonical_json
from ctxwright.core.prefix import Prefix
from ctxwright.core.session import Session
from ctxwright.core.tokens import TokenCounter
from ctxwright.tools.builtin import default_tools

REQUEST_KEYS = {
    "index",
    "conversation",
    "options_changed",
    "prompt_tokens",
    "reusable_prefix_tokens",
    "reusable_prefix_bytes",
    "cached_tokens",
    "first_divergence",
    "cause",
    "skills_catalog_tokens",
    "cost",
    "cost_if_held",
    "rules",
}
SUMMARY_KEYS = {
    "requests",
    "conversations",
    "usage_known",
    "cached_known",
    "causes",
    "options_changed",
    "prompt_tokens",
    "reusable_tokens",
    "cached_tokens",
    "hit_ratio",
    "efficiency",
    "est_cost",
    "est_cost_if_stable",
    "est_cost_if_held",
    "priced_requests",
    "skills_catalog_tokens",
    "skills_catalog_requests",
}


# -- helpers --------------------------------------------------------------------------------


def U(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def A(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def openai(
    system: str | None, messages: list[dict[str, Any]], tools: list[Any] | None = None, role: str = "system"
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "m",
        "messages": ([{"role": role, "content": system}] if system is not None else []) + messages,
    }
    if tools is not None:
        body["tools"] = tools
    return body


def tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": "d", "parameters": {"type": "object"}}}


def write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def audit(path: Path) -> tuple[list[AuditRow], list[ParseProblem]]:
    reqs, problems = load_requests(path)
    a = Auditor()
    for r in reqs:
        a.add(r)
    return a.rows, problems


def causes(rows: list[AuditRow]) -> list[str]:
    return [r.cause for r in rows]


def div(row: AuditRow) -> dict[str, Any] | None:
    return row.first_divergence.to_json() if row.first_divergence else None


def nbytes(obj: Any) -> int:
    return len(canonical_json(obj).encode("utf-8"))


# -- causes on OpenAI bodies ----------------------------------------------------------------


def test_first_and_append(tmp_path):
    r0 = openai("sys", [U("hi")])
    r1 = openai("sys", [U("hi"), A("yo"), U("more")])
    rows, problems = audit(write_jsonl(tmp_path / "log.jsonl", [r0, r1]))
    assert problems == []
    assert causes(rows) == ["first", "append"]
    assert rows[0].first_divergence is None and rows[1].first_divergence is None
    assert rows[0].reusable_prefix_bytes == 0 and rows[0].reusable_prefix_tokens == 0
    assert rows[1].reusable_prefix_bytes == len(b"sys") + nbytes(U("hi"))


def test_reusable_bytes_by_hand(tmp_path):
    """Segments: system text, then each message's canonical JSON (no tools here)."""
    u, a, a2, u2 = U("hi"), A("yo"), A("ya"), U("ok")
    assert canonical_json(u) == '{"content":"hi","role":"user"}'  # 30 bytes
    assert canonical_json(a) == '{"content":"yo","role":"assistant"}'  # 35 bytes
    log = [openai("sys", [u]), openai("sys", [u, a]), openai("sys", [u, a2]), openai("sys", [u, a, u2])]
    rows, _ = audit(write_jsonl(tmp_path / "log.jsonl", log))
    assert [r.reusable_prefix_bytes for r in rows] == [
        0,
        3 + 30,  # all of request 0: "sys" + the user message
        3 + 30 + 13,  # + '{"content":"y' of the edited reply
        3 + 30 + 35,  # the best earlier request is #1 (not the previous one): its reply whole
    ]
    assert causes(rows) == ["first", "append", "history_edited", "history_edited"]
    assert div(rows[2]) == {"message_index": 2, "field": "content", "byte_offset": 1}
    assert rows[2].first_divergence.role == "assistant"


def test_system_changed_with_cjk_offset(tmp_path):
    log = [openai("你好世界", [U("q")]), openai("你好朋友", [U("q"), A("a")])]
    rows, _ = audit(write_jsonl(tmp_path / "log.jsonl", log))
    assert causes(rows) == ["first", "system_changed"]
    assert div(rows[1]) == {"message_index": 0, "field": "content", "byte_offset": 6}
    d = rows[1].first_divergence
    assert d.before == "你好" and d.after == "朋友"
    assert rows[1].reusable_prefix_bytes == 6


def test_developer_role_is_the_system_prompt(tmp_path):
    log = [openai("rules v1", [U("q")], role="developer"), openai("rules v2", [U("q")], role="developer")]
    reqs, _ = load_requests(write_jsonl(tmp_path / "log.jsonl", log))
    assert reqs[0].system == "rules v1" and reqs[0].messages == [U("q")]
    rows, _ = audit(tmp_path / "log.jsonl")
    assert causes(rows) == ["first", "system_changed"]
    assert div(rows[1]) == {"message_index": 0, "field": "content", "byte_offset": 7}


def test_tools_changed_by_order_and_by_set(tmp_path):
    ab, ba, bac = (
        [tool("alpha"), tool("bravo")],
        [tool("bravo"), tool("alpha")],
        [tool("bravo"), tool("alpha"), tool("charlie")],
    )
    log = [openai("s", [U("q")], ab), openai("s", [U("q")], ba), openai("s", [U("q")], bac)]
    rows, _ = audit(write_jsonl(tmp_path / "log.jsonl", log))
    assert causes(rows) == ["first", "tools_changed", "tools_changed"]
    head = '[{"function":{"description":"d","name":"'  # where alpha and bravo part
    assert len(head) == 40
    assert div(rows[1]) == {"message_index": None, "field": "tools", "byte_offset": 40}
    # a tool added at the end: the old list's closing bracket becomes a comma
    assert div(rows[2]) == {"message_index": None, "field": "tools", "byte_offset": nbytes(ba) - 1}
    assert rows[1].reusable_prefix_bytes == 1 + 40  # "s", then the tools segment up to the name


def test_history_edited_with_cjk_offset(tmp_path):
    q = U("q")
    log = [openai("s", [q, A("你好世界，请帮忙")]), openai("s", [q, A("你好地球，请帮忙"), U("more")])]
    rows, _ = audit(write_jsonl(tmp_path / "log.jsonl", log))
    assert causes(rows) == ["first", "history_edited"]
    assert div(rows[1]) == {"message_index": 2, "field": "content", "byte_offset": 6}
    assert rows[1].first_divergence.after.startswith("地球")
    # reusable: "s" + the user message + '{"content":"你好' (12 + 6 bytes)
    assert rows[1].reusable_prefix_bytes == 1 + nbytes(q) + 12 + 6


def test_history_removed_by_a_sliding_window(tmp_path):
    u0, a0, u1, a1, u2, a2, u3 = U("u0"), A("a0"), U("u1"), A("a1"), U("u2"), A("a2"), U("u3")
    log = [
        openai("s", [u0, a0, u1]),
        openai("s", [u0, a0, u1, a1, u2]),
        openai("s", [u1, a1, u2, a2, u3]),  # the window drops the two oldest turns
        openai("s", [u2, a2, u3]),
    ]  # and again
    rows, _ = audit(write_jsonl(tmp_path / "log.jsonl", log))
    assert causes(rows) == ["first", "append", "history_removed", "history_removed"]
    assert div(rows[2])["message_index"] == 1
    assert rows[2].reusable_prefix_bytes == 1 + len('{"content":"u')  # only "s" and a shared start


def test_truncated_tail_is_history_removed(tmp_path):
    log = [openai("s", [U("a"), A("b"), U("c")]), openai("s", [U("a"), A("b")])]
    rows, _ = audit(write_jsonl(tmp_path / "log.jsonl", log))
    assert causes(rows) == ["first", "history_removed"]
    assert div(rows[1]) == {"message_index": 3, "field": "message", "byte_offset": 0}


def test_inserted_message_of_another_role_is_other(tmp_path):
    log = [openai("s", [U("q"), A("a")]), openai("s", [U("q"), U("note"), A("a")])]
    rows, _ = audit(write_jsonl(tmp_path / "log.jsonl", log))
    assert causes(rows) == ["first", "other"]
    assert div(rows[1]) == {"message_index": 2, "field": "role", "byte_offset": 0}


def test_body_without_system_message_has_empty_message_zero(tmp_path):
    log = [openai(None, [U("ab"), A("x")]), openai(None, [U("ac"), A("x"), U("y")])]
    rows, _ = audit(write_jsonl(tmp_path / "log.jsonl", log))
    assert causes(rows) == ["first", "history_edited"]
    assert div(rows[1]) == {"message_index": 1, "field": "content", "byte_offset": 1}


# -- Anthropic bodies -----------------------------------------------------------------------


def anthropic(system: Any, messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    body = {
        "model": "claude",
        "max_tokens": 1024,
        "messages": messages,
        "tools": [{"name": "lookup", "description": "d", "input_schema": {"type": "object"}}],
        **extra,
    }
    if system is not None:
        body["system"] = system
    return body


def tool_use(id_: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "tool_use", "id": id_, "name": "lookup", "input": {}}]}


def tool_result(id_: str, text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id_, "content": text}]}


def test_anthropic_bodies_system_is_message_zero(tmp_path):
    system = [
        {"type": "text", "text": "You are "},
        {"type": "text", "text": "careful.", "cache_control": {"type": "ephemeral"}},
    ]
    first = [{"role": "user", "content": "你好世界"}]
    r0 = anthropic(system, first)
    r1 = anthropic(system, [*first, tool_use("t1"), tool_result("t1", "你好世界")])
    r2 = anthropic(system, [*first, tool_use("t1"), tool_result("t1", "你好地球")])
    r3 = anthropic(system, [{"role": "user", "content": "你好地球"}, *r1["messages"][1:]])
    path = write_jsonl(tmp_path / "log.jsonl", [r0, r1, r2, r3])
    reqs, problems = load_requests(path)
    assert problems == []
    assert reqs[0].system == "You are careful."
    assert list(reqs[1].messages) == r1["messages"]  # the list as given
    assert reqs[0].tools == r0["tools"]
    rows, _ = audit(path)
    assert causes(rows) == ["first", "append", "history_edited", "history_edited"]
    # message 3 is the tool_result turn (system 0, user 1, assistant 2); a list field's
    # offset counts in its canonical JSON: '[{"content":"' is 13 bytes, then 你好
    assert canonical_json(r2["messages"][2]["content"]).startswith('[{"content":"你好地球"')
    assert div(rows[2]) == {"message_index": 3, "field": "content", "byte_offset": 13 + 6}
    assert div(rows[3]) == {"message_index": 1, "field": "content", "byte_offset": 6}


def test_anthropic_string_system_change_and_usage(tmp_path):
    usage = {"input_tokens": 50, "cache_read_input_tokens": 900, "cache_creation_input_tokens": 50, "output_tokens": 7}
    log = [
        {
            "request": anthropic("今天是周一", [U("q")], anthropic_version="2023-06-01"),
            "response": {"type": "message", "usage": usage},
        },
        {"request": anthropic("今天是周二", [U("q")]), "response": {"type": "message", "usage": usage}},
    ]
    reqs, _ = load_requests(write_jsonl(tmp_path / "log.jsonl", log))
    assert (reqs[0].prompt_tokens, reqs[0].cached_tokens, reqs[0].completion_tokens) == (1000, 900, 7)
    rows, _ = audit(tmp_path / "log.jsonl")
    assert causes(rows) == ["first", "system_changed"]
    # 一 (e4 b8 80) and 二 (e4 ba 8c) share their first byte: the offset is the character's start
    assert div(rows[1]) == {"message_index": 0, "field": "content", "byte_offset": 12}
    assert rows[1].first_divergence.before == "今天是周" and rows[1].first_divergence.after == "二"


def test_anthropic_detected_by_blocks_without_system(tmp_path):
    msgs = [U("q"), tool_use("t"), tool_result("t", "r")]
    reqs, _ = load_requests(write_jsonl(tmp_path / "log.jsonl", [{"messages": msgs}]))
    assert reqs[0].system == "" and list(reqs[0].messages) == msgs


def test_anthropic_tools_changed(tmp_path):
    r0 = anthropic("s", [U("q")])
    r1 = anthropic("s", [U("q")])
    r1["tools"] = r1["tools"] + [{"name": "more", "description": "d", "input_schema": {"type": "object"}}]
    rows, _ = audit(write_jsonl(tmp_path / "log.jsonl", [r0, r1]))
    assert causes(rows) == ["first", "tools_changed"]


# -- usage ----------------------------------------------------------------------------------


def test_cached_tokens_from_each_provider_and_unknown_when_absent(tmp_path):
    body = openai("s", [U("q")])
    log = [
        {
            "request": body,
            "response": {
                "usage": {
                    "prompt_tokens": 1000,
                    "completion_tokens": 5,
                    "prompt_tokens_details": {"cached_tokens": 896},
                }
            },
        },  # OpenAI
        {
            "request": body,
            "response": {
                "usage": {
                    "prompt_tokens": 1000,
                    "completion_tokens": 5,
                    "prompt_cache_hit_tokens": 640,
                    "prompt_cache_miss_tokens": 360,
                }
            },
        },  # DeepSeek
        {
            "request": body,
            "response": {
                "usage": {
                    "input_tokens": 100,
                    "cache_read_input_tokens": 800,
                    "cache_creation_input_tokens": 100,
                    "output_tokens": 5,
                }
            },
        },
        {"request": body, "response": {"usage": {"prompt_tokens": 1000, "completion_tokens": 5}}},  # no field
        {"request": body, "response": {"id": "x"}},  # no usage at all
        {"request": body},  # no response
        body,  # bare body
        {
            "request": body,
            "response": [
                {"choices": []},
                {
                    "usage": {
                        "prompt_tokens": 9,  # streamed chunks
                        "prompt_tokens_details": {"cached_tokens": 0},
                    }
                },
            ],
        },
    ]
    reqs, problems = load_requests(write_jsonl(tmp_path / "log.jsonl", log))
    assert problems == []
    assert [r.cached_tokens for r in reqs] == [896, 640, 800, None, None, None, None, 0]
    assert [r.prompt_tokens for r in reqs] == [1000, 1000, 1000, 1000, None, None, None, 9]
    rows, _ = audit(tmp_path / "log.jsonl")
    assert [r.cached_tokens for r in rows] == [896, 640, 800, None, None, None, None, 0]
    # an unknown prompt size is counted from the request's segments, never left at zero
    counter = TokenCounter()
    assert rows[4].prompt_tokens == sum(counter.count(seg.decode()) for seg in segments_of(reqs[4])) > 0


# -- summary arithmetic and prices ----------------------------------------------------------


def row(i: int, prompt: int, reusable: int, cached: int | None, out: int | None = None) -> AuditRow:
    return AuditRow(i, prompt, reusable, reusable * 4, cached, None, "first" if i == 0 else "append", out)


def test_hit_ratio_and_efficiency_use_only_known_cached_counts():
    rows = [row(0, 1000, 0, 0), row(1, 2000, 1000, 896), row(2, 3000, 2000, None)]
    s = summarize(rows)
    assert (s.requests, s.prompt_tokens, s.reusable_tokens) == (3, 6000, 3000)
    assert s.cached_tokens == 896
    assert s.hit_ratio == round(896 / (1000 + 2000), 4) == 0.2987
    assert s.efficiency == round(896 / (0 + 1000), 4) == 0.896
    assert s.causes == {"first": 1, "append": 2}
    assert s.est_cost is None and s.est_cost_if_stable is None
    unknown = summarize([row(0, 10, 0, None), row(1, 20, 10, None)])
    assert (unknown.cached_tokens, unknown.hit_ratio, unknown.efficiency) == (None, None, None)


def test_price_estimates():
    rows = [row(0, 1000, 0, 0, 100), row(1, 2000, 1000, 1000, 50), row(2, 3000, 1500, None, None)]
    s = summarize(rows, Prices(input=2.0, cached=0.5, output=8.0))
    # as logged (unknown cached: the reusable prefix assumed cached):
    #   (1000·2 + 0·.5 + 100·8) + (1000·2 + 1000·.5 + 50·8) + (1500·2 + 1500·.5) = 2800 + 2900 + 3750
    assert s.est_cost == pytest.approx(9450 / 1e6)
    # stable prefix: each request reuses all of the previous one:
    #   2800 + (1000·2 + 1000·.5 + 400) + (1000·2 + 2000·.5) = 2800 + 2900 + 3000
    assert s.est_cost_if_stable == pytest.approx(8700 / 1e6)
    flat = summarize(rows, Prices(input=2.0))  # no cached price: no discount
    assert flat.est_cost == flat.est_cost_if_stable == pytest.approx(6000 * 2 / 1e6)


def test_summary_of_a_log_with_usage(tmp_path):
    def line(msgs, prompt, cached):
        return {
            "request": openai("s", msgs),
            "response": {
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": 1,
                    "prompt_tokens_details": {"cached_tokens": cached},
                }
            },
        }

    log = [
        line([U("a" * 400)], 110, 0),
        line([U("a" * 400), A("b" * 400)], 220, 100),
        line([U("a" * 400), A("b" * 400), U("c")], 230, 200),
    ]
    rows, _ = audit(write_jsonl(tmp_path / "log.jsonl", log))
    s = summarize(rows)
    assert s.prompt_tokens == 560 and s.cached_tokens == 300
    assert s.hit_ratio == round(300 / 560, 4)
    assert s.efficiency == round(300 / sum(r.reusable_prefix_tokens for r in rows), 4)


# -- malformed input ------------------------------------------------------------------------


def test_malformed_lines_are_reported_with_line_numbers_and_skipped(tmp_path):
    good = json.dumps(openai("s", [U("q")]))
    lines = [
        good,  # 1
        "this is not json",  # 2
        "",  # 3 blank: ignored
        "[1, 2]",  # 4 not an object
        '{"model": "x"}',  # 5 no messages
        '{"messages": "nope"}',  # 6
        '{"messages": [1]}',  # 7
        good,  # 8
        "   ",  # 9 blank
        '{"request": 5}',  # 10
        '{"messages": [{"role": "user"',  # 11 truncated
        '{"messages": []}',  # 12
        "[" * 100_000,  # 13 nested too deep for the parser
        '{"messages": [{"role": "user", "content": "q"}], "tools": {"a": 1}}',  # 14
        good,
    ]  # 15
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(lines) + "\n")
    reqs, problems = load_requests(path)
    assert len(reqs) == 3
    assert [p.line for p in problems] == [2, 4, 5, 6, 7, 10, 11, 12, 13, 14]
    assert "not valid JSON" in problems[0].message and "array" in problems[1].message
    assert "messages" in problems[2].message


def test_invalid_utf8_line_is_one_problem(tmp_path):
    good = json.dumps(openai("s", [U("你好")]), ensure_ascii=False).encode()
    path = tmp_path / "log.jsonl"
    path.write_bytes(good + b"\n" + b'{"messages": "\xff\xfe"}\n' + good + b"\n")
    reqs, problems = load_requests(path)
    assert len(reqs) == 2 and problems == [ParseProblem(2, "not valid UTF-8")]


def test_bom_crlf_and_a_bad_first_line(tmp_path):
    good = json.dumps(openai("s", [U("你好")]), ensure_ascii=False).encode()
    reqs, problems = parse_log(b"\xef\xbb\xbf" + good + b"\r\n\r\n" + good + b"\r\n")
    assert len(reqs) == 2 and problems == []
    reqs, problems = parse_log(b'{"messages": [\n' + good + b"\n" + good)
    assert len(reqs) == 2 and [p.line for p in problems] == [1]


def test_empty_file_and_whole_file_documents(tmp_path):
    assert parse_log(b"") == ([], [])
    assert parse_log(b"\n\n  \n") == ([], [])
    pretty = json.dumps(openai("s", [U("q")]), indent=2).encode()
    reqs, problems = parse_log(pretty)
    assert len(reqs) == 1 and problems == []
    arr = json.dumps([openai("s", [U("q")]), 5, openai("s", [U("q"), A("a")])]).encode()
    reqs, problems = parse_log(arr)
    assert len(reqs) == 2 and problems[0].line == 1 and problems[0].message.startswith("item 2: ")


# -- ctxwright session exports --------------------------------------------------------------


def ev(seq: int, kind: str, **payload: Any) -> dict[str, Any]:
    return {"seq": seq, "kind": kind, "created_at": 1.0 + seq, **payload}


def hand_built_export(with_compaction: bool = True) -> dict[str, Any]:
    tc = {"id": "c1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}
    events = [
        ev(0, "user", message=U("几点了？")),
        ev(1, "assistant", message={"role": "assistant", "content": None, "tool_calls": [tc]}, call_index=0),
        ev(
            2, "tool", message={"role": "tool", "content": "10:00", "tool_call_id": "c1"}, tool_name="get_time", ok=True
        ),
        ev(3, "assistant", message=A("十点。"), call_index=1),
        ev(4, "user", message=U("谢谢")),
        *([ev(5, "compaction", layer="test", summary="the user asked the time")] if with_compaction else []),
        ev(6, "assistant", message=A("不客气"), call_index=2),
        ev(7, "status", mode="replace", message=U("<agent_status>\nbudget: 10%\n</agent_status>")),
        ev(8, "user", message=U("again")),
        ev(9, "assistant", message=A("ok"), call_index=3),
        ev(10, "status", mode="append", message=U("<agent_status>\nbudget: 20%\n</agent_status>")),
        ev(11, "user", message=U("bye")),
        ev(12, "assistant", message=A("bye"), call_index=4),
    ]
    calls = [
        {
            "call_index": k,
            "prompt_tokens": 100 * (k + 1),
            "cached_tokens": [0, 64, None, 256, 384][k],
            "completion_tokens": 5,
            "usage": {"raw": {}},
        }
        for k in range(5)
    ]
    return {
        "id": "abc123",
        "parent_id": None,
        "created_at": 1.0,
        "backend": "scripted",
        "model": "m",
        "prefix_sha256": "0" * 64,
        "prefix": {"system": "你是助手", "tools": [tool("get_time")]},
        "meta": {},
        "events": events,
        "calls": calls,
        "children": [],
    }


def test_session_export_one_request_per_call_with_markers(tmp_path):
    path = tmp_path / "export.json"
    path.write_text(json.dumps(hand_built_export(), ensure_ascii=False, indent=1))
    reqs, problems = load_requests(path)
    assert problems == []
    assert [len(r.messages) for r in reqs] == [1, 3, 5, 8, 11]  # statuses included
    assert reqs[0].system == "你是助手" and reqs[0].tools == [tool("get_time")]
    assert [r.prompt_tokens for r in reqs] == [100, 200, 300, 400, 500]
    assert [r.cached_tokens for r in reqs] == [0, 64, None, 256, 384]
    # the only status event in replace mode is the first status: nothing was replaced yet
    assert [r.marker for r in reqs] == [None, None, "compaction", None, None]
    rows, _ = audit(path)
    assert causes(rows) == ["first", "append", "compaction", "append", "append"]
    # without the recorded compaction the same requests are plain appends
    path.write_text(json.dumps(hand_built_export(with_compaction=False), ensure_ascii=False, indent=1))
    assert causes(audit(path)[0]) == ["first", "append", "append", "append", "append"]


def test_compaction_that_rewrote_history_is_compaction_not_history_edited():
    """A hand-built request pair where the compacted request really differs (requests of a
    log without sessions: the conversation is found by the log rules)."""
    exp = hand_built_export()
    reqs = [replace(r, conversation=None) for r in parse_log(json.dumps(exp).encode())[0]]
    compacted = AuditRequest(
        reqs[2].system,
        reqs[2].tools,
        [U("[summary] the user asked the time"), *reqs[2].messages[1:]],
        marker="compaction",
    )
    a = Auditor()
    for r in (reqs[0], reqs[1], compacted):
        a.add(r)
    assert a.rows[2].cause == "compaction"
    unmarked = Auditor()
    for r in (reqs[0], reqs[1], AuditRequest(compacted.system, compacted.tools, compacted.messages)):
        unmarked.add(r)
    assert unmarked.rows[2].cause == "history_edited"


def test_export_problems_are_reported_not_raised(tmp_path):
    exp = hand_built_export()
    exp["events"].insert(1, ev(99, "tool"))  # a message event without its message
    exp["events"].insert(1, "junk")
    reqs, problems = parse_log(json.dumps(exp).encode())
    assert len(reqs) == 5
    assert [p.message for p in problems] == [
        "session abc123: event 1 is not an object; skipped",
        "session abc123: tool event 99 has no message; skipped",
    ]
    reqs, problems = parse_log(json.dumps({"prefix": "x", "events": []}).encode())
    assert reqs == [] and "'prefix' must be an object" in problems[0].message


def test_jsonl_of_session_exports_and_children(tmp_path):
    child = hand_built_export()
    child["id"] = "child1"
    parent = hand_built_export()
    parent["children"] = [child]
    empty = {**hand_built_export(), "id": "nocalls", "events": [ev(0, "user", message=U("q"))]}
    path = write_jsonl(tmp_path / "exports.jsonl", [parent, empty, hand_built_export()])
    reqs, problems = load_requests(path)
    assert len(reqs) == 15
    assert problems == [ParseProblem(2, "session nocalls: no model calls (no assistant event with a call_index)")]


def test_real_session_export_matches_the_live_audit(store, tmp_path, capsys):
    reg = default_tools()
    s = Session.start(Prefix.build("sys", reg.specs()), store=store)
    a = Agent(
        s,
        ScriptedBackend(
            [Message(role="assistant", tool_calls=(call("get_weather", {"city": "Oslo"}, "c1"),)), "done", "again"]
        ),
        reg,
        AgentConfig(),
    )
    a.run("weather in Oslo?")
    s.append(CompactionEvent(layer="test"))
    a.run("and tomorrow?")
    assert main(["--db", str(store.path), "show", s.id, "--json"]) == 0
    path = tmp_path / "export.json"
    path.write_text(capsys.readouterr().out)
    rows, problems = audit(path)
    assert problems == []
    live = [c.audit.raw for c in store.calls(s.id)]
    assert causes(rows) == [c["cause"] for c in live] == ["first", "append", "compaction"]
    assert [r.reusable_prefix_bytes for r in rows] == [c["reusable_prefix_bytes"] for c in live]
    assert [r.cached_tokens for r in rows] == [c.cached_tokens for c in store.calls(s.id)]


# -- the command line -----------------------------------------------------------------------


def cli_log(tmp_path: Path) -> Path:
    usage = {"prompt_tokens": 1000, "completion_tokens": 10, "prompt_tokens_details": {"cached_tokens": 512}}
    log = [
        {"request": openai("s", [U("你好世界")]), "response": {"usage": usage}},
        {"request": openai("s", [U("你好世界"), A("a")]), "response": {"usage": usage}},
        {"request": openai("s", [U("你好地球"), A("a")]), "response": {"usage": usage}},
    ]
    path = write_jsonl(tmp_path / "log.jsonl", log)
    with path.open("a") as f:
        f.write("not json\n")
    return path


def test_cli_audit_json_has_exactly_the_documented_keys(tmp_path, capsys):
    assert main(["audit", str(cli_log(tmp_path)), "--json"]) == 0
    cap = capsys.readouterr()
    doc = json.loads(cap.out)
    assert set(doc) == {"requests", "conversations", "summary", "rules"}
    assert all(set(r) == REQUEST_KEYS for r in doc["requests"])
    assert set(doc["summary"]) == SUMMARY_KEYS
    assert [r["cause"] for r in doc["requests"]] == ["first", "append", "history_edited"]
    assert doc["requests"][2]["first_divergence"] == {"message_index": 1, "field": "content", "byte_offset": 6}
    assert doc["summary"]["cached_tokens"] == 1536 and doc["summary"]["hit_ratio"] == 0.512
    assert doc["summary"]["est_cost"] is None
    assert cap.err.strip() == "line 4: not valid JSON (Expecting value at column 1)"


def test_cli_audit_prices(tmp_path, capsys):
    args = [
        "audit",
        str(cli_log(tmp_path)),
        "--json",
        "--price-input",
        "2",
        "--price-cached",
        "0.5",
        "--price-output",
        "8",
    ]
    assert main(args) == 0
    s = json.loads(capsys.readouterr().out)["summary"]
    assert s["est_cost"] == pytest.approx(3 * (488 * 2 + 512 * 0.5 + 10 * 8) / 1e6)
    assert s["est_cost_if_stable"] == pytest.approx(((1000 * 2 + 80) + 2 * (1000 * 0.5 + 80)) / 1e6)
    assert main(["audit", str(cli_log(tmp_path)), "--price-cached", "1"]) == 2
    assert "--price-input" in capsys.readouterr().err


def test_cli_audit_table(tmp_path, capsys):
    assert main(["audit", str(cli_log(tmp_path)), "--price-input", "2"]) == 0
    cap = capsys.readouterr()
    assert "msg#1 content @6" in cap.out and "你好|地球" in cap.out
    assert "history_edited" in cap.out and "hit ratio 51.2%" in cap.out
    assert "never rewrite a message already sent" in cap.out
    assert "estimated cost" in cap.out
    assert "line 4:" in cap.err and "line 4:" not in cap.out


def test_cli_audit_system_change_advice(tmp_path, capsys):
    path = write_jsonl(tmp_path / "log.jsonl", [openai("time 10:00", [U("q")]), openai("time 10:01", [U("q")])])
    assert main(["audit", str(path)]) == 0
    assert "move dynamic values (time, user profile) out of the system prompt" in capsys.readouterr().out


def test_cli_audit_unreadable_or_empty(tmp_path, capsys):
    assert main(["audit", str(tmp_path / "missing.jsonl"), "--json"]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and "cannot read" in cap.err and "missing.jsonl" in cap.err
    bad = tmp_path / "bad.jsonl"
    bad.write_text("nope\n{}\n")
    assert main(["audit", str(bad), "--json"]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and "line 1:" in cap.err and "line 2:" in cap.err and "no request" in cap.err
    assert main(["audit", str(tmp_path), "--json"]) == 2  # a directory


# -- properties -----------------------------------------------------------------------------

texts = st.text(max_size=12)
messages = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "tool"]), "content": texts}),
    min_size=1,
    max_size=8,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    system=texts, msgs=messages, data=st.data(), fmt=st.sampled_from(["openai", "anthropic"]), with_tools=st.booleans()
)
def test_append_only_logs_are_all_appends(system, msgs, data, fmt, with_tools):
    cuts = sorted(data.draw(st.lists(st.integers(1, len(msgs)), min_size=1, max_size=6)))
    tools = [tool("alpha")] if with_tools else None
    if fmt == "openai":
        log = [openai(system, msgs[:k], tools) for k in cuts]
    else:
        log = [{"system": system, "messages": msgs[:k], **({"tools": tools} if tools else {})} for k in cuts]
    with tempfile.TemporaryDirectory() as tmp:
        reqs, problems = load_requests(write_jsonl(Path(tmp) / "log.jsonl", log))
    assert problems == [] and len(reqs) == len(cuts)
    a = Auditor()
    for r in reqs:
        a.add(r)
    assert all(c == "append" for c in causes(a.rows)[1:])
    for k in range(1, len(reqs)):
        assert a.rows[k].reusable_prefix_bytes == sum(len(s) for s in segments_of(reqs[k - 1]))


pool = st.sampled_from([U("a"), U("ab"), U("abc"), A("x"), A("xy"), U("你好"), U("你们")])


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["s", "sy", "sys"]), st.lists(pool, min_size=1, max_size=5)), min_size=1, max_size=8
    )
)
def test_reusable_bytes_equal_the_best_earlier_request_by_brute_force(spec):
    reqs = [AuditRequest(system, [], msgs) for system, msgs in spec]
    a = Auditor()
    for r in reqs:
        a.add(r)
    for k, r in enumerate(reqs):
        segs = segments_of(r)
        best = 0
        for e in reqs[:k]:
            other, got = segments_of(e), 0
            for i, seg in enumerate(segs):
                if i < len(other) and other[i] == seg:
                    got += len(seg)
                    continue
                if i < len(other):
                    got += common_prefix_len(seg, other[i])
                break
            best = max(best, got)
        assert a.rows[k].reusable_prefix_bytes == best


@given(st.binary(max_size=400), st.binary(max_size=400), st.binary(max_size=300))
def test_common_prefix_len_matches_a_naive_scan(head, x, y):
    a, b = head + x, head + y
    naive = 0
    while naive < min(len(a), len(b)) and a[naive] == b[naive]:
        naive += 1
    assert common_prefix_len(a, b) == naive


def test_many_requests_sharing_only_the_system_prompt_compare_two_neighbours(monkeypatch):
    """A log of independent requests (one shared system prompt, then a different long
    message each) must not compare each new request with every earlier one."""
    import ctxwright.audit.compare as audit_mod

    compared: list[int] = []
    real = audit_mod.common_prefix_len
    monkeypatch.setattr(audit_mod, "common_prefix_len", lambda a, b: compared.append(1) or real(a, b))
    doc = "x" * 20_000
    index = PrefixIndex()
    for i in range(300):
        compared.clear()
        index.match([b"sys", f"{doc} question {i:03d}".encode()])
        assert len(compared) <= 2
        index.add([b"sys", f"{doc} question {i:03d}".encode()])
    assert index.match([b"sys", f"{doc} question 007!".encode()]) == (1, len(f"{doc} question 007"))
    assert index.match([b"sys", b"y"]) == (1, 0)
