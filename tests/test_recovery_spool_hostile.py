"""The proxy's and framework recorder's recovery spools (``store/recovery.py``, :class:`Spool`)
against hostile and broken folders: torn and garbage lines, a line of hundreds of MB, thousands
of files, symlinks, another user's file, another store's file, two importers at once, the store
failing mid-import, a full disk. What must hold each time: every exchange recorded exactly once
or counted lost and said in one line; nothing followed through a symlink; memory bounded."""

from __future__ import annotations

import base64
import collections
import errno
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from ctxwright.errors import StoreUnusable
from ctxwright.proxy.recorder import Recorder, exchange_from_record
from ctxwright.store import recovery
from ctxwright.store.recovery import Spool, claim_spools

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _body(obj: Any) -> dict[str, Any]:
    raw = json.dumps(obj).encode()
    return {
        "cap": 1 << 20,
        "data": base64.b64encode(raw).decode(),
        "size": len(raw),
        "sha256": hashlib.sha256(raw).hexdigest(),
    }


def _exchange(marker: str) -> dict[str, Any]:
    """A spool line as the recorder writes it (``proxy/recorder.py``: ``exchange_record``)."""
    now = time.time()
    return {
        "type": "proxy_exchange",
        "method": "POST",
        "path": "/v1/chat/completions",
        "started_at": now,
        "ended_at": now,
        "request": _body({"model": "m", "messages": [{"role": "user", "content": f"{marker} hello"}]}),
        "request_content_type": "application/json",
        "response": _body({"id": marker, "choices": [{"message": {"role": "assistant", "content": "hi"}}]}),
        "status": 200,
        "response_content_type": "application/json",
        "outcome": "complete",
        "ttfb_ms": 1.0,
        "total_ms": 2.0,
    }


def _spool(db: Path, markers: list[str], prefix: str = "proxy") -> Path:
    """An orphaned spool of ``db`` (its writer closed it, as a process that ended leaves it)."""
    s = Spool(db.parent / "ctxwright-recovery", prefix, db.name)
    path = Path(".")
    for m in markers:
        path = s.add(_exchange(m))
    s.close()
    return path


def _import(db: Path) -> tuple[Recorder, list[str]]:
    """What the next proxy on ``db`` does first: import the spools of processes that are gone."""
    lines: list[str] = []
    rec = Recorder(str(db), "http://127.0.0.1:9", printer=None, warn=lines.append)
    rec.close()
    return rec, lines


def _markers(db: Path) -> list[str]:
    with sqlite3.connect(db) as con:
        rows = [r[0] for r in con.execute("SELECT request_body FROM proxy_exchanges")]
    return [json.loads(bytes(r))["messages"][0]["content"].split(" ", 1)[0] for r in rows]


