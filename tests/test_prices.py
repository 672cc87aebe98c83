"""What a call costs (``core/usage.py`` read_cache_usage, ``cache/prices.py``): each provider's
usage shape split once with no token counted twice, the price table and its matching, the
``--prices`` TOML file and every way it can be wrong, and the cost in ``audit``, ``show``,
``report`` and ``run`` -- against logs, stored sessions, and the official ``anthropic`` and
``openai`` SDKs talking to a loopback server."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from hypothesis import given
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ctxwright import Harness, ScriptedBackend
from ctxwright.cache.prices import (
    BUILTIN_PRICES,
    ModelPrice,
    PriceTable,
    call_cost,
    cost_if_held,
    held_usage,
    load_prices,
    price_for,
    pricing_of,
    with_reads,
)
from ctxwright.cache.prices_file import MAX_PRICES_FILE_BYTES
from ctxwright.cli.main import main
from ctxwright.core.messages import Usage
from ctxwright.core.usage import CacheUsage, raw_cache_usage, read_cache_usage, read_usage, usage_provider
from ctxwright.errors import ConfigError, PricesFileError

SONNET = "claude-sonnet-4-5-20250929"

# -- one reader, no double counting ---------------------------------------------------------

n = st.integers(min_value=0, max_value=2_000_000)


@given(inp=n, read=n, w5=n, w1=n, out=n, split=st.booleans())
def test_anthropic_prompt_is_the_sum_of_its_three_counts(inp, read, w5, w1, out, split):
    usage: dict[str, Any] = {
        "input_tokens": inp,
        "cache_read_input_tokens": read,
        "cache_creation_input_tokens": w5 + w1,
        "output_tokens": out,
    }
    if split:
        usage["cache_creation"] = {"ephemeral_5m_input_tokens": w5, "ephemeral_1h_input_tokens": w1}
    u = read_cache_usage("anthropic", usage)
    assert u.prompt == inp + read + w5 + w1 == read_usage({"usage": usage})["prompt_tokens"]
    assert (u.uncached_input, u.cache_read, u.output) == (inp, read, out)
    # without the TTL split every write was a 5-minute one (the default TTL)
    assert (u.cache_write_5m, u.cache_write_1h) == ((w5, w1) if split else (w5 + w1, 0))


@given(total=n, cached=n, written=n, out=n, chat=st.booleans())
def test_openai_cached_and_written_tokens_are_inside_the_input_count(total, cached, written, out, chat):
    if chat:
        details = {"cached_tokens": cached, "cache_write_tokens": written}
        usage = {"prompt_tokens": total, "completion_tokens": out, "prompt_tokens_details": details}
        provider = "openai"
    else:
        details = {"cached_tokens": cached, "cache_write_tokens": written}
        usage = {"input_tokens": total, "output_tokens": out, "input_tokens_details": details}
        provider = "openai-responses"
    u = read_cache_usage(provider, usage)
    # the prompt is the provider's own input count, never that plus the cached tokens
    assert u.prompt == total == read_usage({"usage": usage})["prompt_tokens"]
    assert u.cache_read == min(cached, total)
    assert u.cache_write_5m == min(written, total - u.cache_read) and u.cache_write_1h == 0
    assert u.uncached_input == total - u.cache_read - u.cache_write_5m >= 0
    assert usage_provider({"usage": usage}) == provider


@given(hit=n, miss=n, out=n)
def test_deepseek_hit_plus_miss_is_the_prompt(hit, miss, out):
    usage = {
        "prompt_tokens": hit + miss,
        "completion_tokens": out,
        "prompt_cache_hit_tokens": hit,
        "prompt_cache_miss_tokens": miss,
    }
    u = read_cache_usage("deepseek", usage)
    assert (u.uncached_input, u.cache_read, u.prompt, u.output) == (miss, hit, hit + miss, out)
    assert read_usage({"usage": usage}) == {"prompt_tokens": hit + miss, "completion_tokens": out, "cached_tokens": hit}


@given(evaluated=n, reused=n, out=n)
def test_llama_cpp_timings_evaluated_plus_reused_is_the_prompt(evaluated, reused, out):
    timings = {"prompt_n": evaluated, "cache_n": reused, "predicted_n": out}
    u = read_cache_usage("llama.cpp", timings)
    assert (u.uncached_input, u.cache_read, u.prompt) == (evaluated, reused, evaluated + reused)
    assert read_usage({"timings": timings})["prompt_tokens"] == evaluated + reused


@given(
    shape=st.sampled_from(["anthropic", "openai-responses", "openai", "deepseek", "llama.cpp"]),
    a=n,
    b=n,
    c=n,
)
def test_every_shape_splits_its_prompt_into_disjoint_parts(shape, a, b, c):
    usage = {
        "anthropic": {"input_tokens": a, "cache_read_input_tokens": b, "cache_creation_input_tokens": c},
        "openai-responses": {"input_tokens": a + b + c, "input_tokens_details": {"cached_tokens": b}},
        "openai": {"prompt_tokens": a + b, "prompt_tokens_details": {"cached_tokens": b}},
        "deepseek": {"prompt_cache_hit_tokens": b, "prompt_cache_miss_tokens": a},
        "llama.cpp": {"prompt_n": a, "cache_n": b},
    }[shape]
    u = read_cache_usage(shape, usage)
    parts = (u.uncached_input, u.cache_read, u.cache_write_5m, u.cache_write_1h)
    assert all(p >= 0 for p in parts) and sum(parts) == u.prompt
    counts = read_usage({"timings": usage} if shape == "llama.cpp" else {"usage": usage})
    assert counts["prompt_tokens"] == u.prompt and counts["cached_tokens"] == u.cache_read


def test_partial_and_malformed_usage_never_inflates_the_prompt():
    # a stream's last event may carry only the output count: no prompt, not zero
    assert read_usage({"usage": {"output_tokens": 5}}) == {
        "prompt_tokens": None,
        "completion_tokens": 5,
        "cached_tokens": None,
    }
    # a cached count above the input count is capped at it: the parts still add up
    u = read_cache_usage("openai", {"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 900}})
    assert (u.uncached_input, u.cache_read, u.prompt) == (0, 100, 100)
    # negative and non-numeric counts read as nothing
    u = read_cache_usage("anthropic", {"input_tokens": -5, "cache_read_input_tokens": "9", "output_tokens": True})
    assert u == CacheUsage()
    # llama.cpp's OpenAI-style usage without details: its timings say what was reused
    body = {"usage": {"prompt_tokens": 10, "completion_tokens": 2}, "timings": {"prompt_n": 4, "cache_n": 6}}
    assert read_usage(body)["cached_tokens"] == 6
    assert raw_cache_usage(body) == ("llama.cpp", CacheUsage(uncached_input=4, cache_read=6))


def test_raw_usage_names_its_provider():
    raw = {"provider": "anthropic", "usage": {"input_tokens": 3, "cache_read_input_tokens": 7}}
    assert raw_cache_usage(raw) == ("anthropic", CacheUsage(uncached_input=3, cache_read=7))
    assert raw_cache_usage({"usage": {}}) is None and raw_cache_usage(None) is None


# -- the table ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "model", "row"),
    [
        ("anthropic", SONNET, "claude-sonnet-4-5"),
        ("anthropic", "claude-sonnet-4-20250514", "claude-sonnet-4"),
        ("anthropic", "claude-3-5-haiku-latest", "claude-3-5-haiku"),
        ("anthropic", "us.anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5"),
        ("openai", "gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
        ("openai-responses", "gpt-4o-2024-08-06", "gpt-4o"),
        ("openai", "openai/gpt-4.1", "gpt-4.1"),
        ("deepseek", "deepseek-chat", "deepseek-chat"),
        # a variant or a newer version never borrows its family's price
        ("anthropic", "claude-sonnet-4-6", None),
        ("openai", "gpt-5.4-pro", None),
        ("anthropic", "claude-opus-4-6[1m]", None),
        ("openai", "claude-sonnet-4-5", None),  # another provider's row
        ("openai", "my-model", None),
    ],
)
def test_longest_prefix_that_leaves_only_a_snapshot(provider, model, row):
    p = price_for(provider, model)
    assert (p.model if p else None) == row


def test_every_builtin_row_has_its_source_and_anthropic_multipliers():
    for p in BUILTIN_PRICES.rows:
        assert "read 2026-12-02" in p.source and p.input > 0 and p.output > 0
        assert p.cached_read <= p.input <= p.cache_write_5m <= p.cache_write_1h
        if p.provider == "anthropic" and p.model != "claude-3-haiku":
            assert (p.cached_read, p.cache_write_5m, p.cache_write_1h) == pytest.approx(
                (p.input * 0.1, p.input * 1.25, p.input * 2)
            )
        if p.provider == "openai" and not p.model.startswith("gpt-5.6"):  # no write premium before GPT-5.6
            assert p.cache_write_5m == p.cache_write_1h == p.input
        if p.model.startswith("gpt-5.6"):  # from GPT-5.6 on, a cache write costs 1.25x the input
            assert p.cache_write_5m == p.cache_write_1h == pytest.approx(p.input * 1.25)


def test_gpt_5_6_has_rows_per_named_model_and_none_for_the_bare_family_name():
    assert price_for("openai-responses", "gpt-5.6-sol") is not None
    assert price_for("openai", "gpt-5.6-terra-2026-07-30") is not None  # a snapshot falls to its row
    assert price_for("openai", "gpt-5.6") is None  # three models at three prices: no guess


# -- costs by hand --------------------------------------------------------------------------

ANTHROPIC_WRITE = {
    "input_tokens": 50,
    "cache_creation_input_tokens": 3000,
    "cache_read_input_tokens": 0,
    "cache_creation": {"ephemeral_5m_input_tokens": 1000, "ephemeral_1h_input_tokens": 2000},
    "output_tokens": 200,
}
ANTHROPIC_READ = {
    "input_tokens": 60,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 3000,
    "output_tokens": 100,
}
# Sonnet 4.5: 3 input, 0.30 read, 3.75 5m write, 6 1h write, 15 output (USD per million)
ANTHROPIC_WRITE_COST = (50 * 3 + 1000 * 3.75 + 2000 * 6 + 200 * 15) / 1e6  # 0.0189
ANTHROPIC_READ_COST = (60 * 3 + 3000 * 0.3 + 100 * 15) / 1e6  # 0.00258


def _price(provider: str, model: str) -> ModelPrice:
    p = price_for(provider, model)
    assert p is not None
    return p


def test_anthropic_cost_by_hand():
    p = _price("anthropic", SONNET)
    assert call_cost(read_cache_usage("anthropic", ANTHROPIC_WRITE), p) == pytest.approx(ANTHROPIC_WRITE_COST)
    assert call_cost(read_cache_usage("anthropic", ANTHROPIC_READ), p) == pytest.approx(ANTHROPIC_READ_COST)
    no_split = {k: v for k, v in ANTHROPIC_WRITE.items() if k != "cache_creation"}  # all writes at 5m
    assert call_cost(read_cache_usage("anthropic", no_split), p) == pytest.approx(
        (50 * 3 + 3000 * 3.75 + 200 * 15) / 1e6
    )


def test_openai_chat_and_responses_cost_by_hand():
    mini = _price("openai", "gpt-4o-mini")  # 0.15 input, 0.075 cached, 0.60 output
    chat = {"prompt_tokens": 2000, "completion_tokens": 100, "prompt_tokens_details": {"cached_tokens": 1024}}
    assert call_cost(read_cache_usage("openai", chat), mini) == pytest.approx((976 * 0.15 + 1024 * 0.075 + 60) / 1e6)
    g54 = _price("openai-responses", "gpt-5.4")  # 2.50 input, 0.25 cached, 15 output
    resp = {"input_tokens": 12033, "input_tokens_details": {"cached_tokens": 11904}, "output_tokens": 44}
    assert call_cost(read_cache_usage("openai-responses", resp), g54) == pytest.approx(
        (129 * 2.5 + 11904 * 0.25 + 44 * 15) / 1e6
    )


def test_responses_cache_writes_at_their_own_price():
    # a GPT-5.6-style model bills writes at 1.25x input (priced from a user's table)
    p = ModelPrice("openai", "gpt-5.6-sol", 5.0, 0.5, 6.25, 6.25, 30.0)
    usage = {
        "input_tokens": 4000,
        "output_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 3207},
    }
    u = read_cache_usage("openai-responses", usage)
    assert (u.uncached_input, u.cache_write_5m) == (793, 3207)
    assert call_cost(u, p) == pytest.approx((793 * 5 + 3207 * 6.25 + 10 * 30) / 1e6)


def test_deepseek_cost_by_hand():
    usage = {"prompt_cache_hit_tokens": 640, "prompt_cache_miss_tokens": 360, "completion_tokens": 50}
    p = _price("deepseek", "deepseek-chat")  # 0.27 miss, 0.07 hit, 1.10 output
    assert call_cost(read_cache_usage("deepseek", usage), p) == pytest.approx((360 * 0.27 + 640 * 0.07 + 55) / 1e6)


def test_cost_if_held_moves_writes_then_uncached_into_reads():
    p = _price("anthropic", SONNET)
    u = CacheUsage(uncached_input=500, cache_read=100, cache_write_5m=300, cache_write_1h=200, output=10)
    # 900 reusable: 800 move into reads, the 1h writes first, then 5m, then 300 of the uncached
    assert held_usage(u, 900) == CacheUsage(200, 900, 0, 0, 10)
    assert cost_if_held(u, p, 900) == pytest.approx((200 * 3 + 900 * 0.3 + 10 * 15) / 1e6)
    assert held_usage(u, 50) == u  # it read more than that already: holding cannot make it dearer
    assert held_usage(u, 10**9).cache_read == u.prompt  # never more than the prompt
    assert with_reads(u, 40) == replace(u, cache_read=40, uncached_input=560)


# -- the TOML file --------------------------------------------------------------------------

GOOD = """
[models."my-model"]
provider = "openai"
input = 1.0
cached_read = 0.1
cache_write_5m = 1.25
cache_write_1h = 2.0
output = 4.0

