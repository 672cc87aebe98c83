"""``ctxwright export ID --requests``: the request body of every model call, rebuilt from the
store by the one renderer, equal (as canonical JSON) to what the server received; and
``ctxwright audit`` reads it back."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ctxwright.cli.main import main
from ctxwright.core.messages import canonical_json
from ctxwright.store.sessions import Store
from fakeserver import FakeOpenAIServer as F

FIXTURES = Path(__file__).parent / "fixtures"
SRC = str(Path(__file__).resolve().parents[1] / "src")


def _run(db: Path, url: str, *extra: str) -> int:
    return main(["--db", str(db), "run", "--backend", "openai", "--base-url", url, "--model", "m", *extra])


def _export_records(db: Path, sid: str, capsys) -> tuple[list[dict], str]:
    """Each line of ``export --requests``: ``{"request", "response", "ctxwright"}``."""
    capsys.readouterr()
    assert main(["--db", str(db), "export", sid, "--requests"]) == 0
    cap = capsys.readouterr()
    lines = cap.out.splitlines()
    assert all(line == canonical_json(json.loads(line)) for line in lines)  # canonical JSON, one per line
    records = [json.loads(line) for line in lines]
    assert all(set(r) == {"request", "response", "ctxwright"} for r in records)
    return records, cap.err


def _export(db: Path, sid: str, capsys) -> tuple[list[dict], str]:
    """The request bodies of ``export --requests``."""
    records, err = _export_records(db, sid, capsys)
    return [r["request"] for r in records], err


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
    records, _ = _export_records(db, sid, capsys)
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(canonical_json(r) + "\n" for r in records))
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


def _cli(*args: str, stdin: Any = None, stdout: Any = subprocess.PIPE) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": SRC, "NO_PROXY": "127.0.0.1,localhost"}
    return subprocess.Popen(
        [sys.executable, "-m", "ctxwright.cli.main", *args], stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, env=env
    )


def test_export_piped_into_audit_agrees_with_show_call_by_call(tmp_path, capsys):
    """``ctxwright export ID --requests | ctxwright audit /dev/stdin`` (real processes, a real
    pipe) gives each call the cause, reusable prefix and cached count ``ctxwright show`` gives:
    the options that changed between calls (a forced first tool call, then an answer required)
    are named on both sides, the usage is the server's, a replaced status is a
    ``status_replaced``, and the resumed calls belong to the same session."""
    db = tmp_path / "c.db"
    with F(
        [
            _tool_round("c1", "I should compute"),
            F.reply_text("42", usage=F.usage_openai(400, 5, cached=221)),
            F.reply_text("still 42"),  # no usage at all: unknown, on both sides
            F.reply_text("sure", usage=F.usage_openai(470, 2, cached=0)),
        ]
    ) as srv:
        first = ("--tool-choice-first", "required", "--max-tool-rounds", "1", "--status", "--status-mode", "replace")
        assert _run(db, srv.url, *first, "6*7?") == 0
        sid = Store(db).list_sessions()[0]["id"]
        assert _run(db, srv.url, "--status-mode", "replace", "--resume", sid, "again?") == 0
        assert _run(db, srv.url, "--status-mode", "replace", "--resume", sid, "sure?") == 0
    capsys.readouterr()
    assert main(["--db", str(db), "show", sid, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["calls"]
    sent = [r["request"]["tool_choice"] for r in _export_records(db, sid, capsys)[0]]
    assert sent[:2] == ["required", "none"]  # the options did change between calls
    export = _cli("--db", str(db), "export", sid, "--requests")
    audit = _cli("audit", "/dev/stdin", "--json", stdin=export.stdout)
    assert export.stdout is not None
    export.stdout.close()  # the audit holds the pipe's read end now
    out, err = audit.communicate(timeout=120)
    assert export.wait(timeout=120) == 0 and audit.returncode == 0, err.decode()
    rows = json.loads(out)["requests"]
    assert len(rows) == len(shown) == 4
    assert [r["cause"] for r in rows] == [c["audit"]["cause"] for c in shown]
    assert [r["reusable_prefix_tokens"] for r in rows] == [c["audit"]["reusable_prefix_tokens"] for c in shown]
    assert [r["cached_tokens"] for r in rows] == [c["cached_tokens"] for c in shown] == [0, 221, None, 0]
    assert [r["prompt_tokens"] for r in rows] == [c["audit"]["prompt_tokens"] for c in shown]
    assert [r["options_changed"] for r in rows] == [c["audit"]["options_changed"] for c in shown]
    assert rows[1]["options_changed"] == ["tool_choice"] and "status_replaced" in [r["cause"] for r in rows], rows
    assert {r["conversation"] for r in rows} == {0}


def test_a_failed_call_is_exported_and_named_not_audited(tmp_path, capsys):
    """A call the server refused was sent (its body is exported) but never answered: the live
    audit has no row for it, and the audit of the export names it on stderr instead."""
    db = tmp_path / "c.db"
    with F([F.reply_text("ok"), F.error(400, {"error": {"message": "bad request"}}), F.reply_text("ok")]) as srv:
        assert _run(db, srv.url, "hi") == 0
        sid = Store(db).list_sessions()[0]["id"]
        assert _run(db, srv.url, "--max-retries", "0", "--resume", sid, "again") == 2
        assert _run(db, srv.url, "--resume", sid, "once more") == 0
    records, _ = _export_records(db, sid, capsys)
    assert ["error" in r["ctxwright"] for r in records] == [False, True, False]
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(canonical_json(r) + "\n" for r in records))
    assert main(["audit", str(path), "--json"]) == 0
    cap = capsys.readouterr()
    live = [c.audit.cause for c in Store(db).calls(sid) if c.error is None]
    assert [r["cause"] for r in json.loads(cap.out)["requests"]] == live
    assert len(live) == 2 and live[0] == "first"
    assert "line 2: call 1 of session" in cap.err and "not audited" in cap.err


def test_a_bad_ctxwright_object_is_a_problem_of_its_line(tmp_path, capsys):
    """Hostile probe: the ``ctxwright`` object of a line is input like the rest of it."""
    body = {"model": "m", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]}
    lines = [
        {"request": body, "ctxwright": "not an object"},
        {"request": body, "ctxwright": {"session": 5}},
        {"request": body, "ctxwright": {"session": "s1", "marker": "<script>", "reusable_tokens": "many"}},
    ]
    path = tmp_path / "odd.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert main(["audit", str(path), "--json"]) == 0
    cap = capsys.readouterr()
    assert [r["cause"] for r in json.loads(cap.out)["requests"]] == ["first"]
    problems = [ln for ln in cap.err.splitlines() if ln.startswith("line ")]
    assert [p.split(":")[0] for p in problems] == ["line 1", "line 2"] and "Traceback" not in cap.err
