"""Deferred tools: search_tools and call_tool in a fixed prefix, the tools array never changes.

Real parts: the harness, the agent loop, the SQLite store, the audit; the scripted backend
plays the model so every path (search, call, each bad input) is taken exactly.
"""

from __future__ import annotations

import json
import time

import pytest

from ctxwright import Harness, tool
from ctxwright.agent.assemble import fork
from ctxwright.backends.scripted import ScriptedBackend
from ctxwright.cli.main import main
from ctxwright.core.events import ToolEvent
from ctxwright.core.messages import Message, ToolCall
from ctxwright.core.tokens import TokenCounter
from ctxwright.errors import ConfigError, PrefixMismatch
from ctxwright.tools.deferred import (
    CALL_TOOL,
    SEARCH_TOOL,
    DeferConfig,
    DeferredTools,
    choose_deferred,
    schema_tokens,
)
from ctxwright.tools.registry import Tool, ToolRegistry

DOMAINS = ["weather", "invoice", "calendar", "email", "currency", "flight", "hotel", "stock", "recipe", "translate"]


def catalog(n: int) -> list[Tool]:
    """``n`` tools over ten domains, each with a distinct name and a real schema."""
    out = []
    for i in range(n):
        domain = DOMAINS[i % len(DOMAINS)]

        def fn(query: str, count: int = 1, _d: str = domain) -> str:
            """Placeholder."""
            return f"{_d}:{query}:{count}"

        out.append(
            Tool.from_function(
                fn,
                name=f"{domain}_lookup_{i}",
                description=f"Look up {domain} records matching a query (variant {i}).",
            )
        )
    return out


def reply(name: str, arguments: object) -> Message:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return Message(
        role="assistant", content="", tool_calls=(ToolCall(id=f"c{time.perf_counter_ns()}", name=name, arguments=args),)
    )


def harness(tools: list[Tool], replies: list[Message | str], **kw: object) -> tuple[Harness, ScriptedBackend]:
    be = ScriptedBackend([*replies, "done"])
    kw.setdefault("max_tool_rounds", 50)
    for option in ("status", "todo", "delegate", "read_result", "recall"):  # the user's tools only
        kw.setdefault(option, False)
    h = Harness("You use tools.", tools, backend=be, **kw)  # type: ignore[arg-type]
    return h, be


def results(h: Harness) -> list[ToolEvent]:
    return [ev for ev in h.session.events if isinstance(ev, ToolEvent)]


def body(ev: ToolEvent) -> dict:
    return json.loads(ev.message.content or "")


# --------------------------------------------------------------------------- the decision


def test_tool_decorator_and_registry_keep_deferred_tools_out_of_the_array():
    @tool(deferred=True)
    def hidden(x: int) -> int:
        """Hidden tool."""
        return x

    @tool
    def shown(x: int) -> int:
        """Shown tool."""
        return x

    assert hidden.deferred is True and shown.deferred is None
    assert hidden.source.endswith(
        ":test_tool_decorator_and_registry_keep_deferred_tools_out_of_the_array.<locals>.hidden"
    )
    reg = ToolRegistry([shown, hidden])
    reg.defer(["hidden"])
    assert [s.name for s in reg.specs()] == ["shown"]
    assert [s.name for s in reg.all_specs()] == ["shown", "hidden"]
    assert [t.name for t in reg.deferred()] == ["hidden"]
    with pytest.raises(KeyError, match="no tool named 'ghost'"):
        reg.defer(["ghost"])


def test_auto_defers_by_count_and_by_share_of_the_window_never_core_tools():
    counter = TokenCounter()
    core = Tool.from_function(lambda: "x", name="core_tool", description="Core.", deferred=False)
    thirty = [core, *catalog(29)]
    assert choose_deferred(thirty, DeferConfig(), counter, 1_000_000) == ()  # 30 tools: not more than 30
    chosen = choose_deferred([*thirty, *catalog(31)[30:]], DeferConfig(), counter, 1_000_000)
    assert "core_tool" not in chosen and len(chosen) == 30
    few = [core, *catalog(3)]
    tokens = schema_tokens((t.spec for t in few), counter)
    assert choose_deferred(few, DeferConfig(), counter, tokens * 10 + 10) == ()  # under 10% of the window
    assert len(choose_deferred(few, DeferConfig(), counter, tokens * 10 - 10)) == 3  # over it
    assert len(choose_deferred(few, DeferConfig(max_share=0.5), counter, tokens * 10 - 10)) == 0
    marked = Tool.from_function(lambda: "y", name="marked", description="Marked.", deferred=True)
    assert choose_deferred([core, marked], DeferConfig(), counter, 1_000_000) == ("marked",)
    assert choose_deferred([core, marked, *catalog(2)], DeferConfig(mode="all"), counter, 10**6)[0] == "marked"
    assert choose_deferred([core, marked], DeferConfig(mode="none"), counter, 1) == ("marked",)
    assert choose_deferred([core, *catalog(40)], DeferConfig(mode="none"), counter, 1) == ()


