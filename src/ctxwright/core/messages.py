"""Message and tool-call types, and the one canonical JSON serialization.

Why this module exists: a provider's prompt cache matches *bytes*. Two requests that
mean the same thing but serialize differently (key order, whitespace, escaping) miss the
cache. Every byte ctxwright sends or hashes therefore goes through :func:`canonical_json`,
and every message is one of the four standard OpenAI roles -- tool results are ``tool``
messages paired by ``tool_call_id``, never "USER: ... ASSISTANT: ..." text.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]


#: The one encoder, made once: ``json.dumps`` with options builds a new encoder on every call,
#: and a turn encodes a dozen small objects (events, call records, audit rows).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
#: ... and its C core, made once too (``JSONEncoder.encode`` makes one per call, with a fresh
#: table for its circular-reference check; :func:`canonical_json` falls back to ``encode`` on
#: the one input that check is for). ``None`` where the C accelerator is missing.
_MAKE_C: Callable[..., Callable[[Any, int], Iterable[str]]] | None = getattr(json.encoder, "c_make_encoder", None)
_CANONICAL_C = (
    _MAKE_C(None, _CANONICAL.default, json.encoder.encode_basestring, None, ":", ",", True, False, True)
    if _MAKE_C is not None
    else None
)


def canonical_json(obj: Any) -> str:
    """Serialize ``obj`` byte-stably: sorted keys, no spaces, UTF-8 kept as is.

    Equal content always gives equal bytes, so request hashes and cache audits compare
    like with like. (The same output, and the same errors, as ``json.dumps(obj,
    sort_keys=True, separators=(",", ":"), ensure_ascii=False)``.)
    """
    if _CANONICAL_C is not None:
        try:
            return "".join(_CANONICAL_C(obj, 0))
        except RecursionError:  # a circular structure, or one nested too deep: encode's own error
            pass
    return _CANONICAL.encode(obj)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ToolCall:
    """One function call requested by the model.

    ``arguments`` stays the raw string the model produced: it may be invalid JSON, and the
    harness must be able to send it back byte-for-byte and report what it received.
    """

    id: str
    name: str
    arguments: str

    def parsed_arguments(self) -> dict[str, Any]:
        """Arguments as a dict; raises ``ValueError`` with a clear reason otherwise."""
        try:
            value = json.loads(self.arguments) if self.arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise ValueError(f"arguments are not valid JSON ({exc.msg} at position {exc.pos})") from exc
        if not isinstance(value, dict):
            raise ValueError(f"arguments must be a JSON object, got {type(value).__name__}")
        return value

    def to_wire(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> ToolCall:
        fn = data.get("function") or {}
        args = fn.get("arguments", "")
        if not isinstance(args, str):
            args = canonical_json(args)
        # a missing or null id is "" (never the text "None"): the agent loop gives it one
        # (``core/tool_ids.py``) before anything is recorded
        raw_id = data.get("id")
        return cls(id="" if raw_id is None else str(raw_id), name=str(fn.get("name") or ""), arguments=args)


@dataclass(frozen=True)
class Message:
    """One chat message in the standard OpenAI shape.

    ``reasoning_content`` carries a model's thinking (DeepSeek, Qwen3) so the rendering
    policy can decide whether to strip it or send it back.

    ``reasoning_blocks`` carries a provider's own reasoning items as canonical JSON text (a
    list), kept opaque because the provider checks them byte for byte when they come back:
    Anthropic's ``thinking`` blocks with their ``signature`` (and ``redacted_thinking``
    blocks), the Responses API's ``reasoning`` items with their ``encrypted_content``. Text,
    not a list, so a frozen message cannot be changed through a shared object (as
    ``ToolSpec.parameters_json``). ``reasoning_content`` then holds their readable text.

    ``omit_content``: a tool-call turn without text is sent with no ``content`` key at all
    rather than ``"content": null``. Set only by the renderer, for a session whose recorded
    wire form is ``omit`` (``core/render.py``): OpenAI accepts the key absent on a turn with
    tool calls, and the ``openai`` SDK's request transform walks every key of every message
    against each message type it knows, so a key left out is CPU saved on every call.
    Never stored: an event holds the message as received, and each reader renders the form.
    """

    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    reasoning_content: str | None = None
    reasoning_blocks: str | None = None
    omit_content: bool = False

    def __post_init__(self) -> None:
        if self.role not in ("system", "user", "assistant", "tool"):
            raise ValueError(f"unknown role {self.role!r}: use system, user, assistant or tool")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs the tool_call_id of the call it answers")
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only assistant messages carry tool_calls")
        if self.omit_content and (self.content is not None or not self.tool_calls):
            # a server needs the content of a turn without tool calls; text is never dropped
            raise ValueError("omit_content is for an assistant turn with tool calls and no text")

    def to_wire(self, *, include_reasoning: bool = True) -> dict[str, Any]:
        """The chat-completions JSON object for this message."""
        out: dict[str, Any] = {"role": self.role}
        if self.role == "assistant":
            if not self.omit_content:
                out["content"] = self.content
            if self.tool_calls:
                out["tool_calls"] = [tc.to_wire() for tc in self.tool_calls]
            if include_reasoning and self.reasoning_content is not None:
                out["reasoning_content"] = self.reasoning_content
            if include_reasoning and self.reasoning_blocks is not None:
                out["reasoning_blocks"] = self.reasoning_blocks
        else:
            out["content"] = self.content if self.content is not None else ""
        if self.role == "tool":
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None and self.role != "tool":
            out["name"] = self.name
        return out

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Message:
        content = data.get("content")
        if isinstance(content, list):  # content parts: keep text parts only, in order
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        return cls(
            role=data["role"],
            content=content,
            tool_calls=tuple(ToolCall.from_wire(tc) for tc in data.get("tool_calls") or ()),
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name") if data.get("role") != "tool" else None,
            reasoning_content=data.get("reasoning_content"),
            reasoning_blocks=data.get("reasoning_blocks"),
        )

    def canonical(self) -> str:
        return self._canonical

    @cached_property
    def _canonical(self) -> str:
        """Computed once per message object: a frozen message's bytes never change, and a long
        session renders, counts and audits every earlier message again on every call."""
        return canonical_json(self.to_wire())

    @cached_property
    def canonical_utf8(self) -> bytes:
        return self._canonical.encode("utf-8", "surrogatepass")


def system(text: str) -> Message:
    return Message(role="system", content=text)


def user(text: str) -> Message:
    return Message(role="user", content=text)


def assistant(text: str | None = None, tool_calls: tuple[ToolCall, ...] | list[ToolCall] = ()) -> Message:
    return Message(role="assistant", content=text, tool_calls=tuple(tool_calls))


def tool_result(tool_call_id: str, content: str) -> Message:
    return Message(role="tool", content=content, tool_call_id=tool_call_id)


@dataclass(frozen=True)
class Usage:
    """What one model call cost, as the backend reported it.

    ``cached_tokens`` is ``None`` when the backend did not say: a missing field means
    *unknown*, never zero (``core/usage.py`` reads every provider's field).
    """

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    prefill_ms: float | None = None
    decode_ms: float | None = None
    raw: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_tokens": self.cached_tokens,
            "prefill_ms": self.prefill_ms,
            "decode_ms": self.decode_ms,
            "raw": self.raw,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Usage:
        return cls(
            prompt_tokens=d.get("prompt_tokens"),
            completion_tokens=d.get("completion_tokens"),
            cached_tokens=d.get("cached_tokens"),
            prefill_ms=d.get("prefill_ms"),
            decode_ms=d.get("decode_ms"),
            raw=d.get("raw") or {},
        )
