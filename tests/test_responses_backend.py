"""``--backend openai-responses`` against the Responses simulator (``tests/providers/
responses_sim.py``, which caches, routes and refuses as OpenAI documents), through the
``Harness``: a long tool loop stays valid, byte-stable and cached; the routing key is stable
and inherited by a sub-agent; cost per call follows from the provider's own usage fields;
streaming, reasoning items and errors; and the routing hints of the chat-completions backend
(``--routing-header``, ``--prompt-cache-key``) on a real HTTP server."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from ctxwright import Harness
from ctxwright.backends.openai_responses import ResponsesBackend
from ctxwright.cache.routing import header_name, prefix_sha256, routing_key
from ctxwright.core.messages import Message
from ctxwright.core.progress import Token
from ctxwright.core.request import ChatRequest, ToolSpec
from ctxwright.errors import BackendError, BackendUnavailable, ConfigError

sys.path.insert(0, str(Path(__file__).parent))

from fakeserver import FakeOpenAIServer
from providers.responses_sim import JSONDict, ResponsesSim, call, reasoning, text

SYSTEM = "You follow the house rules, every one of them, in order. " * 90  # ~5,000 bytes
#: the one price source (cache/prices.py), as a user's --prices file gives it (USD per million
#: tokens; gpt-5.6 is not in the built-in table): a cache write costs 1.25x the input price
#: from gpt-5.6 on; the hand computation below writes the same numbers out
PRICES_TOML = """[models."gpt-5.5"]
provider = "openai"
input = 1.25
cached_read = 0.125
cache_write_5m = 1.25
output = 10.0

[models."gpt-5.6"]
provider = "openai"
input = 1.25
cached_read = 0.125
cache_write_5m = 1.5625
output = 10.0
"""


def lookup(i: int) -> str:
    """Look up entry i."""
    return f"entry {i}: " + "value " * 8


def _loop(n_calls: int) -> Any:
    """A script: function calls for the first n_calls - 1 requests, then the answer."""
    seen = {"n": 0}

    def respond(body: JSONDict) -> list[JSONDict]:
        seen["n"] += 1
        if seen["n"] < n_calls:
            return [call("lookup", {"i": seen["n"]})]
        return [text("all entries read")]

    return respond


def _shared_tokens(sim: ResponsesSim, a: JSONDict, b: JSONDict) -> int:
    """The sim's tokens of the prefix two requests share (whole blocks, its counting rule)."""
    pa, pb = sim.prompt(a), sim.prompt(b)
    shared = 0
    for x, y, end in zip(pa.blocks, pb.blocks, pb.ends, strict=False):
        if x != y:
            break
        shared = end
    return shared


def _cost(prompt: int, cached: int, written: int, output: int, write_price: float) -> float:
    """By hand: OpenAI's input count includes the cached and the written tokens."""
    return ((prompt - cached - written) * 1.25 + cached * 0.125 + written * write_price + output * 10.0) / 1e6


