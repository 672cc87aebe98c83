"""``ctxwright proxy --workers N`` recording into one PostgreSQL store.

Real parts: the proxy as its own process (``python -m ctxwright.cli.main proxy --workers 4``),
its workers forked from it, a real PostgreSQL server (``tests/pgserver.py``), the official
``openai`` SDK as the clients, and the loopback provider of ``tests/proxy_upstream.py``.

What must hold: with 4 workers and 8 clients, 2,000 requests are each recorded once, and
placed in sessions exactly as one proxy process places the same traffic (by continuity and by
key); a worker killed with SIGKILL under load fails only its own requests in flight, duplicates
nothing, and is replaced; the workers end when the parent is killed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import openai
import pytest

from ctxwright.proxy.serve import RecordingProxy
from ctxwright.proxy.server import ProxyConfig
from ctxwright.proxy.store import ProxyLog
from ctxwright.store.sessions import Store
from ports import free_port

SRC = Path(__file__).parent.parent / "src"
KEY = "sk-test-workers-0123456789"
STARTED = re.compile(r"worker (\d+) started \(pid (\d+)\)")


class WorkersProxy:
    """``ctxwright proxy --workers N`` in a process of its own; the pids of its workers."""

    def __init__(self, db: str, upstream: str, workers: int) -> None:
        self.port = free_port()
        env = {**os.environ, "PYTHONPATH": str(SRC), "NO_PROXY": "127.0.0.1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ctxwright.cli.main", "--db", db, "proxy", "--upstream", upstream,
             "--port", str(self.port), "--workers", str(workers), "--quiet"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )  # fmt: skip
        self.lines: list[str] = []
        self.pids: dict[int, int] = {}
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.wait_for(lambda: len(self.pids) >= workers, "the workers to start")
        self.wait_listening()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))
            m = STARTED.search(line)
            if m:
                self.pids[int(m[1])] = int(m[2])

    def wait_for(self, cond: Any, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                pytest.fail(f"waiting for {what}: {self.lines}")
            time.sleep(0.05)

    def wait_listening(self) -> None:
        import socket

        def up() -> bool:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return True
            except OSError:
                return False

        self.wait_for(up, "the port to listen")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        # not communicate(): it would read stderr too, taking lines from the reader thread
        self.proc.wait(90)  # --quiet: nothing fills the stdout pipe meanwhile
        self._reader.join(10)
        assert self.proc.stdout is not None
        return self.proc.stdout.read()


def _conversations(clients: int, each: int, turns: int) -> list[list[tuple[str, dict[str, Any]]]]:
    """Per client, its requests in order: conversations of ``turns`` requests, each request
    the previous one plus an answer and a new question; every other conversation carries a
    ``user`` key (placed by key), the rest by continuity. ``(conversation id, body)``."""
    out = []
    for c in range(clients):
        reqs = []
        for j in range(each // turns):
            conv = f"c{c}-{j}"
            msgs: list[dict[str, str]] = [{"role": "system", "content": f"You help with task {conv}."}]
            for t in range(turns):
                msgs = [*msgs, {"role": "user", "content": f"{conv} question {t}"}]
                body: dict[str, Any] = {"model": "m", "messages": list(msgs)}
                if j % 2:
                    body["user"] = f"user-{conv}"
                reqs.append((conv, body))
                msgs = [*msgs, {"role": "assistant", "content": "Hello there."}]
        out.append(reqs)
    return out


def _drive(url: str, plan: list[list[tuple[str, dict[str, Any]]]]) -> list[str]:
    """Each client's requests in order, the clients at once; the errors met."""
    errors: list[str] = []

    def client(reqs: list[tuple[str, dict[str, Any]]]) -> None:
        sdk = openai.OpenAI(base_url=url, api_key=KEY, max_retries=0, timeout=60)
        for _conv, body in reqs:
            try:
                sdk.chat.completions.create(**body)
            except openai.OpenAIError as exc:
                errors.append(repr(exc))

    threads = [threading.Thread(target=client, args=(r,)) for r in plan]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def _placement(store: Store) -> dict[str, list[tuple[int, str]]]:
    """conversation -> its recorded calls as (call index, session), in call order."""
    out: dict[str, list[tuple[int, str]]] = defaultdict(list)
    log = ProxyLog(store)
    for row in log.session_rows():
        for ex in log.exchange_rows(row["id"]):
            body = json.loads(ex["request_body"])
            conv = body["messages"][0]["content"].removeprefix("You help with task ").rstrip(".")
            out[conv].append((ex["call_index"], row["id"]))
    return {k: sorted(v) for k, v in out.items()}


def _shape(placement: dict[str, list[tuple[int, str]]]) -> dict[str, list[int]]:
    """What must be the same whichever proxy recorded it: each conversation in one session of
    its own, its calls numbered 0, 1, 2, ... (session ids themselves are random)."""
    sessions = [{sid for _k, sid in calls} for calls in placement.values()]
    assert all(len(s) == 1 for s in sessions), "a conversation split over sessions"
    assert len(set().union(*sessions)) == len(placement), "two conversations in one session"
    return {conv: [k for k, _sid in calls] for conv, calls in placement.items()}


