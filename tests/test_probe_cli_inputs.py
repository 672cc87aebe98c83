"""Hostile input at the CLI's newer surfaces, through the real ``main`` (in process) or a
subprocess where argv bytes matter: the one session resolver (``cli/sessions.py``,
``store/ids.py``) on SQLite and PostgreSQL, ``sessions --limit``, ``ablate --json --resume``
(``ablation/results.py``), ``--status-fields``, ``CTXWRIGHT_THREADS``, the golden bounds of
``gate``/``replay`` and ``--timeout``. Each bad input is one line on stderr and exit 2, with
nothing created or changed -- never a traceback, a hang, or a wildcard read as a pattern.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ctxwright.cli.main import main
from ctxwright.proxy.store import ProxyLog
from ctxwright.store.sessions import Store

SRC = str(Path(__file__).resolve().parents[1] / "src")
RUN_IDS = ["abc_def", "abcXdef", "ab%cd", "q'x", 'q"y', "bs\\z"]
PROXY_ID = "p_roxy1"


def _rc(argv: list[str]) -> int:
    """``main``'s exit code, whether returned or raised (argparse exits on a bad flag value)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and len(err) < 1000, err[:2000]
    assert "Traceback" not in err and "unexpected" not in err, err
    return lines[0]


def _seed(target: str) -> None:
    s = Store(target)
    for sid in RUN_IDS:
        s.create_session({"system": "x"}, "0" * 64, session_id=sid)
    log = ProxyLog(s)
    log.create_session(
        grouped_by="header", group_key="k", api="openai_chat", upstream="http://x/v1", session_id=PROXY_ID
    )
    s.close()


def _files(folder: Path) -> list[str]:
    """The files in ``folder``, less SQLite's own (``-wal``/``-shm`` come and go with connections)."""
    return sorted(p.name for p in folder.iterdir() if not p.name.endswith(("-wal", "-shm")))


def _ids(target: str) -> list[str]:
    s = Store(target)
    try:
        return sorted([r["id"] for r in s.list_sessions(limit=1000)] + [r["id"] for r in ProxyLog(s).session_rows()])
    finally:
        s.close()


BAD_IDS = [
    "%",
    "_",
    "%%",
    "abc%",
    "a_c",
    "ab\\",
    "'",
    '"',
    "a\x00b",
    "a\nb",
    "",
    "   ",
    "\udcff",
    "a\udcff",
    "x" * 1_000_000,
]


@pytest.mark.parametrize("command", ["show", "export", "audit", "report", "lock", "attention", "gate"])
def test_a_bad_session_id_is_one_line_on_both_databases(db_target, command, capsys, tmp_path, monkeypatch):
    """No start is a pattern (``%``/``_`` match only themselves), and NUL, a lone surrogate (argv
    bytes that are not UTF-8), a newline or a megabyte is "no session", one short line."""
    monkeypatch.chdir(tmp_path)
    _seed(db_target)
    before = _ids(db_target)
    files = _files(tmp_path)
    extra = {"report": ["-o", str(tmp_path / "r.html")], "gate": ["--", "true"]}.get(command, [])
    for given in BAD_IDS:
        assert _rc([command, given, "--db", db_target, *extra]) == 2, repr(given[:20])
        line = _one_line(capsys)
        assert len(line) < 500, line  # "no session ...", or "cannot read" for what looks like a path
    assert _ids(db_target) == before
    assert _files(tmp_path) == files  # no report, lock or golden file written


def test_wildcards_and_quotes_match_only_as_text(db_target, capsys):
    _seed(db_target)
    for given, full in [("abc_", "abc_def"), ("ab%", "ab%cd"), ("q'", "q'x"), ('q"', 'q"y'), ("bs\\", "bs\\z")]:
        assert main(["export", given, "--db", db_target]) == 0
        assert json.loads(capsys.readouterr().out)["id"] == full
    assert main(["show", "p_", "--db", db_target]) == 0  # the proxy session, by its start
    assert PROXY_ID in capsys.readouterr().out
    assert main(["show", "abc", "--db", db_target]) == 2  # abc_def and abcXdef: ambiguous, both named
    line = _one_line(capsys)
    assert "ambiguous" in line and "abc_def" in line and "abcXdef" in line


