"""Codex's session logs: ``~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<uuid>.jsonl``.

The format (public: the rollout file Codex writes to resume a session, github.com/openai/codex
``codex-rs/protocol/src/protocol.rs``, ``RolloutLine`` / ``RolloutItem``, and
``codex-rs/core/src/rollout/recorder.rs``): one JSON object per line, ``{"timestamp", "type",
"payload"}``, of type

* ``session_meta`` -- the session's ``id``, ``cwd``, ``cli_version``, instructions;
* ``turn_context`` -- each turn's ``model``, ``cwd``, ``approval_policy``, ``sandbox_policy``,
  ``effort``... (Codex renders the environment into the conversation, so a changed field changes
  the prompt);
* ``response_item`` -- the conversation's items (messages, function calls and outputs, reasoning);
* ``compacted`` -- a compaction: the history replaced by its summary;
* ``event_msg`` -- events; those of ``payload.type == "token_count"`` carry the usage:
  ``info.last_token_usage`` (this call) and ``info.total_token_usage`` (the session so far), each
  ``input_tokens`` (the whole prompt, cached tokens included: OpenAI's convention),
  ``cached_input_tokens``, ``output_tokens`` (reasoning included), ``reasoning_output_tokens``,
  ``total_tokens``.

A call is one ``token_count`` event, counted as ``@ccusage/codex`` counts it (its
``loadTokenUsageEvents``, github.com/ryoppippi/ccusage ``apps/codex``) so the totals agree:
``last_token_usage`` when given, else the growth of ``total_token_usage`` since the previous
event; an event that adds nothing is no call; cached tokens are capped at the input; the model
is the event's own (``info.model``...) or the latest turn context's, ``gpt-5`` when neither says.

What the log cannot tell: the bytes sent. A prefix that changed is named by the turn context
fields that changed before the call when there are any, else placed by the tokens the provider
stopped reading at.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ctxwright.agent_logs.lines import json_objects
from ctxwright.agent_logs.records import CODEX, LoggedCall, LogItem, LogProblem, Marker, Skipped
from ctxwright.agent_logs.timestamps import epoch
from ctxwright.audit.logs import MAX_RECORD_BYTES, open_log
from ctxwright.core.usage import CacheUsage, as_object, first_int

TYPES = frozenset({"session_meta", "turn_context", "response_item", "event_msg", "compacted"})
#: the model a call is priced as when nothing in the log names one (what @ccusage/codex assumes)
FALLBACK_MODEL = "gpt-5"
#: turn context fields that Codex renders into the prompt (the model is judged on its own)
CONTEXT_FIELDS = ("cwd", "approval_policy", "sandbox_policy", "effort", "summary", "user_instructions")
_COUNTS = ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens", "total_tokens")


def _count(v: Any) -> int:
    n = first_int(v)
    return n if n is not None else 0


def _raw(value: Any) -> dict[str, int] | None:
    if not isinstance(value, dict):
        return None
    out = {k: _count(value.get(k)) for k in _COUNTS}
    if "cached_input_tokens" not in value:
        out["cached_input_tokens"] = _count(value.get("cache_read_input_tokens"))
    if out["total_tokens"] <= 0:
        out["total_tokens"] = out["input_tokens"] + out["output_tokens"]
    return out


def _minus(now: dict[str, int], before: dict[str, int] | None) -> dict[str, int]:
    return {k: max(now[k] - (before or {}).get(k, 0), 0) for k in _COUNTS}


def _model(payload: dict[str, Any], info: dict[str, Any]) -> str | None:
    candidates = (
        info.get("model"),
        info.get("model_name"),
        as_object(info.get("metadata")).get("model"),
        payload.get("model"),
        as_object(payload.get("metadata")).get("model"),
    )
    for v in candidates:
        if isinstance(v, str) and v.strip():
            return v.strip()
    return None


def session_key(path: Path, root: Path | None) -> str:
    """The session's key: the file's path under ``root`` without ``.jsonl`` (what
    ``@ccusage/codex`` calls the session), else its name."""
    if root is not None:
        try:
            return path.relative_to(root).with_suffix("").as_posix()
        except ValueError:
            pass
    return path.with_suffix("").name


def read_codex(
    path: Path,
    *,
    root: Path | None,
    skipped: Skipped,
    cap: int = MAX_RECORD_BYTES,
) -> Iterator[LogItem]:
    """Every call, marker and problem in one Codex rollout file, in file order."""
    name = str(path)
    session = session_key(path, root)
    session_id = path.stem
    project = "?"
    model: str | None = None
    context: dict[str, Any] | None = None
    previous_total: dict[str, int] | None = None
    with open_log(path) as f:
        for line in json_objects(f, name, cap=cap):
            if isinstance(line, LogProblem):
                yield line
                continue
            number, obj = line
            if not isinstance(obj.get("type"), str):
                yield LogProblem(name, number, "not a rollout line ({timestamp, type, payload}): skipped")
                continue
            kind, payload, stamp = obj["type"], obj.get("payload"), obj.get("timestamp")
            p = as_object(payload)
            if kind not in TYPES:
                skipped.add(f"type {kind!r}", name, number)
            elif kind == "session_meta":
                sid, cwd = p.get("id"), p.get("cwd")
                session_id = sid if isinstance(sid, str) and sid else session_id
                project = cwd if isinstance(cwd, str) and cwd else project
            elif kind == "turn_context":
                found = _model(p, {})
                model = found or model
                now = {k: p.get(k) for k in CONTEXT_FIELDS if k in p}
                if context is not None and now != context:
                    changed = sorted(k for k in set(now) | set(context) if now.get(k) != context.get(k))
                    yield Marker("context", session, "main", name, number, ", ".join(changed), epoch(stamp))
                context = now
            elif kind == "compacted":
                yield Marker("compaction", session, "main", name, number, "compacted", epoch(stamp))
            elif kind == "event_msg" and p.get("type") == "token_count" and isinstance(payload, dict):
                info_value = p.get("info")
                if info_value is not None and not isinstance(info_value, dict):
                    continue
                info = as_object(info_value)
                if stamp is None:
                    continue
                last, total = _raw(info.get("last_token_usage")), _raw(info.get("total_token_usage"))
                delta = last if last is not None else (_minus(total, previous_total) if total is not None else None)
                if total is not None:
                    previous_total = total
                if delta is None:
                    continue
                if delta["total_tokens"] <= 0:
                    delta["total_tokens"] = delta["input_tokens"] + delta["output_tokens"]
                delta["cached_input_tokens"] = min(delta["cached_input_tokens"], delta["input_tokens"])
                if not any(delta[k] for k in _COUNTS[:4]):
                    continue
                own = _model(p, info)
                model = own or model or FALLBACK_MODEL
                cached = delta["cached_input_tokens"]
                yield LoggedCall(
                    agent=CODEX,
                    session=session,
                    session_id=session_id,
                    project=project,
                    file=name,
                    line=number,
                    stamp=stamp if isinstance(stamp, str) else str(stamp),
                    at=epoch(stamp),
                    model=model,
                    usage=CacheUsage(
                        uncached_input=delta["input_tokens"] - cached, cache_read=cached, output=delta["output_tokens"]
                    ),
                    tokens=delta,
                    provider="openai",
                )
