"""Faults: interrupted tool rounds, kill -9 at any moment, two processes on one session, a
database locked for longer than SQLite's 5 s, a reply the store cannot take.

Everything runs for real: the loopback OpenAI server (``tests/fakeserver.py``) rejects
unpaired tool messages with OpenAI's own 400, the children are real processes killed with
SIGKILL, and the database is a real SQLite file another process locks.
"""

from __future__ import annotations

import json
import os
import queue
import random
import select
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ctxwright import Harness, tool
from ctxwright.backends.openai_compat import OpenAIBackend
from ctxwright.core.events import CompactionEvent, ToolEvent, UserEvent
from ctxwright.core.messages import Message, ToolCall
from ctxwright.core.request import ChatRequest
from ctxwright.core.session import Session
from ctxwright.errors import BackendError
from ctxwright.store.sessions import Store
from fakeserver import FakeOpenAIServer as F
from fakeserver import pairing_error

HERE = Path(__file__).parent
SRC = HERE.parent / "src"


@tool
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"{topic}: found"


def _served(url: str, db: Path, **kw: Any) -> Harness:
    return Harness(
        tools=[lookup],
        backend="openai",
        model="fake",
        base_url=url,
        db=db,
        status=False,
        todo=False,
        delegate=False,
        read_result=False,
        recall=False,
        **kw,
    )


# -- the loopback server says no exactly as OpenAI does ------------------------------------------


def _tc(cid: str) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": "lookup", "arguments": "{}"}}


def test_the_loopback_server_rejects_unpaired_tool_messages_with_openais_400():
    sys_m = {"role": "system", "content": "S"}
    user = {"role": "user", "content": "q"}
    asked = {"role": "assistant", "content": None, "tool_calls": [_tc("c1"), _tc("c2")]}
    one = {"role": "tool", "tool_call_id": "c1", "content": "a"}
    two = {"role": "tool", "tool_call_id": "c2", "content": "b"}
    assert pairing_error([sys_m, user, asked, one, two, user]) is None
    unanswered = pairing_error([sys_m, user, asked, one, user])
    assert unanswered == {
        "error": {
            "message": "An assistant message with 'tool_calls' must be followed by tool messages responding to "
            "each 'tool_call_id'. The following tool_call_ids did not have response messages: c2",
            "type": "invalid_request_error",
            "param": "messages.[4].role",
            "code": None,
        }
    }
    assert pairing_error([sys_m, user, asked, one])["error"]["param"] == "messages.[4].role"  # cut at the end
    for orphan in ([sys_m, user, one], [sys_m, user, asked, one, two, two], [sys_m, user, asked, one, two, user, two]):
        err = pairing_error(orphan)
        assert err is not None and err["error"]["message"].startswith(
            "Invalid parameter: messages with role 'tool' must be a response to a preceeding message"
        )
    # over HTTP, through the SDK: the provider's 400 as a BackendError, no scripted reply used
    with F([F.reply_text("never sent")]) as srv:
        backend = OpenAIBackend(model="fake", base_url=srv.url)
        req = ChatRequest(
            messages=(
                Message(role="system", content="S"),
                Message(role="user", content="q"),
                Message(role="assistant", tool_calls=(ToolCall("c1", "lookup", "{}"),)),
            )
        )
        with pytest.raises(BackendError, match="did not have response messages: c1"):
            backend.complete(req)
        assert srv.pending == 1 and len(srv.rejected) == 1


# -- an interrupted tool round -------------------------------------------------------------------


def _crashed_round(db: Path) -> str:
    """A session as a kill during its second tool call leaves it: the reply asking for c1 and
    c2 is stored, c1's result is stored, c2's never was."""
    with F([F.reply_text("hello")]) as first, _served(first.url, db) as h:
        h.run("hi")
        sid = h.session_id
    store = Store(db)
    s = Session.resume(store, sid)
    s.add_user("look up a and b")
    calls = (ToolCall("c1", "lookup", '{"topic":"a"}'), ToolCall("c2", "lookup", '{"topic":"b"}'))
    s.add_assistant(Message(role="assistant", tool_calls=calls), call_index=1, finish_reason="tool_calls")
    s.add_tool_result("c1", "a: found", tool_name="lookup")
    store.close()
    return sid


