"""``ctxwright wrap``: real programs as the wrapped agent -- a script on the official ``openai``
SDK against the loopback provider (``tests/proxy_upstream.py``) and one on the ``anthropic`` SDK
against the caching Anthropic simulator (``tests/providers/anthropic_sim.py``), both in
``tests/wrap_agents/``. The CLI runs as a real subprocess, as a user starts it.

What must hold: the agent's stdout, stderr and exit code pass through unchanged (compared byte
for byte with the same agent run directly); Ctrl-C (SIGINT to the process group) reaches the
agent and not ctxwright; a SIGTERM to ctxwright reaches the agent; one stored session per
conversation; one summary at exit; a start that fails is one line and the agent never runs;
inside tmux the agent's screen shows only the agent's output while it runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from ctxwright.proxy.agents import AGENTS, SDK, agent_for, pointed
from providers.anthropic_sim import AnthropicSim
from proxy_upstream import Upstream

SRC = Path(__file__).resolve().parents[1] / "src"
AGENTS_DIR = Path(__file__).parent / "wrap_agents"
PY = os.path.basename(sys.executable)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL")}
    env["PYTHONPATH"] = str(SRC)
    env.update(extra)
    return env


def _wrap(db: Path, agent: str, *agent_args: str, flags: tuple[str, ...] = ()) -> list[str]:
    return [
        sys.executable,
        "-m",
        "ctxwright.cli.main",
        "--db",
        str(db),
        "wrap",
        *flags,
        "--",
        sys.executable,
        str(AGENTS_DIR / agent),
        *agent_args,
    ]


def _sessions(db: Path) -> list[dict[str, object]]:
    from ctxwright.proxy.log import proxy_sessions
    from ctxwright.store.sessions import Store

    store = Store(db)
    try:
        return proxy_sessions(store)
    finally:
        store.close()


def _summary(stderr: bytes, agent_stderr: bytes) -> str:
    """What ctxwright wrote on stderr: everything after the agent's own bytes, which come first
    and unchanged."""
    assert stderr.startswith(agent_stderr), stderr
    return stderr[len(agent_stderr) :].decode()


# -- the agent table ---------------------------------------------------------------------------


def test_each_agent_is_pointed_at_the_proxy_by_its_own_variables() -> None:
    origin = "http://127.0.0.1:4321"
    argv, env = pointed(agent_for(["/usr/local/bin/claude", "--resume"]), ["claude", "--resume"], origin, {})
    assert argv == ["claude", "--resume"] and env["ANTHROPIC_BASE_URL"] == origin
    argv, env = pointed(agent_for(["codex", "exec", "hi"]), ["codex", "exec", "hi"], origin, {})
    assert argv == ["codex", "-c", f'openai_base_url="{origin}/v1"', "exec", "hi"]
    assert env["OPENAI_BASE_URL"] == f"{origin}/v1"
    _, env = pointed(agent_for(["goose"]), ["goose"], origin, {})
    assert env["OPENAI_HOST"] == origin and env["ANTHROPIC_HOST"] == origin
    _, env = pointed(agent_for(["aider"]), ["aider"], origin, {})
    assert env["OPENAI_API_BASE"] == f"{origin}/v1" and env["ANTHROPIC_API_BASE"] == origin
    # an unknown program gets both SDKs' variables
    row = agent_for(["python", "agent.py"])
    assert row is SDK
    _, env = pointed(row, ["python", "agent.py"], origin, {"PATH": "/bin"})
    assert env == {"PATH": "/bin", "OPENAI_BASE_URL": f"{origin}/v1", "ANTHROPIC_BASE_URL": origin}
    assert agent_for(["gemini"]).refuse and all(r.docs for r in (*AGENTS, SDK))


def test_opencode_config_is_merged_into_what_the_user_set() -> None:
    origin = "http://127.0.0.1:4321"
    row = agent_for(["opencode"])
    mine = json.dumps({"model": "anthropic/claude-sonnet-4-5", "provider": {"anthropic": {"options": {"timeout": 5}}}})
    _, env = pointed(row, ["opencode"], origin, {"OPENCODE_CONFIG_CONTENT": mine})
    config = json.loads(env["OPENCODE_CONFIG_CONTENT"])
    assert config["model"] == "anthropic/claude-sonnet-4-5"
    assert config["provider"]["anthropic"]["options"] == {"timeout": 5, "baseURL": f"{origin}/v1"}
    assert config["provider"]["openai"]["options"]["baseURL"] == f"{origin}/v1"
    with pytest.raises(ValueError, match="not a JSON object"):
        pointed(row, ["opencode"], origin, {"OPENCODE_CONFIG_CONTENT": "[1, 2"})


@pytest.mark.parametrize(
    "line, agent",
    [
        (["wrap", "claude", "--resume", "--quiet"], ["claude", "--resume", "--quiet"]),  # all after it is claude's
        (["wrap", "--quiet", "--", "python", "a.py", "--x"], ["python", "a.py", "--x"]),
        (["wrap", "python", "a.py", "--", "--arg"], ["python", "a.py", "--", "--arg"]),  # its own `--` kept
        (["--db", "x.db", "wrap", "codex", "exec", "hi"], ["codex", "exec", "hi"]),
    ],
)
def test_the_agents_command_is_every_word_after_wraps_options(line: list[str], agent: list[str]) -> None:
    from ctxwright.cli.main import build_parser
    from ctxwright.cli.wrap import agent_argv

    args, extra = build_parser().parse_known_args(line)
    assert not extra and agent_argv(args) == agent
    assert args.quiet is (line[:2] == ["wrap", "--quiet"])


# -- real agents ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_an_openai_sdk_agent_runs_unchanged_and_each_conversation_is_one_session(
    upstream: Upstream, tmp_path: Path
) -> None:
    agent = [sys.executable, str(AGENTS_DIR / "openai_agent.py"), "talk"]
    direct = subprocess.run(agent, capture_output=True, env=_env(OPENAI_BASE_URL=upstream.url + "/v1"), timeout=120)
    assert direct.returncode == 3, direct.stderr
    before = len(upstream.seen)
    db = tmp_path / "w.db"
    log = tmp_path / "calls.log"
    wrapped = subprocess.run(
        _wrap(db, "openai_agent.py", "talk", flags=("--upstream", upstream.url, "--log", str(log))),
        capture_output=True,
        env=_env(),
        timeout=180,
    )
    assert wrapped.returncode == 3
    assert wrapped.stdout == direct.stdout  # byte for byte: the escape, the UTF-8, the \r
    said = _summary(wrapped.stderr, direct.stderr)
    assert len(upstream.seen) - before == 4  # the calls went through the proxy to the provider
    sessions = _sessions(db)
    assert sorted(int(str(s["calls"])) for s in sessions) == [2, 2]  # one session per conversation
    first, *rest = said.splitlines()
    assert first.startswith(f"ctxwright wrap: {PY} exited 3; 4 model calls in 2 sessions recorded in {db}")
    assert all(line.startswith("  ") for line in rest)  # one summary: its first line, then indented ones
    assert any(line.strip().startswith("hit ratio 53%") for line in rest), said
    report = next(line.split("report: ", 1)[1] for line in rest if "report: " in line)
    assert Path(report).is_file() and Path(report).stat().st_size > 0
    lines = log.read_text().splitlines()  # the per-call lines went to the log, not the terminal
    assert sum(" #0 " in line or " #1 " in line for line in lines) == 4
    assert not any(" #0 " in line for line in said.splitlines())


@pytest.mark.slow
def test_an_anthropic_sdk_agent_is_routed_to_its_provider_and_priced(upstream: Upstream, tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    with AnthropicSim(minimum=50) as sim:
        agent = [sys.executable, str(AGENTS_DIR / "anthropic_agent.py"), "5"]
        direct = subprocess.run(agent, capture_output=True, env=_env(ANTHROPIC_BASE_URL=sim.url), timeout=120)
        assert direct.returncode == 5, direct.stderr
        flags = ("--anthropic-upstream", sim.url, "--openai-upstream", upstream.url)
        wrapped = subprocess.run(
            _wrap(db, "anthropic_agent.py", "5", flags=flags), capture_output=True, env=_env(), timeout=180
        )
        assert len(sim.requests) == 6, wrapped.stderr  # three direct, three through the proxy
    assert wrapped.returncode == 5
    assert wrapped.stdout == direct.stdout
    said = _summary(wrapped.stderr, direct.stderr)
    (session,) = _sessions(db)
    assert session["calls"] == 3
    assert f"exited 5; 3 model calls in 1 session recorded in {db}" in said
    money = next(line.strip() for line in said.splitlines() if " spent" in line)
    assert money.startswith("$") and not money.startswith("$0;"), said  # claude-sonnet-4-5 has a price
    ratio = next(line.strip() for line in said.splitlines() if line.strip().startswith("hit ratio"))
    assert ratio != "hit ratio 0%" and "unknown" not in ratio


def _wait_for(stream: object, text: bytes, proc: subprocess.Popen[bytes], timeout: float = 120) -> bytes:
    """Read ``stream`` until ``text`` appears (the agent said it is ready), the process ended or
    the time ran out."""
    fd = stream.fileno()  # type: ignore[attr-defined]
    got = b""
    deadline = time.monotonic() + timeout
    while text not in got and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            got += chunk
    assert text in got, (got, proc.poll())
    return got


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm", "sighup", "agent-killed"])
def test_ctrl_c_reaches_the_agent_and_sigterm_is_passed_on(upstream: Upstream, tmp_path: Path, how: str) -> None:
    quiet = ("--quiet",) if how != "ctrl-c" else ()
    proc = subprocess.Popen(
        _wrap(tmp_path / "s.db", "openai_agent.py", "wait", flags=("--upstream", upstream.url, *quiet)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
        start_new_session=True,  # its own process group, as a terminal's foreground job is
    )
    try:
        seen = _wait_for(proc.stdout, b"ready\n", proc)
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
        elif how in ("sigterm", "sighup"):
            os.kill(proc.pid, signal.SIGTERM if how == "sigterm" else signal.SIGHUP)  # to ctxwright alone
        else:
            (agent,) = _children(proc.pid)
            os.kill(agent, signal.SIGKILL)  # the agent dies without a word
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    said = err.decode()
    if how == "ctrl-c":
        assert proc.returncode == 130
        assert (seen + out).endswith(b"caught SIGINT\n")  # the agent's own handler ran
        assert f"{PY} exited 130; 1 model call in 1 session" in said
    else:
        dead_of = {"sigterm": signal.SIGTERM, "sighup": signal.SIGHUP}.get(how, signal.SIGKILL)
        assert proc.returncode == 128 + dead_of  # the agent died of it, reported as a shell does
        (line,) = said.strip().splitlines()  # --quiet: one line, the call recorded before the agent died
        assert line.startswith(f"ctxwright wrap: {PY} exited {128 + dead_of}; 1 model call in 1 session"), said
        assert "; report: " in line
    assert "interrupted" not in said and "Traceback" not in said  # ctxwright itself was not stopped


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs util-linux's setpriv (Linux)")
def test_an_agent_does_not_outlive_a_killed_wrap(upstream: Upstream, tmp_path: Path) -> None:
    """ctxwright killed outright (SIGKILL: no handler runs): the agent, which shares its
    terminal, gets SIGHUP as from a closed terminal, and ends -- it is not left reading the
    terminal the shell took back, calling a proxy that is gone."""
    proc = subprocess.Popen(
        _wrap(tmp_path / "s.db", "openai_agent.py", "wait", flags=("--upstream", upstream.url, "--quiet")),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
        start_new_session=True,
    )
    try:
        _wait_for(proc.stdout, b"ready\n", proc)
        (agent,) = _children(proc.pid)
        assert Path(f"/proc/{agent}/cmdline").read_bytes().split(b"\0")[1].endswith(b"openai_agent.py")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{agent}").exists() and time.monotonic() < deadline:
            if Path(f"/proc/{agent}/stat").read_text().split(")")[-1].split()[0] == "Z":
                break  # dead, waiting for its new parent to reap it
            time.sleep(0.05)
        alive = (
            Path(f"/proc/{agent}").exists() and Path(f"/proc/{agent}/stat").read_text().split(")")[-1].split()[0] != "Z"
        )
        assert not alive, "the agent outlived ctxwright"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    from ctxwright.proxy.log import proxy_sessions
    from ctxwright.store.sessions import Store

    (session,) = proxy_sessions(Store(tmp_path / "s.db"))  # the call answered before the kill was recorded
    assert session["calls"] == 1


@pytest.mark.parametrize(
    "argv, code, says",
    [
        (["--", "no-such-agent-xyz"], 127, "ctxwright wrap: no-such-agent-xyz: command not found"),
        (["gemini"], 2, "Gemini CLI speaks only Google's Gemini API"),
        ([], 2, "name the agent to run"),
        (["--timeout", "0", "--", "true"], 2, "--timeout 0: give a number of seconds above 0"),
    ],
)
def test_a_bad_start_is_one_line_and_runs_nothing(tmp_path: Path, argv: list[str], code: int, says: str) -> None:
    db = tmp_path / "never.db"
    done = subprocess.run(
        [sys.executable, "-m", "ctxwright.cli.main", "--db", str(db), "wrap", *argv],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
    )
    assert done.returncode == code, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert says in line and "Traceback" not in done.stderr
    assert not db.exists()


@pytest.mark.slow
def test_a_proxy_that_cannot_start_recording_never_starts_the_agent(tmp_path: Path) -> None:
    marker = tmp_path / "agent-ran"
    folder_as_db = tmp_path / "db-folder"
    folder_as_db.mkdir()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ctxwright.cli.main",
            "--db",
            str(folder_as_db),
            "wrap",
            "--",
            sys.executable,
            "-c",
            f"open({str(marker)!r}, 'w').write('ran')",
        ],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
    )
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "is a folder" in line
    assert not marker.exists()


@pytest.mark.slow
def test_a_statusline_the_agent_runs_shows_the_wrapped_session(upstream: Upstream, tmp_path: Path) -> None:
    """The agent's environment names wrap's store and log (``CTXWRIGHT_DB``,
    ``CTXWRIGHT_WRAP_LOG``): a ``ctxwright statusline`` it runs shows its session."""
    env = _env()
    env.pop("CTXWRIGHT_DB", None)
    done = subprocess.run(
        _wrap(tmp_path / "sl.db", "openai_agent.py", "statusline", flags=("--upstream", upstream.url, "--quiet")),
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("status: ctxwright hit 53%"), done.stdout  # 64 of 120 tokens cached


def test_a_proxy_that_does_not_start_is_one_line_and_the_agent_never_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ctxwright.cli.main import main
    from ctxwright.proxy.serve import RecordingProxy

    def stalled(*_args: object, **_kwargs: object) -> RecordingProxy:
        raise RuntimeError("the proxy did not start")  # what ProxyThread.start says after its 10 s

    monkeypatch.setattr(RecordingProxy, "start", stalled)
    marker = tmp_path / "agent-ran"
    agent = [sys.executable, "-c", f"open({str(marker)!r}, 'w').write('ran')"]
    code = main(["--db", str(tmp_path / "p.db"), "wrap", "--log", str(tmp_path / "w.log"), "--", *agent])
    assert code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "the recording proxy did not start (unexpected RuntimeError: the proxy did not start" in line
    assert "was not started" in line and not marker.exists()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_inside_tmux_the_agents_screen_shows_only_the_agent(upstream: Upstream, tmp_path: Path) -> None:
    name = f"ctxwright-wrap-{os.getpid()}"
    socket = str(tmp_path / "tmux.sock")
    env = _env()
    command = " ".join(
        f"'{w}'" for w in _wrap(tmp_path / "t.db", "openai_agent.py", "screen", flags=("--upstream", upstream.url))
    )

    def tmux(*args: str) -> str:
        return subprocess.run(
            ["tmux", "-S", socket, *args], capture_output=True, text=True, env=env, timeout=30, check=True
        ).stdout

    tmux("new-session", "-d", "-s", name, "-x", "160", "-y", "30", f"env PYTHONPATH={SRC} {command}")
    try:
        tmux("set-option", "-t", name, "remain-on-exit", "on")
        deadline = time.monotonic() + 120
        screen = ""
        while "agent screen:" not in screen and time.monotonic() < deadline:
            time.sleep(0.2)
            screen = tmux("capture-pane", "-p", "-t", name)
        assert "agent screen: stdin tty True, stdout tty True" in screen, screen
        # while the agent runs, the screen is the agent's: not a line of ctxwright's
        assert "ctxwright" not in screen and " #0 " not in screen, screen
        assert [line for line in screen.splitlines() if line.strip()] == [
            "agent screen: stdin tty True, stdout tty True"
        ]
        tmux("send-keys", "-t", name, "typed by the user", "Enter")
        while "model call" not in screen and time.monotonic() < deadline:
            time.sleep(0.2)
            screen = tmux("capture-pane", "-p", "-t", name)
        assert "agent read 'typed by the user'" in screen, screen  # stdin was the agent's
        assert f"ctxwright wrap: {PY} exited 0; 1 model call in 1 session" in screen, screen  # the summary, after
    finally:
        subprocess.run(["tmux", "-S", socket, "kill-server"], capture_output=True, timeout=30)


def test_ctrl_c_before_the_agent_starts_says_wrap_stopped_not_how_to_continue_a_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An interrupt that reaches ctxwright's own code (here, while wrap starts) ends it with 130
    and one line naming the command: `run --continue` is advice for a run only."""
    from ctxwright.cli import wrap
    from ctxwright.cli.main import main

    def interrupted(_args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(wrap, "cmd_wrap", interrupted)
    assert main(["wrap", "--", "true"]) == 130
    err = capsys.readouterr().err
    assert "interrupted; ctxwright wrap stopped" in err and "--continue" not in err