@pytest.mark.parametrize("model", ["gpt-5.5", "gpt-5.6"])
def test_a_30_call_tool_loop_is_valid_byte_stable_and_cached(model: str, tmp_path: Path) -> None:
    from ctxwright.cli.show import call_cost_of

    prices = tmp_path / "prices.toml"
    prices.write_text(PRICES_TOML)
    write_price = 1.5625 if model == "gpt-5.6" else 1.25
    with ResponsesSim(respond=_loop(30), seconds_per_request=5.0) as sim:
        h = Harness(
            backend="openai-responses",
            base_url=sim.url + "/v1",
            model=model,
            api_key="sk-test",
            system=SYSTEM,
            tools=[lookup],
            max_iterations=40,
            db=tmp_path / "a.db",
            prices=str(prices),
        )
        r = h.run("Read the entries one by one.")
        assert r.stop_reason == "final_answer" and r.final_answer == "all entries read"
        reqs = sim.requests
        assert len(reqs) == 30 and not sim.refused  # every request valid for the provider's rules
        # the frozen prefix is byte-identical on every call: tools, then the system item first
        head = [json.dumps([q["tools"], q["input"][0]], sort_keys=True) for q in reqs]
        assert len(set(head)) == 1
        assert all("previous_response_id" not in q and q["store"] is False for q in reqs)  # stateless
        keys = {q["prompt_cache_key"] for q in reqs}
        assert len(keys) == 1 and next(iter(keys)).startswith("cw-")
        if model == "gpt-5.6":  # breakpoints: options, never with retention, at most 4 writes
            assert all(
                q["prompt_cache_options"]["mode"] == "implicit" and "prompt_cache_retention" not in q for q in reqs
            )
            assert all(len(e["breakpoints_written"]) <= 4 for e in sim.log)
        else:
            assert not any("prompt_cache_options" in q for q in reqs)
        # hit ratio of the reusable prefix after the first call
        ratios = []
        for k in range(1, 30):
            reusable = _shared_tokens(sim, reqs[k - 1], reqs[k])
            ratios.append(sim.log[k]["cached"] / reusable)
        assert min(ratios) >= 0.9, ratios
        # cost per call from the recorded usage equals the hand computation from the provider's fields
        calls = h.store.calls(h.session_id) if h.store is not None else []
        assert len(calls) == 30
        for rec, sent in zip(calls, sim.responses, strict=True):
            u = sent["usage"]
            details = u["input_tokens_details"]
            written = details.get("cache_write_tokens", 0)
            hand = _cost(u["input_tokens"], details["cached_tokens"], written, u["output_tokens"], write_price)
            priced = call_cost_of(rec, h.pricing)
            assert priced is not None and priced.cost == pytest.approx(hand, abs=1e-12)
            cache = rec.usage["raw"]["cache"]
            assert rec.usage["raw"]["provider"] == "openai-responses" and rec.usage["raw"]["usage"] == u
            assert cache["routing_key"] == reqs[0]["prompt_cache_key"] and cache["minimum_tokens"] == 1024
            assert cache["ttl"] == ("30m" if model == "gpt-5.6" else "in_memory")
        # cached tokens are inside input_tokens: never counted twice
        later = calls[5]
        assert later.cached_tokens and later.prompt_tokens == sim.responses[5]["usage"]["input_tokens"]
        h.close()


def test_the_routing_key_is_inherited_by_a_sub_agent_and_survives_a_resume(tmp_path: Path) -> None:
    def respond(body: JSONDict) -> list[JSONDict]:
        users = [
            p["text"]
            for it in body["input"]
            if it.get("role") == "user"
            for p in it["content"]
            if not p["text"].startswith("<agent_status>")
        ]
        outputs = [it for it in body["input"] if it.get("type") == "function_call_output"]
        if any("count the rules" in u and "Task" in u for u in users):  # the sub-agent
            return [text("there are 90 rules")]
        if not outputs:
            return [call("delegate", {"task": "count the rules"})]
        return [text("done: 90 rules")]

    db = tmp_path / "d.db"
    with ResponsesSim(respond=respond, seconds_per_request=5.0) as sim:
        h = Harness(
            backend="openai-responses", base_url=sim.url + "/v1", model="gpt-5.5", api_key="k", system=SYSTEM, db=db
        )
        r = h.run("How many rules? Use a sub-agent.")
        assert r.final_answer == "done: 90 rules"
        sid = h.session_id
        h.close()
        assert len(sim.requests) == 3  # parent, child, parent
        keys = [q["prompt_cache_key"] for q in sim.requests]
        assert len(set(keys)) == 1  # the child inherits its parent's key
        # its prefix is the parent's too: the child's first call hits the parent's cache
        assert sim.log[1]["cached"] > 0
        other = Harness(
            backend="openai-responses", base_url=sim.url + "/v1", model="gpt-5.5", api_key="k", system=SYSTEM, db=db
        )
        other.run("hello")
        assert sim.requests[-1]["prompt_cache_key"] != keys[0]  # another session: another key
        other.close()
        again = Harness(resume=sid, db=db, base_url=sim.url + "/v1", api_key="k")
        assert isinstance(again.backend, ResponsesBackend)  # the stored backend name is recreated
        again.run("And now?")
        assert sim.requests[-1]["prompt_cache_key"] == keys[0]  # same lineage, same key
        again.close()


def test_a_given_prompt_cache_key_and_retention_are_sent_as_given() -> None:
    with ResponsesSim() as sim:
        h = Harness(
            backend="openai-responses",
            base_url=sim.url + "/v1",
            model="gpt-5.5",
            api_key="k",
            system=SYSTEM,
            prompt_cache_key="tenant-42",
            prompt_cache_retention="24h",
        )
        h.run("hi")
        q = sim.requests[-1]
        assert q["prompt_cache_key"] == "tenant-42" and q["prompt_cache_retention"] == "24h"
        h.close()
    with pytest.raises(ConfigError, match="takes a retention of 30m or 12h"):
        Harness(
            backend="openai-responses", model="gpt-5.6", prompt_cache_retention="24h", base_url="http://127.0.0.1:9/v1"
        )