def test_an_interrupted_tool_round_is_answered_before_the_next_request(tmp_path):
    db = tmp_path / "c.db"
    sid = _crashed_round(db)
    with F([F.reply_text("b was interrupted; shall I look it up again?")]) as srv:
        with Harness.resume(sid, tools=[lookup], db=db, base_url=srv.url) as h:
            result = h.run("what did you find?")
        assert srv.rejected == [] and result.stop_reason == "final_answer", result.error
        sent = srv.requests[0]["messages"]
    roles = [(m["role"], m.get("tool_call_id")) for m in sent[-4:]]
    assert roles == [("assistant", None), ("tool", "c1"), ("tool", "c2"), ("user", None)]
    answer = json.loads(sent[-2]["content"])["error"]
    assert (
        answer["type"] == "interrupted"
        and answer["tool"] == "lookup"
        and "may have partially run" in (answer["message"])
    )
    stored = Store(db).events(sid)
    (ev,) = [e for e in stored if isinstance(e, ToolEvent) and e.message.tool_call_id == "c2"]
    assert ev.interrupted and not ev.ok and ev.error_type == "interrupted"
    assert [e.seq for e in stored] == list(range(len(stored)))  # every event kept, in order
    with F([F.reply_text("ok")]) as srv, Harness.resume(sid, tools=[lookup], db=db, base_url=srv.url) as h:
        assert h.run("thanks").stop_reason == "final_answer"  # and it stays answered: nothing added twice
        assert srv.rejected == [] and sum(1 for m in srv.requests[0]["messages"] if m["role"] == "tool") == 2


def test_a_round_left_open_by_an_older_release_is_shown_as_interrupted(tmp_path):
    """The older release appended the follow-up after the open round (then got the 400):
    an answer appended now would not follow its call, so the round is hidden behind a note."""
    db = tmp_path / "c.db"
    sid = _crashed_round(db)
    store = Store(db)
    s = Session.resume(store, sid)
    s.add_user("what did you find?")  # the follow-up the provider rejected
    store.close()
    with F([F.reply_text("Sorry, the lookup was interrupted.")]) as srv:
        with Harness.resume(sid, tools=[lookup], db=db, base_url=srv.url) as h:
            assert h.run("hello?").stop_reason == "final_answer"
        assert srv.rejected == []
        sent = srv.requests[0]["messages"]
    assert not any(m["role"] == "tool" for m in sent)
    note = next(m["content"] for m in sent if "interrupted" in (m.get("content") or ""))
    assert "lookup (c1), lookup (c2)" not in note and "lookup (c2)" in note
    stored = Store(db).events(sid)
    assert any(isinstance(e, CompactionEvent) and e.layer.startswith("interrupted:") for e in stored)
    assert sum(isinstance(e, UserEvent) for e in stored) == 4  # nothing removed from the record


# -- kill -9 at random moments, a hundred times ---------------------------------------------------


@dataclass
class KillStats:
    kills: int = 0
    by_phase: dict[str, int] = field(default_factory=dict)
    corrupt: int = 0
    lost: int = 0
    acked: int = 0
    resumed: int = 0
    not_resumable: list[str] = field(default_factory=list)
    finished_before_kill: dict[str, int] = field(default_factory=dict)
    final_runs_ok: int = 0


