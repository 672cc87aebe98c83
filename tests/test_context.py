"""The context any loop can drive (``agent/context.py``), and the one assembler under it.

* ``Context`` driven by the official ``openai`` client against the fake server, which rejects
  an unanswered tool call as OpenAI does: every request append-only relative to the last,
  the tools array byte-identical across calls, the session stored and resumable.
* ``ctxwright tools list`` with a set of flags lists exactly the tools of the first request
  ``ctxwright run`` sends with the same flags.
* a sub-agent is its parent's components forked: the same prefix bytes, its own TODO list.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI
from tests.fakeserver import FakeOpenAIServer

from ctxwright import Context, Harness, tool
from ctxwright.agent.assemble import fork
from ctxwright.backends.scripted import ScriptedBackend, call
from ctxwright.cli.main import main
from ctxwright.core.messages import Message
from ctxwright.errors import ConfigError, CtxwrightError
from ctxwright.status.todo import TodoComponent


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _drive(ctx: Context, client: OpenAI, question: str) -> Any:
    ctx.add_user(question)
    while True:
        reply = client.chat.completions.create(model="m", **ctx.request())
        step = ctx.record(reply)
        if not step.tool_calls:
            return step
        ctx.run_tools(step)


def _is_prefix(old: list[Any], new: list[Any]) -> bool:
    return new[: len(old)] == old


def test_context_drives_an_openai_client_loop_append_only(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    replies = [
        FakeOpenAIServer.reply_tool_calls([("c1", "add", '{"a": 2, "b": 3}')]),
        FakeOpenAIServer.reply_text("2 + 3 = 5"),
        FakeOpenAIServer.reply_tool_calls([("c2", "add", '{"a": 5, "b": 1}')]),
        FakeOpenAIServer.reply_text("6"),
    ]
    with FakeOpenAIServer(replies) as srv:
        client = OpenAI(base_url=srv.url, api_key="x", max_retries=0)
        with Context(system="You add numbers.", tools=[add], db=db) as ctx:
            step = _drive(ctx, client, "What is 2 + 3?")
            assert step.text == "2 + 3 = 5"
            sid = ctx.session_id
            assert ctx.audit().requests == 2
        with Context.resume(sid, tools=[add], db=db) as ctx2:  # stored and resumable like a Harness session
            step = _drive(ctx2, client, "And plus 1?")
            assert step.text == "6"
        sent = srv.requests
        assert not srv.rejected  # every tool call answered before the next request
    assert len(sent) == 4
    tools = {json.dumps(r["tools"], sort_keys=True) for r in sent}
    assert len(tools) == 1  # the tools array byte-identical across calls, across the resume
    for old, new in itertools.pairwise(sent):
        assert _is_prefix(old["messages"], new["messages"])  # append-only
    assert sent[0]["messages"][0]["content"].startswith("You add numbers.")
    tool_msgs = [m for m in sent[1]["messages"] if m["role"] == "tool"]
    assert tool_msgs and tool_msgs[0]["content"] == "5" and tool_msgs[0]["tool_call_id"] == "c1"


def test_context_record_takes_a_dict_and_refuses_without_a_request() -> None:
    ctx = Context(system="s", tools=[add])
    with pytest.raises(CtxwrightError, match=r"ctx\.request\(\)"):
        ctx.record({"choices": [{"message": {"role": "assistant", "content": "x"}}]})
    ctx.add_user("hi")
    body = ctx.request()
    assert body["tools"][0]["function"]["name"] == "add" and "model" not in body
    step = ctx.record({"choices": [{"message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}]})
    assert step.text == "hello" and step.finish_reason == "stop"
    with pytest.raises(ConfigError, match="model's reply"):
        ctx.request()
        ctx.record(42)
    ctx.close()
    with pytest.raises(CtxwrightError, match="closed"):
        ctx.add_user("again")


def test_context_refuses_options_that_need_a_model_and_unknown_ones() -> None:
    with pytest.raises(ConfigError, match="delegate needs a model"):
        Context(system="s", tools=[add], delegate=True)
    with pytest.raises(ConfigError, match="LLM summaries need a model"):
        Context(system="s", tools=[add], summaries=True)
    with pytest.raises(ConfigError, match="did you mean 'max_tokens'"):
        Context(system="s", tools=[add], max_token=5)


def _first_request_tools(args: list[str], tmp_path: Path) -> list[str]:
    """The tool names of the first request ``ctxwright run ARGS`` sends to a served model."""
    with FakeOpenAIServer([FakeOpenAIServer.reply_text("done")]) as srv:
        run = [
            "run",
            *args,
            "--backend",
            "openai",
            "--model",
            "m",
            "--base-url",
            srv.url,
            "--db",
            str(tmp_path / "r.db"),
        ]
        assert main([*run, "hello"]) == 0
        return [t["function"]["name"] for t in srv.requests[0].get("tools", [])]


@pytest.mark.parametrize(
    "flags",
    [
        [],
        ["--no-status", "--no-todo"],
        ["--no-delegate", "--read-result"],
        ["--workspace", "."],
        ["--no-compaction"],
        ["--defer-tools", "all"],
    ],
)
def test_tools_list_lists_what_run_sends(flags: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    flags = [str(tmp_path) if f == "." else f for f in flags]
    served = ["--backend", "openai", "--model", "m", "--base-url", "http://127.0.0.1:9/v1"]
    assert main(["tools", "list", "--json", *flags, *served]) == 0
    listed = [r["name"] for r in json.loads(capsys.readouterr().out)["tools"] if r["where"] == "prefix"]
    assert listed == _first_request_tools(flags, tmp_path)


def test_tools_list_without_a_backend_lists_what_run_on_the_embedded_model_sends(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # run's default backend is the embedded model, whose defaults leave the status bar, the TODO
    # tools, read_result and delegate off: tools list must show that tool set, not a served one's
    assert main(["tools", "list", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["backend"] == "embedded"
    assert [r["name"] for r in rep["tools"]] == ["get_current_time", "get_weather", "calculator"]


def test_a_child_is_the_parent_forked_with_its_own_todo_and_status() -> None:
    script: list[Message | str] = [
        Message(role="assistant", tool_calls=(call("delegate", {"task": "note it"}, "d1"),)),
        Message(role="assistant", tool_calls=(call("rewrite_todo_list", {"items": ["child item"]}, "t1"),)),
        "child done",
        "parent done",
    ]
    backend = ScriptedBackend(script)
    with Harness("sys", [add], backend=backend, todo=True, status=True, delegate=True) as h:
        h.run("go")
        assert h.agent.ctx.assembly is not None
        child = fork(h.agent.ctx.assembly)
        assert child.tools.specs() == h.tools.specs()
        parent_todo = h.agent.ctx.assembly.find(TodoComponent)
        child_todo = child.find(TodoComponent)
        assert parent_todo is not None and child_todo is not None and parent_todo.todo is not child_todo.todo
        assert h.todo is not None and not h.todo.items  # the child's list is its own
    child_req = backend.requests[1]
    assert child_req.messages[0] == backend.requests[0].messages[0] and child_req.tools == backend.requests[0].tools
    # the child has a status bar of its own now: its request ends with an <agent_status> message
    assert "<agent_status>" in (child_req.messages[-1].content or "")


@pytest.mark.slow
def test_context_drives_the_openai_client_against_llama_cpp_server(tmp_path: Path) -> None:
    """The README's loop against llama-cpp-python's own server: every request the SDK sent
    (recorded off the wire) only appends to the last, and the tools array never changes."""
    import httpx

    from llamaserver import LlamaServer

    bodies: list[Any] = []

    def keep(request: httpx.Request) -> None:
        bodies.append(json.loads(request.content))

    with LlamaServer(tmp_path / "server.log") as srv:
        client = OpenAI(base_url=srv.url, api_key="x", http_client=httpx.Client(event_hooks={"request": [keep]}))
        with Context(system="You add numbers.", tools=[add], db=tmp_path / "a.db", max_tool_rounds=2) as ctx:
            step = _drive(ctx, client, "What is 2 + 3? Use the add tool.")
            sid = ctx.session_id
            assert ctx.audit().requests == len(bodies)
        with Context.resume(sid, tools=[add], db=tmp_path / "a.db", max_tool_rounds=2) as ctx2:
            _drive(ctx2, client, "And 4 + 4?")
        log = srv.tail()
    assert step is not None, log
    assert len(bodies) >= 2
    assert len({json.dumps(b["tools"], sort_keys=True) for b in bodies}) == 1
    for old, new in itertools.pairwise(bodies):
        assert _is_prefix(old["messages"], new["messages"]), log
    # the server answers an assistant turn with "content": null with HTTP 500: none is sent
    assert all(m.get("content") is not None for b in bodies for m in b["messages"])


def _reply(content: str | None = None, calls: list[tuple[str, str, str]] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in calls
        ]
    return {"choices": [{"message": message, "finish_reason": "tool_calls" if calls else "stop"}]}


class _Broken:
    def model_dump(self, mode: str = "python") -> Any:
        raise RuntimeError("half a response")


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ([1, 2], "model's reply"),
        ({"choices": []}, "no non-empty `choices`"),
        ({"choices": [{"message": "text"}]}, "no `message` object"),
        ({"choices": [{"message": {"role": "assistant", "tool_calls": [{"function": 5}]}}]}, "cannot read"),
        (_Broken(), "model_dump"),
    ],
)
def test_a_reply_that_cannot_be_read_is_one_clear_error_and_loses_nothing(reply: Any, message: str) -> None:
    with Context(system="s", tools=[add]) as ctx:
        ctx.add_user("hi")
        ctx.request()
        before = list(ctx.session.events)
        with pytest.raises(CtxwrightError, match=message) as err:
            ctx.record(reply)
        assert "\n" not in str(err.value)
        assert ctx.session.events == before  # nothing recorded, nothing lost
        step = ctx.record(_reply("fine"))  # the request still waits for its reply
        assert step.text == "fine"


def test_tool_calls_run_once_in_order_and_are_answered_before_the_next_request() -> None:
    with Context(system="s", tools=[add]) as ctx:
        ctx.add_user("2 + 3?")
        ctx.request()
        step = ctx.record(_reply(None, [("c1", "add", '{"a": 2, "b": 3}'), ("c1", "nope", "{not json")]))
        assert len({tc.id for tc in step.tool_calls}) == 2  # a duplicate id is made unique
        with pytest.raises(CtxwrightError, match="not answered yet"):
            ctx.request()
        events = ctx.run_tools(step)
        assert events[0].message.content == "5" and not events[1].ok  # unknown tool: an error result
        with pytest.raises(CtxwrightError, match="cannot be run now"):
            ctx.run_tools(step)  # twice would record two results for one call
        ctx.request()
        step2 = ctx.record(_reply(None, [("c9", "add", '{"a": 1, "b": 1}')]))
        ctx.add_user("never mind")  # the unanswered call is answered as interrupted, as after a crash
        body = ctx.request()
        tool_ids = [m["tool_call_id"] for m in body["messages"] if m["role"] == "tool"]
        assert step2.tool_calls[0].id in tool_ids
        with pytest.raises(CtxwrightError, match="cannot be run now"):
            ctx.run_tools(step2)


def test_a_huge_reply_is_recorded_and_the_next_request_is_bounded_by_compaction() -> None:
    with Context(system="s", tools=[add], window=8192) as ctx:
        ctx.add_user("go")
        ctx.request()
        ctx.run_tools(ctx.record(_reply(None, [("c1", "add", '{"a": 1, "b": 2}')])))
        ctx.request()
        ctx.record(_reply("x" * 3_000_000))  # a 3 MB answer: recorded whole
        ctx.add_user("and now?")
        with pytest.raises(CtxwrightError, match="window"):  # it cannot be sent in an 8K window: said, not sent
            ctx.request()
        assert ctx.session.events[-1].message.content.endswith("and now?")  # type: ignore[union-attr]


def test_the_context_takes_the_harness_options_and_says_so() -> None:
    import inspect

    from ctxwright.recipe import harness_parameters

    ctx_params = inspect.signature(Context).parameters
    assert {p.name for p in harness_parameters()} == set(ctx_params)  # one declaration for both
    assert set(ctx_params) == set(inspect.signature(Harness).parameters)
    assert "max_tool_rounds:" in (Context.__doc__ or "") and "max_tool_rounds:" in (Harness.__doc__ or "")
