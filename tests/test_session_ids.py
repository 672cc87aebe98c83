"""Session IDs as people give them: listings never cut an ID (an 80-column terminal, a real
process on a pseudo-terminal), and every command that takes an ID takes any unique start of
it -- an ambiguous or unknown one is one clear line. Real SQLite, the real CLI."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ctxwright.cli.main import main
from ctxwright.core.prefix import Prefix
from ctxwright.core.session import Session
from ctxwright.errors import AmbiguousSessionId, SessionNotFound
from ctxwright.proxy.store import ProxyLog
from ctxwright.store.sessions import Store

SRC = str(Path(__file__).resolve().parents[1] / "src")
LONG_TASK = "What's the current time and weather in Vancouver, and what should I wear there today?"


def _session_with_task(store: Store, sid: str) -> str:
    s = Session.start(Prefix.build("You answer."), store=store, backend="embedded", model="SmolLM2-135M-Instruct")
    s.add_user(LONG_TASK)
    # the ID under test: a copy of the session row with a chosen ID, events included
    row = store.get_session(s.id)
    store.create_session(
        row.prefix, row.prefix_sha256, backend=row.backend, model=row.model, meta=row.meta, session_id=sid
    )
    for ev in store.events(s.id):
        store.append_event(sid, ev)
    return s.id


def _on_a_terminal(args: list[str], columns: int = 80) -> str:
    """``ctxwright ARGS`` in a real process whose stdout is a pseudo-terminal ``columns`` wide."""
    pty = pytest.importorskip("pty")
    master, slave = pty.openpty()
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the other end closed
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    env = {**os.environ, "COLUMNS": str(columns), "LINES": "50", "TERM": "xterm", "PYTHONPATH": SRC}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctxwright.cli.main", *args], stdout=slave, stderr=subprocess.PIPE, env=env
    )
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        os.close(slave)
    reader.join(timeout=30)
    os.close(master)
    assert proc.returncode == 0, err.decode()
    text = b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)  # the terminal's colours


def test_listings_show_whole_ids_on_an_80_column_terminal(tmp_path):
    db = tmp_path / "ids.db"
    store = Store(db)
    try:
        ids = ["920262ef8a1b", "920262ef8c2d"]
        for sid in ids:
            _session_with_task(store, sid)
        log = ProxyLog(store)
        proxy_ids = [
            log.create_session(
                grouped_by="header",
                group_key="agent-" + "k" * 40,
                api="openai.chat",
                upstream="https://api.example.com",
            )
            for _ in range(2)
        ]
        listed = [r["id"] for r in store.list_sessions()]
    finally:
        store.close()
    out = _on_a_terminal(["--db", str(db), "sessions"])
    assert max(len(line) for line in out.splitlines()) <= 80  # the table fits the terminal
    for sid in listed:
        assert sid in out, out
    assert "…" not in "".join(line.split("│")[1] for line in out.splitlines() if line.count("│") > 2)
    out = _on_a_terminal(["--db", str(db), "proxy", "--list"])
    for sid in proxy_ids:
        assert sid in out, out


@pytest.fixture
def two_alike(tmp_path) -> tuple[Path, str, str]:
    """A database with two sessions whose IDs start alike, each with a model call."""
    from ctxwright import Harness, ScriptedBackend

    db = tmp_path / "alike.db"
    made = []
    for _ in range(2):
        with Harness(backend=ScriptedBackend(["done"]), db=db) as h:
            h.run("hello there")
            made.append(h.session_id)
    store = Store(db)
    try:  # rename them to IDs sharing their first 8 characters
        for old, new in zip(made, ("abcdef01aaaa", "abcdef01bbbb"), strict=True):
            for table, col in (("sessions", "id"), ("events", "session_id"), ("calls", "session_id")):
                store.db.execute(f"UPDATE {table} SET {col}=? WHERE {col}=?", (new, old))
            store.db.execute("DELETE FROM session_leases WHERE session_id=?", (old,))
    finally:
        store.close()
    return db, "abcdef01aaaa", "abcdef01bbbb"


def test_a_unique_start_of_an_id_works_for_show_export_report_and_resume(two_alike, tmp_path, capsys):
    db, a, b = two_alike
    assert main(["--db", str(db), "show", "abcdef01a"]) == 0
    assert a in capsys.readouterr().out
    assert main(["--db", str(db), "show", "abcdef01b", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["id"] == b
    assert main(["--db", str(db), "export", "abcdef01a"]) == 0
    assert json.loads(capsys.readouterr().out)["id"] == a
    assert main(["--db", str(db), "export", "abcdef01a", "--requests"]) == 0
    assert capsys.readouterr().out.strip()
    out = tmp_path / "r.html"
    assert main(["--db", str(db), "report", "abcdef01b", "-o", str(out)]) == 0
    assert f"session {b}" in out.read_text()
    # copied from a table that cut it, ellipsis and all
    assert main(["--db", str(db), "show", "abcdef01a…"]) == 0
    assert a in capsys.readouterr().out
    from ctxwright import Harness, ScriptedBackend

    with Harness.resume("abcdef01b", backend=ScriptedBackend(["again"]), db=db) as h:
        assert h.session_id == b
        h.run("and again")
    assert len(Store(db).calls(b)) == 2


@pytest.mark.parametrize("command", [["show"], ["export"], ["export", "--requests"], ["report", "-o", "{out}"]])
def test_an_ambiguous_start_is_one_line_naming_the_candidates(two_alike, tmp_path, capsys, command):
    db, a, b = two_alike
    args = [c.format(out=tmp_path / "r.html") for c in command]
    code = main(["--db", str(db), args[0], "abcdef", *args[1:]])
    cap = capsys.readouterr()
    assert code == 2 and cap.out == ""
    lines = [ln for ln in cap.err.splitlines() if ln.strip()]
    assert len(lines) == 1, cap.err
    assert "ambiguous" in lines[0] and "2 sessions" in lines[0] and a in lines[0] and b in lines[0]
    assert "Traceback" not in cap.err


@pytest.mark.parametrize("given", ["%", "_", "abcdef01_aaa", "abcdef0%", "", "   ", "zzz"])
def test_an_id_is_never_a_pattern_and_an_unknown_one_is_one_line(two_alike, capsys, given):
    """Hostile probe: ``%`` and ``_`` are SQL LIKE wildcards; as an ID's start they are text."""
    db, _, b = two_alike
    store = Store(db)
    try:
        store.db.execute("DELETE FROM sessions WHERE id=?", (b,))  # one session left: a pattern would find it
        with pytest.raises(SessionNotFound) as err:
            store.resolve(given)
        assert not isinstance(err.value, AmbiguousSessionId)
    finally:
        store.close()
    assert main(["--db", str(db), "show", given]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and len([ln for ln in cap.err.splitlines() if ln.strip()]) == 1


def test_proxy_sessions_take_a_unique_start_too(tmp_path, capsys):
    db = tmp_path / "px.db"
    store = Store(db)
    try:
        log = ProxyLog(store)
        for sid in ("px-1111aaaa00", "px-1111bbbb00"):
            log.create_session(grouped_by="continuity", group_key=None, api="openai.chat", upstream="u", session_id=sid)
        assert log.session_row("px-1111a")["id"] == "px-1111aaaa00"
        with pytest.raises(AmbiguousSessionId, match=r"2 proxy sessions .* start with it"):
            log.session_row("px-1111")
    finally:
        store.close()
    assert main(["--db", str(db), "audit", "--proxy-session", "px-1111"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "ambiguous" in err
