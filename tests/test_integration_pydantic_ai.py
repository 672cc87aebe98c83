"""ctxwright under pydantic-ai (``ctxwright.integrations.pydantic_ai``), with the real package.

Against ``tests/fakeserver.py`` (which rejects unanswered tool calls as OpenAI does): every
model call a pydantic-ai agent makes is recorded byte for byte as the server received it, one
ctxwright proxy session, audited live, and ``ctxwright audit --proxy-session`` agrees with the
live audit. A dynamic instruction that changes per call is warned about once, as a change of
the system prompt; registered with pydantic-ai's ``on_change="append"`` the system prompt is
byte-identical on every call and every call appends. One slow test runs the same agent
against llama-cpp-python's own server.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai.models.openai", reason="pydantic-ai is not installed (make dev installs it)")

from pydantic_ai import Agent, RunContext, Tool

from ctxwright.cli.main import main as cli
from ctxwright.errors import ConfigError
from ctxwright.integrations.compaction import WireCompactor
from ctxwright.integrations.pydantic_ai import FIXES, deferred_toolset, recorded_model
from ctxwright.integrations.recording import FrameworkRecorder, PrefixWarning, fill_null_content
from ctxwright.proxy.log import proxy_session_requests
from ctxwright.proxy.store import ProxyLog
from ctxwright.store.sessions import Store
from fakeserver import FakeOpenAIServer as F

STATIC = "You add numbers with the add tool."


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def make_agent(model: Any, *, dynamic: str | None = None, literal: bool = True) -> Agent[None, str]:
    """An agent with the ``add`` tool; ``dynamic`` registers an instruction whose text changes on
    every call (``"rewrite"``: pydantic-ai's default, ``"append"``: its frozen-prefix fix)."""
    agent: Agent[None, str] = Agent(model, instructions=STATIC if literal else None, tools=[add])
    if dynamic is not None:
        count = {"n": 0}

        def counter() -> str:
            count["n"] += 1
            return f"This is call number {count['n']}."

        agent.instructions(name="counter", on_change=dynamic)(counter)  # type: ignore[call-overload]
    return agent


def two_steps() -> list[Any]:
    """add(2, 3), then add(5, 4), then the answer: three model calls."""
    return [
        F.reply_tool_calls([("call_1", "add", '{"a": 2, "b": 3}')]),
        F.reply_tool_calls([("call_2", "add", '{"a": 5, "b": 4}')]),
        F.reply_text("9"),
    ]


def stored(db: Path, sid: str) -> list[dict[str, Any]]:
    store = Store(db)
    try:
        return ProxyLog(store).exchange_rows(sid)
    finally:
        store.close()


def run(db: Path, srv: F, agent_of: Any, **kw: Any) -> tuple[str, str, list[PrefixWarning], FrameworkRecorder]:
    warnings: list[PrefixWarning] = []
    model, rec = recorded_model(db, base_url=srv.url, model="fake-model", on_warning=warnings.append, **kw)
    with rec:
        result = agent_of(model).run_sync("What is 2 + 3, plus 4?")
        sid = rec.session_id
    assert sid is not None
    return result.output, sid, warnings, rec


def test_every_model_call_of_an_agent_is_recorded_as_the_server_received_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "ctx.db"
    with F(two_steps()) as srv:
        output, sid, warnings, _ = run(db, srv, make_agent)
        received = srv.recorded
    assert output == "9"
    assert srv.rejected == []  # every tool call was answered before the next call
    assert warnings == []

    rows = stored(db, sid)
    chats = [r for r in received if r.path.endswith("/chat/completions")]
    assert len(rows) == len(chats) == 3
    # byte for byte: the stored request is the body the server read
    assert [r["request_sha256"] for r in rows] == [hashlib.sha256(r.raw).hexdigest() for r in chats]
    store = Store(db)
    records = proxy_session_requests(store, sid)
    store.close()
    assert [r["request"] for r in records] == [r.json for r in chats]
    assert all(r["proxy"]["status"] == 200 and r["proxy"]["outcome"] == "complete" for r in records)
    # both tool results went back, paired with their calls
    tools = [m for m in chats[-1].json["messages"] if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in tools] == [("call_1", "5"), ("call_2", "9")]

    live = [r["audit"] for r in rows]
    assert [a["cause"] for a in live] == ["first", "append", "append"]
    assert all(a["reusable_prefix_tokens"] > 0 for a in live[1:])

    assert cli(["audit", "--proxy-session", sid, "--json", "--db", str(db)]) in (0, None)
    report = json.loads(capsys.readouterr().out)
    assert [r["cause"] for r in report["requests"]] == [a["cause"] for a in live]
    assert [r["reusable_prefix_tokens"] for r in report["requests"]] == [a["reusable_prefix_tokens"] for a in live]
    assert [r["prompt_tokens"] for r in report["requests"]] == [a["prompt_tokens"] for a in live]
    assert report["summary"]["causes"] == {"first": 1, "append": 2}


def test_a_streamed_run_is_recorded_as_streamed(tmp_path: Path) -> None:
    db = tmp_path / "ctx.db"

    async def go(srv: F) -> tuple[str, str | None]:
        model, rec = recorded_model(db, base_url=srv.url, model="fake-model")
        with rec:
            async with make_agent(model, dynamic="append").run_stream("What is 2 + 3, plus 4?") as result:
                output = await result.get_output()
            return output, rec.session_id

    with F(two_steps()) as srv:
        output, sid = asyncio.run(go(srv))
        chats = [r for r in srv.recorded if r.path.endswith("/chat/completions")]
    assert output == "9" and sid is not None and srv.rejected == []
    assert all(c.json["stream"] is True for c in chats)
    rows = stored(db, sid)
    assert [r["request_sha256"] for r in rows] == [hashlib.sha256(c.raw).hexdigest() for c in chats]
    assert [(r["streamed"], r["outcome"]) for r in rows] == [(1, "complete")] * 3
    assert [r["audit"]["cause"] for r in rows] == ["first", "append", "append"]


def test_the_same_name_adds_a_second_run_to_the_same_session(tmp_path: Path) -> None:
    db = tmp_path / "ctx.db"
    with F([F.reply_text("a"), F.reply_text("b")]) as srv:
        _, sid1, _, _ = run(db, srv, make_agent, name="my-agent")
        _, sid2, _, _ = run(db, srv, make_agent, name="my-agent")
    assert sid1 == sid2
    assert [r["call_index"] for r in stored(db, sid1)] == [0, 1]


@pytest.mark.parametrize("literal", [True, False], ids=["with-literal-instructions", "dynamic-only"])
def test_a_dynamic_instruction_is_warned_about_once_naming_the_system_prompt(tmp_path: Path, literal: bool) -> None:
    db = tmp_path / "ctx.db"
    with F(two_steps()) as srv:
        _, sid, warnings, _ = run(db, srv, lambda m: make_agent(m, dynamic="rewrite", literal=literal))
        sent = srv.requests
    assert srv.rejected == []
    systems = [[m["content"] for m in r["messages"] if m["role"] == "system"] for r in sent]
    assert [s[-1] for s in systems] == [f"This is call number {i}." for i in (1, 2, 3)]

    assert len(warnings) == 1
    w = warnings[0]
    assert (w.session_id, w.call_index, w.cause, w.segment) == (sid, 1, "system_changed", "system prompt")
    assert w.fix == FIXES["system_changed"] and "on_change='append'" in str(w)
    assert w.byte_offset == len("This is call number ")

    causes = [r["audit"]["cause"] for r in stored(db, sid)]
    if literal:
        # pydantic-ai sends the literal instructions and the dynamic one as two system messages;
        # the audit calls only the first one the system prompt, so the change is an edit of msg#1
        assert systems[0][0] == STATIC
        assert causes == ["first", "history_edited", "history_edited"]
        assert {r["audit"].get("role") for r in stored(db, sid)[1:]} == {"system"}
    else:
        assert causes == ["first", "system_changed", "system_changed"]


def test_a_recorder_the_user_made_sees_a_dynamic_instruction_after_literal_ones(tmp_path: Path) -> None:
    """pydantic-ai sends its dynamic instruction as the second system message: the recorder
    counts an edit of a later system message as a change of the system prompt too."""
    db = tmp_path / "ctx.db"
    warnings: list[PrefixWarning] = []
    with F(two_steps()) as srv:
        rec = FrameworkRecorder(db, framework="pydantic-ai", on_warning=warnings.append)
        model, _ = recorded_model(base_url=srv.url, model="fake-model", recorder=rec)
        with rec:
            make_agent(model, dynamic="rewrite").run_sync("What is 2 + 3, plus 4?")
    assert [(w.call_index, w.segment) for w in warnings] == [(1, "system prompt")]


def test_on_change_append_keeps_the_system_prompt_byte_identical(tmp_path: Path) -> None:
    db = tmp_path / "ctx.db"
    with F(two_steps()) as srv:
        output, sid, warnings, _ = run(db, srv, lambda m: make_agent(m, dynamic="append"))
        sent = srv.requests
    assert output == "9" and srv.rejected == [] and warnings == []
    rows = stored(db, sid)
    assert [r["audit"]["cause"] for r in rows] == ["first", "append", "append"]

    first = sent[0]["messages"]
    head = len(first)  # the system messages and the question: the prefix every later call repeats
    assert [m["role"] for m in first] == ["system", "system", "user"]
    assert first[1]["content"].startswith('<pyai:context id="agent:counter">\nThis is call number 1.\n')
    for r in sent[1:]:
        assert r["messages"][:head] == first  # byte-identical prefix, tools included
        assert r["tools"] == sent[0]["tools"]
    # each later value arrives as a message appended after the tool result it follows
    last = sent[-1]["messages"]
    assert [m["role"] for m in last[head:]] == ["assistant", "tool", "system", "assistant", "tool", "system"]
    assert "This is call number 2." in last[head + 2]["content"]
    assert "This is call number 3." in last[head + 5]["content"]
    assert all("This is call number 1." not in m["content"] for m in last[head:] if m["role"] == "system")


def test_a_second_run_on_the_same_history_appends_too(tmp_path: Path) -> None:
    """A chat: the second run continues the first's messages, in the same session (``name``)."""
    db = tmp_path / "ctx.db"
    warnings: list[PrefixWarning] = []
    with F([*two_steps(), F.reply_text("again")]) as srv:
        model, rec = recorded_model(db, base_url=srv.url, model="fake-model", name="chat", on_warning=warnings.append)
        agent = make_agent(model, dynamic="append")
        with rec:
            first = agent.run_sync("What is 2 + 3, plus 4?")
            second = agent.run_sync("And again?", message_history=first.all_messages())
            sid = rec.session_id
        sent = srv.requests
    assert second.output == "again" and srv.rejected == [] and warnings == [] and sid is not None
    assert [r["audit"]["cause"] for r in stored(db, sid)] == ["first", "append", "append", "append"]
    last = sent[-1]["messages"]
    assert last[: len(sent[-2]["messages"])] == sent[-2]["messages"]
    assert [m["role"] for m in last[-4:]] == ["system", "assistant", "user", "system"]
    assert "This is call number 4." in last[-1]["content"]


def test_a_changed_tool_list_is_warned_about_with_the_pydantic_ai_fix(tmp_path: Path) -> None:
    warnings: list[PrefixWarning] = []
    with F(two_steps()) as srv:
        model, rec = recorded_model(
            tmp_path / "ctx.db", base_url=srv.url, model="fake-model", on_warning=warnings.append
        )
        agent: Agent[None, str] = Agent(model, instructions=STATIC)
        step = {"n": 0}

        async def reword_after_first(ctx: Any, tool_def: Any) -> Any:
            step["n"] += 1
            return tool_def if step["n"] == 1 else dataclasses.replace(tool_def, description=f"step {step['n']}")

        agent.tool_plain(prepare=reword_after_first)(add)
        with rec:
            agent.run_sync("What is 2 + 3, plus 4?")
    assert [(w.call_index, w.cause, w.segment) for w in warnings] == [(1, "tools_changed", "tool list")]
    assert warnings[0].fix == FIXES["tools_changed"]


def test_the_default_warning_goes_to_stderr_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with F(two_steps()) as srv:
        model, rec = recorded_model(tmp_path / "ctx.db", base_url=srv.url, model="fake-model")
        assert rec.fixes["system_changed"] == FIXES["system_changed"] and rec.name.startswith("pydantic-ai-")
        with rec:
            make_agent(model, dynamic="rewrite").run_sync("What is 2 + 3, plus 4?")
    err = capsys.readouterr().err
    assert err.count("ctxwright: call #1 of session") == 1 and "changed the system prompt at byte 20" in err


def test_null_content_is_sent_as_text_and_recorded_as_sent(tmp_path: Path) -> None:
    db = tmp_path / "ctx.db"
    with F(two_steps()) as srv:
        output, sid, _, _ = run(db, srv, make_agent, null_content="")
        chats = [r for r in srv.recorded if r.path.endswith("/chat/completions")]
    assert output == "9" and srv.rejected == []
    assistants = [m for m in chats[-1].json["messages"] if m["role"] == "assistant"]
    assert [m["content"] for m in assistants] == ["", ""] and all(m["tool_calls"] for m in assistants)
    assert b'"content":null' not in chats[-1].raw and int(chats[-1].headers["content-length"]) == len(chats[-1].raw)
    rows = stored(db, sid)
    assert [r["request_sha256"] for r in rows] == [hashlib.sha256(r.raw).hexdigest() for r in chats]
    assert [r["audit"]["cause"] for r in rows] == ["first", "append", "append"]


def lookup(n: int) -> str:
    """Look a record up."""
    return f"record {n}: " + " ".join(f"field{i}=value{n}-{i}" for i in range(40)) + f" code=R{n * 1000 + 7}"


def test_a_compactor_compacts_what_is_sent_rarely_and_with_the_invariants_kept(tmp_path: Path) -> None:
    db = tmp_path / "ctx.db"
    script = [
        F.reply_tool_calls([("c1", "lookup", '{"n": 1}')]),
        F.reply_tool_calls([("c2", "lookup", '{"n": 2}'), ("c3", "lookup", '{"n": 3}')]),  # a parallel batch
        F.reply_tool_calls([("c4", "lookup", '{"n": 4}')]),
        F.reply_tool_calls([("c5", "lookup", '{"n": 5}')]),
        F.reply_text("done"),
    ]
    compactor = WireCompactor(trigger_tokens=700, keep_results=1, min_tokens=50)
    with F(script) as srv:
        model, rec = recorded_model(db, base_url=srv.url, model="fake-model", compactor=compactor)
        agent: Agent[None, str] = Agent(model, instructions=STATIC, tools=[lookup])
        with rec:
            result = agent.run_sync("Look records 1 to 5 up.")
            sid = rec.session_id
        chats = [r for r in srv.recorded if r.path.endswith("/chat/completions")]
    assert sid is not None and result.output == "done"
    assert srv.rejected == [] and compactor.refused == []  # no orphan result, no split batch
    rows = stored(db, sid)
    assert [r["request_sha256"] for r in rows] == [hashlib.sha256(r.raw).hexdigest() for r in chats]
    causes = [r["audit"]["cause"] for r in rows]
    assert compactor.compactions == 1
    assert causes == ["first", "append", "append", "history_edited", "append"]

    def tool_texts(i: int) -> list[str]:
        return [m["content"] for m in chats[i].json["messages"] if m["role"] == "tool"]

    assert all(t.startswith("record ") for t in tool_texts(2))  # under the trigger: sent whole
    compacted = tool_texts(3)
    assert [t.startswith("record ") for t in compacted] == [False, False, False, True]  # all but the newest, at once
    assert tool_texts(4)[:4] == compacted  # and they stay cleared: the next call appends
    assert [c.tool_call_id for c in compactor.ledger] == ["c1", "c2", "c3"]
    assert all(c.tool_name == "lookup" and c.tokens > 50 for c in compactor.ledger)
    # pydantic-ai's own history is whole: only what was sent was compacted
    returns = [p for m in result.all_messages() for p in getattr(m, "parts", ()) if p.part_kind == "tool-return"]
    assert [str(p.content).startswith("record ") for p in returns] == [True] * 5


def test_fill_null_content_keeps_every_other_byte() -> None:
    body = '{"messages":[{"role":"user","content":"\\u00e9 é"},{"role":"assistant","content":null}],"n":1}'.encode()
    assert (
        fill_null_content(body, "")
        == '{"messages":[{"role":"user","content":"é é"},{"role":"assistant","content":""}],"n":1}'.encode()
    )
    assert fill_null_content(b'{"messages":[{"role":"assistant","content":"x"}]}', "") is None
    assert fill_null_content(b"not json", "") is None


def test_no_store_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="db="):
        recorded_model(base_url="http://127.0.0.1:9/v1", model="m")


