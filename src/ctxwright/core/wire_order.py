"""The order in which a server lays out a request's parts before its prefix cache sees them.

Why: a prompt cache reuses the longest identical prefix of the *rendered* prompt, not of the
JSON body. The body's key order (``messages`` before ``tools`` when keys are sorted) says
nothing about it; what matters is where the server puts each part:

* **chat completions** -- the chat template renders the tool definitions into the system turn,
  after the system prompt (Qwen's and gpt-oss's templates, llama.cpp's function-calling
  formats), then the conversation: ``system, tools, messages``. A changed tool list keeps the
  system prompt cached and re-prefills everything after it; an appended message keeps all.
* **Anthropic Messages** -- "cache prefixes are created in the following order: tools, system,
  then messages" (Anthropic's prompt caching guide): ``tools, system, messages``. A changed
  system prompt keeps the tools cached; a changed tool list re-prefills the system prompt too.
* **OpenAI Responses** -- ``instructions`` and ``tools`` are rendered ahead of the ``input``
  items (the harmony format's system and developer turns): ``system, tools, messages``.

One rule, read by everything that estimates reuse without the provider's own numbers: the
scripted backend's cache (``backends/scripted.py``) and the audit's reusable prefix
(``audit/compare.py``). An unknown API gets the chat-completions order, the one most servers
behind an OpenAI-compatible endpoint use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypeVar

T = TypeVar("T")

#: a part of a request as the server orders it; ``system`` is the system prompt (message 0 of a
#: ``ChatRequest``, ``system`` of an Anthropic body, ``instructions`` of a Responses body)
Part = Literal["system", "tools", "messages"]

CHAT: tuple[Part, ...] = ("system", "tools", "messages")
ANTHROPIC: tuple[Part, ...] = ("tools", "system", "messages")
RESPONSES: tuple[Part, ...] = ("system", "tools", "messages")


def wire_order(api: str | None) -> tuple[Part, ...]:
    """The order of ``api``'s parts on the wire. ``api`` is an API or a provider's name as the
    backends and usage shapes spell it (``Backend.name``, ``core/usage.py``): a name starting
    with ``anthropic`` is Anthropic's, one holding ``responses`` is the Responses API's, and any
    other (``chat``, ``openai``, ``llama.cpp``, ``None``) chat completions'."""
    name = (api or "").lower()
    if name.startswith("anthropic"):
        return ANTHROPIC
    if "responses" in name:
        return RESPONSES
    return CHAT


def arrange(api: str | None, *, system: Sequence[T], tools: Sequence[T], messages: Sequence[T]) -> list[T]:
    """The three parts' items, concatenated in ``api``'s wire order."""
    parts: dict[Part, Sequence[T]] = {"system": system, "tools": tools, "messages": messages}
    out: list[T] = []
    for part in wire_order(api):
        out.extend(parts[part])
    return out
