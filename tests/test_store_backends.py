"""The store on both databases: every test here runs on an SQLite file and on a real
PostgreSQL server (``tests/pgserver.py``: Debian's package, ``initdb`` in a temporary folder,
loopback only), through the same :class:`Store` and the same SQL.

What must hold on both: the named migrations, the append-only event log, call records
replaced by index, IDs taken by a unique start and never as patterns, the single-writer
lease (two processes racing for one session: one wins, one gets the clear refusal), the
proxy's tables, the recovery file, several processes appending to different sessions at
once, and every command that takes ``--db`` given a ``postgresql://`` URL. PostgreSQL's own
failures (no server, a server that never answers, a missing database, a dropped connection,
no psycopg) are one line each, with the password never printed.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ctxwright import Harness
from ctxwright.cli.main import main
from ctxwright.core.events import UserEvent
from ctxwright.core.messages import canonical_json, user
from ctxwright.core.records import CallRecord
from ctxwright.errors import AmbiguousSessionId, SessionInUse, SessionNotFound, StoreUnusable
from ctxwright.proxy.store import ProxyLog
from ctxwright.store.lease import acquire
from ctxwright.store.migrations import MIGRATIONS, SCHEMA_VERSION
from ctxwright.store.recovery import import_pending
from ctxwright.store.sessions import LeaseRow, Store
from fakeserver import FakeOpenAIServer as F

HERE = Path(__file__).parent
SRC = HERE.parent / "src"


def _user(seq: int, text: str) -> UserEvent:
    return UserEvent(seq=seq, created_at=time.time(), message=user(text))


def _session(store: Store, sid: str | None = None, n: int = 3) -> str:
    sid = store.create_session({"system_prompt": "S", "tools": []}, "0" * 64, backend="b", model="m", session_id=sid)
    for i in range(n):
        store.append_event(sid, _user(i, f"message {i}"))
    return sid


# -- the schema and the event log -------------------------------------------------------------------


def test_the_schema_is_the_same_named_migrations_on_both(any_store: Store) -> None:
    assert any_store.schema() == (SCHEMA_VERSION, [fn.__name__ for fn in MIGRATIONS])
    again = Store(any_store.target)  # opening a migrated store applies nothing
    assert again.schema() == any_store.schema()
    again.close()


def test_events_round_trip_in_order_and_a_seq_is_written_once(any_store: Store) -> None:
    sid = _session(any_store, n=5)
    events = any_store.events(sid)
    assert [e.seq for e in events] == list(range(5))
    assert [e.message.content for e in events if isinstance(e, UserEvent)] == [f"message {i}" for i in range(5)]
    assert events[0].created_at == pytest.approx(time.time(), abs=60)  # a full double: microseconds kept
    with pytest.raises(StoreUnusable, match=r"already holds that row.*another process wrote to the same session"):
        any_store.append_event(sid, _user(4, "a second event 4"))
    assert [e.message.content for e in any_store.events(sid) if isinstance(e, UserEvent)][-1] == "message 4"


def test_sessions_list_resolve_and_children(any_store: Store) -> None:
    a = _session(any_store, "abc111")
    b = _session(any_store, "abc222")
    child = any_store.create_session({"system_prompt": "C", "tools": []}, "1" * 64, parent_id=a, session_id="kid1")
    catalog = UserEvent(seq=0, created_at=time.time(), message=user("<skills/>"))
    any_store.create_session({"system_prompt": "S", "tools": []}, "2" * 64, session_id="zcat")
    any_store.append_event("zcat", catalog)
    any_store.append_event("zcat", _user(1, "the real question"))
    assert any_store.resolve("abc1") == a and any_store.resolve(b) == b
    with pytest.raises(AmbiguousSessionId, match=r"2 sessions .* start with it"):
        any_store.resolve("abc")
    for pattern in ("%", "_bc111", "abc_11"):
        with pytest.raises(SessionNotFound):
            any_store.resolve(pattern)
    assert any_store.children(a) == [child]
    listed = {r["id"]: r for r in any_store.list_sessions()}
    assert set(listed) == {a, b, "zcat"} and listed[a]["events"] == 3 and listed[a]["first_user"] == "message 0"
    assert len(any_store.list_sessions(include_children=True)) == 4
    assert any_store.get_session("abc2").prefix == {"system_prompt": "S", "tools": []}
    any_store.update_meta(a, {"k": [1, 2]})
    assert any_store.get_session(a).meta == {"k": [1, 2]}


def test_a_call_record_is_replaced_by_its_index_and_its_error_redacted(any_store: Store) -> None:
    sid = _session(any_store)
    base = {"session_id": sid, "request_sha256": "a" * 64, "request_bytes": 10, "prefix_sha256": "0" * 64}
    any_store.record_call(CallRecord.from_dict({**base, "call_index": 0, "prompt_tokens": 5}))
    any_store.record_call(
        CallRecord.from_dict({**base, "call_index": 0, "prompt_tokens": 7, "error": "at https://u:pw@h/v1"})
    )
    any_store.record_call(CallRecord.from_dict({**base, "call_index": 1, "prompt_tokens": 9}))
    calls = any_store.calls(sid)
    assert [(c.call_index, c.prompt_tokens) for c in calls] == [(0, 7), (1, 9)]
    assert calls[0].error == "at https://***@h/v1"


def test_attention_maps_are_kept_per_call(any_store: Store) -> None:
    sid = _session(any_store)
    any_store.save_attention(sid, 2, {"v": 1})
    any_store.save_attention(sid[:4], 2, {"v": 2})
    any_store.save_attention(sid, 0, {"v": 0})
    assert any_store.attention_maps(sid) == [(0, {"v": 0}), (2, {"v": 2})]


# -- one writer per session -------------------------------------------------------------------------


def test_the_lease_rules(any_store: Store) -> None:
    sid = _session(any_store)
    mine = acquire(any_store, sid)
    other = Store(any_store.target)
    with pytest.raises(SessionInUse, match=f"session {sid} is being run by process {os.getpid()}"):
        _refused(other, sid)
    mark = any_store.lease_mark()
    other.release_lease(sid, mine.row.holder)  # another connection wrote
    assert any_store.lease_mark() != mark
    assert any_store.lease(sid) is None
    mine.check()  # released by someone else: taken back
    assert any_store.lease(sid) is not None and any_store.lease(sid).holder == mine.row.holder  # type: ignore[union-attr]
    mine.release()
    assert other.lease(sid) is None
    other.close()


def _refused(store: Store, sid: str) -> None:
    row = LeaseRow(sid, "someone-else", os.getpid() + 1, "far-host", None, time.time())
    standing = store.acquire_lease(row, lambda o: False)
    if standing is not None:
        from ctxwright.store.lease import _busy_message

        raise SessionInUse(_busy_message(sid, standing))


RACER = """
import sys, time
sys.path.insert(0, sys.argv[1])
from ctxwright.errors import SessionInUse
from ctxwright.store.lease import acquire
from ctxwright.store.sessions import Store
store = Store(sys.argv[2])
print("ready", flush=True)
sys.stdin.readline()
try:
    lease = acquire(store, sys.argv[3])
    print("won", flush=True)
    time.sleep(1.0)
    lease.release()
