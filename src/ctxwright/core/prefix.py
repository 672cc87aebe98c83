"""The static prefix: system prompt + tool definitions, frozen for a whole session.

Provider rule protected: a prompt cache (OpenAI, Anthropic, DeepSeek, vLLM, llama.cpp)
only reuses the *longest byte-identical prefix* of a request. One changed byte in the
system prompt or one reordered tool invalidates everything after it, on every later call.
So the prefix is built once, serialized canonically, and any attempt to change it is an
error rather than a silent cache miss. Tool order is kept exactly as given: never sorted,
never filtered per turn.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ctxwright.core.messages import Message, canonical_json, sha256_text
from ctxwright.core.request import ToolSpec
from ctxwright.errors import PrefixFrozenError

_FROZEN_WHY = (
    "the static prefix (system prompt + tool definitions) is frozen for the session, because "
    "changing any byte of it makes the provider's prompt cache miss on every later call. "
    "Put changing information at the end of the trajectory (a user message or the status bar), "
    "or start a new session if the prefix really must change."
)


class Prefix:
    """System prompt and tools, byte-stable. Create with :meth:`build`.

    Not a frozen dataclass on purpose: dataclasses raise a bare ``FrozenInstanceError``;
    we raise :class:`PrefixFrozenError` with the reason and the fix.
    """

    __slots__ = ("_canonical", "_sha256", "_system_message", "system_prompt", "tools")
    system_prompt: str
    tools: tuple[ToolSpec, ...]
    _canonical: str | None
    _system_message: Message | None
    _sha256: str | None

    def __init__(self, system_prompt: str, tools: Iterable[ToolSpec] = ()) -> None:
        object.__setattr__(self, "system_prompt", system_prompt)
        object.__setattr__(self, "tools", tuple(tools))
        # computed on first use, then kept: the prefix never changes, and a long session asks
        # for both on every call (the ledger counts the canonical text; the system message
        # heads every request, and being the same object lets per-message caches hit)
        object.__setattr__(self, "_canonical", None)
        object.__setattr__(self, "_system_message", None)
        object.__setattr__(self, "_sha256", None)  # the same: every call's record holds it

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Prefix) and other.canonical() == self.canonical()

    def __hash__(self) -> int:
        return hash(self.canonical())

    def __repr__(self) -> str:
        return f"Prefix(system_prompt={self.system_prompt[:40]!r}..., tools={list(self.tool_names())})"

    @classmethod
    def build(cls, system_prompt: str, tools: Iterable[ToolSpec] = ()) -> Prefix:
        tools = tuple(tools)
        names = [t.name for t in tools]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate tool names in the prefix: {', '.join(dupes)}; each tool needs a unique name")
        return cls(system_prompt=system_prompt, tools=tools)

    def __setattr__(self, name: str, value: Any) -> None:
        raise PrefixFrozenError(f"cannot set Prefix.{name}: {_FROZEN_WHY}")

    def __delattr__(self, name: str) -> None:
        raise PrefixFrozenError(f"cannot delete Prefix.{name}: {_FROZEN_WHY}")

    def system_message(self) -> Message:
        msg = self._system_message
        if msg is None:
            msg = Message(role="system", content=self.system_prompt)
            object.__setattr__(self, "_system_message", msg)
        return msg

    def to_dict(self) -> dict[str, Any]:
        return {"system": self.system_prompt, "tools": [t.to_wire() for t in self.tools]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Prefix:
        return cls.build(data["system"], [ToolSpec.from_wire(t) for t in data.get("tools", [])])

    def canonical(self) -> str:
        text = self._canonical
        if text is None:
            text = canonical_json(self.to_dict())
            object.__setattr__(self, "_canonical", text)
        return text

    @property
    def sha256(self) -> str:
        digest = self._sha256
        if digest is None:
            digest = sha256_text(self.canonical())
            object.__setattr__(self, "_sha256", digest)
        return digest

    def tool_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tools)
