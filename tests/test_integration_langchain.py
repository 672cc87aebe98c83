"""ctxwright under a LangChain v1 agent (``ctxwright.integrations.langchain``), with the real
``langchain`` / ``langchain-openai`` / ``openai`` packages and real HTTP.

What is checked: every model call ``create_agent`` makes is recorded exactly as the server
received it (the fake server, which rejects unanswered tool calls as OpenAI does, keeps the
bytes it got); the live audit stored with each call is what ``ctxwright audit --proxy-session``
says; a ``@dynamic_prompt`` that changes the system prompt every call is warned about once, on
the first call it changes; with :class:`FrozenSystemPrompt` the system prompt sent is
byte-identical on every call, the change travels in an appended message, and every call is an
append of the one before -- sync and async, streamed or not. The slow test runs the same agent
against llama-cpp-python's own server.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import itertools
import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain.agents", reason="pip install 'ctxwright[langchain]'")
pytest.importorskip("langchain_openai", reason="pip install 'ctxwright[langchain]'")

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ModelRequest, dynamic_prompt
from langchain_core.messages import HumanMessage
from langchain_core.tools import BaseTool, StructuredTool, tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field, create_model

from ctxwright.cli.main import main as cli
from ctxwright.errors import ConfigError
from ctxwright.integrations.compaction import tail_reminder
from ctxwright.integrations.langchain import (
    NOTE_KEY,
    REPLACES,
    RESTORED,
    CompactToolResults,
    FrozenSystemPrompt,
    deferred_tools,
    note_text,
    recorded_chat_model,
)
from ctxwright.integrations.recording import FrameworkRecorder, PrefixWarning
from ctxwright.proxy.log import proxy_session_requests
from fakeserver import FakeOpenAIServer as F

STATIC = "You are a weather assistant. Answer in one short sentence, after looking the weather up."


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny and 21 C in {city}"


@dynamic_prompt
def with_count(request: ModelRequest) -> str:
    """The prompt LangChain's docs show: the system prompt rebuilt from the state each call."""
    return f"{STATIC}\nMessages so far: {len(request.messages)}"


def weather_call(call_id: str, city: str = "Paris") -> Any:
    body = F.completion_body(
        {
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": json.dumps({"city": city})},
                }
            ],
        },
        finish_reason="tool_calls",
        usage=F.usage_openai(120, 9, 0),
    )
    return F.reply_json(body)


def final(text: str = "It is sunny and 21 C in Paris.") -> Any:
    return F.reply_text(text, usage=F.usage_openai(160, 12, 96))


def reminder(text: str) -> str:
    """The note's content: the adapters' shared tail reminder."""
    return str(tail_reminder(text)["content"])


def run_agent(
    srv: F,
    db: Path,
    middleware: list[AgentMiddleware] | tuple[AgentMiddleware, ...] = (),
    *,
    use_async: bool = False,
    **chat: Any,
) -> tuple[dict[str, Any], FrameworkRecorder, list[PrefixWarning], str]:
    warnings: list[PrefixWarning] = []
    model, recorder = recorded_chat_model(
        db, model="fake-model", base_url=srv.url, api_key="sk-test", max_retries=0, on_warning=warnings.append, **chat
    )
    agent = create_agent(
        model,
        tools=[get_weather],
        system_prompt=None if middleware else STATIC,
        middleware=list(middleware),
    )
    task = {"messages": [{"role": "user", "content": "What is the weather in Paris?"}]}
    state = asyncio.run(agent.ainvoke(task)) if use_async else agent.invoke(task)
    sid = recorder.session_id
    assert sid is not None
    return state, recorder, warnings, sid


def recorded(recorder: FrameworkRecorder, sid: str) -> list[dict[str, Any]]:
    return proxy_session_requests(recorder.store, sid)


def causes(records: list[dict[str, Any]]) -> list[str]:
    return [r["proxy"]["audit"]["cause"] for r in records]


