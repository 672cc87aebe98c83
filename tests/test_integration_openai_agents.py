"""The OpenAI Agents SDK under ctxwright (``integrations/openai_agents.py``): the real SDK's
Runner, real HTTP to a loopback OpenAI chat server (``tests/fakeserver.py``, which rejects an
unanswered tool call as OpenAI does) or to llama-cpp-python's own server (slow), a real SQLite
store. Each call the Runner makes must be recorded byte for byte as the server received it, the
live audit stored with it must be what ``ctxwright audit --proxy-session`` says, dynamic
instructions must be warned about once, and :class:`FrozenInstructions` must make the same
agent's calls append-only. Tracing is off: nothing leaves the machine.
"""

from __future__ import annotations

import asyncio
import importlib
import itertools
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import (
    Agent,
    FunctionTool,
    MaxTurnsExceeded,
    RunConfig,
    RunContextWrapper,
    Runner,
    function_tool,
    set_tracing_disabled,
)

from ctxwright.cli.main import main as cli
from ctxwright.errors import ConfigError
from ctxwright.integrations.openai_agents import (
    CompactingFilter,
    CtxwrightProvider,
    FrozenInstructions,
    chain,
    deferred_tools,
)
from ctxwright.integrations.recording import PrefixWarning
from ctxwright.proxy.log import proxy_session_requests
from ctxwright.proxy.store import ProxyLog
from ctxwright.store.sessions import Store
from ctxwright.tools.registry import ERROR_INVALID_ARGUMENTS, ERROR_INVALID_JSON, ERROR_UNKNOWN_TOOL

sys.path.insert(0, str(Path(__file__).parent))
from fakeserver import FakeOpenAIServer as F

STATIC = "You are a weather assistant. Answer in one short sentence and use the tool for facts."


@pytest.fixture(autouse=True)
def _no_tracing() -> Iterator[None]:
    set_tracing_disabled(True)
    yield


@function_tool
def get_weather(city: str) -> str:
    """Today's weather in a city."""
    return f"sunny in {city}"


def _script(tool_calls: int = 1) -> list[Any]:
    """``tool_calls`` replies each asking for the tool, then a final text."""
    calls = [
        F.reply_tool_calls([(f"call_{i}", "get_weather", json.dumps({"city": f"C{i}"}))]) for i in range(tool_calls)
    ]
    return [*calls, F.reply_text("It is sunny.")]


