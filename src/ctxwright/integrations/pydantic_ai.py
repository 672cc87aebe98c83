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
* :func:`deferred_toolset`: an agent with many tools gets two, ``search_tools`` and ``call_tool``
  (:mod:`~ctxwright.integrations.deferred`), so the tool list every call sends is small and
  byte-identical for the session; the model finds a tool's schema with ``search_tools`` (a tool
  result, appended to the history) and runs the tool with ``call_tool``.
* ``"content": null``, what pydantic-ai sends with a tool call, goes out as ``""`` by default
  (``null_content=""``): llama-cpp-python's server answers the null with HTTP 500, and OpenAI
  and the other servers take either; ``null_content=None`` sends the null as it is.

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

import asyncio
import contextvars
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

from ctxwright.errors import ConfigError
from ctxwright.integrations.compaction import WireCompactor
from ctxwright.integrations.deferred import CALL_TOOL, SEARCH_TOOL, DeferredCatalog, FrameworkTool
from ctxwright.integrations.recording import FrameworkRecorder, PrefixWarning
from ctxwright.store.sessions import Store

try:
    from openai import AsyncOpenAI
    from pydantic_ai import RunContext, Tool
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.toolsets import FunctionToolset
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
    null_content: str | None = "",
    compactor: WireCompactor | None = None,
    quiet: bool = False,
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
    message's ``"content": null`` as this text instead (default ``""``: llama-cpp-python's
    server rejects the null; ``None`` sends it as it is), on the recorder made or given.
    ``compactor``: a ``WireCompactor`` that compacts what each call
    sends, ctxwright's invariants kept (one per conversation: its memory of what it cleared is
    that conversation's). Both rewrite the request before it is recorded
    (the recorder's ``null_content`` and ``compactor``). Each call prints the proxy's one line on
    stderr, and the first where the session is stored (``quiet=True``: neither; on the recorder made here). Returns the model and its recorder;
    close the recorder when done (it writes each call as it ends, so nothing is lost before).
    """
    if recorder is None:
        if db is None:
            raise ConfigError("recorded_model needs db= (the ctxwright store to record into) or recorder=")
        recorder = FrameworkRecorder(
            db, name=name, framework="pydantic-ai", on_warning=on_warning, fixes=FIXES, quiet=quiet
        )
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


#: the run context and event loop of the ``call_tool`` call in progress, for the deferred tool it runs
_RUN: contextvars.ContextVar[tuple[RunContext[Any], asyncio.AbstractEventLoop]] = contextvars.ContextVar(
    "ctxwright_pydantic_ai_run"
)


def _framework_tool(tool: Tool[Any], timeout_s: float | None) -> FrameworkTool:
    """``tool`` as the catalog indexes and calls it: pydantic-ai's own name, description and
    parameter schema (its ``ToolDefinition``), and a function that runs it as pydantic-ai would."""
    tool_def = tool.tool_def
    schema = tool.function_schema

    def run(**arguments: Any) -> Any:
        # called after ctxwright checked the arguments against the JSON Schema: pydantic-ai's own
        # validator converts them (models, dates...), then the tool runs as pydantic-ai runs it
        current = _RUN.get(None)
        if current is None:  # catalog.call_tool called directly, outside an agent run
            if schema.takes_ctx:
                raise RuntimeError(f"{tool_def.name} takes pydantic-ai's RunContext: call it through an agent run")
            args = schema.validator.validate_python(arguments)
            return asyncio.run(asyncio.wait_for(schema.call(args, cast(Any, None)), timeout_s))
        # in the worker thread of a ``call_tool`` call (see deferred_toolset): on the agent's loop
        ctx, loop = current
        args = schema.validator.validate_python(arguments, context=ctx.validation_context)
        future = asyncio.run_coroutine_threadsafe(schema.call(args, ctx), loop)
        try:
            return future.result(timeout=timeout_s)
        except TimeoutError:
            future.cancel()
            raise TimeoutError(f"{tool_def.name} did not finish within {timeout_s} s") from None

    return FrameworkTool(tool_def.name, tool_def.description or "", tool_def.parameters_json_schema, run)


def deferred_toolset(
    tools: Sequence[Tool[Any] | Callable[..., Any]], *, timeout_s: float | None = None
) -> tuple[FunctionToolset[Any], DeferredCatalog]:
    """Many pydantic-ai tools behind ctxwright's two: ``search_tools`` and ``call_tool``.

    ``tools``: ``pydantic_ai.Tool`` objects or plain functions (``Tool(func)``: name, docstring
    and schema as pydantic-ai derives them; a ``RunContext`` first argument is supported).
    Returns a ``FunctionToolset`` of exactly two tools, with the names, descriptions and JSON
    parameter schemas of :attr:`DeferredCatalog.specs` (``strict`` off, so the OpenAI model sends
    them as given), and the :class:`DeferredCatalog` behind them. Give the agent the toolset
    (``Agent(model, toolsets=[toolset])``) instead of the tools: the tool list of every request is
    then these two, byte-identical for the session, and the model finds a tool's full schema with
    ``search_tools`` (a tool result, appended to the history) and runs it with ``call_tool``.

    ``call_tool`` checks the arguments against the tool's JSON Schema, then pydantic-ai's own
    validator converts them and the tool runs as pydantic-ai runs it (``FunctionSchema.call``: a
    sync function in a worker thread, an async one awaited). The catalog is synchronous, so the
    call runs in a worker thread that submits the tool's coroutine to the agent's own event loop
    and waits for it -- an async tool keeps its loop-bound resources (HTTP clients...), and the loop
    is free while it waits. (``catalog.call_tool`` called directly, outside a run, runs the tool
    with ``asyncio.run``; a tool taking a ``RunContext`` then gives an error.) ``timeout_s``: each
    deferred call's limit: past it the model gets a structured ``TimeoutError`` and an async tool
    is cancelled (a sync one cannot be: its thread runs on, its result dropped). Not carried
    over from a ``Tool``: its ``prepare``, ``args_validator``, ``max_retries``, approval and
    deferral; a tool that raises (``ModelRetry`` included) gives the model ctxwright's structured
    error instead.
    """
    wrapped = [t if isinstance(t, Tool) else Tool(t) for t in tools]
    catalog = DeferredCatalog([_framework_tool(t, timeout_s) for t in wrapped], timeout_s=timeout_s)
    wire = {name: spec.to_wire()["function"] for name, spec in catalog.specs.items()}

    def search_tools(query: str, limit: int = 5) -> str:
        return catalog.search_tools(query, limit)

    async def call_tool(ctx: RunContext[Any], name: str, arguments: dict[str, Any] | None = None) -> str:
        _RUN.set((ctx, asyncio.get_running_loop()))
        run = contextvars.copy_context().run
        return await asyncio.get_running_loop().run_in_executor(None, run, catalog.call_tool, name, arguments)

    two: list[Tool[Any]] = []
    for name, func, takes_ctx in ((SEARCH_TOOL, search_tools, False), (CALL_TOOL, call_tool, True)):
        tool: Tool[Any] = Tool.from_schema(
            func, name, wire[name]["description"], wire[name]["parameters"], takes_ctx=takes_ctx
        )
        tool.strict = False  # sent as given: the OpenAI model would otherwise rewrite a strict-compatible schema
        two.append(tool)
    return FunctionToolset(two), catalog


__all__ = ["FIXES", "deferred_toolset", "recorded_model"]
