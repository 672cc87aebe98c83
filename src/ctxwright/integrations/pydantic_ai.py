"""ctxwright under pydantic-ai (``pip install 'ctxwright[pydantic-ai]'``).

* :func:`recorded_model`: pydantic-ai's own ``OpenAIChatModel`` on an ``AsyncOpenAI`` whose
  ``http_client`` records every exchange (a
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
  (the recorder rewrites each request, shared :mod:`~ctxwright.integrations.compaction`): rarely and
  deeply, old tool results cleared at once and kept cleared, no orphan tool result, no split
  parallel batch. It works on the request's OpenAI messages, not on pydantic-ai's history (which
  stays whole), so it needs no copy of pydantic-ai's message mapping.
* ``recorded_model(..., null_content="")``: for llama-cpp-python's server, which answers the
  ``"content": null`` pydantic-ai sends with a tool call with HTTP 500.

pydantic-ai sends the agent's instructions as *several* system messages, the literal ones first
and the dynamic ones after them (its own split so that the literal part stays cacheable).
ctxwright's audit calls only the first message "the system prompt", so a changed dynamic
instruction is audited as ``history_edited`` of a ``system`` message (``msg#1``); the recorder
warns about that as a change of the system prompt, with pydantic-ai's fix (:data:`FIXES`). The
stored audit is the proxy's, unchanged.

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

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from ctxwright.errors import ConfigError
from ctxwright.integrations.compaction import WireCompactor
from ctxwright.integrations.recording import FrameworkRecorder, PrefixWarning
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
    (the recorder's ``null_content`` and ``compactor``). Returns the model and its recorder;
    close the recorder when done (it writes each call as it ends, so nothing is lost before).
    """
    if recorder is None:
        if db is None:
            raise ConfigError("recorded_model needs db= (the ctxwright store to record into) or recorder=")
        recorder = FrameworkRecorder(db, name=name, framework="pydantic-ai", on_warning=on_warning, fixes=FIXES)
    if null_content is not None:
        recorder.null_content = null_content
    if compactor is not None:
        recorder.compactor = compactor
    http_client = recorder.async_http_client()
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


__all__ = ["FIXES", "recorded_model"]