def offline_audit(db: Path, sid: str, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    capsys.readouterr()
    assert cli(["audit", "--proxy-session", sid, "--json", "--db", str(db)]) == 0
    rows: list[dict[str, Any]] = json.loads(capsys.readouterr().out)["requests"]
    return rows


# -- the recording -----------------------------------------------------------------------------


def test_every_model_call_of_a_create_agent_is_recorded_as_the_server_received_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "lc.db"
    with F([weather_call("call_1"), final()]) as srv:
        state, recorder, warnings, sid = run_agent(srv, db)
        sent = srv.requests
        rejected = srv.rejected
    try:
        records = recorded(recorder, sid)
    finally:
        recorder.close()
    assert state["messages"][-1].text == "It is sunny and 21 C in Paris."
    assert [m.type for m in state["messages"]] == ["human", "ai", "tool", "ai"]
    assert rejected == []  # the tool call was answered before the next request
    assert len(sent) == 2
    assert [r["request"] for r in records] == sent  # the bytes the server parsed, call by call
    assert all(r["proxy"]["status"] == 200 and r["proxy"]["outcome"] == "complete" for r in records)
    assert sent[0]["messages"][0] == {"role": "system", "content": STATIC}
    assert sent[1]["messages"][:2] == sent[0]["messages"]  # the history only grew
    assert causes(records) == ["first", "append"]
    assert warnings == []
    stored = [r["proxy"]["audit"] for r in records]
    assert stored[1]["reusable_prefix_tokens"] > 0
    rows = offline_audit(db, sid, capsys)
    assert [(r["cause"], r["reusable_prefix_tokens"]) for r in rows] == [
        (s["cause"], s["reusable_prefix_tokens"]) for s in stored
    ]
    assert [r["cached_tokens"] for r in rows] == [0, 96]  # the provider's own counts, as reported


def test_the_adapter_imports_the_real_langchain_not_itself() -> None:
    """``ctxwright/integrations/langchain.py`` next to ``import langchain``: absolute imports."""
    import langchain

    import ctxwright.integrations.langchain as adapter

    assert Path(langchain.__file__).parent.name == "langchain"
    assert "ctxwright" not in Path(langchain.__file__).parts
    assert adapter.AgentMiddleware.__module__.startswith("langchain.agents.")


def test_without_langchain_the_import_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "ctxwright.integrations.langchain")
    monkeypatch.setitem(sys.modules, "langchain_openai", None)  # what a missing package looks like
    with pytest.raises(ConfigError, match=r"pip install 'ctxwright\[langchain\]'"):
        importlib.import_module("ctxwright.integrations.langchain")


# -- the dynamic system prompt -----------------------------------------------------------------


def test_a_dynamic_system_prompt_is_warned_once_on_the_first_call_it_changes(tmp_path: Path) -> None:
    with F([weather_call("call_1"), weather_call("call_2", "Lyon"), final()]) as srv:
        _state, recorder, warnings, sid = run_agent(srv, tmp_path / "lc.db", [with_count])
        sent = srv.requests
    try:
        records = recorded(recorder, sid)
    finally:
        recorder.close()
    systems = [r["messages"][0]["content"] for r in sent]
    assert systems == [f"{STATIC}\nMessages so far: {n}" for n in (1, 3, 5)]
    assert causes(records) == ["first", "system_changed", "system_changed"]
    assert len(warnings) == 1  # once per segment, though every later call changes it again
    (w,) = warnings
    assert (w.session_id, w.call_index, w.cause, w.segment) == (sid, 1, "system_changed", "system prompt")
    assert w.byte_offset is not None and w.byte_offset > len(STATIC)  # in the changing tail
    assert "system prompt" in str(w) and "appended after the history" in str(w)