def test_defer_config_refuses_bad_values():
    assert DeferConfig.of(True).mode == "all" and DeferConfig.of(False).mode == "none"
    assert DeferConfig.of(None, "prefix", {"mode": "all", "future_field": 1}).index == "prefix"
    for bad in ("sometimes", 3, {"mode": "auto", "ratio": 2}):
        with pytest.raises(ValueError, match="defer_tools"):
            DeferConfig.of(bad)
    with pytest.raises(ValueError, match="max_share"):
        DeferConfig(max_share=0)
    with pytest.raises(ConfigError, match="--defer-tools"):
        Harness("s", catalog(2), backend=ScriptedBackend(["x"]), defer_tools="sometimes")
    with pytest.raises(ConfigError, match="tool_index"):
        Harness("s", catalog(2), backend=ScriptedBackend(["x"]), tool_index="suffix")


def test_duplicate_names_across_sources_are_refused_naming_both():
    def rewrite_todo_list(items: list[str]) -> str:
        """My own TODO tool."""
        return "x"

    with pytest.raises(ConfigError) as err:
        Harness("s", [rewrite_todo_list], backend=ScriptedBackend(["x"]), todo=True)
    text = str(err.value)
    assert "the TODO tools (todo=)" in text and "test_deferred:" in text and "rewrite_todo_list" in text

    def search_tools(q: str) -> str:
        """Mine."""
        return q

    with pytest.raises(ConfigError, match=r"search_tools.*ctxwright tool search"):
        Harness("s", [search_tools, *catalog(40)], backend=ScriptedBackend(["x"]))


# --------------------------------------------------------------------------- a session


def test_search_then_call_keeps_the_tools_array_byte_identical_and_resume_rebuilds_it(tmp_path):
    tools = catalog(100)
    replies = [
        reply(SEARCH_TOOL, {"query": "currency records", "limit": 3}),
        reply(CALL_TOOL, {"name": "currency_lookup_4", "arguments": {"query": "EUR", "count": 2}}),
        reply(SEARCH_TOOL, {"query": "hotel"}),
        reply(CALL_TOOL, {"name": "hotel_lookup_6", "arguments": {"query": "Oslo"}}),
    ]
    h, be = harness(tools, replies, db=tmp_path / "s.db")
    sha = h.session.prefix.sha256
    names = [t.name for t in h.session.prefix.tools]
    assert names == [SEARCH_TOOL, CALL_TOOL]  # 100 tools > 30: every user tool deferred
    result = h.run("Convert EUR then find a hotel in Oslo.")
    assert result.stop_reason == "final_answer"
    wires = {json.dumps([t.to_wire() for t in r.tools]) for r in be.requests}
    assert len(wires) == 1 and len(be.requests) == 5
    assert h.session.prefix.sha256 == sha
    evs = results(h)
    found = body(evs[0])["tools"]
    assert found[0]["function"]["name"].startswith("currency_lookup")
    assert found[0]["function"]["parameters"]["required"] == ["query"]  # the full schema
    assert evs[1].message.content == "currency:EUR:2" and evs[3].message.content == "hotel:Oslo:1"
    # the audit: every call after the first is a pure append, none a prefix break
    causes = [c.cause for c in result.calls]
    assert causes[0] == "first" and set(causes[1:]) == {"append"}
    # the search result is a tool result in the ledger of the next call
    assert result.calls[1].ledger.tool_results >= TokenCounter().count(evs[0].message.content or "") // 2
    sid = h.session_id
    h.close()
    be2 = ScriptedBackend([reply(CALL_TOOL, {"name": "hotel_lookup_16", "arguments": {"query": "Rome"}}), "ok"])
    with Harness.resume(sid, tools, backend=be2, db=tmp_path / "s.db") as h2:
        assert h2.session.prefix.sha256 == sha
        assert h2.tools.specs() == h2.session.prefix.tools
        r2 = h2.run("And Rome?")
        assert r2.stop_reason == "final_answer"
        assert {c.cause for c in r2.calls} == {"append"}
        assert json.dumps([t.to_wire() for t in be2.requests[0].tools]) in wires
        assert results(h2)[-1].message.content == "hotel:Rome:1"
    with pytest.raises(PrefixMismatch, match="search_tools"):
        Harness.resume(sid, tools, backend=ScriptedBackend(["x"]), db=tmp_path / "s.db", defer_tools="none")


