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
import importlib.util
import itertools
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, MaxTurnsExceeded, RunConfig, Runner, function_tool, set_tracing_disabled

from ctxwright.cli.main import main as cli
from ctxwright.errors import ConfigError
from ctxwright.integrations.openai_agents import CompactingFilter, CtxwrightProvider, FrozenInstructions, chain
from ctxwright.integrations.recording import PrefixWarning
from ctxwright.proxy.log import proxy_session_requests
from ctxwright.proxy.store import ProxyLog
from ctxwright.store.sessions import Store

sys.path.insert(0, str(Path(__file__).parent))
from fakeserver import FakeOpenAIServer as F

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "integrations" / "openai_agents_agent.py"
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


# -- the example ---------------------------------------------------------------------------------


def test_the_example_runs_and_names_its_session(tmp_path: Path, capsys) -> None:
    spec = importlib.util.spec_from_file_location("openai_agents_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    db = tmp_path / "example.db"
    with F(_script(tool_calls=1)) as srv:
        assert example.main(["Weather in Paris?", "--base-url", srv.url, "--model", "fake-model", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "It is sunny." in out
    (sid,) = [line.split()[1].rstrip(":") for line in out.splitlines() if line.startswith("session ")]
    assert f"ctxwright audit --proxy-session {sid} --db {db}" in out
    assert srv.rejected == [] and len(srv.requests) == 2
    assert _causes(db, sid) == ["first", "append"]  # its clock is frozen out of the prefix


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