class Clock:
    """Instructions that change on every model call (a counter standing for the time)."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, ctx: Any, agent: Any) -> str:
        self.n += 1
        return f"{STATIC}\nThe time is 10:{self.n:02d}."


def _run(
    srv: F,
    db: Path,
    *,
    instructions: Any = STATIC,
    input_filter: Any = None,
    warnings: list[PrefixWarning] | None = None,
    name: str | None = None,
) -> tuple[str, str]:
    """One Runner.run against ``srv``; (final output, session id)."""

    async def go() -> tuple[str, str]:
        on_warning = warnings.append if warnings is not None else None
        provider = CtxwrightProvider(
            db, base_url=srv.url, api_key="k", model="fake-model", name=name, on_warning=on_warning, max_retries=0
        )
        agent = Agent(name="weather", instructions=instructions, tools=[get_weather])
        config = RunConfig(model_provider=provider, call_model_input_filter=input_filter)
        try:
            result = await Runner.run(agent, "Weather, please?", run_config=config, max_turns=6)
            sid = provider.session_id
        finally:
            await provider.aclose()
        assert sid is not None
        return str(result.final_output), sid

    return asyncio.run(go())


def _stored(db: Path, sid: str) -> list[dict[str, Any]]:
    store = Store(db)
    try:
        return ProxyLog(store).exchange_rows(sid)
    finally:
        store.close()


def _causes(db: Path, sid: str) -> list[str]:
    return [row["audit"]["cause"] for row in _stored(db, sid)]


def _offline_audit(db: Path, sid: str, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    capsys.readouterr()
    assert cli(["audit", "--proxy-session", sid, "--json", "--db", str(db)]) == 0
    return list(json.loads(capsys.readouterr().out)["requests"])


def _chat_raw(srv: F) -> list[bytes]:
    return [r.raw for r in srv.recorded if r.path.endswith("/chat/completions")]


# -- recording ---------------------------------------------------------------------------------


def test_every_call_of_a_tool_loop_is_recorded_as_sent_and_audited(tmp_path: Path, capsys) -> None:
    db = tmp_path / "agents.db"
    warnings: list[PrefixWarning] = []
    with F(_script(tool_calls=1)) as srv:
        out, sid = _run(srv, db, warnings=warnings)
    assert out == "It is sunny."
    assert srv.rejected == [], "the SDK sent a tool call without its answer"
    assert len(srv.requests) == 2
    # the second call carries the tool's answer to the first call's tool call
    assert srv.requests[1]["messages"][-1] == {"role": "tool", "tool_call_id": "call_0", "content": "sunny in C0"}

    rows = _stored(db, sid)
    assert [bytes(r["request_body"]) for r in rows] == _chat_raw(srv)  # the bytes the server received
    store = Store(db)
    try:
        assert [r["request"] for r in proxy_session_requests(store, sid)] == srv.requests
    finally:
        store.close()
    assert [r["call_index"] for r in rows] == [0, 1]
    assert [r["status"] for r in rows] == [200, 200]
    assert [r["audit"]["cause"] for r in rows] == ["first", "append"]
    assert rows[1]["audit"]["reusable_prefix_tokens"] == rows[0]["audit"]["prompt_tokens"] > 0
    assert warnings == []

    offline = _offline_audit(db, sid, capsys)
    assert [(o["cause"], o["reusable_prefix_tokens"]) for o in offline] == [
        (r["audit"]["cause"], r["audit"]["reusable_prefix_tokens"]) for r in rows
    ]


def test_a_streamed_run_is_recorded_as_well(tmp_path: Path) -> None:
    db = tmp_path / "agents.db"

    async def go(srv: F) -> tuple[str, str]:
        provider = CtxwrightProvider(db, base_url=srv.url, api_key="k", model="fake-model", max_retries=0)
        agent = Agent(name="weather", instructions=STATIC, tools=[get_weather])
        result = Runner.run_streamed(agent, "Weather, please?", run_config=RunConfig(model_provider=provider))
        async for _event in result.stream_events():
            pass
        sid = provider.session_id
        await provider.aclose()
        assert sid is not None
        return str(result.final_output), sid

    with F(_script(tool_calls=1)) as srv:
        out, sid = asyncio.run(go(srv))
    assert out == "It is sunny." and srv.rejected == []
    assert all(r["stream"] is True for r in srv.requests)
    rows = _stored(db, sid)
    assert [bytes(r["request_body"]) for r in rows] == _chat_raw(srv)
    assert [(bool(r["streamed"]), r["outcome"], r["audit"]["cause"]) for r in rows] == [
        (True, "complete", "first"),
        (True, "complete", "append"),
    ]


def test_two_runs_under_one_name_are_one_session(tmp_path: Path) -> None:
    db = tmp_path / "agents.db"
    with F([*_script(0), *_script(0)]) as srv:
        _, first = _run(srv, db, name="support-bot")
        _, second = _run(srv, db, name="support-bot")
    assert first == second
    assert [r["call_index"] for r in _stored(db, first)] == [0, 1]


# -- dynamic instructions ----------------------------------------------------------------------


def test_dynamic_instructions_are_warned_about_once(tmp_path: Path) -> None:
    db = tmp_path / "agents.db"
    warnings: list[PrefixWarning] = []
    with F(_script(tool_calls=2)) as srv:
        _, sid = _run(srv, db, instructions=Clock(), warnings=warnings)
    assert srv.rejected == []
    systems = [r["messages"][0]["content"] for r in srv.requests]
    assert len(set(systems)) == 3  # the premise: each call sent other instructions
    assert len(warnings) == 1
    (w,) = warnings
    assert (w.session_id, w.call_index, w.cause, w.segment) == (sid, 1, "system_changed", "system prompt")
    assert w.byte_offset is not None and w.byte_offset > len(STATIC)  # where the time starts
    assert "system prompt" in str(w) and "appended after the history" in str(w)
    # the warning is said once; the audit keeps counting every call it cost
    assert _causes(db, sid) == ["first", "system_changed", "system_changed"]


def test_frozen_instructions_make_dynamic_instructions_append_only(tmp_path: Path, capsys) -> None:
    db = tmp_path / "agents.db"
    warnings: list[PrefixWarning] = []
    frozen = FrozenInstructions()
    with F(_script(tool_calls=2)) as srv:
        out, sid = _run(srv, db, instructions=Clock(), input_filter=frozen, warnings=warnings)
    assert out == "It is sunny."
    assert srv.rejected == []
    sent = srv.requests
    assert len(sent) == 3
    # the instructions are the first call's, byte for byte, on every call
    systems = [r["messages"][0] for r in sent]
    assert systems == [{"role": "system", "content": f"{STATIC}\nThe time is 10:01."}] * 3
    # each call's messages start with the whole previous call's: append-only, as sent
    for before, after in itertools.pairwise(sent):
        assert after["messages"][: len(before["messages"])] == before["messages"]
    # what changed is a message after the history, and stays where it was put
    update = {"role": "user", "content": "<context_update>\nThe time is 10:02.\n</context_update>"}
    assert sent[1]["messages"][-1] == update
    assert sent[2]["messages"][-1] == {
        "role": "user",
        "content": "<context_update>\nThe time is 10:03.\n</context_update>",
    }
    assert sent[2]["messages"].index(update) == len(sent[1]["messages"]) - 1
    assert [t for _, t in frozen.updates] == [m["content"] for m in (sent[1]["messages"][-1], sent[2]["messages"][-1])]

    assert warnings == []
    rows = _stored(db, sid)
    assert [r["audit"]["cause"] for r in rows] == ["first", "append", "append"]
    offline = _offline_audit(db, sid, capsys)
    assert [o["reusable_prefix_tokens"] for o in offline] == [r["audit"]["reusable_prefix_tokens"] for r in rows]
    assert rows[2]["audit"]["reusable_prefix_tokens"] == rows[1]["audit"]["prompt_tokens"]


def test_given_frozen_text_and_a_second_run_stay_append_only(tmp_path: Path) -> None:
    """``FrozenInstructions(text)`` sends ``text`` from the first call, with the agent's own
    instructions as the first update; a second run continuing the conversation
    (``to_input_list()`` + a new question) keeps the first run's updates where they were."""
    db = tmp_path / "agents.db"
    frozen = FrozenInstructions("You are a weather assistant.")
    clock = Clock()

    async def go(srv: F) -> str:
        provider = CtxwrightProvider(db, base_url=srv.url, api_key="k", model="fake-model", name="two", max_retries=0)
        agent = Agent(name="weather", instructions=clock, tools=[get_weather])
        config = RunConfig(model_provider=provider, call_model_input_filter=frozen)
        first = await Runner.run(agent, "Weather, please?", run_config=config)
        follow = [*first.to_input_list(), {"role": "user", "content": "And tomorrow?"}]
        await Runner.run(agent, follow, run_config=config)
        sid = provider.session_id
        await provider.aclose()
        assert sid is not None
        return sid

    with F([*_script(1), *_script(0)]) as srv:
        sid = asyncio.run(go(srv))
    sent = [r["messages"] for r in srv.requests]
    assert len(sent) == 3 and srv.rejected == []
    assert {m[0]["content"] for m in sent} == {"You are a weather assistant."}
    assert sent[0][-1]["content"].startswith("<context_update>\n" + STATIC)  # all of it differs
    for before, after in itertools.pairwise(sent):
        assert after[: len(before)] == before
    # the new question, then this call's instructions (all of their lines differ from the frozen text)
    assert sent[2][-2]["content"] == "And tomorrow?"
    assert sent[2][-1]["content"] == f"<context_update>\n{STATIC}\nThe time is 10:03.\n</context_update>"
    assert _causes(db, sid) == ["first", "append", "append"]


