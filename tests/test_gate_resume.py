"""``ctxwright gate --resume-after N``: resume parity.

The gate stops the agent after N calls as a user would (SIGINT while its next request is held
by the replay), runs the resume command, and requires the resumed run's first request to
extend the last request before the stop byte for byte. Three agents are resumed: the example
``examples/ci/resumable_agent.py`` (openai SDK, its own state file; with its three planted
resume bugs), a loop over ``ctxwright.Context`` resumed with ``Context.resume`` from SQLite
(``tests/resume_context_agent.py``), and ``ctxwright run`` then ``ctxwright run --continue``.
Each golden is an uninterrupted run recorded through ``ctxwright proxy`` in front of a scripted
chat-completions server (``tests/fakeserver.py``), or ``ctxwright run``'s own stored session.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ctxwright.store.sessions import Store
from fakeserver import FakeOpenAIServer
from test_ci_gate import agent_env, copy_agent, record, verdict

ROOT = Path(__file__).resolve().parents[1]
TASK = "What is 17 + 25? Then tell me what 'prefix' means."
TIMEOUT = 300  # a bound, not a wait


def chat_script(body: Any) -> Any:
    """add, then lookup, then the answer: three calls, by the tool results already sent."""
    results = sum(1 for m in body["messages"] if m.get("role") == "tool")
    if results == 0:
        return FakeOpenAIServer.reply_tool_calls([("call_add", "add", '{"a": 17, "b": 25}')])
    if results == 1:
        return FakeOpenAIServer.reply_tool_calls([("call_lookup", "lookup", '{"word": "prefix"}')])
    return FakeOpenAIServer.reply_text("42 (add); a prefix is the part that stays the same (lookup).")


def run_gate(golden: Path, *words: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``ctxwright gate GOLDEN --json WORDS...`` as CI runs it."""
    env = agent_env("http://127.0.0.1:9", "m")
    cmd = [sys.executable, "-m", "ctxwright", "gate", str(golden), "--json", *words]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT, cwd=cwd)


