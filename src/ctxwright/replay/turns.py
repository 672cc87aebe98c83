"""One recorded assistant reply -- a :class:`Turn` -- from whatever a recording holds of it.

Why one form: a golden may come from any of the three APIs, as a JSON body or as the stream
events a proxy recorded, or with no response at all (``ctxwright export --requests`` keeps
only the usage). The replay answers each call with *the reply that was recorded*, so the
agent's next request carries the same assistant message -- the same tool-call ids, response
ids and text -- as the golden's next request did. A turn therefore keeps the recorded
response body itself (``body``, in the API it was recorded in), reassembled from its events
when it was streamed, and the neutral reading of it (text, tool calls, stop) that matching and
answering in another API use.

Reassembling a stream, per API (the events each documents):

* chat completions: the chunks' ``choices[0].delta`` -- ``content`` (and
  ``reasoning_content``) concatenated, ``tool_calls`` merged by ``index`` (the id and name
  come in the first piece, the ``arguments`` in pieces) -- the last ``finish_reason`` and the
  ``usage`` of the last chunk that has one;
* the Responses API: ``response.completed`` carries the whole response; a stream cut before
  it is rebuilt from ``response.created`` and the ``response.output_item.done`` items;
* Anthropic Messages: ``message_start``'s message, each block from ``content_block_start``
  with its ``text_delta`` / ``input_json_delta`` / ``thinking_delta`` / ``signature_delta``
  pieces applied, ``message_delta``'s stop reason and usage merged in.

A reply inferred from the next request (:func:`inferred_turn`) is that request's appended
assistant message as the agent sent it, wrapped in the API's response body.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ctxwright.core.usage import as_object

#: the three APIs, by the names ``proxy/log.py`` gives them
CHAT, RESPONSES, ANTHROPIC = "openai_chat", "openai_responses", "anthropic_messages"
APIS = (CHAT, RESPONSES, ANTHROPIC)
#: Responses API input items that are the model's output sent back (one assistant turn)
ASSISTANT_ITEMS = frozenset({"function_call", "reasoning", "custom_tool_call", "web_search_call", "file_search_call"})


@dataclass(frozen=True)
class ToolCall:
    """One tool call of a reply: the id the tool result must answer (chat ``id``, Anthropic
    ``tool_use`` id, Responses ``call_id``), the tool's name, its arguments as JSON text, and
    the Responses output item's own ``id`` (``fc_...``) when there is one."""

    id: str
    name: str
    arguments: str
    item_id: str | None = None


@dataclass(frozen=True)
class Turn:
    """One assistant reply: the response ``body`` in ``api``'s non-stream form, and its
    neutral reading -- ``text``, ``tool_calls``, ``stop`` (``stop``, ``tool_calls`` or
    ``length``). ``inferred`` says the recording had no reply and it was taken from the next
    request (or, for a conversation's last call, is an empty text)."""

    api: str
    body: dict[str, Any]
    text: str
    tool_calls: tuple[ToolCall, ...]
    stop: str
    inferred: bool = False

    @property
    def id(self) -> str | None:
        rid = self.body.get("id")
        return rid if isinstance(rid, str) else None

    @property
    def model(self) -> str | None:
        model = self.body.get("model")
        return model if isinstance(model, str) else None

    @property
    def usage(self) -> dict[str, Any] | None:
        usage = self.body.get("usage")
        return usage if isinstance(usage, dict) else None

    def signature(self) -> tuple[str, tuple[str, ...] | str]:
        """What identifies this reply inside a later request: its tool-call ids, else its text."""
        if self.tool_calls:
            return ("calls", tuple(c.id for c in self.tool_calls))
        return ("text", self.text)


def as_list(value: Any) -> list[Any]:
    """``value`` if it is a JSON array, else empty."""
    return value if isinstance(value, list) else []


# -- reading a recorded response --------------------------------------------------------------


def has_reply(api: str, response: Any) -> bool:
    """Whether ``response`` holds a reply at all (an export's ``{"usage": ...}`` does not)."""
    if isinstance(response, list):
        return any(isinstance(e, dict) for e in response)
    if not isinstance(response, dict):
        return False
    if api == CHAT:
        return isinstance(response.get("choices"), list) and bool(response["choices"])
    if api == RESPONSES:
        return isinstance(response.get("output"), list)
    return isinstance(response.get("content"), list)