def test_torn_garbage_and_non_utf8_lines_are_counted_lost_and_said_the_rest_imported(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    path = _spool(db, ["m1", "m2"])
    good = json.dumps(_exchange("m3")).encode()
    with path.open("ab") as f:
        f.write(b"not json at all\n")
        f.write(b"\xff\xfe\x00\x81 not utf-8\n")
        f.write(b"[" * 200_000 + b"\n")  # nested past the parser's depth
        f.write(b"[1, 2]\n")  # JSON, not a record
        f.write(good + b"\n")
        f.write(good[: len(good) // 2])  # the last line, cut short by a crash mid-write
    rec, lines = _import(db)
    assert sorted(_markers(db)) == ["m1", "m2", "m3"]
    assert rec.recorded == 3 and rec.lost == 5, lines
    (said,) = [line for line in lines if "could not be read" in line]
    assert "5 line(s)" in said and str(path) in said
    assert not path.exists()


def test_a_line_of_hundreds_of_mb_is_read_past_in_bounded_memory(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(recovery, "SPOOL_LINE_MAX", 1 << 20)
    folder = tmp_path / "ctxwright-recovery"
    s = Spool(folder, "proxy", "a.db")
    path = s.add({"n": 1})
    s.close()
    with path.open("r+b") as f:  # 300 MB of one line, sparse: no disk used
        f.truncate(path.stat().st_size + 300 * (1 << 20))
        f.seek(0, os.SEEK_END)
        f.write(b'\n{"n": 2}\n')
    tracemalloc.start()
    try:
        (taken,) = claim_spools(folder, "proxy", "a.db")
        got = [r["n"] for r in taken.records()]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got == [1, 2] and taken.count == 2 and taken.skipped == 1
    assert peak < 16 * (1 << 20), peak
    taken.keep_rest()  # the store failed on record 2: only it stays, the long line dropped
    taken.close()
    (again,) = claim_spools(folder, "proxy", "a.db")
    assert [r["n"] for r in again.records()] == [2] and path.stat().st_size < 1000
    again.close()


def test_a_record_over_the_line_limit_is_refused_not_written(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(recovery, "SPOOL_LINE_MAX", 1 << 16)
    s = Spool(tmp_path / "r", "proxy", "a.db")
    path = s.add({"n": 1})
    size = path.stat().st_size
    with pytest.raises(OSError, match="lower --record-cap") as exc:
        s.add({"n": "x" * (1 << 17)})
    assert exc.value.errno == errno.EFBIG and path.stat().st_size == size and s.count == 1
    s.close()


def test_thousands_of_spools_are_listed_once_and_claimed_one_fd_at_a_time(tmp_path: Path) -> None:
    folder = tmp_path / "ctxwright-recovery"
    header = json.dumps({"type": "spool", "store": "a.db"})
    folder.mkdir()
    for i in range(2000):
        (folder / f"proxy-{i}-{i:08x}.jsonl").write_text(f'{header}\n{{"n": {i}}}\n')
    fds = len(os.listdir("/proc/self/fd"))
    seen = 0
    t0 = time.monotonic()
    for spool in claim_spools(folder, "proxy", "a.db"):
        assert len(os.listdir("/proc/self/fd")) <= fds + 2  # the claimed file's lock only
        assert [r["n"] for r in spool.records()] == [int(spool.path.name.split("-")[1])]  # type: ignore[union-attr]
        spool.keep([])
        seen += 1
    assert seen == 2000 and not list(folder.iterdir())
    assert len(os.listdir("/proc/self/fd")) <= fds  # none left open
    assert time.monotonic() - t0 < 60


def test_a_symlink_in_the_folder_is_neither_followed_nor_removed(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    outside = tmp_path / "outside.jsonl"
    outside.write_text(json.dumps({"type": "spool", "store": "a.db"}) + "\n" + json.dumps(_exchange("evil")) + "\n")
    before = outside.read_bytes()
    real = _spool(db, ["m1"])
    folder = real.parent
    (folder / "proxy-1-aaaaaaaa.jsonl").symlink_to(outside)
    (folder / "proxy-2-bbbbbbbb.jsonl").symlink_to(tmp_path / "nowhere")  # dangling
    rec, lines = _import(db)
    assert _markers(db) == ["m1"] and rec.lost == 0
    assert outside.read_bytes() == before
    assert (folder / "proxy-1-aaaaaaaa.jsonl").is_symlink() and (folder / "proxy-2-bbbbbbbb.jsonl").is_symlink()
    said = [line for line in lines if "not a regular file" in line]
    assert said and "left alone, not followed" in said[0]


def test_another_users_or_unopenable_spool_is_left_alone_and_said(tmp_path: Path, monkeypatch: Any) -> None:
    db = tmp_path / "a.db"
    theirs = _spool(db, ["theirs"])
    locked = _spool(db, ["locked"])
    _spool(db, ["mine"])
    before = theirs.read_bytes()
    if os.geteuid() == 0:
        os.chown(theirs, 65534, 65534)
    else:
        theirs.chmod(0)
    real_open = os.open

    def deny(path: Any, flags: int, *a: Any) -> int:
        if Path(path) == locked:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, *a)

    monkeypatch.setattr(recovery.os, "open", deny)
    _, lines = _import(db)
    monkeypatch.undo()
    assert _markers(db) == ["mine"]
    assert theirs.exists() and locked.exists()
    if os.geteuid() == 0:
        assert theirs.read_bytes() == before
        assert any("belongs to another user (uid 65534)" in line and str(theirs) in line for line in lines), lines
    assert any(f"cannot open {locked} (Permission denied)" in line for line in lines), lines


def test_a_copy_left_half_written_by_a_killed_import_is_removed_once_stale(tmp_path: Path) -> None:
    folder = tmp_path / "ctxwright-recovery"
    folder.mkdir()
    old, young, held = (folder / f".proxy-1-aaaaaaaa.jsonl.{x}" for x in ("11111111", "22222222", "33333333"))
    for p in (old, young, held):
        p.write_text('{"half": ')
    long_ago = time.time() - 3600
    os.utime(old, (long_ago, long_ago))
    os.utime(held, (long_ago, long_ago))
    keep = os.open(held, os.O_RDWR)
    try:
        assert recovery._lock(keep, wait=False)  # a live keep() writing it
        assert list(claim_spools(folder, "proxy", "a.db")) == []
        assert not old.exists() and young.exists() and held.exists()
    finally:
        os.close(keep)


def test_a_spool_of_another_store_sharing_the_folder_is_passed_over(tmp_path: Path) -> None:
    a, b = tmp_path / "a.db", tmp_path / "b.db"  # one folder: one ctxwright-recovery/ for both
    path = _spool(a, ["for-a"])
    _, lines = _import(b)
    assert _markers(b) == [] and path.exists()
    assert not any("could not" in line for line in lines), lines
    _import(a)
    assert _markers(a) == ["for-a"] and not path.exists()


@pytest.mark.slow
def test_two_importers_starting_at_once_record_each_exchange_exactly_once(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    _import(db)  # the store exists before the race: only the import is raced
    expected = [f"s{i}r{j}" for i in range(30) for j in range(4)]
    for i in range(30):
        _spool(db, [f"s{i}r{j}" for j in range(4)])
    code = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {SRC!r})
        from ctxwright.proxy.recorder import Recorder
        while time.time() < {time.time() + 3.0!r}:
            time.sleep(0.005)
        rec = Recorder({str(db)!r}, "http://127.0.0.1:9", printer=None, warn=lambda line: print(line, file=sys.stderr))
        rec.close()
        print(rec.imported, rec.lost)
        """
    )
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=120)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(int(o[0]) for o in outs) == len(expected) and all(o[1] == "0" for o in outs), outs
    assert collections.Counter(_markers(db)) == collections.Counter(expected)
    assert not list((tmp_path / "ctxwright-recovery").glob("proxy-*.jsonl"))


@pytest.mark.slow
def test_an_importer_killed_midway_leaves_a_file_the_next_one_resumes_after(tmp_path: Path) -> None:
    """``kill -9`` between two imported exchanges: the next importer starts after the last one
    the file notes as stored (it recorded them all again before), so at most the exchange being
    written at the kill's instant is recorded twice."""
    db = tmp_path / "a.db"
    _import(db)
    expected = [f"m{i}" for i in range(150)]
    _spool(db, expected)
    code = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {SRC!r})
        from ctxwright.proxy.recorder import Recorder
        real = Recorder.record
        def slow(self, ex):
            time.sleep(0.01)  # the kill lands here, almost always: between two exchanges
            return real(self, ex)
        Recorder.record = slow
        Recorder({str(db)!r}, "http://127.0.0.1:9", printer=None).close()
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 90
        while len(_markers(db)) < 30:
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.005)
    finally:
        proc.kill()
        proc.wait()
    assert len(_markers(db)) < len(expected)
    rec, lines = _import(db)
    counts = collections.Counter(_markers(db))
    assert set(counts) == set(expected) and rec.lost == 0, lines
    assert sum(n - 1 for n in counts.values()) <= 1, counts.most_common(3)


def test_the_store_failing_mid_import_keeps_the_rest_once(tmp_path: Path, monkeypatch: Any) -> None:
    db = tmp_path / "a.db"
    _import(db)
    path = _spool(db, [f"m{i}" for i in range(6)])
    with path.open("ab") as f:
        f.write(b"garbage\n" + json.dumps(_exchange("m6")).encode() + b"\n")
    real = Recorder.record
    calls = {"n": 0}

    def flaky(self: Recorder, ex: Any) -> int:
        calls["n"] += 1
        if calls["n"] >= 4:  # from the 4th on: the close's last try fails too
            raise StoreUnusable("the store went away", reason="the store went away")
        return real(self, ex)

    monkeypatch.setattr(Recorder, "record", flaky)
    rec, lines = _import(db)
    monkeypatch.undo()
    assert _markers(db) == ["m0", "m1", "m2"] and rec.lost == 1, lines  # the garbage line: said once
    assert any("could not record into the store" in line for line in lines)
    rec2, lines2 = _import(db)
    assert _markers(db) == [f"m{i}" for i in range(7)] and rec2.lost == 0, lines2
    assert not path.exists()


def test_a_full_disk_as_the_store_fails_mid_import_leaves_the_file_resumable(tmp_path: Path, monkeypatch: Any) -> None:
    """The store fails midway and the rest cannot be rewritten either: the file is left as it
    is, said, and the next import starts after what it noted as recorded."""
    db = tmp_path / "a.db"
    _import(db)
    path = _spool(db, [f"m{i}" for i in range(5)])
    real = Recorder.record
    calls = {"n": 0}

    def flaky(self: Recorder, ex: Any) -> int:
        calls["n"] += 1
        if calls["n"] >= 3:
            raise StoreUnusable("the store went away", reason="the store went away")
        return real(self, ex)

    def full(*_a: Any, **_k: Any) -> Any:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Recorder, "record", flaky)
    monkeypatch.setattr(recovery, "open_private", full)
    rec, lines = _import(db)
    monkeypatch.undo()
    assert _markers(db) == ["m0", "m1"] and rec.lost == 0, lines
    said = [line for line in lines if "could not rewrite" in line]  # at each try (the close's last one too)
    assert said and "(No space left on device); left as it is" in said[0] and str(path) in said[0]
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no half-written copy left
    _import(db)
    assert _markers(db) == [f"m{i}" for i in range(5)] and not path.exists()


def test_a_disk_too_full_for_the_first_line_leaves_no_empty_file_behind(tmp_path: Path) -> None:
    folder = tmp_path / "r"
    code = textwrap.dedent(
        f"""
        import glob, resource, sys, tempfile
        sys.path.insert(0, {SRC!r})
        from pathlib import Path
        from ctxwright.store.recovery import Spool
        before = set(glob.glob(tempfile_glob := tempfile.gettempdir() + "/ctxwright-recovery-*"))
        resource.setrlimit(resource.RLIMIT_FSIZE, (10, resource.RLIM_INFINITY))
        s = Spool(Path({str(folder)!r}), "proxy", "a.db")
        lost = 0
        for i in range(20):
            try:
                s.add({{"n": i}})
            except OSError:
                lost += 1
        sys.stderr.write(f"{{lost}} {{len(set(glob.glob(tempfile_glob)) - before)}}\\n")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stderr.split() == ["20", "0"], out
    assert list(folder.iterdir()) == []


def test_a_full_disk_while_spooling_is_counted_lost_and_said_and_the_file_stays_whole(
    tmp_path: Path, monkeypatch: Any
) -> None:
    db = tmp_path / "a.db"
    _import(db)
    lines: list[str] = []
    rec = Recorder(str(db), "http://127.0.0.1:9", printer=None, warn=lines.append)
    try:
        monkeypatch.setattr(
            Recorder, "record", lambda self, ex: (_ for _ in ()).throw(StoreUnusable("away", reason="away"))
        )
        rec.submit(exchange_from_record(_exchange("m0")))
        assert rec.wait_idle(30, at_least=1)
        real_write = os.write
        state = {"full": True}

        def half_then_full(fd: int, data: Any) -> int:
            if state["full"]:
                state["full"] = False
                real_write(fd, bytes(data[: len(data) // 2]))  # a short write, then the disk is full
                raise OSError(errno.ENOSPC, "No space left on device")
            return real_write(fd, data)

        monkeypatch.setattr(recovery.os, "write", half_then_full)
        rec.submit(exchange_from_record(_exchange("m1")))
        rec.submit(exchange_from_record(_exchange("m2")))  # the disk has room again
        assert rec.wait_idle(30, at_least=3)
        monkeypatch.undo()
    finally:
        rec.close()
    assert rec.lost == 1 and rec.spooled == 2, lines
    assert any("nor keep it in a recovery file (No space left on device): it is lost" in line for line in lines), lines
    rec2, lines2 = _import(db)  # the spool is whole: m1's half did not swallow m2
    assert _markers(db) == ["m0", "m2"] and rec2.lost == 0, lines2


def test_a_file_size_limit_refuses_the_line_whole(tmp_path: Path) -> None:
    """A real short write (RLIMIT_FSIZE: the kernel writes up to the limit, then EFBIG; Python
    ignores SIGXFSZ): the file is cut back to its last whole line."""
    folder = tmp_path / "r"
    code = textwrap.dedent(
        f"""
        import resource, sys
        sys.path.insert(0, {SRC!r})
        from pathlib import Path
        from ctxwright.store.recovery import Spool
        s = Spool(Path({str(folder)!r}), "proxy", "a.db")
        path = s.add({{"n": 1}})
        size = path.stat().st_size
        resource.setrlimit(resource.RLIMIT_FSIZE, (size + 100, resource.RLIM_INFINITY))
        try:
            s.add({{"n": "x" * 1000}})
        except OSError as exc:
            print(exc.errno, path.stat().st_size == size)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == [str(errno.EFBIG), "True"], out
    (taken,) = claim_spools(folder, "proxy", "a.db")
    assert [r["n"] for r in taken.records()] == [1] and taken.skipped == 0
    taken.close()
