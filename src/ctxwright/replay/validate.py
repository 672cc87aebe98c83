"""What the real providers refuse, refused the same way by the replay: HTTP 400, the
provider's error body (``answers.error_body``), a message in the provider's words.

Why: a replay that accepts what the provider rejects lets a broken agent pass its gate. The
regression that matters most here is a history edited so that a tool call loses its answer
(a sliding window that cuts between a call and its result, a compaction that drops a result):
every provider refuses that request, so the replay must too. The rules, from each API's
documented errors:

* chat completions: ``messages`` is required and not empty; every assistant ``tool_calls``
  entry must be answered by a ``tool`` message with its ``tool_call_id`` before the next
  assistant or user message ("An assistant message with 'tool_calls' must be followed by tool
  messages responding to each 'tool_call_id'."), and a ``tool`` message must answer a call of
  the assistant message before it;
* Anthropic Messages: ``model``, ``max_tokens`` and ``messages`` are required; every
  ``tool_use`` block is answered by a ``tool_result`` in the very next message (a user
  message), and a ``tool_result`` must answer a ``tool_use`` of the message before it;
* the Responses API: ``input`` is required; every ``function_call`` item in the input has its
  ``function_call_output`` ("No tool output found for function call <call_id>.").
"""

from __future__ import annotations

from typing import Any

from ctxwright.replay.turns import ANTHROPIC, CHAT


def refusal(api: str, body: dict[str, Any]) -> str | None:
    """Why the provider of ``api`` would refuse ``body`` with a 400, or ``None``."""
    if api == CHAT:
        return _chat(body)
    if api == ANTHROPIC:
        return _anthropic(body)
    return _responses(body)


def _chat(body: dict[str, Any]) -> str | None:
    messages = body.get("messages")
    if "model" not in body:
        return "Missing required parameter: 'model'."
    if not isinstance(messages, list):
        return "Missing required parameter: 'messages'."
    if not messages:
        return "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array."
    pending: list[str] = []  # ids of the last assistant message's calls not answered yet
    open_calls: set[str] = set()
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            return f"Invalid type for 'messages[{i}]': expected an object."
        role = m.get("role")
        if role == "tool":
            tid = m.get("tool_call_id")
            if tid not in open_calls:
                return (
                    f"Invalid parameter: messages with role 'tool' must be a response to a preceeding message with "
                    f"'tool_calls' (messages[{i}], tool_call_id {tid!r})."
                )
            if tid in pending:
                pending.remove(tid)
            continue
        if pending:
            return (
                "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(pending)}"
            )
        open_calls = set()
        if role == "assistant":
            calls = m.get("tool_calls") or []
            ids = [str(c.get("id")) for c in calls if isinstance(c, dict)]
            pending, open_calls = list(ids), set(ids)
    if pending:
        return (
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
            f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(pending)}"
        )
    return None


def _blocks(message: Any) -> list[dict[str, Any]]:
    content = message.get("content") if isinstance(message, dict) else None
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _anthropic(body: dict[str, Any]) -> str | None:
    for name in ("model", "max_tokens", "messages"):
        if name not in body:
            return f"{name}: Field required"
    messages = body["messages"]
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            return f"messages.{i}: Input should be an object"
        if m.get("role") == "user":
            results = [b.get("tool_use_id") for b in _blocks(m) if b.get("type") == "tool_result"]
            uses = {b.get("id") for b in _blocks(messages[i - 1]) if b.get("type") == "tool_use"} if i else set()
            stray = [str(r) for r in results if r not in uses]
            if stray:
                return (
                    f"messages.{i}.content: unexpected `tool_use_id` found in `tool_result` blocks: {', '.join(stray)}. "
                    "Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                )
        if m.get("role") == "assistant":
            ids = [str(b.get("id")) for b in _blocks(m) if b.get("type") == "tool_use"]
            if not ids:
                continue
            nxt = messages[i + 1] if i + 1 < len(messages) else None
            answered = {str(b.get("tool_use_id")) for b in _blocks(nxt) if b.get("type") == "tool_result"}
            missing = [t for t in ids if t not in answered]
            if missing:
                return (
                    f"messages.{i + 1}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                    f"{', '.join(missing)}. Each `tool_use` block must have a corresponding `tool_result` block in "
                    "the next message."
                )
    return None


def _responses(body: dict[str, Any]) -> str | None:
    if "model" not in body:
        return "Missing required parameter: 'model'."
    items = body.get("input")
    if isinstance(items, str):
        return None
    if not isinstance(items, list):
        return "Missing required parameter: 'input'."
    answered = {
        str(it.get("call_id")) for it in items if isinstance(it, dict) and it.get("type") == "function_call_output"
    }
    for it in items:
        if isinstance(it, dict) and it.get("type") == "function_call" and str(it.get("call_id")) not in answered:
            return f"No tool output found for function call {it.get('call_id')}."
    return None


__all__ = ["refusal"]