class Killer:
    """Drives ``tests/faults_driver.py``: forks a child per run, kills it in a chosen phase."""

    PHASES = ("call", "tool", "compaction", "any")

    def __init__(self, tmp: Path, url: str, events: queue.Queue[tuple[str, float, float]]) -> None:
        self.tmp = tmp
        self.url = url
        self.events = events
        env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{HERE}"}
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "faults_driver.py"), "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"
        self.db = tmp / "kills.db"
        self.n = 0
        self._pending_exit: dict[str, Any] | None = None

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)

    def _line(self, timeout: float) -> dict[str, Any] | None:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        return json.loads(self.proc.stdout.readline()) if ready else None

    def start(self, resume: str | None, prompt: str) -> tuple[int, Path]:
        self.n += 1
        ack = self.tmp / f"ack-{self.n}"
        cmd = {"db": str(self.db), "url": self.url, "resume": resume, "prompt": prompt, "ack": str(ack)}
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        started = self._line(30)
        assert started is not None
        while not self.events.empty():  # what earlier children left in flight
            self.events.get_nowait()
        return int(started["pid"]), ack

    def wait(self, pid: int, timeout: float = 60) -> int:
        done = self._line(timeout)
        assert done is not None and done["pid"] == pid, f"child {pid} did not finish within {timeout} s"
        return int(done["status"])

    def kill_in(self, pid: int, ack: Path, phase: str) -> str | None:
        """Kill ``pid`` at a random moment of ``phase``; the phase it was killed in, or None if
        it finished first (then it was reaped and is not killed)."""
        deadline = time.monotonic() + 20
        at: float | None = None
        hit = phase
        if phase == "any":
            at = time.monotonic() + random.uniform(0.0, 1.0)
        while at is None and time.monotonic() < deadline:
            try:
                kind, start, end = self.events.get(timeout=0.005)
                if (phase, kind) in (("call", "call"), ("compaction", "summary")):
                    at = random.uniform(start, max(start, end - 0.005))
            except queue.Empty:
                pass
            if phase == "tool" and at is None and "tool+" in _read(ack):
                at = time.monotonic() + random.uniform(0.0, 0.04)
            if self._finished():
                return None
        while at is not None and time.monotonic() < at:
            if self._finished():
                return None
            time.sleep(0.002)
        if self._finished():
            return None
        os.kill(pid, signal.SIGKILL)
        status = self.wait(pid, 30)
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
            # on a loaded machine the run can end between the last check and the kill (the signal
            # then reaches a zombie): a finished run, counted as such, not a kill
            return None
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
        return hit

    def _finished(self) -> bool:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 0)
        if ready:
            self._pending_exit = json.loads(self.proc.stdout.readline())
            return True
        return False


def _read(p: Path) -> str:
    try:
        return p.read_text()
    except FileNotFoundError:
        return ""


def _check_after_kill(db: Path, sid: str, ack: Path, stats: KillStats) -> None:
    con = sqlite3.connect(db)
    try:
        if con.execute("PRAGMA integrity_check").fetchall() != [("ok",)]:
            stats.corrupt += 1
        stored = [r[0] for r in con.execute("SELECT seq FROM events WHERE session_id=? ORDER BY seq", (sid,))]
    finally:
        con.close()
    acked = {int(line.split()[1]) for line in _read(ack).splitlines() if line.startswith("seq ")}
    stats.acked += len(acked)
    stats.lost += len(acked - set(stored))
    assert stored == list(range(len(stored))), "the events of a session are numbered without gaps"


