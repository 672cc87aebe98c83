"""``ctxwright export ID --requests``: the request body of every model call, rebuilt from the
store by the one renderer, equal (as canonical JSON) to what the server received; and
``ctxwright audit`` reads it back."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ctxwright.cli.main import main
from ctxwright.core.messages import canonical_json
from ctxwright.store.sessions import Store
from fakeserver import FakeOpenAIServer as F

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


def _run(db: Path, url: str, *extra: str) -> int:
    return main(["--db", str(db), "run", "--backend", "openai", "--base-url", url, "--model", "m", *extra])


def _export(db: Path, sid: str, capsys) -> tuple[list[dict], str]:
    capsys.readouterr()
    assert main(["--db", str(db), "export", sid, "--requests"]) == 0
    cap = capsys.readouterr()
    lines = cap.out.splitlines()
    assert all(line == canonical_json(json.loads(line)) for line in lines)  # canonical JSON, one per line
    return [json.loads(line) for line in lines], cap.err


def _canon(bodies: list[dict]) -> list[str]:
    return [canonical_json(b) for b in bodies]


def _tool_round(cid: str, reasoning: str):
    body = F.completion_body(
        {
            "content": None,
            "reasoning_content": reasoning,
            "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": "calculator", "arguments": '{"expression":"6*7"}'}}
            ],
        },
        finish_reason="tool_calls",
        usage=F.usage_openai(300, 20, cached=0),
    )
    return F.reply_json(body)


@pytest.mark.parametrize("status_mode", ["append", "replace"])
def test_export_requests_equal_what_the_server_received(tmp_path, capsys, status_mode):
    db = tmp_path / "c.db"
    with F(
        [
            _tool_round("c1", "I should compute"),
            F.reply_text("42", reasoning_content="easy", usage=F.usage_openai(400, 5, cached=256)),
            _tool_round("c2", "again"),
            F.reply_text("still 42", reasoning_content="sure"),
        ]
    ) as srv:
        flags = ("--reasoning", "strip", "--status-mode", status_mode, "--max-tokens", "77")
        assert _run(db, srv.url, *flags, "6*7?") == 0
        sid = Store(db).list_sessions()[0]["id"]
        assert _run(db, srv.url, "--status-mode", status_mode, "--resume", sid, "and again?") == 0
        received = srv.requests
    bodies, err = _export(db, sid, capsys)
    assert len(received) == 4 and err == ""
    assert _canon(bodies) == _canon(received)
    # what was sent includes the options, not only the messages
    assert all(b["model"] == "m" and b["temperature"] == 0.0 for b in bodies)
    assert [b["max_tokens"] for b in bodies] == [77] * 4  # the resumed run kept the session's (recipe/record.py)
    assert [b["tool_choice"] for b in bodies] == ["auto"] * 4
    assert not any("reasoning_content" in m for b in bodies for m in b["messages"])  # strip, as sent


def test_audit_reads_the_exported_requests(tmp_path, capsys):
    db = tmp_path / "c.db"
    with F([_tool_round("c1", "hmm"), F.reply_text("42"), F.reply_text("yes")]) as srv:
        assert _run(db, srv.url, "--status-mode", "append", "6*7?") == 0
        sid = Store(db).list_sessions()[0]["id"]
        assert _run(db, srv.url, "--status-mode", "append", "--resume", sid, "sure?") == 0
    bodies, _ = _export(db, sid, capsys)
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(canonical_json(b) + "\n" for b in bodies))
    assert main(["audit", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["cause"] for r in doc["requests"]] == ["first", "append", "append"]
    live = [c.audit.cause for c in Store(db).calls(sid)]
    assert live == ["first", "append", "append"]


def test_export_of_a_migrated_v1_session_marks_what_was_not_recorded(tmp_path, capsys):
    db = tmp_path / "store.db"
    shutil.copy(FIXTURES / "store_v1.db", db)
    bodies, err = _export(db, "065143ebd198", capsys)
    sent = (FIXTURES / "store_v1.requests.jsonl").read_text().splitlines()
    assert [b.pop("model") for b in bodies] == ["deepseek-chat"] * 5  # the session's recorded model
    # v1 hashed requests without model and sampling fields: the rest is exactly what was sent
    assert [json.dumps(b, sort_keys=True, ensure_ascii=False) for b in bodies] == sent
    assert "call(s) 0-4" in err and "max_tokens, temperature, extra" in err


def test_export_unknown_session_is_one_clear_line(tmp_path, capsys):
    db = tmp_path / "c.db"
    Store(db).close()
    assert main(["--db", str(db), "export", "nope", "--requests"]) == 2
    cap = capsys.readouterr()
    assert cap.out == ""
    assert len(cap.err.strip().splitlines()) == 1 and "no session 'nope'" in cap.err


def test_export_without_requests_is_the_session_json(tmp_path, capsys):
    db = tmp_path / "c.db"
    with F([F.reply_text("hi")]) as srv:
        assert _run(db, srv.url, "hello") == 0
    sid = Store(db).list_sessions()[0]["id"]
    capsys.readouterr()
    assert main(["--db", str(db), "export", sid]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["id"] == sid and data["calls"][0]["model"] == "m" and data["calls"][0]["max_tokens"] == 256
