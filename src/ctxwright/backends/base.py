"""The one interface every model backend implements.

A backend receives a fully rendered :class:`ChatRequest` -- the harness, not the backend,
decides which bytes the model sees -- and returns a :class:`Completion`. Keeping the
interface this narrow is what lets the embedded model, any OpenAI-compatible server and
the scripted test backend run through the same agent loop.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ctxwright.core.request import ChatRequest, Completion


@runtime_checkable
class Backend(Protocol):
    """A model endpoint. ``count_tokens`` uses the model's own tokenizer when it has one."""

    name: str
    model: str

    def complete(self, request: ChatRequest) -> Completion: ...

    def count_tokens(self, text: str) -> int | None:
        """Tokens of ``text`` in the model's tokenizer, or ``None`` if it has none offline."""
        ...

    def close(self) -> None: ...
