"""``ctxwright audit`` on the logs Claude Code and Codex keep (``agent_logs/``).

The logs are written to the agents' public formats by ``agent_logs/synth.py`` with a cause
planted at known lines: every one must be named. Token totals per session are compared with
ccusage 18 (``make ccusage`` installs it; skipped only when node or ccusage is absent). Hostile
input -- bad lines, unknown entry types, an over-long line (2 GB in the slow test), 10,000 files
-- gives one line each and loses nothing else.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ctxwright.agent_logs import summarise, synth
from ctxwright.cli.main import main

NPM_BIN = Path(os.environ.get("CTXWRIGHT_NPM_DIR", Path.home() / ".cache/ctxwright/npm")) / "node_modules/.bin"
CCUSAGE = NPM_BIN / "ccusage"
CCUSAGE_CODEX = NPM_BIN / "ccusage-codex"


def run_cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """``ctxwright audit ...`` in-process, stdout and stderr captured."""
    out, err = io.StringIO(), io.StringIO()
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["audit", *args])
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return code, out.getvalue(), err.getvalue()


def audit_json(*args: str, env: dict[str, str] | None = None) -> tuple[dict[str, Any], str]:
    code, out, err = run_cli(*args, "--json", env=env)
    assert code == 0, err
    return json.loads(out), err


def claude_tree(tmp_path: Path, **kw: Any) -> tuple[Path, list[synth.Planted]]:
    projects = tmp_path / "claude" / "projects"
    return projects, synth.claude_code_logs(projects, **kw)


def assert_planted(doc: dict[str, Any], planted: list[synth.Planted]) -> None:
    """Every planted cause named at its line; the planted hits are not among the calls that fell."""
    named = {(c["file"], c["line"]): c["cause"] for c in doc["calls"]}
    wrong = [
        (Path(p.file).name, p.line, p.cause, named.get((p.file, p.line), "hit"))
        for p in planted
        if named.get((p.file, p.line), "hit") != p.cause
    ]
    assert not wrong, wrong
    assert len(named) == sum(p.cause != "hit" for p in planted)


# -- causes -----------------------------------------------------------------------------------


def test_claude_code_every_planted_cause_is_named(tmp_path: Path) -> None:
    projects, planted = claude_tree(tmp_path, sessions=2, projects=2)
    doc, err = audit_json(str(projects))
    assert_planted(doc, planted)
    assert {p.cause for p in planted} == {
        "first",
        "hit",
        "ttl_expired",
        "compaction",
        "model_changed",
        "prefix_changed",
    }
    assert len(doc["sessions"]) == 4
    for s in doc["sessions"]:
        assert (s["compactions"], s["model_switches"], s["sidechain_calls"], s["idle_gaps_over_ttl"]) == (1, 1, 3, 2)
        assert s["tokens"]["cache_write_1h"] > 0 and s["tokens"]["cache_write_5m"] > 0
        assert set(s["lost_usd_by_cause"]) == {"ttl_expired", "compaction", "model_changed", "prefix_changed"}
        assert 0 < s["lost_usd"] < s["spent_usd"]
    # ranked by what they lost
    lost = [s["lost_usd"] for s in doc["sessions"]]
    assert lost == sorted(lost, reverse=True)
    # the 1-hour TTL: the 30-minute gap is a hit, the 75-minute one an expiry with the hour named
    expired = [c for c in doc["calls"] if c["cause"] == "ttl_expired"]
    assert sorted({round(c["gap_s"] // 60) for c in expired}) in ([7, 75], [7, 76], [8, 75], [8, 76])
    assert any("60m00s TTL" in c["evidence"] for c in expired)
    prefix = next(c for c in doc["calls"] if c["cause"] == "prefix_changed")
    assert "before token" in prefix["evidence"] and "not in this log" in prefix["evidence"]
    # lost is priced: what the call cost minus the cost had the cache held
    assert all(c["lost_usd"] > 0 for c in doc["calls"] if c["cause"] not in ("first",))
    assert err == ""  # file-history-snapshot lines are a known type: nothing to say


def test_codex_every_planted_cause_is_named(tmp_path: Path) -> None:
    home = tmp_path / "codex"
    planted = synth.codex_logs(home / "sessions", sessions=2)
    doc, _ = audit_json("--codex", env={"CODEX_HOME": str(home)})
    assert_planted(doc, planted)
    assert {p.cause for p in planted} >= {"first", "ttl_expired", "compaction", "model_changed", "prefix_changed"}
    context = [c for c in doc["calls"] if c["cause"] == "prefix_changed" and "turn context" in c["evidence"]]
    assert len(context) == 2 and all("cwd" in c["evidence"] for c in context)
    assert all(s["agent"] == "codex" and s["spent_usd"] > 0 for s in doc["sessions"])


def test_by_project_and_by_day(tmp_path: Path) -> None:
    projects, _ = claude_tree(tmp_path, sessions=2, projects=2)
    doc, _ = audit_json(str(projects), "--by", "project")
    assert [g["key"] for g in doc["groups"]] and len(doc["groups"]) == 2
    assert sum(g["calls"] for g in doc["groups"]) == doc["total"]["calls"]
    assert all(g["compactions"] == 2 for g in doc["groups"])
    doc, _ = audit_json(str(projects), "--by", "day")
    assert {g["key"] for g in doc["groups"]} == {"2026-11-02"}
    code, out, _ = run_cli(str(projects), "--by", "day")
    assert code == 0 and "days (UTC), most lost" in out and "causes:" in out and "dearest misses" in out


def test_one_transcript_summarised(tmp_path: Path) -> None:
    _, planted = claude_tree(tmp_path, sessions=1)
    path = Path(planted[0].file)
    s = summarise(path)
    assert s is not None
    assert s.calls == len(planted) and s.agent == "claude-code" and s.model == synth.OPUS
    assert s.spent_usd is not None and s.lost_usd is not None and 0 < s.lost_usd < s.spent_usd
    assert s.ttl_s == 3600 and s.expires_at == pytest.approx(s.last_call_at + 3600)
    assert s.last_context_tokens and s.last_context_tokens > 10_000
    assert s.causes["ttl_expired"] == 2 and s.compactions == 1 and s.problems == 0
    codex = synth.codex_logs(tmp_path / "sessions", sessions=1)
    c = summarise(codex[0].file)
    assert c is not None and c.agent == "codex" and c.model == synth.GPT_NEXT and c.calls == len(codex)
    empty = tmp_path / "empty.jsonl"
    empty.write_text(json.dumps({"type": "user", "sessionId": "s", "message": {"content": "hi"}}) + "\n")
    assert summarise(empty) is None
    with pytest.raises(FileNotFoundError):  # the OS's own error, for the caller to word
        summarise(tmp_path / "missing.jsonl")


# -- one line each, nothing lost --------------------------------------------------------------


def test_hostile_lines_each_one_line_and_nothing_lost(tmp_path: Path) -> None:
    clean_root, planted = claude_tree(tmp_path / "clean", sessions=1)
    clean, _ = audit_json(str(clean_root))
    path = Path(planted[0].file)
    lines = path.read_text().splitlines(keepends=True)
    hostile = [
        "{not json\n",
        "[1, 2]\n",
        json.dumps({"type": "brand-new-entry", "sessionId": "x"}) + "\n",
        json.dumps({"type": "brand-new-entry", "sessionId": "x"}) + "\n",
        '{"type": "user", "padding": "' + "z" * 5_000 + '"}\n',  # over the cap given below
        "\n",
    ]
    mixed = lines[:5] + hostile[:3] + lines[5:20] + hostile[3:] + lines[20:]
    path.write_text("".join(mixed))
    code, out, err = run_cli(str(clean_root), "--json", "--max-record-bytes", "4096")
    assert code == 0
    doc = json.loads(out)
    assert doc["total"]["logged"] == clean["total"]["logged"]
    assert doc["total"]["calls"] == clean["total"]["calls"]
    problems = err.strip().splitlines()
    assert len(problems) == 4, problems  # bad JSON, not an object, the long line, one line for the new type
    assert sum("longer than the 4,096-byte cap" in p for p in problems) == 1
    assert sum("2 lines of type 'brand-new-entry' passed over" in p for p in problems) == 1
    assert all(p.startswith(str(path)) for p in problems)


def test_usage_lines_ccusage_would_not_count_are_said(tmp_path: Path) -> None:
    projects, planted = claude_tree(tmp_path, sessions=1)
    path = Path(planted[0].file)
    entry = json.loads(path.read_text().splitlines()[planted[1].line - 1])
    entry["message"]["id"] = "msg_other"
    entry["version"] = "latest"
    with path.open("a") as f:
        f.write(json.dumps(entry) + "\n")
    code, _, err = run_cli(str(projects), "--json")
    assert code == 0 and "usage not counted: version is not a version number" in err


def test_errors_are_one_line(tmp_path: Path) -> None:
    code, out, err = run_cli("--claude", env={"CLAUDE_CONFIG_DIR": str(tmp_path / "none")})
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "no Claude Code logs" in err
    code, _, err = run_cli("--codex", env={"CODEX_HOME": str(tmp_path / "none")})
    assert code == 2 and len(err.strip().splitlines()) == 1 and "no Codex logs" in err
    (tmp_path / "empty").mkdir()
    code, _, err = run_cli(str(tmp_path / "empty"))
    assert code == 2 and "is a folder with no Claude Code or Codex log" in err and len(err.strip().splitlines()) == 1
    (tmp_path / "empty" / "a.jsonl").write_text('{"type": "user", "sessionId": "s", "message": {"content": "hi"}}\n')
    code, _, err = run_cli(str(tmp_path / "empty"))
    assert code == 2 and "no call with usage found" in err and len(err.strip().splitlines()) == 1
    os.mkfifo(tmp_path / "empty" / "pipe.jsonl")  # in a folder, a FIFO is passed over, not waited on
    code, _, err = run_cli(str(tmp_path / "empty"))
    assert code == 2 and "pipe.jsonl: not a regular file; skipped" in err
    code, _, err = run_cli("-", "--by", "day")
    assert code == 2 and "--by ranks agent logs" in err


@pytest.mark.slow
def test_a_2gb_line_is_read_past(tmp_path: Path) -> None:
    """A line of 2 GB (a sparse file: no disk is filled) costs that line alone."""
    projects, planted = claude_tree(tmp_path, sessions=1)
    path = Path(planted[0].file)
    clean, _ = audit_json(str(projects))
    text = path.read_bytes()
    cut = text.index(b"\n", len(text) // 2) + 1
    with path.open("wb") as f:
        f.write(text[:cut])
        f.write(b'{"type":"user","blob":"')
        f.seek(2 * 1024**3, os.SEEK_CUR)  # a hole of 2 GB: zeros, never written
        f.write(b'"}\n' + text[cut:])
    assert path.stat().st_size > 2 * 1024**3
    code, out, err = run_cli(str(projects), "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["total"]["logged"] == clean["total"]["logged"]
    assert len(err.strip().splitlines()) == 1  # the long line
    assert "longer than the 134,217,728-byte cap: skipped" in err


@pytest.mark.slow
def test_ten_thousand_files(tmp_path: Path) -> None:
    """10,000 session files: every call counted, the table one line for the rows it does not show."""
    projects, planted = claude_tree(tmp_path, sessions=1)
    template = Path(planted[0].file).read_text().splitlines()
    first = next(json.loads(x) for x in template if '"usage"' in x)
    folder = projects / "-home-dev-many"
    folder.mkdir()
    for i in range(10_000):
        entry = dict(first, sessionId=f"s{i:05d}", requestId=f"req_{i}")
        (folder / f"s{i:05d}.jsonl").write_text(json.dumps(entry) + "\n")
    (folder / "notes.jsonl").write_text('{"hello": "world"}\n')
    code, out, err = run_cli(str(projects), "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["total"]["calls"] == len(planted) + 10_000
    assert len(doc["sessions"]) == 10_001
    assert err.count("neither a Claude Code nor a Codex log") == 1
    code, out, _ = run_cli(str(projects))
    assert code == 0 and "... and 9,976 more (--json lists them all)" in out
    assert len(out.splitlines()) < 80


# -- ccusage ----------------------------------------------------------------------------------


def ccusage(tool: Path, env: dict[str, str]) -> dict[str, Any]:
    if shutil.which("node") is None or not tool.exists():
        pytest.skip(f"node or {tool.name} is absent (make ccusage installs it)")
    result = subprocess.run(
        [str(tool), "session", "--json", "--offline"],
        env={**os.environ, **env, "NO_COLOR": "1", "TZ": "UTC"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_claude_code_totals_equal_ccusage(tmp_path: Path) -> None:
    """ccusage 18's ``session`` groups by the folder a log is in (a project folder under
    ``projects``): per project, and per session with one session a project, the token totals
    are equal -- a repeated answer (a resumed session's copy) and lines ccusage refuses included."""
    projects, planted = claude_tree(tmp_path, sessions=2, projects=2, seed=3)
    files = sorted({p.file for p in planted}, key=lambda f: next(p.line for p in planted if p.file == f))
    first_file, later = Path(planted[0].file), Path(planted[-1].file)
    answers = [x for x in first_file.read_text().splitlines() if '"usage"' in x]
    bad = json.loads(answers[2])
    bad["message"]["id"], bad["message"]["usage"]["cache_read_input_tokens"] = "msg_null_read", None
    with later.open("a") as f:
        f.write(answers[1] + "\n")  # the same answer again: counted once, where it was first
        f.write(json.dumps(bad) + "\n")  # refused by both
    assert len(files) == 4
    theirs = ccusage(CCUSAGE, {"CLAUDE_CONFIG_DIR": str(projects.parent)})
    doc, _ = audit_json(str(projects), "--by", "project")
    ours = {g["key"]: g["logged"] for g in doc["groups"]}
    fields = {
        "inputTokens": "input_tokens",
        "cacheCreationTokens": "cache_creation_input_tokens",
        "cacheReadTokens": "cache_read_input_tokens",
        "outputTokens": "output_tokens",
    }
    assert {s["sessionId"] for s in theirs["sessions"]} == set(ours)
    for s in theirs["sessions"]:
        assert {k: s[k] for k in fields} == {k: ours[s["sessionId"]][v] for k, v in fields.items()}, s["sessionId"]

    single, _ = claude_tree(tmp_path / "single", sessions=1, projects=3, seed=4)
    theirs = ccusage(CCUSAGE, {"CLAUDE_CONFIG_DIR": str(single.parent)})
    doc, _ = audit_json(str(single))
    ours = {s["project"]: s["logged"] for s in doc["sessions"]}
    assert len(ours) == 3 == len(theirs["sessions"])
    for s in theirs["sessions"]:
        assert {k: s[k] for k in fields} == {k: ours[s["sessionId"]][v] for k, v in fields.items()}


def test_codex_totals_equal_ccusage(tmp_path: Path) -> None:
    home = tmp_path / "codex"
    planted = synth.codex_logs(home / "sessions", sessions=3, seed=5)
    with Path(planted[0].file).open("a") as f:  # a torn line and a type from a later Codex: both pass them over
        f.write('{"timestamp": "2026-11-02T10:00:00.000Z", "type": "future_item", "payload": {}}\n{"timest\n')
    theirs = ccusage(CCUSAGE_CODEX, {"CODEX_HOME": str(home)})
    doc, err = audit_json("--codex", env={"CODEX_HOME": str(home)})
    assert len(err.strip().splitlines()) == 2 and "not JSON" in err and "type 'future_item' passed over" in err
    ours = {s["key"]: s["logged"] for s in doc["sessions"]}
    fields = {
        "inputTokens": "input_tokens",
        "cachedInputTokens": "cached_input_tokens",
        "outputTokens": "output_tokens",
        "reasoningOutputTokens": "reasoning_output_tokens",
        "totalTokens": "total_tokens",
    }
    assert {s["sessionId"] for s in theirs["sessions"]} == set(ours)
    for s in theirs["sessions"]:
        assert {k: s[k] for k in fields} == {k: ours[s["sessionId"]][v] for k, v in fields.items()}


def test_audit_runs_as_a_program(tmp_path: Path) -> None:
    """The installed command, as a user runs it: a table on stdout, exit 0."""
    projects, _ = claude_tree(tmp_path, sessions=1)
    result = subprocess.run(
        [sys.executable, "-m", "ctxwright", "audit", str(projects)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "sessions, most lost to cache misses first" in result.stdout and "lost $" in result.stdout


def test_a_sub_agent_in_a_file_of_its_own(tmp_path: Path) -> None:
    """Claude Code may write a sub-agent's turns to ``agent-<id>.jsonl`` beside the session's
    file, each line with the parent's ``sessionId`` and an ``agentId``: they count in the parent's
    session, as a side chain of their own, and the project's totals still equal ccusage's."""
    projects, planted = claude_tree(tmp_path, sessions=1)
    path = Path(planted[0].file)
    lines = path.read_text().splitlines()
    side = [x for x in lines if '"isSidechain":true' in x]
    assert len(side) == 4  # the sub-agent's prompt and its three answers
    path.write_text("".join(x + "\n" for x in lines if x not in side))
    agent = path.parent / "agent-5f1e2d3c.jsonl"
    agent.write_text("".join(json.dumps(dict(json.loads(x), agentId="5f1e2d3c")) + "\n" for x in side))
    doc, err = audit_json(str(projects))
    assert err == "" and len(doc["sessions"]) == 1
    s = doc["sessions"][0]
    assert s["sidechain_calls"] == 3 and s["calls"] == len(planted)
    side_calls = [c for c in doc["calls"] if c["file"] == str(agent)]
    assert [(c["chain"], c["cause"]) for c in side_calls] == [("agent-5f1e2d3c", "first")]
    theirs = ccusage(CCUSAGE, {"CLAUDE_CONFIG_DIR": str(projects.parent)})
    (only,) = theirs["sessions"]
    assert (only["inputTokens"], only["cacheReadTokens"], only["outputTokens"]) == (
        s["logged"]["input_tokens"],
        s["logged"]["cache_read_input_tokens"],
        s["logged"]["output_tokens"],
    )