def test_a_session_without_deferral_is_resumed_without_it(tmp_path):
    tools = catalog(3)
    h, _ = harness(tools, [], db=tmp_path / "s.db", defer_tools="none", status=False)
    sid, sha = h.session_id, h.session.prefix.sha256
    h.run("hi")
    h.close()
    with Harness.resume(sid, tools, backend=ScriptedBackend(["ok"]), db=tmp_path / "s.db") as h2:
        assert h2.session.prefix.sha256 == sha and h2.deferred is None


def test_call_tool_bad_input_becomes_tool_errors_the_model_can_read():
    tools = catalog(40)
    bad = [
        ("not json", '{"name": "weather_lookup_0", "arguments": '),
        ("array outer", [1, 2]),
        ("string arguments", {"name": "weather_lookup_0", "arguments": '{"query": "x"}'}),
        ("array arguments", {"name": "weather_lookup_0", "arguments": ["x"]}),
        ("wrong type", {"name": "weather_lookup_0", "arguments": {"query": 3}}),
        ("missing", {"name": "weather_lookup_0", "arguments": {"count": 2}}),
        ("extra field", {"name": "weather_lookup_0", "arguments": {"query": "x", "color": "red"}}),
        ("unknown", {"name": "weathr_lookup_0", "arguments": {}}),
        ("no name", {"arguments": {}}),
        ("dispatcher", {"name": SEARCH_TOOL, "arguments": {"query": "x"}}),
        ("outer extra", {"name": "weather_lookup_0", "arguments": {"query": "x"}, "why": 1}),
    ]
    h, _ = harness(tools, [reply(CALL_TOOL, a) for _, a in bad], status=False, max_repeats=0)
    h.run("go")
    evs = results(h)
    assert len(evs) == len(bad) and not any(ev.ok for ev in evs)
    errs = {label: body(ev)["error"] for (label, _), ev in zip(bad, evs, strict=True)}
    assert errs["not json"]["type"] == "invalid_arguments_json"
    assert "JSON object" in errs["array outer"]["message"]
    assert (
        "must be a JSON object" in errs["string arguments"]["message"]
        and "a string" in errs["string arguments"]["message"]
    )
    assert "not an array" in errs["array arguments"]["message"]
    assert "3 is not of type 'string' at query" in errs["wrong type"]["message"]
    assert "'query' is a required property" in errs["missing"]["message"]
    assert "'color' was unexpected" in errs["extra field"]["message"]
    assert "city" not in errs["wrong type"]["hint"] and "query (string, required)" in errs["wrong type"]["hint"]
    unknown = errs["unknown"]
    assert unknown["type"] == "unknown_tool" and "Search first" in unknown["hint"]
    assert "weather_lookup_0" in unknown["hint"].split("Closest names:")[1]
    assert "name must be" in errs["no name"]["message"]
    assert "called directly" in errs["dispatcher"]["message"]
    assert "why" in errs["outer extra"]["message"]


def test_search_tools_bad_queries_are_tool_errors():
    tools = catalog(40)
    queries = [{"query": ""}, {"query": "   "}, {"query": "x" * 10_000}, {"query": "weather", "limit": 0}]
    h, _ = harness(tools, [reply(SEARCH_TOOL, q) for q in queries], status=False, max_repeats=0)
    h.run("go")
    errs = [body(ev)["error"]["message"] for ev in results(h)]
    assert "the search query is empty" in errs[0] and "the search query is empty" in errs[1]
    assert "the search query is 10,000 characters; the limit is 1,000" in errs[2]
    assert "limit must be a whole number of at least 1, got 0" in errs[3]
    assert {body(ev)["error"]["type"] for ev in results(h)} == {"ToolSearchError"}


