"""The Responses API simulator (``tests/providers/responses_sim.py``) driven by the official
``openai`` SDK: it caches, routes, expires and refuses as OpenAI documents, so the backend
tests that rely on it test against those rules."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import openai
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from providers.responses_sim import (
    ResponsesSim,
    call,
    canonical,
    reasoning,
    text,
    tokens_of,
)

LONG = "You are a careful assistant. " * 300  # 8,700 bytes: 2,175 tokens as the sim counts
TOOL = {
    "type": "function",
    "name": "lookup",
    "description": "look a word up",
    "parameters": {"type": "object", "properties": {}},
}


def _client(sim: ResponsesSim) -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.url + "/v1", api_key="sk-test", max_retries=0)


def _create(c: openai.OpenAI, **kw: Any) -> Any:
    """``client.responses.create`` with the arguments as the API takes them (the SDK's overloads
    type each field; these tests send raw shapes, refused ones included)."""
    return c.responses.create(**kw)


def _err(exc: pytest.ExceptionInfo[openai.BadRequestError]) -> dict[str, Any]:
    """The whole error body as sent (the SDK's ``.body`` is its ``error`` member only)."""
    body = exc.value.response.json()
    assert isinstance(body, dict)
    return body


def test_usage_counts_are_the_documented_rule_and_a_repeat_hits_in_128_token_steps() -> None:
    with ResponsesSim(respond=lambda b: [text("done")]) as sim:
        c = _client(sim)
        r1 = _create(c, model="gpt-5.5", instructions=LONG, input="hi", tools=[TOOL], prompt_cache_key="k")
        expected_in = (
            tokens_of(canonical(TOOL))
            + tokens_of(LONG)
            + tokens_of(canonical({"type": "message", "role": "user", "content": "hi"}))
        )
        assert r1.usage is not None
        assert r1.usage.input_tokens == expected_in
        assert r1.usage.input_tokens_details.cached_tokens == 0  # cold
        assert r1.usage.output_tokens == tokens_of("done")
        r2 = _create(c, model="gpt-5.5", instructions=LONG, input="hi", tools=[TOOL], prompt_cache_key="k")
        assert r2.usage is not None
        assert r2.usage.input_tokens_details.cached_tokens == expected_in - expected_in % 128
        assert r2.usage.total_tokens == r2.usage.input_tokens + r2.usage.output_tokens


def test_a_prompt_under_1024_tokens_is_never_cached() -> None:
    with ResponsesSim() as sim:
        c = _client(sim)
        for _ in range(2):
            r = _create(c, model="gpt-5.5", instructions="short", input="hi")
        assert r.usage is not None and r.usage.input_tokens_details.cached_tokens == 0


def test_another_prompt_cache_key_or_an_idle_gap_past_the_ttl_is_a_miss() -> None:
    with ResponsesSim(in_memory_ttl_s=300, machines=64) as sim:
        c = _client(sim)
        _create(c, model="gpt-5.5", instructions=LONG, input="hi", prompt_cache_key="a")
        other = _create(c, model="gpt-5.5", instructions=LONG, input="hi", prompt_cache_key="b-other")
        assert other.usage is not None
        # another key routes to another machine (64 machines: "a" and "b-other" land apart here)
        assert sim.log[0]["machine"] != sim.log[1]["machine"]
        assert other.usage.input_tokens_details.cached_tokens == 0
        sim.clock.advance(299)
        warm = _create(c, model="gpt-5.5", instructions=LONG, input="hi", prompt_cache_key="a")
        assert warm.usage is not None and warm.usage.input_tokens_details.cached_tokens > 0
        sim.clock.advance(301)  # idle past the in-memory TTL since the last use
        cold = _create(c, model="gpt-5.5", instructions=LONG, input="hi", prompt_cache_key="a")
        assert cold.usage is not None and cold.usage.input_tokens_details.cached_tokens == 0
        # 24h retention survives the same gap
        _create(c, model="gpt-5.5", instructions=LONG, input="x", prompt_cache_key="a", prompt_cache_retention="24h")
        sim.clock.advance(3600)
        held = _create(
            c, model="gpt-5.5", instructions=LONG, input="x", prompt_cache_key="a", prompt_cache_retention="24h"
        )
        assert held.usage is not None and held.usage.input_tokens_details.cached_tokens > 0


def test_more_than_15_requests_a_minute_for_one_key_spill_to_a_cold_machine() -> None:
    with ResponsesSim() as sim:
        c = _client(sim)
        cached = []
        for _ in range(17):
            r = _create(c, model="gpt-5.5", instructions=LONG, input="hi", prompt_cache_key="hot")
            assert r.usage is not None
            cached.append(r.usage.input_tokens_details.cached_tokens)
        machines = [e["machine"] for e in sim.log]
        assert len(set(machines[:15])) == 1 and machines[15] != machines[0]
        assert cached[0] == 0 and all(x > 0 for x in cached[1:15]) and cached[15] == 0 and cached[16] > 0
        sim.clock.advance(61)  # a minute later the rate is back under the limit: the first machine again
        _create(c, model="gpt-5.5", instructions=LONG, input="hi", prompt_cache_key="hot")
        assert sim.log[-1]["machine"] == machines[0]


def test_refusals_have_openais_error_body() -> None:
    with ResponsesSim() as sim:
        c = _client(sim)
        with pytest.raises(openai.BadRequestError) as e1:
            _create(c, model="gpt-5.5", input="hi", extra_body={"cache_control": {"type": "ephemeral"}})
        assert _err(e1)["error"] == {
            "message": "Unknown parameter: 'cache_control'.",
            "type": "invalid_request_error",
            "param": "cache_control",
            "code": "unknown_parameter",
        }
        dangling = [
            {"role": "user", "content": "hi"},
            {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": "{}"},
        ]
        with pytest.raises(openai.BadRequestError) as e2:
            _create(c, model="gpt-5.5", input=dangling)
        assert _err(e2)["error"]["message"] == "No tool output found for function call call_1."
        with pytest.raises(openai.BadRequestError) as e3:
            _create(c, model="gpt-5.5", input="hi", prompt_cache_options={"mode": "explicit"})
        assert _err(e3)["error"]["param"] == "prompt_cache_options"  # not before gpt-5.6
        with pytest.raises(openai.BadRequestError) as e4:
            _create(
                c, model="gpt-5.6", input="hi", prompt_cache_options={"mode": "explicit"}, prompt_cache_retention="24h"
            )
        assert _err(e4)["error"]["param"] == "prompt_cache_retention"
        with pytest.raises(openai.BadRequestError):
            _create(c, model="gpt-5.5", input="hi", previous_response_id="resp_nope")
        assert len(sim.refused) == 5


def test_a_changed_encrypted_reasoning_item_is_refused_and_an_untouched_one_accepted() -> None:
    replies = iter([[reasoning("think"), call("lookup", {"q": "x"})], [text("done")], [text("done")]])
    with ResponsesSim(respond=lambda b: next(replies)) as sim:
        c = _client(sim)
        r = _create(c, model="gpt-5.5", input="hi", include=["reasoning.encrypted_content"], store=False)
        items = [o.model_dump(exclude_none=True) for o in r.output]
        assert items[0]["type"] == "reasoning" and items[0]["encrypted_content"]
        fc = items[1]
        back = [
            {"role": "user", "content": "hi"},
            items[0],
            fc,
            {"type": "function_call_output", "call_id": fc["call_id"], "output": "42"},
        ]
        ok = _create(c, model="gpt-5.5", input=back, store=False)
        assert ok.output_text == "done"
        tampered = dict(items[0], encrypted_content=items[0]["encrypted_content"][:-1] + "0")
        if tampered["encrypted_content"] == items[0]["encrypted_content"]:
            tampered["encrypted_content"] = items[0]["encrypted_content"][:-1] + "1"
        with pytest.raises(openai.BadRequestError) as e:
            _create(c, model="gpt-5.5", input=[back[0], tampered, fc, back[3]], store=False)
        assert _err(e)["error"]["code"] == "invalid_encrypted_content"


def test_breakpoints_on_gpt_5_6_hit_exactly_at_a_written_breakpoint_and_report_writes() -> None:
    with ResponsesSim() as sim:
        c = _client(sim)
        system = {
            "role": "system",
            "content": [{"type": "input_text", "text": LONG, "prompt_cache_breakpoint": {"mode": "explicit"}}],
        }
        opts = {"mode": "explicit", "ttl": "30m"}
        r1 = _create(c, model="gpt-5.6", input=[system, {"role": "user", "content": "one"}], prompt_cache_options=opts)
        sys_tokens = tokens_of(
            canonical({"type": "message", "role": "system", "content": [{"type": "input_text", "text": LONG}]})
        )
        assert r1.usage is not None
        assert r1.usage.input_tokens_details.cached_tokens == 0
        assert r1.usage.input_tokens_details.cache_write_tokens == sys_tokens  # only the breakpoint is written
        r2 = _create(c, model="gpt-5.6", input=[system, {"role": "user", "content": "two"}], prompt_cache_options=opts)
        assert r2.usage is not None
        assert r2.usage.input_tokens_details.cached_tokens == sys_tokens  # exact, not rounded to 128
        assert r2.usage.input_tokens_details.cache_write_tokens == 0
        # diagnostics against the first response: the same structure up to the system prompt
        r3 = _create(
            c,
            model="gpt-5.6",
            input=[system, {"role": "user", "content": "two"}],
            prompt_cache_options={**opts, "comparison_response_id": r1.id},
            prompt_cache_key="changed",
        )
        diag = r3.model_dump()["prompt_cache_diagnostics"]
        assert diag["type"] == "cache_miss" and diag["reason"] == "prompt_cache_key_changed"


def test_streamed_response_parses_with_the_sdk_stream_helper() -> None:
    replies = iter([[text("Hello there, streamed.")], [call("lookup", {"q": "word"})]])
    with ResponsesSim(respond=lambda b: next(replies)) as sim:
        c = _client(sim)
        deltas: list[str] = []
        with c.responses.stream(model="gpt-5.5", input="hi") as stream:
            for event in stream:
                if event.type == "response.output_text.delta":
                    deltas.append(event.delta)
            final = stream.get_final_response()
        assert "".join(deltas) == "Hello there, streamed." == final.output_text
        assert final.usage is not None and final.usage.output_tokens == tokens_of("Hello there, streamed.")
        events = list(_create(c, model="gpt-5.5", input="hi", stream=True))
        kinds = [e.type for e in events]
        assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
        assert "response.function_call_arguments.delta" in kinds and "response.function_call_arguments.done" in kinds
        done = next(e for e in events if e.type == "response.output_item.done")
        assert done.item.type == "function_call" and done.item.arguments == canonical({"q": "word"})
