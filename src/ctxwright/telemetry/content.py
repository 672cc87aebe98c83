"""What was said, as the GenAI conventions' message attributes -- only with ``otlp_content``.

Why opt-in: a prompt, a tool's arguments and its result are the user's data (files, mail,
records); a trace backend is often shared more widely than the agent's own store. Without
``--otlp-content`` no function here is called and no span carries text.

The shape is the conventions' JSON (``gen_ai.input.messages`` / ``gen_ai.output.messages``): a
list of ``{"role", "parts": [...]}`` with ``text``, ``tool_call`` (``id``, ``name``,
``arguments``), ``tool_call_response`` (``id``, ``response``) and ``reasoning`` parts; an output
message adds its ``finish_reason``. Instructions sent apart from the chat history (Anthropic's
``system``, the Responses API's ``instructions``) are ``gen_ai.system_instructions``; a system
*message* stays in the history, as the conventions say.

Why bounded here, and not only by the SDK's attribute length limit: the SDK cuts a string at
its limit, which leaves JSON no viewer can parse. :func:`bounded_json` keeps the most recent
messages that fit and cuts the text of one that alone is too long, so the value stays valid JSON,
and says how many messages it left out (``ctxwright.content.omitted_messages``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ctxwright.core.messages import Message
from ctxwright.core.usage import as_object

__all__ = [
    "CONTENT_LIMIT",
    "body_messages",
    "body_output",
    "bounded_json",
    "bounded_text",
    "messages_of",
    "output_of",
    "tool_arguments",
]

#: Characters of one content attribute (the SDK's own attribute limit is the same,
#: ``exporter.py: MAX_ATTRIBUTE_CHARS``); longer values are bounded as the module docstring says.
CONTENT_LIMIT = 65_536
#: What a cut text ends with.
_CUT = "…[{n} characters cut]"

Part = dict[str, Any]
GenAIMessage = dict[str, Any]


def tool_arguments(arguments: str) -> Any:
    """A tool call's arguments as an object when they are JSON (the conventions' form), else the
    text as sent (a model may send arguments that do not parse)."""
    try:
        return json.loads(arguments)
    except (ValueError, RecursionError):
        return arguments


def _text(content: str | None) -> list[Part]:
    return [{"type": "text", "content": content}] if content else []


def messages_of(messages: Sequence[Message]) -> list[GenAIMessage]:
    """ctxwright's messages (a request as sent) in the conventions' shape."""
    out: list[GenAIMessage] = []
    for m in messages:
        parts: list[Part] = []
        if m.reasoning_content:
            parts.append({"type": "reasoning", "content": m.reasoning_content})
        if m.role == "tool":
            parts.append({"type": "tool_call_response", "id": m.tool_call_id, "response": m.content or ""})
        else:
            parts += _text(m.content)
        for c in m.tool_calls:
            parts.append({"type": "tool_call", "id": c.id, "name": c.name, "arguments": tool_arguments(c.arguments)})
        out.append({"role": m.role, "parts": parts})
    return out


def output_of(message: Message, finish_reason: str | None) -> list[GenAIMessage]:
    """The model's reply as the conventions' output messages (one, with its finish reason)."""
    msg = messages_of([message])[0]
    msg["finish_reason"] = finish_reason or ("tool_call" if message.tool_calls else "stop")
    return [msg]


# -- provider bodies (the proxy) ---------------------------------------------------------------------
def _blocks(content: Any) -> list[Part]:
    """Chat or Anthropic content -- a string or a list of blocks -- as parts."""
    if isinstance(content, str):
        return _text(content)
    parts: list[Part] = []
    for b in content if isinstance(content, list) else ():
        if not isinstance(b, dict):
            continue
        kind = b.get("type")
        if kind in ("text", "input_text", "output_text") and isinstance(b.get("text"), str):
            parts.append({"type": "text", "content": b["text"]})
        elif kind == "tool_use":
            parts.append({"type": "tool_call", "id": b.get("id"), "name": b.get("name"), "arguments": b.get("input")})
        elif kind == "tool_result":
            parts.append({"type": "tool_call_response", "id": b.get("tool_use_id"), "response": b.get("content")})
        elif kind == "thinking" and isinstance(b.get("thinking"), str):
            parts.append({"type": "reasoning", "content": b["thinking"]})
        elif isinstance(kind, str):
            parts.append({"type": kind})  # an image, a document...: named, not copied
    return parts


def _chat_message(m: Mapping[str, Any]) -> GenAIMessage:
    role = str(m.get("role") or "user")
    if role == "tool":
        return {
            "role": role,
            "parts": [{"type": "tool_call_response", "id": m.get("tool_call_id"), "response": m.get("content")}],
        }
    parts = _blocks(m.get("content"))
    for c in m.get("tool_calls") or ():
        fn = c.get("function") if isinstance(c, dict) else None
        if isinstance(fn, dict):
            args = fn.get("arguments")
            parts.append(
                {
                    "type": "tool_call",
                    "id": c.get("id"),
                    "name": fn.get("name"),
                    "arguments": tool_arguments(args) if isinstance(args, str) else args,
                }
            )
    return {"role": role, "parts": parts}


def _responses_items(items: Any) -> list[GenAIMessage]:
    if isinstance(items, str):
        return [{"role": "user", "parts": _text(items)}]
    out: list[GenAIMessage] = []
    for it in items if isinstance(items, list) else ():
        if not isinstance(it, dict):
            continue
        kind = it.get("type", "message")
        if kind == "message":
            out.append({"role": str(it.get("role") or "user"), "parts": _blocks(it.get("content"))})
        elif kind == "function_call":
            args = it.get("arguments")
            call = {"type": "tool_call", "id": it.get("call_id"), "name": it.get("name")}
            call["arguments"] = tool_arguments(args) if isinstance(args, str) else args
            out.append({"role": "assistant", "parts": [call]})
        elif kind == "function_call_output":
            response = {"type": "tool_call_response", "id": it.get("call_id"), "response": it.get("output")}
            out.append({"role": "tool", "parts": [response]})
        elif kind == "reasoning":
            summary = [s.get("text") for s in it.get("summary") or () if isinstance(s, dict)]
            out.append({"role": "assistant", "parts": [{"type": "reasoning", "content": "\n".join(map(str, summary))}]})
    return out


def body_messages(api: str | None, body: Mapping[str, Any]) -> tuple[list[GenAIMessage], list[Part]]:
    """A relayed request's history and its separate system instructions (Anthropic's
    ``system``, the Responses API's ``instructions``), in the conventions' shape."""
    if api == "openai_responses":
        instructions = body.get("instructions")
        return _responses_items(body.get("input")), _text(instructions) if isinstance(instructions, str) else []
    messages = [m for m in body.get("messages") or () if isinstance(m, dict)]
    if api == "anthropic_messages":
        out = [{"role": str(m.get("role") or "user"), "parts": _blocks(m.get("content"))} for m in messages]
        return out, _blocks(body.get("system"))
    return [_chat_message(m) for m in messages], []


def body_output(api: str | None, response: Any, finish: Sequence[str]) -> list[GenAIMessage]:
    """A relayed answer (a body, or a stream's events put back together) as output messages."""
    reason = finish[0] if finish else None
    if isinstance(response, list):  # a stream
        return _stream_output(api, response, reason)
    if not isinstance(response, dict):
        return []
    if api == "openai_chat":
        out = []
        for choice in response.get("choices") or ():
            if isinstance(choice, dict) and isinstance(choice.get("message"), dict):
                msg = _chat_message(choice["message"])
                msg["finish_reason"] = choice.get("finish_reason") or reason
                out.append(msg)
        return out
    if api == "anthropic_messages":
        return [{"role": "assistant", "parts": _blocks(response.get("content")), "finish_reason": reason}]
    if api == "openai_responses":
        parts = [p for m in _responses_items(response.get("output")) for p in m["parts"]]
        return [{"role": "assistant", "parts": parts, "finish_reason": reason}]
    return []


def _stream_output(api: str | None, events: list[Any], reason: str | None) -> list[GenAIMessage]:
    """A streamed answer's text and tool calls, from its events (the last complete Responses
    answer when the stream carries one)."""
    if api == "openai_responses":
        for ev in reversed(events):
            if isinstance(ev, dict) and isinstance(ev.get("response"), dict) and ev["response"].get("output"):
                return body_output(api, ev["response"], [reason] if reason else [])
        return []
    text: list[str] = []
    calls: dict[Any, dict[str, Any]] = {}
    for ev in events:
        if not isinstance(ev, dict):
            continue
        if api == "openai_chat":
            for choice in ev.get("choices") or ():
                delta = choice.get("delta") if isinstance(choice, dict) else None
                if not isinstance(delta, dict):
                    continue
                if isinstance(delta.get("content"), str):
                    text.append(delta["content"])
                for c in delta.get("tool_calls") or ():
                    if not isinstance(c, dict):
                        continue
                    slot = calls.setdefault(c.get("index", len(calls)), {"id": None, "name": None, "arguments": ""})
                    fn = as_object(c.get("function"))
                    slot["id"] = c.get("id") or slot["id"]
                    slot["name"] = fn.get("name") or slot["name"]
                    slot["arguments"] += fn.get("arguments") or ""
        elif api == "anthropic_messages":
            block = ev.get("content_block")
            if ev.get("type") == "content_block_start" and isinstance(block, dict) and block.get("type") == "tool_use":
                calls[ev.get("index")] = {"id": block.get("id"), "name": block.get("name"), "arguments": ""}
            delta = as_object(ev.get("delta"))
            if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
                text.append(delta["text"])
            elif delta.get("type") == "input_json_delta" and ev.get("index") in calls:
                calls[ev.get("index")]["arguments"] += str(delta.get("partial_json") or "")
    parts = _text("".join(text))
    for c in calls.values():
        parts.append(
            {"type": "tool_call", "id": c["id"], "name": c["name"], "arguments": tool_arguments(c["arguments"])}
        )
    return [{"role": "assistant", "parts": parts, "finish_reason": reason}]


# -- bounding ------------------------------------------------------------------------------------------
def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _cut_strings(value: Any, keep: int) -> Any:
    """``value`` with every string longer than ``keep`` characters cut, saying by how much."""
    if isinstance(value, str):
        return value if len(value) <= keep else value[:keep] + _CUT.format(n=len(value) - keep)
    if isinstance(value, list):
        return [_cut_strings(v, keep) for v in value]
    if isinstance(value, dict):
        return {k: _cut_strings(v, keep) for k, v in value.items()}
    return value


def _fit(value: Any, limit: int) -> str:
    """One value's JSON within ``limit`` characters: its long strings cut shorter and shorter."""
    text = _dumps(value)
    keep = limit
    while len(text) > limit and keep > 16:
        keep //= 2
        text = _dumps(_cut_strings(value, keep))
    return text if len(text) <= limit else _dumps({"omitted": "content too large to show"})


def bounded_json(items: Sequence[Any], limit: int = CONTENT_LIMIT) -> tuple[str, int]:
    """``items`` (messages, newest last) as a JSON array of at most ``limit`` characters, and
    how many of the oldest were left out to fit; the newest alone too long has its texts cut."""
    encoded = [_dumps(m) for m in items]
    size, kept = 2, 0
    for text in reversed(encoded):
        if size + len(text) + (1 if kept else 0) > limit:
            break
        size += len(text) + (1 if kept else 0)
        kept += 1
    if kept == len(encoded):
        return "[" + ",".join(encoded) + "]", 0
    if kept == 0:
        return "[" + _fit(items[-1], limit - 2) + "]", len(items) - 1
    return "[" + ",".join(encoded[len(encoded) - kept :]) + "]", len(encoded) - kept


def bounded_text(value: Any, limit: int = CONTENT_LIMIT) -> str:
    """A tool's arguments or result as text of at most ``limit`` characters (cut, saying so)."""
    text = value if isinstance(value, str) else _dumps(value)
    return text if len(text) <= limit else text[: max(0, limit - 40)] + _CUT.format(n=len(text) - max(0, limit - 40))