@pytest.mark.parametrize("use_async", [False, True], ids=["invoke", "ainvoke-streamed"])
def test_frozen_system_prompt_sends_the_first_prompt_every_call_and_appends_the_change(
    tmp_path: Path, use_async: bool
) -> None:
    frozen = FrozenSystemPrompt()
    db = tmp_path / "lc.db"
    chat: dict[str, Any] = {"streaming": True, "stream_usage": True} if use_async else {}
    with F([weather_call("call_1"), weather_call("call_2", "Lyon"), final()]) as srv:
        state, recorder, warnings, sid = run_agent(srv, db, [with_count, frozen], use_async=use_async, **chat)
        sent = srv.requests
        rejected = srv.rejected
    try:
        records = recorded(recorder, sid)
    finally:
        recorder.close()
    assert rejected == []
    assert [r["request"] for r in records] == sent
    assert [r["proxy"]["streamed"] for r in records] == [use_async] * 3
    first_system = f"{STATIC}\nMessages so far: 1"
    assert [r["messages"][0] for r in sent] == [{"role": "system", "content": first_system}] * 3
    assert warnings == []
    assert causes(records) == ["first", "append", "append"]
    # each call is the one before, its answer, the tool result, then the note of what changed
    for before, after in itertools.pairwise(sent):
        assert after["messages"][: len(before["messages"])] == before["messages"]
    line2 = REPLACES.format(line=2)
    assert sent[1]["messages"][-2:] == [
        {"role": "tool", "content": "sunny and 21 C in Paris", "tool_call_id": "call_1"},
        {"role": "user", "content": reminder(f"{line2}Messages so far: 3")},
    ]
    assert sent[2]["messages"][-1] == {"role": "user", "content": reminder(f"{line2}Messages so far: 6")}
    assert frozen.notes == 2
    # the agent's state holds the notes where they were sent (so the next call sends them again)
    notes = [m for m in state["messages"] if isinstance(m, HumanMessage) and NOTE_KEY in m.additional_kwargs]
    assert [m.additional_kwargs[NOTE_KEY] for m in notes] == [f"{STATIC}\nMessages so far: {n}" for n in (3, 6)]
    assert [m.type for m in state["messages"]] == ["human", "ai", "tool", "human", "ai", "tool", "human", "ai"]


def test_frozen_system_prompt_does_nothing_outside_the_middleware_that_changes_the_prompt(tmp_path: Path) -> None:
    """LangChain runs ``wrap_model_call`` with the first middleware outermost: before
    ``with_count`` in the list, the frozen prompt sees the request before the prompt is set."""
    with F([weather_call("call_1"), final()]) as srv:
        _state, recorder, warnings, sid = run_agent(srv, tmp_path / "lc.db", [FrozenSystemPrompt(), with_count])
    try:
        assert causes(recorded(recorder, sid)) == ["first", "system_changed"]
    finally:
        recorder.close()
    assert [w.cause for w in warnings] == ["system_changed"]


def test_a_given_frozen_prompt_is_sent_and_a_prompt_that_only_adds_to_it_is_sent_as_the_addition(
    tmp_path: Path,
) -> None:
    with F([weather_call("call_1"), final()]) as srv:
        _state, recorder, warnings, sid = run_agent(
            srv, tmp_path / "lc.db", [with_count, FrozenSystemPrompt(system_prompt=STATIC)]
        )
        sent = srv.requests
    try:
        assert causes(recorded(recorder, sid)) == ["first", "append"]
    finally:
        recorder.close()
    assert warnings == []
    assert [r["messages"][0]["content"] for r in sent] == [STATIC, STATIC]
    assert sent[0]["messages"][-1] == {"role": "user", "content": reminder("Messages so far: 1")}
    assert sent[1]["messages"][-1] == {"role": "user", "content": reminder("Messages so far: 4")}


def test_note_text() -> None:
    assert note_text("A\nB", "A\nB\nC") == "C"  # an addition alone
    assert note_text("A\nB 1\nC", "A\nB 2\nC") == REPLACES.format(line=2) + "B 2\nC"
    assert note_text("A", "Z") == REPLACES.format(line=1) + "Z"
    assert note_text(None, "Z") == REPLACES.format(line=1) + "Z"
    assert note_text("A\nB", "A\nB") == RESTORED


def test_a_prompt_back_to_the_frozen_one_is_said_once() -> None:
    """Call by call through :meth:`FrozenSystemPrompt.freeze`: the prompt changes, stays, goes back."""
    frozen = FrozenSystemPrompt()
    history: list[Any] = [HumanMessage("task")]
    sent = []
    for prompt in ("S\nt=1", "S\nt=2", "S\nt=2", "S\nt=1"):
        request = ModelRequest(model=None, messages=list(history), system_prompt=prompt)  # type: ignore[arg-type]  # freeze reads no model
        out, note = frozen.freeze(request)
        sent.append((out.system_prompt, [m.text for m in out.messages[len(history) :]]))
        history += [*([note] if note else []), HumanMessage("next")]
    assert sent == [
        ("S\nt=1", []),
        ("S\nt=1", [reminder(REPLACES.format(line=2) + "t=2")]),
        ("S\nt=1", []),  # unchanged since the last note: nothing new appended
        ("S\nt=1", [reminder(RESTORED)]),
    ]
    assert frozen.notes == 2


