"""``backend="anthropic"`` against the loopback Anthropic simulator (``tests/providers/``), with
the official SDK inside the backend: a 30-call tool loop whose every request the simulator
accepts, with ctxwright's breakpoints reading at least 90% of the reusable prefix from the
cache; streaming; thinking blocks passed back with their signatures; the provider's own
diagnostics of a changed prefix; the error paths; and an exchange through the proxy."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from ctxwright import Harness, tool
from ctxwright.backends.anthropic import DIAGNOSTICS_BETA, AnthropicBackend
from ctxwright.cache.minimums import minimum_tokens
from ctxwright.core.messages import Message, ToolCall, canonical_json
from ctxwright.core.progress import Retry, Token
from ctxwright.core.request import ChatRequest, ToolSpec
from ctxwright.errors import BackendError, BackendUnavailable, ContextWindowExceeded
from providers.anthropic_sim import AnthropicSim, block_tokens

MODEL = "claude-sonnet-4-5"
SYSTEM = "You are a careful research agent. Look every item up before you answer. " * 80
CALLS = 30
#: the one price source (cache/prices.py), as a user's --prices file gives it: USD per million
#: tokens; the hand computation below writes the same numbers out
PRICES_TOML = f"""[models."{MODEL}"]
provider = "anthropic"
input = 3.0
cached_read = 0.30
cache_write_5m = 3.75
cache_write_1h = 6.0
output = 15.0
"""


@tool
def lookup(n: int) -> str:
    """Look up item n of the catalogue."""
    return f"item {n}: " + "a fact about it, " * 12


def tool_loop(sim_ref: list[AnthropicSim]) -> Any:
    """Calls 1..29 ask for a lookup, call 30 answers."""

    def respond(body: dict[str, Any]) -> list[dict[str, Any]]:
        k = len(sim_ref[0].requests)
        if k < CALLS:
            return [
                {"type": "text", "text": f"Looking up {k}."},
                {"type": "tool_use", "name": "lookup", "input": {"n": k}},
            ]
        return [{"type": "text", "text": "All items looked up."}]

    return respond


def prefix_sums(sim: AnthropicSim, body: dict[str, Any]) -> list[int]:
    out, total = [], 0
    for b in sim.blocks(body):
        total += block_tokens(b.body)
        out.append(total)
    return out


def marked(sim: AnthropicSim, body: dict[str, Any]) -> list[int]:
    return [i for i, b in enumerate(sim.blocks(body)) if "cache_control" in b.body]


def reusable(sim: AnthropicSim, before: dict[str, Any], after: dict[str, Any]) -> int:
    """The simulator's tokens of the longest run of blocks ``after`` shares with ``before``."""
    a, b = sim.blocks(before), sim.blocks(after)
    n = 0
    for x, y in zip(a, b, strict=False):
        if x.item != y.item:
            break
        n += 1
    return prefix_sums(sim, after)[n - 1] if n else 0