def test_without_pydantic_ai_the_import_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pydantic_ai.models.openai", None)
    monkeypatch.delitem(sys.modules, "ctxwright.integrations.pydantic_ai")
    with pytest.raises(ConfigError, match=r"pip install 'ctxwright\[pydantic-ai\]'"):
        importlib.import_module("ctxwright.integrations.pydantic_ai")


# -- deferred tools: many tools behind search_tools and call_tool ---------------------------------

VERBS = ["create", "delete", "archive", "export", "import", "rename", "share", "lock"]
NOUNS = ["invoice", "customer", "ticket", "report", "calendar"]


def generated_tool(verb: str, noun: str) -> Any:
    def tool(record_id: int, note: str = "") -> str:
        return f"{verb} {noun} {record_id}: done {note}".strip()

    tool.__name__ = tool.__qualname__ = f"{verb}_{noun}"
    tool.__doc__ = f"{verb.capitalize()} a {noun} record by its id, with an optional note."
    return tool


async def convert_currency(amount: float, to: str) -> str:
    """Convert an amount of US dollars to another currency (EUR, GBP or JPY)."""
    await asyncio.sleep(0)  # an async tool: run on the agent's own event loop
    rate = {"EUR": 0.92, "GBP": 0.79, "JPY": 151.0}[to]
    return f"{amount * rate:.2f} {to}"