@pytest.mark.slow
def test_four_workers_record_2000_requests_once_placed_as_one_worker_places_them(pg_server: Any, upstream: Any) -> None:
    plan = _conversations(clients=8, each=250, turns=25)
    total = sum(len(p) for p in plan)
    assert total == 2000

    one_db = pg_server.new_database()
    store = Store(one_db)
    with RecordingProxy.start(ProxyConfig(upstream=upstream.url), store, printer=None) as single:
        t0 = time.monotonic()
        assert _drive(single.url + "/v1", plan) == []
        assert single.recorder.wait_idle(120, at_least=total)
        one_s = time.monotonic() - t0
    one = _shape(_placement(store))
    store.close()

    many_db = pg_server.new_database()
    proxy = WorkersProxy(many_db, upstream.url, workers=4)
    try:
        t0 = time.monotonic()
        assert _drive(proxy.url, plan) == []
        many_s = time.monotonic() - t0
    finally:
        proxy.stop()
    store = Store(many_db)
    rows = store.db.fetchall("SELECT session_id, call_index FROM proxy_exchanges")
    assert len(rows) == total  # each recorded once
    assert len({(r["session_id"], r["call_index"]) for r in rows}) == total  # no call number twice
    many = _shape(_placement(store))
    store.close()
    assert many == one and all(ks == list(range(25)) for ks in one.values())
    print(f"\n2,000 requests: one worker {one_s:.1f} s, four workers {many_s:.1f} s")


@pytest.mark.slow
def test_a_worker_killed_under_load_loses_nothing_recorded_and_is_replaced(pg_server: Any, upstream: Any) -> None:
    db = pg_server.new_database()
    proxy = WorkersProxy(db, upstream.url, workers=4)
    plan = _conversations(clients=8, each=60, turns=20)
    sent: dict[str, bool] = {}  # the last user message of each request -> answered
    lock = threading.Lock()

    def client(reqs: list[tuple[str, dict[str, Any]]]) -> None:
        for _conv, body in reqs:
            sdk = openai.OpenAI(base_url=proxy.url, api_key=KEY, max_retries=0, timeout=30)  # a new connection each
            marker = body["messages"][-1]["content"]
            try:
                # answered after 0.1 s: a worker is killed with requests in flight
                sdk.chat.completions.create(**body, extra_headers={"x-test-behaviour": "slow=0.1"})
                ok = True
            except openai.OpenAIError:
                ok = False
            with lock:
                sent[marker] = ok
            sdk.close()

    threads = [threading.Thread(target=client, args=(r,)) for r in plan]
    try:
        for t in threads:
            t.start()
        proxy.wait_for(lambda: len(sent) >= 120, "the load to build up")
        victim = proxy.pids[1]
        os.kill(victim, signal.SIGKILL)
        proxy.wait_for(lambda: proxy.pids[1] != victim, "a worker to replace the killed one")
        for t in threads:
            t.join()
    finally:
        out = proxy.stop()
    assert any(f"worker 1 (pid {victim}) ended (killed by signal 9); starting another" in ln for ln in proxy.lines)
    store = Store(db)
    rows = store.db.fetchall("SELECT request_body, session_id, call_index FROM proxy_exchanges")
    recorded = [json.loads(r["request_body"])["messages"][-1]["content"] for r in rows]
    assert len(recorded) == len(set(recorded)), "an exchange recorded twice"
    assert len({(r["session_id"], r["call_index"]) for r in rows}) == len(rows)
    answered = {m for m, ok in sent.items() if ok}
    failed = {m for m, ok in sent.items() if not ok}
    unrecorded = answered - set(recorded)
    # a worker sends the end of an answer only once it is recorded: nothing a client got whole is lost
    assert unrecorded == set(), unrecorded
    assert len(answered) >= len(sent) - 16  # at most the killed worker's requests in flight failed
    print(
        f"\nkill -9 of a worker: {len(sent)} requests, {len(failed)} failed to their clients, "
        f"{len(unrecorded)} answered but not recorded, {len(recorded)} recorded, 0 duplicated; {out.strip()}"
    )
    store.close()


@pytest.mark.slow
def test_the_workers_end_with_their_parent(db_target: str, upstream: Any) -> None:
    proxy = WorkersProxy(db_target, upstream.url, workers=2)
    sdk = openai.OpenAI(base_url=proxy.url, api_key=KEY, max_retries=0, timeout=30)
    sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "one call, recorded"}])
    pids = list(proxy.pids.values())
    proxy.proc.kill()  # SIGKILL: the parent runs nothing on its way out
    proxy.proc.wait()
    deadline = time.monotonic() + 30
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [p for p in pids if _alive(p)]
        time.sleep(0.1)
    assert alive == [], "workers outlived their parent"
    deadline = time.monotonic() + 30
    while not _recorded(db_target) and time.monotonic() < deadline:
        time.sleep(0.1)  # the exchange is written by the worker's recorder just after its answer
    assert _recorded(db_target) == 1