def test_a_new_conversation_does_not_inherit_the_last_ones_updates(tmp_path: Path) -> None:
    frozen = FrozenInstructions()
    clock = Clock()

    async def go(srv: F) -> None:
        provider = CtxwrightProvider(
            tmp_path / "a.db", base_url=srv.url, api_key="k", model="fake-model", max_retries=0
        )
        agent = Agent(name="weather", instructions=clock, tools=[get_weather])
        config = RunConfig(model_provider=provider, call_model_input_filter=frozen)
        await Runner.run(agent, "Weather, please?", run_config=config)
        await Runner.run(agent, "Another question", run_config=config)  # a fresh history
        await provider.aclose()

    with F([*_script(1), *_script(0)]) as srv:
        asyncio.run(go(srv))
    first_system = {"role": "system", "content": f"{STATIC}\nThe time is 10:01."}
    assert srv.requests[2]["messages"] == [
        first_system,
        {"role": "user", "content": "Another question"},
        {"role": "user", "content": "<context_update>\nThe time is 10:03.\n</context_update>"},
    ]
    assert srv.rejected == []


def test_unchanged_instructions_add_nothing() -> None:
    """The filter alone: instructions that do not change are passed through untouched."""
    from agents.run_config import CallModelData, ModelInputData

    agent = Agent(name="a", instructions=STATIC)
    frozen = FrozenInstructions()
    items: list[Any] = [{"role": "user", "content": "q"}]
    for _ in range(3):
        got = frozen(
            CallModelData(model_data=ModelInputData(input=list(items), instructions=STATIC), agent=agent, context=None)
        )
        assert (got.input, got.instructions) == (items, STATIC)
        items.append({"role": "assistant", "content": "a"})
    assert frozen.updates == []


