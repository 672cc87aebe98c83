"""``ctxwright statusline`` (``cli/statusline.py``): one line for Claude Code's ``statusLine``
command and any prompt.

What must hold: Claude Code's stdin object (its public shape) names the transcript, and the line
gives that session's hit ratio, $ and $ lost exactly as ``agent_logs.summarise`` counts them,
with the context left in the window; a proxied session gives the same from the store, as does a
running ``ctxwright wrap``'s; and whatever the input -- no stdin, bad JSON, a pipe never closed, a
missing transcript, an unknown session, no store -- the command prints one short line and exits 0,
never a traceback."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anthropic
import pytest

from ctxwright.agent_logs import summarise
from ctxwright.agent_logs.synth import claude_code_logs
from ctxwright.cli.statusline import Status, read_stdin, render, status_line
from ctxwright.proxy.serve import RecordingProxy
from ctxwright.proxy.server import ProxyConfig
from ctxwright.store.sessions import Store

sys.path.insert(0, str(Path(__file__).parent))
from providers.anthropic_sim import AnthropicSim

SRC = Path(__file__).resolve().parents[1] / "src"


def _run(
    *args: str, stdin: bytes | None = b"", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "ctxwright.cli.main", "statusline", *args],
        input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,
        capture_output=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(SRC), **(env or {})},
    )


def _args(**kw: Any) -> argparse.Namespace:
    return argparse.Namespace(**{"session": None, "transcript": None, "prices": None, "db": None, **kw})


def _pipe(data: bytes) -> Any:
    r, w = os.pipe()
    os.write(w, data)
    os.close(w)
    return os.fdopen(r, "rb")


@pytest.fixture
def transcript(tmp_path: Path) -> Path:
    claude_code_logs(tmp_path / "projects", sessions=1)
    return next((tmp_path / "projects").rglob("*.jsonl"))


def test_claude_codes_stdin_gives_the_transcripts_session(transcript: Path, tmp_path: Path) -> None:
    s = summarise(transcript)
    assert s is not None and s.hit_ratio is not None and s.spent_usd is not None and s.last_context_tokens
    payload = {
        "session_id": s.session_id,
        "transcript_path": str(transcript),
        "cwd": str(tmp_path),
        "model": {"id": "claude-sonnet-4-5-20250929", "display_name": "Sonnet 4.5"},
        "workspace": {"current_dir": str(tmp_path), "project_dir": str(tmp_path)},
        "cost": {"total_cost_usd": 0.42},
        "context_window": {"context_window_size": 200_000},
    }
    done = _run(stdin=json.dumps(payload).encode())
    assert done.returncode == 0 and done.stderr == b""
    (line,) = done.stdout.decode().splitlines()
    assert line.startswith(f"ctxwright hit {s.hit_ratio:.0%} · ")
    spent = f"${s.spent_usd:.4f}" if s.spent_usd < 1 else f"${s.spent_usd:,.2f}"
    assert f" {spent} " in line and "lost $" in line
    assert "cache expired" in line  # the planted session ended in 2026-11: long expired
    assert f"{(200_000 - s.last_context_tokens) / 1000:.0f}k to window" in line
    # Claude Code's own count of the last call's context wins over the transcript's
    payload["context_window"] = {
        "context_window_size": 200_000,
        "current_usage": {"input_tokens": 10, "cache_creation_input_tokens": 90, "cache_read_input_tokens": 900},
    }
    assert status_line(_args(), _pipe(json.dumps(payload).encode())).endswith(" · 199k to window")
    # the cache's time left, from the last call and its TTL
    assert s.expires_at is not None
    assert " · cache 2m00s" in status_line(_args(transcript=str(transcript)), None, now=s.expires_at - 120)


@pytest.mark.parametrize(
    "stdin, says",
    [
        (b"", "ctxwright: no store yet"),
        (b"{not json", "ctxwright: no store yet"),
        (b"[1, 2]", "ctxwright: no store yet"),
        (b"\xff\xfe garbage", "ctxwright: no store yet"),
        (b" " * (2 * 1024 * 1024), "ctxwright: no store yet"),
        (json.dumps({"transcript_path": "/nowhere/x.jsonl"}).encode(), "ctxwright: no transcript yet"),
        (json.dumps({"transcript_path": 7}).encode(), "ctxwright: no store yet"),
    ],
)
def test_any_input_is_one_short_line_and_exit_0(tmp_path: Path, stdin: bytes, says: str) -> None:
    done = _run("--db", str(tmp_path / "none.db"), stdin=stdin, env={"CTXWRIGHT_WRAP_LOG": ""})
    assert (done.returncode, done.stdout.decode(), done.stderr) == (0, says + "\n", b"")
    assert not (tmp_path / "none.db").exists()  # a status line never creates a store


def test_an_empty_or_half_written_transcript_is_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert status_line(_args(transcript=str(empty)), None) == "ctxwright: no model call yet"
    torn = tmp_path / "torn.jsonl"
    torn.write_text('{"type": "assistant", "message": {"usage": {"input_')
    assert status_line(_args(transcript=str(torn)), None).startswith("ctxwright: ")


def test_a_pipe_never_closed_does_not_hang() -> None:
    r, w = os.pipe()
    os.write(w, b'{"transcript_path": ')
    started = time.monotonic()
    with os.fdopen(r, "rb") as stream:
        assert read_stdin(stream, wait_s=0.3) is None
    os.close(w)
    assert time.monotonic() - started < 5


def test_the_line_says_what_is_known() -> None:
    now = 1_800_000_000.0
    full = Status(calls=9, hit_ratio=0.874, spent_usd=1.234, lost_usd=0.4, expires_at=now + 192, context_left=45_210)
    assert render(full, now) == "ctxwright hit 87% · $1.23 · lost $0.4000 · cache 3m12s · 45k to window"
    assert render(Status(calls=2, expires_at=now + 3000), now) == "ctxwright 2 call(s) · cache 50m00s"
    assert render(Status(calls=1, hit_ratio=0.0, spent_usd=0.01, lost_usd=0.0), now) == "ctxwright hit 0% · $0.0100"


SYSTEM = [{"type": "text", "text": "You follow the house rules. " * 60, "cache_control": {"type": "ephemeral"}}]


def test_a_proxied_session_from_the_store_and_from_a_running_wrap(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    with AnthropicSim(respond=lambda _b: [{"type": "text", "text": "noted"}], minimum=50) as sim:
        store = Store(db)
        lines: list[str] = []
        config = ProxyConfig(upstream=sim.url, clock=sim.clock.now)
        with RecordingProxy.start(config, store, printer=lines.append) as proxy:
            client = anthropic.Anthropic(base_url=proxy.url, api_key="k", max_retries=0)
            msgs: list[dict[str, Any]] = []
            for gap in (0, 60, 400):  # a hit, then a miss after the 5-minute TTL
                sim.clock.advance(gap)
                msgs.append({"role": "user", "content": f"question after {gap} s"})
                client.messages.create(model="claude-sonnet-4-5", max_tokens=20, system=SYSTEM, messages=msgs)
                msgs.append({"role": "assistant", "content": "noted"})
            assert proxy.recorder.wait_idle(30, at_least=3)
            client.close()
        store.close()
        usage = [r["usage"] for r in sim.responses]
        last_at = sim.clock.now()
    prompt = sum(u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"] for u in usage)
    ratio = sum(u["cache_read_input_tokens"] for u in usage) / prompt
    sid = lines[0].split()[0]
    line = status_line(_args(db=str(db), session=sid[:6]), None, now=last_at + 100)
    assert line.startswith(f"ctxwright hit {ratio:.0%} · $0.0") and " · lost $0.0" in line
    assert line.endswith(" · cache 3m20s")  # 300 s after the last call, 100 s of them gone
    # no session named: the store's latest; in a wrapped agent, the wrap log's latest line's
    assert status_line(_args(db=str(db)), None, now=last_at + 100) == line
    log = tmp_path / "wrap.log"
    log.write_text("ctxwright wrap: claude -> ...\n" + "\n".join(lines) + "\n")
    done = _run("--db", str(db), stdin=None, env={"CTXWRIGHT_WRAP_LOG": str(log)})
    assert done.returncode == 0 and done.stdout.decode().startswith(f"ctxwright hit {ratio:.0%} · ")
    log.write_text("ctxwright wrap: claude -> ...\n")  # wrapped, no call yet: not the store's older session
    done = _run("--db", str(db), stdin=None, env={"CTXWRIGHT_WRAP_LOG": str(log)})
    assert done.stdout.decode() == "ctxwright: no model call yet\n"
    assert status_line(_args(db=str(db), session="nosuch"), None) == "ctxwright: no session nosuch"
