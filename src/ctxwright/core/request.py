"""What is sent on one model call, and what comes back: tool definitions, the rendered
request, the completion.

Why in ``core``: the session renders requests and the audit hashes them; a backend only
receives them. Keeping the types here lets every layer share them without importing a
backend.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ctxwright.core.incremental import common_prefix_len
from ctxwright.core.messages import Message, Usage, canonical_json

#: ``auto`` / ``required`` / ``none``, or the name of one tool the reply must call.
ToolChoice = str


@dataclass(frozen=True)
class ToolSpec:
    """A tool definition as the model sees it (OpenAI ``function`` tool).

    ``parameters_json`` holds the JSON schema as canonical JSON text rather than a dict, so
    a frozen prefix cannot be mutated through a shared dict.
    """

    name: str
    description: str
    parameters_json: str = '{"properties":{},"type":"object"}'

    @classmethod
    def create(cls, name: str, description: str, parameters: dict[str, Any] | None = None) -> ToolSpec:
        return cls(
            name=name,
            description=description,
            parameters_json=canonical_json(parameters or {"type": "object", "properties": {}}),
        )

    @property
    def parameters(self) -> dict[str, Any]:
        import json

        return json.loads(self.parameters_json)

    def to_wire(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> ToolSpec:
        fn = data.get("function", data)
        return cls.create(fn.get("name", ""), fn.get("description", ""), fn.get("parameters"))


def tool_body(tool: Any) -> Any:
    """The part of a tool schema on the wire that holds its name, description and parameters:
    ``function`` for chat completions, the schema itself for Responses and Anthropic."""
    if isinstance(tool, Mapping) and isinstance(tool.get("function"), Mapping):
        return tool["function"]
    return tool


def tool_name(tool: Any) -> str | None:
    """A tool schema's name in any of the three API shapes, or ``None``."""
    body = tool_body(tool)
    name = body.get("name") if isinstance(body, Mapping) else None
    return name if isinstance(name, str) else None


@dataclass(frozen=True)
class ChatRequest:
    """Everything sent on one model call, already rendered: messages[0] is the system prompt."""

    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: ToolChoice = "auto"
    max_tokens: int | None = None
    temperature: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_wire(self, model: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"messages": [m.to_wire() for m in self.messages]}
        if model is not None:
            body["model"] = model
        if self.tools:
            body["tools"] = [t.to_wire() for t in self.tools]
            body["tool_choice"] = (
                self.tool_choice
                if self.tool_choice in ("auto", "required", "none")
                else {"type": "function", "function": {"name": self.tool_choice}}
            )
        return body

    def canonical_bytes(self) -> bytes:
        """The request as canonical UTF-8 bytes (model name excluded): what the audit hashes."""
        return canonical_json(self.to_wire()).encode("utf-8")

    def openai_body(self, model: str | None) -> dict[str, Any]:
        """The chat-completions request body exactly as ``backends/openai_compat.py`` sends it:
        model, messages, tools and tool_choice, then the sampling fields that are set, then
        ``extra`` (which may override any of them). ``ctxwright export --requests`` prints
        this, so the export equals what the server received."""
        body = self.to_wire(model)
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        if self.temperature is not None:
            body["temperature"] = self.temperature
        body.update(self.extra)
        return body


#: Request options a backend applies to the reply, not to the prompt, by backend name. The
#: embedded backend turns ``tool_choice`` into a grammar over the reply (``backends/embedded.py:
#: reply_schema``) and renders the same prompt whatever it is, so llama.cpp reuses its KV cache
#: across a change of it: such a change is no ``options_changed`` of the cached prompt, and a
#: request body written for such a call (``ctxwright export --requests``) leaves the option out,
#: so the live audit and the audit of the export agree (``audit/logs.py: sent_options``).
REPLY_ONLY_OPTIONS: Mapping[str, frozenset[str]] = {"embedded": frozenset({"tool_choice"})}


def without_reply_only(body: dict[str, Any], backend: str | None) -> dict[str, Any]:
    """``body`` without the options ``backend`` applies to the reply only (:data:`REPLY_ONLY_OPTIONS`)."""
    drop = REPLY_ONLY_OPTIONS.get(backend or "", frozenset())
    return {k: v for k, v in body.items() if k not in drop} if drop & body.keys() else body


