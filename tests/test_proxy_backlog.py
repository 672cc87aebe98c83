"""Nothing answered is lost, and nothing lost is hidden: the proxy's recorder under load, a store
that stops, and the framework recorder behind the ``openai`` SDK when its store stops or freezes.

Real parts: ``ctxwright proxy`` as a subprocess on 127.0.0.1 (one process, and ``--workers 2``),
clients on ``httpx`` and the official ``openai`` SDK, the loopback upstream of
``tests/proxy_upstream.py``, SQLite files and a PostgreSQL server of this module's own
(``tests/pgserver.py``) that the tests stop, freeze and start again. Recovery files of a
PostgreSQL store go under the user's data folder: the subprocesses get one of their own
(``XDG_DATA_HOME``).

What must hold:

* a recorder slower than the relay holds new requests once its backlog is full: the backlog
  stays under its bound plus the requests in flight, and everything answered is recorded;
* every answered exchange is in the store when the client has its answer's end: a proxy
  stopped by SIGTERM, by Ctrl-C, or killed with SIGKILL right after the load lost none;
* with ``--quiet`` and the store stopped, the failures are on stderr (a few lines, not one per
  exchange), the exit says how many exchanges are not recorded and where they are, and the
  next start records them;
* ``--workers 2`` on a PostgreSQL store that stops: a worker killed meanwhile is replaced and
  serves, every request is answered, and every answer is recorded once the store is back;
* the framework recorder returns the provider's answer at once while its store is stopped or
  frozen, and records the calls in order once it is back.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

import pgserver
from ctxwright.integrations.recording import RECORD_WAIT_S, FrameworkRecorder
from ctxwright.proxy.serve import RecordingProxy
from ctxwright.proxy.server import ProxyConfig
from ctxwright.proxy.store import ProxyLog
from ctxwright.store.sessions import Store
from ports import free_port, wait_listening

SRC = Path(__file__).parent.parent / "src"
KEY = "sk-test-backlog-0123456789"
STARTED = re.compile(r"worker (\d+) started \(pid (\d+)\)")


def _poll(cond: Callable[[], bool], what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"waiting for {what}")
        time.sleep(0.05)


# -- a PostgreSQL server this module may stop ------------------------------------------------------


class OwnPg:
    """A server of this module's own: stopped, frozen and started again on the same data."""

    def __init__(self) -> None:
        try:
            self.server = pgserver.start()
        except RuntimeError as exc:
            if os.environ.get("CI"):
                pytest.fail(f"PostgreSQL is needed in CI: {exc}")
            pytest.skip(str(exc))
        self.args = self.server.proc.args

    def stop(self) -> None:
        """PostgreSQL's fast shutdown: open connections are ended."""
        proc = self.server.proc
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(60)

    def start(self) -> None:
        self.server.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

        def up() -> bool:
            try:
                self.server.psql("SELECT 1")
                return True
            except Exception:
                return False

        _poll(up, "PostgreSQL to start again")

    def pids(self) -> list[int]:
        """The postmaster and every process it started (the backends serving connections)."""
        root = self.server.proc.pid
        out = [root]
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) in out:
                out.append(int(stat.parent.name))
        return out

    def signal_all(self, sig: int) -> None:
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)


@pytest.fixture(scope="module")
def own_pg() -> Iterator[OwnPg]:
    pg = OwnPg()
    yield pg
    pg.signal_all(signal.SIGCONT)
    if pg.server.proc.poll() is not None:
        pg.start()  # so that stop() below finds a server to end and removes its folder
    pg.server.stop()


# -- the proxy as a subprocess ----------------------------------------------------------------------