def is_error(response: Any) -> bool:
    """A recorded error answer (both providers put an ``error`` object in it), not a reply."""
    return isinstance(response, dict) and (response.get("type") == "error" or isinstance(response.get("error"), dict))


def api_of_response(response: Any) -> str | None:
    """The API a recorded response body or event list is of, by its own shape, or ``None``."""
    first = response if isinstance(response, dict) else None
    if isinstance(response, list):
        first = next((e for e in response if isinstance(e, dict)), None)
    if first is None:
        return None
    kind = str(first.get("type") or "")
    obj = str(first.get("object") or "")
    if obj.startswith("chat.completion"):
        return CHAT
    if obj == "response" or kind.startswith("response."):
        return RESPONSES
    if kind in ("message", "message_start", "ping") or kind.startswith("content_block"):
        return ANTHROPIC
    return None


def turn_from_response(api: str, response: Any) -> Turn:
    """The reply recorded in ``response`` (a body or its stream's events) of an ``api`` call."""
    body = reassemble(api, response) if isinstance(response, list) else response
    if not isinstance(body, dict):
        raise ValueError("the recorded response is not a JSON object")
    return read_turn(api, body)


def reassemble(api: str, events: Sequence[Any]) -> dict[str, Any]:
    """A stream's events as the one non-stream response body they add up to."""
    evs = [e for e in events if isinstance(e, dict)]
    if api == CHAT:
        return _chat_from_chunks(evs)
    if api == RESPONSES:
        return _responses_from_events(evs)
    return _anthropic_from_events(evs)


def _chat_from_chunks(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    body: dict[str, Any] = {"object": "chat.completion"}
    text: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish: Any = None
    role = "assistant"
    for c in chunks:
        for key in ("id", "created", "model", "system_fingerprint", "service_tier"):
            if c.get(key) is not None:
                body[key] = c[key]
        if isinstance(c.get("usage"), dict):
            body["usage"] = c["usage"]
        choices = c.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            continue
        choice = choices[0]
        finish = choice.get("finish_reason") or finish
        delta = as_object(choice.get("delta"))
        role = str(delta.get("role") or role)
        if isinstance(delta.get("content"), str):
            text.append(delta["content"])
        if isinstance(delta.get("reasoning_content"), str):
            reasoning.append(delta["reasoning_content"])
        for piece in delta.get("tool_calls") or ():
            if not isinstance(piece, dict):
                continue
            call = calls.setdefault(int(piece.get("index") or 0), {"type": "function", "function": {}})
            if piece.get("id"):
                call["id"] = piece["id"]
            if piece.get("type"):
                call["type"] = piece["type"]
            fn = as_object(piece.get("function"))
            if fn.get("name"):
                call["function"]["name"] = call["function"].get("name", "") + str(fn["name"])
            if fn.get("arguments") is not None:
                call["function"]["arguments"] = call["function"].get("arguments", "") + str(fn["arguments"])
    message: dict[str, Any] = {"role": role, "content": "".join(text) if text or not calls else None}
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
        for call in message["tool_calls"]:
            call["function"].setdefault("name", "")
            call["function"].setdefault("arguments", "")
    body["choices"] = [{"index": 0, "message": message, "finish_reason": finish or "stop"}]
    return body


def _responses_from_events(events: list[dict[str, Any]]) -> dict[str, Any]:
    for e in reversed(events):
        if e.get("type") in ("response.completed", "response.incomplete") and isinstance(e.get("response"), dict):
            return dict(e["response"])
    base: dict[str, Any] = {}
    items: dict[int, Any] = {}
    for e in events:
        if e.get("type") == "response.created" and isinstance(e.get("response"), dict):
            base = dict(e["response"])
        elif e.get("type") == "response.output_item.done" and isinstance(e.get("item"), dict):
            items[int(e.get("output_index") or len(items))] = e["item"]
    base.setdefault("object", "response")
    base["status"] = "incomplete"
    base["output"] = [items[i] for i in sorted(items)]
    return base


def _anthropic_from_events(events: list[dict[str, Any]]) -> dict[str, Any]:
    body: dict[str, Any] = {"type": "message", "role": "assistant", "content": []}
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, list[str]] = {}
    for e in events:
        kind = e.get("type")
        if kind == "message_start" and isinstance(e.get("message"), dict):
            body.update(e["message"])
        elif kind == "content_block_start" and isinstance(e.get("content_block"), dict):
            blocks[int(e.get("index") or 0)] = dict(e["content_block"])
        elif kind == "content_block_delta" and isinstance(e.get("delta"), dict):
            i = int(e.get("index") or 0)
            block = blocks.setdefault(i, {"type": "text", "text": ""})
            d = e["delta"]
            dtype = d.get("type")
            if dtype == "text_delta":
                block["text"] = str(block.get("text") or "") + str(d.get("text") or "")
            elif dtype == "input_json_delta":
                partial.setdefault(i, []).append(str(d.get("partial_json") or ""))
            elif dtype == "thinking_delta":
                block["thinking"] = str(block.get("thinking") or "") + str(d.get("thinking") or "")
            elif dtype == "signature_delta":
                block["signature"] = str(d.get("signature") or "")
        elif kind == "message_delta":
            delta = as_object(e.get("delta"))
            for key in ("stop_reason", "stop_sequence"):
                if key in delta:
                    body[key] = delta[key]
            if isinstance(e.get("usage"), dict):
                usage = dict(body.get("usage") or {})
                usage.update((k, v) for k, v in e["usage"].items() if v is not None)
                body["usage"] = usage
    for i, pieces in partial.items():
        raw = "".join(pieces)
        with contextlib.suppress(ValueError, RecursionError):
            blocks[i]["input"] = json.loads(raw) if raw.strip() else {}
    body["content"] = [blocks[i] for i in sorted(blocks)]
    return body


