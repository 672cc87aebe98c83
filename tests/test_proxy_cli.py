"""``ctxwright proxy`` started wrong, as a careless user starts it: each bad value is one line on
stderr and exit 2 before anything listens or a database is made; an upstream given with the
clients' ``/v1`` is forwarded once, not twice; a listening address other than loopback is
warned about. The CLI runs as a real subprocess; calls go through the official ``openai`` SDK to
the loopback upstream (``tests/proxy_upstream.py``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import openai
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from ports import free_port, wait_listening
from proxy_upstream import Upstream

SRC = Path(__file__).resolve().parents[1] / "src"
ENV = {**os.environ, "PYTHONPATH": str(SRC)}
KEY = "sk-proj-NEVERSTORE-0123456789abcdef"


def _proxy_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "ctxwright.cli.main", "proxy", *args]


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--port", "99999"], "--port 99999: give a TCP port from 1 to 65535"),
        (["--port", "0"], "--port 0: give a TCP port from 1 to 65535"),
        (["--port", "-1"], "--port -1: give a TCP port"),
        (["--timeout", "-1"], "--timeout -1: give a number of seconds above 0"),
        (["--timeout", "0"], "--timeout 0: give a number of seconds above 0"),
        (["--timeout", "nan"], "--timeout nan: give a number of seconds"),
        (["--connect-timeout", "-2"], "--connect-timeout -2: give a number of seconds"),
        (["--record-cap", "-5"], "--record-cap -5: give a size in MB of 0 or more"),
        (["--record-cap", "inf"], "--record-cap inf: give a size in MB"),
        (["--upstream", "http://127.0.0.1:9/v1/chat/completions"], "names a model endpoint"),
        (["--upstream", "https://api.anthropic.com/v1/messages/"], "e.g. --upstream https://api.anthropic.com ("),
        (["--upstream", "localhost:8080/v1"], "--upstream 'localhost:8080/v1' is not an http(s) URL"),
        (["--prices", "/nonexistent/prices.toml"], "/nonexistent/prices.toml: cannot read the prices file"),
        (["--anthropic-upstream", "api.anthropic.com"], "--anthropic-upstream 'api.anthropic.com' is not an http(s)"),
        (["--keep-warm", "--workers", "2"], "--keep-warm works with one proxy process"),
        (["--keep-warm", "--keep-warm-max", "0"], "--keep-warm-max 0: give a number of refreshes from 1"),
        (["--keep-warm", "--keep-warm-idle", "inf"], "--keep-warm-idle inf: give minutes above 0"),
    ],
)
def test_bad_proxy_flags_are_one_line_and_exit_2(tmp_path: Path, flags: list[str], says: str) -> None:
    db = tmp_path / "never.db"
    args = ["--upstream", "http://127.0.0.1:9", "--port", str(free_port()), "--db", str(db)]
    try:
        done = subprocess.run(_proxy_cmd(*args, *flags), capture_output=True, text=True, env=ENV, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"ctxwright proxy {' '.join(flags)} was accepted and started serving")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and says in lines[0], lines
    assert "unexpected" not in done.stderr and "Traceback" not in done.stderr
    assert not db.exists()  # refused before anything was opened


class _Running:
    """``ctxwright proxy ...`` in a subprocess, ready once its port accepts connections."""

    def __init__(self, port: int, *args: str) -> None:
        self.port = port
        self.proc = subprocess.Popen(
            _proxy_cmd("--port", str(port), *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV
        )
        wait_listening(port, self.proc, 60, "the proxy")

    def stop(self) -> tuple[str, str]:
        self.proc.send_signal(signal.SIGINT)
        out, err = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0, err
        return out, err


@pytest.mark.parametrize("suffix", ["/v1", "/v1/"])
def test_an_upstream_given_with_v1_is_forwarded_once(upstream: Upstream, tmp_path: Path, suffix: str) -> None:
    port = free_port()
    proxy = _Running(port, "--upstream", upstream.url + suffix, "--db", str(tmp_path / "v1.db"))
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0)
        before = len(upstream.seen)
        reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
        assert reply.choices[0].message.content == upstream.text
        assert [s.path for s in upstream.seen[before:]] == ["/v1/chat/completions"]  # not /v1/v1/...
    finally:
        out, err = proxy.stop()
    (note,) = err.strip().splitlines()  # one line, and no warning about the loopback host
    assert f"--upstream {upstream.url}{suffix} ends in /v1" in note and f"forwarding to {upstream.url}," in note
    assert f"-> {upstream.url}," in out


def test_a_host_that_is_not_loopback_is_warned_about(upstream: Upstream, tmp_path: Path) -> None:
    port = free_port()
    proxy = _Running(port, "--host", "0.0.0.0", "--upstream", upstream.url, "--db", str(tmp_path / "h.db"))
    _out, err = proxy.stop()
    (warning,) = err.strip().splitlines()
    assert "--host 0.0.0.0 is not a loopback address" in warning and "nothing authenticates" in warning


@pytest.mark.parametrize(
    "host, loopback",
    [
        ("127.0.0.1", True),
        ("127.3.4.5", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("", False),
        ("192.168.1.20", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    from ctxwright.cli.proxy import is_loopback

    assert is_loopback(host) is loopback