except SessionInUse as exc:
    print("refused", str(exc).splitlines()[0], flush=True)
"""


@pytest.mark.slow
def test_two_processes_racing_for_one_session_one_wins(db_target: str, tmp_path: Path) -> None:
    store = Store(db_target)
    script = tmp_path / "racer.py"
    script.write_text(RACER)
    for round_ in range(3):
        sid = _session(store, f"race{round_}")
        procs = [
            subprocess.Popen(
                [sys.executable, str(script), str(SRC), db_target, sid],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready", p.communicate()[1]
        for p in procs:  # both asked at once
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        outs = [p.communicate(timeout=60) for p in procs]
        said = sorted(o[0].split()[0] for o in outs)
        assert said == ["refused", "won"], outs
        refusal = next(o[0] for o in outs if o[0].startswith("refused"))
        assert f"session {sid} is being run by process" in refusal and "--take-over" in refusal
        assert store.lease(sid) is None
    store.close()


WRITER = """
import sys, time
sys.path.insert(0, sys.argv[1])
from ctxwright.core.events import UserEvent
from ctxwright.core.messages import user
from ctxwright.store.sessions import Store
store = Store(sys.argv[2])
sid = store.create_session({"system_prompt": "S", "tools": []}, "0" * 64, session_id=sys.argv[3])
for i in range(int(sys.argv[4])):
    store.append_event(sid, UserEvent(seq=i, created_at=time.time(), message=user(f"{sid} {i}")))
