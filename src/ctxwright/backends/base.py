"""The one interface every model backend implements: the abstract base class :class:`Backend`.

A backend receives a fully rendered :class:`ChatRequest` -- the harness, not the backend,
decides which bytes the model sees -- and returns a :class:`Completion`. Keeping the
interface this narrow is what lets the embedded model, any OpenAI-compatible server and
the scripted test backend run through the same agent loop.

Everything else the harness asks of a backend is part of the contract too, with a default,
so no caller probes an object with ``getattr`` or inspects a signature:

* ``complete(request, *, on_event=None)`` -- **abstract**, the one method a backend must
  write. ``on_event`` is the harness's progress sink (retries, streamed tokens); every
  backend accepts it, and one with nothing to report ignores it;
* ``name`` and ``model`` -- required attributes (a class attribute and, usually, one set
  in ``__init__``): what the session records it ran on, and what a resume checks;
* ``count_tokens(text)`` -- default ``None``: no tokenizer offline;
* ``context_window`` -- default ``None``: the window is not known (the compaction layers
  then plan for a served model's 128,000 tokens);
* ``fork()`` -- default ``self``: for a stateless backend a second request changes
  nothing; a backend whose state a side request would disturb returns a second instance;
* ``token_counter()`` -- default: the backend's own tokenizer when ``count_tokens`` answers,
  else the best offline fallback (``core/tokens.py``);
* ``recipe_record()`` -- default: the window, when known; what a resumed session needs to
  build this backend again;
* ``bind_lineage(root_session_id)`` -- default: ignored; the harness tells the backend
  which session lineage it serves (the root session's id: a sub-agent's is its parent's), so a
  backend that sends a routing key (``cache/routing.py``) keeps one key for the lineage;
* ``close()`` -- default: nothing to release;
* ``null_content`` -- default ``"empty"``: how a session started on this backend sends an
  assistant turn without text (``core/render.py``); ``"empty"`` (``"content": ""``) is the
  form every server takes, ``"omit"`` (no key on a tool-call turn) is cheaper where the
  server accepts it.

A backend of your own subclasses :class:`Backend`::

    from ctxwright.backends.base import Backend
    from ctxwright.core.messages import Message, Usage
    from ctxwright.core.request import ChatRequest, Completion

    class Echo(Backend):
        name = "echo"

        def __init__(self) -> None:
            self.model = "echo-1"

        def complete(self, request: ChatRequest, *, on_event=None) -> Completion:
            text = request.messages[-1].content or ""
            return Completion(Message(role="assistant", content=text), Usage(), "stop", self.model)

    Harness(system="...", tools=[...], backend=Echo())
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from ctxwright.core.progress import EventSink
from ctxwright.core.render import CURRENT_NULL_CONTENT, NullContent
from ctxwright.core.request import ChatRequest, Completion
from ctxwright.core.tokens import TokenCounter

__all__ = ["Backend", "EventSink"]  # EventSink: core/progress.py, re-exported for backend authors

#: The progress callback a backend reports through takes one typed event
#: (``core/progress.py``): ``Retry``, ``StreamFallback``, ``Token``.


class Backend(ABC):
    """A model endpoint (the module docstring lists what is abstract and what has a default)."""

    #: the backend's kind, recorded with the session (``"embedded"``, ``"openai"``, ...): a
    #: resume recreates ``embedded`` and ``openai`` itself and needs the object for any other
    name: str
    #: the model's name, recorded with every call and checked on resume
    model: str
    #: the wire form of an assistant turn without text that a session started on this backend
    #: records (``core/render.py``); a resumed session keeps the form it recorded
    null_content: NullContent = CURRENT_NULL_CONTENT

    @abstractmethod
    def complete(self, request: ChatRequest, *, on_event: EventSink | None = None) -> Completion:
        """Send one rendered request and return the model's reply, or raise a
        :class:`~ctxwright.errors.BackendError`. ``on_event`` receives what happens while the
        call runs (retries, streamed text): the harness passes its progress callback, so a
        slow or retried call is visible while it lasts; a backend with nothing to report
        ignores it."""

    def count_tokens(self, text: str) -> int | None:
        """Tokens of ``text`` in the model's own tokenizer, or ``None`` if it has none offline
        (a served model): the ledger then counts with the offline fallback and says so."""
        return None

    @property
    def context_window(self) -> int | None:
        """The model's window in tokens, or ``None`` if unknown: what the compaction layers
        and tool deferral plan for. An API does not say it, so a served model's is given."""
        return None

    def fork(self) -> Backend:
        """A backend for side requests (summaries, sub-agents) that leaves this one's state
        intact. Default ``self``: a separate request to a stateless endpoint does not disturb
        the session's cached prefix. A backend that keeps the last prompt's state in-process
        (the embedded model's KV cache) returns a second instance."""
        return self

    def token_counter(self) -> TokenCounter:
        """The counter the ledger, the audit and the compaction layers count with: this
        backend's own tokenizer when :meth:`count_tokens` answers, else the best offline
        fallback -- so a report never passes an estimate off as the model's count."""
        try:
            probe = self.count_tokens("hello")
        except Exception:  # a tokenizer that fails is no tokenizer: fall back
            probe = None
        if probe is None:
            return TokenCounter()
        return TokenCounter(lambda t: self.count_tokens(t) or 0, source=f"{self.name} tokenizer")

    def recipe_record(self) -> dict[str, Any]:
        """What a session stores (``Session.meta``) to build this backend again on resume:
        here the window, when known. Never a credential: a backend that has one leaves it
        out or redacts it."""
        window = self.context_window
        return {"window": window} if isinstance(window, int) else {}

    def bind_lineage(self, root_session_id: str) -> None:  # noqa: B027 -- a default on purpose
        """The root session id of the lineage this backend now serves (a sub-agent passes its
        parent's root). Default: ignored; a backend that routes by a session key
        (``prompt_cache_key``, a router's session header) makes its key from it."""

    def close(self) -> None:  # noqa: B027 -- a default on purpose: most backends hold nothing
        """Release what the backend holds (a loaded model, a connection pool)."""