def forty_tools() -> list[Any]:
    """39 generated tools (plain functions) and one async ``pydantic_ai.Tool``: 40."""
    tools: list[Any] = [generated_tool(v, n) for v in VERBS for n in NOUNS][:39]
    return [*tools, Tool(convert_currency)]


def deferred_agent(model: Any) -> tuple[Agent[None, str], Any]:
    toolset, catalog = deferred_toolset(forty_tools())
    return Agent(model, instructions="You help with the office's records.", toolsets=[toolset]), catalog


def search_then_call(arguments: str) -> list[Any]:
    return [
        F.reply_tool_calls([("call_1", "search_tools", '{"query": "convert dollars to euros", "limit": 3}')]),
        F.reply_tool_calls([("call_2", "call_tool", '{"name": "convert_currency", "arguments": ' + arguments + "}")]),
        F.reply_text("done"),
    ]


def tool_message(request: Any, call_id: str) -> str:
    [content] = [m["content"] for m in request["messages"] if m["role"] == "tool" and m["tool_call_id"] == call_id]
    return str(content)


def test_deferred_tools_send_two_fixed_tools_and_run_the_one_found(tmp_path: Path) -> None:
    db = tmp_path / "ctx.db"
    with F(search_then_call('{"amount": 10, "to": "EUR"}')) as srv:
        model, rec = recorded_model(db, base_url=srv.url, model="fake-model")
        agent, catalog = deferred_agent(model)
        with rec:
            result = agent.run_sync("How much is 10 dollars in euros?")
            sid = rec.session_id
        chats = [r for r in srv.recorded if r.path.endswith("/chat/completions")]
    assert result.output == "done" and sid is not None and srv.rejected == []
    assert len(chats) == 3

    # every request's tool list: exactly the two tools, as catalog.specs gives them, byte-identical
    wire = [catalog.specs[name].to_wire()["function"] for name in ("search_tools", "call_tool")]
    # pydantic-ai's OpenAI schema transformer gives every object schema a "properties" key ("OpenAI
    # drops objects without it"): call_tool's open `arguments` object is sent with an empty one
    assert "properties" not in wire[1]["parameters"]["properties"]["arguments"]
    wire[1]["parameters"]["properties"]["arguments"]["properties"] = {}
    for chat in chats:
        sent = chat.json["tools"]
        assert [t["function"]["name"] for t in sent] == ["search_tools", "call_tool"]
        assert [{k: t["function"][k] for k in ("name", "description", "parameters")} for t in sent] == wire
    raw_tools = {json.dumps(c.json["tools"]).encode() for c in chats}
    assert len(raw_tools) == 1
    start = chats[0].raw.index(b'"tools":')
    segment = chats[0].raw[start : start + 200]
    assert all(segment in c.raw for c in chats)  # the raw bytes too, not just the parsed JSON

    # the search result, in the next request's tool message: the tool with its full schema
    found = json.loads(tool_message(chats[1].json, "call_1"))
    assert found["tools"][0]["function"] == {
        "name": "convert_currency",
        "description": "Convert an amount of US dollars to another currency (EUR, GBP or JPY).",
        "parameters": Tool(convert_currency).tool_def.parameters_json_schema,
    }
    # call_tool's result is the real tool's output
    assert tool_message(chats[2].json, "call_2") == "9.20 EUR"

    rows = stored(db, sid)
    assert [r["audit"]["cause"] for r in rows] == ["first", "append", "append"]


