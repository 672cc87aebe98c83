"""The command line's streams and files under hostile probes: a log that is one huge line or an
endless device, logs from pipes and stdin, a prompt from stdin, a reader of stdout that goes
away, and the report file (its mode, a device that refuses the write). Real subprocesses of
``python -m ctxwright.cli.main`` where the process's own streams are what is tested."""

from __future__ import annotations

import json
import os
import resource
import stat
import subprocess
import sys
import threading
import tracemalloc
from pathlib import Path

import pytest

from ctxwright.cli.main import main
from ctxwright.cli.stdio import SIGPIPE_STATUS
from fakeserver import FakeOpenAIServer as F

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _cli(*args: str, stdin: bytes | None = None, timeout: float = 120, env: dict[str, str] | None = None):
    """``ctxwright ARGS`` in a real process, its address space capped at 2 GB (an endless read
    must fail the test, not the machine)."""

    def cap_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    return subprocess.run(
        [sys.executable, "-m", "ctxwright.cli.main", *args],
        input=stdin,
        capture_output=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": SRC, **(env or {})},
        preexec_fn=cap_memory,
    )


def _body(i: int, extra: str = "") -> dict:
    return {
        "model": "m",
        "messages": [
            {"role": "system", "content": "You help."},
            *({"role": "user", "content": f"question {k}{extra}"} for k in range(i + 1)),
        ],
    }


def _log(path: Path, n: int = 3) -> Path:
    path.write_text("".join(json.dumps(_body(i)) + "\n" for i in range(n)), encoding="utf-8")
    return path


# -- audit: a record's size is capped -------------------------------------------------------


def test_a_line_over_the_cap_is_one_line_naming_it_and_exit_2(tmp_path, capsys):
    """Hostile probe: a log whose second line is 8 MB, with a cap of 1 MB: one line on stderr
    naming line 2 and the cap, exit 2, and the reader never held the long line."""
    log = tmp_path / "huge.jsonl"
    with log.open("w", encoding="utf-8") as f:
        f.write(json.dumps(_body(0)) + "\n")
        f.write(json.dumps(_body(1, extra="x" * (8 << 20))) + "\n")
        f.write(json.dumps(_body(2)) + "\n")
    assert main(["audit", "--json", str(_log(tmp_path / "small.jsonl"))]) == 0  # imports, token tables
    capsys.readouterr()
    tracemalloc.start()
    try:
        status = main(["audit", "--json", "--max-record-bytes", str(1 << 20), str(log)])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    cap = capsys.readouterr()
    assert status == 2
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1, cap.err
    assert "line 2 is longer than 1,048,576 bytes" in lines[0] and "--max-record-bytes" in lines[0]
    assert "Traceback" not in cap.err and "unexpected" not in cap.err
    assert peak < 4 << 20, peak  # the 8 MB line was never read whole
    json.loads(cap.out)  # what was audited before it is still one whole JSON document