# -- what llama-cpp-python's server rejects ---------------------------------------------------


def test_null_content_sends_the_tool_call_turn_with_text_and_records_what_was_sent(tmp_path: Path) -> None:
    """LangChain sends an assistant tool-call turn as ``"content": null`` (as OpenAI documents);
    ``null_content=""`` sends ``""`` instead, sync and async, and the recording is the bytes sent."""
    for use_async in (False, True):
        with F([weather_call("call_1"), final()]) as srv:
            _state, recorder, _w, sid = run_agent(
                srv, tmp_path / f"nc{use_async}.db", use_async=use_async, null_content=""
            )
            sent = srv.requests
        try:
            records = recorded(recorder, sid)
        finally:
            recorder.close()
        assert sent[1]["messages"][2]["role"] == "assistant"
        assert sent[1]["messages"][2]["content"] == ""  # not null
        assert sent[1]["messages"][2]["tool_calls"][0]["id"] == "call_1"
        assert [r["request"] for r in records] == sent
        assert causes(records) == ["first", "append"]


# -- compaction --------------------------------------------------------------------------------


def read_call(*paths: str) -> Any:
    calls = [
        {
            "id": f"read_{p.strip('/').replace('/', '_')}",
            "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": p})},
        }
        for p in paths
    ]
    body = F.completion_body({"content": None, "tool_calls": calls}, finish_reason="tool_calls")
    return F.reply_json(body)


@tool
def read_file(path: str) -> str:
    """Read a file."""
    return f"{path} has {len(path) * 100 + 1007} lines\n" + "x = 1\n" * 260  # ~400 tokens


def test_compaction_is_rare_deep_append_only_between_and_keeps_every_invariant(tmp_path: Path) -> None:
    """Four tool rounds (one a parallel batch of two), results of ~400 tokens, a trigger of
    1,500: nothing changes until the request passes it (call 3), then every result but the
    newest becomes a placeholder at once; the call after extends that one. The fake server,
    which rejects an orphan result or a split batch, accepts every request; the agent's state
    keeps the full results."""
    compact = CompactToolResults(trigger_tokens=1_500, keep_results=1, min_tokens=10)
    script = [read_call("/src/a.py"), read_call("/src/bb.py", "/src/ccc.py"), read_call("/src/dddd.py")]
    script += [read_call("/src/eeeee.py"), final("done")]
    warnings: list[PrefixWarning] = []
    with F(script) as srv:
        model, recorder = recorded_chat_model(
            tmp_path / "c.db", model="fake-model", base_url=srv.url, api_key="sk-test", on_warning=warnings.append
        )
        agent = create_agent(model, tools=[read_file], system_prompt=STATIC, middleware=[compact])
        state = agent.invoke({"messages": [{"role": "user", "content": "Summarise the repo."}]})
        sent, rejected = srv.requests, srv.rejected
        sid = recorder.session_id
        assert sid is not None
        records = recorded(recorder, sid)
        recorder.close()
    assert rejected == []
    assert [r["request"] for r in records] == sent
    assert compact.compactor.compactions == 1
    assert compact.compactor.refused == []
    cleared = [
        [m["tool_call_id"] for m in r["messages"] if m["role"] == "tool" and "[cleared" in m["content"]] for r in sent
    ]
    assert cleared == [
        [],
        [],
        [],
        ["read_src_a.py", "read_src_bb.py", "read_src_ccc.py"],
        ["read_src_a.py", "read_src_bb.py", "read_src_ccc.py"],
    ]
    assert sent[4]["messages"][: len(sent[3]["messages"])] == sent[3]["messages"]  # append-only after it
    got = causes(records)
    assert got == ["first", "append", "append", "history_edited", "append"]  # one cache break, at the compaction
    full = [m.text for m in state["messages"] if m.type == "tool"]
    assert len(full) == 5 and all("[cleared" not in t and len(t) > 1_000 for t in full)  # the state is whole
    lost = {v for c in compact.ledger for v in c.lost}
    # what the placeholders took away: the line counts; not the paths, the calls still show them
    assert lost == {"1907", "2007", "2107"}
    assert [c.tool_call_id for c in compact.ledger] == ["read_src_a.py", "read_src_bb.py", "read_src_ccc.py"]


