"""Claude Code and Codex logs in their public formats (``claude_code.py``, ``codex.py``), with
the causes of every fall planted at known lines: what the tests check the audit names, and
what the benchmark reads (at any size: ``pad`` bytes of tool output per turn).

Each session follows one script, with its token counts varied by ``seed``:

* Claude Code (main chain): a first call; hits; an answer of three content blocks (three lines,
  one answer); an idle gap of 7 minutes on 5-minute writes (``ttl_expired``); a sub-agent's side
  chain (its own ``first``, then hits); a compact boundary and summary (``compaction``); a model
  switch (``model_changed``); a fall with nothing to explain it (``prefix_changed``); 1-hour
  writes, a 30-minute gap that they survive (a hit) and a 75-minute gap that they do not
  (``ttl_expired``).
* Codex: a first call; hits (one counted from ``total_token_usage`` alone); a ``token_count``
  with no usage; an 8-minute gap (``ttl_expired``); a changed ``cwd`` in the turn context
  (``prefix_changed``); a ``compacted`` item (``compaction``); a model switch
  (``model_changed``); an unexplained fall (``prefix_changed``).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from ctxwright.agent_logs.records import CLAUDE_CODE, CODEX

#: when the first generated session starts
EPOCH = datetime(2026, 11, 2, 9, 0, 0, tzinfo=UTC).timestamp()
SONNET = "claude-sonnet-4-5-20250929"
OPUS = "claude-opus-4-5-20251101"
HAIKU = "claude-haiku-4-5-20251001"
GPT = "gpt-5.1"
GPT_NEXT = "gpt-5.4"


@dataclass(frozen=True)
class Planted:
    """A call whose cause was planted: the audit must name ``cause`` for the call at ``line``."""

    agent: str
    session: str
    file: str
    line: int
    cause: str


def stamp(at: float) -> str:
    """``at`` as the agents write it: ISO 8601 UTC with milliseconds."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class _Writer:
    def __init__(self, f: IO[str]) -> None:
        self.f = f
        self.line = 0

    def put(self, obj: dict[str, Any]) -> int:
        self.f.write(json.dumps(obj, separators=(",", ":")) + "\n")
        self.line += 1
        return self.line


class _ClaudeSession:
    """One Claude Code session file being written."""

    def __init__(self, w: _Writer, session_id: str, cwd: str, rng: random.Random, pad: int, at: float) -> None:
        self.w, self.sid, self.cwd, self.rng, self.pad, self.at = w, session_id, cwd, rng, pad, at
        self.system = rng.randint(11_000, 15_000)  # system prompt + tools
        self.history = 0
        self.parent: str | None = None
        self.n = 0

    def _uuid(self) -> str:
        self.n += 1
        return f"{self.sid[:8]}-{self.n:04d}-4000-8000-{self.rng.getrandbits(48):012x}"

    def _base(self, kind: str, sidechain: bool, parent: str | None) -> dict[str, Any]:
        uid = self._uuid()
        return {
            "parentUuid": parent,
            "isSidechain": sidechain,
            "userType": "external",
            "cwd": self.cwd,
            "sessionId": self.sid,
            "version": "2.0.31",
            "gitBranch": "main",
            "type": kind,
            "uuid": uid,
            "timestamp": stamp(self.at),
        }

    def user(self, text: str, *, sidechain: bool = False, root: bool = False, **extra: Any) -> int:
        obj = self._base("user", sidechain, None if root else self.parent)
        obj["message"] = {"role": "user", "content": text}
        obj.update(extra)
        self.parent = obj["uuid"]
        return self.w.put(obj)

    def tool_result(self, tool_id: str, sidechain: bool = False) -> None:
        obj = self._base("user", sidechain, self.parent)
        body = "x" * self.pad if self.pad else "ok"
        obj["message"] = {
            "role": "user",
            "content": [{"tool_use_id": tool_id, "type": "tool_result", "content": body}],
        }
        obj["toolUseResult"] = {"stdout": body[:200], "stderr": "", "interrupted": False}
        self.parent = obj["uuid"]
        self.w.put(obj)

    def answer(
        self, model: str, read: int, write: int, *, ttl: str = "5m", blocks: int = 1, sidechain: bool = False
    ) -> int:
        """One API answer: ``blocks`` lines repeating its ids and usage; the first line's number."""
        rng = self.rng
        msg_id = f"msg_01{rng.getrandbits(64):016x}"
        req_id = f"req_011C{rng.getrandbits(64):016x}"
        usage = {
            "input_tokens": rng.randint(3, 12),
            "cache_creation_input_tokens": write,
            "cache_read_input_tokens": read,
            "cache_creation": {
                "ephemeral_5m_input_tokens": write if ttl == "5m" else 0,
                "ephemeral_1h_input_tokens": write if ttl == "1h" else 0,
            },
            "output_tokens": rng.randint(40, 900),
            "service_tier": "standard",
        }
        first = 0
        for b in range(blocks):
            obj = self._base("assistant", sidechain, self.parent)
            block: dict[str, Any] = (
                {"type": "text", "text": "Looking at the file now."}
                if b < blocks - 1
                else {"type": "tool_use", "id": f"toolu_{rng.getrandbits(48):012x}", "name": "Read", "input": {}}
            )
            obj["message"] = {
                "id": msg_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [block],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": usage,
            }
            obj["requestId"] = req_id
            line = self.w.put(obj)
            first = first or line
            self.parent = obj["uuid"]
        return first

    def turn(self, model: str, read: int | None = None, *, ttl: str = "5m", blocks: int = 2) -> int:
        """A user turn, the answer (reading ``read`` tokens, the previous prefix by default) and
        its tool result; the answer's line."""
        self.at += self.rng.uniform(4, 40)
        self.user("Please continue with the next step.")
        grow = self.rng.randint(300, 3_000)
        prompt = self.system + self.history + grow
        cached = self.system + self.history if read is None else read
        self.at += self.rng.uniform(1, 6)
        line = self.answer(model, cached, prompt - cached, ttl=ttl, blocks=blocks)
        self.history += grow
        self.tool_result(f"toolu_{self.n:06d}")
        return line