def test_an_id_that_is_also_a_file_name(tmp_path, capsys, monkeypatch):
    """``show`` takes no file, so a file of that name does not hide the session; ``report``
    takes either, and an existing file is the file."""
    db = str(tmp_path / "ctx.db")
    _seed(db)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "abc_def").write_text("not a report\n")
    assert main(["show", "abc_def", "--db", db]) == 0
    assert "abc_def" in capsys.readouterr().out
    assert _rc(["report", "abc_def", "--db", db, "-o", str(tmp_path / "r.html")]) == 2
    assert "abc_def" in _one_line(capsys)
    assert (tmp_path / "abc_def").read_text() == "not a report\n" and not (tmp_path / "r.html").exists()


def test_surrogate_argv_bytes_in_a_subprocess(tmp_path):
    """Bytes that are not UTF-8 reach Python as lone surrogates (surrogateescape)."""
    db = str(tmp_path / "ctx.db")
    _seed(db)
    for argv in ([b"show", b"ab\xff"], [b"export", b"\xff\xfe"], [b"sessions", b"--limit", b"\xff"]):
        r = subprocess.run(
            [os.fsencode(sys.executable), b"-m", b"ctxwright", *argv, b"--db", os.fsencode(db)],
            capture_output=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": SRC},
        )
        err = r.stderr.decode("utf-8", "replace")
        assert r.returncode == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


@pytest.mark.parametrize(
    ("limit", "message"),
    [
        ("-1", "-1 is not a number above 0"),
        ("0", "0 is not a number above 0"),
        ("abc", "'abc' is not a whole number"),
        ("1e3", "'1e3' is not a whole number"),
        ("9" * 5000, "is not a whole number"),
    ],
)
def test_sessions_limit_bad_values(tmp_path, limit, message, capsys):
    assert _rc(["sessions", "--limit", limit, "--db", str(tmp_path / "ctx.db")]) == 2
    line = _one_line(capsys)
    assert message in line and len(line) < 200, line