# -- the neutral reading ----------------------------------------------------------------------


def read_turn(api: str, body: dict[str, Any], *, inferred: bool = False) -> Turn:
    """The neutral reading of a response ``body`` of ``api``."""
    if api == CHAT:
        choices = body.get("choices")
        choice = as_object(choices[0]) if isinstance(choices, list) and choices else {}
        message = as_object(choice.get("message"))
        calls = tuple(_chat_call(c) for c in message.get("tool_calls") or () if isinstance(c, dict))
        finish = choice.get("finish_reason")
        stop = "tool_calls" if finish in ("tool_calls", "function_call") or calls else _stop(finish == "length")
        return Turn(api, body, content_text(message.get("content")), calls, stop, inferred)
    if api == RESPONSES:
        texts: list[str] = []
        calls_r: list[ToolCall] = []
        for item in body.get("output") or ():
            if not isinstance(item, dict):
                continue
            if item.get("type") == "function_call":
                calls_r.append(
                    ToolCall(
                        str(item.get("call_id") or item.get("id") or ""),
                        str(item.get("name") or ""),
                        str(item.get("arguments") or ""),
                        item.get("id") if isinstance(item.get("id"), str) else None,
                    )
                )
            elif item.get("type", "message") == "message" and item.get("role", "assistant") == "assistant":
                texts.append(content_text(item.get("content")))
        stop = "tool_calls" if calls_r else _stop(body.get("status") == "incomplete")
        return Turn(api, body, "".join(texts), tuple(calls_r), stop, inferred)
    content = body.get("content")
    blocks = content if isinstance(content, list) else []
    calls_a = tuple(
        ToolCall(str(b.get("id") or ""), str(b.get("name") or ""), json.dumps(b.get("input", {}), ensure_ascii=False))
        for b in blocks
        if isinstance(b, dict) and b.get("type") == "tool_use"
    )
    reason = body.get("stop_reason")
    stop = "tool_calls" if reason == "tool_use" or calls_a else _stop(reason == "max_tokens")
    return Turn(api, body, content_text(content), calls_a, stop, inferred)


def _stop(cut: bool) -> str:
    return "length" if cut else "stop"


def _chat_call(call: dict[str, Any]) -> ToolCall:
    fn = as_object(call.get("function"))
    return ToolCall(str(call.get("id") or ""), str(fn.get("name") or ""), str(fn.get("arguments") or ""))


