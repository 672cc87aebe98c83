"""The Anthropic Messages simulator (``tests/providers/anthropic_sim.py``) keeps Anthropic's
documented rules, driven by the official ``anthropic`` SDK: what it refuses, when the cache is
written and read (breakpoints, the 20-block lookback, TTL, refresh, the minimum), the usage
arithmetic, the diagnostics and the event stream. The backend's tests rely on all of it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from providers.anthropic_sim import AnthropicSim, block_tokens

MODEL = "claude-sonnet-4-5"
CC = {"type": "ephemeral"}
CC_1H = {"type": "ephemeral", "ttl": "1h"}


@pytest.fixture
def sim() -> Iterator[AnthropicSim]:
    with AnthropicSim(minimum=50) as s:
        yield s


@pytest.fixture
def client(sim: AnthropicSim) -> Iterator[anthropic.Anthropic]:
    c = anthropic.Anthropic(base_url=sim.url, api_key="test", max_retries=0)
    yield c
    c.close()


def text(t: str, cc: dict[str, Any] | None = None) -> dict[str, Any]:
    b: dict[str, Any] = {"type": "text", "text": t}
    if cc is not None:
        b["cache_control"] = cc
    return b


def turns(n: int, marks: dict[int, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """``n`` one-block messages, user/assistant alternating (user last when n is odd)."""
    marks = marks or {}
    out = []
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        out.append({"role": role, "content": [text(f"message number {i} " + "x" * 40, marks.get(i))]})
    return out


SYSTEM_TEXT = "You are a test assistant. " * 40


def system(cc: dict[str, Any] | None = CC) -> list[dict[str, Any]]:
    return [text(SYSTEM_TEXT, cc)]


def refused(client: anthropic.Anthropic, **kw: Any) -> str:
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(model=MODEL, max_tokens=16, **kw)
    body = info.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    return str(body["error"]["message"])


def test_more_than_four_breakpoints_is_refused_in_anthropics_words(client: anthropic.Anthropic) -> None:
    msg = refused(client, system=system(), messages=turns(5, {0: CC, 1: CC, 2: CC, 4: CC}))
    assert msg == "A maximum of 4 blocks with cache_control may be provided. Found 5."
    # four are fine
    client.messages.create(model=MODEL, max_tokens=16, system=system(), messages=turns(5, {0: CC, 2: CC, 4: CC}))


def test_breakpoint_on_an_empty_text_or_a_thinking_block_is_refused(
    client: anthropic.Anthropic, sim: AnthropicSim
) -> None:
    empty = [{"role": "user", "content": [text("hello"), text("", CC)]}]
    assert "cache_control cannot be set for empty text blocks" in refused(client, messages=empty)
    thinking = {"type": "thinking", "thinking": "hmm", "signature": sim.sign("hmm"), "cache_control": CC}
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [thinking, text("a")]},
        {"role": "user", "content": "q2"},
    ]
    assert "thinking.cache_control: Extra inputs are not permitted" in refused(client, messages=msgs)


def test_a_tool_use_without_its_result_in_the_next_message_is_refused(client: anthropic.Anthropic) -> None:
    use = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": "go"},
    ]
    assert "`tool_use` ids were found without `tool_result` blocks immediately after: toolu_1" in refused(
        client, messages=msgs
    )
    msgs[2] = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "r"}]}
    client.messages.create(model=MODEL, max_tokens=16, messages=msgs)  # answered: accepted


def test_a_one_hour_entry_after_a_five_minute_one_is_refused(client: anthropic.Anthropic) -> None:
    msg = refused(client, system=system(CC), messages=turns(1, {0: CC_1H}))
    assert "longer TTLs must come first" in msg
    client.messages.create(model=MODEL, max_tokens=16, system=system(CC_1H), messages=turns(1, {0: CC}))


def test_required_fields(sim: AnthropicSim) -> None:
    r = httpx.post(f"{sim.url}/v1/messages", json={"model": MODEL, "messages": turns(1)})
    assert r.status_code == 400
    assert r.json() == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "max_tokens: Field required"},
    }


def tokens_of(blocks: list[dict[str, Any]]) -> int:
    return sum(block_tokens(b) for b in blocks)


def test_write_then_read_and_the_usage_fields_add_up(client: anthropic.Anthropic) -> None:
    msgs = turns(1)
    sys_tokens = tokens_of(system())
    prompt = sys_tokens + tokens_of(msgs[0]["content"])
    first = client.messages.create(model=MODEL, max_tokens=16, system=system(), messages=msgs).usage
    assert (first.cache_creation_input_tokens, first.cache_read_input_tokens) == (sys_tokens, 0)
    assert first.input_tokens == prompt - sys_tokens
    assert first.cache_creation is not None and first.cache_creation.ephemeral_5m_input_tokens == sys_tokens
    second = client.messages.create(model=MODEL, max_tokens=16, system=system(), messages=msgs).usage
    assert (second.cache_creation_input_tokens, second.cache_read_input_tokens) == (0, sys_tokens)
    assert second.input_tokens + second.cache_read_input_tokens + second.cache_creation_input_tokens == prompt


def test_ttl_split_bills_each_segment_at_the_ttl_of_the_breakpoint_ending_it(client: anthropic.Anthropic) -> None:
    msgs = turns(3, {2: CC})
    usage = client.messages.create(model=MODEL, max_tokens=16, system=system(CC_1H), messages=msgs).usage
    sys_tokens = tokens_of(system())
    rest = sum(tokens_of(m["content"]) for m in msgs)
    assert usage.cache_creation is not None
    assert usage.cache_creation.ephemeral_1h_input_tokens == sys_tokens
    assert usage.cache_creation.ephemeral_5m_input_tokens == rest
    assert usage.input_tokens == 0


def test_a_moved_breakpoint_reads_the_entry_within_the_lookback_and_not_beyond(client: anthropic.Anthropic) -> None:
    # the entry is written at message 0 (block 1: system is block 0)
    client.messages.create(model=MODEL, max_tokens=16, system=system(None), messages=turns(1, {0: CC}))
    expected = tokens_of(system()) + tokens_of(turns(1)[0]["content"])
    # a breakpoint 20 blocks later: its lookback reaches the entry (cache_control does not count in the bytes)
    near = client.messages.create(model=MODEL, max_tokens=16, system=system(None), messages=turns(21, {20: CC}))
    assert near.usage.cache_read_input_tokens == expected
    # 21 blocks later: out of reach, the whole prefix is written again
    with AnthropicSim(minimum=50) as fresh:
        c = anthropic.Anthropic(base_url=fresh.url, api_key="test", max_retries=0)
        c.messages.create(model=MODEL, max_tokens=16, system=system(None), messages=turns(1, {0: CC}))
        far = c.messages.create(model=MODEL, max_tokens=16, system=system(None), messages=turns(23, {22: CC}))
        assert far.usage.cache_read_input_tokens == 0
        c.close()


def test_ttl_expiry_refresh_and_one_hour(client: anthropic.Anthropic, sim: AnthropicSim) -> None:
    def read(cc: dict[str, Any] = CC) -> int:
        u = client.messages.create(model=MODEL, max_tokens=16, system=system(cc), messages=turns(1)).usage
        return u.cache_read_input_tokens or 0

    assert read() == 0
    sim.clock.advance(299)
    assert read() > 0  # within 5 minutes
    sim.clock.advance(299)
    assert read() > 0  # the hit refreshed the entry
    sim.clock.advance(301)
    assert read() == 0  # idle longer than the TTL: written again
    assert read(CC_1H) > 0  # the 5m entry just written is read...
    sim.clock.advance(1800)
    assert read(CC_1H) > 0  # ...and rewritten as 1h on that call, so it survives half an hour


def test_a_prefix_below_the_minimum_is_neither_written_nor_read() -> None:
    with AnthropicSim() as sim:  # the documented minimum: 1,024 tokens for Sonnet 4.5
        c = anthropic.Anthropic(base_url=sim.url, api_key="test", max_retries=0)
        assert sim.minimum_for(MODEL) == 1024 and sim.minimum_for("claude-opus-4-6") == 4096
        short = [text("short system prompt", CC)]
        for _ in range(2):
            u = c.messages.create(model=MODEL, max_tokens=16, system=short, messages=turns(1)).usage
            assert (u.cache_creation_input_tokens, u.cache_read_input_tokens) == (0, 0)
        c.close()


def test_diagnostics_name_the_first_divergence(client: anthropic.Anthropic) -> None:
    tools: Any = [{"name": "f", "description": "a tool", "input_schema": {"type": "object", "properties": {}}}]

    def ask(prev: str | None, **kw: Any) -> anthropic.types.Message:
        args: dict[str, Any] = {"system": system(), "messages": turns(1), "tools": tools, "model": MODEL}
        args.update(kw)
        return client.messages.create(max_tokens=16, diagnostics={"previous_message_id": prev}, **args)

    first = ask(None)
    assert first.diagnostics is None
    missing = ask("msg_unknown")
    assert missing.diagnostics is not None and missing.diagnostics.cache_miss_reason is not None
    assert missing.diagnostics.cache_miss_reason.type == "previous_message_not_found"
    grown = ask(first.id, messages=[*turns(1), {"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}])
    assert grown.diagnostics is None  # appended only: nothing diverged
    cases = {
        "model_changed": {"model": "claude-opus-4-1"},
        "tools_changed": {"tools": [{**tools[0], "description": "another"}]},
        "system_changed": {"system": [text("Another prompt. " * 40, CC)]},
        "messages_changed": {"messages": [{"role": "user", "content": "edited"}]},
    }
    whole = tokens_of(tools) + tokens_of(system()) + tokens_of(turns(1)[0]["content"])
    missed = {
        "model_changed": whole,
        "tools_changed": whole,
        "system_changed": whole - tokens_of(tools),
        "messages_changed": tokens_of(turns(1)[0]["content"]),
    }
    for reason, change in cases.items():
        got = ask(first.id, **change).diagnostics
        assert got is not None and got.cache_miss_reason is not None
        assert got.cache_miss_reason.type == reason
        assert got.cache_miss_reason.cache_missed_input_tokens == missed[reason]  # type: ignore[union-attr]


def reply(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"type": "thinking", "thinking": "Let me think about the weather in Paris."},
        {"type": "text", "text": "I will look it up for you now."},
        {"type": "tool_use", "name": "weather", "input": {"city": "Paris", "days": [1, 2, 3]}},
    ]


def test_streaming_parses_with_the_sdk_and_equals_the_plain_reply() -> None:
    with AnthropicSim(respond=reply, minimum=50) as sim:
        c = anthropic.Anthropic(base_url=sim.url, api_key="test", max_retries=0)
        plain = c.messages.create(model=MODEL, max_tokens=64, system=system(), messages=turns(1))
        pieces: list[str] = []
        with c.messages.stream(model=MODEL, max_tokens=64, system=system(), messages=turns(1)) as stream:
            pieces.extend(stream.text_stream)
            final = stream.get_final_message()
        assert "".join(pieces) == "I will look it up for you now."
        assert [b.type for b in final.content] == ["thinking", "text", "tool_use"]
        assert final.content[0].signature == sim.sign("Let me think about the weather in Paris.")  # type: ignore[union-attr]
        assert final.content[2].input == {"city": "Paris", "days": [1, 2, 3]}  # type: ignore[union-attr]
        assert final.stop_reason == "tool_use"
        assert final.usage.cache_read_input_tokens == plain.usage.cache_creation_input_tokens
        assert final.usage.output_tokens == plain.usage.output_tokens
        c.close()


def test_a_thinking_block_sent_back_must_keep_its_signature(client: anthropic.Anthropic, sim: AnthropicSim) -> None:
    good = {"type": "thinking", "thinking": "plan", "signature": sim.sign("plan")}
    msgs: Any = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [good, text("a")]},
        {"role": "user", "content": "q2"},
    ]
    client.messages.create(model=MODEL, max_tokens=16, messages=msgs)
    msgs[1]["content"][0] = {**good, "thinking": "plan, edited"}
    assert "Invalid `signature` in `thinking` block" in refused(client, messages=msgs)


def test_scripted_failures(client: anthropic.Anthropic, sim: AnthropicSim) -> None:
    sim.fail_next(529, "overloaded_error", "Overloaded")
    with pytest.raises(anthropic.APIStatusError) as info:
        client.messages.create(model=MODEL, max_tokens=16, messages=turns(1))
    assert info.value.status_code == 529
    client.messages.create(model=MODEL, max_tokens=16, messages=turns(1))  # the next one answers