def test_a_deferred_tool_keeps_its_timeout_and_the_result_budget():
    @tool(timeout_s=0.3, deferred=True)
    def slow_report(query: str) -> str:
        """Build a slow report."""
        time.sleep(3)
        return "late"

    @tool(deferred=True)
    def huge_dump(query: str) -> str:
        """Dump a huge log."""
        return "line of the log\n" * 20_000

    replies = [
        reply(CALL_TOOL, {"name": "slow_report", "arguments": {"query": "q"}}),
        reply(CALL_TOOL, {"name": "huge_dump", "arguments": {"query": "q"}}),
    ]
    h, _ = harness([slow_report, huge_dump], replies, status=False, compaction=False, tool_timeout=30)
    assert [t.name for t in h.session.prefix.tools] == [SEARCH_TOOL, CALL_TOOL]  # marked: deferred under auto
    t0 = time.perf_counter()
    h.run("go")
    assert time.perf_counter() - t0 < 2.5  # the deferred tool's 0.3 s, not the default 30 s
    slow, huge = results(h)
    assert body(slow)["error"]["type"] == "timeout" and "0.3 s" in body(slow)["error"]["message"]
    assert "characters omitted" in (huge.message.content or "")
    assert len(huge.message.content or "") < 210_000


def test_tool_index_prefix_lists_deferred_tools_in_the_frozen_description(tmp_path):
    tools = catalog(5)
    h, _ = harness(tools, [], defer_tools="all", tool_index="prefix", db=tmp_path / "s.db", status=False)
    desc = h.session.prefix.tools[-2].description
    assert h.session.prefix.tools[-2].name == SEARCH_TOOL
    assert "[weather_lookup_0: Look up weather records matching a query (variant 0).]" in desc
    assert desc.count("\n[") == 5
    sid, sha = h.session_id, h.session.prefix.sha256
    h.close()
    with Harness.resume(sid, tools, backend=ScriptedBackend(["x"]), db=tmp_path / "s.db") as h2:
        assert h2.session.prefix.sha256 == sha
        assert h2.session.meta["harness"]["deferral"]["defer_tools"]["index"] == "prefix"


def test_tools_added_later_become_searchable_without_touching_the_array():
    reg = ToolRegistry(catalog(3))
    reg.defer(["weather_lookup_0"])
    dt = DeferredTools(reg)
    for t in dt.tools():
        reg.register(t)
    before = reg.specs()

    def ferry(city: str) -> str:
        """Placeholder."""
        return city

    new = Tool.from_function(ferry, name="ferry_times", description="Ferry departure times for a harbour.")
    dt.add([new])
    assert reg.specs() == before
    assert dt.search("ferry harbour", 3)["tools"][0]["function"]["name"] == "ferry_times"
    out = reg.execute(
        ToolCall(id="1", name=CALL_TOOL, arguments='{"name": "ferry_times", "arguments": {"city": "Bergen"}}')
    )
    assert out.ok and out.content == "Bergen"
    dt.remove(["ferry_times"])
    gone = reg.execute(ToolCall(id="2", name=CALL_TOOL, arguments='{"name": "ferry_times", "arguments": {}}'))
    assert not gone.ok and "Search first" in str(gone.content)
    assert dt.search("ferry harbour", 3)["tools"] == [] or all(
        t["function"]["name"] != "ferry_times" for t in dt.search("ferry harbour", 3)["tools"]
    )
    with pytest.raises(ValueError, match="already registered"):
        dt.add([catalog(1)[0]])


# --------------------------------------------------------------------------- the CLI