def _claude_session(path: Path, root: Path, session_id: str, rng: random.Random, pad: int, at: float) -> list[Planted]:
    project = path.parent.name
    key = f"{project}/{session_id}"
    planted: list[Planted] = []

    def plant(line: int, cause: str) -> None:
        planted.append(Planted(CLAUDE_CODE, key, str(path), line, cause))

    with path.open("w", encoding="utf-8") as f:
        w = _Writer(f)
        w.put({"type": "summary", "summary": "Refactor the parser", "leafUuid": f"{session_id[:8]}-leaf"})
        s = _ClaudeSession(w, session_id, "/home/dev/" + project, rng, pad, at)
        s.user("Refactor the parser module.", root=True)
        s.at += 3
        plant(s.answer(SONNET, 0, s.system + 800), "first")
        s.history = 800
        plant(s.turn(SONNET), "hit")
        plant(s.turn(SONNET, blocks=3), "hit")
        s.at += 7 * 60  # idle past the 5-minute TTL
        plant(s.turn(SONNET, read=0), "ttl_expired")
        plant(s.turn(SONNET), "hit")
        # a sub-agent: its own system prompt, its own cache
        s.at += 5
        s.user("Search the codebase for parser call sites.", sidechain=True, root=True)
        sub = rng.randint(5_000, 7_000)
        for i in range(3):
            s.at += rng.uniform(2, 8)
            line = s.answer(HAIKU, 0 if i == 0 else sub + 400 * (i - 1), sub if i == 0 else 400, sidechain=True)
            plant(line, "first" if i == 0 else "hit")
            sub += 400
        plant(s.turn(SONNET), "hit")
        # a compaction: boundary, then the summary that replaces the history
        s.at += 20
        boundary = s._base("system", False, s.parent)
        boundary.update(
            {
                "subtype": "compact_boundary",
                "content": "Conversation compacted",
                "level": "info",
                "compactMetadata": {"trigger": "auto", "preTokens": s.system + s.history},
            }
        )
        w.put(boundary)
        s.parent = boundary["uuid"]
        s.user("This session is being continued from a previous conversation.", isCompactSummary=True)
        s.history = 2_500
        plant(s.turn(SONNET, read=s.system), "compaction")
        plant(s.turn(SONNET), "hit")
        plant(s.turn(OPUS, read=0), "model_changed")
        plant(s.turn(OPUS), "hit")
        plant(s.turn(OPUS, read=s.system // 2), "prefix_changed")
        plant(s.turn(OPUS, ttl="1h"), "hit")
        s.at += 30 * 60  # within the 1-hour TTL
        plant(s.turn(OPUS, ttl="1h"), "hit")
        s.at += 75 * 60  # past it
        plant(s.turn(OPUS, read=0, ttl="1h"), "ttl_expired")
        plant(s.turn(OPUS, ttl="1h"), "hit")
        w.put({"type": "file-history-snapshot", "messageId": s._uuid(), "snapshot": {}, "isSnapshotUpdate": False})
    return planted


def _uuid(rng: random.Random, version: int) -> str:
    """A UUID-shaped id drawn from ``rng`` (reproducible, unlike :func:`uuid.uuid4`)."""
    a, b, c, d, e = (rng.getrandbits(n) for n in (32, 16, 12, 12, 48))
    return f"{a:08x}-{b:04x}-{version}{c:03x}-8{d:03x}-{e:012x}"


def claude_code_logs(root: Path, *, sessions: int = 2, projects: int = 1, seed: int = 0, pad: int = 0) -> list[Planted]:
    """``sessions`` session files per project, in ``root/<project>/<uuid>.jsonl`` (``root`` is
    a ``projects`` folder: give ``<config>/projects`` to read it as ``CLAUDE_CONFIG_DIR``); each
    session starts 3 hours after the one before. The planted causes, in file order."""
    rng = random.Random(seed)
    planted: list[Planted] = []
    at = EPOCH
    for p in range(projects):
        folder = root / f"-home-dev-project-{p}"
        folder.mkdir(parents=True, exist_ok=True)
        for _ in range(sessions):
            sid = _uuid(rng, 4)
            planted += _claude_session(folder / f"{sid}.jsonl", root, sid, rng, pad, at)
            at += 3 * 3600
    return planted


def _codex_session(path: Path, key: str, rng: random.Random, pad: int, at: float) -> list[Planted]:
    planted: list[Planted] = []
    with path.open("w", encoding="utf-8") as f:
        w = _Writer(f)

        def put(kind: str, payload: dict[str, Any]) -> int:
            return w.put({"timestamp": stamp(at), "type": kind, "payload": payload})

        sid = path.stem.rsplit("-", 5)[-5:]
        put(
            "session_meta",
            {
                "id": "-".join(sid),
                "timestamp": stamp(at),
                "cwd": "/home/dev/app",
                "originator": "codex_cli_rs",
                "cli_version": "0.58.0",
                "instructions": None,
            },
        )
        context = {
            "cwd": "/home/dev/app",
            "approval_policy": "on-request",
            "model": GPT,
            "effort": "medium",
            "summary": "auto",
            "sandbox_policy": {"mode": "workspace-write"},
        }
        put("turn_context", dict(context))
        system = rng.randint(6_000, 9_000)
        prompt = system
        total = {
            "input_tokens": 0,
            "cached_input_tokens": 0,
            "output_tokens": 0,
            "reasoning_output_tokens": 0,
            "total_tokens": 0,
        }

        def call(cause: str, cached: int | None = None, *, last: bool = True) -> None:
            nonlocal at, prompt
            at += rng.uniform(3, 30)
            put(
                "response_item",
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "next step"}]},
            )
            put(
                "response_item",
                {
                    "type": "function_call_output",
                    "call_id": f"call_{rng.getrandbits(40):010x}",
                    "output": "y" * pad if pad else "ok",
                },
            )
            before = prompt
            prompt += rng.randint(400, 2_500)
            read = (before // 128) * 128 if cached is None else cached
            out = rng.randint(50, 800)
            reasoning = rng.randint(0, out)
            this = {
                "input_tokens": prompt,
                "cached_input_tokens": read,
                "output_tokens": out,
                "reasoning_output_tokens": reasoning,
                "total_tokens": prompt + out,
            }
            for k in total:
                total[k] += this[k]
            at += rng.uniform(1, 5)
            info: dict[str, Any] = {"total_token_usage": dict(total), "model_context_window": 272_000}
            if last:
                info["last_token_usage"] = this
            line = put("event_msg", {"type": "token_count", "info": info, "rate_limits": None})
            planted.append(Planted(CODEX, key, str(path), line, cause))

        call("first", 0)
        call("hit")
        call("hit", last=False)  # counted from the growth of total_token_usage
        put("event_msg", {"type": "token_count", "info": None, "rate_limits": {"primary": None}})
        at += 8 * 60
        call("ttl_expired", 0)
        call("hit")
        context["cwd"] = "/home/dev/app/sub"
        put("turn_context", dict(context))
        call("prefix_changed", system // 2)
        call("hit")
        put("compacted", {"message": "Summary of the conversation so far."})
        prompt = system + 1_500
        call("compaction", (system // 128) * 128 - 512)
        call("hit")
        context["model"] = GPT_NEXT
        put("turn_context", dict(context))
        call("model_changed", 0)
        call("hit")
        call("prefix_changed", 1_024)
        put("event_msg", {"type": "agent_message", "message": "Done."})
    return planted


def codex_logs(root: Path, *, sessions: int = 2, seed: int = 0, pad: int = 0) -> list[Planted]:
    """``sessions`` rollout files in ``root/YYYY/MM/DD/rollout-<time>-<uuid>.jsonl`` (``root``
    is a ``sessions`` folder: give ``CODEX_HOME/sessions``), one day apart."""
    rng = random.Random(seed + 1)
    planted: list[Planted] = []
    at = EPOCH
    for _ in range(sessions):
        day = datetime.fromtimestamp(at, UTC)
        folder = root / day.strftime("%Y/%m/%d")
        folder.mkdir(parents=True, exist_ok=True)
        uuid = _uuid(rng, 7)
        name = f"rollout-{day.strftime('%Y-%m-%dT%H-%M-%S')}-{uuid}.jsonl"
        path = folder / name
        key = path.relative_to(root).with_suffix("").as_posix()
        planted += _codex_session(path, key, rng, pad, at)
        at += 86_400
    return planted


__all__ = ["EPOCH", "Planted", "claude_code_logs", "codex_logs", "stamp"]
