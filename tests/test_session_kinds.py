"""One way to name a session (``cli/sessions.py``): a store holding a Harness session (scripted
backend), a session ``ctxwright proxy`` recorded and one a framework recorded in process
(``FrameworkRecorder`` behind a real ``httpx`` client, against ``tests/fakeserver.py``) lists
all three with their kinds, and every command that takes a session takes each kind's ID
positionally -- or says in one line that it does not apply to that kind. The aliases of before
(``--session``, ``--proxy-session``, ``lock --store``) still work. Real SQLite, the real CLI.

And the parser: ``run --help`` lists its flags in groups, and a bad flag value is one line
naming the help, not argparse's usage block.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ctxwright import Harness, ScriptedBackend, tool
from ctxwright.cli.main import main
from ctxwright.integrations.recording import FrameworkRecorder
from ctxwright.proxy.store import ProxyLog
from ctxwright.store.sessions import Store
from fakeserver import FakeOpenAIServer as F

SRC = str(Path(__file__).resolve().parents[1] / "src")
SYSTEM = "# Role\nYou add numbers.\n"


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _proxy_session(store: Store) -> str:
    """A session as ``ctxwright proxy`` records it: its upstream a URL, one relayed call."""
    log = ProxyLog(store)
    sid = log.create_session(grouped_by="header", group_key="s1", api="openai_chat", upstream="http://127.0.0.1:9/v1")
    req = json.dumps(
        {"model": "m", "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hi"}]}
    )
    resp = json.dumps(
        {
            "id": "c1",
            "object": "chat.completion",
            "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
        }
    )
    now = time.time()
    row: dict[str, Any] = {"session_id": sid, "started_at": now, "ended_at": now, "method": "POST"}
    row.update(path="/v1/chat/completions", api="openai_chat", streamed=0, status=200, outcome="complete")
    for side, body in (("request", req.encode()), ("response", resp.encode())):
        row.update(
            {
                f"{side}_bytes": len(body),
                f"{side}_sha256": hashlib.sha256(body).hexdigest(),
                f"{side}_content_type": "application/json",
                f"{side}_body": body,
                f"{side}_parsed": 1,
            }
        )
    log.record_call(row)
    return sid


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A store with one session of each kind, made in this order (so listed in the reverse)."""
    db = tmp_path_factory.mktemp("kinds") / "kinds.db"
    ids: dict[str, str] = {}
    with Harness(system=SYSTEM, tools=[add], backend=ScriptedBackend(["5."]), db=db) as h:
        h.run("What is 2 + 3?")
        ids["run"] = h.session_id
    time.sleep(0.01)  # created_at orders the list
    store = Store(db)
    ids["proxy"] = _proxy_session(store)
    store.close()
    time.sleep(0.01)
    with F([F.reply_text("one"), F.reply_text("two")]) as srv:
        with FrameworkRecorder(db, framework="test", on_warning=lambda w: None) as rec, rec.http_client() as client:
            msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hi"}]
            client.post(f"{srv.url}/chat/completions", json={"model": "m", "messages": msgs}).raise_for_status()
            msgs += [{"role": "assistant", "content": "one"}, {"role": "user", "content": "more"}]
            client.post(f"{srv.url}/chat/completions", json={"model": "m", "messages": msgs}).raise_for_status()
        assert rec.session_id is not None
        ids["framework"] = rec.session_id
    return db, ids