def test_a_streamed_run_sends_tokens_and_records_the_same_usage() -> None:
    replies = iter([[call("lookup", {"i": 1})], [text("streamed answer, in pieces")]])
    tokens: list[str] = []
    with ResponsesSim(respond=lambda b: next(replies)) as sim:
        h = Harness(
            backend="openai-responses",
            base_url=sim.url + "/v1",
            model="gpt-5.5",
            api_key="k",
            system=SYSTEM,
            tools=[lookup],
            stream=True,
            on_event=lambda e: tokens.append(e.text) if isinstance(e, Token) else None,
        )
        r = h.run("go")
        assert r.final_answer == "streamed answer, in pieces"
        assert "".join(tokens) == "streamed answer, in pieces" and len(tokens) > 1
        assert all(q.get("stream") is True for q in sim.requests)
        assert sim.requests[1]["input"][-3]["type"] == "function_call"  # the streamed call came back whole
        assert r.calls[-1].prompt_tokens == sim.responses[-1]["usage"]["input_tokens"]
        h.close()


def test_reasoning_items_go_back_byte_for_byte_with_their_encrypted_content() -> None:
    replies = iter([[reasoning("I should look it up."), call("lookup", {"i": 7})], [text("entry 7 read")]])
    with ResponsesSim(respond=lambda b: next(replies)) as sim:
        h = Harness(
            backend="openai-responses",
            base_url=sim.url + "/v1",
            model="gpt-5.5",
            api_key="k",
            system=SYSTEM,
            tools=[lookup],
        )
        r = h.run("read entry 7")
        assert r.final_answer == "entry 7 read" and not sim.refused  # the sim verified the encrypted item
        assert sim.requests[0]["include"] == ["reasoning.encrypted_content"]
        sent_back = [it for it in sim.requests[1]["input"] if it.get("type") == "reasoning"]
        assert sent_back == [sim.responses[0]["output"][0]]  # verbatim, encrypted_content included
        assert "encrypted_content" in sent_back[0]
        h.close()


def test_errors_are_one_clear_line(tmp_path: Path) -> None:
    # nothing listening
    b = ResponsesBackend("gpt-5.5", base_url="http://127.0.0.1:9/v1", max_retries=0)
    req = ChatRequest(messages=(Message(role="system", content="s"), Message(role="user", content="hi")))
    with pytest.raises(BackendUnavailable) as e1:
        b.complete(req)
    assert "\n" not in str(e1.value) and "cannot connect" in str(e1.value)
    # the provider's refusal, in its own words
    with ResponsesSim() as sim:
        forced = ResponsesBackend("gpt-5.5", base_url=sim.url + "/v1", max_retries=0, breakpoints=True)
        with pytest.raises(BackendError) as e2:
            forced.complete(req)
        msg = str(e2.value)
        assert "\n" not in msg and "HTTP 400" in msg and "prompt_cache_options is not supported with model" in msg
    # a chat-completions-only server has no /v1/responses
    with FakeOpenAIServer([FakeOpenAIServer.error(404, {"error": {"message": "Not Found"}})]) as fake:
        chat_only = ResponsesBackend("m", base_url=fake.url, max_retries=0)
        with pytest.raises(BackendError) as e3:
            chat_only.complete(req)
        assert "\n" not in str(e3.value) and "--backend openai" in str(e3.value)
    with pytest.raises(ConfigError) as e4:
        Harness(backend="openai", model="m", base_url="http://127.0.0.1:9/v1", routing_header="bad header")
    assert "\n" not in str(e4.value) and "not an HTTP header name" in str(e4.value)