def test_sessions_limit_small_and_huge_on_a_store_of_mixed_kinds(db_target, capsys):
    """Thousands of sessions of three kinds: ``--limit 3`` gives the three newest of all kinds;
    a limit past a 64-bit integer means "all" (it overflowed the database's LIMIT)."""
    s = Store(db_target)

    def fill(db):  # one transaction: thousands of rows in well under a second
        for i in range(1500):
            db.execute(
                "INSERT INTO sessions (id, parent_id, created_at, prefix_json, prefix_sha256, meta_json) "
                "VALUES (?, NULL, ?, '{}', ?, '{}')",
                (f"r{i:05d}", 1000.0 + 2 * i, "0" * 64),
            )
            db.execute(
                "INSERT INTO proxy_sessions (id, created_at, grouped_by, group_key, api, upstream) "
                "VALUES (?, ?, 'header', ?, 'openai_chat', ?)",
                (f"p{i:05d}", 1001.0 + 2 * i, str(i), "http://x/v1" if i % 2 else "framework:httpx"),
            )

    s.db.run(fill)
    s.close()
    assert main(["sessions", "--limit", "3", "--json", "--db", db_target]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in rows] == ["p01499", "r01499", "p01498"]
    assert main(["sessions", "--limit", str(10**20), "--json", "--db", db_target]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 3000


# -- ablate --json FILE --resume ------------------------------------------------------------


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], dict]:
    """A real two-run ablation's file (two arms x one task, the oracle model): its command and JSON."""
    from ctxwright.ablation import load_tasks
    from fakeserver import FakeOpenAIServer as F
    from test_ablation import ORACLE_FLAGS, POLICY, TASKS, _oracle

    out = tmp_path_factory.mktemp("ablate") / "a.json"
    srv = F(fallback=_oracle(load_tasks(TASKS)))
    srv.__enter__()
    argv = ["ablate", "--system", str(POLICY), "--tasks", str(TASKS), "--limit", "1", "--only", "Refunds"]
    argv += [*ORACLE_FLAGS, "--base-url", srv.url, "--quiet"]
    assert main([*argv, "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["complete"] is True and len(data["runs"]) == 2
    yield argv, data
    srv.__exit__(None, None, None)


def _stopped(data: dict, **change: object) -> dict:
    d = json.loads(json.dumps(data))
    d.update(complete=False, runs_done=1, runs=d["runs"][:1], arms=[])
    d.update(change)
    return d


def _hostile(data: dict) -> dict[str, bytes]:
    run = data["runs"][0]
    bad_runs = {
        "a truncated file": json.dumps(_stopped(data)).encode()[:-40],
        "a list": b"[1, 2]",
        "runs not a list": json.dumps(_stopped(data, runs={"a": 1})).encode(),
        "runs_total a string": json.dumps(_stopped(data, runs_total="nine")).encode(),
        "success a string": json.dumps(_stopped(data, runs=[{**run, "success": "yes"}])).encode(),
        "trial a bool": json.dumps(_stopped(data, runs=[{**run, "trial": True}])).encode(),
        "calls not text": json.dumps(_stopped(data, runs=[{**run, "calls": [1, 2]}])).encode(),
        "seconds text": json.dumps(_stopped(data, runs=[{**run, "seconds": "1"}])).encode(),
        "a trial out of range": json.dumps(_stopped(data, runs=[{**run, "trial": 7}])).encode(),
        "another arm": json.dumps(_stopped(data, runs=[{**run, "arm": "nope"}])).encode(),
        "a duplicated run": json.dumps(_stopped(data, runs=[run, run], runs_done=2)).encode(),
        "another plan": json.dumps(_stopped(data, plan={**data["plan"], "trials": 3})).encode(),
        "not UTF-8": b'{"plan": "\xff"}',
    }
    return bad_runs


def test_resume_refuses_a_hostile_file_in_one_line_and_keeps_it(finished, tmp_path, capsys):
    argv, data = finished
    for why, body in _hostile(data).items():
        path = tmp_path / "a.json"
        path.write_bytes(body)
        assert main([*argv, "--json", str(path), "--resume"]) == 2, why
        line = _one_line(capsys)
        assert "--json" in line, (why, line)
        assert path.read_bytes() == body, why  # nothing lost


def test_resume_refuses_a_fifo_folder_and_huge_file_without_blocking(finished, tmp_path, capsys, monkeypatch):
    import ctxwright.ablation.results as results

    argv, _ = finished
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    (tmp_path / "dir.json").mkdir()
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 2048)
    monkeypatch.setattr(results, "MAX_FILE_BYTES", 1024)
    for path, resume in [(fifo, True), (fifo, False), (tmp_path / "dir.json", True), (big, True)]:
        assert main([*argv, "--json", str(path), *(["--resume"] if resume else [])]) == 2, path
        assert str(path) in _one_line(capsys)
    assert big.read_bytes() == b" " * 2048


def test_resume_through_a_symlink_never_writes_through_it(finished, tmp_path, capsys):
    """A stopped ablation behind a symlink resumes; the link is replaced by the new file, the
    file it pointed at is left as it was."""
    argv, data = finished
    target = tmp_path / "elsewhere.json"
    body = json.dumps(_stopped(data)).encode()
    target.write_bytes(body)
    link = tmp_path / "a.json"
    link.symlink_to(target)
    assert main([*argv, "--json", str(link), "--resume"]) == 0
    capsys.readouterr()
    assert target.read_bytes() == body
    assert not link.is_symlink() and json.loads(link.read_text())["complete"] is True
    assert json.loads(link.read_text())["runs"][0] == data["runs"][0]  # the kept run, as it was


# -- --status-fields, CTXWRIGHT_THREADS, golden bounds, --timeout ---------------------------


@pytest.mark.parametrize("spec", ["", ",", " , "])
def test_status_fields_that_name_nothing_are_refused(spec):
    from ctxwright.errors import ConfigError
    from ctxwright.status.bar import status_fields

    with pytest.raises(ConfigError, match="names no field"):
        status_fields(spec)
    assert status_fields("all,,-cwd") == tuple(f for f in status_fields(None) if f != "cwd")


@pytest.mark.parametrize("spec", ["", "-", "all,-all", "\udcff", "x" * 100_000])
def test_status_fields_bad_values_through_run(spec, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    argv = ["run", "--db", str(tmp_path / "c.db"), "--backend", "openai", "--base-url", "http://127.0.0.1:9/v1"]
    assert main([*argv, "--model", "m", "--status-fields", spec, "hi"]) == 2
    line = _one_line(capsys)
    assert "status_fields" in line
    assert not (tmp_path / "c.db").exists() or _ids(str(tmp_path / "c.db")) == []


@pytest.mark.parametrize("raw", ["0", "-1", "abc", "1.5", "1_0", "+2", "99999999999999999999", "٣", "x" * 10_000])
def test_threads_bad_values_are_one_short_error(raw, monkeypatch):
    from ctxwright.core.threads import THREADS_ENV, default_threads
    from ctxwright.errors import ConfigError

    monkeypatch.setenv(THREADS_ENV, raw)
    with pytest.raises(ConfigError, match=THREADS_ENV) as exc:
        default_threads()
    assert len(str(exc.value)) < 200 and "\n" not in str(exc.value)


def test_threads_good_values(monkeypatch):
    from ctxwright.core.threads import MAX_THREADS, THREADS_ENV, default_threads

    for raw, want in [(" 3 ", 3), ("1", 1), (str(MAX_THREADS), MAX_THREADS)]:
        monkeypatch.setenv(THREADS_ENV, raw)
        assert default_threads() == want


@pytest.mark.parametrize("flag", ["--max-golden-mb", "--max-golden-calls", "--max-golden-messages"])
@pytest.mark.parametrize("value", ["-1", "0", "abc", "1.5", "", "9" * 5000])
def test_golden_bounds_bad_values(flag, value, capsys, tmp_path):
    for cmd in (["gate", "--golden", str(tmp_path / "g.jsonl")], ["replay", "serve", str(tmp_path / "g.jsonl")]):
        assert _rc([*cmd, flag, value]) == 2
        line = _one_line(capsys)
        assert flag in line and len(line) < 300, line


def test_a_huge_golden_bound_is_just_a_bound(tmp_path, capsys):
    golden = tmp_path / "g.jsonl"
    golden.write_text("not json\n")
    assert _rc(["gate", "--golden", str(golden), "--max-golden-mb", str(10**30), "--", "true"]) == 2
    assert "Overflow" not in _one_line(capsys)


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1e309", "1e300", "abc"])
def test_timeout_bad_values_refused_before_any_call(value, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    argv = ["run", "--db", str(tmp_path / "c.db"), "--backend", "openai", "--base-url", "http://127.0.0.1:9/v1"]
    assert _rc([*argv, "--model", "m", "--max-retries", "0", f"--timeout={value}", "hi"]) == 2
    line = _one_line(capsys)
    assert "timeout" in line and "model call" not in line, line


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "abc"])
def test_gate_timeout_bad_values(value, capsys, tmp_path):
    assert _rc(["gate", str(tmp_path / "g.jsonl"), f"--timeout={value}", "--", "true"]) == 2
    assert "--timeout" in _one_line(capsys)


def test_a_value_starting_with_a_dash_is_shown_the_equals_form(capsys, tmp_path, monkeypatch):
    """argparse reads ``--status-fields -cwd,-os`` as two flags; the line says to write ``=``, and
    the ``=`` form works."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    assert _rc(["run", "--status-fields", "-cwd,-os", "hi"]) == 2
    assert "--status-fields=-VALUE" in _one_line(capsys)
    from ctxwright.cli.main import build_parser

    args = build_parser().parse_args(["run", "--status-fields=-cwd,-os", "hi"])
    assert args.status_fields == "-cwd,-os"