@dataclass(frozen=True)
class RequestOptions:
    """What one model call was sent with besides the messages and tools.

    Recorded per call so that the exact request body can be rebuilt from the store
    (``ctxwright export ID --requests``). ``unknown`` names options that were not recorded:
    calls stored before schema 2 kept only a hash of the request, and what cannot be
    recovered honestly from it is marked unknown rather than guessed.
    """

    model: str | None = None
    tool_choice: ToolChoice | None = "auto"
    max_tokens: int | None = None
    temperature: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    unknown: tuple[str, ...] = ()

    @classmethod
    def of(cls, request: ChatRequest, model: str | None) -> RequestOptions:
        return cls(model, request.tool_choice, request.max_tokens, request.temperature, dict(request.extra))

    def request(self, messages: tuple[Message, ...], tools: tuple[ToolSpec, ...]) -> ChatRequest:
        """The request these options were sent with (``auto`` stands in for an unknown
        tool_choice; :meth:`body` leaves it out)."""
        return ChatRequest(
            messages=messages,
            tools=tools,
            tool_choice=self.tool_choice if self.tool_choice is not None else "auto",
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            extra=dict(self.extra),
        )

    def body(self, messages: tuple[Message, ...], tools: tuple[ToolSpec, ...]) -> dict[str, Any]:
        """The request body as sent; options that are ``unknown`` are left out."""
        body = self.request(messages, tools).openai_body(self.model)
        if "tool_choice" in self.unknown:
            body.pop("tool_choice", None)
        return body


@dataclass(frozen=True)
class Completion:
    """One model reply: an assistant message (text and/or tool calls) and its usage."""

    message: Message
    usage: Usage
    finish_reason: str | None = None
    model: str | None = None


class RequestHasher:
    """The sha256 and byte length of :meth:`ChatRequest.canonical_bytes`, without encoding the
    whole request on every call.

    Why: the store keeps each call's request hash (the audit's and the export's evidence of
    what was sent), and a long session's request is mostly the previous one's messages; encoding
    and hashing all of it again each call makes a turn cost more the longer the session. The
    canonical bytes are ``{"messages":[m0,m1,...]`` then the tool fields and ``}`` (keys sorted:
    ``messages`` < ``tool_choice`` < ``tools``), so a rolling hash kept after each message is
    resumed after the messages the new request shares with the last one (by identity, or
    equal: a frozen message equal to another has the same bytes) and only the rest is hashed.
    Digest and length are those of ``canonical_bytes()`` exactly (tested)."""

    _HEAD = b'{"messages":['

    def __init__(self) -> None:
        self._messages: list[Message] = []
        self._states: list[Any] = []  # sha256 state after message i (and the bytes before it)
        self._sizes: list[int] = []  # bytes up to and including message i
        self._tail: tuple[tuple[ToolSpec, ...], str, bytes] | None = None

    def _suffix(self, request: ChatRequest) -> bytes:
        tail = self._tail
        if tail is None or tail[0] is not request.tools or tail[1] != request.tool_choice:
            body = request.to_wire()
            body.pop("messages")
            raw = b"]"
            for key in sorted(body):  # what canonical_json writes after the messages, key by key
                raw += b"," + canonical_json(key).encode("utf-8") + b":" + canonical_json(body[key]).encode("utf-8")
            tail = self._tail = (request.tools, request.tool_choice, raw + b"}")
        return tail[2]

    def digest(self, request: ChatRequest) -> tuple[str, int]:
        """``(sha256 hex of request.canonical_bytes(), its length)``."""
        import hashlib

        msgs = request.messages
        k = common_prefix_len(self._messages, msgs)
        del self._messages[k:], self._states[k:], self._sizes[k:]
        if k:
            h, size = self._states[k - 1].copy(), self._sizes[k - 1]
        else:
            h, size = hashlib.sha256(self._HEAD), len(self._HEAD)
        for i in range(k, len(msgs)):
            raw = msgs[i].canonical().encode("utf-8")
            if i:
                h.update(b",")
                size += 1
            h.update(raw)
            size += len(raw)
            self._messages.append(msgs[i])
            self._states.append(h.copy())
            self._sizes.append(size)
        suffix = self._suffix(request)
        h.update(suffix)
        return h.hexdigest(), size + len(suffix)