[models."claude-sonnet-4-5"]
provider = "anthropic"
input = 30
output = 150
"""


def test_a_prices_file_adds_models_and_overrides_the_table(tmp_path):
    f = tmp_path / "prices.toml"
    f.write_text(GOOD)
    table = load_prices(f)
    assert [r.model for r in table.rows] == ["my-model", "claude-sonnet-4-5"]
    pricing = pricing_of(f)
    mine = pricing.price("openai", "my-model-2025-01-01")
    assert mine == ModelPrice("openai", "my-model", 1.0, 0.1, 1.25, 2.0, 4.0, str(f))
    son = pricing.price("anthropic", SONNET)
    assert son is not None and (son.input, son.cached_read, son.cache_write_5m, son.output) == (30, 30, 30, 150)
    assert pricing.price("anthropic", "claude-opus-4-5") == price_for("anthropic", "claude-opus-4-5")
    assert pricing_of(PriceTable(table.rows)).price("openai", "my-model") is not None


BAD = [
    ("not toml", "[models.x\ninput = 1", "not a TOML file"),
    ("unknown key", '[models."m"]\ninput = 1\ncached = 0.5', "unknown key(s) cached"),
    ("negative", '[models."m"]\ninput = -1', "must be a number >= 0"),
    ("string", '[models."m"]\ninput = "cheap"', "is not a number"),
    ("bool", '[models."m"]\ninput = 1\noutput = true', "is not a number"),
    ("nan", '[models."m"]\ninput = nan', "must be a number >= 0"),
    ("no input", '[models."m"]\noutput = 1', "has no input price"),
    ("top-level", 'input = 1\n[models."m"]\ninput = 1', "unknown top-level key(s) input"),
    ("no models", "", 'no [models."NAME"] table'),
    ("not a table", "models = 3", 'no [models."NAME"] table'),
    ("provider", '[models."m"]\ninput = 1\nprovider = 2', "provider must be a string"),
]


@pytest.mark.parametrize(("text", "says"), [(t, s) for _, t, s in BAD], ids=[k for k, _, _ in BAD])
def test_a_bad_prices_file_is_one_clear_line(tmp_path, text, says):
    f = tmp_path / "prices.toml"
    f.write_text(text)
    with pytest.raises(PricesFileError) as e:
        load_prices(f)
    assert isinstance(e.value, ConfigError)
    assert says in str(e.value) and "\n" not in str(e.value) and str(f) in str(e.value)


def test_a_prices_file_over_a_megabyte_or_missing_or_binary_is_refused(tmp_path):
    big = tmp_path / "big.toml"
    big.write_bytes(b"#" * (MAX_PRICES_FILE_BYTES + 1))
    with pytest.raises(PricesFileError, match="more than 1000000 is refused"):
        load_prices(big)
    with pytest.raises(PricesFileError, match="cannot read the prices file"):
        load_prices(tmp_path / "missing.toml")
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(PricesFileError, match="not UTF-8"):
        load_prices(binary)


# -- the commands ---------------------------------------------------------------------------


def _anthropic_body(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": SONNET, "max_tokens": 100, "system": "You are terse. " * 50, "messages": messages}


def _anthropic_log(tmp_path: Path, *, streamed: bool) -> Path:
    u1 = {"role": "user", "content": "one"}
    a1 = {"role": "assistant", "content": "ok"}
    u2 = {"role": "user", "content": "two"}
    records = []
    for msgs, usage in (([u1], ANTHROPIC_WRITE), ([u1, a1, u2], ANTHROPIC_READ)):
        if streamed:  # the prompt side in message_start, the output in message_delta
            start = {k: v for k, v in usage.items() if k != "output_tokens"} | {"output_tokens": 1}
            response: Any = [
                {"type": "message_start", "message": {"type": "message", "model": SONNET, "usage": start}},
                {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "ok"}},
                {"type": "message_delta", "usage": {"output_tokens": usage["output_tokens"]}},
                {"type": "message_stop"},
            ]
        else:
            response = {"type": "message", "model": SONNET, "content": [], "usage": usage}
        records.append({"request": _anthropic_body(msgs), "response": response})
    path = tmp_path / "anthropic.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.mark.parametrize("streamed", [False, True])
def test_audit_prices_anthropic_cache_writes_exactly(tmp_path, capsys, streamed):
    assert main(["audit", str(_anthropic_log(tmp_path, streamed=streamed)), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    costs = [r["cost"] for r in doc["requests"]]
    assert costs == pytest.approx([ANTHROPIC_WRITE_COST, ANTHROPIC_READ_COST])
    assert [r["prompt_tokens"] for r in doc["requests"]] == [3050, 3060]  # every input token, once
    s = doc["summary"]
    assert s["est_cost"] == pytest.approx(ANTHROPIC_WRITE_COST + ANTHROPIC_READ_COST)
    assert s["priced_requests"] == 2 and s["est_cost_if_held"] <= s["est_cost"]


def test_audit_table_prints_cost_per_call_and_if_held(tmp_path, capsys):
    assert main(["audit", str(_anthropic_log(tmp_path, streamed=False))]) == 0
    out = capsys.readouterr().out
    assert "cost $" in out and "if held $" in out and "0.01890" in out and "0.00258" in out
    assert "estimated cost 0.0215 · if the cache had held" in out
    assert "claude-sonnet-4-5: platform.claude.com/docs/en/models/sonnet-4-5/overview" in out


def _chat_log(tmp_path: Path, model: str) -> Path:
    usage = {"prompt_tokens": 2000, "completion_tokens": 100, "prompt_tokens_details": {"cached_tokens": 1024}}
    body = {"model": model, "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]}
    path = tmp_path / "chat.jsonl"
    path.write_text(json.dumps({"request": body, "response": {"model": model, "usage": usage}}) + "\n")
    return path


def test_audit_with_a_prices_file_prices_an_unknown_model(tmp_path, capsys):
    log = _chat_log(tmp_path, "my-model")
    assert main(["audit", str(log), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["est_cost"] is None  # no price, no guess
    prices = tmp_path / "prices.toml"
    prices.write_text(GOOD)
    assert main(["audit", str(log), "--json", "--prices", str(prices)]) == 0
    doc = json.loads(capsys.readouterr().out)
    # cached tokens are inside prompt_tokens: 976 uncached + 1024 cached, never 2000 + 1024
    assert doc["requests"][0]["cost"] == pytest.approx((976 * 1.0 + 1024 * 0.1 + 100 * 4.0) / 1e6)
    # the flat flags override the table for every call
    assert main(["audit", str(log), "--json", "--prices", str(prices), "--price-input", "2"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["requests"][0]["cost"] == pytest.approx((2000 * 2.0) / 1e6)


@pytest.mark.parametrize("command", ["audit", "show", "report", "run"])
@pytest.mark.parametrize(("text", "says"), [(t, s) for _, t, s in BAD[:4]], ids=[k for k, _, _ in BAD[:4]])
def test_every_command_refuses_a_bad_prices_file_in_one_line(tmp_path, capsys, command, text, says):
    prices = tmp_path / "prices.toml"
    prices.write_text(text)
    db = str(tmp_path / "agent.db")
    args = {
        "audit": ["audit", str(_chat_log(tmp_path, "gpt-4o"))],
        "show": ["show", "abc", "--db", db],
        "report": ["report", "abc", "-o", str(tmp_path / "r.html"), "--db", db],
        "run": ["run", "--db", db, "hello"],
    }[command]
    assert main([*args, "--prices", str(prices)]) == 2
    cap = capsys.readouterr()
    lines = [line for line in cap.err.splitlines() if line.strip()]
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in cap.err + cap.out
    assert not (tmp_path / "r.html").exists()


class _AnthropicShaped(ScriptedBackend):
    """Scripted replies whose usage is recorded as the Anthropic backend records it
    (``Usage.raw["provider"]`` and ``raw["usage"]``)."""

    def __init__(self, usages: list[dict[str, Any]]) -> None:
        super().__init__(["a", "b"], model=SONNET)
        self.usages = usages

    def complete(self, request: Any, *, on_event: Any = None) -> Any:
        c = super().complete(request, on_event=on_event)
        usage = self.usages[min(len(self.requests), len(self.usages)) - 1]
        counts = read_usage({"usage": usage})
        return replace(c, usage=Usage(**counts, raw={"provider": "anthropic", "usage": usage}))


def _stored_session(tmp_path: Path) -> tuple[str, str]:
    db = str(tmp_path / "agent.db")
    with Harness(backend=_AnthropicShaped([ANTHROPIC_WRITE, ANTHROPIC_READ]), db=db) as h:
        h.run("one")
        h.run("two")
        return h.session_id, db


def test_show_and_report_price_a_stored_session_from_the_providers_fields(tmp_path, capsys):
    sid, db = _stored_session(tmp_path)
    assert main(["show", sid, "--db", db]) == 0
    out = capsys.readouterr().out
    total = ANTHROPIC_WRITE_COST + ANTHROPIC_READ_COST
    assert "cost $" in out and "0.01890" in out and "0.00258" in out
    assert f"cost {total:,.5f} USD · if the cache had held" in out
    html_path = tmp_path / "r.html"
    assert main(["report", sid, "-o", str(html_path), "--db", db]) == 0
    html = html_path.read_text()
    assert "if the cache had held" in html and f"{ANTHROPIC_WRITE_COST:,.4f}" in html
    # a prices file overrides the built-in row: every input price 30 (read and writes too)
    prices = tmp_path / "prices.toml"
    prices.write_text(GOOD)
    assert main(["show", sid, "--db", db, "--prices", str(prices)]) == 0
    assert f"{(3050 * 30 + 200 * 150) / 1e6:,.5f}" in capsys.readouterr().out


def test_a_live_session_is_priced_as_it_runs(tmp_path):
    """What ``ctxwright run`` prints after its table: the live audit priced on each call's
    recorded provider split, by the harness's ``prices``."""
    prices = tmp_path / "prices.toml"
    prices.write_text(GOOD)
    with Harness(backend=_AnthropicShaped([ANTHROPIC_WRITE, ANTHROPIC_READ]), prices=prices) as h:
        h.run("one")
        h.run("two")
        s = h.agent.auditor.summary(h.pricing)
    assert s.priced_requests == 2
    assert s.est_cost == pytest.approx((3050 * 30 + 200 * 150 + 3060 * 30 + 100 * 150) / 1e6)
    with Harness(backend=_AnthropicShaped([ANTHROPIC_WRITE, ANTHROPIC_READ])) as h:
        h.run("one")
        h.run("two")
        s = h.agent.auditor.summary(h.pricing)
    assert s.est_cost == pytest.approx(ANTHROPIC_WRITE_COST + ANTHROPIC_READ_COST)
    bad = tmp_path / "bad.toml"
    bad.write_text('[models."m"]\ninput = -1')
    with pytest.raises(PricesFileError):
        Harness(backend=ScriptedBackend(["a"]), prices=bad)