class Proxy:
    """``ctxwright proxy --quiet`` in a process of its own, its stderr read as it comes."""

    def __init__(self, db: str, upstream: str, data_home: Path, *extra: str) -> None:
        self.port = free_port()
        env = {**os.environ, "PYTHONPATH": str(SRC), "NO_PROXY": "127.0.0.1", "XDG_DATA_HOME": str(data_home)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ctxwright.cli.main", "--db", db, "proxy", "--upstream", upstream,
             "--port", str(self.port), "--quiet", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )  # fmt: skip
        self.err: list[str] = []
        self.out: list[str] = []
        self.pids: dict[int, int] = {}
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        assert self.proc.stdout is not None
        stdout = self.proc.stdout
        self._out_reader = threading.Thread(target=lambda: self.out.extend(stdout), daemon=True)
        self._out_reader.start()
        wait_listening(self.port, self.proc, 90, "the proxy")

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.err.append(line.rstrip("\n"))
            m = STARTED.search(line)
            if m:
                self.pids[int(m[1])] = int(m[2])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, str]:
        """Send ``sig``; the exit status and stdout (both streams are read by threads of their
        own to the end: ``communicate`` would race them for the lines)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        self.proc.wait(120)
        self._reader.join(30)
        self._out_reader.join(30)
        return self.proc.returncode, "".join(self.out)


def _load(url: str, clients: int, each: int, size: int, tag: str) -> tuple[set[str], list[str]]:
    """``clients`` threads of ``each`` chat requests of about ``size`` bytes; the markers of the
    requests whose answers came back whole, and the errors met."""
    answered: set[str] = set()
    errors: list[str] = []
    lock = threading.Lock()
    pad = "x" * size

    def client(c: int) -> None:
        with httpx.Client(timeout=120) as http:
            for i in range(each):
                marker = f"{tag}-{c}-{i}"
                body = {"model": "m", "messages": [{"role": "user", "content": f"{marker} {pad}"}]}
                try:
                    r = http.post(f"{url}/v1/chat/completions", json=body, headers={"authorization": f"Bearer {KEY}"})
                    ok = r.status_code == 200 and r.json()["choices"][0]["message"]["content"]
                except httpx.HTTPError as exc:
                    ok = False
                    with lock:
                        errors.append(repr(exc))
                if ok:
                    with lock:
                        answered.add(marker)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answered, errors


def _markers(db: str) -> list[str]:
    """The marker of every recorded request, in the store at ``db`` (a file or a URL)."""
    if db.startswith("postgresql://"):
        store = Store(db)
        try:
            rows = store.db.fetchall("SELECT request_body FROM proxy_exchanges")
        finally:
            store.close()
    else:
        with sqlite3.connect(db) as con:
            rows = [{"request_body": r[0]} for r in con.execute("SELECT request_body FROM proxy_exchanges")]
    return [json.loads(bytes(r["request_body"]))["messages"][0]["content"].split(" ", 1)[0] for r in rows]


# -- 1. the backlog ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_slow_store_holds_new_requests_past_the_bound_and_loses_nothing(upstream: Any, tmp_path: Path) -> None:
    """No hold of the answers' ends (the worst case for the backlog) and a store whose write
    lock another process keeps for 3 s: the recorder falls behind, new requests wait once 8
    exchanges do, and everything answered is recorded once the lock is gone."""
    store = Store(tmp_path / "slow.db")
    warned: list[str] = []
    clients, limit = 6, 8
    config = ProxyConfig(upstream=upstream.url, record_before_end=None)
    with RecordingProxy.start(config, store, warn=warned.append, backlog_limit=limit) as proxy:
        locker = sqlite3.connect(tmp_path / "slow.db", isolation_level=None, check_same_thread=False)
        locker.execute("BEGIN IMMEDIATE")  # the write lock: the recorder waits for it
        timer = threading.Timer(3.0, locker.execute, args=("COMMIT",))
        timer.start()
        answered, errors = _load(proxy.url, clients, 12, 2_000, "slow")
        timer.join()
        assert proxy.recorder.wait_idle(120, at_least=len(answered))
        peak, held = proxy.recorder.peak_backlog, proxy.recorder.held
    locker.close()
    assert errors == [] and len(answered) == clients * 12
    # the bound, plus per client what was admitted before it was reached: the request being
    # relayed, and (no hold) the one whose answer had ended but was not yet handed over
    assert limit <= peak <= limit + 2 * clients, peak
    assert held > 0 and any("wait for the recorder" in w for w in warned), warned
    assert sorted(_markers(str(tmp_path / "slow.db"))) == sorted(answered)
    store.close()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "SIGKILL"])
def test_every_answered_exchange_is_recorded_however_the_proxy_stops(upstream: Any, tmp_path: Path, how: str) -> None:
    db = str(tmp_path / "stop.db")
    proxy = Proxy(db, upstream.url, tmp_path / "data")
    try:
        answered, errors = _load(proxy.url, 4, 40, 200_000, how)  # 160 requests of 200 KB
    finally:
        code, _out = proxy.stop(getattr(signal, how))
    assert errors == [] and len(answered) == 160
    recorded = _markers(db)
    assert sorted(recorded) == sorted(answered)  # 0 answered exchanges lost, none twice
    if how != "SIGKILL":
        assert code == 0, proxy.err
        assert not any("NOT recorded" in line for line in proxy.err), proxy.err


# -- 2. the store away ------------------------------------------------------------------------------


@pytest.mark.slow
def test_quiet_says_the_store_failures_on_stderr_and_the_next_start_records_them(
    own_pg: OwnPg, upstream: Any, tmp_path: Path
) -> None:
    db = own_pg.server.new_database()
    data = tmp_path / "data"
    proxy = Proxy(db, upstream.url, data)
    try:
        before, _ = _load(proxy.url, 2, 5, 1_000, "before")
        own_pg.stop()
        during, errors = _load(proxy.url, 4, 25, 1_000, "during")  # answered while the store is away
    finally:
        code, out = proxy.stop(signal.SIGTERM)
        own_pg.start()
    assert errors == [] and len(before) == 10 and len(during) == 100
    assert code == 0, proxy.err
    assert "could not record" not in out  # stdout: the banner and the stop line only
    failures = [line for line in proxy.err if "could not record into the store" in line]
    assert 1 <= len(failures) <= 3, proxy.err  # said at once, then at most once every 10 s
    (left,) = [line for line in proxy.err if "NOT recorded yet" in line]
    assert "100 NOT recorded yet, kept in " in left and "the next ctxwright proxy on this store imports it" in left
    assert sorted(_markers(db)) == sorted(before)

    again = Proxy(db, upstream.url, data)  # the next start imports the recovery file
    try:
        _poll(lambda: len(_markers(db)) == 110, "the recovery file to be imported")
    finally:
        code, _ = again.stop(signal.SIGINT)
    assert sorted(_markers(db)) == sorted(before | during) and code == 0
    assert any("recorded 100 exchange(s) from an earlier process's spool" in line for line in again.err), again.err
    assert not list(data.rglob("proxy-*.jsonl"))


@pytest.mark.slow
def test_workers_keep_relaying_while_the_store_is_away_and_record_it_all_after(
    own_pg: OwnPg, upstream: Any, tmp_path: Path
) -> None:
    db = own_pg.server.new_database()
    proxy = Proxy(db, upstream.url, tmp_path / "data", "--workers", "2")
    answered: set[str] = set()
    errors: list[str] = []
    stop = threading.Event()

    def agents() -> None:
        k = 0
        while not stop.is_set():
            got, errs = _load(proxy.url, 2, 5, 1_000, f"w{k}")
            answered.update(got)
            errors.extend(errs)
            k += 1

    load = threading.Thread(target=agents)
    try:
        _poll(lambda: len(proxy.pids) == 2, "two workers")
        load.start()
        _poll(lambda: len(answered) >= 20, "the load to start")
        own_pg.stop()
        victim = proxy.pids[1]
        os.kill(victim, signal.SIGKILL)  # replaced while the store is down
        _poll(lambda: proxy.pids[1] != victim, "the worker to be replaced")
        served = len(answered)
        _poll(lambda: len(answered) >= served + 40, "requests answered with the store away")
        assert proxy.proc.poll() is None
        own_pg.start()
        stop.set()
        load.join()
        _poll(lambda: len(_markers(db)) >= len(answered), "the spooled exchanges to be recorded", timeout=120)
    finally:
        stop.set()
        code, _ = proxy.stop(signal.SIGINT)
    # no client ever saw a refused connection; only the killed worker's requests in flight failed
    assert len(errors) <= 2 and not any("ConnectError" in e for e in errors), errors
    assert code == 0 and not any("keep exiting" in line for line in proxy.err), proxy.err
    recorded = _markers(db)
    assert len(recorded) == len(set(recorded)) and answered <= set(recorded)
    assert any("could not record into the store" in line for line in proxy.err)
    stopped = [line for line in proxy.err if "stopped;" in line]
    assert len(stopped) == 2 and all("NOT recorded" not in line for line in stopped), stopped


@pytest.mark.slow
def test_the_framework_recorder_returns_the_answer_while_its_store_is_stopped_or_frozen(
    own_pg: OwnPg, upstream: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    db = own_pg.server.new_database()
    rec = FrameworkRecorder(db, name="agent-1")
    client = openai.OpenAI(base_url=upstream.url + "/v1", api_key=KEY, http_client=rec.http_client(), max_retries=0)
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "q0"}]

    def call() -> float:
        t0 = time.monotonic()
        r = client.chat.completions.create(model="m", messages=msgs)
        msgs.extend([{"role": "assistant", "content": r.choices[0].message.content}, {"role": "user", "content": "q"}])
        return time.monotonic() - t0

    try:
        call()
        own_pg.stop()
        stopped = [call() for _ in range(3)]  # the store is down: StoreUnusable never reaches the caller
        own_pg.start()
        own_pg.signal_all(signal.SIGSTOP)  # frozen: the connection's reads block
        try:
            frozen = [call() for _ in range(3)]
        finally:
            own_pg.signal_all(signal.SIGCONT)
        call()
    finally:
        rec.close()
    assert max(stopped) < RECORD_WAIT_S + 3, stopped
    assert max(frozen) < RECORD_WAIT_S + 3, frozen
    assert rec.unrecorded == 0
    store = Store(db)
    sid = ProxyLog(store).find_session("header", "agent-1")
    assert sid is not None
    rows = ProxyLog(store).exchange_rows(sid)
    store.close()
    assert [len(json.loads(r["request_body"])["messages"]) for r in rows] == [1, 3, 5, 7, 9, 11, 13, 15]
    assert [r["call_index"] for r in rows] == list(range(8))


def test_a_spool_is_taken_over_only_once_its_writer_is_gone(tmp_path: Path) -> None:
    """The lock that keeps a live process's recovery file from being imported under it."""
    from ctxwright.store.recovery import Spool, claim_spools

    folder = tmp_path / "ctxwright-recovery"
    writer = Spool(folder, "proxy")
    path = writer.add({"n": 1})
    writer.add({"n": 2})
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert list(claim_spools(folder, "proxy")) == []  # its writer holds it
    writer.close()
    (taken,) = claim_spools(folder, "proxy")
    assert taken.count == 2 and [r["n"] for r in taken.records()] == [1, 2]
    assert list(claim_spools(folder, "proxy")) == []  # another importer passes it over
    taken.keep([{"n": 2}])  # the first one imported, the store failed on the second
    taken.close()
    (again,) = claim_spools(folder, "proxy")
    assert [r["n"] for r in again.records()] == [2]
    again.keep([])
    assert not path.exists() and list(claim_spools(folder, "proxy")) == []