@pytest.mark.slow
def test_a_hundred_kills_lose_nothing_and_every_session_resumes(tmp_path, capsys):
    sessions, kills_each = 5, 20
    rnd = random.Random(11)
    inflight: queue.Queue[tuple[str, float, float]] = queue.Queue()

    def respond(req: dict[str, Any]) -> Any:
        msgs = req["messages"]
        now = time.monotonic()
        if msgs[0]["content"].startswith("You compress text"):  # the LLM compaction's own request
            delay = rnd.uniform(0.03, 0.2)
            inflight.put(("summary", now, now + delay))
            return F.reply_text("Summary: lookups and reports so far; nothing unusual.", delay_s=delay)
        delay = rnd.uniform(0.02, 0.15)
        inflight.put(("call", now, now + delay))
        last_user = max(i for i, m in enumerate(msgs) if m["role"] == "user" and "<agent_status>" not in m["content"])
        rounds = sum(1 for m in msgs[last_user:] if m["role"] == "assistant" and m.get("tool_calls"))
        if rounds >= 2:
            return F.reply_text("Done: every topic looked up.", delay_s=delay)
        calls = [
            {"id": f"call_{uuid.uuid4().hex[:10]}", "type": "function", "function": {"name": name, "arguments": a}}
            for name, a in (("lookup", '{"topic":"tides"}'), ("report", '{"topic":"tides"}'))
        ]
        body = F.completion_body({"content": None, "tool_calls": calls}, finish_reason="tool_calls")
        return F.reply_json(body, delay_s=delay)

    stats = KillStats()
    t0 = time.monotonic()
    with F(fallback=respond) as srv:
        k = Killer(tmp_path, srv.url, inflight)
        try:
            for s in range(sessions):
                pid, ack = k.start(None, f"Look up the tides, session {s}.")
                assert k.wait(pid) == 0, _read(Path(f"{ack}.err"))
                sid = next(line.split()[1] for line in _read(ack).splitlines() if line.startswith("session "))
                done = 0
                while done < kills_each:
                    phase = Killer.PHASES[done % len(Killer.PHASES)]
                    pid, ack = k.start(sid, f"Follow-up {done} of session {s}.")
                    hit = k.kill_in(pid, ack, phase)
                    notes = _read(ack)
                    stats.resumed += "session " in notes  # Harness.resume returned (it may be killed later)
                    if hit is None:  # it finished before the kill: it must have finished well
                        stats.finished_before_kill[phase] = stats.finished_before_kill.get(phase, 0) + 1
                        assert sum(stats.finished_before_kill.values()) < 200, "the phases to kill in never came"
                        if "stop final_answer" not in notes:
                            pytest.fail(
                                f"session {sid} did not resume after a kill: {notes} {_read(Path(f'{ack}.err'))}"
                            )
                        continue
                    stats.kills += 1
                    stats.by_phase[phase] = stats.by_phase.get(phase, 0) + 1
                    done += 1
                    _check_after_kill(k.db, sid, ack, stats)
                pid, ack = k.start(sid, "Final follow-up: how many topics?")
                if k.wait(pid) == 0 and "stop final_answer" in _read(ack):
                    stats.final_runs_ok += 1
                else:
                    stats.not_resumable.append(_read(ack) + _read(Path(f"{ack}.err")))
        finally:
            k.close()
        rejected = list(srv.rejected)
    elapsed = time.monotonic() - t0
    con = sqlite3.connect(k.db)
    kinds = dict(con.execute("SELECT kind, COUNT(*) FROM events GROUP BY kind").fetchall())
    interrupted = con.execute("SELECT COUNT(*) FROM events WHERE payload_json LIKE '%\"interrupted\":true%'").fetchone()
    con.close()
    figures = {
        "kills": stats.kills,
        "kills_by_phase": stats.by_phase,
        "corrupt_databases": stats.corrupt,
        "acknowledged_events": stats.acked,
        "acknowledged_events_lost": stats.lost,
        "runs_that_resumed_the_killed_session": stats.resumed + stats.final_runs_ok,
        "resumes_refused_by_the_server": len(rejected),
        "runs_that_finished_before_their_kill": stats.finished_before_kill,
        "final_runs_completed": f"{stats.final_runs_ok}/{sessions}",
        "interrupted_answers_recorded": interrupted[0],
        "events_by_kind": kinds,
        "seconds": round(elapsed, 1),
    }
    with capsys.disabled():
        print("\nkill -9 figures: " + json.dumps(figures))
    assert stats.kills == sessions * kills_each
    assert all(stats.by_phase.get(p, 0) > 0 for p in ("call", "tool", "compaction"))
    assert stats.corrupt == 0 and stats.lost == 0
    assert rejected == [] and stats.not_resumable == [] and stats.final_runs_ok == sessions
    assert interrupted[0] > 0