@pytest.fixture(scope="module")
def resumable(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The example agent's golden: its clean, uninterrupted run (3 calls)."""
    tmp = tmp_path_factory.mktemp("resumable")
    agent = copy_agent(tmp)
    argv = [sys.executable, str(agent / "resumable_agent.py"), "--state", str(tmp / "recorded.json"), TASK]
    with FakeOpenAIServer(fallback=chat_script) as srv:
        golden = record(tmp, srv.url.removesuffix("/v1"), argv, "m")
    assert len(golden.read_text().splitlines()) == 3
    return golden, agent


def resumable_argv(agent: Path, state: Path, *bug: str) -> list[str]:
    run = [sys.executable, str(agent / "resumable_agent.py"), "--state", str(state)]
    return [*run, TASK, "--then", *run, "--resume", *bug]


def test_the_clean_agent_stopped_and_resumed_passes(resumable: tuple[Path, Path], tmp_path: Path) -> None:
    golden, agent = resumable
    state = tmp_path / "state.json"
    done = run_gate(golden, "--resume-after", "2", "--", *resumable_argv(agent, state))
    out = verdict(done)
    assert done.returncode == 0, out
    assert out["resume"]["first_run"] == "interrupted" and out["resume"]["first_status"] == 130, out
    assert out["resume"]["holds"] and out["run"]["calls"] == 3, out
    assert json.loads(state.read_text())["status"] == "done"


BUGS = {
    "reminder": ["system §", "<reminder>Use the tools", "message 1 (user)"],
    "blocks": ["message 1 (user) content changed at byte 0", '[{"text":'],
    "date": ["system §", "Current date and time: "],
}


@pytest.mark.slow
@pytest.mark.parametrize("bug", list(BUGS))
def test_each_planted_resume_bug_fails_naming_the_segment(
    bug: str, resumable: tuple[Path, Path], tmp_path: Path
) -> None:
    golden, agent = resumable
    done = run_gate(golden, "--resume-after", "2", "--", *resumable_argv(agent, tmp_path / "s.json", "--bug", bug))
    out = verdict(done)
    assert done.returncode == 1, out
    resume = [r for r in out["regressions"] if r["rule"] == "resume"]
    assert resume, out
    text = "\n".join(r["line"] for r in resume)
    assert "does not extend the last request before the stop" in text
    for part in BUGS[bug]:
        assert part in text, (part, text)
    assert all("offset" in r for r in resume), resume


# -- a Context.resume script and ctxwright run --continue -------------------------------------------


def adds(body: Any) -> Any:
    """add(17, 25), add(42, 8), then the answer; after a follow-up question, add(4, 4) and its
    answer: by the assistant turns already in the request."""
    turns = sum(1 for m in body["messages"] if m.get("role") == "assistant")
    script = [
        FakeOpenAIServer.reply_tool_calls([("call_a1", "add", '{"a": 17, "b": 25}')]),
        FakeOpenAIServer.reply_tool_calls([("call_a2", "add", '{"a": 42, "b": 8}')]),
        FakeOpenAIServer.reply_text("17 + 25 + 8 = 50."),
        FakeOpenAIServer.reply_tool_calls([("call_a3", "add", '{"a": 4, "b": 4}')]),
        FakeOpenAIServer.reply_text("4 + 4 = 8."),
    ]
    return script[min(turns, len(script) - 1)]


def context_agent(db: Path, *more: str) -> list[str]:
    return [sys.executable, str(ROOT / "tests" / "resume_context_agent.py"), "--db", str(db), *more]


@pytest.mark.slow
def test_a_context_resume_script_stopped_mid_call_passes(tmp_path: Path) -> None:
    """A loop over ``Context`` in SQLite, stopped by SIGINT in its second call and continued
    with ``Context.resume``: the resumed request is the one it was stopped in."""
    task = "What is 17 + 25 + 8?"
    with FakeOpenAIServer(fallback=adds) as srv:
        golden = record(tmp_path, srv.url.removesuffix("/v1"), context_agent(tmp_path / "rec.db", task), "m")
    assert len(golden.read_text().splitlines()) == 3
    db = tmp_path / "run.db"
    done = run_gate(
        golden, "--resume-after", "1", "--", *context_agent(db, task), "--then", *context_agent(db, "--resume")
    )
    out = verdict(done)
    assert done.returncode == 0, out
    assert out["resume"]["first_run"] == "interrupted" and out["resume"]["holds"], out
    store = Store(db)
    try:
        (session,) = store.list_sessions()
        assert session["id"] == (tmp_path / "run.db.session").read_text()
    finally:
        store.close()


@pytest.mark.slow
def test_ctxwright_run_then_continue_passes(tmp_path: Path) -> None:
    """The golden is ``ctxwright run`` then ``ctxwright run --continue``, one stored session;
    the first run ends by itself after its 3 calls, the resume is ``--continue``."""
    first = ["run", "What is 17 + 25 + 8?", "--backend", "openai", "--model", "m", "--system-text", "You add numbers."]
    then = ["run", "--continue", "And 4 + 4?"]
    ctx = [sys.executable, "-m", "ctxwright", "--db"]
    with FakeOpenAIServer(fallback=adds) as srv:
        env = agent_env(srv.url.removesuffix("/v1"), "m")
        for words in (first, then):
            made = subprocess.run(
                [*ctx, str(tmp_path / "rec.db"), *words], env=env, capture_output=True, text=True, timeout=TIMEOUT
            )
            assert made.returncode == 0, made.stderr
    store = Store(tmp_path / "rec.db")
    sid = str(store.list_sessions()[0]["id"])
    store.close()
    run = [*ctx, str(tmp_path / "run.db")]
    done = run_gate(
        Path(sid), "--db", str(tmp_path / "rec.db"), "--resume-after", "3", "--", *run, *first, "--then", *run, *then
    )
    out = verdict(done)
    assert done.returncode == 0, out
    assert out["resume"]["first_run"] == "exited" and out["resume"]["holds"], out
    assert out["run"]["calls"] == out["golden"]["calls"] == 5, out


# -- the stop, and what is refused ---------------------------------------------------------------

#: an agent that ignores SIGINT: ``python -c IGNORER GOLDEN START END PIDFILE`` sends the golden's
#: requests START..END-1 as recorded (the standard library only), then sleeps
IGNORER = """
import json, os, signal, sys, time, urllib.request
signal.signal(signal.SIGINT, signal.SIG_IGN)
golden, start, end, pids = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
with open(pids, "a") as f:
    f.write(f"{os.getpid()}\\n")
bodies = [json.loads(line)["request"] for line in open(golden) if line.strip()]
for body in bodies[start:end]:
    req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    urllib.request.urlopen(req, timeout=600).read()
"""


def test_an_agent_that_ignores_sigint_is_still_stopped_and_resumed(
    resumable: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGINT reaches the agent's group and is ignored: after the grace the supervisor's stop
    ends it (bounded), the held request is released, and the resume is judged."""
    import ctxwright.ci.gate as gate_module
    from ctxwright.ci.gate import run_gate as library_gate
    from ctxwright.replay.golden import load_golden

    monkeypatch.setattr(gate_module, "INTERRUPT_GRACE_S", 0.5)
    golden, _agent = resumable
    pids = tmp_path / "pids"
    agent = [sys.executable, "-c", IGNORER, str(golden), "0", "3", str(pids)]
    resume = [sys.executable, "-c", IGNORER, str(golden), "1", "3", str(pids)]
    started = time.monotonic()
    result = library_gate(
        load_golden(golden), agent, resume_after=1, resume=resume, timeout=120, env=agent_env("http://127.0.0.1:9", "m")
    )
    assert time.monotonic() - started < 60
    assert result.exit_code == 0, result.lines()
    assert result.resume is not None and result.resume["first_run"] == "interrupted", result.resume
    # ended by the supervisor's SIGTERM (its SIGKILL on a machine too loaded for that), not by SIGINT
    assert result.resume["first_status"] in (128 + 15, 128 + 9, -9), result.resume
    assert result.judgement.run.calls == 3
    first = int(pids.read_text().split()[0])
    assert not _alive(first), "the agent that ignored SIGINT outlived the stop"


def test_a_resume_that_sends_nothing_is_not_judged(resumable: tuple[Path, Path], tmp_path: Path) -> None:
    golden, agent = resumable
    run = [sys.executable, str(agent / "resumable_agent.py"), "--state", str(tmp_path / "s.json")]
    out = verdict(run_gate(golden, "--resume-after", "1", "--", *run, TASK, "--then", "true"))
    # not a pass: not judged (2), or a regression of the calls it made (1: the judge's own verdict)
    assert out["exit_code"] in (1, 2) and "the resumed run sent no model request" in out["unjudged"], out


@pytest.mark.parametrize(
    ("words", "said"),
    [
        (["--resume-after", "0", "--", "true"], "not a number of calls of 1 or more"),
        (["--resume-after", "x", "--", "true"], "not a number of calls"),
        (["--resume-after", "3", "--", "true"], "--resume-after 3: give N from 1 to 2"),
        (["--resume-after", "1", "--", "true", "--then"], "give a command on each side of --then"),
    ],
)
def test_bad_resume_flags_are_one_line_and_exit_2(resumable: tuple[Path, Path], words: list[str], said: str) -> None:
    golden, _agent = resumable
    done = run_gate(golden, *words)
    assert done.returncode == 2, done.stdout + done.stderr
    assert said in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert len([ln for ln in done.stderr.splitlines() if ln.strip()]) <= 2  # argparse adds its usage line


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_the_pytest_helper_resumes_an_agent_in_process(resumable: tuple[Path, Path]) -> None:
    """Callables: the held request is refused (an in-process agent gets no SIGINT; the failed
    call is its stop), then ``then`` resumes; a resume that re-sends another request fails."""
    import urllib.request

    from ctxwright.testing import gate as gate_helper

    golden, _agent = resumable
    bodies = [json.loads(line)["request"] for line in golden.read_text().splitlines()]

    def sender(start: int, edit: bool = False) -> Any:
        def agent(env: dict[str, str]) -> None:
            for body in bodies[start:]:
                if edit:  # the resume re-reads the task as text blocks
                    body = {
                        **body,
                        "messages": [
                            body["messages"][0],
                            {"role": "user", "content": [{"type": "text", "text": body["messages"][1]["content"]}]},
                            *body["messages"][2:],
                        ],
                    }
                req = urllib.request.Request(
                    env["OPENAI_BASE_URL"] + "/chat/completions",
                    data=json.dumps(body).encode(),
                    headers={"content-type": "application/json"},
                )
                urllib.request.urlopen(req, timeout=60).read()

        return agent

    result = gate_helper(golden, sender(0), resume_after=1, then=sender(1), timeout=120)
    assert result.resume is not None and result.resume["first_run"] == "interrupted" and result.resume["holds"]
    with pytest.raises(AssertionError, match=r"resume: .*message 1 \(user\) content changed at byte 0"):
        gate_helper(golden, sender(0), resume_after=1, then=sender(1, edit=True), timeout=120)


def test_parity_holds_a_replaced_status_block_to_the_runs_own_rule() -> None:
    """An agent that replaces its last message (a status block) on every call may replace it
    across the resume too; one that does not may not, and an edit is named either way."""
    from ctxwright.ci.resume import Parity, parity

    def body(*messages: Any) -> dict[str, Any]:
        return {"request": {"model": "m", "messages": [{"role": "system", "content": "S"}, *messages]}}

    user, status = {"role": "user", "content": "task"}, {"role": "user", "content": "<status> t=1"}
    turn = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}],
    }
    result = {"role": "tool", "tool_call_id": "c1", "content": "5"}
    earlier = body(user, status)
    before = body(user, turn, result, {"role": "user", "content": "<status> t=2"})
    after = body(
        user, turn, result, {"role": "assistant", "content": "5."}, {"role": "user", "content": "<status> t=3"}
    )
    held = parity(before, after, earlier)
    assert isinstance(held, Parity) and not held.regressions and held.replaced, held
    # without the run's own pattern (the status kept from call to call), the dropped message is a regression
    kept = body(user, turn, result, {"role": "user", "content": "<status> t=2"})
    broken = parity(before, after, body(user))
    assert isinstance(broken, Parity) and broken.regressions, broken
    appended = parity(
        kept,
        body(user, turn, result, {"role": "user", "content": "<status> t=2"}, {"role": "user", "content": "go on"}),
    )
    assert isinstance(appended, Parity) and not appended.regressions and not appended.replaced, appended
    # the replaced block allowed, an edit before it is still named, by message, field and byte
    edited = body(
        {"role": "user", "content": [{"type": "text", "text": "task"}]},
        turn,
        result,
        {"role": "user", "content": "<status> t=3"},
    )
    named = parity(before, edited, earlier)
    assert isinstance(named, Parity) and named.replaced
    assert [r.details["segment"] for r in named.regressions] == ["message 1 (user)"], named
    assert "content changed at byte 0" in named.regressions[0].line and "(was 'task')" in named.regressions[0].line