def _err_line(capsys: pytest.CaptureFixture[str]) -> str:
    cap = capsys.readouterr()
    lines = [ln for ln in cap.err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in cap.err, cap.err
    return lines[0]


# -- the one list ------------------------------------------------------------------------------


def test_sessions_lists_every_kind_newest_first(three, capsys) -> None:
    db, ids = three
    capsys.readouterr()
    assert main(["--db", str(db), "sessions", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["kind"], r["id"]) for r in rows] == [(k, ids[k]) for k in ("framework", "proxy", "run")]
    assert [r["calls"] for r in rows] == [2, 1, 1]
    assert rows[2]["first_user"] == "What is 2 + 3?" and rows[1]["upstream"] == "http://127.0.0.1:9/v1"
    assert main(["--db", str(db), "sessions", "--limit", "2", "--json"]) == 0
    assert [r["kind"] for r in json.loads(capsys.readouterr().out)] == ["framework", "proxy"]
    assert main(["--db", str(db), "sessions"]) == 0
    table = capsys.readouterr().out
    assert "kind" in table
    for kind, sid in ids.items():
        line = next(ln for ln in table.splitlines() if sid in ln)
        assert f" {kind} " in line, line


# -- each command, each kind, positionally -----------------------------------------------------


@pytest.mark.parametrize("kind", ["run", "proxy", "framework"])
def test_show_export_audit_report_and_lock_take_every_kind_by_a_start_of_its_id(three, tmp_path, capsys, kind) -> None:
    db, ids = three
    sid = ids[kind]
    start = sid[: 6 if kind == "run" else 7]
    assert all(not other.startswith(start) for k, other in ids.items() if k != kind)
    capsys.readouterr()
    assert main(["--db", str(db), "show", start]) == 0
    assert sid in capsys.readouterr().out
    assert main(["--db", str(db), "show", start, "--json"]) == 0
    view = json.loads(capsys.readouterr().out)
    assert view["kind"] == kind

    assert main(["--db", str(db), "export", start]) == 0
    exported = capsys.readouterr().out
    golden = tmp_path / "golden.jsonl"
    if kind == "run":  # the session file: not the view's data (show --json adds what the view computes)
        data = json.loads(exported)
        assert data["id"] == sid and "view" not in data and "view" in view and exported != json.dumps(view)
        assert main(["--db", str(db), "export", start, "--requests"]) == 0
        golden.write_text(capsys.readouterr().out)
    else:
        lines = [json.loads(ln) for ln in exported.splitlines()]
        assert len(lines) == (2 if kind == "framework" else 1) and all("request" in ln for ln in lines)
        golden.write_text(exported)

    assert main(["--db", str(db), "audit", start, "--json"]) == 0
    audit = json.loads(capsys.readouterr().out)
    assert len(audit["requests"]) == (2 if kind == "framework" else 1)
    assert main(["audit", str(golden), "--json"]) == 0  # a file of that export audits alike
    assert [r["cause"] for r in json.loads(capsys.readouterr().out)["requests"]] == [
        r["cause"] for r in audit["requests"]
    ]

    report = tmp_path / "r.html"
    assert main(["--db", str(db), "report", start, "-o", str(report)]) == 0
    assert sid in report.read_text(encoding="utf-8")

    lock = tmp_path / "ctxwright.lock"
    assert main(["--db", str(db), "lock", start, "--file", str(lock)]) == 0
    assert f"session {sid}" in capsys.readouterr().out
    assert main(["--db", str(db), "lock", start, "--file", str(lock), "--check"]) == 0
    assert main(["lock", str(golden), "--file", str(lock), "--check"]) == 0  # the export holds the same prefix


@pytest.mark.parametrize("kind", ["proxy", "framework"])
def test_a_command_that_does_not_apply_to_a_kind_says_so_in_one_line(three, capsys, kind) -> None:
    db, ids = three
    capsys.readouterr()
    assert main(["--db", str(db), "attention", ids[kind]]) == 2
    line = _err_line(capsys)
    assert f"attention does not apply to {kind} session {ids[kind]}" in line and "--request" in line
    assert main(["--db", str(db), "show", ids[kind], "--compactions"]) == 2
    assert f"does not apply to {kind} session" in _err_line(capsys)


def test_attention_resolves_a_run_session_by_its_start(three, capsys) -> None:
    db, ids = three
    capsys.readouterr()
    assert main(["--db", str(db), "attention", ids["run"][:6]]) == 2  # resolved; the scripted model has no GGUF
    line = _err_line(capsys)
    assert f"session {ids['run']} ran on scripted" in line


def _agent(tmp_path: Path, golden: Path) -> list[str]:
    """An agent that sends the golden's requests, in order, to the replay (``OPENAI_BASE_URL``)."""
    script = tmp_path / "agent.py"
    script.write_text(
        "import json, os, sys, urllib.request\n"
        "base = os.environ['OPENAI_BASE_URL'].rstrip('/')\n"
        "for line in open(sys.argv[1], encoding='utf-8'):\n"
        "    body = json.dumps(json.loads(line)['request']).encode()\n"
        "    req = urllib.request.Request(base + '/chat/completions', body, {'Content-Type': 'application/json'})\n"
        "    urllib.request.urlopen(req, timeout=60).read()\n",
        encoding="utf-8",
    )
    return [sys.executable, str(script), str(golden)]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["run", "proxy", "framework"])