def test_a_thirty_call_tool_loop_is_valid_stable_and_read_from_the_cache(tmp_path: Any) -> None:
    from ctxwright.cli.show import call_cost_of

    prices = tmp_path / "prices.toml"
    prices.write_text(PRICES_TOML)
    ref: list[AnthropicSim] = []
    with AnthropicSim(respond=tool_loop(ref)) as sim:
        ref.append(sim)
        with Harness(
            backend="anthropic",
            base_url=sim.url,
            model=MODEL,
            system=SYSTEM,
            tools=[lookup],
            max_iterations=CALLS + 5,
            db=tmp_path / "ctx.db",
            prices=str(prices),
        ) as h:
            result = h.run("Look up the items one by one, then say you are done.")
            assert h.store is not None
            calls = h.store.calls(h.session_id)
            pricing = h.pricing
        assert (result.stop_reason, result.final_answer) == ("final_answer", "All items looked up.")
        # every request valid: the simulator answers 400 to any broken rule, and it answered all
        assert len(sim.requests) == len(sim.responses) == CALLS
        minimum = sim.minimum_for(MODEL)
        assert minimum == minimum_tokens(MODEL) == 1024
        frozen = {canonical_json([r["tools"], r["system"]]) for r in sim.requests}
        assert len(frozen) == 1  # tools + system byte-identical, cache_control included
        ratios = []
        for k, (req, resp) in enumerate(zip(sim.requests, sim.responses, strict=True)):
            points = marked(sim, req)
            sums = prefix_sums(sim, req)
            assert 1 <= len(points) <= 4
            assert all(sums[i] >= minimum for i in points)
            usage = resp["usage"]
            created = usage["cache_creation"]
            assert (
                usage["cache_creation_input_tokens"]
                == created["ephemeral_5m_input_tokens"] + created["ephemeral_1h_input_tokens"]
            )
            assert (
                usage["input_tokens"] + usage["cache_read_input_tokens"] + usage["cache_creation_input_tokens"]
                == sums[-1]
            )
            if k:
                ratios.append(usage["cache_read_input_tokens"] / reusable(sim, sim.requests[k - 1], req))
            # what ctxwright recorded is the provider's usage, read right
            got = calls[k].usage
            assert got["raw"]["usage"] == usage
            assert got["raw"]["provider"] == "anthropic" and got["raw"]["response_id"] == resp["id"]
            assert got["prompt_tokens"] == sums[-1] and got["cached_tokens"] == usage["cache_read_input_tokens"]
            cache = got["raw"]["cache"]
            assert [b["block"] for b in cache["breakpoints"]] == points
            assert cache["ttl"] == "5m" and cache["ttl_s"] == 300.0 and cache["minimum_tokens"] == 1024
            # the cost ctxwright prices from its record equals the hand computation from the
            # provider's fields (every write here is a 5-minute one)
            by_hand = (
                (sums[-1] - usage["cache_read_input_tokens"] - usage["cache_creation_input_tokens"]) * 3.0
                + usage["cache_read_input_tokens"] * 0.30
                + usage["cache_creation_input_tokens"] * 3.75
                + usage["output_tokens"] * 15.0
            ) / 1e6
            priced = call_cost_of(calls[k], pricing)
            assert priced is not None and math.isclose(priced.cost, by_hand, rel_tol=1e-12)
        assert min(ratios) >= 0.9, ratios
        assert sim.responses[0]["usage"]["cache_read_input_tokens"] == 0  # the first call writes


def test_a_streamed_run_gives_tokens_and_the_same_reply() -> None:
    ref: list[AnthropicSim] = []
    events: list[Any] = []
    with AnthropicSim(respond=tool_loop(ref)) as sim:
        ref.append(sim)
        sim.requests.extend([{}] * (CALLS - 2))  # two calls left: one lookup, then the answer
        with Harness(
            backend="anthropic",
            base_url=sim.url,
            model=MODEL,
            system=SYSTEM,
            tools=[lookup],
            stream=True,
            on_event=events.append,
        ) as h:
            result = h.run("Look it up.")
        assert result.final_answer == "All items looked up."
        streamed = [r for r in sim.requests if r]
        assert len(streamed) == 2 and all(r.get("stream") is True for r in streamed)
        text = "".join(e.text for e in events if isinstance(e, Token))
        assert text == f"Looking up {CALLS - 1}.All items looked up."
        # the tool call streamed as input_json_delta was put back together and answered
        second = streamed[1]["messages"]
        use = second[-2]["content"][-1]
        assert use["type"] == "tool_use" and use["input"] == {"n": CALLS - 1}
        assert second[-1]["content"][0]["type"] == "tool_result"


THINKING = "The user wants item 7; I should call lookup with n=7 first."


def thinking_then_answer(body: dict[str, Any]) -> list[dict[str, Any]]:
    last = body["messages"][-1]["content"]
    if any(b.get("type") == "tool_result" for b in last if isinstance(b, dict)):
        return [{"type": "text", "text": "Item 7 is known."}]
    return [{"type": "thinking", "thinking": THINKING}, {"type": "tool_use", "name": "lookup", "input": {"n": 7}}]