def test_call_tool_with_invalid_arguments_gives_the_model_the_structured_error(tmp_path: Path) -> None:
    db = tmp_path / "ctx.db"
    script = [
        F.reply_tool_calls([("call_1", "call_tool", '{"name": "convert_currency", "arguments": {"amount": "ten"}}')]),
        F.reply_tool_calls([("call_2", "call_tool", '{"name": "convert_curency", "arguments": {}}')]),
        F.reply_text("sorry"),
    ]
    with F(script) as srv:
        model, rec = recorded_model(db, base_url=srv.url, model="fake-model")
        agent, _ = deferred_agent(model)
        with rec:
            result = agent.run_sync("How much is 10 dollars in euros?")
            sid = rec.session_id
        chats = [r for r in srv.recorded if r.path.endswith("/chat/completions")]
    assert result.output == "sorry" and sid is not None and srv.rejected == []
    bad = json.loads(tool_message(chats[1].json, "call_1"))["error"]
    assert bad["type"] == "invalid_arguments" and "convert_currency" in bad["message"]
    unknown = json.loads(tool_message(chats[2].json, "call_2"))["error"]
    assert unknown["type"] == "unknown_tool" and "convert_currency" in unknown["hint"]
    assert [r["audit"]["cause"] for r in stored(db, sid)] == ["first", "append", "append"]