def test_the_chat_backend_sends_the_routing_key_in_the_header_and_body_and_records_it(tmp_path: Path) -> None:
    replies = [FakeOpenAIServer.reply_text("one"), FakeOpenAIServer.reply_text("two")]
    with FakeOpenAIServer(replies) as fake:
        h = Harness(
            backend="openai",
            base_url=fake.url,
            model="m",
            system=SYSTEM,
            routing_header="dynamo",
            prompt_cache_key="auto",
            db=tmp_path / "c.db",
        )
        h.run("first")
        h.run("second")
        got = fake.recorded
        keys = {r.headers["x-dynamo-session-id"] for r in got}
        assert len(keys) == 1
        (key,) = keys
        assert all(r.json["prompt_cache_key"] == key for r in got)
        assert key == routing_key(prefix_sha256(h.session.build_request()), h.session_id)
        calls = h.store.calls(h.session_id) if h.store is not None else []
        assert [c.usage["raw"]["cache"]["routing_key"] for c in calls] == [key, key]
        # the key is transport: not in the recorded request's options
        assert all("prompt_cache_key" not in c.extra for c in calls)
        h.close()
    # without the options the chat backend sends neither
    with FakeOpenAIServer([FakeOpenAIServer.reply_text("x")]) as fake:
        plain = Harness(backend="openai", base_url=fake.url, model="m", system="s")
        plain.run("q")
        assert "prompt_cache_key" not in fake.recorded[0].json
        assert not any(k.startswith("x-dynamo") for k in fake.recorded[0].headers)
        plain.close()


def test_routing_header_presets_follow_each_servers_docs() -> None:
    assert header_name("dynamo") == "X-Dynamo-Session-ID"
    assert header_name("sglang") == "x-smg-routing-key"
    assert header_name("vllm") == "x-user-id"
    assert header_name("X-Session-Affinity") == "X-Session-Affinity"
    with pytest.raises(ValueError, match="prompt-cache-key"):
        header_name("openai")
    # the key is a hash of the prefix and the root: equal for equal inputs, never the prompt text
    req = ChatRequest(messages=(Message(role="system", content="secret rules"),), tools=(ToolSpec.create("t", "d"),))
    k = routing_key(prefix_sha256(req), "root1")
    assert k == routing_key(prefix_sha256(req), "root1") != routing_key(prefix_sha256(req), "root2")
    assert "secret" not in k and len(k) <= 64


def test_diagnostics_name_the_previous_response_and_are_recorded_verbatim() -> None:
    sys_msg = Message(role="system", content=SYSTEM)
    first = ChatRequest(messages=(sys_msg, Message(role="user", content="one")))
    with ResponsesSim() as sim:
        b = ResponsesBackend(
            "gpt-5.6", base_url=sim.url + "/v1", max_retries=0, diagnostics=True, prompt_cache_key="k1"
        )
        c1 = b.complete(first)
        assert "comparison_response_id" not in sim.requests[0]["prompt_cache_options"]  # nothing to compare yet
        b.prompt_cache_key = "k2"  # a changed key: the provider names it as the reason
        c2 = b.complete(ChatRequest(messages=(sys_msg, Message(role="user", content="one"))))
        assert sim.requests[1]["prompt_cache_options"]["comparison_response_id"] == c1.usage.raw["response_id"]
        assert c2.usage.raw["diagnostics"] == sim.responses[1]["prompt_cache_diagnostics"]
        assert c2.usage.raw["diagnostics"]["reason"] == "prompt_cache_key_changed"
        assert c2.usage.raw["cache"]["routing_key"] == "k2" != c1.usage.raw["cache"]["routing_key"]
        b.close()


@pytest.mark.parametrize(
    ("backend", "option", "value", "names"),
    [
        ("openai", "cache_diagnostics", True, "backend='anthropic' or backend='openai-responses'"),
        ("openai", "cache_ttl", "1h", "backend='anthropic'"),
        ("openai-responses", "cache_ttl", "1h", "prompt_cache_retention="),
        ("embedded", "cache_diagnostics", False, "backend='anthropic'"),
        ("embedded", "cache_ttl", "5m", "backend='anthropic'"),
    ],
)
def test_a_cache_option_a_backend_does_not_send_is_refused_not_ignored(
    backend: str, option: str, value: object, names: str, tmp_path: Path
) -> None:
    """A flag the backend would drop silently leaves a user believing a cache setting is in
    force: each is one clear line instead."""
    served = {"model": "m", "base_url": "http://127.0.0.1:9/v1"} if backend != "embedded" else {}
    with pytest.raises(ConfigError) as e:
        Harness(backend=backend, db=tmp_path / "c.db", **served, **{option: value})  # type: ignore[arg-type]
    msg = str(e.value)
    assert "\n" not in msg and f"{option}=" in msg and names in msg and backend in msg


def test_the_cli_refuses_cache_diagnostics_on_the_chat_backend(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "ctxwright",
            "--db",
            str(tmp_path / "c.db"),
            "run",
            "hi",
            "--backend",
            "openai",
            "--model",
            "m",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--cache-diagnostics",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, out.stderr
    assert "cache_diagnostics= (--cache-diagnostics) is for" in out.stderr and "Traceback" not in out.stderr