def test_the_record_cap_holds_by_default_and_for_a_pretty_printed_document(tmp_path, monkeypatch, capsys):
    import ctxwright.audit.logs as logs

    monkeypatch.setattr(logs, "MAX_RECORD_BYTES", 1000)  # the library's default, for read_log
    doc = tmp_path / "export.json"
    doc.write_text(json.dumps({"sessions": [{"x": "y" * 5000}]}, indent=2), encoding="utf-8")
    from ctxwright.errors import LogUnreadable

    with pytest.raises(LogUnreadable, match="document from line 1 is longer than 1,000 bytes"):
        list(logs.read_stream(doc.open("rb"), max_record=1000))
    assert main(["audit", "--max-record-bytes", "1000", str(doc)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "longer than 1,000 bytes" in err
    with pytest.raises(SystemExit) as exit_info:
        main(["audit", "--max-record-bytes", "-5", str(doc)])
    assert exit_info.value.code == 2 and "1 or more" in capsys.readouterr().err


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_audit_of_dev_zero_is_refused_at_once():
    """Hostile probe: ``/dev/zero`` is one endless line. Refused before it is opened."""
    for device in ("/dev/zero", "/dev/urandom"):
        done = _cli("audit", device, timeout=60)
        err = done.stderr.decode()
        assert done.returncode == 2, err
        assert err.count("\n") == 1 and "is a character device, not a log" in err and "- for stdin" in err


def test_audit_of_a_folder_is_one_line(tmp_path, capsys):
    assert main(["audit", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "is a folder" in err


def test_a_log_from_stdin_a_pipe_and_a_fifo_is_audited(tmp_path):
    log = _log(tmp_path / "log.jsonl")
    data = log.read_bytes()
    for target in ("-", "/dev/stdin"):  # stdin as a pipe, by name and by its device path
        done = _cli("audit", "--json", target, stdin=data)
        assert done.returncode == 0, done.stderr
        assert len(json.loads(done.stdout)["requests"]) == 3 and done.stderr == b""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    def writer() -> None:
        with fifo.open("wb") as f:  # blocks until the audit opens it for reading
            f.write(data)

    th = threading.Thread(target=writer, daemon=True)
    th.start()
    done = _cli("audit", "--json", str(fifo))
    th.join(30)
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["requests"]) == 3


def test_an_endless_line_on_stdin_stops_at_the_cap():
    """Hostile probe: ``cat /dev/zero | ctxwright audit -``: stdin is allowed, and the cap ends it."""
    with subprocess.Popen(["cat", "/dev/zero"], stdout=subprocess.PIPE) as zeros:
        done = subprocess.run(
            [sys.executable, "-m", "ctxwright.cli.main", "audit", "--max-record-bytes", "5000000", "-"],
            stdin=zeros.stdout,
            capture_output=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": SRC},
        )
        zeros.kill()
    assert done.returncode == 2
    assert done.stderr.decode().count("\n") == 1 and b"line 1 is longer than 5,000,000 bytes" in done.stderr


# -- stdout closed early ------------------------------------------------------------------------


def test_json_into_a_pipe_closed_early_ends_quietly(tmp_path):
    """``ctxwright audit --json LOG | head -c 10``: no BrokenPipe message, the status of a
    tool killed by SIGPIPE (141), and nothing printed at exit either."""
    log = _log(tmp_path / "log.jsonl", n=1500)  # far more output than a pipe buffers
    for args in (["audit", "--json", str(log)], ["audit", str(log)]):
        proc = subprocess.Popen(
            [sys.executable, "-m", "ctxwright.cli.main", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": SRC},
        )
        assert proc.stdout is not None and proc.stderr is not None
        assert len(proc.stdout.read(10)) == 10
        proc.stdout.close()  # as head does after its 10 bytes
        err = proc.stderr.read()
        assert proc.wait(timeout=120) == SIGPIPE_STATUS
        assert err == b"", err.decode()


def test_a_broken_pipe_that_is_not_stdout_is_still_an_error(tmp_path, monkeypatch, capsys):
    def broken(args):
        raise BrokenPipeError(32, "Broken pipe (a server's stdin)")

    monkeypatch.setattr("ctxwright.cli.main.cmd_sessions", broken)
    monkeypatch.setattr("ctxwright.cli.stdio.stdout_gone", lambda: False)
    assert main(["--db", str(tmp_path / "x.db"), "sessions"]) == 1
    assert "BrokenPipeError" in capsys.readouterr().err


# -- run -: the prompt from stdin ---------------------------------------------------------------


def _run_args(db: Path, url: str) -> list[str]:
    return ["--db", str(db), "run", "--backend", "openai", "--base-url", url, "--model", "fake"]


def test_run_dash_reads_the_prompt_from_stdin(tmp_path, _no_proxy):
    """``echo 'q …' | ctxwright run -``: the prompt is what came on stdin (its newline dropped)."""
    with F([F.reply_text("answer one")]) as srv:
        done = _cli(*_run_args(tmp_path / "c.db", srv.url), "-", stdin="what is 2 + 2? 二加二\n".encode())
        assert done.returncode == 0, done.stderr.decode()
        users = [m for m in srv.requests[0]["messages"] if m["role"] == "user"]
        assert users[0]["content"] == "what is 2 + 2? 二加二"
    assert b"answer one" in done.stdout


@pytest.mark.parametrize(
    ("stdin", "message"),
    [(b"", "stdin was empty"), (b"\xff\xfe not utf-8", "not UTF-8"), (b"\n\n", "stdin was empty")],
)
def test_run_dash_with_nothing_usable_on_stdin_is_one_line(tmp_path, stdin, message):
    done = _cli(*_run_args(tmp_path / "c.db", "http://127.0.0.1:9/v1"), "-", stdin=stdin)
    err = done.stderr.decode()
    assert done.returncode == 2 and err.count("\n") == 1 and message in err, err


def test_run_help_says_dash_reads_stdin(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert "- to read it from stdin" in " ".join(capsys.readouterr().out.split())


# -- the report file ---------------------------------------------------------------------------


def test_the_report_is_written_0600_like_the_database(tmp_path, capsys):
    log = _log(tmp_path / "log.jsonl")
    old = os.umask(0o022)
    try:
        out = tmp_path / "report.html"
        assert main(["report", str(log), "-o", str(out)]) == 0
        assert stat.S_IMODE(out.stat().st_mode) == 0o600
        out.chmod(0o644)  # a report written by an earlier version, rewritten
        assert main(["report", str(log), "-o", str(out)]) == 0
        assert stat.S_IMODE(out.stat().st_mode) == 0o600
    finally:
        os.umask(old)
    capsys.readouterr()


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_report_to_dev_full_is_one_line_and_leaves_the_device_alone(tmp_path, capsys):
    log = _log(tmp_path / "log.jsonl")
    before = os.stat("/dev/full").st_mode
    assert main(["report", str(log), "-o", "/dev/full"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "cannot write the report to /dev/full" in err and "unexpected" not in err
    assert os.stat("/dev/full").st_mode == before  # a device's mode is not ours to change


def test_report_onto_a_symlink_is_refused_not_followed(tmp_path, capsys):
    log = _log(tmp_path / "log.jsonl")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me", encoding="utf-8")
    (tmp_path / "link.html").symlink_to(victim)
    assert main(["report", str(log), "-o", str(tmp_path / "link.html")]) == 2
    assert "symbolic link" in capsys.readouterr().err and victim.read_text(encoding="utf-8") == "keep me"