def test_a_tool_taking_the_run_context_gets_it_through_call_tool(tmp_path: Path) -> None:
    def whoami(ctx: RunContext[str], greeting: str) -> str:
        """Greet the user of this run by name."""
        return f"{greeting}, {ctx.deps}"

    toolset, _ = deferred_toolset([Tool(whoami), *forty_tools()])
    script = [F.reply_tool_calls([("c1", "call_tool", '{"name": "whoami", "arguments": {"greeting": "hi"}}')])]
    with F([*script, F.reply_text("ok")]) as srv:
        model, rec = recorded_model(tmp_path / "ctx.db", base_url=srv.url, model="fake-model")
        agent: Agent[str, str] = Agent(model, deps_type=str, toolsets=[toolset])
        with rec:
            agent.run_sync("Who am I?", deps="Ada")
        chats = [r for r in srv.recorded if r.path.endswith("/chat/completions")]
    assert srv.rejected == [] and tool_message(chats[1].json, "c1") == "hi, Ada"


def test_deferring_forty_tools_shrinks_the_first_request(tmp_path: Path) -> None:
    """The first request's prompt tokens (the recorder's stored audit) with the 40 tools sent
    directly and deferred behind the two."""
    db = tmp_path / "ctx.db"
    instructions = "You help with the office's records."
    with F([F.reply_text("a"), F.reply_text("b")]) as srv:
        model, rec = recorded_model(db, base_url=srv.url, model="fake-model", name="direct")
        with rec:
            Agent(model, instructions=instructions, tools=forty_tools()).run_sync("Hello")
            direct_sid = rec.session_id
        model, rec = recorded_model(db, base_url=srv.url, model="fake-model", name="deferred")
        with rec:
            deferred_agent(model)[0].run_sync("Hello")
            deferred_sid = rec.session_id
        sent = srv.requests
    assert direct_sid is not None and deferred_sid is not None
    assert len(sent[0]["tools"]) == 40 and len(sent[1]["tools"]) == 2
    direct = stored(db, direct_sid)[0]["audit"]["prompt_tokens"]
    deferred = stored(db, deferred_sid)[0]["audit"]["prompt_tokens"]
    print(f"first request's prompt tokens: 40 tools sent directly {direct}, deferred {deferred}")
    assert deferred * 5 < direct