def test_tools_list_shows_prefix_and_deferred_with_tokens(tmp_path, monkeypatch, capsys):
    (tmp_path / "cattools.py").write_text(
        "from ctxwright import tool\n\n"
        "@tool(deferred=True)\n"
        "def convert_currency(amount: float, to: str) -> str:\n"
        '    """Convert euros to another currency."""\n'
        "    return str(amount)\n\n"
        "def add(a: int, b: int) -> int:\n"
        '    """Add two integers."""\n'
        "    return a + b\n"
    )
    monkeypatch.chdir(tmp_path)
    base = ["tools", "list", "--backend", "openai", "--model", "m", "--base-url", "http://127.0.0.1:9/v1"]
    tools = ["--tool", "cattools:add", "--tool", "cattools:convert_currency"]
    assert main([*base, *tools, "--no-todo", "--no-delegate", "--no-read-result", "--no-recall", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    where = {r["name"]: r["where"] for r in rep["tools"]}
    assert where == {"add": "prefix", "convert_currency": "deferred", SEARCH_TOOL: "prefix", CALL_TOOL: "prefix"}
    assert rep["deferred_tools"] == 1 and rep["deferred_tool_tokens"] > 10
    assert rep["prefix_tool_tokens"] == sum(r["tokens"] for r in rep["tools"] if r["where"] == "prefix") or (
        rep["prefix_tool_tokens"] > 0
    )
    assert main([*base, "--tool", "cattools:add", "--defer-tools", "none"]) == 0
    out = capsys.readouterr().out
    assert "add" in out and "deferred (found with search_tools): 0 tool(s)" in out
    assert "search_tools" not in out.split("tools array")[0]
    assert main([*base, *tools, "--defer-tools", "none"]) == 0  # a tool marked deferred stays deferred
    assert "deferred (found with search_tools): 1 tool(s)" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main([*base, "--defer-tools", "sometimes"])
    assert "invalid choice" in capsys.readouterr().err


def test_a_dotted_catalog_name_must_be_deferred_to_be_used():
    def fn(query: str, count: int = 1, _d: str = "") -> str:  # the catalog tool's signature
        """Placeholder."""
        return query

    dotted = Tool(**{**catalog(1)[0].__dict__, "name": "github.issues.create", "func": fn})
    with pytest.raises(ConfigError, match=r"'github\.issues\.create' cannot be in the request's tools array"):
        Harness("s", [dotted], backend=ScriptedBackend(["x"]), defer_tools="none")
    replies = [reply(CALL_TOOL, {"name": "github.issues.create", "arguments": {"query": "x"}})]
    h, _ = harness([dotted], replies, defer_tools="all")
    h.run("go")
    assert results(h)[0].ok


def test_call_tool_with_a_name_of_punctuation_or_10000_characters_is_an_unknown_tool():
    names = ["...", "x" * 10_000]
    h, _ = harness(catalog(40), [reply(CALL_TOOL, {"name": n, "arguments": {}}) for n in names])
    h.run("go")
    errs = [body(ev)["error"] for ev in results(h)]
    assert [e["type"] for e in errs] == ["unknown_tool", "unknown_tool"]
    assert all("Search first" in e["hint"] for e in errs)


@pytest.mark.slow
def test_the_embedded_model_sees_only_the_two_fixed_tools_and_its_calls_are_answered():
    """The real 135M model with deferred tools: whatever it writes (a search, a call_tool, a
    malformed call), every call gets a tool result and the tools array never changes."""
    seen: list[str] = []
    with Harness(
        "You find tools with search_tools, then run them with call_tool.",
        catalog(12),
        backend="embedded",
        defer_tools="all",
        max_tokens=48,
        max_tool_rounds=1,
        max_iterations=2,
        status=False,
        on_event=lambda event: seen.append(event.kind),
    ) as h:
        sha = h.session.prefix.sha256
        assert [t.name for t in h.session.prefix.tools] == [SEARCH_TOOL, CALL_TOOL]
        result = h.run("Look up the weather records for Oslo.")
        assert result.stop_reason in ("final_answer", "max_iterations")
        assert h.session.prefix.sha256 == sha
        calls = [tc for ev in h.session.events if hasattr(ev, "message") for tc in ev.message.tool_calls]
        assert {tc.name for tc in calls} <= {SEARCH_TOOL, CALL_TOOL}
        assert len(results(h)) == len(calls)
        assert {c.cause for c in result.calls[1:]} <= {"append"}


def test_a_sub_agent_shares_the_deferred_tools_and_the_tools_array():
    child_calls = [
        reply(SEARCH_TOOL, {"query": "hotel"}),
        reply(CALL_TOOL, {"name": "hotel_lookup_6", "arguments": {"query": "Oslo"}}),
        "the child is done",
    ]
    parent = [reply("delegate", {"task": "find a hotel in Oslo"}), *child_calls, "parent done"]
    h, be = harness(catalog(40), parent, delegate=True)
    h.run("go")
    assert len({json.dumps([t.to_wire() for t in r.tools]) for r in be.requests}) == 1
    assert h.delegator is not None and h.delegator.children
    assert h.agent.ctx.assembly is not None
    child = fork(h.agent.ctx.assembly).tools  # what the sub-agent was built with
    assert [t.name for t in child.specs()] == [t.name for t in h.tools.specs()] and len(child.deferred()) == 40
    delegated = body(results(h)[0]) if results(h)[0].message.content.startswith("{") else results(h)[0].message.content
    assert "the child is done" in str(delegated)
