"""``ctxwright gate``: real agents as the agent under test, each against its own golden.

The agents are the example programs of docs/ci.md (``examples/ci/``), written with the official
``openai`` SDK (chat completions and Responses) and the official ``anthropic`` SDK, run as
subprocesses, plus ``ctxwright run``. Each golden is recorded the way docs/ci.md says: through
``ctxwright proxy`` in front of the real counterpart where one runs here (llama-cpp-python's
server, for chat completions and ``ctxwright run``) and of the loopback provider simulators
where none can (Anthropic, Responses: ``tests/providers/``). Then each regression the gate
exists for is made as a one-line edit of the agent's source, and must fail the gate (exit 1)
with a line naming the segment.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ctxwright.proxy.log import proxy_session_requests, proxy_sessions
from ctxwright.proxy.serve import RecordingProxy
from ctxwright.proxy.server import ProxyConfig
from ctxwright.store.sessions import Store
from llamaserver import LlamaServer
from providers.anthropic_sim import AnthropicSim
from providers.responses_sim import ResponsesSim, call, text

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "ci"
TASK = "What is 17 + 25? Then tell me what 'prefix' means."
AGENT_TIMEOUT = 600  # a bound, not a wait: the tiny model on a loaded 2-core machine is slow


# -- recording and running --------------------------------------------------------------------


def copy_agent(tmp: Path) -> Path:
    """The example agents in a folder of the test's own, where a test may edit them."""
    dest = tmp / "agent"
    shutil.copytree(EXAMPLES, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def edit(path: Path, old: str, new: str) -> None:
    """A one-line change of the agent's source (the regression under test)."""
    src = path.read_text()
    assert old in src, f"{old!r} is not in {path.name}"
    path.write_text(src.replace(old, new, 1))


def agent_env(base: str, model: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    env.update(
        OPENAI_BASE_URL=base + "/v1",
        OPENAI_API_KEY="sk-test",
        ANTHROPIC_BASE_URL=base,
        ANTHROPIC_API_KEY="sk-ant-test",
        AGENT_MODEL=model,
        PYTHONPATH=str(ROOT / "src"),
    )
    return env


def record(tmp: Path, upstream: str, argv: list[str], model: str, clock: Callable[[], float] | None = None) -> Path:
    """Run ``argv`` once through ``ctxwright proxy`` in front of ``upstream``; the proxy
    session it recorded, written as a golden trace file (``ctxwright export --proxy-session``)."""
    store = Store(tmp / "recorded.db")
    try:
        config = ProxyConfig(upstream=upstream) if clock is None else ProxyConfig(upstream=upstream, clock=clock)
        with RecordingProxy.start(config, store, printer=lambda _line: None) as proxy:
            done = subprocess.run(
                argv, env=agent_env(proxy.url, model), capture_output=True, text=True, timeout=AGENT_TIMEOUT
            )
            assert done.returncode == 0, done.stderr
            assert proxy.recorder.wait_idle(60, at_least=1)
        sessions = proxy_sessions(store)
        assert len(sessions) == 1, sessions
        golden = tmp / "golden.jsonl"
        with golden.open("w") as f:
            for rec in proxy_session_requests(store, sessions[0]["id"]):
                f.write(json.dumps(rec) + "\n")
        return golden
    finally:
        store.close()


def gate(
    golden: Path, argv: list[str], *extra: str, model: str | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``ctxwright gate GOLDEN --json -- argv``, as CI runs it."""
    if model is None:  # the model the golden's first request names: the agent's AGENT_MODEL
        model = json.loads(golden.read_text().splitlines()[0])["request"]["model"]
    env = agent_env("http://127.0.0.1:9", model)  # the base URLs are overridden by the gate's own
    cmd = [sys.executable, "-m", "ctxwright", "gate", str(golden), "--json", *extra, "--", *argv]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=AGENT_TIMEOUT, cwd=cwd)


def ctxwright(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ctxwright", *args], capture_output=True, text=True, timeout=AGENT_TIMEOUT
    )


def verdict(done: subprocess.CompletedProcess[str], *, agent_fails: bool = False) -> dict[str, Any]:
    """The gate's JSON; no traceback on stderr (but the agent's own, when it is expected to fail)."""
    if agent_fails:
        assert "src/ctxwright/" not in done.stderr, done.stderr
    else:
        assert "Traceback" not in done.stderr, done.stderr
    assert done.stdout.strip(), done.stderr
    out: dict[str, Any] = json.loads(done.stdout)
    assert out["exit_code"] == done.returncode, out
    return out


def lines(out: dict[str, Any]) -> str:
    return "\n".join(r["line"] for r in out["regressions"])


# -- scripted providers (no real one runs here) -----------------------------------------------


def anthropic_script(body: dict[str, Any]) -> list[dict[str, Any]]:
    """add, then lookup, then the answer: a three-call conversation."""
    results = sum(
        1
        for m in body["messages"]
        if isinstance(m.get("content"), list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    )
    if results == 0:
        return [{"type": "tool_use", "name": "add", "input": {"a": 17, "b": 25}}]
    if results == 1:
        return [
            {"type": "text", "text": "17 + 25 = 42."},
            {"type": "tool_use", "name": "lookup", "input": {"word": "prefix"}},
        ]
    return [{"type": "text", "text": "42 (add); a prefix is the part that stays the same (lookup)."}]


def responses_script(body: dict[str, Any]) -> list[dict[str, Any]]:
    outputs = sum(1 for i in body.get("input") or [] if isinstance(i, dict) and i.get("type") == "function_call_output")
    if outputs == 0:
        return [call("add", {"a": 17, "b": 25})]
    if outputs == 1:
        return [call("lookup", {"word": "prefix"})]
    return [text("42 (add); a prefix is the part that stays the same (lookup).")]


@pytest.fixture
def anthropic_golden(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    agent = copy_agent(tmp_path)
    with AnthropicSim(respond=anthropic_script) as sim:
        golden = record(
            tmp_path, sim.url, [sys.executable, str(agent / "anthropic_agent.py"), TASK], "claude-sonnet-4-5"
        )
    yield golden, agent


@pytest.fixture
def responses_golden(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    agent = copy_agent(tmp_path)
    with ResponsesSim(respond=responses_script) as sim:
        golden = record(tmp_path, sim.url, [sys.executable, str(agent / "openai_responses_agent.py"), TASK], "gpt-5.5")
    yield golden, agent


# -- each agent passes against its own golden -------------------------------------------------


def test_the_anthropic_sdk_agent_passes_against_its_own_golden(anthropic_golden: tuple[Path, Path]) -> None:
    golden, agent = anthropic_golden
    assert len(golden.read_text().splitlines()) == 3
    done = gate(golden, [sys.executable, str(agent / "anthropic_agent.py"), TASK])
    out = verdict(done)
    assert done.returncode == 0, out
    assert out["run"]["calls"] == out["golden"]["calls"] == 3
    assert out["headline"].startswith("PASS: 3 calls, prefix identical, append-only")


def test_the_responses_agent_passes_against_its_own_golden(responses_golden: tuple[Path, Path]) -> None:
    golden, agent = responses_golden
    done = gate(golden, [sys.executable, str(agent / "openai_responses_agent.py"), TASK])
    out = verdict(done)
    assert done.returncode == 0, out
    assert out["run"]["calls"] == 3 and out["run"]["reuse"] == pytest.approx(out["golden"]["reuse"])


@pytest.mark.slow
def test_the_openai_chat_agent_and_ctxwright_run_pass_against_goldens_recorded_on_llama_cpp_server(
    tmp_path: Path,
) -> None:
    """The real counterpart: llama-cpp-python's server. The chat agent's golden is recorded
    through the proxy; ``ctxwright run``'s is its own stored session (``--session ID``). Then a
    prefix regression of each (the tiny model may answer without a tool call, so the history
    regressions are the scripted agents' below)."""
    agent = copy_agent(tmp_path)
    chat = [sys.executable, str(agent / "openai_chat_agent.py"), "What is 2 + 3? Use the add tool."]
    recorded_db = tmp_path / "recorded-run.db"
    task = "What is 2 + 3?"
    with LlamaServer(tmp_path / "server.log") as srv:
        (tmp_path / "chat").mkdir()
        chat_golden = record(tmp_path / "chat", srv.url.removesuffix("/v1"), chat, LlamaServer.model)
        first = subprocess.run(
            [*ctx_run(recorded_db, task), "--base-url", srv.url],
            env=agent_env("http://127.0.0.1:9", LlamaServer.model),
            capture_output=True,
            text=True,
            timeout=AGENT_TIMEOUT,
        )
        assert first.returncode == 0, first.stderr
    store = Store(recorded_db)
    sid = str(store.list_sessions()[0]["id"])
    store.close()
    # the server is gone: the gate needs no model
    out = verdict(gate(chat_golden, chat))
    assert out["exit_code"] == 0, out
    ours = [sys.executable, "-m", "ctxwright", "gate", "--session", sid, "--db", str(recorded_db), "--json", "--"]
    done = subprocess.run(
        [*ours, *ctx_run(tmp_path / "replayed-run.db", task)],
        env=agent_env("http://127.0.0.1:9", LlamaServer.model),
        capture_output=True,
        text=True,
        timeout=AGENT_TIMEOUT,
    )
    out = verdict(done)
    assert out["exit_code"] == 0 and out["run"]["calls"] == out["golden"]["calls"] >= 1, out

    edit(
        agent / "openai_chat_agent.py",
        '.read_text(encoding="utf-8")',
        '.read_text(encoding="utf-8") + f"\\nNow: {__import__(\'time\').time()}"',
    )
    out = verdict(gate(chat_golden, chat))
    assert out["exit_code"] == 1 and "system" in lines(out) and "Now: " in lines(out), out
    done = subprocess.run(
        [*ours, *ctx_run(tmp_path / "replayed-2.db", task)[:-1], SYSTEM_TEXT + " Today is a Tuesday."],
        env=agent_env("http://127.0.0.1:9", LlamaServer.model),
        capture_output=True,
        text=True,
        timeout=AGENT_TIMEOUT,
    )
    out = verdict(done)
    assert out["exit_code"] == 1 and "prefix: system" in lines(out), out


def ctx_run(db: Path, task: str) -> list[str]:
    """``ctxwright run`` on the openai backend; without --base-url it reads OPENAI_BASE_URL."""
    return [
        sys.executable,
        "-m",
        "ctxwright",
        "--db",
        str(db),
        "run",
        task,
        "--backend",
        "openai",
        "--model",
        LlamaServer.model,
        "--max-tokens",
        "32",
        "--max-tool-rounds",
        "1",  # a short session: the tiny model on 2 loaded cores prefills slowly
        "--system-text",
        SYSTEM_TEXT,
    ]


SYSTEM_TEXT = "You add numbers with the add tool."


# -- each regression fails the gate, naming the segment --------------------------------------


REGRESSIONS = {
    "timestamp in the system prompt": (
        '.read_text(encoding="utf-8")',
        '.read_text(encoding="utf-8") + f"\\nCurrent time: {__import__(\'time\').time()}"',
        ["prefix: system", "Current time: "],
    ),
    "two tools swapped": (
        'TOOL_NAMES = ["add", "lookup"]',
        'TOOL_NAMES = ["lookup", "add"]',
        ["moved", "'add'", "'lookup'"],
    ),
    "a tool description changed": (
        "from tools import",
        "import tools as _t\n_t.TOOLS['lookup'] = ('Look up a word in the glossary (session 7f3a).', _t.TOOLS['lookup'][1])\nfrom tools import",
        ["tool 'lookup'", "description", "session 7f3a"],
    ),
}


@pytest.mark.parametrize("name", list(REGRESSIONS))
def test_each_prefix_regression_fails_the_gate_naming_its_segment(
    name: str, anthropic_golden: tuple[Path, Path]
) -> None:
    golden, agent = anthropic_golden
    old, new, said = REGRESSIONS[name]
    lock = golden.parent / "ctxwright.lock"
    assert ctxwright("lock", str(golden), "--file", str(lock)).returncode == 0
    edit(agent / "anthropic_agent.py", old, new)
    trace = golden.parent / "run.jsonl"
    done = gate(golden, [sys.executable, str(agent / "anthropic_agent.py"), TASK], "--trace", str(trace))
    out = verdict(done)
    # the lock file sees the same change in the run's trace, and passes once regenerated
    checked = ctxwright("lock", str(trace), "--file", str(lock), "--check")
    assert checked.returncode == 1 and "Traceback" not in checked.stderr, checked.stdout + checked.stderr
    assert ctxwright("lock", str(trace), "--file", str(lock)).returncode == 0
    assert ctxwright("lock", str(trace), "--file", str(lock), "--check").returncode == 0
    assert done.returncode == 1, out
    assert out["headline"].startswith("FAIL:")
    text_ = lines(out)
    for part in said:
        assert part in text_, (part, text_)
    assert {r["rule"] for r in out["regressions"]} >= {"prefix"}


def test_a_sliding_window_fails_the_gate_as_history_removed(responses_golden: tuple[Path, Path]) -> None:
    golden, agent = responses_golden
    edit(agent / "openai_responses_agent.py", "input=items,", "input=items[:1] + items[1:][-2:],")
    out = verdict(gate(golden, [sys.executable, str(agent / "openai_responses_agent.py"), TASK]))
    assert out["exit_code"] == 1, out
    assert "append-only: call 3 of conversation" in lines(out) and "history_" in lines(out)


def test_a_tool_result_edited_in_place_fails_but_one_that_merely_differs_passes(
    anthropic_golden: tuple[Path, Path],
) -> None:
    golden, agent = anthropic_golden
    script = agent / "anthropic_agent.py"
    # a dynamic value appended to each tool result: differs from the golden, appended -- no regression
    edit(
        script,
        '"content": run_tool(b.name, b.input)}',
        '"content": run_tool(b.name, b.input) + f" (fetched {__import__(\'time\').time_ns()})"}',
    )
    out = verdict(gate(golden, [sys.executable, str(script), TASK]))
    assert out["exit_code"] == 0, out
    # ... and rewritten in place before the next call: a regression at that message
    edit(
        script,
        "    for _ in range(MAX_CALLS):\n",
        "    for _ in range(MAX_CALLS):\n"
        "        for m in messages:\n"
        "            for b in m['content'] if isinstance(m['content'], list) else []:\n"
        "                if isinstance(b, dict) and b.get('type') == 'tool_result':\n"
        "                    b['content'] = b['content'].split(' (fetched')[0] + f\" (fetched {__import__('time').time_ns()})\"\n",
    )
    out = verdict(gate(golden, [sys.executable, str(script), TASK]))
    assert out["exit_code"] == 1, out
    assert "history_edited" in lines(out) and "msg#" in lines(out)


def test_a_divergence_is_not_a_pass_and_names_the_call(anthropic_golden: tuple[Path, Path]) -> None:
    """The agent asks something else than the recording: the replay says so (stop: a 400 the
    agent fails on), and the gate cannot judge the run -- exit 2, not a pass."""
    golden, agent = anthropic_golden
    argv = [sys.executable, str(agent / "anthropic_agent.py"), "What is 2 + 2?"]
    out = verdict(gate(golden, argv), agent_fails=True)
    assert out["exit_code"] == 2 and out["headline"].startswith("ERROR: the run could not be judged"), out
    assert any("call 1 of conversation" in d and "2 + 2" in d for d in out["divergences"]), out
    # repeat-last answers the recording's last reply, so the agent finishes: still not judged
    out = verdict(gate(golden, argv, "--on-divergence", "repeat-last"))
    assert out["exit_code"] == 2 and out["agent_status"] == 0, out


def test_update_writes_the_new_trace_as_the_golden(anthropic_golden: tuple[Path, Path]) -> None:
    golden, agent = anthropic_golden
    edit(agent / "system_prompt.md", "Answer in one or two sentences.", "Answer in one sentence.")
    argv = [sys.executable, str(agent / "anthropic_agent.py"), TASK]
    assert verdict(gate(golden, argv))["exit_code"] == 1
    updated = gate(golden, argv, "--update")
    assert updated.returncode == 0, updated.stderr
    out = verdict(updated)  # the JSON says updated, with exit 0: never "fail" with exit 0
    assert out["verdict"] == "updated" and out["updated"] == str(golden) and out["regressions"], out
    assert out["headline"].startswith(f"UPDATED: {golden} now holds this run (3 calls); 1 change accepted"), out
    assert verdict(gate(golden, argv))["exit_code"] == 0


def test_the_pytest_helper_with_an_agent_in_process(anthropic_golden: tuple[Path, Path]) -> None:
    import anthropic

    from ctxwright.testing import gate as gate_helper

    golden, _agent = anthropic_golden

    def agent(env: dict[str, str]) -> None:
        sys.path.insert(0, str(_agent))
        try:
            import importlib

            mod = importlib.import_module("anthropic_agent")
            os.environ.update(env)
            client_cls = anthropic.Anthropic
            assert mod.main(TASK) == 0, client_cls
        finally:
            sys.path.remove(str(_agent))
            sys.modules.pop("anthropic_agent", None)
            sys.modules.pop("tools", None)

    result = gate_helper(golden, agent)
    assert result.exit_code == 0 and result.judgement.run.calls == 3
    with pytest.raises(AssertionError, match="ctxwright gate: ERROR"):
        gate_helper(golden, lambda env: None)  # makes no call: not judged, not a pass


# -- the gate probed as an attacker would -------------------------------------------------------


def test_an_agent_that_hangs_is_stopped_with_everything_it_started(anthropic_golden: tuple[Path, Path]) -> None:
    """--timeout ends the agent's whole process group (the supervisor), children included."""
    golden, agent = anthropic_golden
    pids = golden.parent / "pids"
    script = agent / "hang.py"
    script.write_text(
        "import subprocess, sys, time, os\n"
        f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
        "time.sleep(600)\n"
    )
    done = gate(golden, [sys.executable, str(script)], "--timeout", "3")
    out = verdict(done)
    assert out["exit_code"] == 2 and "did not finish within 3 s" in out["headline"], out
    for pid in map(int, pids.read_text().split()):
        assert not _alive(pid), f"process {pid} outlived the gate"


def test_the_gate_killed_takes_its_agent_with_it(anthropic_golden: tuple[Path, Path]) -> None:
    import signal
    import time

    golden, agent = anthropic_golden
    pids = golden.parent / "pids"
    script = agent / "hang.py"
    script.write_text(f"import os, time\nopen({str(pids)!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)\n")
    cmd = [sys.executable, "-m", "ctxwright", "gate", str(golden), "--", sys.executable, str(script)]
    proc = subprocess.Popen(cmd, env=agent_env("http://127.0.0.1:9", "m"), stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not (pids.exists() and pids.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    agent_pid = int(pids.read_text())
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 30
    while _alive(agent_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(agent_pid), "the agent outlived the gate killed with SIGKILL"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--", "no-such-agent-command"], "command not found"),
        ([], "no command to run"),
        (["--max-reuse-drop", "-1", "--", "true"], "not a share"),
    ],
)
def test_bad_gate_input_is_one_line_and_exit_2(anthropic_golden: tuple[Path, Path], args: list[str], said: str) -> None:
    golden, _agent = anthropic_golden
    done = ctxwright("gate", str(golden), *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert said in done.stderr and "Traceback" not in done.stderr
    assert len([ln for ln in done.stderr.splitlines() if ln.strip()]) <= 2  # argparse adds its usage line


def test_a_golden_that_is_not_a_trace_is_one_line(tmp_path: Path) -> None:
    for content in (b"\x00\xff" * 1000, b"not json\n", b'{"request": 7}\n'):
        bad = tmp_path / "bad.jsonl"
        bad.write_bytes(content)
        done = ctxwright("gate", str(bad), "--", "true")
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_json_stays_parseable_when_the_agent_prints(anthropic_golden: tuple[Path, Path]) -> None:
    golden, agent = anthropic_golden
    done = gate(golden, [sys.executable, str(agent / "anthropic_agent.py"), TASK])
    assert done.stdout.count("\n") == 1 and "42 (add)" in done.stderr  # the agent's answer went to stderr
    assert verdict(done)["exit_code"] == 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False