def test_a_deferred_call_past_its_timeout_is_a_structured_error(tmp_path: Path) -> None:
    async def slow_report(days: int) -> str:
        """Build the slow yearly report."""
        await asyncio.sleep(5)
        return "never"

    toolset, _ = deferred_toolset([slow_report, *forty_tools()], timeout_s=0.2)
    script = [F.reply_tool_calls([("c1", "call_tool", '{"name": "slow_report", "arguments": {"days": 1}}')])]
    with F([*script, F.reply_text("ok")]) as srv:
        model, rec = recorded_model(tmp_path / "ctx.db", base_url=srv.url, model="fake-model")
        with rec:
            result = Agent(model, toolsets=[toolset]).run_sync("The report?")
        chats = [r for r in srv.recorded if r.path.endswith("/chat/completions")]
    assert result.output == "ok" and srv.rejected == []
    error = json.loads(tool_message(chats[1].json, "c1"))["error"]
    assert "slow_report did not finish within 0.2 s" in error["message"]


def test_the_catalog_runs_a_tool_outside_a_run_too() -> None:
    _, catalog = deferred_toolset(forty_tools())
    assert catalog.call_tool("convert_currency", {"amount": 100, "to": "GBP"}) == "79.00 GBP"
    assert catalog.call_tool("lock_ticket", {"record_id": 7}) == "lock ticket 7: done"
    assert json.loads(catalog.search_tools("lock a ticket", 1))["tools"][0]["function"]["name"] == "lock_ticket"


@pytest.mark.parametrize("quiet", [False, True])
def test_each_call_prints_one_line_unless_quiet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], quiet: bool
) -> None:
    with F(two_steps()) as srv:
        output, sid, _, rec = run(tmp_path / "ctx.db", srv, make_agent, quiet=quiet)
    assert output == "9" and rec.quiet is quiet
    err = capsys.readouterr().err
    calls = [line for line in err.splitlines() if line.startswith(f"{sid} #")]
    if quiet:
        assert err == ""
    else:  # three model calls, each the proxy's line, and once where the session is
        assert [line.split()[1] for line in calls] == ["#0", "#1", "#2"]
        assert err.count(f"pydantic-ai session {sid} is recorded in {tmp_path / 'ctx.db'}") == 1
