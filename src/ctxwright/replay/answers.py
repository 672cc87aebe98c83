"""A :class:`~ctxwright.replay.turns.Turn` as the answer one API gives: its JSON body, or the
server-sent events of its stream, in the shape the official SDKs parse.

Why exact shapes: the agent under test parses these with its own client (the ``openai`` or
``anthropic`` SDK, or its own code), and its next request is built from what it parsed. A
reply answered in the API it was recorded in is the recorded body itself -- every id (the
response's, each tool call's, each output item's) byte for byte -- so the next request can
equal the golden's. A turn answered in another API (a golden exported as chat completions,
replayed to an Anthropic agent) is rebuilt from its neutral reading, the tool-call ids kept.

The streams, as each API documents them:

* chat completions: ``data:`` chunks (``chat.completion.chunk``) -- the role, the content,
  each tool call (its ``id``, ``type`` and name in the first piece, then its arguments), a
  last chunk with the ``finish_reason``; with ``stream_options.include_usage`` one more chunk
  with empty ``choices`` and the ``usage``; then ``data: [DONE]``;
* the Responses API: ``event:``/``data:`` pairs, each with its ``sequence_number`` --
  ``response.created``, ``response.in_progress``, per output item ``output_item.added``, its
  text (``content_part.added``, ``output_text.delta``/``.done``, ``content_part.done``) or
  arguments (``function_call_arguments.delta``/``.done``), ``output_item.done``; then
  ``response.completed`` carrying the whole response;
* Anthropic Messages: ``event:``/``data:`` pairs -- ``message_start`` (the message with no
  content), per block ``content_block_start`` / ``content_block_delta`` (``text_delta``,
  ``input_json_delta``, ``thinking_delta`` + ``signature_delta``) / ``content_block_stop``,
  ``message_delta`` (stop reason, usage), ``message_stop``.

The whole stream is rendered at once (it is known): one write, no pacing.
"""

from __future__ import annotations

import json
from typing import Any

from ctxwright.core.usage import as_object, read_usage
from ctxwright.replay.turns import ANTHROPIC, CHAT, RESPONSES, Turn, response_body


