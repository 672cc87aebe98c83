"""``compaction_lost_item``: a compaction took out of the request an item the user declared must survive.

Provider behaviour protected: the model reads nothing but the request -- no memory of the
previous call. When an agent compacts (a summary in place of old turns, a trim of the oldest,
a cleared tool result), whatever the new request no longer holds is gone for the model: the
rule the user gave once, the file it was editing, the error still to fix. Nothing in the
provider's answer says so; the agent just starts to break the rule.

Public agent bug: compaction that drops what mattered -- instructions, the plan, file paths,
constraints given once -- and that nobody can see or stop (anthropics/claude-code#89831 and
#24460; sst/opencode#8932, whose PR #9097 pins messages).

Checked on a pair of requests, only when a contract is declared (``ctxwright gate --keep``,
the same declarations as ``CompactionConfig(keep=...)``): when the current request no longer
holds messages of the previous one (a compaction or a window shrank it), the declared items
of those messages (``compaction/survival.py``: the task, files, errors not fixed since,
constraints, custom patterns; not TODO items, which live in a session, not in a request)
must each still stand verbatim somewhere in the current request -- its system prompt or any
message, a summary included. A tool result counts as failed when the Anthropic block says
``is_error`` or its text (inside ctxwright's ``<external_content>`` wrapper, when it has one)
starts with error, exception, traceback, fatal or failed.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ctxwright.audit.compare import AuditRequest
from ctxwright.audit.rules.base import Finding, Settings
from ctxwright.audit.rules.reminder_moved import texts
from ctxwright.core.messages import canonical_json
from ctxwright.defence.marking import unwrap

name = "compaction_lost_item"
fix = "carry the item across the compaction: keep its message, pin it, or quote it verbatim in the summary"

#: lost items named in the line (all are in ``details``)
NAMED = 2
#: characters of an item shown in the line
SHOWN = 60
#: a tool result's text that reports a failure
_FAILED = re.compile(r"\s*(?:error|exception|traceback|fatal|failed)\b", re.IGNORECASE)


def check(previous: AuditRequest | None, current: AuditRequest, settings: Settings) -> Finding | None:
    contract = settings.keep
    if contract is None or previous is None:
        return None
    hidden = _hidden(previous.messages, current.messages)
    if not hidden:
        return None
    turns = turns_of(previous.messages)
    seen = [current.system, *(t[1] for t in turns_of(current.messages))]
    lost = contract.lost_items(turns, hidden, seen)
    if not lost:
        return None
    named = "; ".join(f"{kind} {_short(text)!r} (msg#{at + 1})" for kind, text, at in lost[:NAMED])
    more = f" and {len(lost) - NAMED} more" if len(lost) > NAMED else ""
    return Finding(
        name,
        f"{len(lost)} declared item(s) dropped from the request and in no part of it: {named}{more}",
        fix,
        details={
            "hidden_messages": len(hidden),
            "lost": [{"kind": kind, "text": text, "message": at + 1} for kind, text, at in lost],
        },
    )


def _hidden(before: Sequence[Any], after: Sequence[Any]) -> set[int]:
    """Indices of ``before``'s messages that ``after`` no longer holds as they were (each
    message of ``after`` accounts for one equal message of ``before``)."""
    if len(after) >= len(before) and all(a is b or a == b for a, b in zip(before, after, strict=False)):
        return set()  # appended to: nothing taken out
    left = Counter(canonical_json(m) for m in after)
    out: set[int] = set()
    for i, m in enumerate(before):
        key = canonical_json(m)
        if left[key] > 0:
            left[key] -= 1
        else:
            out.add(i)
    return out


def turns_of(messages: Sequence[Any]) -> list[tuple[str, str, str | None, bool]]:
    """Each message of a request (Chat Completions, Anthropic or Responses shape) as (role,
    text with its tool calls' names and arguments, the tool a result came from, failed)."""
    names: dict[str, str] = {}
    for m in messages:
        for cid, tool, _args in _calls(m):
            names[cid] = tool
    out: list[tuple[str, str, str | None, bool]] = []
    for m in messages:
        if not isinstance(m, Mapping):
            out.append(("", "", None, False))
            continue
        kind = m.get("type")
        if kind == "function_call_output":
            output = m.get("output")
            text = output if isinstance(output, str) else "\n".join(texts({"content": output}))
            out.append(("tool", text, names.get(str(m.get("call_id"))), _failed(text)))
            continue
        body = "\n".join(texts(m))
        content = m.get("content")
        blocks = content if isinstance(content, list) else []
        results = [b for b in blocks if isinstance(b, Mapping) and b.get("type") == "tool_result"]
        if m.get("role") == "tool" or results:
            ref = m.get("tool_call_id") or (results[0].get("tool_use_id") if results else None)
            failed = any(b.get("is_error") is True for b in results) or _failed(body)
            out.append(("tool", body, names.get(str(ref)), failed))
            continue
        calls = "\n".join(f"{tool} {args}" for _cid, tool, args in _calls(m))
        role = "assistant" if kind == "function_call" else str(m.get("role") or "")
        out.append((role, f"{body}\n{calls}" if body and calls else body or calls, None, False))
    return out


def _failed(text: str) -> bool:
    """Whether a result's text reports a failure: its start, inside the ``<external_content>``
    wrapper ctxwright puts around an untrusted result (``defence/marking.py``)."""
    inner = unwrap(text)
    return bool(_FAILED.match(inner[2] if inner is not None else text))


def _calls(m: Any) -> list[tuple[str, str, str]]:
    """(id, tool name, arguments) of the tool calls a message makes, in any of the three shapes."""
    if not isinstance(m, Mapping):
        return []
    out: list[tuple[str, str, str]] = []
    if m.get("type") == "function_call":
        out.append((str(m.get("call_id")), str(m.get("name") or ""), str(m.get("arguments") or "")))
    for c in m.get("tool_calls") or ():
        fn = c.get("function") if isinstance(c, Mapping) else None
        if isinstance(fn, Mapping):
            out.append((str(c.get("id")), str(fn.get("name") or ""), str(fn.get("arguments") or "")))
    content = m.get("content")
    for b in content if isinstance(content, list) else ():
        if isinstance(b, Mapping) and b.get("type") == "tool_use":
            args = json.dumps(b.get("input"), ensure_ascii=False, sort_keys=True)
            out.append((str(b.get("id")), str(b.get("name") or ""), args))
    return out


def _short(text: str) -> str:
    one = " ".join(text.split())
    return one if len(one) <= SHOWN else one[: SHOWN - 1] + "…"
