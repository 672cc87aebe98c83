"""The backend of a context driven by the caller's own loop.

When a loop of yours calls the model (``ctx.request()`` -> your client -> ``ctx.record(reply)``),
ctxwright never calls it itself: it only needs the model's name for the session's record and
a token count (offline, ``core/tokens.py``) for the ledger and the compaction trigger. The
mechanisms that would call the model on their own -- a sub-agent (``delegate``), LLM summaries
-- are refused with a context of this kind; pass a real backend to ``Context(backend=...)``
for those.
"""

from __future__ import annotations

from ctxwright.backends.base import Backend, EventSink
from ctxwright.core.render import CURRENT_NULL_CONTENT, NULL_CONTENT_FORMS, NullContent
from ctxwright.core.request import ChatRequest, Completion
from ctxwright.errors import BackendUnavailable

__all__ = ["EXTERNAL", "ExternalBackend"]

EXTERNAL = "external"


class ExternalBackend(Backend):
    """Stands for the caller's model: a name, a window, no calls of its own.

    ``null_content``: how the requests send an assistant turn without text (``core/render.py``).
    ctxwright cannot see which server your client talks to, so the default is ``"empty"``
    (``"content": ""``, which every server takes); ``"omit"`` leaves the key out of a tool-call
    turn, for a server that accepts that (OpenAI): the ``openai`` SDK then spends less CPU on
    every request."""

    name = EXTERNAL

    def __init__(
        self,
        model: str | None = None,
        context_window: int | None = None,
        *,
        null_content: NullContent = CURRENT_NULL_CONTENT,
    ) -> None:
        if null_content not in NULL_CONTENT_FORMS:
            raise ValueError(f"null_content={null_content!r}: expected one of {', '.join(NULL_CONTENT_FORMS)}")
        self.model = model or EXTERNAL
        self._window = context_window
        self.null_content = null_content

    @property
    def context_window(self) -> int | None:
        return self._window

    def complete(self, request: ChatRequest, *, on_event: EventSink | None = None) -> Completion:
        raise BackendUnavailable(
            "this context is driven by your own loop and has no model of its own to call: pass "
            "backend= (an OpenAIBackend, EmbeddedBackend or your Backend) to Context for delegate or LLM summaries"
        )