def test_gate_takes_every_kind_as_its_golden(three, tmp_path, capsys, kind) -> None:
    db, ids = three
    golden = tmp_path / "golden.jsonl"
    capsys.readouterr()
    assert main(["--db", str(db), "export", ids[kind], *(["--requests"] if kind == "run" else [])]) == 0
    golden.write_text(capsys.readouterr().out)
    argv = ["--db", str(db), "gate", ids[kind][:7], "--json", "--timeout", "120", "--", *_agent(tmp_path, golden)]
    done = subprocess.run(  # a process of its own: the agent's output goes to the gate's stderr
        [sys.executable, "-m", "ctxwright", *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC},
        timeout=240,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert json.loads(done.stdout.splitlines()[-1])["verdict"] == "pass"


# -- the aliases of before -----------------------------------------------------------------------


def test_the_aliases_still_work(three, tmp_path, capsys) -> None:
    db, ids = three
    capsys.readouterr()
    assert main(["--db", str(db), "export", "--proxy-session", ids["framework"]]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    assert main(["--db", str(db), "audit", "--proxy-session", ids["proxy"], "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["requests"]) == 1
    assert main(["--db", str(db), "report", "--proxy-session", ids["proxy"], "-o", str(tmp_path / "r.html")]) == 0
    lock = tmp_path / "l.lock"
    assert (
        main(["lock", "--session", ids["run"], "--store", str(db), "--file", str(lock)]) == 0
    )  # --store: --db's alias
    assert main(["lock", "--session", ids["run"], "--db", str(db), "--file", str(lock), "--check"]) == 0
    assert main(["--db", str(db), "lock", "--proxy-session", ids["proxy"], "--file", str(lock), "--check"]) == 1
    assert "the prefix changed" in capsys.readouterr().out
    assert main(["--db", str(db), "lock", ids["run"], "--session", ids["run"]]) == 2  # two sources
    assert "give one source" in _err_line(capsys)


def test_an_exact_id_wins_and_a_start_shared_across_kinds_is_ambiguous(tmp_path, capsys) -> None:
    db = tmp_path / "both.db"
    with Harness(backend=ScriptedBackend(["done"]), db=db) as h:
        h.run("hello")
        run_id = h.session_id
    store = Store(db)
    try:  # a run session whose ID is the start of a proxy session's
        for table, col in (("sessions", "id"), ("events", "session_id"), ("calls", "session_id")):
            store.db.execute(f"UPDATE {table} SET {col}=? WHERE {col}=?", ("px-00", run_id))
        store.db.execute("DELETE FROM session_leases WHERE session_id=?", (run_id,))
        ProxyLog(store).create_session(
            grouped_by="header", group_key="k", api=None, upstream="http://u", session_id="px-0011"
        )
    finally:
        store.close()
    capsys.readouterr()
    assert main(["--db", str(db), "show", "px-00", "--json"]) == 0  # the whole ID of the run session
    assert json.loads(capsys.readouterr().out)["kind"] == "run"
    assert main(["--db", str(db), "show", "px-001"]) == 0  # only the proxy session starts so
    assert "px-0011" in capsys.readouterr().out
    assert main(["--db", str(db), "show", "px-0"]) == 2
    line = _err_line(capsys)
    assert "ambiguous" in line and "run session px-00" in line and "proxy session px-0011" in line
    assert main(["--db", str(db), "export", "px-9"]) == 2
    assert "no session 'px-9'" in _err_line(capsys)
    assert main(["--db", str(db), "report", "nosuch", "-o", str(tmp_path / "r.html")]) == 2
    assert "no session 'nosuch' in" in _err_line(capsys)


# -- the parser ----------------------------------------------------------------------------------


def test_run_help_lists_its_flags_in_groups(capsys) -> None:
    with pytest.raises(SystemExit) as done:
        main(["run", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[0] == "usage: ctxwright run [OPTIONS] [PROMPT]"  # not 44 lines of every flag
    titles = [ln[:-1] for ln in lines if ln and not ln[0].isspace() and ln.endswith(":")]
    for start in ("model", "prefix", "tools", "limits", "compaction", "status", "skills", "MCP", "defence"):
        assert any(t.startswith(start) for t in titles), (start, titles)
    assert "session and store" in titles and any(t.startswith("output") for t in titles)
    assert len(titles) >= 12
    options = lines[lines.index("options:") + 1 : lines.index("options:") + 3]
    assert options[0].strip().startswith("-h, --help") and options[1] == ""  # nothing else left ungrouped

    def group(flag: str) -> str:
        i = next(k for k, ln in enumerate(lines) if ln.strip().startswith(flag + " ") or ln.strip() == flag)
        return next(ln for ln in reversed(lines[:i]) if ln and not ln[0].isspace())

    assert group("--base-url").startswith("model") and group("--system").startswith("prefix")
    assert group("--tool").startswith("tools") and group("--max-iterations").startswith("limits")
    assert group("--resume") == group("--db") == "session and store:"
    assert group("--report") == group("--prices")


@pytest.mark.parametrize(
    "argv, says",
    [
        (["run", "--max-iterations", "abc"], "argument --max-iterations: invalid int value: 'abc'"),
        (["run", "--backend", "nope"], "argument --backend: invalid choice: 'nope'"),
        (["run", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["sessions", "--limit", "x"], "argument --limit: 'x' is not a whole number"),
        (["gate", "--max-reuse-drop", "x"], "'x' is not a number"),
        (["show"], "the following arguments are required: id"),
    ],
)
def test_a_bad_flag_value_is_one_line_naming_the_help(capsys, argv, says) -> None:
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    cap = capsys.readouterr()
    assert cap.out == ""
    lines = cap.err.splitlines()
    assert len(lines) == 1 and "usage:" not in cap.err, cap.err
    assert lines[0].startswith(f"ctxwright {argv[0]}: ") and says in lines[0]
    assert lines[0].endswith(f"see `ctxwright {argv[0]} --help`")


def test_a_bad_value_from_a_shell_is_one_line_too(tmp_path) -> None:
    env = {**os.environ, "PYTHONPATH": SRC, "CTXWRIGHT_DB": str(tmp_path / "none.db")}
    done = subprocess.run(
        [sys.executable, "-m", "ctxwright", "run", "--max-iterations", "abc"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "ctxwright run: argument --max-iterations: invalid int value: 'abc'; see `ctxwright run --help`"
    ]
    assert not (tmp_path / "none.db").exists()
    done = subprocess.run(
        [sys.executable, "-m", "ctxwright", "bogus"], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1
    assert done.stderr.rstrip().endswith("see `ctxwright --help`")