def dumps(value: Any) -> bytes:
    """Compact JSON, non-ASCII kept as UTF-8 (strings and ids are unchanged either way)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def answer_body(turn: Turn, api: str, *, model: str | None = None) -> dict[str, Any]:
    """The non-stream response body ``turn`` is answered with in ``api``."""
    if turn.api == api:
        return turn.body
    counts = read_usage(turn.body) if turn.usage is not None else {}
    prompt, cached, completion = (counts.get(k) or 0 for k in ("prompt_tokens", "cached_tokens", "completion_tokens"))
    m = turn.model or model or "ctxwright-replay"
    rid = turn.id or "replay"
    if api == CHAT:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": turn.text if turn.text or not turn.tool_calls else None,
        }
        if turn.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in turn.tool_calls
            ]
        return {
            "id": rid,
            "object": "chat.completion",
            "created": 0,
            "model": m,
            "choices": [{"index": 0, "message": message, "finish_reason": turn.stop, "logprobs": None}],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": cached},
            },
        }
    if api == RESPONSES:
        output: list[dict[str, Any]] = []
        if turn.text or not turn.tool_calls:
            output.append(
                {
                    "type": "message",
                    "id": f"msg_{rid}",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": turn.text, "annotations": []}],
                }
            )
        for c in turn.tool_calls:
            output.append(
                {
                    "type": "function_call",
                    "id": c.item_id or f"fc_{c.id}",
                    "call_id": c.id,
                    "name": c.name,
                    "arguments": c.arguments,
                    "status": "completed",
                }
            )
        body = response_body(rid, m, output)
        body["usage"] = {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + completion,
        }
        return body
    blocks: list[dict[str, Any]] = [{"type": "text", "text": turn.text}] if turn.text or not turn.tool_calls else []
    for c in turn.tool_calls:
        try:
            args = json.loads(c.arguments) if c.arguments.strip() else {}
        except (ValueError, RecursionError):
            args = {}
        blocks.append({"type": "tool_use", "id": c.id, "name": c.name, "input": args})
    return {
        "id": rid,
        "type": "message",
        "role": "assistant",
        "model": m,
        "content": blocks,
        "stop_reason": {"tool_calls": "tool_use", "length": "max_tokens"}.get(turn.stop, "end_turn"),
        "stop_sequence": None,
        "usage": {"input_tokens": prompt - cached, "cache_read_input_tokens": cached, "output_tokens": completion},
    }


def stream_bytes(body: dict[str, Any], api: str, *, include_usage: bool = False) -> bytes:
    """The server-sent events of a stream that adds up to ``body`` (see the module docstring)."""
    if api == CHAT:
        return _chat_stream(body, include_usage)
    if api == RESPONSES:
        return _responses_stream(body)
    return _anthropic_stream(body)


def _data(payload: Any) -> bytes:
    return b"data: " + dumps(payload) + b"\n\n"


def _event(name: str, payload: Any) -> bytes:
    return b"event: " + name.encode() + b"\n" + _data(payload)


def _chat_stream(body: dict[str, Any], include_usage: bool) -> bytes:
    head: dict[str, Any] = {
        k: body[k] for k in ("id", "created", "model", "system_fingerprint", "service_tier") if k in body
    }
    head["object"] = "chat.completion.chunk"
    choices = body.get("choices") or [{}]
    choice = as_object(choices[0])
    message = as_object(choice.get("message"))

    def chunk(delta: dict[str, Any], finish: Any = None) -> bytes:
        return _data({**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]})

    out = [chunk({"role": message.get("role") or "assistant", "content": ""})]
    if message.get("reasoning_content"):
        out.append(chunk({"reasoning_content": message["reasoning_content"]}))
    content = message.get("content")
    if isinstance(content, str) and content:
        out.append(chunk({"content": content}))
    for i, call in enumerate(message.get("tool_calls") or ()):
        fn = call.get("function") or {}
        first = {
            "index": i,
            "id": call.get("id"),
            "type": call.get("type", "function"),
            "function": {"name": fn.get("name", ""), "arguments": ""},
        }
        out.append(chunk({"tool_calls": [first]}))
        if fn.get("arguments"):
            out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": fn["arguments"]}}]}))
    out.append(chunk({}, choice.get("finish_reason") or "stop"))
    if include_usage and isinstance(body.get("usage"), dict):
        out.append(_data({**head, "choices": [], "usage": body["usage"]}))
    out.append(b"data: [DONE]\n\n")
    return b"".join(out)


def _responses_stream(body: dict[str, Any]) -> bytes:
    seq = 0
    out: list[bytes] = []

    def ev(kind: str, **data: Any) -> None:
        nonlocal seq
        out.append(_event(kind, {"type": kind, "sequence_number": seq, **data}))
        seq += 1

    start = {**body, "status": "in_progress", "output": [], "usage": None}
    ev("response.created", response=start)
    ev("response.in_progress", response=start)
    for i, item in enumerate(body.get("output") or ()):
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "message":
            ev("response.output_item.added", output_index=i, item={**item, "status": "in_progress", "content": []})
            for j, part in enumerate(item.get("content") or ()):
                if not isinstance(part, dict):
                    continue
                text = part.get("text") if isinstance(part.get("text"), str) else None
                empty = {**part, "text": ""} if text is not None else part
                ev("response.content_part.added", item_id=item.get("id"), output_index=i, content_index=j, part=empty)
                if text is not None:
                    ids = {"item_id": item.get("id"), "output_index": i, "content_index": j}
                    if text:
                        ev("response.output_text.delta", **ids, delta=text, logprobs=[])
                    ev("response.output_text.done", **ids, text=text, logprobs=[])
                ev("response.content_part.done", item_id=item.get("id"), output_index=i, content_index=j, part=part)
        elif kind == "function_call":
            ev("response.output_item.added", output_index=i, item={**item, "status": "in_progress", "arguments": ""})
            args = str(item.get("arguments") or "")
            if args:
                ev("response.function_call_arguments.delta", item_id=item.get("id"), output_index=i, delta=args)
            ev(
                "response.function_call_arguments.done",
                item_id=item.get("id"),
                output_index=i,
                name=item.get("name"),
                arguments=args,
            )
        else:
            ev("response.output_item.added", output_index=i, item=item)
        ev("response.output_item.done", output_index=i, item=item)
    ev("response.incomplete" if body.get("status") == "incomplete" else "response.completed", response=body)
    return b"".join(out)


def _anthropic_stream(body: dict[str, Any]) -> bytes:
    out: list[bytes] = []
    usage = as_object(body.get("usage"))
    start = {**body, "content": [], "stop_reason": None, "stop_sequence": None, "usage": {**usage, "output_tokens": 1}}
    out.append(_event("message_start", {"type": "message_start", "message": start}))
    for i, block in enumerate(body.get("content") or ()):
        if not isinstance(block, dict):
            continue
        btype = block.get("type")

        def delta(d: dict[str, Any], i: int = i) -> None:
            out.append(_event("content_block_delta", {"type": "content_block_delta", "index": i, "delta": d}))

        if btype == "text":
            head: dict[str, Any] = {**block, "text": ""}
            out.append(
                _event("content_block_start", {"type": "content_block_start", "index": i, "content_block": head})
            )
            if block.get("text"):
                delta({"type": "text_delta", "text": block["text"]})
        elif btype in ("tool_use", "server_tool_use"):
            head = {**block, "input": {}}
            out.append(
                _event("content_block_start", {"type": "content_block_start", "index": i, "content_block": head})
            )
            delta({"type": "input_json_delta", "partial_json": dumps(block.get("input", {})).decode("utf-8")})
        elif btype == "thinking":
            head = {**block, "thinking": "", "signature": ""}
            out.append(
                _event("content_block_start", {"type": "content_block_start", "index": i, "content_block": head})
            )
            if block.get("thinking"):
                delta({"type": "thinking_delta", "thinking": block["thinking"]})
            delta({"type": "signature_delta", "signature": block.get("signature", "")})
        else:
            out.append(
                _event("content_block_start", {"type": "content_block_start", "index": i, "content_block": block})
            )
        out.append(_event("content_block_stop", {"type": "content_block_stop", "index": i}))
    end = {"stop_reason": body.get("stop_reason"), "stop_sequence": body.get("stop_sequence")}
    out.append(_event("message_delta", {"type": "message_delta", "delta": end, "usage": usage}))
    out.append(_event("message_stop", {"type": "message_stop"}))
    return b"".join(out)


def error_body(api: str | None, message: str, *, etype: str = "invalid_request_error") -> dict[str, Any]:
    """An error in ``api``'s shape: OpenAI's ``{"error": {message, type, param, code}}``,
    Anthropic's ``{"type": "error", "error": {type, message}}``; for a path of no API, both
    at once (each SDK reads ``error.message``)."""
    if api == ANTHROPIC:
        return {"type": "error", "error": {"type": etype, "message": message}}
    if api in (CHAT, RESPONSES):
        return {"error": {"message": message, "type": etype, "param": None, "code": None}}
    return {"type": "error", "error": {"type": etype, "code": etype, "message": message}}


__all__ = ["answer_body", "dumps", "error_body", "stream_bytes"]
