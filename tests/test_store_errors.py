"""Every database problem is one line that says what is wrong and what to do, through the
command line (``sessions``, ``show``, ``run``): not SQLite, truncated, a folder, a read-only
file or folder, a newer schema, locked by another process. Exit code 2, no traceback, and
the file is left byte for byte as it was."""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctxwright.cli.main import main
from ctxwright.core.prefix import Prefix
from ctxwright.core.session import Session
from ctxwright.store.migrations import SCHEMA_VERSION
from ctxwright.store.sessions import Store

SRC = Path(__file__).resolve().parents[1] / "src"
DEAD_URL = "http://127.0.0.1:9/v1"  # never reached: each case fails on the database first
COMMANDS = {
    "sessions": ["sessions"],
    "show": ["show", "SID"],
    "run": ["run", "--backend", "openai", "--model", "m", "--base-url", DEAD_URL, "hi"],
}


def _good(path: Path) -> str:
    """A healthy store with one session, closed (no -wal/-shm left)."""
    store = Store(path)
    s = Session.start(Prefix.build("S", ()), store=store)
    s.add_user("hello")
    store.close()
    assert not Path(f"{path}-wal").exists()
    return s.id


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "folder"


def _side(p: Path) -> list[str]:
    return sorted(x.name for x in p.parent.iterdir() if x.name.startswith(p.name) and x.name != p.name)


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("ctxwright: ") and "Traceback" not in err
    return lines[0]


def _argv(command: str, sid: str) -> list[str]:
    return [a.replace("SID", sid) for a in COMMANDS[command]]


# -- cases that need no other process or user ------------------------------------------------------


def _not_sqlite(p: Path) -> None:
    p.write_text("my notes, not a database\n" * 40)


def _truncated(p: Path) -> None:
    _good(p)
    store = Store(p)
    s = Session.start(Prefix.build("S" * 5000, ()), store=store)  # a few pages more
    for _ in range(20):
        s.add_user("x" * 3000)
    store.close()
    with p.open("r+b") as f:
        f.truncate(p.stat().st_size // 2)


def _folder(p: Path) -> None:
    p.mkdir()


def _newer(p: Path) -> None:
    _good(p)
    con = sqlite3.connect(p)
    con.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    con.commit()
    con.close()


CASES = {
    "not-sqlite": (_not_sqlite, "is not an SQLite database"),
    "truncated": (_truncated, "is damaged"),
    "folder": (_folder, "is a folder, not a database file"),
    "newer-schema": (_newer, "written by a newer ctxwright"),
}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("case", list(CASES))
def test_a_database_that_cannot_be_used_is_one_line_and_left_as_it_was(tmp_path, capsys, case, command):
    db = tmp_path / "ctx.db"
    make, expected = CASES[case]
    make(db)
    before, side = _digest(db), _side(db)
    assert main(["--db", str(db), *_argv(command, "0123456789ab")]) == 2
    line = _one_line(capsys.readouterr().err)
    assert expected in line and str(db) in line and ("--db" in line or "Upgrade" in line)
    assert _digest(db) == before and _side(db) == side


@pytest.fixture
def locked_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, str]]:
    """A store another process holds an exclusive lock on (``locking_mode=EXCLUSIVE``: no
    reader or writer gets in), released when the test ends."""
    db = tmp_path / "ctx.db"
    sid = _good(db)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys\n"
            f"con = sqlite3.connect({str(db)!r}, isolation_level=None)\n"
            "con.execute('PRAGMA locking_mode=EXCLUSIVE')\n"
            "con.execute('BEGIN EXCLUSIVE')\n"
            "print('locked', flush=True)\n"
            "sys.stdin.read()\n"
            "con.execute('ROLLBACK')\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    monkeypatch.setenv("CTXWRIGHT_DB_WAIT", "0.5")
    try:
        yield db, sid
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=10)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_database_locked_by_another_process_is_one_line(locked_db, capsys, command):
    db, sid = locked_db
    before = _digest(db)
    assert main(["--db", str(db), *_argv(command, sid)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "is locked by another process" in line and "CTXWRIGHT_DB_WAIT" in line and "not changed" in line
    assert _digest(db) == before


# -- read-only: as a user the permissions apply to ------------------------------------------------


def _as_unprivileged() -> list[str]:
    """The command prefix under which file permissions apply: nothing for a normal user; for
    root, ``setpriv`` without the capabilities that bypass them (CAP_DAC_*)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: read-only files cannot be made read-only for us")
    prefix = [setpriv, "--bounding-set=-dac_override,-dac_read_search", "--"]
    probe = subprocess.run([*prefix, "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"setpriv cannot drop capabilities here: {probe.stderr.decode().strip()}")
    return prefix


def _cli(db: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC), "NO_PROXY": "127.0.0.1"}
    return subprocess.run(
        [*_as_unprivileged(), sys.executable, "-m", "ctxwright.cli.main", "--db", str(db), *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


@pytest.mark.slow
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_read_only_database_file(tmp_path, command):
    db = tmp_path / "ctx.db"
    sid = _good(db)
    db.chmod(0o444)
    before = _digest(db)
    done = _cli(db, _argv(command, sid))
    assert _digest(db) == before
    if command != "run":  # reading needs no write: listing and showing still work
        assert done.returncode == 0 and (sid in done.stdout or "hello" in done.stdout), done.stderr
        return
    assert done.returncode == 2
    line = _one_line(done.stderr)
    assert "the file is read-only" in line and "chmod u+w" in line and str(db) in line


@pytest.mark.slow
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_database_in_a_read_only_folder(tmp_path, command):
    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "ctx.db"
    sid = _good(db)
    folder.chmod(0o555)
    try:
        before = _digest(db)
        done = _cli(db, _argv(command, sid))
        assert done.returncode == 2
        line = _one_line(done.stderr)
        assert f"its folder {folder} is read-only" in line and "ctx.db-wal" in line and "--db" in line
        assert _digest(db) == before and _side(db) == []
    finally:
        folder.chmod(0o755)
