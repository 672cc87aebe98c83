"""The providers' own compaction (``compaction/provider.py``), through the official ``anthropic``
and ``openai`` SDKs against the simulators: the documented options sent, what came back recorded
as events, the opaque item sent back byte-identical (a resume too), the documented bad shapes
refused, and the score (kept and lost per identifier).

The simulated model reads its context perfectly (``read_answer``): a probe it cannot answer is
a fact the compaction took from its view. That is the simulators' documented behaviour, not a
hosted model's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from ctxwright import Harness, tool
from ctxwright.backends.anthropic import AnthropicBackend
from ctxwright.backends.openai_responses import ResponsesBackend
from ctxwright.backends.scripted import ScriptedBackend
from ctxwright.compaction.config import CompactionConfig
from ctxwright.compaction.provider import (
    ANTHROPIC_COMPACT_BETA,
    ANTHROPIC_EDITS_BETA,
    configure,
    declared_items,
    item_bytes,
    probe_question,
    read_answer,
    score_probed,
    visible_text,
)
from ctxwright.core.events import ProviderCompactionEvent
from ctxwright.core.messages import Message
from ctxwright.core.request import ChatRequest
from ctxwright.errors import ConfigError
from providers.anthropic_sim import CLEARED, AnthropicSim
from providers.responses_sim import ResponsesSim, call, text

MODEL = "claude-sonnet-4-6"
SYSTEM = "You are a careful records clerk. Look records up one at a time."
FILLER = "routine line of the record with nothing to keep\n"


def record(n: int, lines: int) -> str:
    """Record ``n``: its ticket on the first line (a summary that keeps first lines keeps it),
    its commit hash on the last (one that keeps first lines loses it)."""
    return (
        f"record {n} ticket REC-{4100 + n} is open\n"
        + FILLER * lines
        + f"record {n} fixed in commit {n:02d}c0ffee{n:02d}\n"
    )


def harness_lookup(lines: int) -> Any:
    @tool
    def lookup(n: int) -> str:
        """Look up record n."""
        return record(n, lines)

    return lookup


def probe_answer(body: dict[str, Any]) -> str | None:
    """The answer to a probe in the last user message (beside the status bar, if any)."""
    last = body["messages"][-1]
    if last["role"] != "user" or not isinstance(last["content"], list):
        return None
    context = visible_text(body)
    for b in last["content"]:
        if b.get("type") == "text" and (answer := read_answer(str(b["text"]), context)) is not None:
            return answer
    return None


def anthropic_loop(ref: list[AnthropicSim], calls: int) -> Any:
    """Calls 1..calls-1 look a record up, the next answers; a probe is answered from what the
    model reads (the body after context management)."""

    def respond(body: dict[str, Any]) -> list[dict[str, Any]]:
        answer = probe_answer(body)
        if answer is not None:
            return [{"type": "text", "text": answer}]
        k = len(ref[0].seen)
        if k < calls:
            return [{"type": "tool_use", "name": "lookup", "input": {"n": k}}]
        return [{"type": "text", "text": "All records read."}]

    return respond


def provider_events(h: Harness) -> list[ProviderCompactionEvent]:
    return [e for e in h.context.session.events if isinstance(e, ProviderCompactionEvent)]


def anthropic_client(sim: AnthropicSim) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=sim.url, api_key="test", max_retries=0)


# -- Anthropic: context editing ----------------------------------------------------------------


def test_anthropic_clearing_is_sent_applied_recorded_and_scored(tmp_path: Any) -> None:
    ref: list[AnthropicSim] = []
    with AnthropicSim(respond=anthropic_loop(ref, 8)) as sim:
        ref.append(sim)
        comp = {
            "provider": "clear",
            "provider_trigger_tokens": 1500,
            "provider_keep_tool_uses": 2,
            "keep": ["task", r"REC-\d+"],  # the survival contract, scored on the provider's clearing too
        }
        with Harness(
            backend="anthropic",
            base_url=sim.url,
            model=MODEL,
            system=SYSTEM,
            tools=[harness_lookup(12)],
            compaction=comp,
            db=tmp_path / "ctx.db",
            max_iterations=20,
        ) as h:
            result = h.run("Read records 1 to 7.")
            events = provider_events(h)
    assert result.final_answer == "All records read."
    edits = {
        "edits": [
            {
                "type": "clear_tool_uses_20250919",
                "trigger": {"type": "input_tokens", "value": 1500},
                "keep": {"type": "tool_uses", "value": 2},
            }
        ]
    }
    assert all(r["context_management"] == edits for r in sim.requests)
    assert all(ANTHROPIC_EDITS_BETA in hd["anthropic-beta"].split(",") for hd in sim.headers)
    applied = [r["context_management"]["applied_edits"] for r in sim.responses]
    cleared = [a[0]["cleared_tool_uses"] for a in applied if a and a[0]["cleared_tool_uses"]]
    assert cleared, "the trigger was reached: results were cleared"
    # the client keeps its history whole; what the model read had the old results cleared
    last_sent, last_seen = sim.requests[-1], sim.seen[-1]
    assert CLEARED not in json.dumps(last_sent) and "REC-4101" in json.dumps(last_sent)
    assert CLEARED in json.dumps(last_seen) and "REC-4101" not in visible_text(last_seen)
    # one event per applied edit that cleared something, with the server's counts
    by_call = [e for e in events if e.edit == "clear_tool_uses_20250919"]
    assert [e.cleared for e in by_call if e.cleared] == cleared
    assert all(e.cleared_tokens is not None for e in by_call)
    scored = next(e.score for e in reversed(by_call) if e.cleared)
    assert scored is not None
    lost = {i["value"] for i in scored["items"] if i["how"] == "lost"}
    assert {"REC-4101", "01c0ffee01"} <= lost  # record 1 was cleared and appears nowhere else
    assert scored["kept"] + scored["lost"] == len(scored["items"])
    survival = {(i["kind"], i["text"]): i["how"] for i in scored["survival"]["items"]}
    assert survival[("REC-\\d+", "REC-4101")] == "lost"
    assert survival[("task", "Read records 1 to 7.")] == "visible"  # checked on every compaction, as ours
    # ``show --compactions`` lists each applied edit with its counts and score (text and --json)
    import contextlib
    import io

    from rich.console import Console

    from ctxwright.cli.show import render_compactions
    from ctxwright.store.sessions import Store

    store = Store(tmp_path / "ctx.db")
    try:
        out, buf = io.StringIO(), io.StringIO()
        render_compactions(store, h.session_id, Console(file=out, width=240))
        with contextlib.redirect_stdout(buf):
            render_compactions(store, h.session_id, Console(file=io.StringIO()), as_json=True)
    finally:
        store.close()
    first = next(e for e in by_call if e.cleared)
    assert f"provider compaction #{first.seq} anthropic clear_tool_uses_20250919" in out.getvalue()
    assert f"cleared {first.cleared}" in out.getvalue() and "lost" in out.getvalue()
    listed = json.loads(buf.getvalue())["provider_compactions"]
    assert [p["cleared"] for p in listed if p["cleared"]] == cleared
    assert all(not p["opaque_item"] for p in listed)


def test_the_anthropic_simulator_refuses_the_documented_bad_shapes() -> None:
    with AnthropicSim() as sim, anthropic_client(sim) as client:
        base: dict[str, Any] = {"model": MODEL, "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
        clear = {"type": "clear_tool_uses_20250919"}
        cases: list[tuple[list[str], dict[str, Any], str]] = [
            ([], {"edits": [clear]}, "requires the beta header 'context-management-2025-06-27'"),
            ([ANTHROPIC_EDITS_BETA], {"edits": [{"type": "clear_everything_2099"}]}, "does not match any"),
            (
                [ANTHROPIC_EDITS_BETA],
                {"edits": [clear, {"type": "clear_thinking_20251015", "keep": "all"}]},
                "must be the first edit",
            ),
            (
                [ANTHROPIC_COMPACT_BETA],
                {"edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 1000}}]},
                "at least 50000",
            ),
            ([ANTHROPIC_EDITS_BETA], {"edits": [{**clear, "keep": {"type": "input_tokens", "value": 2}}]}, "keep"),
        ]
        for betas, cm, said in cases:
            with pytest.raises(anthropic.BadRequestError) as info:
                client.beta.messages.create(**base, betas=betas, context_management=cm)  # type: ignore[arg-type]
            assert said in str(info.value), (cm, str(info.value))
        ok = client.beta.messages.create(**base, betas=[ANTHROPIC_EDITS_BETA], context_management={"edits": [clear]})
        assert ok.context_management is not None and ok.context_management.applied_edits == []  # under the trigger


# -- Anthropic: server-side compaction ---------------------------------------------------------


def test_anthropic_compaction_round_trips_byte_identical_through_a_resume(tmp_path: Any) -> None:
    db = tmp_path / "ctx.db"
    ref: list[AnthropicSim] = []
    comp = {"enabled": False, "provider": "compact", "provider_trigger_tokens": 50_000}
    with AnthropicSim(respond=anthropic_loop(ref, 10)) as sim:
        ref.append(sim)
        with Harness(
            backend="anthropic",
            base_url=sim.url,
            model=MODEL,
            system=SYSTEM,
            tools=[harness_lookup(500)],
            compaction=comp,
            db=db,
            max_iterations=20,
        ) as h:
            h.run("Read records 1 to 9.")
            sid = h.session_id
            events = provider_events(h)
        made = [(k, r["content"][0]) for k, r in enumerate(sim.responses) if r["content"][0]["type"] == "compaction"]
        assert made, "the prompt passed 50,000 tokens: the server compacted"
        k, block = made[0]
        assert sim.responses[k]["usage"]["iterations"][0]["type"] == "compaction"
        assert ANTHROPIC_COMPACT_BETA in sim.headers[k]["anthropic-beta"].split(",")
        assert sim.requests[k]["context_management"] == {
            "edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 50_000}}]
        }

        def sent_back(req: dict[str, Any]) -> list[str]:
            return [item_bytes(b) for m in req["messages"] for b in m["content"] if b.get("type") == "compaction"]

        assert sent_back(sim.requests[k + 1]) == [item_bytes(block)]  # the next request, as it came
        event = next(e for e in events if e.edit == "compaction")
        assert event.item is not None and item_bytes(event.item) == item_bytes(block)
        assert event.score is not None
        lost = {i["value"] for i in event.score["items"] if i["how"] == "lost"}
        kept = {i["value"] for i in event.score["items"] if i["how"] != "lost"}
        assert "REC-4101" in kept and "01c0ffee01" in lost  # the summary keeps first lines only
        with Harness.resume(sid, [harness_lookup(500)], db=db) as again:
            # the model reads the summary, not the records before it: asked, it has the ticket
            # (a first line) and not the commit (a last line)
            ticket = again.run(probe_question("REC-4101", record(1, 500)) or "")
            assert sent_back(sim.requests[-1])[0] == item_bytes(block)
            commit = again.run(probe_question("01c0ffee01", record(1, 500)) or "")
        assert "REC-4101" in (ticket.final_answer or "")
        assert "01c0ffee01" not in (commit.final_answer or "")
        # a block changed on the way back is refused: its signature is the server's
        req = json.loads(json.dumps(sim.requests[-1]))
        for m in req["messages"]:
            for b in m["content"]:
                if b.get("type") == "compaction":
                    b["content"] += " (edited)"
        with (
            anthropic_client(sim) as client,
            pytest.raises(anthropic.BadRequestError, match="Invalid `signature` in `compaction`"),
        ):
            rest = {k2: v for k2, v in req.items() if k2 not in ("model", "max_tokens", "messages", "diagnostics")}
            client.beta.messages.create(
                model=req["model"],
                max_tokens=req["max_tokens"],
                messages=req["messages"],
                betas=[ANTHROPIC_COMPACT_BETA],
                extra_body=rest,
            )


# -- OpenAI Responses ----------------------------------------------------------------------------


def responses_loop(ref: list[ResponsesSim], calls: int) -> Any:
    def respond(body: dict[str, Any]) -> list[dict[str, Any]]:
        last = body["input"][-1]
        if last.get("type") == "message" and last.get("role") == "user":
            content = last["content"]
            question = content if isinstance(content, str) else " ".join(p.get("text", "") for p in content)
            answer = read_answer(question, visible_text(body))
            if answer is not None:
                return [text(answer)]
        k = len(ref[0].seen)
        if k < calls:
            return [call("lookup", {"n": k})]
        return [text("All records read.")]

    return respond


def test_responses_compaction_is_sent_kept_sent_back_resumed_and_probed(tmp_path: Any) -> None:
    db = tmp_path / "ctx.db"
    ref: list[ResponsesSim] = []
    comp = {"enabled": False, "provider": "compact", "provider_trigger_tokens": 1_500}
    with ResponsesSim(respond=responses_loop(ref, 8)) as sim:
        ref.append(sim)
        with Harness(
            backend="openai-responses",
            base_url=sim.url + "/v1",
            model="gpt-5.5",
            api_key="k",
            system=SYSTEM,
            tools=[harness_lookup(12)],
            compaction=comp,
            db=db,
            max_iterations=20,
        ) as h:
            result = h.run("Read records 1 to 7.")
            sid = h.session_id
            events = provider_events(h)
            assert isinstance(h.backend, ResponsesBackend)
            messages = list(h.context.session.messages())
        assert result.final_answer == "All records read."
        assert all(
            r["context_management"] == [{"type": "compaction", "compact_threshold": 1_500}] for r in sim.requests
        )
        made = [(k, r["output"][0]) for k, r in enumerate(sim.responses) if r["output"][0]["type"] == "compaction"]
        assert made
        k, item = made[0]
        nxt = sim.requests[k + 1]["input"]
        # the system message, then the compaction item as it came: what was before it is dropped
        assert nxt[0]["role"] == "system" and item_bytes(nxt[1]) == item_bytes(item)
        assert sum(1 for it in nxt if it.get("type") == "function_call_output") < k
        event = next(e for e in events if e.edit == "compaction")
        assert event.item is not None and item_bytes(event.item) == item_bytes(item)
        assert event.score is None  # encrypted: nothing to read, only to ask

        # the probes: one question per identifier of what the item replaced, asked of the model
        replaced = "\n".join(m.content or "" for m in messages[1 : 2 * k + 2] if m.role != "system")

        backend = ResponsesBackend("gpt-5.5", base_url=sim.url + "/v1", api_key="k", max_retries=0)

        def ask(question: str) -> str:
            request = ChatRequest(messages=(*messages, Message(role="user", content=question)))
            return backend.complete(request).message.content or ""

        hidden = range(1, 2 * k + 2)
        declared = declared_items(messages, hidden, [r"REC-\d+"])
        score = score_probed(replaced, [SYSTEM], ask, declared=declared)
        backend.close()
        kept, lost = set(score.kept), set(score.lost)
        assert [(p.value, p.how) for p in score.declared] == [("REC-4101", "answered")]  # the one record it replaced
        assert "REC-4101" in kept and "01c0ffee01" in lost  # the summary kept first lines only
        assert all(it.get("type") != "compaction_summary" for r in sim.requests for it in r["input"])

        with Harness(resume=sid, db=db, base_url=sim.url + "/v1", api_key="k", tools=[harness_lookup(12)]) as again:
            again.run("Anything else?")
        assert any(item_bytes(it) == item_bytes(made[-1][1]) for it in sim.requests[-1]["input"])


@pytest.fixture
def oai(request: pytest.FixtureRequest) -> Iterator[tuple[ResponsesSim, openai.OpenAI]]:
    with ResponsesSim() as sim:
        client = openai.OpenAI(base_url=sim.url + "/v1", api_key="k", max_retries=0)
        yield sim, client
        client.close()


def test_the_responses_simulator_refuses_bad_shapes_and_a_tampered_item(
    oai: tuple[ResponsesSim, openai.OpenAI],
) -> None:
    sim, client = oai
    for cm, said in (
        ([{"type": "truncate"}], "only 'compaction'"),
        ([{"type": "compaction", "compact_threshold": 0}], "positive integer"),
        ([{"type": "compaction", "compact_threshold": 10, "keep": 2}], "Unknown parameter"),
    ):
        with pytest.raises(openai.BadRequestError, match=said):
            client.responses.create(model="gpt-5.5", input="hi", context_management=cm)  # type: ignore[arg-type]
    # the standalone endpoint, through the SDK's own method
    long_input: list[Any] = [
        {"role": "user", "content": "Remember ticket REC-4242."},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "And the host 10.0.0.7."},
    ]
    compacted = client.responses.compact(model="gpt-5.5", input=long_input)
    assert compacted.object == "response.compaction"
    assert [o.type for o in compacted.output] == ["message", "message", "compaction"]
    item = sim.responses[-1]["output"][-1]
    again = client.responses.create(model="gpt-5.5", input=[item, {"role": "user", "content": "go on"}], store=False)
    assert again.status == "completed"
    bad = dict(item, encrypted_content=item["encrypted_content"][:-2] + "00")
    with pytest.raises(openai.BadRequestError, match="could not be verified"):
        client.responses.create(model="gpt-5.5", input=[bad, {"role": "user", "content": "go on"}], store=False)


def test_the_responses_backend_calls_the_standalone_compaction() -> None:
    with ResponsesSim() as sim:
        b = ResponsesBackend("gpt-5.5", base_url=sim.url + "/v1", api_key="k", max_retries=0)
        msgs = (Message(role="system", content=SYSTEM), Message(role="user", content="Ticket REC-4300, please."))
        out = b.compact(ChatRequest(messages=msgs))
        b.close()
    assert out["output"][-1]["type"] == "compaction"
    assert sim.requests[-1]["input"][1]["content"][0]["text"] == "Ticket REC-4300, please."


# -- configuration ----------------------------------------------------------------------------


def test_provider_options_are_refused_where_the_provider_has_none() -> None:
    with pytest.raises(ConfigError, match="anthropic or openai-responses"):
        configure(ScriptedBackend(["ok"]), CompactionConfig(provider="compact"))
    responses = ResponsesBackend("gpt-5.5", base_url="http://127.0.0.1:9/v1", api_key="k")
    with pytest.raises(ConfigError, match="no context editing"):
        configure(responses, CompactionConfig(provider="clear"))
    claude = AnthropicBackend(MODEL, base_url="http://127.0.0.1:9", api_key="k")
    with pytest.raises(ConfigError, match="at least 50,000"):
        configure(claude, CompactionConfig(provider="compact", provider_trigger_tokens=10_000))
    with pytest.raises(ConfigError, match="not one of"):
        configure(claude, CompactionConfig(provider="summarise"))
    claude.thinking = {"type": "enabled", "budget_tokens": 2048}
    configure(claude, CompactionConfig(provider="clear"))
    assert claude.context_management is not None
    assert [e["type"] for e in claude.context_management["edits"]] == [
        "clear_thinking_20251015",
        "clear_tool_uses_20250919",
    ]
    assert claude.betas == (ANTHROPIC_EDITS_BETA,)
    responses.close()
    claude.close()


def test_compaction_provider_is_the_providers_defaults_and_ours_off(tmp_path: Any) -> None:
    with AnthropicSim() as sim:
        with Harness(
            backend="anthropic", base_url=sim.url, model=MODEL, system=SYSTEM, compaction="provider", db=tmp_path / "a"
        ) as h:
            h.run("Hello.")
            cfg = h.context.config.compaction
        assert cfg is not None and (cfg.enabled, cfg.provider) == (False, "compact")
        assert sim.requests[-1]["context_management"] == {
            "edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 150_000}}]
        }
        assert ANTHROPIC_COMPACT_BETA in sim.headers[-1]["anthropic-beta"].split(",")
    with pytest.raises(ConfigError, match="anthropic or openai-responses"):
        Harness(backend=ScriptedBackend(["ok"]), compaction="provider")


def test_a_streamed_compaction_block_is_kept_as_the_server_sent_it() -> None:
    with AnthropicSim() as sim:
        options = {"edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 50_000}}]}
        b = AnthropicBackend(
            MODEL,
            base_url=sim.url,
            api_key="k",
            stream=True,
            context_management=options,
            betas=(ANTHROPIC_COMPACT_BETA,),
        )
        long = record(1, 5_000)  # over 50,000 of the simulator's tokens
        done = b.complete(
            ChatRequest(messages=(Message(role="system", content=SYSTEM), Message(role="user", content=long)))
        )
        b.close()
    block = sim.responses[-1]["content"][0]
    assert block["type"] == "compaction"
    assert json.loads(done.message.reasoning_blocks or "[]") == [block]
    assert done.usage.raw["compactions"] == [block] and done.usage.raw["context_management"] == {"applied_edits": []}


def test_stripped_reasoning_still_sends_the_compaction_item_back(tmp_path: Any) -> None:
    ref: list[ResponsesSim] = []
    comp = {"enabled": False, "provider": "compact", "provider_trigger_tokens": 1_500}
    with ResponsesSim(respond=responses_loop(ref, 6)) as sim:
        ref.append(sim)
        with Harness(
            backend="openai-responses",
            base_url=sim.url + "/v1",
            model="gpt-5.5",
            api_key="k",
            system=SYSTEM,
            tools=[harness_lookup(12)],
            compaction=comp,
            reasoning="strip",  # reasoning is dropped from earlier turns; a compaction item is not reasoning
            db=tmp_path / "ctx.db",
        ) as h:
            h.run("Read records 1 to 5.")
    k = next(k for k, r in enumerate(sim.responses) if r["output"][0]["type"] == "compaction")
    assert item_bytes(sim.requests[k + 1]["input"][1]) == item_bytes(sim.responses[k]["output"][0])