# -- a real server -----------------------------------------------------------------------------


@pytest.mark.slow
def test_two_turns_against_llama_cpp_server_are_recorded_append_only(tmp_path: Path) -> None:
    """Two turns of one thread (a checkpointer keeps the history), the dynamic prompt changed
    between them: the second call is an append of the first, the note last. At temperature 0
    the tiny model answers without calling the tool (measured); a tool loop would go on too, as
    the adapter sends the ``"content": null`` of LangChain's tool-call turn as ``""`` by default
    (this server answers the null with HTTP 500: tests/llamaserver.py)."""
    pytest.importorskip("llama_cpp.server.app", reason="llama-cpp-python's server extra is not installed")
    from langgraph.checkpoint.memory import InMemorySaver

    from llamaserver import LlamaServer

    warnings: list[PrefixWarning] = []
    with LlamaServer(tmp_path / "server.log") as srv:
        model, recorder = recorded_chat_model(
            tmp_path / "llama.db",
            model=srv.model,
            base_url=srv.url,
            api_key="sk-local",
            max_retries=0,
            max_tokens=48,
            temperature=0,
            on_warning=warnings.append,
        )
        try:
            agent = create_agent(
                model, tools=[get_weather], middleware=[with_count, FrozenSystemPrompt()], checkpointer=InMemorySaver()
            )
            config: Any = {"recursion_limit": 6, "configurable": {"thread_id": "t1"}}
            for question in ("What is the weather in Paris?", "And in Lyon?"):
                state = agent.invoke({"messages": [{"role": "user", "content": question}]}, config)
            sid = recorder.session_id
            assert sid is not None, srv.tail()
            records = recorded(recorder, sid)
        finally:
            recorder.close()
        log = srv.tail()
    assert [m.type for m in state["messages"]] == ["human", "ai", "human", "human", "ai"], log
    assert [r["proxy"]["status"] for r in records] == [200, 200], log
    first, second = (r["request"]["messages"] for r in records)
    assert second[: len(first)] == first  # the same system prompt, the history grown
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user", "user"]
    assert second[-1]["content"] == reminder(REPLACES.format(line=2) + "Messages so far: 3")
    assert causes(records) == ["first", "append"]
    assert records[1]["proxy"]["audit"]["reusable_prefix_tokens"] > 0
    assert warnings == []


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class AutoToolChoice(AgentMiddleware):
    """``tool_choice: "auto"`` on every call (the same options each call: append-only): the
    tiny model calls tools only when asked so."""

    def wrap_model_call(self, request: ModelRequest, handler: Any) -> Any:
        return handler(request.override(tool_choice="auto"))


@pytest.mark.slow
def test_a_tool_loop_against_llama_cpp_server_needs_null_content(tmp_path: Path) -> None:
    """Measured: asked with ``tool_choice: "auto"`` the tiny model calls ``add``; LangChain
    then sends the tool-call turn with ``"content": null`` and this server answers HTTP 500.
    With ``null_content=""`` the second call succeeds and extends the first."""
    pytest.importorskip("llama_cpp.server.app", reason="llama-cpp-python's server extra is not installed")
    from langchain.agents.middleware import ModelCallLimitMiddleware

    from llamaserver import LlamaServer

    outcomes: dict[str, list[dict[str, Any]]] = {}
    with LlamaServer(tmp_path / "server.log") as srv:
        for label, null_content in (("null", None), ("empty", "")):
            model, recorder = recorded_chat_model(
                tmp_path / f"{label}.db",
                model=srv.model,
                base_url=srv.url,
                api_key="sk-local",
                max_retries=0,
                max_tokens=48,
                temperature=0,
                null_content=null_content,
            )
            try:
                agent = create_agent(
                    model,
                    tools=[add],
                    system_prompt="You add numbers with the add tool.",
                    middleware=[AutoToolChoice(), ModelCallLimitMiddleware(run_limit=2, exit_behavior="end")],
                )
                with contextlib.suppress(Exception):  # the null run fails on its second call
                    agent.invoke({"messages": [{"role": "user", "content": "What is 2 + 3? Use the add tool."}]})
                sid = recorder.session_id
                assert sid is not None, srv.tail()
                outcomes[label] = recorded(recorder, sid)
            finally:
                recorder.close()
        log = srv.tail()
    for label, status in (("null", 500), ("empty", 200)):
        records = outcomes[label]
        assert [r["proxy"]["status"] for r in records] == [200, status], log
        turn, result = records[1]["request"]["messages"][2:4]
        assert turn["role"] == "assistant" and turn["tool_calls"][0]["function"]["name"] == "add"
        assert turn["content"] == (None if label == "null" else "")
        assert result == {"role": "tool", "content": "5", "tool_call_id": turn["tool_calls"][0]["id"]}
        assert causes(records) == ["first", "append"]
        assert records[1]["proxy"]["audit"]["reusable_prefix_tokens"] > 0