@pytest.mark.parametrize("stream", [False, True])
def test_thinking_blocks_go_back_with_their_signatures(stream: bool) -> None:
    with AnthropicSim(respond=thinking_then_answer) as sim:
        with Harness(
            backend="anthropic", base_url=sim.url, model=MODEL, system=SYSTEM, tools=[lookup], stream=stream
        ) as h:
            assert h.run("What is item 7?").final_answer == "Item 7 is known."
        sent = sim.responses[0]["content"][0]
        assert sent["type"] == "thinking" and sent["signature"] == sim.sign(THINKING)
        back = sim.requests[1]["messages"][1]
        assert back["role"] == "assistant"
        assert back["content"][0] == sent  # unchanged, first in its turn, no cache_control on it
        assert back["content"][1]["type"] == "tool_use"


@pytest.fixture
def sim() -> Iterator[AnthropicSim]:
    with AnthropicSim() as s:
        yield s


def backend(sim: AnthropicSim, **kw: Any) -> AnthropicBackend:
    return AnthropicBackend(MODEL, base_url=sim.url, api_key="test", **kw)


def request(system: str = SYSTEM, tools: tuple[ToolSpec, ...] = (), *more: Message) -> ChatRequest:
    return ChatRequest(messages=(Message("system", system), Message("user", "Go."), *more), tools=tools)


def test_a_modified_signature_is_refused_by_the_provider(sim: AnthropicSim) -> None:
    b = backend(sim)
    blocks = [{"type": "thinking", "thinking": THINKING, "signature": sim.sign(THINKING)}]
    call = ToolCall("toolu_1", "lookup", '{"n":7}')
    turn = Message("assistant", tool_calls=(call,), reasoning_blocks=canonical_json(blocks))
    ok = request(SYSTEM, (), turn, Message("tool", "7 is known", tool_call_id="toolu_1"))
    b.complete(ok)
    tampered = [{**blocks[0], "thinking": THINKING + " (edited)"}]
    bad = request(
        SYSTEM,
        (),
        Message("assistant", tool_calls=(call,), reasoning_blocks=canonical_json(tampered)),
        Message("tool", "7 is known", tool_call_id="toolu_1"),
    )
    with pytest.raises(BackendError, match="Invalid `signature` in `thinking` block") as info:
        b.complete(bad)
    assert "\n" not in str(info.value)


TOOL_A = ToolSpec.create("lookup", "Look up item n.", {"type": "object", "properties": {"n": {"type": "integer"}}})
TOOL_B = ToolSpec.create("lookup", "Look up item n of the catalogue.", TOOL_A.parameters)


def test_a_changed_prefix_is_reported_with_the_providers_reason(sim: AnthropicSim) -> None:
    b = backend(sim, diagnostics=True)
    first = b.complete(request(SYSTEM, (TOOL_A,)))
    assert sim.requests[0]["diagnostics"] == {"previous_message_id": None}
    assert DIAGNOSTICS_BETA in sim.headers[0].get("anthropic-beta", "")
    assert "diagnostics" not in first.usage.raw  # nothing to compare on the first call
    same = b.complete(request(SYSTEM, (TOOL_A,)))
    assert sim.requests[1]["diagnostics"] == {"previous_message_id": first.usage.raw["response_id"]}
    assert "diagnostics" not in same.usage.raw  # null: nothing diverged
    tools = b.complete(request(SYSTEM, (TOOL_B,)))
    assert tools.usage.raw["diagnostics"]["cache_miss_reason"]["type"] == "tools_changed"
    assert tools.usage.cached_tokens == 0
    system = b.complete(request(SYSTEM + " Be brief.", (TOOL_B,)))
    reason = system.usage.raw["diagnostics"]["cache_miss_reason"]
    assert reason["type"] == "system_changed" and reason["cache_missed_input_tokens"] > 1000
    # a side request (a summary) on a fork does not break the session's chain
    b.fork().complete(request("Summarize.", ()))
    again = b.complete(request(SYSTEM + " Be brief.", (TOOL_B,)))
    assert sim.requests[-1]["diagnostics"]["previous_message_id"] == system.usage.raw["response_id"]
    assert "diagnostics" not in again.usage.raw