def _recorded(db: str) -> int:
    store = Store(db)
    try:
        return (
            ProxyLog(store).call_count(ProxyLog(store).session_rows()[0]["id"]) if ProxyLog(store).session_rows() else 0
        )
    finally:
        store.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (not yet reaped by init) is gone as far as serving goes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_a_number_of_workers_no_machine_runs_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from ctxwright.cli.main import main

    db = str(tmp_path / "w.db")
    assert main(["--db", db, "proxy", "--upstream", "http://127.0.0.1:9", "--workers", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("--workers 0: give a number of processes from 1 to 64") and "\n" not in err


#: ``worker N (pid P) stopped; R exchange(s) recorded...; its live audit read B call(s) back from
#: the store, rebuilt S session(s)``
AUDIT_LINE = re.compile(
    r"stopped; (\d+) exchange\(s\) recorded.*read (\d+) call\(s\) back from the store, rebuilt (\d+)"
)


def _varied(convs: int, turns: int) -> list[list[dict[str, Any]]]:
    """Per conversation (placed by its ``user`` key), its requests in order, with the breaks the
    audit names: a changed option, a changed system prompt, an edited earlier message."""
    out = []
    for c in range(convs):
        system = f"You help with task {c}. " * 20
        msgs: list[dict[str, str]] = []
        reqs = []
        for t in range(turns):
            if c == 1 and t == turns // 2:
                system += " Be brief."
            if c == 2 and t == turns // 2 and msgs:
                msgs[0] = {"role": "user", "content": msgs[0]["content"] + " (edited)"}
            msgs.append({"role": "user", "content": f"conversation {c} question {t}"})
            body: dict[str, Any] = {"model": "m", "messages": [{"role": "system", "content": system}, *msgs]}
            body["user"] = f"conv-{c}"
            if c == 3 and t >= turns // 2:
                body["tool_choice"] = "none"
                body["tools"] = [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]
            reqs.append(body)
            msgs.append({"role": "assistant", "content": "Hello there."})
        out.append(reqs)
    return out


def _new_connection_clients(url: str, plan: list[list[dict[str, Any]]]) -> None:
    """Each conversation's requests in order, the conversations at once, each request on a
    new connection (a new SDK client): the kernel hands it to either worker."""
    errors: list[str] = []

    def client(reqs: list[dict[str, Any]]) -> None:
        for body in reqs:
            with openai.OpenAI(base_url=url, api_key=KEY, max_retries=0, timeout=60) as sdk:
                try:
                    sdk.chat.completions.create(**body)
                except openai.OpenAIError as exc:
                    errors.append(repr(exc))

    threads = [threading.Thread(target=client, args=(r,)) for r in plan]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def _audits(store: Store) -> dict[tuple[str, int], tuple[Any, Any]]:
    """(conversation, turn) -> the stored live audit's (cause, reusable prefix tokens)."""
    out = {}
    log = ProxyLog(store)
    for row in log.session_rows():
        for ex in log.exchange_rows(row["id"]):
            body = json.loads(ex["request_body"])
            turn = sum(m["role"] == "user" for m in body["messages"]) - 1
            out[body["user"], turn] = (ex["audit"].get("cause"), ex["audit"].get("reusable_prefix_tokens"))
    return out


@pytest.mark.slow
def test_two_workers_audit_a_session_moving_between_them_as_one_process_without_rebuilding_it(
    db_target: str, upstream: Any, tmp_path: Path
) -> None:
    """New-connection clients move every session between the workers; each worker reads back
    only the calls its sibling recorded (each at most once) and builds a session's audit anew
    at most once, and the stored audit is the one process's, call for call."""
    convs, turns = 4, 12
    plan = _varied(convs, turns)
    total = convs * turns
    one_db = str(tmp_path / "one.db")
    store = Store(one_db)
    with RecordingProxy.start(ProxyConfig(upstream=upstream.url), store, printer=None) as single:
        _new_connection_clients(single.url + "/v1", plan)
        assert single.recorder.wait_idle(60, at_least=total)
        assert single.recorder.audits.read_back == 0
    one = _audits(store)
    store.close()
    assert len(one) == total
    causes = {cause for cause, _ in one.values()}
    assert {"first", "append"} < causes and len(causes) >= 4, causes  # the breaks are there to compare

    proxy = WorkersProxy(db_target, upstream.url, workers=2)
    try:
        _new_connection_clients(proxy.url, plan)
    finally:
        proxy.stop()
    store = Store(db_target)
    two = _audits(store)
    store.close()
    assert two == one
    lines = [m for m in map(AUDIT_LINE.search, proxy.lines) if m]
    assert len(lines) == 2, proxy.lines
    recorded = [int(m[1]) for m in lines]
    read_back = [int(m[2]) for m in lines]
    rebuilt = [int(m[3]) for m in lines]
    assert sum(recorded) == total
    assert sum(read_back) > 0, "no session moved between the workers: nothing tested"
    for i in range(2):
        # rebuilding a session per call that moved would read it whole each time: far more rows
        assert read_back[i] <= recorded[1 - i] and rebuilt[i] <= convs, (recorded, read_back, rebuilt)