# -- the official SDKs against a loopback server ----------------------------------------------


class _Server:
    """A loopback server answering Anthropic Messages and OpenAI Responses with scripted
    usage objects, in a thread (uvicorn), so the official SDKs parse what they would parse."""

    def __init__(self, replies: dict[str, list[dict[str, Any]]]) -> None:
        self.replies = {k: list(v) for k, v in replies.items()}
        self.sent: list[tuple[dict[str, Any], dict[str, Any]]] = []
        app = Starlette(
            routes=[
                Route("/v1/messages", self._messages, methods=["POST"]),
                Route("/v1/responses", self._responses, methods=["POST"]),
            ]
        )
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    async def _messages(self, request: Request) -> JSONResponse:
        body = await request.json()
        usage = self.replies["anthropic"].pop(0)
        reply = {
            "id": f"msg_{len(self.sent)}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": [{"type": "text", "text": "ok"}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": usage,
        }
        self.sent.append((body, reply))
        return JSONResponse(reply)

    async def _responses(self, request: Request) -> JSONResponse:
        body = await request.json()
        usage = self.replies["responses"].pop(0)
        reply = {
            "id": f"resp_{len(self.sent)}",
            "object": "response",
            "created_at": 0,
            "status": "completed",
            "model": body["model"],
            "output": [
                {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": "ok", "annotations": []}],
                }
            ],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": usage,
        }
        self.sent.append((body, reply))
        return JSONResponse(reply)

    def __enter__(self) -> _Server:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                pytest.fail("the loopback server did not start")
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


@pytest.fixture
def server() -> Iterator[_Server]:
    responses_usage = {
        "input_tokens": 12033,
        "input_tokens_details": {"cached_tokens": 11904},
        "output_tokens": 44,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 12077,
    }
    with _Server({"anthropic": [ANTHROPIC_WRITE, ANTHROPIC_READ], "responses": [responses_usage]}) as s:
        yield s


def test_the_sdks_usage_objects_are_priced_as_a_hand_computation(tmp_path, server, capsys):
    import anthropic
    import openai

    client = anthropic.Anthropic(base_url=server.url, api_key="k", max_retries=0)
    log = []
    for msgs in ([{"role": "user", "content": "one"}], [{"role": "user", "content": "two"}]):
        body = _anthropic_body(msgs)
        message = client.messages.create(**body)
        u = message.usage.model_dump(mode="json")
        assert u["cache_creation"] is None or "ephemeral_1h_input_tokens" in u["cache_creation"]
        log.append({"request": body, "response": message.model_dump(mode="json")})
    oa = openai.OpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)
    resp = oa.responses.create(model="gpt-5.4", input="hello")
    log.append({"request": {"model": "gpt-5.4", "input": "hello"}, "response": resp.model_dump(mode="json")})
    path = tmp_path / "sdk.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in log))
    assert main(["audit", str(path), "--json"]) == 0
    costs = [r["cost"] for r in json.loads(capsys.readouterr().out)["requests"]]
    assert costs == pytest.approx(
        [ANTHROPIC_WRITE_COST, ANTHROPIC_READ_COST, (129 * 2.5 + 11904 * 0.25 + 44 * 15) / 1e6]
    )
