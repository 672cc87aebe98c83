"""``ctxwright lock`` and ``ctxwright.lock`` (``ci/lock.py``): written from a request log, a
golden trace, a stored Harness session or a proxy session; ``--check`` exits 1 on each prefix
change a regression brings (a timestamp in the system prompt, two tools swapped, a tool
description changed), naming the segment and the cost per call, and 0 again after the lock
is regenerated; anything it cannot judge is one line and exit 2, in bounded time and memory."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import resource
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from ctxwright import Harness, ScriptedBackend, tool
from ctxwright.ci.lock import (
    MAX_LOCK_BYTES,
    Lock,
    LockedSegment,
    PrefixSource,
    check_lock,
    lock_of,
    read_lock,
    read_prefix,
    render_lock,
)
from ctxwright.errors import LockFileError
from ctxwright.proxy.log import proxy_session_requests
from ctxwright.proxy.store import ProxyLog
from ctxwright.store.sessions import Store

SRC = str(Path(__file__).resolve().parents[1] / "src")

SYSTEM = (
    "You are a coding agent.\n\n"
    "# Rules\nBe brief. Never guess a path.\n\n"
    "## Tools\nRead before you write.\n\n"
    "## Style\nShort sentences.\n"
)


def _tool(name: str, description: str | None = None) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description or f"{name.replace('_', ' ')}: the path is relative to the repository",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    }


TOOLS = [_tool("read_file"), _tool("write_file"), _tool("list_dir")]


def _record(system: str, tools: list[dict[str, Any]], user: str = "fix the bug", model: str = "gpt-4.1") -> dict:
    body = {"model": model, "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}
    body["tools"] = tools
    usage = {"prompt_tokens": 900, "completion_tokens": 12, "prompt_tokens_details": {"cached_tokens": 0}}
    return {"request": body, "response": {"model": model, "usage": usage}}


def _log(path: Path, *records: dict) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _cli(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": SRC, "CTXWRIGHT_DB": str(cwd / "default.db")}
    return subprocess.run(
        [sys.executable, "-m", "ctxwright.cli.main", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _one_line_exit_2(r: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert len(lines) == 1 and "Traceback" not in r.stderr + r.stdout, r.stderr
    return lines[0]


# -- the three regressions of the prefix, through the real CLI --------------------------------

_SWAPPED = [TOOLS[1], TOOLS[0], TOOLS[2]]
_DESCRIBED = copy.deepcopy(TOOLS)
_DESCRIBED[2]["function"]["description"] = "list dir (session 7f3a: https://agent.test/s/7f3a)"
REGRESSIONS = {
    "timestamp in the system prompt": (
        SYSTEM.replace("Be brief.", "Be brief. Current time: 2025-06-01T10:00:00Z."),
        TOOLS,
        "system § '# Rules'",
    ),
    "two tools swapped": (SYSTEM, _SWAPPED, "tool 'write_file'"),
    "a tool description changed": (SYSTEM, _DESCRIBED, "tool 'list_dir'"),
}


@pytest.mark.parametrize("case", REGRESSIONS)
def test_check_fails_on_each_prefix_change_and_passes_after_lock(tmp_path: Path, case: str) -> None:
    golden = _log(tmp_path / "golden.jsonl", _record(SYSTEM, TOOLS))
    r = _cli("lock", "golden.jsonl", cwd=tmp_path)
    assert r.returncode == 0 and "wrote ctxwright.lock" in r.stdout, r.stderr
    assert _cli("lock", str(golden), "--check", cwd=tmp_path).returncode == 0

    system, tools, segment = REGRESSIONS[case]
    _log(tmp_path / "run.jsonl", _record(system, tools))
    r = _cli("lock", "run.jsonl", "--check", cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    out = r.stdout.splitlines()
    assert out[0].startswith("ctxwright lock: the prefix changed")
    assert any(segment in line for line in out[1:]), r.stdout
    cost = next(line for line in out if line.startswith("cost per call:"))
    assert "are no longer reusable" in cost and "system, then tools" in cost and "USD per call at gpt-4.1" in cost
    assert any("ctxwright lock run.jsonl" in line for line in out)  # how to update it

    assert _cli("lock", "run.jsonl", cwd=tmp_path).returncode == 0
    r = _cli("lock", "run.jsonl", "--check", cwd=tmp_path)
    assert r.returncode == 0 and "matches ctxwright.lock" in r.stdout


def test_check_json_names_both_swapped_tools_and_prices_the_break(tmp_path: Path) -> None:
    _log(tmp_path / "golden.jsonl", _record(SYSTEM, TOOLS))
    _log(tmp_path / "run.jsonl", _record(SYSTEM, _SWAPPED))
    assert _cli("lock", "golden.jsonl", cwd=tmp_path).returncode == 0
    r = _cli("lock", "run.jsonl", "--check", "--json", cwd=tmp_path)
    assert r.returncode == 1
    data = json.loads(r.stdout)
    assert data["verdict"] == "changed"
    assert [(c["segment"], c["kind"]) for c in data["changes"]] == [
        ("tool 'write_file'", "moved"),
        ("tool 'read_file'", "moved"),
    ]
    lock = read_lock(tmp_path / "ctxwright.lock")
    tool_tokens = sum(s.tokens for s in lock.segments if s.part == "tool")
    assert data["broken_at"] == "tool 'write_file'" and data["invalidated_tokens"] == tool_tokens
    # gpt-4.1: input (= write) 2.0, cached 0.5 USD per million tokens
    assert data["extra_cost_per_call_usd"] == pytest.approx(tool_tokens * 1.5 / 1e6)


def test_the_lock_file_is_toml_one_line_per_segment_with_a_header(tmp_path: Path) -> None:
    _log(tmp_path / "golden.jsonl", _record(SYSTEM, TOOLS))
    assert _cli("lock", "golden.jsonl", "--file", "prefix.lock", cwd=tmp_path).returncode == 0
    text = (tmp_path / "prefix.lock").read_text()
    data = tomllib.loads(text)
    assert data["model"] == "gpt-4.1" and data["provider"] == "openai" and data["order"] == "system, tools"
    names = [s["name"] for s in data["segments"]]
    assert names == [
        "system line 1 'You are a coding agent.'",
        "system § '# Rules'",
        "system § '## Tools'",
        "system § '## Style'",
        "tool 'read_file'",
        "tool 'write_file'",
        "tool 'list_dir'",
    ]
    assert data["tokens"] == sum(s["tokens"] for s in data["segments"])
    for name in names:  # each segment is exactly one line of the file: a reviewer's diff is per segment
        assert sum(name.replace("'", "'") in line for line in text.splitlines()) == 1
    assert "# Regenerate: ctxwright lock golden.jsonl --file prefix.lock" in text
    assert "--check" in text.splitlines()[5]
    # written again unchanged: the file is left as it is
    mtime = (tmp_path / "prefix.lock").stat().st_mtime_ns
    r = _cli("lock", "golden.jsonl", "--file", "prefix.lock", cwd=tmp_path)
    assert "unchanged" in r.stdout and (tmp_path / "prefix.lock").stat().st_mtime_ns == mtime


def test_anthropic_caches_tools_first_so_a_system_change_costs_only_the_system(tmp_path: Path) -> None:
    tools = [{"name": "search", "description": "Search the docs", "input_schema": {"type": "object"}}]
    usage = {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 900}

    def rec(system: str) -> dict:
        body = {"model": "claude-sonnet-4-5", "system": system, "tools": tools, "max_tokens": 100}
        body["messages"] = [{"role": "user", "content": "hi"}]
        return {"request": body, "response": {"model": "claude-sonnet-4-5", "usage": usage}}

    golden = read_prefix(_log(tmp_path / "a.jsonl", rec(SYSTEM)))
    lock, segs = lock_of(golden)
    assert lock.order == "tools, system" and segs[0].part == "tool"
    changed = read_prefix(_log(tmp_path / "b.jsonl", rec(SYSTEM.replace("Short", "Terse"))))
    from ctxwright.cache.prices import Pricing

    result = check_lock(read_lock_text(tmp_path, lock), changed, pricing=Pricing())
    assert [c.segment for c in result.changes] == ["system § '## Style'"]
    style = next(s for s in changed.segments() if s.name == "system § '## Style'")
    assert result.invalidated_tokens == style.tokens  # the last segment in Anthropic's order
    assert "tools, then system" in result.cost_line()
    assert result.price is not None
    assert result.extra_cost_per_call == pytest.approx(style.tokens * (3.75 - 0.3) / 1e6)


def read_lock_text(tmp_path: Path, lock: Lock) -> Lock:
    p = tmp_path / "x.lock"
    p.write_text(render_lock(lock))
    return read_lock(p)


def test_several_prefixes_in_a_source_the_first_is_locked_the_others_counted(tmp_path: Path) -> None:
    log = _log(
        tmp_path / "two.jsonl",
        _record(SYSTEM, TOOLS),
        _record("You summarize.", [], user="summarize"),
        _record(SYSTEM, TOOLS, user="another task"),
    )
    prefix = read_prefix(log)
    assert prefix.system == SYSTEM and prefix.requests == 3 and prefix.other_prefixes == 1
    r = _cli("lock", "two.jsonl", cwd=tmp_path)
    assert "1 other prefix(es)" in r.stdout
    r = _cli("lock", "two.jsonl", "--check", cwd=tmp_path)
    assert r.returncode == 0 and "note: two.jsonl holds 1 other prefix(es)" in r.stdout


def test_names_that_need_escaping_round_trip_through_tomllib(tmp_path: Path) -> None:
    system = '# "Quoted" \\ heading\nx\n# \x7f del and \ud800 lone\ny\n# 周一 日本語\nz\n'
    tools = [_tool('we"ird\\name')]
    lock, _ = lock_of(PrefixSource(system, tools, None, 'm"1', "test"))
    back = read_lock_text(tmp_path, lock)
    assert [s.name for s in back.segments] == [s.name for s in lock.segments]
    assert back.model == 'm"1'


# -- sources: a stored Harness session, its export, a proxy session --------------------------


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _session(db: Path, system: str) -> str:
    with Harness(system=system, tools=[add], backend=ScriptedBackend(["5."]), db=db) as h:
        h.run("What is 2 + 3?")
        return h.session_id


def test_a_stored_harness_session_is_a_source_and_agrees_with_its_export(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    sid = _session(db, SYSTEM)
    r = _cli("lock", "--session", sid, "--store", str(db), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lock = read_lock(tmp_path / "ctxwright.lock")
    assert lock.provider == "scripted" and lock.model == "scripted"
    assert "tool 'add'" in [s.name for s in lock.segments]
    assert "system § '## Style'" in [s.name for s in lock.segments]
    # the session's export (its requests, as sent) holds the same prefix
    exported = _cli("--db", str(db), "export", sid, "--requests", cwd=tmp_path)
    assert exported.returncode == 0
    (tmp_path / "golden.jsonl").write_text(exported.stdout)
    assert _cli("lock", "golden.jsonl", "--check", cwd=tmp_path).returncode == 0, "export and store disagree"
    # a new session whose prompt has a timestamp fails the check, naming the section
    sid2 = _session(db, SYSTEM.replace("Short sentences.", "Short sentences. Today: 2025-06-01."))
    r = _cli("lock", "--session", sid2, "--store", str(db), "--check", cwd=tmp_path)
    assert r.returncode == 1 and "system § '## Style' changed" in r.stdout
    assert "no price known" in r.stdout  # the scripted model has none
    # --db works as well as --store
    assert _cli("--db", str(db), "lock", "--session", sid, "--check", cwd=tmp_path).returncode == 0


def test_an_unknown_session_and_a_missing_store_are_one_line(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    _session(db, SYSTEM)
    assert "nope" in _one_line_exit_2(_cli("lock", "--session", "nope", "--store", str(db), cwd=tmp_path))
    line = _one_line_exit_2(_cli("lock", "--session", "x", "--store", str(tmp_path / "none.db"), cwd=tmp_path))
    assert "no ctxwright database" in line and not (tmp_path / "none.db").exists()


def test_a_proxy_session_is_a_source(tmp_path: Path) -> None:
    db = tmp_path / "proxy.db"
    store = Store(db)
    log = ProxyLog(store)
    sid = log.create_session(grouped_by="header", group_key="s1", api="openai_chat", upstream="http://u")
    for k, rec in enumerate([_record(SYSTEM, TOOLS), _record(SYSTEM, TOOLS, user="more")]):
        req, resp = json.dumps(rec["request"]).encode(), json.dumps(rec["response"]).encode()
        log.record_exchange(
            {
                "session_id": sid,
                "call_index": k,
                "started_at": 1.0 + k,
                "ended_at": 1.5 + k,
                "method": "POST",
                "path": "/v1/chat/completions",
                "api": "openai_chat",
                "streamed": 0,
                "status": 200,
                "outcome": "complete",
                "request_bytes": len(req),
                "request_sha256": hashlib.sha256(req).hexdigest(),
                "request_content_type": "application/json",
                "request_body": req,
                "request_parsed": 1,
                "response_bytes": len(resp),
                "response_sha256": hashlib.sha256(resp).hexdigest(),
                "response_content_type": "application/json",
                "response_body": resp,
                "response_parsed": 1,
            }
        )
    assert len(proxy_session_requests(store, sid)) == 2
    store.close()
    _log(tmp_path / "golden.jsonl", _record(SYSTEM, TOOLS))
    assert _cli("lock", "golden.jsonl", cwd=tmp_path).returncode == 0
    r = _cli("lock", "--proxy-session", sid, "--store", str(db), "--check", cwd=tmp_path)
    assert r.returncode == 0 and f"proxy session {sid}" in r.stdout, r.stdout + r.stderr


# -- what cannot be judged: one line, exit 2 -------------------------------------------------


def test_no_lock_no_source_two_sources(tmp_path: Path) -> None:
    _log(tmp_path / "golden.jsonl", _record(SYSTEM, TOOLS))
    assert "no lock file" in _one_line_exit_2(_cli("lock", "golden.jsonl", "--check", cwd=tmp_path))
    assert "give the prefix" in _one_line_exit_2(_cli("lock", cwd=tmp_path))
    assert "one source" in _one_line_exit_2(_cli("lock", "golden.jsonl", "--session", "x", cwd=tmp_path))
    assert "cannot read" in _one_line_exit_2(_cli("lock", "missing.jsonl", cwd=tmp_path))
    (tmp_path / "junk.jsonl").write_text("not json\n{}\n")
    assert "no request" in _one_line_exit_2(_cli("lock", "junk.jsonl", cwd=tmp_path))


def _sparse(p: Path, size: int) -> Path:
    with p.open("wb") as f:
        f.truncate(size)
    return p


def _valid_lock(tmp_path: Path) -> str:
    lock, _ = lock_of(PrefixSource(SYSTEM, TOOLS, "openai", "gpt-4.1", "t"))
    return render_lock(lock)


HOSTILE_LOCKS = {
    "100 MB": (lambda p: _sparse(p, 100 * 1024 * 1024), "larger than"),
    "binary": (lambda p: p.write_bytes(os.urandom(4096) + b"\xff\xfe"), "not UTF-8"),
    "fifo": (lambda p: os.mkfifo(p), "not a regular file"),
    "deep inline tables": (lambda p: p.write_text("x = " + "{a = " * 100_000 + "1" + "}" * 100_000), "ctxwright lock"),
    "deep arrays": (lambda p: p.write_text("x = " + "[" * 200_000 + "]" * 200_000), "ctxwright lock"),
    "a folder": (lambda p: p.mkdir(), "not a regular file"),
    "not toml": (lambda p: p.write_text("segments = [ {"), "not TOML"),
    "unknown key": (lambda p: p.write_text("version = 1\nsegments = []\ntokens = 0\nextra = 1\n"), "unknown key"),
    "no version": (lambda p: p.write_text("segments = []\ntokens = 0\n"), "version"),
    "bad hash": (
        lambda p: p.write_text(
            'version = 1\ntokens = 1\nsegments = [{ kind = "tool", name = "t", tokens = 1, sha256 = "abc" }]\n'
        ),
        "sha256",
    ),
    "tokens edited": (
        lambda p: p.write_text(_valid_lock(p.parent).replace("tokens = 6,", "tokens = 7,", 1)),
        "not the sum",
    ),
    "bool tokens": (lambda p: p.write_text("version = 1\ntokens = true\nsegments = []\n"), "not the sum"),
    "segment not a table": (
        lambda p: p.write_text("version = 1\ntokens = 0\nsegments = [1]\n"),
        r"segments\[0\] is not",
    ),
}


@pytest.mark.parametrize("case", HOSTILE_LOCKS)
def test_a_hostile_or_hand_edited_lock_is_one_line(tmp_path: Path, case: str) -> None:
    make, says = HOSTILE_LOCKS[case]
    lock = tmp_path / "ctxwright.lock"
    make(lock)
    with pytest.raises(LockFileError, match=says) as info:
        read_lock(lock)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("case", ["100 MB", "fifo", "deep inline tables", "binary"])
def test_check_refuses_a_hostile_lock_with_exit_2_in_bounded_memory(tmp_path: Path, case: str) -> None:
    _log(tmp_path / "golden.jsonl", _record(SYSTEM, TOOLS))
    HOSTILE_LOCKS[case][0](tmp_path / "ctxwright.lock")
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    r = _cli("lock", "golden.jsonl", "--check", cwd=tmp_path, timeout=60)  # a FIFO read would block: timeout
    _one_line_exit_2(r)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KB on Linux, the largest child so far
    assert peak < 400_000 or peak == before, f"peak RSS {peak} KB"


def test_a_source_that_is_a_device_or_a_folder_is_one_line(tmp_path: Path) -> None:
    assert "device" in _one_line_exit_2(_cli("lock", "/dev/zero", cwd=tmp_path, timeout=30))
    assert "folder" in _one_line_exit_2(_cli("lock", str(tmp_path), cwd=tmp_path, timeout=30))


def test_a_source_fifo_is_read_as_a_pipe(tmp_path: Path) -> None:
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    env = {**os.environ, "PYTHONPATH": SRC}
    p = subprocess.Popen(
        [sys.executable, "-m", "ctxwright.cli.main", "lock", str(fifo)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with fifo.open("w") as w:  # blocks until the reader opened it
        w.write(json.dumps(_record(SYSTEM, TOOLS)) + "\n")
    _out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert read_lock(tmp_path / "ctxwright.lock").model == "gpt-4.1"


def test_the_lock_is_never_written_over_a_device(tmp_path: Path) -> None:
    _log(tmp_path / "golden.jsonl", _record(SYSTEM, TOOLS))
    line = _one_line_exit_2(_cli("lock", "golden.jsonl", "--file", "/dev/null", cwd=tmp_path))
    assert "not a regular file" in line
    assert Path("/dev/null").is_char_device()


def test_the_lock_cap_is_far_above_a_real_lock() -> None:
    segs = tuple(LockedSegment(f"tool 'tool_{i}'", "tool", 100, "a" * 64) for i in range(5000))
    assert len(render_lock(Lock(segs)).encode()) < MAX_LOCK_BYTES // 4
