"""The replay server answers agents written with the official ``openai`` (chat completions,
Responses) and ``anthropic`` SDKs, streaming and not, from a golden the test writes: the SDK
parses every reply, the agent carries the recorded ids back, the trace is the golden's calls
(and ``ctxwright audit`` reads it, and it replays as a golden itself); an agent that leaves
the recording is told so in one line, in both modes; what a provider refuses is refused."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from ctxwright.audit.logs import AuditRequest, read_log
from ctxwright.cli.main import main
from ctxwright.replay.golden import load_golden
from ctxwright.replay.matching import said
from ctxwright.replay.server import ReplayServer
from replay_agents import AGENTS, FINAL, GOLDENS, QUESTION, RECORDED_IDS, chat_agent, chat_golden, write_jsonl

APIS = list(AGENTS)


def _golden(tmp_path: Path, api: str) -> Path:
    return write_jsonl(tmp_path / f"{api}.jsonl", GOLDENS[api]())


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("api", APIS)
def test_each_sdk_agent_replays_its_golden(tmp_path: Path, api: str, stream: bool) -> None:
    path = _golden(tmp_path, api)
    golden = load_golden(path)
    trace = tmp_path / "trace.jsonl"
    with ReplayServer.start(golden, trace=trace) as srv:
        out = AGENTS[api](srv.url, stream=stream)
        assert srv.divergences == []
        calls = list(srv.calls)
    assert out["text"] == FINAL
    assert out["ids"] == RECORDED_IDS[api]  # every recorded id reached the agent byte for byte
    assert [(c.conversation, c.position, c.stream, c.status, c.diverged) for c in calls] == [
        ("c1", 0, stream, 200, None),
        ("c1", 1, stream, 200, None),
    ]
    # the trace: one line per call, the requests' messages are the golden's, the response non-stream
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    assert len(lines) == 2
    recorded = [r["request"] for r in GOLDENS[api]()]
    for line, want in zip(lines, recorded, strict=True):
        assert said(api, line["request"]) == said(api, want)
        assert line["replay"]["api"] == api and line["replay"]["stream"] is stream
        assert isinstance(line["response"], dict) and line["response"]["id"] == line["response"]["id"]
    assert [line["response"]["id"] for line in lines] == [c.turn.id for c in golden.conversations[0].calls]


@pytest.mark.parametrize("api", APIS)
def test_the_trace_is_read_by_the_audit_and_replays_as_a_golden(tmp_path: Path, api: str, capsys) -> None:
    trace = tmp_path / "trace.jsonl"
    with ReplayServer.start(load_golden(_golden(tmp_path, api)), trace=trace) as srv:
        AGENTS[api](srv.url, stream=True)
    items = list(read_log(trace))
    assert len(items) == 2 and all(isinstance(i, AuditRequest) for i in items)  # the "replay" key is ignored
    assert items[1].completion_tokens is not None  # the usage of the recorded reply is read
    capsys.readouterr()
    assert main(["audit", str(trace), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["summary"]["requests"] == 2 and not report.get("problems")
    assert [r["cause"] for r in report["requests"]] == ["first", "append"]
    # round trip: the trace is a golden, and the same agent replays it without a divergence
    again = load_golden(trace)
    assert [len(c.calls) for c in again.conversations] == [2]
    trace2 = tmp_path / "trace2.jsonl"
    with ReplayServer.start(again, trace=trace2) as srv:
        out = AGENTS[api](srv.url, stream=False)
        assert srv.divergences == []
    assert out["ids"] == RECORDED_IDS[api]
    first, second = (json.loads(line) for line in trace.read_text().splitlines())
    assert [json.loads(line)["response"] for line in trace2.read_text().splitlines()] == [
        first["response"],
        second["response"],
    ]


def test_a_different_question_diverges_and_stop_answers_400_naming_the_call(tmp_path: Path) -> None:
    with ReplayServer.start(load_golden(_golden(tmp_path, "openai_chat"))) as srv:
        with pytest.raises(openai.BadRequestError) as err:
            chat_agent(srv.url, stream=False, question="What does todo.txt say?")
        (line,) = srv.divergences
    assert line.startswith("call 1 of conversation c1: the user message differs from the recording's")
    assert "todo.txt" in line and "notes.txt" in line and "\n" not in line
    assert line in str(err.value)
    assert srv.calls[-1].status == 400 and srv.calls[-1].diverged == line


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_repeat_last_answers_the_conversations_last_reply(tmp_path: Path, stream: bool) -> None:
    with ReplayServer.start(load_golden(_golden(tmp_path, "openai_chat")), on_divergence="repeat-last") as srv:
        out = chat_agent(srv.url, stream=stream, question="What does todo.txt say?")
        assert out["text"] == FINAL  # the last recorded reply: the agent ends normally
        assert len(srv.divergences) == 1 and srv.calls[0].diverged == srv.divergences[0]
        assert srv.calls[0].status == 200


def test_a_tool_renamed_in_the_history_diverges_naming_both_tools(tmp_path: Path) -> None:
    golden = load_golden(_golden(tmp_path, "openai_chat"))
    with ReplayServer.start(golden) as srv, pytest.raises(openai.BadRequestError):
        chat_agent(srv.url, stream=False, rename="grep")
    assert srv.divergences == [
        "call 2 of conversation c1: the agent called tool 'grep' where the recording called 'read_file'"
    ]


def test_a_call_past_the_recording_diverges(tmp_path: Path) -> None:
    golden = load_golden(_golden(tmp_path, "openai_chat"))
    with ReplayServer.start(golden) as srv:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0)
        second = chat_golden()[1]["request"]
        messages = [
            *second["messages"],
            {"role": "assistant", "content": FINAL},
            {"role": "user", "content": "and now?"},
        ]
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model="gpt-test", messages=messages)
    assert srv.divergences == ["call 3 of conversation c1: the recording of c1 ends after 2 calls"]


def test_a_sliding_window_is_still_answered(tmp_path: Path) -> None:
    """A request that dropped early messages is placed by the newest reply it holds."""
    golden = load_golden(_golden(tmp_path, "openai_chat"))
    second = chat_golden()[1]["request"]
    cut = {**second, "messages": [second["messages"][0], *second["messages"][2:]]}  # the question dropped
    with ReplayServer.start(golden) as srv:
        r = httpx.post(srv.url + "/v1/chat/completions", json=cut)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == FINAL
        assert srv.divergences == [] and srv.calls[0].position == 1


def test_two_conversations_are_told_apart_by_their_replies(tmp_path: Path) -> None:
    records = chat_golden(tag="1") + chat_golden("What does todo.txt say?", tag="2")
    golden = load_golden(write_jsonl(tmp_path / "two.jsonl", records))
    assert [c.id for c in golden.conversations] == ["c1", "c2"]
    with ReplayServer.start(golden) as srv:
        # the second conversation first: placed by its first user message, not by order
        todo = chat_golden("What does todo.txt say?", tag="2")
        for rec in (todo[0], records[0], todo[1], records[1]):
            r = httpx.post(srv.url + "/v1/chat/completions", json=rec["request"])
            assert r.status_code == 200, r.text
        assert srv.divergences == []
        assert [(c.conversation, c.position) for c in srv.calls] == [("c2", 0), ("c1", 0), ("c2", 1), ("c1", 1)]


# -- what the providers refuse ---------------------------------------------------------------


def test_unanswered_tool_calls_are_refused_in_each_providers_shape(tmp_path: Path) -> None:
    chat = chat_golden()[1]["request"]
    chat_cut = {**chat, "messages": chat["messages"][:-1]}  # the tool result dropped
    golden = load_golden(_golden(tmp_path, "openai_chat"))
    with ReplayServer.start(golden) as srv:
        oa = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.BadRequestError) as e1:
            oa.chat.completions.create(**chat_cut)
        assert "call_rec_1" in str(e1.value) and e1.value.status_code == 400
        with pytest.raises(openai.BadRequestError) as e2:
            oa.responses.create(
                model="gpt-test",
                input=[
                    {"role": "user", "content": QUESTION},
                    {"type": "function_call", "call_id": "call_x", "name": "read_file", "arguments": "{}"},
                ],
            )
        assert "No tool output found for function call call_x." in str(e2.value)
        an = anthropic.Anthropic(base_url=srv.url, api_key="x", max_retries=0)
        with pytest.raises(anthropic.BadRequestError) as e3:
            an.messages.create(
                model="claude-test",
                max_tokens=10,
                messages=[
                    {"role": "user", "content": QUESTION},
                    {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_x", "name": "t", "input": {}}]},
                    {"role": "user", "content": "no result"},
                ],
            )
        assert "toolu_x" in str(e3.value)
        assert e3.value.body == {
            "type": "error",
            "error": {"type": "invalid_request_error", "message": e3.value.body["error"]["message"]},
        }  # type: ignore[index]
        assert [c.status for c in srv.calls] == [400, 400, 400]
        assert srv.divergences == []


@pytest.mark.parametrize(
    "path, shape",
    [("/v1/chat/completions", "openai"), ("/v1/responses", "openai"), ("/v1/messages", "anthropic")],
)
def test_malformed_json_is_a_400_in_the_apis_shape(tmp_path: Path, path: str, shape: str) -> None:
    with ReplayServer.start(load_golden(_golden(tmp_path, "openai_chat"))) as srv:
        r = httpx.post(
            srv.url + path, content=b'{"model": "m", "messages": [', headers={"content-type": "application/json"}
        )
        assert r.status_code == 400
        body = r.json()
        assert (body.get("type") == "error") is (shape == "anthropic")
        assert "parse the JSON body" in body["error"]["message"]
        r = httpx.post(srv.url + path, json=[1, 2])
        assert r.status_code == 400 and "JSON object" in r.json()["error"]["message"]
        assert srv.calls == []


def test_models_are_listed_for_both_sdks(tmp_path: Path) -> None:
    records = chat_golden() + [dict(r) for r in GOLDENS["anthropic_messages"]()]
    with ReplayServer.start(load_golden(write_jsonl(tmp_path / "g.jsonl", records))) as srv:
        oa = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0)
        assert [m.id for m in oa.models.list()] == ["gpt-test", "claude-test"]
        an = anthropic.Anthropic(base_url=srv.url, api_key="x", max_retries=0)
        assert [m.id for m in an.models.list()] == ["gpt-test", "claude-test"]
        assert httpx.get(srv.url + "/v1/nothing").status_code == 404


def test_a_gzip_body_is_decoded(tmp_path: Path) -> None:
    with ReplayServer.start(load_golden(_golden(tmp_path, "openai_chat"))) as srv:
        raw = gzip.compress(json.dumps(chat_golden()[0]["request"]).encode())
        r = httpx.post(
            srv.url + "/v1/chat/completions",
            content=raw,
            headers={"content-encoding": "gzip", "content-type": "application/json"},
        )
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["tool_calls"][0]["id"] == "call_rec_1"


def test_env_points_the_sdks_at_the_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with ReplayServer.start(load_golden(_golden(tmp_path, "anthropic_messages"))) as srv:
        env: dict[str, Any] = srv.env()
        assert env["OPENAI_BASE_URL"] == srv.url + "/v1" and env["ANTHROPIC_BASE_URL"] == srv.url
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        msg = anthropic.Anthropic(max_retries=0).messages.create(
            model="claude-test", max_tokens=10, messages=[{"role": "user", "content": QUESTION}]
        )
        assert msg.id == "msg_rec_1"


def test_an_agent_that_loops_is_refused_past_the_call_cap_in_bounded_memory(tmp_path: Path) -> None:
    """A client retrying a refused call forever (or an agent in a loop) stops growing the
    replay's records at the cap; every later call is one 400 and nothing is kept."""
    with ReplayServer.start(load_golden(_golden(tmp_path, "openai_chat")), max_calls=5) as srv:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0)
        refused = 0
        for _ in range(25):
            try:
                client.chat.completions.create(model="m", messages=[{"role": "user", "content": "loop"}])
            except openai.BadRequestError as exc:
                refused += 1
                last = str(exc)
        assert len(srv.calls) == 5 and refused == 25
        assert "more than 5 calls" in last and "the agent loops" in srv.divergences[-1]
        assert sum("the agent loops" in d for d in srv.divergences) == 1