# -- compaction ------------------------------------------------------------------------------------


@function_tool
def read_file(n: int) -> str:
    """Read source file number n."""
    return f"/src/mod{n}.py has {1000 + n} lines\n" + "def f():\n    return 1\n" * 90


def test_compaction_is_rare_deep_and_never_orphans_a_tool_result(tmp_path: Path, capsys) -> None:
    """Eight file reads of ~2 KB each through ``chain(FrozenInstructions(), CompactingFilter)``:
    the old results become placeholders a few at a time, every request between two compactions
    extends the one before, the server (which rejects what OpenAI rejects) accepts every
    request, and the audit sees exactly the compactions as the calls that rewrote history."""
    db = tmp_path / "agents.db"
    reads = 8
    script = [F.reply_tool_calls([(f"call_{i}", "read_file", json.dumps({"n": i}))]) for i in range(reads)]
    compacting = CompactingFilter(1500, keep_results=1)
    warnings: list[PrefixWarning] = []

    async def go(srv: F) -> str:
        provider = CtxwrightProvider(
            db, base_url=srv.url, api_key="k", model="fake-model", on_warning=warnings.append, max_retries=0
        )
        agent = Agent(name="reader", instructions=Clock(), tools=[read_file])
        config = RunConfig(model_provider=provider, call_model_input_filter=chain(FrozenInstructions(), compacting))
        result = await Runner.run(agent, "Read the files.", run_config=config, max_turns=reads + 2)
        assert result.final_output == "Done."
        sid = provider.session_id
        await provider.aclose()
        assert sid is not None
        return sid

    with F([*script, F.reply_text("Done.")]) as srv:
        sid = asyncio.run(go(srv))
    assert srv.rejected == [], "a compacted request broke tool pairing"
    sent = [r["messages"] for r in srv.requests]
    assert len(sent) == reads + 1
    rewrites = [i for i, (a, b) in enumerate(itertools.pairwise(sent), 1) if b[: len(a)] != a]
    assert 1 <= compacting.compactions == len(rewrites) < reads  # rarely
    assert compacting.refused == []
    last_tools = [m for m in sent[-1] if m["role"] == "tool"]
    assert len(last_tools) == reads  # every call still has its result
    assert last_tools[-1]["content"].startswith(f"/src/mod{reads - 1}.py")  # the newest intact
    cleared = [m for m in last_tools if m["content"].startswith("[cleared")]
    assert len(cleared) >= reads - 2  # deeply
    lost = {v for entry in compacting.ledger for v in entry.lost}
    assert "/src/mod0.py" in lost
    # the audit: the first call, then appends, except exactly at the compactions
    causes = _causes(db, sid)
    assert causes[0] == "first"
    assert [i for i, c in enumerate(causes) if c != "append"][1:] == rewrites
    assert "system_changed" not in causes and warnings == []
    offline = _offline_audit(db, sid, capsys)
    assert [o["cause"] for o in offline] == causes