# -- one writer per session -------------------------------------------------------------------------


def _cli(db: Path | str, *argv: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``ctxwright --db DB ARGV...`` in its own process."""
    full = {**os.environ, "PYTHONPATH": str(SRC), "NO_PROXY": "127.0.0.1", **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "ctxwright.cli.main", "--db", str(db), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full,
    )


def _session(db: Path | str, url: str) -> str:
    """A session the command line can resume: the demo tools (it has no ``--tool`` here)."""
    with Harness(backend="openai", model="fake", base_url=url, db=db, todo=False, delegate=False) as h:
        h.run("first")
        return h.session_id


def _ctrl_c_restored() -> None:
    """``preexec_fn``: SIGINT back to its default in the child. A shell starts background jobs
    (``nohup pytest ... &``) with SIGINT ignored, children inherit that, and Python installs its
    ``KeyboardInterrupt`` handler only where SIGINT is at its default -- a Ctrl-C test would then
    test nothing but the ignored signal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_for(what: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _asked(srv: F, text: str) -> bool:
    return any(m.get("content") == text for r in srv.requests for m in r["messages"])


@pytest.mark.slow
def test_two_processes_on_one_session_the_second_is_refused_and_nothing_is_lost(db_target):
    db = db_target  # an SQLite file, then a PostgreSQL database (tests/conftest.py)

    b_done = threading.Event()

    def respond(req: dict[str, Any]) -> Any:
        # A's reply is held until B has exited, so B meets A's lease however slowly it starts on a
        # loaded machine (a fixed delay let A finish first and B then rightly ran). A B that was
        # wrongly let through is answered at once, and the assertion below catches it.
        if not any(m.get("content") == "from B" for m in req["messages"]):
            b_done.wait(60)
        return F.reply_text("the answer to A")

    with F([F.reply_text("hello")], fallback=respond) as srv:
        sid = _session(db, srv.url)
        a = _cli(db, "run", "--resume", sid, "from A")
        try:
            _wait_for(lambda: _asked(srv, "from A"))  # A holds the session and waits for its reply
            b = _cli(db, "run", "--resume", sid, "from B")
            _b_out, b_err = b.communicate(timeout=60)
        finally:
            b_done.set()
        _a_out, a_err = a.communicate(timeout=60)
        assert not _asked(srv, "from B")
    assert a.returncode == 0, a_err
    assert b.returncode == 2
    line = _one_line(b_err)
    assert f"session {sid} is being run by process {a.pid} on host " in line and ", since " in line
    assert "--take-over" in line and "IntegrityError" not in b_err
    events = Store(db).events(sid)
    contents = [e.message.content for e in events if hasattr(e, "message")]
    assert "from A" in contents and "the answer to A" in contents and "from B" not in contents
    assert [e.seq for e in events] == list(range(len(events)))
    assert Store(db).lease(sid) is None  # released when A closed


@pytest.mark.slow
def test_the_lease_of_a_killed_process_is_taken_over(db_target):
    db = db_target  # an SQLite file, then a PostgreSQL database (tests/conftest.py)
    with F([F.reply_text("hello"), F.reply_text("never read", delay_s=30), F.reply_text("after the kill")]) as srv:
        sid = _session(db, srv.url)
        a = _cli(db, "run", "--resume", sid, "from A")
        _wait_for(lambda: _asked(srv, "from A"))
        lease = Store(db).lease(sid)
        assert lease is not None and lease.pid == a.pid
        a.kill()  # SIGKILL: nothing runs to release the lease
        a.wait()
        b = _cli(db, "run", "--resume", sid, "from B")
        out, err = b.communicate(timeout=60)
    assert b.returncode == 0, err
    assert "after the kill" in out


def test_the_lease_rules_in_one_process(db_target):
    """Another host's lease is refused (its process cannot be checked from here) unless
    ``take_over``; a newer harness of this process takes the session from an older one."""
    from ctxwright.errors import SessionInUse
    from ctxwright.store.lease import acquire
    from ctxwright.store.sessions import LeaseRow

    db = db_target  # an SQLite file, then a PostgreSQL database (tests/conftest.py)
    with F([F.reply_text("one"), F.reply_text("two"), F.reply_text("three")]) as srv:
        sid = _session(db, srv.url)
        store = Store(db)
        far = LeaseRow(sid, "other-holder", 4242, "build-host-7", None, time.time())
        assert store.acquire_lease(far, lambda other: True) is None
        with pytest.raises(SessionInUse, match=r"process 4242 on host build-host-7.*cannot check a process"):
            acquire(store, sid)
        acquire(store, sid, take_over=True).release()
        dead = subprocess.Popen(["true"])
        dead.wait()  # a pid that no longer exists, on this host
        here = socket.gethostname()
        assert store.acquire_lease(LeaseRow(sid, "killed", dead.pid, here, None, time.time()), lambda o: True) is None
        acquire(store, sid).release()  # stale: taken over without asking
        old = Harness.resume(sid, db=db, base_url=srv.url)
        new = Harness.resume(sid, db=db, base_url=srv.url)  # without closing the old one
        assert new.run("new one").stop_reason == "final_answer"
        with pytest.raises(SessionInUse, match="taken over by another harness"):
            old.run("old one")
        new.close()
        old.close()
        store.close()


# -- the database is locked while a reply arrives ---------------------------------------------------


LOCKER = """
import sqlite3, sys, time
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("BEGIN IMMEDIATE")  # the write lock: every other writer waits
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
con.execute("COMMIT")
"""


def _lock_when_asked(db: Path, seconds: float, reply: str) -> Any:
    """A responder that, when the run's follow-up arrives, has another process take the
    database's write lock for ``seconds``, then answers: the reply reaches the run while it
    cannot write."""
    lockers: list[subprocess.Popen[str]] = []

    def respond(req: dict[str, Any]) -> Any:
        p = subprocess.Popen([sys.executable, "-c", LOCKER, str(db), str(seconds)], stdout=subprocess.PIPE, text=True)
        assert p.stdout is not None and p.stdout.readline().strip() == "locked"
        lockers.append(p)
        return F.reply_text(reply)

    respond.lockers = lockers  # type: ignore[attr-defined]
    return respond


@pytest.mark.slow
def test_a_write_lock_held_past_sqlites_five_seconds_is_waited_out(tmp_path):
    db = tmp_path / "c.db"
    with F([F.reply_text("hello")]) as srv:
        sid = _session(db, srv.url)
        respond = _lock_when_asked(db, 7.0, "worth the wait")
        srv.fallback = respond
        t0 = time.monotonic()
        out, err = _cli(db, "run", "--resume", sid, "--base-url", srv.url, "q").communicate(timeout=120)
        waited = time.monotonic() - t0
        for p in respond.lockers:
            p.wait(timeout=30)
    assert "worth the wait" in out, err
    assert waited > 6.5  # it really waited past SQLite's own 5 s
    contents = [e.message.content for e in Store(db).events(sid) if hasattr(e, "message")]
    assert "worth the wait" in contents


@pytest.mark.slow
def test_a_reply_the_store_cannot_take_goes_to_a_private_recovery_file_and_resume_imports_it(tmp_path):
    db = tmp_path / "c.db"
    with F([F.reply_text("hello")]) as srv:
        sid = _session(db, srv.url)
        respond = _lock_when_asked(db, 4.0, "a reply worth keeping")
        srv.fallback = respond
        run = _cli(db, "run", "--resume", sid, "q", env={"CTXWRIGHT_DB_WAIT": "1"})
        _out, err = run.communicate(timeout=120)
        for p in respond.lockers:
            p.wait(timeout=30)
        assert run.returncode == 2
        line = _one_line(err)
        recovery = tmp_path / "ctxwright-recovery" / f"{sid}.jsonl"
        assert f"saved in {recovery}" in line and f"ctxwright run --resume {sid}" in line and "is locked" in line
        assert recovery.stat().st_mode & 0o777 == 0o600 and recovery.parent.stat().st_mode & 0o777 == 0o700
        assert "a reply worth keeping" in recovery.read_text()
        stored = Store(db).events(sid)
        assert "a reply worth keeping" not in [e.message.content for e in stored if hasattr(e, "message")]
        srv.fallback = None
        srv.enqueue(F.reply_text("imported and continued"))
        assert main_run(db, sid, "next") == 0
        sent = srv.requests[-1]["messages"]
    assert any(m["role"] == "assistant" and m.get("content") == "a reply worth keeping" for m in sent)
    assert not recovery.exists()
    events = Store(db).events(sid)
    assert [e.seq for e in events] == list(range(len(events)))
    calls = Store(db).calls(sid)
    assert [c.call_index for c in calls] == list(range(len(calls)))  # the call record came back too


def main_run(db: Path, sid: str, prompt: str) -> int:
    from ctxwright.cli.main import main

    return main(["--db", str(db), "run", "--resume", sid, prompt])


def _one_line(err: str) -> str:
    """The one error line of a run's stderr (progress lines, "… model call 1", may precede it)."""
    lines = [line for line in err.strip().splitlines() if not line.startswith("… ")]
    assert len(lines) == 1, err
    assert lines[0].startswith("ctxwright: ") and "Traceback" not in err
    return lines[0]


@pytest.mark.slow
def test_ctrl_c_during_a_tool_then_continue(tmp_path):
    """The story of the issue with a real Ctrl-C: SIGINT while a tool runs, the CLI's advice
    (``--continue``), and the provider accepting the resumed request."""
    (tmp_path / "slowtools.py").write_text(
        "import pathlib, time\n\n\n"
        "def slow(topic: str) -> str:\n"
        '    """Look a topic up, slowly."""\n'
        "    pathlib.Path('started').write_text(topic)\n"
        "    time.sleep(60)\n"
        "    return topic\n"
    )
    db = tmp_path / "c.db"
    calls = [("c1", "slow", '{"topic":"tides"}')]
    with F([F.reply_tool_calls(calls), F.reply_text("The lookup was interrupted.")]) as srv:
        env = {**os.environ, "PYTHONPATH": str(SRC), "NO_PROXY": "127.0.0.1"}
        base = [sys.executable, "-m", "ctxwright.cli.main", "--db", str(db), "run", "--tool", "slowtools:slow"]
        run = subprocess.Popen(
            [*base, "--backend", "openai", "--model", "fake", "--base-url", srv.url, "look up the tides"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_ctrl_c_restored,
        )
        _wait_for(lambda: (tmp_path / "started").exists())
        run.send_signal(signal.SIGINT)
        _, err = run.communicate(timeout=30)
        assert run.returncode == 130 and 'ctxwright run --continue "..."' in err
        again = subprocess.run(
            [*base, "--continue", "what happened?"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )
        assert again.returncode == 0, again.stderr
        assert srv.rejected == [] and "The lookup was interrupted." in again.stdout
        sent = srv.requests[-1]["messages"]
    assert [m["role"] for m in sent[-3:]] == ["tool", "user", "user"]  # the answer, the follow-up, the status
    assert json.loads(sent[-3]["content"])["error"]["type"] == "interrupted"
