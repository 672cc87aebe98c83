"""``ctxwright gate`` probed as a chaos engineer would: the agent under test starts daemons
that leave its process group and session and ignore SIGTERM, and the gate ends by each way
it can (the agent exits, ``--timeout``, the agent flooding its output, SIGTERM, Ctrl-C,
``kill -9`` of the gate); ``--update`` after a run that did not replay the golden; ``--trace``
on a symbolic link; goldens past the bounds; the counts and sentences the gate and lock print.

Real processes throughout: the gate as CI runs it (``python -m ctxwright gate``), the agent a
stdlib script (``tests/gate_agent.py``) that speaks HTTP to the replay.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ctxwright.ci.segments import spoken
from ctxwright.core.words import counted
from ctxwright.errors import GoldenUnusable
from ctxwright.replay.golden import load_golden

ROOT = Path(__file__).resolve().parents[1]
AGENT = Path(__file__).parent / "gate_agent.py"
SYSTEM = "# Role\nYou are a careful calculator.\n"
#: generous: the machine may be loaded by other suites
DEADLINE_S = 60.0


def reply(text: str, i: int) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{i}",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
    }


def write_golden(path: Path, calls: int) -> Path:
    """One conversation of ``calls`` calls, each asking one more sum."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    with path.open("w") as f:
        for i in range(calls):
            messages.append({"role": "user", "content": f"What is {i} + {i}?"})
            f.write(
                json.dumps({"request": {"model": "m", "messages": list(messages)}, "response": reply(str(2 * i), i)})
            )
            f.write("\n")
            messages.append({"role": "assistant", "content": str(2 * i)})
    return path


def gate_argv(golden: Path, *gate_args: str, agent: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "ctxwright",
        "gate",
        str(golden),
        *gate_args,
        "--",
        sys.executable,
        str(AGENT),
        *agent,
    ]


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT / "src")}