def test_ttl_and_modes(sim: AnthropicSim) -> None:
    hour = backend(sim, ttl="1h").complete(request())
    assert sim.requests[-1]["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert hour.usage.raw["cache"]["ttl_s"] == 3600.0
    assert sim.responses[-1]["usage"]["cache_creation"]["ephemeral_1h_input_tokens"] > 0
    chosen = ["1h", "5m"]
    b = backend(sim, ttl="auto", ttl_for_call=lambda: chosen.pop())
    b.complete(request("Another system prompt. " * 300))
    assert sim.requests[-1]["system"][0]["cache_control"] == {"type": "ephemeral"}
    none = backend(sim, breakpoints="none").complete(request())
    assert none.usage.raw["cache"]["breakpoints"] == [] and "cache_control" not in json.dumps(sim.requests[-1])
    with pytest.raises(Exception, match="use 5m, 1h or auto"):
        backend(sim, ttl="10m")


def test_harness_options_reach_the_backend(sim: AnthropicSim, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-from-env")
    with Harness(backend="anthropic", base_url=sim.url, model=MODEL, system=SYSTEM, cache_ttl="1h") as h:
        h.run("Hello.")
    sent = sim.headers[-1]
    assert "sk-from-env" in (sent.get("x-api-key") or sent.get("authorization", ""))  # this SDK sends a bearer
    assert sim.requests[-1]["system"][0]["cache_control"]["ttl"] == "1h"


def test_a_resumed_session_runs_on_anthropic_again(sim: AnthropicSim, tmp_path: Any) -> None:
    db = tmp_path / "ctx.db"
    with Harness(backend="anthropic", base_url=sim.url, model=MODEL, system=SYSTEM, db=db) as h:
        h.run("Hello.")
        sid = h.session_id
    with Harness.resume(sid, db=db) as again:
        assert again.agent.backend.name == "anthropic"
        again.run("And again.")
    assert sim.requests[-1]["system"] == sim.requests[0]["system"]
    assert sim.responses[-1]["usage"]["cache_read_input_tokens"] > 0


def test_errors_are_one_clear_line(sim: AnthropicSim) -> None:
    b = backend(sim, max_retries=0)
    sim.fail_next(400, "invalid_request_error", "messages.0.content: something is wrong\nwith this")
    with pytest.raises(BackendError) as info:
        b.complete(request())
    text = str(info.value)
    assert (
        "\n" not in text and "HTTP 400 invalid_request_error: messages.0.content: something is wrong with this" in text
    )
    sim.fail_next(400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum")
    with pytest.raises(ContextWindowExceeded, match="prompt is too long"):
        b.complete(request())
    sim.fail_next(429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit")
    with pytest.raises(BackendError, match="rate-limiting") as limited:
        b.complete(request())
    assert "\n" not in str(limited.value) and "per-minute rate limit" in str(limited.value)


def test_overloaded_is_retried_and_announced(sim: AnthropicSim) -> None:
    b = backend(sim, max_retries=1)
    seen: list[Any] = []
    sim.fail_next(529, "overloaded_error", "Overloaded", {"retry-after-ms": "1"})
    done = b.complete(request(), on_event=seen.append)
    assert done.message.content == "ok"
    assert [type(e) for e in seen] == [Retry] and seen[0].reason == "HTTP 529"
    sim.fail_next(529, "overloaded_error", "Overloaded", {"retry-after-ms": "1"})
    sim.fail_next(529, "overloaded_error", "Overloaded", {"retry-after-ms": "1"})
    with pytest.raises(
        BackendError, match=re.escape("HTTP 529 overloaded_error: Overloaded. Anthropic's API is overloaded")
    ):
        b.complete(request())


def test_nothing_listening_is_unavailable() -> None:
    with AnthropicSim() as gone:
        url = gone.url
    b = AnthropicBackend(MODEL, base_url=url, api_key="test", max_retries=0)
    with pytest.raises(BackendUnavailable, match="cannot connect to"):
        b.complete(request())


def test_an_exchange_through_the_proxy_is_recorded_and_its_usage_read(
    sim: AnthropicSim, tmp_path: Any, capsys: Any
) -> None:
    from ctxwright.cli.main import main
    from ctxwright.proxy.log import proxy_session_requests, proxy_sessions
    from ctxwright.proxy.serve import RecordingProxy
    from ctxwright.proxy.server import ProxyConfig
    from ctxwright.store.sessions import Store

    store = Store(tmp_path / "proxy.db")
    system = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    with RecordingProxy.start(ProxyConfig(upstream=sim.url), store, printer=lambda _line: None) as proxy:
        client = anthropic.Anthropic(base_url=proxy.url, api_key="test", max_retries=0)
        for _ in range(2):
            client.messages.create(
                model=MODEL, max_tokens=32, system=system, messages=[{"role": "user", "content": "Hi."}]
            )
        assert proxy.recorder.wait_idle(60, at_least=2)
    sid = proxy_sessions(store)[0]["id"]
    records = proxy_session_requests(store, sid)
    assert [r["request"] for r in records] == sim.requests
    assert [r["response"]["usage"] for r in records] == [r["usage"] for r in sim.responses]
    capsys.readouterr()
    assert main(["audit", "--proxy-session", sid, "--json", "--db", str(store.path)]) == 0
    rows = json.loads(capsys.readouterr().out)["requests"]
    usage = sim.responses[1]["usage"]
    assert rows[1]["cached_tokens"] == usage["cache_read_input_tokens"] > 0
    prompt = usage["input_tokens"] + usage["cache_read_input_tokens"] + usage["cache_creation_input_tokens"]
    assert rows[1].get("prompt_tokens", prompt) == prompt
    store.close()


def test_parallel_tool_results_go_back_in_one_user_message(sim: AnthropicSim) -> None:
    calls = (ToolCall("toolu_a", "lookup", '{"n":1}'), ToolCall("toolu_b", "lookup", '{"n":2}'))
    req = request(
        SYSTEM,
        (TOOL_A,),
        Message("assistant", "Two lookups.", tool_calls=calls),
        Message("tool", "one", tool_call_id="toolu_a"),
        Message("tool", "two", tool_call_id="toolu_b"),
        Message("user", "Now answer."),
    )
    backend(sim).complete(req)  # the simulator refuses a tool_use whose result is not in the next message
    last = sim.requests[-1]["messages"][-1]
    assert [b["type"] for b in last["content"]] == ["tool_result", "tool_result", "text"]
    assert sim.requests[-1]["tool_choice"] == {"type": "auto"}


def test_the_cli_runs_on_anthropic(sim: AnthropicSim, tmp_path: Any, capsys: Any) -> None:
    from ctxwright.cli.main import main

    db = str(tmp_path / "c.db")
    argv = [
        "--db",
        db,
        "run",
        "--backend",
        "anthropic",
        "--base-url",
        sim.url,
        "--model",
        MODEL,
        "--cache-ttl",
        "1h",
        "hi",
    ]
    assert main(argv) == 0
    assert "ok" in capsys.readouterr().out
    assert sim.requests[-1]["model"] == MODEL
    marks = [b.body["cache_control"] for b in sim.blocks(sim.requests[-1]) if "cache_control" in b.body]
    assert marks and all(m == {"type": "ephemeral", "ttl": "1h"} for m in marks)
    assert main(["--db", db, "run", "--backend", "anthropic", "hi"]) == 2
    assert "the anthropic backend needs the model's name" in capsys.readouterr().err


def test_an_idle_gap_longer_than_the_ttl_writes_the_prefix_again(sim: AnthropicSim) -> None:
    b = backend(sim, clock=sim.clock.now)
    first = b.complete(request())
    sim.clock.advance(299)
    warm = b.complete(request())
    assert warm.usage.cached_tokens == first.usage.raw["usage"]["cache_creation_input_tokens"] > 0
    sim.clock.advance(301)
    cold = b.complete(request())
    assert cold.usage.cached_tokens == 0 and cold.usage.raw["usage"]["cache_creation_input_tokens"] > 0
    assert cold.usage.raw["cache"]["sent_at"] - warm.usage.raw["cache"]["sent_at"] == 301


def growing_loop(sim: AnthropicSim, mode: str, calls: int = 12) -> int:
    """Cache reads over a tool loop of ``calls`` calls with the ``mode`` placement."""
    b = backend(sim, breakpoints=mode)
    history: list[Message] = []
    read = 0
    for k in range(calls):
        done = b.complete(request(SYSTEM, (TOOL_A,), *history))
        read += done.usage.cached_tokens or 0
        call = ToolCall(f"toolu_{mode}_{k}", "lookup", json.dumps({"n": k}))
        history += [
            Message("assistant", f"Step {k}.", tool_calls=(call,)),
            Message("tool", f"result {k} " * 30, tool_call_id=call.id),
        ]
    return read


def test_ctxwright_placement_reads_more_than_one_breakpoint_after_the_system_prompt() -> None:
    reads = {}
    for mode in ("ctxwright", "system", "none"):
        with AnthropicSim() as sim:
            reads[mode] = growing_loop(sim, mode)
            if mode == "system":
                assert all(len(marked(sim, r)) == 1 for r in sim.requests)
    assert reads["none"] == 0 < reads["system"] < reads["ctxwright"]


def test_extended_thinking_is_sent_and_its_rules_are_the_providers(sim: AnthropicSim) -> None:
    b = backend(sim, thinking={"type": "enabled", "budget_tokens": 2048})
    b.complete(request())
    assert sim.requests[-1]["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    forced = ChatRequest(messages=request().messages, tools=(TOOL_A,), tool_choice="required")
    with pytest.raises(BackendError, match="Thinking may not be enabled when tool_choice forces tool use"):
        b.complete(forced)
    assert sim.requests[-1]["tool_choice"] == {"type": "any"}


def test_an_error_event_mid_stream_is_retried(sim: AnthropicSim) -> None:
    b = backend(sim, stream=True, max_retries=1)
    seen: list[Any] = []
    sim.fail_next_stream("overloaded_error", "Overloaded")
    done = b.complete(request(), on_event=seen.append)
    assert done.message.content == "ok" and [type(e) for e in seen] == [Retry, Token]
    sim.fail_next_stream("overloaded_error", "Overloaded")
    sim.fail_next_stream("overloaded_error", "Overloaded")
    with pytest.raises(BackendError, match="failed mid-stream \\(overloaded_error\\): Overloaded"):
        b.complete(request())


def test_cache_ttl_auto_on_the_harness_switches_to_1h_after_a_pause_of_minutes() -> None:
    """``--cache-ttl auto`` on the real backend reaches the context's TTL planner: after a
    6-minute pause has been seen (which a 5m entry does not survive), later calls ask for 1h."""
    with AnthropicSim() as sim:
        b = AnthropicBackend(MODEL, base_url=sim.url, api_key="test", ttl="auto", clock=sim.clock.now)
        with Harness(backend=b, system=SYSTEM, db=None) as h:
            h.run("First.")
            sim.clock.advance(360)
            h.run("Second, after a pause.")
            h.run("Third.")
    ttls = [
        b.body["cache_control"].get("ttl", "5m")
        for r in sim.requests
        for b in sim.blocks(r)
        if "cache_control" in b.body
    ]
    assert ttls[0] == "5m" and ttls[-1] == "1h", ttls