# -- deferred tools ----------------------------------------------------------------------------

NOUNS = ("invoice", "order", "customer", "ticket", "shipment", "coupon", "warehouse", "supplier", "refund", "report")
VERBS = ("get", "create", "cancel", "archive")


def catalog_tools() -> list[BaseTool]:
    """40 generated tools (10 nouns x 4 verbs), each with its own pydantic parameters."""
    out: list[BaseTool] = []
    for noun in NOUNS:
        for verb in VERBS:
            fields: dict[str, Any] = {
                f"{noun}_id": (str, Field(description=f"the {noun}'s id, e.g. {noun[:3].upper()}-1042")),
                "reason": (str, Field(default="", description=f"why the {noun} is {verb}ed, for the audit log")),
                "notify": (bool, Field(default=False, description="email the account owner about it")),
            }
            args = create_model(f"{verb}_{noun}_args", **fields)

            def run(verb: str = verb, noun: str = noun, **kw: Any) -> str:
                return f"{verb} {noun} {kw[f'{noun}_id']}: done (reason={kw['reason']!r}, notify={kw['notify']})"

            out.append(
                StructuredTool.from_function(
                    func=run,
                    name=f"{verb}_{noun}",
                    description=f"{verb.capitalize()} a {noun} of the shop by its id and return its new state.",
                    args_schema=args,
                )
            )
    return out


def tools_bytes(raw: bytes) -> bytes:
    """The request body's ``tools`` array, byte for byte as sent."""
    text = raw.decode("utf-8")
    start = text.index('"tools":') + len('"tools":')
    start += len(text[start:]) - len(text[start:].lstrip())
    _value, end = json.JSONDecoder().raw_decode(text, start)
    return text[start:end].encode("utf-8")


@tool
def flaky_export(report_id: str) -> str:
    """Export a report as PDF (fails: the exporter is down)."""
    raise RuntimeError(f"exporter down while exporting {report_id}")


def tool_reply(call_id: str, name: str, arguments: dict[str, Any]) -> Any:
    return F.reply_tool_calls([(call_id, name, json.dumps(arguments))])