# -- deferred tools --------------------------------------------------------------------------------

THINGS = (
    "weather",
    "population",
    "timezone",
    "currency",
    "mayor",
    "elevation",
    "area",
    "country",
    "language",
    "air_quality",
    "sunrise",
    "sunset",
    "rainfall",
    "humidity",
    "wind_speed",
    "uv_index",
    "pollen_count",
    "traffic",
    "museums",
    "hospitals",
    "schools",
    "universities",
    "airports",
    "train_stations",
    "hotels",
    "restaurants",
    "parks",
    "crime_rate",
    "unemployment",
    "gdp",
    "founding_year",
    "twin_cities",
    "nickname",
    "postal_codes",
    "dialing_code",
    "football_clubs",
    "river",
    "landmarks",
    "festivals",
    "rent_prices",
)


def _thing_tool(thing: str) -> FunctionTool:
    def get(city: str) -> str:
        return f"{thing} of {city}: ok"

    words = thing.replace("_", " ")
    return function_tool(get, name_override=f"get_{thing}", description_override=f"The {words} of a city.")


def _many_tools() -> list[FunctionTool]:
    tools = [_thing_tool(t) for t in THINGS]
    assert len(tools) == 40 and len({t.name for t in tools}) == 40
    return tools


def _run_agent(srv: F, db: Path, tools: Sequence[Any]) -> tuple[str, str]:
    async def go() -> tuple[str, str]:
        provider = CtxwrightProvider(db, base_url=srv.url, api_key="k", model="fake-model", max_retries=0)
        agent = Agent(name="city", instructions="You answer questions about cities.", tools=list(tools))
        try:
            result = await Runner.run(
                agent, "What is the air quality in Paris?", run_config=RunConfig(model_provider=provider), max_turns=6
            )
            sid = provider.session_id
        finally:
            await provider.aclose()
        assert sid is not None
        return str(result.final_output), sid

    return asyncio.run(go())


def _raw_tools(srv: F) -> list[bytes]:
    """Each chat request's ``tools`` array, the bytes as the server received them."""
    out = []
    for raw in _chat_raw(srv):
        text = raw.decode("utf-8")
        start = text.index('"tools":') + len('"tools":')
        start += len(text[start:]) - len(text[start:].lstrip())
        _, end = json.JSONDecoder().raw_decode(text, start)
        out.append(text[start:end].encode("utf-8"))
    return out


def test_deferred_tools_send_two_fixed_tools_and_run_the_found_one(tmp_path: Path) -> None:
    db = tmp_path / "agents.db"
    many = _many_tools()
    tools, catalog = deferred_tools(many)
    assert [t.name for t in tools] == ["search_tools", "call_tool"]
    search = json.dumps({"query": "air quality of a city", "limit": 3})
    call = json.dumps({"name": "get_air_quality", "arguments": {"city": "Paris"}})
    script = [
        F.reply_tool_calls([("call_s", "search_tools", search)]),
        F.reply_tool_calls([("call_c", "call_tool", call)]),
        F.reply_text("The air quality in Paris is ok."),
    ]
    with F(script) as srv:
        out, sid = _run_agent(srv, db, tools)
    assert out == "The air quality in Paris is ok."
    assert srv.rejected == []
    assert len(srv.requests) == 3
    # the tools array: exactly the two tools, the catalog's specs, byte-identical on every call
    sent_tools = [r["tools"] for r in srv.requests]
    assert [[t["function"]["name"] for t in ts] for ts in sent_tools] == [["search_tools", "call_tool"]] * 3
    for t in sent_tools[0]:
        spec = catalog.specs[t["function"]["name"]].to_wire()["function"]
        assert {k: t["function"][k] for k in ("name", "description", "parameters")} == spec
    raw = _raw_tools(srv)
    assert len(raw) == 3 and len(set(raw)) == 1 and json.loads(raw[0]) == sent_tools[0]
    # the search result, appended as the tool message: the right tool with its full schema
    found = json.loads(srv.requests[1]["messages"][-1]["content"])
    assert srv.requests[1]["messages"][-1]["tool_call_id"] == "call_s"
    names = [t["function"]["name"] for t in found["tools"]]
    assert names[0] == "get_air_quality" and len(names) <= 3
    target = next(t for t in many if t.name == "get_air_quality")
    assert found["tools"][0]["function"] == {
        "name": "get_air_quality",
        "description": "The air quality of a city.",
        "parameters": target.params_json_schema,
    }
    # the call's result is the real tool's output
    assert srv.requests[2]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_c",
        "content": "air_quality of Paris: ok",
    }
    assert _causes(db, sid) == ["first", "append", "append"]