print("done", flush=True)
"""


@pytest.mark.slow
def test_several_processes_append_to_different_sessions_at_once(db_target: str, tmp_path: Path) -> None:
    Store(db_target).close()  # migrated before the writers start, as a deployment would
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    n, each = 4, 150
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(SRC), db_target, f"w{i}", str(each)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(n)
    ]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0 and out.strip() == "done", err
    store = Store(db_target)
    for i in range(n):
        events = store.events(f"w{i}")
        assert [e.seq for e in events] == list(range(each))
        assert all(isinstance(e, UserEvent) and e.message.content == f"w{i} {e.seq}" for e in events)
    store.close()


# -- the proxy's tables and the recovery file ----------------------------------------------------------


def test_proxy_sessions_and_exchanges(any_store: Store) -> None:
    log = ProxyLog(any_store)
    sid = log.create_session(grouped_by="user", group_key="alice", api="chat", upstream="https://k:s@up/v1")
    assert log.find_session("user", "alice") == sid and log.find_session("user", "bob") is None
    body = bytes(range(256))  # bodies are bytes, every value kept
    ids = [
        log.record_exchange(
            {
                "session_id": sid,
                "call_index": k,
                "started_at": time.time(),
                "method": "POST",
                "path": "/v1/chat/completions?key=SECRET-1&x=\x00",
                "streamed": True,
                "outcome": "ok",
                "request_bytes": len(body),
                "request_sha256": "f" * 64,
                "request_body": body,
                "audit_json": "{}",
            }
        )
        for k in range(3)
    ]
    assert ids == sorted(ids) and len(set(ids)) == 3
    rows = log.exchange_rows(sid)
    assert [r["call_index"] for r in rows] == [0, 1, 2]
    assert bytes(rows[0]["request_body"]) == body and rows[0]["streamed"] == 1
    assert "SECRET-1" not in rows[0]["path"] and rows[0]["path"].startswith("/v1/chat/completions?key=***")
    assert log.call_count(sid) == 3
    assert [r["id"] for r in log.session_rows()] == [sid] and log.session_rows(limit=0) == []
    assert log.session_row(sid[:5])["upstream"] == "https://***@up/v1"


def test_the_recovery_file_is_imported_on_resume(any_store: Store) -> None:
    sid = _session(any_store, n=2)
    log = any_store.recovery_log(sid)
    path = log.save_event(sid, _user(2, "kept while the store refused"))
    assert path.parent == any_store.recovery_dir and path.exists()
    assert import_pending(any_store, sid) == 1
    assert [e.seq for e in any_store.events(sid)] == [0, 1, 2] and not path.exists()


# -- the commands, given a postgresql:// URL ----------------------------------------------------------


def test_run_resume_sessions_show_export_report_on_postgresql(
    pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with F([F.reply_text("first answer"), F.reply_text("second answer")]) as srv:
        with Harness(backend="openai", model="fake", base_url=srv.url, db=pg_url, todo=False, delegate=False) as h:
            h.run("first question")
            sid = h.session_id
        assert main(["--db", pg_url, "run", "--resume", sid[:6], "--base-url", srv.url, "second question"]) == 0
    out = capsys.readouterr().out
    assert "second answer" in out
    assert main(["--db", pg_url, "sessions"]) == 0
    listing = capsys.readouterr().out
    assert sid in listing and "postgresql://" in listing
    assert main(["--db", pg_url, "show", sid, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    texts = json.dumps(shown)
    assert "first question" in texts and "second answer" in texts
    assert main(["--db", pg_url, "export", sid]) == 0
    exported = json.loads(capsys.readouterr().out)
    assert exported["session"]["id"] == sid if "session" in exported else exported["id"] == sid
    report = tmp_path / "r.html"
    assert main(["--db", pg_url, "report", sid, "-o", str(report)]) == 0
    assert sid in report.read_text()


def test_a_proxy_session_is_audited_from_postgresql(pg_url: str, upstream: Any, capsys: Any) -> None:
    import openai

    from ctxwright.proxy.serve import RecordingProxy
    from ctxwright.proxy.server import ProxyConfig

    store = Store(pg_url)
    with RecordingProxy.start(ProxyConfig(upstream=upstream.url), store, printer=lambda _l: None) as proxy:
        client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-test-0123456789", max_retries=0)
        msgs: list[Any] = [{"role": "system", "content": "S"}, {"role": "user", "content": "q"}]
        client.chat.completions.create(model="m", messages=msgs, user="alice")
        msgs += [{"role": "assistant", "content": "a"}, {"role": "user", "content": "q2"}]
        client.chat.completions.create(model="m", messages=msgs, user="alice")
        assert proxy.recorder.wait_idle(60, at_least=2)
    sid = ProxyLog(store).find_session("user", "alice")
    assert sid is not None
    assert main(["audit", "--proxy-session", sid, "--json", "--db", pg_url]) == 0
    audit = json.loads(capsys.readouterr().out)
    assert audit["summary"]["requests"] == 2 and audit["summary"]["reusable_tokens"] > 0
    store.close()


# -- PostgreSQL's own failures ----------------------------------------------------------------------


def _one_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_no_server_is_one_line_without_the_password(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    url = f"postgresql://alice:HUNTER2-secret@127.0.0.1:{port}/db"
    assert main(["--db", url, "sessions"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "cannot reach the PostgreSQL store at postgresql://***@127.0.0.1" in line and "Start the server" in line
    assert "HUNTER2" not in line


def test_a_server_that_never_answers_is_given_up_on_in_bounded_time() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # accepts (the kernel does), never speaks
    port = listener.getsockname()[1]
    t0 = time.monotonic()
    try:
        with pytest.raises(StoreUnusable, match="cannot reach the PostgreSQL store"):
            Store(f"postgresql://u:pw@127.0.0.1:{port}/db?connect_timeout=2")
    finally:
        listener.close()
    assert time.monotonic() - t0 < 30


def test_a_missing_database_says_create_it(pg_server: Any) -> None:
    with pytest.raises(StoreUnusable, match=r"does not exist\. Create it first \(createdb NAME"):
        Store(pg_server.url("no_such_db"))


def test_a_malformed_url_is_one_line() -> None:
    with pytest.raises(StoreUnusable, match="not a PostgreSQL URL psycopg can read"):
        Store("postgresql://u:pw@[::1/db")


def test_without_psycopg_the_line_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(StoreUnusable, match=r"pip install 'ctxwright\[postgres\]'"):
        Store("postgresql://u:pw@127.0.0.1:1/db")


def test_a_dropped_connection_fails_one_write_and_the_next_reconnects(pg_server: Any, pg_url: str) -> None:
    store = Store(pg_url)
    sid = _session(store, n=1)
    pid = store.db.fetchone("SELECT pg_backend_pid() AS pid")["pid"]
    pg_server.psql(f"SELECT pg_terminate_backend({pid})")
    with pytest.raises(StoreUnusable) as failed:
        store.append_event(sid, _user(1, "meets the dropped connection"))
    assert "\n" not in str(failed.value)
    store.append_event(sid, _user(1, "after reconnecting"))
    assert [e.message.content for e in store.events(sid) if isinstance(e, UserEvent)] == [
        "message 0",
        "after reconnecting",
    ]
    store.close()


# -- kill -9 on one machine, resume from another process ---------------------------------------------


@pytest.mark.slow
def test_a_killed_agent_resumes_from_another_process_byte_identically(pg_url: str, tmp_path: Path) -> None:
    release = threading.Event()

    def respond(req: dict[str, Any]) -> Any:
        if any(m.get("content") == "from A" for m in req["messages"]) and not release.is_set():
            release.wait(60)  # A waits here for its reply until it is killed
            return F.reply_text("never read")
        return F.reply_text("answer after the kill")

    with F([F.reply_text("hello")], fallback=respond) as srv:
        with Harness(backend="openai", model="fake", base_url=srv.url, db=pg_url, todo=False, delegate=False) as h:
            h.run("first")
            sid = h.session_id
        env = {**os.environ, "PYTHONPATH": str(SRC), "NO_PROXY": "127.0.0.1"}
        here_a, here_b = tmp_path / "machine-a", tmp_path / "machine-b"
        here_a.mkdir()
        here_b.mkdir()
        cmd = [sys.executable, "-m", "ctxwright.cli.main", "--db", pg_url, "run", "--base-url", srv.url]
        a = subprocess.Popen([*cmd, "--resume", sid, "from A"], cwd=here_a, env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        deadline = time.monotonic() + 60
        while not any(m.get("content") == "from A" for r in srv.requests for m in r["messages"]):
            assert time.monotonic() < deadline and a.poll() is None, a.communicate()
            time.sleep(0.05)
        a.kill()
        a.wait()
        release.set()
        b = subprocess.run([*cmd, "--resume", sid, "from B"], cwd=here_b, env=env, text=True,
                           capture_output=True, timeout=120)  # fmt: skip
        assert b.returncode == 0, b.stderr
        assert "answer after the kill" in b.stdout
        sent_a = next(r for r in srv.requests if any(m.get("content") == "from A" for m in r["messages"]))
        sent_b = srv.requests[-1]
    # everything A sent is sent again by B byte for byte -- but for A's status block, which is
    # computed afresh for each call and never stored -- then what happened since
    assert "<agent_status>" in sent_a["messages"][-1]["content"]
    a_bytes = [canonical_json(m) for m in sent_a["messages"][:-1]]
    b_bytes = [canonical_json(m) for m in sent_b["messages"]]
    assert b_bytes[: len(a_bytes)] == a_bytes and len(a_bytes) >= 4
    assert canonical_json(sent_b.get("tools")) == canonical_json(sent_a.get("tools"))
    assert sent_b["messages"][-1]["content"].endswith("from B") or any(
        m.get("content") == "from B" for m in sent_b["messages"]
    )
    store = Store(pg_url)
    events = store.events(sid)
    assert [e.seq for e in events] == list(range(len(events)))
    assert store.lease(sid) is None
    store.close()


def test_processes_meeting_a_new_key_at_once_make_one_session(db_target: str) -> None:
    """Two proxy processes that see a key's first request at the same moment: one session."""
    stores = [Store(db_target) for _ in range(4)]
    barrier = threading.Barrier(len(stores))
    got: list[tuple[str, bool]] = []

    def place(store: Store) -> None:
        barrier.wait()
        got.append(ProxyLog(store).keyed_session("user", "alice", api="chat", upstream="http://up"))

    threads = [threading.Thread(target=place, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({sid for sid, _new in got}) == 1 and sum(new for _sid, new in got) == 1
    assert len(ProxyLog(stores[0]).session_rows()) == 1
    for s in stores:
        s.close()


def test_a_request_is_placed_by_the_longest_earlier_request_it_extends(any_store: Store) -> None:
    log = ProxyLog(any_store)
    a = log.create_session(grouped_by="continuity", group_key=None, api="chat", upstream="http://up")
    b = log.create_session(grouped_by="continuity", group_key=None, api="chat", upstream="http://up")
    log.add_head("h1", a)
    log.add_head("h3", b)
    assert log.head_session(["h0", "h1", "h2", "h3", "h4"]) == b and log.head_session(["h0", "h1", "h2"]) == a
    many = [f"x{i}" for i in range(1_200)] + ["h1"]  # more hashes than one statement takes
    assert log.head_session(many) == a and log.head_session(["nothing"]) is None
    log.add_response("resp_1", a)
    assert log.response_session("resp_1") == a and log.response_session("resp_2") is None


def test_a_server_that_freezes_mid_session_is_given_up_on_and_nothing_recorded_is_lost(pg_url: str) -> None:
    """A server process that stops (SIGSTOP) while its host still acknowledges the packets:
    neither PostgreSQL's timeouts nor TCP's fire; the store's watchdog does, within its limit."""
    import signal

    from ctxwright.store.postgres import stall_limit

    store = Store(pg_url, wait_s=1.0)
    sid = _session(store, n=2)
    pid = int(store.db.fetchone("SELECT pg_backend_pid() AS pid")["pid"])
    os.kill(pid, signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        with pytest.raises(StoreUnusable, match=r"stopped answering \(it did not answer for 6 s\)"):
            store.append_event(sid, _user(2, "meets the frozen server"))
    finally:
        os.kill(pid, signal.SIGCONT)
    assert time.monotonic() - t0 < stall_limit(1.0) + 10
    # Like any write whose answer was lost, it may have been stored after all: the thawed server
    # reads the statement that waited in its socket. The session's recovery file (which the
    # harness writes on this error) skips what is stored (store/recovery.py). Either way the
    # next write goes through on a new connection, after what is stored.
    seqs = [e.seq for e in store.events(sid)]
    assert seqs in ([0, 1], [0, 1, 2])
    store.append_event(sid, _user(len(seqs), "after it thawed"))
    assert [e.seq for e in store.events(sid)] == [*seqs, len(seqs)]
    store.close()