def alive(pid: int) -> bool:
    """Whether ``pid`` runs and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(path: Path, proc: subprocess.Popen[bytes]) -> list[int]:
    deadline = time.monotonic() + DEADLINE_S
    while not path.exists():
        assert proc.poll() is None, f"the gate ended before the agent started its daemons: {proc.returncode}"
        assert time.monotonic() < deadline, "the agent never started its daemons"
        time.sleep(0.02)
    return [int(p) for p in path.read_text().split()]


# -- nothing the agent started outlives the gate ------------------------------------------------

ENDINGS = ["exit", "timeout", "flood", "SIGTERM", "SIGINT", "SIGKILL"]


@pytest.mark.slow  # six gates at once, two of them until their --timeout
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_CHILD_SUBREAPER and /proc are Linux's")
def test_nothing_the_agent_started_outlives_the_gate_however_it_ends(tmp_path: Path) -> None:
    """Each ending at once, in parallel: the agent (and both its daemons, which no ``killpg``
    reaches and which ignore SIGTERM) are gone every time, the gate says how it ended, and
    Ctrl-C and SIGTERM print the gate's own line -- not ``run``'s advice to continue."""
    golden = write_golden(tmp_path / "golden.jsonl", 1)
    then = {"exit": "exit", "timeout": "sleep", "flood": "flood"}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    pidfiles = {e: tmp_path / f"{e}.pids" for e in ENDINGS}
    family: dict[str, list[int]] = {}
    try:
        for e in ENDINGS:
            timeout = "8" if e in ("timeout", "flood") else "600"
            argv = gate_argv(
                golden,
                "--timeout",
                timeout,
                agent=[str(golden), "1", "--daemons", str(pidfiles[e]), "--then", then.get(e, "sleep")],
            )
            out = subprocess.DEVNULL if e == "flood" else subprocess.PIPE
            procs[e] = subprocess.Popen(argv, env=env(), stdout=out, stderr=subprocess.PIPE)
        for e, p in procs.items():
            family[e] = wait_for(pidfiles[e], p)
        for e in ("SIGTERM", "SIGINT", "SIGKILL"):
            procs[e].send_signal(getattr(signal, e))
        results = {e: p.communicate(timeout=DEADLINE_S) for e, p in procs.items()}
        codes = {e: p.returncode for e, p in procs.items()}
        deadline = time.monotonic() + DEADLINE_S
        while (left := {e: [pid for pid in pids if alive(pid)] for e, pids in family.items()}) and any(left.values()):
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert not any(left.values()), f"left running after the gate ended: {left}"
        said_exit = results["exit"][0].decode()
        assert codes["exit"] == 0 and said_exit.startswith("PASS: 1 call, prefix identical"), results["exit"]
        assert codes["timeout"] == 2 and b"did not finish within 8 s" in results["timeout"][0], results["timeout"]
        assert codes["flood"] == 2, results["flood"][1]  # its verdict went to /dev/null with the flood
        assert codes["SIGKILL"] == -signal.SIGKILL
        for e, code, said in (("SIGINT", 130, "interrupted"), ("SIGTERM", 143, "stopped by SIGTERM")):
            message = results[e][1].decode()
            assert codes[e] == code, (e, codes[e], message)
            assert f"ctxwright gate: {said} before a verdict" in message and "--continue" not in message, message
            assert "Traceback" not in message, message
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
        for pids in family.values():
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)


# -- --update -----------------------------------------------------------------------------------


@pytest.mark.parametrize("calls", [0, 1])
def test_update_refuses_a_run_that_did_not_replay_the_whole_golden(tmp_path: Path, calls: int) -> None:
    """The agent exits 0 after fewer calls than the golden's two: the golden is kept as it was
    (not emptied, not truncated) and the exit is 2, after the ERROR line -- never 0."""
    golden = write_golden(tmp_path / "golden.jsonl", 2)
    before = golden.read_bytes()
    done = subprocess.run(
        gate_argv(golden, "--update", agent=[str(golden), str(calls)]), env=env(), capture_output=True, timeout=120
    )
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 2, (out, err)
    said = "the agent made no model call" if calls == 0 else "the run made 1 of its 2 recorded calls"
    assert out.startswith(("ERROR: ", "FAIL: ")) and said in out, out  # 1 of 2: the missing call's reuse, too
    assert f"not updated, {golden} is unchanged" in err and "Traceback" not in err, err
    assert golden.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["golden.jsonl"]  # no temporary file left


def test_update_accepts_a_complete_run_and_says_updated_not_fail(tmp_path: Path) -> None:
    golden = write_golden(tmp_path / "golden.jsonl", 2)
    changed = "# Role\nYou are a careful calculator. Today is Monday.\n"
    agent = [str(golden), "2", "--system", changed]
    failed = subprocess.run(gate_argv(golden, agent=agent), env=env(), capture_output=True, timeout=120)
    assert failed.returncode == 1 and failed.stdout.decode().startswith("FAIL: 2 cache regressions in 2 calls")
    done = subprocess.run(gate_argv(golden, "--update", agent=agent), env=env(), capture_output=True, timeout=120)
    out = done.stdout.decode()
    assert done.returncode == 0, (out, done.stderr)
    assert out.startswith(f"UPDATED: {golden} now holds this run (2 calls); 2 changes accepted"), out
    assert "FAIL" not in out and "ERROR" not in out and "prefix:" in out
    assert json.loads(golden.read_text().splitlines()[0])["request"]["messages"][0]["content"] == changed
    again = subprocess.run(
        gate_argv(golden, "--json", agent=agent), env=env(), capture_output=True, timeout=120
    )  # the new golden: the same run passes
    assert again.returncode == 0 and json.loads(again.stdout)["verdict"] == "pass", again.stderr


# -- --trace --------------------------------------------------------------------------------------


def test_trace_on_a_symlink_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    golden = write_golden(tmp_path / "golden.jsonl", 1)
    target = tmp_path / "precious.txt"
    target.write_text("precious\n")
    link = tmp_path / "trace.jsonl"
    link.symlink_to(target)
    marker = tmp_path / "agent-ran"
    done = subprocess.run(
        gate_argv(golden, "--trace", str(link), agent=[str(golden), "1", "--daemons", str(marker)]),
        env=env(),
        capture_output=True,
        timeout=120,
    )
    err = done.stderr.decode()
    assert done.returncode == 2 and "is a symbolic link" in err and len(err.strip().splitlines()) == 1, err
    assert target.read_text() == "precious\n" and link.is_symlink()
    assert not marker.exists()  # refused before the agent started
    # a regular file is written, readable by its owner only (it holds the prompts)
    trace = tmp_path / "run.jsonl"
    done = subprocess.run(
        gate_argv(golden, "--trace", str(trace), agent=[str(golden), "1"]), env=env(), capture_output=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert len(trace.read_text().splitlines()) == 1 and trace.stat().st_mode & 0o077 == 0


# -- bounds on the golden -------------------------------------------------------------------------


def test_a_golden_of_200000_calls_is_refused_at_once_naming_the_bound(tmp_path: Path) -> None:
    """Placing 200,000 one-call conversations took minutes; past the bound on calls the file is
    not read further. The flags raise each bound."""
    big = tmp_path / "many.jsonl"
    line = '{"request":{"model":"m","messages":[{"role":"user","content":"q%d"}]},"response":%s}\n'
    with big.open("w") as f:
        for i in range(200_000):
            f.write(line % (i, json.dumps(reply("a", i))))
    with pytest.raises(GoldenUnusable, match=r"more than 10,000 model calls.*--max-golden-calls N"):
        load_golden(big)
    done = subprocess.run(
        [sys.executable, "-m", "ctxwright", "gate", str(big), "--max-golden-calls", "50", "--", "true"],
        env=env(),
        capture_output=True,
        timeout=120,
    )
    err = done.stderr.decode()
    assert done.returncode == 2 and "more than 50 model calls" in err and len(err.strip().splitlines()) == 1, err


def test_a_line_of_too_many_messages_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    """A short message costs ~40 times its bytes once parsed: the messages are counted in the
    raw line first. (The line is cut short: parsed, it would be refused as not JSON.)"""
    one = tmp_path / "one.jsonl"
    messages = ",".join('{"role":"user","content":"x"}' for _ in range(5000))
    one.write_text('{"request":{"model":"m","messages":[' + messages + "\n")
    with pytest.raises(GoldenUnusable, match=r"more than 1,000 messages in all \(line 1 passes it\).*--max-golden"):
        load_golden(one, max_messages=1000)
    with pytest.raises(GoldenUnusable, match="not JSON"):
        load_golden(one)  # within the default bound: parsed, and refused as what it is
    # counted after parsing too, across the records
    golden = write_golden(tmp_path / "golden.jsonl", 5)  # 2 + 4 + 6 + 8 + 10 messages
    assert len(load_golden(golden, max_messages=30).calls()) == 5
    with pytest.raises(GoldenUnusable, match=r"more than 29 messages in all \(line 5 passes it\)"):
        load_golden(golden, max_messages=29)


# -- what the gate and the lock say --------------------------------------------------------------


def test_counts_and_segment_names_read_as_english() -> None:
    assert [counted(n, "call") for n in (0, 1, 2, 200_000)] == ["0 calls", "1 call", "2 calls", "200,000 calls"]
    assert counted(1, "entry", "entries") == "1 entry" and counted(3, "entry", "entries") == "3 entries"
    assert spoken("system § '# Role'") == "the system prompt's section '# Role'"
    assert spoken("system line 3 'You are'") == "the system prompt's line 3 ('You are')"
    assert spoken("tool 'read_file'") == "the tool 'read_file'"


def test_the_lock_cost_line_is_a_sentence() -> None:
    from ctxwright.ci.lock import LockCheck

    for tokens, verb in ((190, "are"), (1, "is")):
        line = LockCheck([], "system, then tools", "system § '# Role'", tokens).cost_line()
        noun = "prefix token" if tokens == 1 else "prefix tokens"
        assert line.startswith(
            f"cost per call: {tokens} {noun}, from the system prompt's section '# Role' on, {verb} no longer reusable"
        ), line
        assert "(s)" not in line and "§" not in line