def test_call_tool_with_bad_arguments_gives_the_model_a_structured_error(tmp_path: Path) -> None:
    db = tmp_path / "agents.db"
    tools, _ = deferred_tools(_many_tools())
    script = [
        F.reply_tool_calls(
            [("call_a", "call_tool", json.dumps({"name": "get_air_quality", "arguments": {"town": 1}}))]
        ),
        F.reply_tool_calls([("call_b", "call_tool", json.dumps({"name": "get_air_qualty", "arguments": {}}))]),
        F.reply_tool_calls([("call_c", "call_tool", "{not json")]),
        F.reply_text("Sorry."),
    ]
    with F(script) as srv:
        out, sid = _run_agent(srv, db, tools)
    assert out == "Sorry." and srv.rejected == [] and len(srv.requests) == 4
    errors = [json.loads(r["messages"][-1]["content"])["error"] for r in srv.requests[1:]]
    assert errors[0]["type"] == ERROR_INVALID_ARGUMENTS and "get_air_quality's schema" in errors[0]["message"]
    assert "city" in errors[0]["message"] + errors[0]["hint"]
    assert errors[1]["type"] == ERROR_UNKNOWN_TOOL and "get_air_quality" in errors[1]["hint"]
    assert errors[2]["type"] == ERROR_INVALID_JSON
    assert _causes(db, sid) == ["first", "append", "append", "append"]


def test_a_deferred_tool_sees_the_run_context_and_its_own_name(tmp_path: Path) -> None:
    seen: list[tuple[Any, str, str]] = []

    @function_tool
    async def whoami(ctx: RunContextWrapper[Any], label: str) -> str:
        """Say who is running."""
        seen.append((ctx.context, getattr(ctx, "tool_name", ""), label))
        return f"ran {label}"

    tools, catalog = deferred_tools([whoami, *_many_tools()[:3]])
    script = [
        F.reply_tool_calls([("c1", "call_tool", json.dumps({"name": "whoami", "arguments": {"label": "x"}}))]),
        F.reply_text("done"),
    ]

    async def go(srv: F) -> None:
        provider = CtxwrightProvider(
            tmp_path / "a.db", base_url=srv.url, api_key="k", model="fake-model", max_retries=0
        )
        agent = Agent(name="a", instructions="i", tools=tools)
        await Runner.run(agent, "who?", run_config=RunConfig(model_provider=provider), context={"user": 7})
        await provider.aclose()

    with F(script) as srv:
        asyncio.run(go(srv))
    assert seen == [({"user": 7}, "whoami", "x")]
    assert srv.requests[1]["messages"][-1]["content"] == "ran x"
    # outside a run, the catalog runs the SDK tool on a loop of its own
    assert catalog.call_tool("get_weather", {"city": "Oslo"}) == "weather of Oslo: ok"


def test_a_deferred_tool_past_its_timeout_is_an_error_not_a_hang(tmp_path: Path) -> None:
    @function_tool
    async def slow(n: int) -> str:
        """A slow tool."""
        await asyncio.sleep(5)
        return "late"

    tools, _ = deferred_tools([slow], timeout_s=0.2)
    script = [
        F.reply_tool_calls([("c1", "call_tool", json.dumps({"name": "slow", "arguments": {"n": 1}}))]),
        F.reply_text("ok"),
    ]
    with F(script) as srv:
        _run_agent(srv, tmp_path / "a.db", tools)
    error = json.loads(srv.requests[1]["messages"][-1]["content"])["error"]
    assert error["type"] == "TimeoutError" and "0.2 s" in error["message"]


