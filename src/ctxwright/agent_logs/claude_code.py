"""Claude Code's session logs: ``~/.claude/projects/<project-dir>/<session-uuid>.jsonl``.

The format (public: Claude Code writes it as its transcript and hands its path to a
``statusLine`` command as ``transcript_path``, docs.claude.com/en/docs/claude-code/statusline;
the fields below are the ones ccusage reads, github.com/ryoppippi/ccusage ``src/data-loader.ts``,
``usageDataSchema``): one JSON object per line, of ``type`` ``user``, ``assistant``, ``system``
or ``summary``, each with ``sessionId``, ``timestamp`` (ISO 8601, UTC), ``uuid``/``parentUuid``
and ``isSidechain`` (true for a sub-agent's turns). An assistant line carries the API's answer:
``message.model``, ``message.id``, the request's ``requestId`` and ``message.usage`` --
``input_tokens``, ``cache_creation_input_tokens`` (split by TTL in ``cache_creation``:
``ephemeral_5m_input_tokens``, ``ephemeral_1h_input_tokens``), ``cache_read_input_tokens``,
``output_tokens``, the Anthropic Messages usage as the API returned it.

Rules this reader protects:

* **One answer, several lines.** A streamed answer with several content blocks is written as
  one line per block, each repeating the message's id, request id and usage. Counted once per
  ``message.id`` + ``requestId`` across every file read (a resumed session copies earlier lines
  into its new file), the first line seen winning -- as ccusage counts, so the totals agree.
* **What counts as a call** is what ccusage counts: any line with ``message.usage`` whose
  ``input_tokens`` and ``output_tokens`` are numbers and whose ``timestamp`` is ``...Z`` ISO
  time, and whose optional fields have their documented types. A line with usage that fails
  those checks is said, not silently dropped.
* **Compactions**: a ``system`` line of subtype ``compact_boundary`` (with ``compactMetadata``:
  ``trigger``, ``preTokens``) and the user line that follows it with ``isCompactSummary`` are
  one compaction; a compact summary with no boundary before it (older versions) is one too.
  A ``summary`` line is the session's title for ``--resume``, not a compaction.
* **Side chains**: a sub-agent's turns (``isSidechain: true``) have a system prompt and a cache
  of their own; a side-chain user line with no parent starts a new sub-agent (its first call
  writes its own cache). ``agentId`` names the chain when the line has one.

What the log cannot tell: the system prompt and the tool list are not in it, so a prefix that
changed is placed by the tokens the provider stopped reading at, never at a byte.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ctxwright.agent_logs.lines import json_objects
from ctxwright.agent_logs.records import CLAUDE_CODE, LoggedCall, LogItem, LogProblem, Marker, Skipped
from ctxwright.agent_logs.timestamps import ISO_Z, epoch
from ctxwright.audit.logs import MAX_RECORD_BYTES, open_log
from ctxwright.core.usage import as_object, first_int, read_cache_usage

#: entry types Claude Code writes that carry no call (read for markers, or not at all)
TYPES = frozenset({"user", "assistant", "system", "summary", "file-history-snapshot"})
_SPEEDS = frozenset({"standard", "fast"})
_VERSION_START = "0123456789"


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _nonempty(v: Any) -> bool:
    return isinstance(v, str) and v != ""


def usage_entry_problem(obj: dict[str, Any]) -> str | None:
    """Why a line that has ``message.usage`` is not a usage entry (``None``: it is one).

    The checks are ccusage's schema for an entry (types only: an optional field may be absent,
    never null or of another type), so a line is counted here exactly when ccusage counts it.
    """
    message = obj["message"]
    usage = message["usage"]
    if not _number(usage.get("input_tokens")) or not _number(usage.get("output_tokens")):
        return "message.usage has no numeric input_tokens and output_tokens"
    for key in ("cache_creation_input_tokens", "cache_read_input_tokens"):
        if key in usage and not _number(usage[key]):
            return f"message.usage.{key} is not a number"
    if "speed" in usage and usage["speed"] not in _SPEEDS:
        return "message.usage.speed is neither standard nor fast"
    stamp = obj.get("timestamp")
    if not isinstance(stamp, str) or not ISO_Z.fullmatch(stamp):
        return "timestamp is not an ISO 8601 UTC time (YYYY-MM-DDTHH:MM:SS[.mmm]Z)"
    for key in ("model", "id"):
        if key in message and not _nonempty(message[key]):
            return f"message.{key} is not a non-empty string"
    if "content" in message:
        content = message["content"]
        if not isinstance(content, list) or not all(
            isinstance(b, dict) and ("text" not in b or isinstance(b["text"], str)) for b in content
        ):
            return "message.content is not a list of content blocks"
    for key in ("sessionId", "requestId"):
        if key in obj and not _nonempty(obj[key]):
            return f"{key} is not a non-empty string"
    if "cwd" in obj and not isinstance(obj["cwd"], str):
        return "cwd is not a string"
    version = obj.get("version")
    if "version" in obj and not (isinstance(version, str) and _version(version)):
        return "version is not a version number"
    if "costUSD" in obj and not _number(obj["costUSD"]):
        return "costUSD is not a number"
    if "isApiErrorMessage" in obj and not isinstance(obj["isApiErrorMessage"], bool):
        return "isApiErrorMessage is not true or false"
    return None


def _version(v: str) -> bool:
    parts = v.split(".", 2)
    if len(parts) < 3:
        return False
    last = parts[2]
    return bool(parts[0].isdigit() and parts[1].isdigit() and last[:1] and last[0] in _VERSION_START)


def _tokens(usage: dict[str, Any]) -> dict[str, int]:
    """The four counts as logged (what ccusage sums), the cache-write split beside them."""
    split = as_object(usage.get("cache_creation"))
    return {
        "input_tokens": first_int(usage.get("input_tokens")) or 0,
        "cache_creation_input_tokens": first_int(usage.get("cache_creation_input_tokens")) or 0,
        "cache_read_input_tokens": first_int(usage.get("cache_read_input_tokens")) or 0,
        "output_tokens": first_int(usage.get("output_tokens")) or 0,
        "ephemeral_5m_input_tokens": first_int(split.get("ephemeral_5m_input_tokens")) or 0,
        "ephemeral_1h_input_tokens": first_int(split.get("ephemeral_1h_input_tokens")) or 0,
    }


def project_of(path: Path, root: Path | None) -> str:
    """The project a file belongs to: its first folder under ``root`` (the ``projects`` folder,
    where Claude Code names a folder after the project's path), else the folder holding it."""
    if root is not None:
        try:
            parts = path.relative_to(root).parts
        except ValueError:
            parts = ()
        if len(parts) >= 2:
            return parts[0]
    return path.parent.name or "."


def read_claude_code(
    path: Path,
    *,
    root: Path | None,
    seen: set[int],
    skipped: Skipped,
    cap: int = MAX_RECORD_BYTES,
) -> Iterator[LogItem]:
    """Every call, marker and problem in one Claude Code log, in file order. ``seen`` holds the
    answers already counted (shared by every file of one audit); ``skipped`` counts entry types
    that were passed over. Raises ``OSError`` (and ``LogUnreadable``) only when the file cannot
    be opened."""
    name = str(path)
    project = project_of(path, root)
    fallback_session = path.stem
    side: dict[str, int] = {}  # session -> side chains begun
    boundary: set[str] = set()  # sessions whose compact boundary awaits its summary line
    with open_log(path) as f:
        for line in json_objects(f, name, cap=cap):
            if isinstance(line, LogProblem):
                yield line
                continue
            number, obj = line
            sid = obj.get("sessionId")
            session_id = sid if isinstance(sid, str) and sid else fallback_session
            session = f"{project}/{session_id}"
            sidechain = obj.get("isSidechain") is True
            kind = obj.get("type")
            message = obj.get("message")
            if isinstance(message, dict) and isinstance(message.get("usage"), dict):
                why = usage_entry_problem(obj)
                if why is not None:
                    yield LogProblem(name, number, f"usage not counted: {why}")
                    continue
                key = _answer_key(message, obj)
                if key is not None:
                    if key in seen:
                        continue
                    seen.add(key)
                usage = read_cache_usage("anthropic", message["usage"])
                stamp = obj["timestamp"]
                model = message.get("model")
                yield LoggedCall(
                    agent=CLAUDE_CODE,
                    session=session,
                    session_id=session_id,
                    project=project,
                    file=name,
                    line=number,
                    stamp=stamp,
                    at=epoch(stamp),
                    model=model if isinstance(model, str) else "",
                    usage=usage,
                    tokens=_tokens(message["usage"]),
                    chain=_chain(obj, sidechain, side.get(session, 0)),
                    sidechain=sidechain,
                )
                continue
            if kind not in TYPES:
                skipped.add(f"type {kind!r}" if isinstance(kind, str) else "no type", name, number)
                continue
            at = epoch(obj.get("timestamp"))
            if kind == "system" and obj.get("subtype") == "compact_boundary":
                boundary.add(session)
                meta = as_object(obj.get("compactMetadata"))
                detail = ", ".join(f"{k} {meta[k]}" for k in ("trigger", "preTokens") if k in meta)
                yield Marker("compaction", session, "main", name, number, detail, at)
            elif kind == "user" and obj.get("isCompactSummary") is True:
                if session in boundary:
                    boundary.discard(session)
                else:
                    yield Marker("compaction", session, "main", name, number, "compact summary", at)
            elif kind == "user" and sidechain and obj.get("parentUuid") is None and "agentId" not in obj:
                side[session] = side.get(session, 0) + 1
                chain = _chain(obj, True, side[session])
                yield Marker("chain_start", session, chain, name, number, "a sub-agent began", at)


def _answer_key(message: dict[str, Any], obj: dict[str, Any]) -> int | None:
    mid, rid = message.get("id"), obj.get("requestId")
    if not isinstance(mid, str) or not isinstance(rid, str):
        return None
    return hash(f"{mid}:{rid}")


def _chain(obj: dict[str, Any], sidechain: bool, index: int) -> str:
    if not sidechain:
        return "main"
    agent = obj.get("agentId")
    if isinstance(agent, str) and agent:
        return f"agent-{agent}"
    return f"side-{index}"