def content_text(content: Any) -> str:
    """The text of a message's content: a string, or its text parts/blocks joined (chat
    ``text`` parts, Anthropic ``text`` blocks, Responses ``input_text``/``output_text``)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(
        str(p.get("text") or "")
        for p in content
        if isinstance(p, dict) and p.get("type") in ("text", "input_text", "output_text")
    )


# -- a reply the recording does not hold ------------------------------------------------------


def inferred_turn(
    api: str, appended: Sequence[dict[str, Any]], *, rid: str, model: str | None, usage: dict[str, Any] | None
) -> Turn:
    """The reply a call got, read from what the next request of its conversation appended
    (``appended``: the assistant message, or the Responses output items, as the agent sent
    them back); an empty list gives an empty text with a normal stop. ``rid`` is the
    response id to give it, ``usage`` the usage the recording reported (kept as it was)."""
    m = model or "ctxwright-replay"
    if api == CHAT:
        message = dict(appended[0]) if appended else {"role": "assistant", "content": ""}
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        body: dict[str, Any] = {
            "id": rid,
            "object": "chat.completion",
            "created": 0,
            "model": m,
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        }
    elif api == RESPONSES:
        items = [_output_item(it, f"{rid}_{i}") for i, it in enumerate(appended)]
        body = response_body(rid, m, items)
    else:
        raw = appended[0].get("content") if appended else ""
        blocks = [{"type": "text", "text": raw}] if isinstance(raw, str) else [_unmarked(b) for b in raw or ()]
        if not appended:
            blocks = [{"type": "text", "text": ""}]
        body = {
            "id": rid,
            "type": "message",
            "role": "assistant",
            "model": m,
            "content": blocks,
            "stop_reason": "tool_use" if any(b.get("type") == "tool_use" for b in blocks) else "end_turn",
            "stop_sequence": None,
        }
    if usage is not None:
        body["usage"] = usage
    return read_turn(api, body, inferred=True)


def response_body(rid: str, model: str, output: list[dict[str, Any]]) -> dict[str, Any]:
    """A complete Responses API response object (the fields the SDK's model declares)."""
    return {
        "id": rid,
        "object": "response",
        "created_at": 0,
        "status": "completed",
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "temperature": None,
        "top_p": None,
    }


def _unmarked(block: Any) -> Any:
    """A content block without the ``cache_control`` marker the agent put on it: a marker is
    the request's, never part of a reply."""
    if isinstance(block, dict) and "cache_control" in block:
        return {k: v for k, v in block.items() if k != "cache_control"}
    return block


def _output_item(item: dict[str, Any], fallback_id: str) -> dict[str, Any]:
    """An input item the agent sent back, as the output item it was: an easy-form assistant
    message (``{"role": "assistant", "content": "..."}``) becomes a ``message`` item with an
    ``output_text`` part; other items are kept as sent."""
    kind = item.get("type", "message")
    if kind != "message":
        out = dict(item)
        if kind == "function_call":
            out.setdefault("id", "fc_" + fallback_id)
            out.setdefault("status", "completed")
        return out
    content = item.get("content")
    if isinstance(content, str):
        parts: list[Any] = [{"type": "output_text", "text": content, "annotations": []}]
    else:
        parts = [
            {**p, "type": "output_text", "annotations": p.get("annotations", [])}
            if isinstance(p, dict) and p.get("type") in ("input_text", "output_text", "text")
            else p
            for p in content or ()
        ]
    return {
        "type": "message",
        "id": str(item.get("id") or "msg_" + fallback_id),
        "status": str(item.get("status") or "completed"),
        "role": "assistant",
        "content": parts,
    }


def assistant_run(api: str, entries: Sequence[Any]) -> list[dict[str, Any]]:
    """The first assistant turn among ``entries`` (messages, or Responses input items): one
    assistant message, or a run of Responses output items (reasoning, function calls, an
    assistant message)."""
    out: list[dict[str, Any]] = []
    for e in entries:
        if not isinstance(e, dict):
            continue
        if is_assistant_entry(api, e):
            out.append(e)
            if api != RESPONSES:
                return out
        elif out:
            return out
    return out


def is_assistant_entry(api: str, entry: dict[str, Any]) -> bool:
    if api == RESPONSES:
        kind = entry.get("type", "message")
        return kind in ASSISTANT_ITEMS or (kind == "message" and entry.get("role") == "assistant")
    return entry.get("role") == "assistant"


__all__ = [
    "ANTHROPIC",
    "APIS",
    "CHAT",
    "RESPONSES",
    "ToolCall",
    "Turn",
    "api_of_response",
    "as_list",
    "as_object",
    "assistant_run",
    "content_text",
    "has_reply",
    "inferred_turn",
    "is_error",
    "read_turn",
    "reassemble",
    "response_body",
    "turn_from_response",
]
