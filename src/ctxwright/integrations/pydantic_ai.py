"""ctxwright under pydantic-ai (``pip install 'ctxwright[pydantic-ai]'``).

* :func:`recorded_model`: pydantic-ai's own ``OpenAIChatModel`` on an ``AsyncOpenAI`` whose
  ``http_client`` records every exchange (:class:`PydanticAIRecorder`, a
  :class:`~ctxwright.integrations.recording.FrameworkRecorder`: the proxy's recorder in process,
  the live per-call audit, one ctxwright proxy session per ``name``). Every model call the agent
  makes -- tool steps, output retries -- is then a row of that session, as the bytes were sent,
  and ``ctxwright audit --proxy-session SID`` reads it.
* The frozen prefix: pydantic-ai (2.7x) has the fix built in, so the adapter does not copy or
  patch anything. A dynamic instruction registered as
  ``@agent.instructions(name="clock", on_change="append")`` keeps its *first* value in the
  system prompt and sends each later change as a system message appended after the history
  (``<pyai:context id="agent:clock">...``), where it stays: the prompt grows append-only and the
  provider's cache of it holds. A plain ``@agent.instructions`` function (``on_change="rewrite"``,
  the default) is re-rendered into the system prompt on every call instead, so every call whose
  text differs misses the cache from that byte on -- the recorder says so once, naming the fix.
* ``recorded_model(..., compactor=WireCompactor(...))``: compaction of what each call sends
  (:class:`WireRewriteTransport`, shared :mod:`~ctxwright.integrations.compaction`): rarely and
  deeply, old tool results cleared at once and kept cleared, no orphan tool result, no split
  parallel batch. It works on the request's OpenAI messages, not on pydantic-ai's history (which
  stays whole), so it needs no copy of pydantic-ai's message mapping.
* ``recorded_model(..., null_content="")``: for llama-cpp-python's server, which answers the
  ``"content": null`` pydantic-ai sends with a tool call with HTTP 500.

Why the recorder is a subclass: pydantic-ai sends the agent's instructions as *several* system
messages, the literal ones first and the dynamic ones after them (its own split so that the
literal part stays cacheable). ctxwright's audit calls only the first message "the system
prompt", so a changed dynamic instruction is audited as ``history_edited`` of a ``system``
message (``msg#1``), which :class:`FrameworkRecorder` would not warn about.
:class:`PydanticAIRecorder` warns about that too, as a change of the system prompt, with
pydantic-ai's fix. The stored audit is the proxy's, unchanged.

Usage::

    model, recorder = recorded_model("ctx.db", base_url=url, api_key=key, model="gpt-4.1-mini")
    agent = Agent(model, instructions="You are ...")

    @agent.instructions(name="clock", on_change="append")
    def clock() -> str:
        return f"It is {datetime.now():%H:%M}."

    result = await agent.run("question")
    print(recorder.session_id)  # ctxwright audit --proxy-session <id>
    recorder.close()
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import httpx

from ctxwright.errors import ConfigError
from ctxwright.integrations.compaction import WireCompactor
from ctxwright.integrations.recording import AsyncRecordingTransport, FrameworkRecorder, PrefixWarning
from ctxwright.proxy.recorder import RecordedExchange
from ctxwright.store.sessions import Store

try:
    from openai import AsyncOpenAI
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ConfigError(
        f"ctxwright.integrations.pydantic_ai needs pydantic-ai's OpenAI model ({exc}): "
        "pip install 'ctxwright[pydantic-ai]'"
    ) from exc

#: what a pydantic-ai user can do about each change of the frozen prefix
FIXES = {
    "system_changed": (
        "register the changing instruction as @agent.instructions(name='...', on_change='append') "
        "(or return InstructionPart(text, name='...', on_change='append')): pydantic-ai then keeps its first "
        "value in the system prompt and appends each change after the history"
    ),
    "tools_changed": (
        "register every tool once, in one fixed order, for the whole run; a prepare function that drops or "
        "rewords tools per step changes the tool list"
    ),
}
_SEGMENTS = {"system_changed": "system prompt", "tools_changed": "tool list"}


class PydanticAIRecorder(FrameworkRecorder):
    """A :class:`FrameworkRecorder` that knows pydantic-ai's system messages.

    It warns once per segment, as its base does, and also when a call edits a ``system``
    message after the first one (pydantic-ai's dynamic instructions), which it names a change
    of the system prompt; the fix named is pydantic-ai's (:data:`FIXES`).
    """

    def __init__(self, db: str | Path | Store, **kwargs: Any) -> None:
        kwargs.setdefault("framework", "pydantic-ai")
        super().__init__(db, **kwargs)

    def _observe(self, rec: RecordedExchange) -> None:
        cause = rec.audit.get("cause")
        if cause == "history_edited" and rec.audit.get("role") == "system":
            cause = "system_changed"  # a dynamic instruction, re-rendered into a later system message
        if cause not in _SEGMENTS or cause in self._said:
            return
        self._said.add(cause)
        d = rec.audit.get("first_divergence")
        offset = d.get("byte_offset") if isinstance(d, dict) else None
        warning = PrefixWarning(rec.session_id, rec.call_index, cause, _SEGMENTS[cause], offset, FIXES[cause])
        self.warnings.append(warning)
        if self._on_warning is not None:
            self._on_warning(warning)
        else:
            import sys

            print(warning, file=sys.stderr, flush=True)


def fill_null_content(body: bytes, text: str) -> bytes | None:
    """``body`` (a chat-completions request) with each assistant message's ``"content": null``
    sent as ``text``; ``None`` when there is none (the body then goes unchanged)."""
    return _rewrite(body, text, None)


def _rewrite(body: bytes, null_content: str | None, compactor: WireCompactor | None) -> bytes | None:
    """The request body to send instead of ``body``, or ``None`` to send it unchanged. Serialised
    as the ``openai`` SDK does (compact, UTF-8), so what is not rewritten keeps its bytes."""
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    messages = obj.get("messages") if isinstance(obj, dict) else None
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        return None
    out: list[dict[str, Any]] = messages
    if null_content is not None:
        out = [
            {**m, "content": null_content} if m.get("role") == "assistant" and m.get("content", 0) is None else m
            for m in out
        ]
    if compactor is not None:
        out = compactor(out)
    if out == messages:
        return None
    obj["messages"] = out
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class WireRewriteTransport(httpx.AsyncBaseTransport):
    """Rewrites each chat-completions request's messages, then hands it to ``inner`` (the
    recorder's transport), so the recording is what was sent.

    ``null_content``: an assistant message's ``"content": null`` (what pydantic-ai sends with
    tool calls, as OpenAI documents) goes as this text instead, for servers that reject the null
    (llama-cpp-python's answers it with HTTP 500). ``compactor``: a
    :class:`~ctxwright.integrations.compaction.WireCompactor` decides what each request sends --
    nothing changes until the request passes its trigger, then old tool results become
    placeholders at once and stay so, and a view that would orphan a tool result or split a
    parallel batch is not sent (ctxwright's invariants). pydantic-ai's own history stays whole:
    the compaction is of what is sent, so the next request rebuilt from the whole history is
    compacted the same way and extends the one before.
    """

    def __init__(
        self,
        inner: httpx.AsyncBaseTransport,
        *,
        null_content: str | None = None,
        compactor: WireCompactor | None = None,
    ) -> None:
        self.inner, self.null_content, self.compactor = inner, null_content, compactor

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith("/chat/completions"):
            new = _rewrite(await request.aread(), self.null_content, self.compactor)
            if new is not None:
                headers = [(k, v) for k, v in request.headers.raw if k.lower() != b"content-length"]
                request = httpx.Request(
                    request.method, request.url, headers=headers, content=new, extensions=request.extensions
                )
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def recorded_model(
    db: str | Path | Store | None = None,
    *,
    base_url: str,
    model: str,
    api_key: str | None = None,
    name: str | None = None,
    on_warning: Callable[[PrefixWarning], None] | None = None,
    recorder: FrameworkRecorder | None = None,
    settings: Any = None,
    null_content: str | None = None,
    compactor: WireCompactor | None = None,
    **client_kwargs: Any,
) -> tuple[OpenAIChatModel, FrameworkRecorder]:
    """pydantic-ai's ``OpenAIChatModel`` for ``model`` at ``base_url``, every call recorded.

    ``db``: the store to record into (a path, a ``postgresql://`` URL or a ``Store``).
    ``name``: what groups the calls into one ctxwright session (the same name again adds to it;
    a new random one by default). ``on_warning`` receives each frozen-prefix warning (default:
    printed to stderr, once per segment). ``recorder``: an existing recorder instead (``db``,
    ``name`` and ``on_warning`` then unused; e.g. one session for several agents). ``api_key``:
    default ``OPENAI_API_KEY``, else a placeholder (local servers need none).
    ``settings`` are the model's default ``ModelSettings``; ``client_kwargs`` go to
    ``AsyncOpenAI`` (``max_retries``, ``timeout``...). ``null_content``: send an assistant
    message's ``"content": null`` as this text instead (``""`` for llama-cpp-python's server,
    which rejects the null). ``compactor``: a ``WireCompactor`` that compacts what each call
    sends, ctxwright's invariants kept (one per conversation: its memory of what it cleared is
    that conversation's). Both rewrite the request before it is recorded
    (:class:`WireRewriteTransport`). Returns the model and its recorder;
    close the recorder when done (it writes each call as it ends, so nothing is lost before).
    """
    if recorder is None:
        if db is None:
            raise ConfigError("recorded_model needs db= (the ctxwright store to record into) or recorder=")
        recorder = PydanticAIRecorder(db, name=name, on_warning=on_warning)
    if null_content is None and compactor is None:
        http_client = recorder.async_http_client()
    else:
        inner = AsyncRecordingTransport(recorder, httpx.AsyncHTTPTransport())
        rewrite = WireRewriteTransport(inner, null_content=null_content, compactor=compactor)
        http_client = httpx.AsyncClient(transport=rewrite)
    client = AsyncOpenAI(
        base_url=base_url,
        # OPENAI_API_KEY as the SDK reads it; local servers take any key, but the SDK insists on one
        api_key=api_key or os.environ.get("OPENAI_API_KEY") or "not-needed",
        # openai 3 types http_client as an httpx2 client; a legacy httpx one (the recorder's) is
        # its documented runtime escape hatch, used the same way by pydantic-ai's own providers
        http_client=cast(Any, http_client),
        **client_kwargs,
    )
    chat = OpenAIChatModel(model, provider=OpenAIProvider(openai_client=client), settings=settings)
    return chat, recorder


__all__ = ["FIXES", "PydanticAIRecorder", "WireRewriteTransport", "fill_null_content", "recorded_model"]
