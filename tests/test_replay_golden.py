"""Loading a golden: from a request log, a proxy session recorded through ``ctxwright proxy``, a
stored ctxwright session; replies inferred from the next request when none was recorded; and
files that are no golden at all (huge, binary, a FIFO, a device) refused in one line."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from ctxwright.cli.main import main
from ctxwright.errors import GoldenUnusable
from ctxwright.proxy.log import proxy_sessions
from ctxwright.proxy.serve import RecordingProxy
from ctxwright.proxy.server import ProxyConfig
from ctxwright.replay.golden import load_golden
from ctxwright.replay.server import ReplayServer
from ctxwright.store.sessions import Store
from fakeserver import FakeOpenAIServer as F
from replay_agents import FINAL, GOLDENS, RECORDED_IDS, chat_agent, chat_golden, responses_agent, write_jsonl


def test_a_call_without_a_response_gets_the_reply_the_next_request_appended(tmp_path: Path) -> None:
    records = [{"request": r["request"], "response": {"usage": {"prompt_tokens": 9}}} for r in chat_golden()]
    golden = load_golden(write_jsonl(tmp_path / "bare.jsonl", records))
    first, last = golden.conversations[0].calls
    assert first.turn.inferred and [(c.id, c.name) for c in first.turn.tool_calls] == [("call_rec_1", "read_file")]
    assert first.turn.usage == {"prompt_tokens": 9}  # the usage recorded is kept
    # the last call: nothing recorded says more than an empty text with a normal stop
    assert last.turn.inferred and last.turn.text == "" and last.turn.stop == "stop" and not last.turn.tool_calls
    with ReplayServer.start(golden) as srv:
        out = chat_agent(srv.url, stream=True)
        assert srv.divergences == []
    assert out["text"] == "" and out["ids"][1] == "call_rec_1"


def test_bare_request_bodies_are_a_golden_too(tmp_path: Path) -> None:
    golden = load_golden(write_jsonl(tmp_path / "bodies.jsonl", [r["request"] for r in chat_golden()]))
    assert [c.turn.tool_calls[0].id for c in golden.conversations[0].calls[:1]] == ["call_rec_1"]


def test_failed_and_unreadable_records_are_left_out_with_a_note(tmp_path: Path) -> None:
    ok = chat_golden()
    records = [
        ok[0],
        {"request": {"model": "m", "messages": []}, "response": None},
        {"request": ok[1]["request"], "response": {"error": {"message": "rate limited"}}},
        "just a string",
        ok[1],
    ]
    golden = load_golden(write_jsonl(tmp_path / "mixed.jsonl", records))
    assert [len(c.calls) for c in golden.conversations] == [2]
    assert len(golden.notes) == 3 and any("error" in n for n in golden.notes)
    assert [r["response"]["id"] for r in golden.records()] == ["chatcmpl-rec-1a", "chatcmpl-rec-1b"]


def test_a_proxy_session_is_a_golden(tmp_path: Path) -> None:
    """The agent talks to a replay through ``ctxwright proxy``; what the proxy recorded (streams
    as their events) is then replayed to the same agent, ids and all."""
    db = tmp_path / "proxy.db"
    upstream = load_golden(write_jsonl(tmp_path / "g.jsonl", GOLDENS["openai_responses"]()))
    with ReplayServer.start(upstream) as srv:
        store = Store(db)
        with RecordingProxy.start(ProxyConfig(upstream=srv.url), store) as proxy:
            responses_agent(proxy.url, stream=True)
        (session,) = proxy_sessions(store)
        store.close()
    golden = load_golden(proxy_session=session["id"], store=db)
    assert golden.source == f"proxy session {session['id']}"
    assert [len(c.calls) for c in golden.conversations] == [2]
    with ReplayServer.start(golden) as srv:
        out = responses_agent(srv.url, stream=False)
        assert srv.divergences == []
    assert out["ids"] == RECORDED_IDS["openai_responses"] and out["text"] == FINAL


def _tool_round(cid: str) -> object:
    body = F.completion_body(
        {
            "content": None,
            "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": "calculator", "arguments": '{"expression":"6*7"}'}}
            ],
        },
        finish_reason="tool_calls",
        usage=F.usage_openai(300, 20, cached=0),
    )
    return F.reply_json(body)


def test_a_stored_session_is_a_golden_and_ctxwright_run_replays_it(tmp_path: Path, capsys) -> None:
    db = tmp_path / "run.db"
    run = ["--db", str(db), "run", "--backend", "openai", "--model", "m"]
    with F([_tool_round("c1"), F.reply_text("42", usage=F.usage_openai(400, 5, cached=256))]) as fake:
        assert main([*run, "--base-url", fake.url, "6*7?"]) == 0
    store = Store(db)
    sid = store.list_sessions()[0]["id"]
    store.close()
    golden = load_golden(session=sid, store=db)
    first, last = golden.conversations[0].calls
    assert first.turn.tool_calls[0].id == "c1" and first.turn.tool_calls[0].name == "calculator"
    assert last.turn.text == "" and last.turn.usage is not None  # the export has no reply text: empty
    trace = tmp_path / "trace.jsonl"
    with ReplayServer.start(golden, trace=trace) as srv:
        assert main([*run, "--base-url", srv.url + "/v1", "6*7?"]) == 0
        assert srv.divergences == []
        assert [(c.conversation, c.position) for c in srv.calls] == [("c1", 0), ("c1", 1)]
    capsys.readouterr()


def test_a_session_not_in_the_store_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(GoldenUnusable, match="no ctxwright database at"):
        load_golden(session="abc", store=tmp_path / "none.db")
    Store(tmp_path / "empty.db").close()
    with pytest.raises(GoldenUnusable) as err:
        load_golden(proxy_session="abc", store=tmp_path / "empty.db")
    assert "\n" not in str(err.value)


def test_exactly_one_source(tmp_path: Path) -> None:
    with pytest.raises(GoldenUnusable, match="exactly one golden"):
        load_golden()
    with pytest.raises(GoldenUnusable, match="exactly one golden"):
        load_golden(tmp_path / "x.jsonl", session="s")


# -- files that are no golden ----------------------------------------------------------------


def test_a_binary_file_is_refused_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bin.jsonl"
    bad.write_bytes(os.urandom(4096) + b"\n\x00\x01")
    with pytest.raises(GoldenUnusable, match="is not JSON: a golden is a request log"):
        load_golden(bad)


def test_a_huge_golden_is_refused_before_it_is_held(tmp_path: Path) -> None:
    big = tmp_path / "big.jsonl"
    line = json.dumps(chat_golden()[0]) + "\n"
    big.write_text(line * 200)
    with pytest.raises(GoldenUnusable, match="larger than 10,000 bytes"):
        load_golden(big, max_bytes=10_000)


def test_a_fifo_and_a_device_are_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(GoldenUnusable, match="is a FIFO"):
        load_golden(fifo)  # refused before it is opened: opening would wait for a writer
    with pytest.raises(GoldenUnusable, match="character device"):
        load_golden("/dev/zero")
    with pytest.raises(GoldenUnusable, match="is a folder"):
        load_golden(tmp_path)
    with pytest.raises(GoldenUnusable, match="cannot read the golden"):
        load_golden(tmp_path / "missing.jsonl")


def test_an_empty_golden_is_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(GoldenUnusable, match="holds no model call to replay"):
        load_golden(empty)


def test_a_status_block_next_to_tool_results_is_not_the_question() -> None:
    """A harness's status message (its clock changes every run) is compared by role; the
    user's question is compared by text."""
    from ctxwright.replay.matching import Said, compare_new

    got = [Said("tool", answers="c1"), Said("user", "<status>time: 10:01</status>")]
    want = [Said("tool", answers="c1"), Said("user", "<status>time: 10:00</status>")]
    assert compare_new(got, want, opens_turn=False) is None
    first = [Said("user", "6*7?"), Said("user", "<status>time: 10:01</status>")]
    assert compare_new(first, [Said("user", "6*7?"), Said("user", "<status>time: 10:00</status>")]) is None
    asked = compare_new([Said("user", "6*8?")], [Said("user", "6*7?")])
    assert asked is not None and asked.startswith("the user message differs") and "at character 2" in asked
    assert compare_new(got, want[:1], opens_turn=False) == "the agent sent 2 new messages where the recording sent 1"