def test_deferred_tools_cut_the_first_prompt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The first request's prompt tokens (the recorder's audit) with the 40 tools sent directly
    and behind search_tools/call_tool."""
    prompt = {}
    for label, tools in (("direct", _many_tools()), ("deferred", deferred_tools(_many_tools())[0])):
        db = tmp_path / f"{label}.db"
        with F([F.reply_text("fine")]) as srv:
            _, sid = _run_agent(srv, db, tools)
        prompt[label] = _stored(db, sid)[0]["audit"]["prompt_tokens"]
    assert 0 < prompt["deferred"] < prompt["direct"] / 4
    with capsys.disabled():
        print(f"\nfirst request prompt tokens: 40 tools direct {prompt['direct']}, deferred {prompt['deferred']}")


# -- setup errors --------------------------------------------------------------------------------


def test_a_provider_needs_a_store_and_a_model(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="db="):
        CtxwrightProvider(base_url="http://127.0.0.1:9/v1", api_key="k")
    provider = CtxwrightProvider(tmp_path / "x.db", base_url="http://127.0.0.1:9/v1", api_key="k")
    try:
        with pytest.raises(ConfigError, match="no model"):
            provider.get_model(None)
        assert provider.get_model("m") is provider.get_model("m")
    finally:
        asyncio.run(provider.aclose())


def test_without_the_sdk_the_import_says_which_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "agents", None)  # "import agents" now raises ImportError
    monkeypatch.delitem(sys.modules, "ctxwright.integrations.openai_agents")
    with pytest.raises(ConfigError, match=r"pip install 'ctxwright\[openai-agents\]'"):
        importlib.import_module("ctxwright.integrations.openai_agents")


# -- a real server ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_real_llama_cpp_server_is_recorded_as_sent(tmp_path: Path, capsys) -> None:
    from llamaserver import LlamaServer

    db = tmp_path / "llama.db"
    sent_bytes: list[bytes] = []

    async def seen(request: Any) -> None:  # an httpx request hook: the bytes the client sends
        if request.url.path.endswith("/chat/completions"):
            sent_bytes.append(request.content)

    with LlamaServer(tmp_path / "server.log") as srv:

        async def go() -> str:
            provider = CtxwrightProvider(
                db,
                base_url=srv.url,
                api_key="x",
                model=srv.model,
                max_retries=0,
                http_client_kwargs={"event_hooks": {"request": [seen]}, "timeout": 300},
            )
            agent = Agent(name="weather", instructions=Clock(), tools=[get_weather])
            config = RunConfig(model_provider=provider, call_model_input_filter=FrozenInstructions())
            history: list[Any] = []
            for question in ("What is the weather in Paris?", "And in Rome?"):
                try:
                    result = await Runner.run(
                        agent, [*history, {"role": "user", "content": question}], run_config=config, max_turns=3
                    )
                except MaxTurnsExceeded:  # the tiny model may call tools until max_turns
                    break
                history = result.to_input_list()
            sid = provider.session_id
            await provider.aclose()
            assert sid is not None
            return sid

        sid = asyncio.run(go())
    rows = _stored(db, sid)
    assert len(rows) >= 2, "two questions, at least two calls"
    assert [bytes(r["request_body"]) for r in rows] == sent_bytes
    assert all(r["status"] == 200 for r in rows), [(r["status"], r["error"]) for r in rows]
    sent = [json.loads(b) for b in sent_bytes]
    assert {s["messages"][0]["content"] for s in sent} == {f"{STATIC}\nThe time is 10:01."}
    for before, after in itertools.pairwise(sent):
        assert after["messages"][: len(before["messages"])] == before["messages"]
    assert [r["audit"]["cause"] for r in rows] == ["first"] + ["append"] * (len(rows) - 1)
    offline = _offline_audit(db, sid, capsys)
    assert [o["reusable_prefix_tokens"] for o in offline] == [r["audit"]["reusable_prefix_tokens"] for r in rows]
    with capsys.disabled():
        prompt = [r["audit"]["prompt_tokens"] for r in rows]
        reusable = [r["audit"]["reusable_prefix_tokens"] for r in rows]
        print(f"\nllama: {len(rows)} calls, prompt tokens {prompt}, reusable {reusable}")