def run_deferred(
    srv: F, db: Path, tools: list[BaseTool], question: str = "Cancel order ORD-7 please."
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    model, recorder = recorded_chat_model(db, model="fake-model", base_url=srv.url, api_key="sk-test", max_retries=0)
    try:
        agent = create_agent(model, tools=tools, system_prompt=STATIC)
        state = agent.invoke({"messages": [{"role": "user", "content": question}]})
        sid = recorder.session_id
        assert sid is not None
        return state, recorded(recorder, sid)
    finally:
        recorder.close()


def test_deferred_tools_send_two_fixed_tools_and_run_the_one_found(tmp_path: Path) -> None:
    tools = catalog_tools()
    agent_tools, catalog = deferred_tools(tools)
    assert [t.name for t in agent_tools] == ["search_tools", "call_tool"]
    specs = [catalog.specs[n].to_wire() for n in ("search_tools", "call_tool")]
    arguments = {"order_id": "ORD-7", "reason": "customer asked"}
    script = [
        tool_reply("call_s", "search_tools", {"query": "cancel an order", "limit": 3}),
        tool_reply("call_c", "call_tool", {"name": "cancel_order", "arguments": arguments}),
        final("Order ORD-7 is cancelled."),
    ]
    with F(script) as srv:
        state, records = run_deferred(srv, tmp_path / "d.db", agent_tools)
        sent, raw, rejected = srv.requests, [r.raw for r in srv.recorded], srv.rejected
    assert rejected == []
    assert state["messages"][-1].text == "Order ORD-7 is cancelled."
    assert len(sent) == 3
    # the tools array: ctxwright's two tools exactly, byte-identical on every request
    assert all(r["tools"] == specs for r in sent)
    assert len({tools_bytes(r) for r in raw}) == 1
    # the search result, in the next request: the right tool first, with its full schema
    search_msg = sent[1]["messages"][-1]
    assert search_msg["role"] == "tool" and search_msg["tool_call_id"] == "call_s"
    found = json.loads(search_msg["content"])["tools"]
    cancel_order = next(t for t in tools if t.name == "cancel_order")
    assert found[0] == convert_to_openai_tool(cancel_order)
    assert found[0]["function"]["parameters"]["required"] == ["order_id"]
    assert {"order_id", "reason", "notify"} == set(found[0]["function"]["parameters"]["properties"])
    assert len(found) <= 3
    # the call_tool result is the real tool's output
    call_msg = sent[2]["messages"][-1]
    assert call_msg == {
        "role": "tool",
        "content": cancel_order.invoke(arguments),
        "tool_call_id": "call_c",
    }
    assert call_msg["content"] == "cancel order ORD-7: done (reason='customer asked', notify=False)"
    assert [r["request"] for r in records] == sent
    assert causes(records) == ["first", "append", "append"]


def test_call_tool_with_invalid_arguments_answers_the_structured_error(tmp_path: Path) -> None:
    agent_tools, _catalog = deferred_tools([*catalog_tools(), flaky_export])
    script = [
        tool_reply("call_1", "call_tool", {"name": "cancel_order", "arguments": {"order_id": 7, "colour": "red"}}),
        tool_reply("call_2", "call_tool", {"name": "cancel_ordr", "arguments": {"order_id": "ORD-7"}}),
        tool_reply("call_3", "call_tool", {"name": "cancel_order", "arguments": "ORD-7"}),  # not an object
        tool_reply("call_4", "search_tools", {"limit": 2}),  # no query
        tool_reply("call_5", "call_tool", {"name": "flaky_export", "arguments": {"report_id": "R-1"}}),
        final("I could not cancel it."),
    ]
    with F(script) as srv:
        state, records = run_deferred(srv, tmp_path / "e.db", agent_tools)
        sent, rejected = srv.requests, srv.rejected
    assert rejected == []
    assert state["messages"][-1].text == "I could not cancel it."
    errors = [json.loads(sent[i]["messages"][-1]["content"])["error"] for i in range(1, 6)]
    assert [e["type"] for e in errors] == [
        "invalid_arguments",
        "unknown_tool",
        "invalid_arguments",
        "invalid_arguments",
        "RuntimeError",  # the tool ran and raised: its message, not a crash
    ]
    assert "7 is not of type 'string' at order_id" in errors[0]["message"] and "order_id" in errors[0]["hint"]
    assert "cancel_order" in errors[1]["hint"]  # the closest name
    assert errors[4]["message"] == "exporter down while exporting R-1"
    assert [e["tool"] for e in errors] == ["call_tool", "call_tool", "call_tool", "search_tools", "flaky_export"]
    assert [m.type for m in state["messages"]] == ["human", *["ai", "tool"] * 5, "ai"]
    assert causes(records) == ["first", *["append"] * 5]


def test_deferred_tools_prompt_tokens_against_all_tools_sent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The first request's prompt, as the recorder's live audit counts it: 40 tools sent
    directly, then the same tools deferred (the fake reports no usage: ctxwright's count)."""
    tools = catalog_tools()
    counts = {}
    for label, agent_tools in (("direct", tools), ("deferred", deferred_tools(tools)[0])):
        with F([F.reply_text("ok")]) as srv:
            _state, records = run_deferred(srv, tmp_path / f"{label}.db", agent_tools)
            assert len(srv.requests[0]["tools"]) == len(agent_tools)
        counts[label] = records[0]["proxy"]["audit"]["prompt_tokens"]
    with capsys.disabled():
        print(f"\nfirst request's prompt tokens: {counts}")
    assert counts["deferred"] < counts["direct"] / 5
