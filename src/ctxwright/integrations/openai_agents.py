"""ctxwright under the OpenAI Agents SDK (``pip install 'ctxwright[openai-agents]'``).

Four pieces, all on the SDK's public extension points:

* :class:`CtxwrightProvider`, a ``ModelProvider`` (``RunConfig(model_provider=...)``): every
  ``Model`` it gives the Runner is the SDK's own ``OpenAIChatCompletionsModel`` on an
  ``AsyncOpenAI`` whose ``http_client`` records each exchange (:class:`FrameworkRecorder`:
  the proxy's recorder in process, the live per-call audit, one ctxwright proxy session per
  provider). ``ctxwright audit --proxy-session SID`` then reads the agent's calls as sent.
* :class:`FrozenInstructions`, a ``call_model_input_filter`` (``RunConfig``'s hook that sees
  each call's instructions and input just before it is sent): the fix for dynamic
  instructions. It sends the first call's instructions (or the ones given) byte-identical on
  every call, and appends what changed in them as a user message
  ``<context_update>...</context_update>`` after the history, where it stays on every later
  call -- so the prompt grows append-only and the provider's cache of it holds.
* :class:`CompactingFilter`, a ``call_model_input_filter`` that compacts rarely and deeply
  (:class:`~ctxwright.integrations.compaction.WireCompactor`: old tool results become
  placeholders, never an orphan result or a split batch). :func:`chain` runs several filters.
* :func:`deferred_tools`: an agent's many function tools behind ctxwright's two fixed tools,
  ``search_tools`` and ``call_tool`` (:mod:`ctxwright.integrations.deferred`), so the tool
  list the SDK sends is two schemas, byte-identical for the session.

Usage::

    provider = CtxwrightProvider("ctx.db", base_url=url, api_key=key, model="gpt-4.1-mini")
    filters = chain(FrozenInstructions(), CompactingFilter(trigger_tokens=60_000))
    config = RunConfig(model_provider=provider, call_model_input_filter=filters)
    tools, catalog = deferred_tools(many_function_tools)  # optional: two tools instead of many
    agent = Agent(name="helper", instructions="...", tools=tools)
    result = await Runner.run(agent, "question", run_config=config)
    print(provider.session_id)  # ctxwright audit --proxy-session <id>
    await provider.aclose()
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import copy
import inspect
import json
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from ctxwright.errors import ConfigError
from ctxwright.integrations.compaction import Cleared, WireCompactor, put_back, tail_reminder
from ctxwright.integrations.deferred import CALL_TOOL, SEARCH_TOOL, DeferredCatalog, FrameworkTool
from ctxwright.integrations.recording import FrameworkRecorder, PrefixWarning
from ctxwright.store.sessions import Store

try:
    from agents import FunctionTool, Model, ModelProvider, OpenAIChatCompletionsModel, Tool
    from agents.models.chatcmpl_converter import Converter
    from agents.run_config import CallModelData, ModelInputData
    from agents.tool_context import ToolContext
    from openai import AsyncOpenAI
except ImportError as exc:  # without the extra (tests/test_integration_openai_agents.py fakes it)
    raise ConfigError(
        f"ctxwright.integrations.openai_agents needs the OpenAI Agents SDK ({exc}): "
        "pip install 'ctxwright[openai-agents]'"
    ) from exc


class CtxwrightProvider(ModelProvider):
    """A ``ModelProvider`` whose models' calls are all recorded and audited as one session.

    ``db``: the store (a path, a ``postgresql://`` URL or a ``Store``). ``base_url``,
    ``api_key``: the OpenAI-compatible endpoint. ``model``: the model used when an agent names
    none. ``name``: what groups the calls into one ctxwright session (the same name again adds
    to it; a new random one by default). ``on_warning`` receives each frozen-prefix warning
    (default: printed to stderr, once per segment). ``recorder``: an existing
    :class:`FrameworkRecorder` instead (``db``, ``name``, ``on_warning`` then unused).
    ``null_content``: send an assistant message's ``"content": null`` (what the SDK sends with
    tool calls) as this text instead, on the recorder made or given -- by default ``""``, as
    llama-cpp-python's server answers the null with HTTP 500 and OpenAI and the other servers
    take either; ``None`` sends the null as it is. ``http_client_kwargs`` go to the recording ``httpx.AsyncClient`` (``event_hooks``,
    ``verify``...), ``client_kwargs`` to ``AsyncOpenAI`` (``max_retries``, ``timeout``...).
    Each call prints the proxy's one line on stderr, and the first where the session is stored
    (``quiet=True``: neither; on the recorder made here).
    """

    def __init__(
        self,
        db: str | Path | Store | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        model: str | None = None,
        name: str | None = None,
        on_warning: Callable[[PrefixWarning], None] | None = None,
        recorder: FrameworkRecorder | None = None,
        null_content: str | None = "",
        http_client_kwargs: dict[str, Any] | None = None,
        quiet: bool = False,
        **client_kwargs: Any,
    ) -> None:
        if recorder is None:
            if db is None:
                raise ConfigError("CtxwrightProvider needs db= (the ctxwright store to record into) or recorder=")
            recorder = FrameworkRecorder(db, name=name, framework="openai-agents", on_warning=on_warning, quiet=quiet)
            self._owns_recorder = True
        else:
            self._owns_recorder = False
        recorder.null_content = null_content
        self.recorder = recorder
        self.default_model = model
        # a local server takes any key; the SDK insists on one
        key = api_key or os.environ.get("OPENAI_API_KEY") or "not-needed"
        # openai 3 types ``http_client`` as an httpx2 client; it takes a legacy httpx one (the
        # recorder's) as well, at run time
        http_client = cast(Any, recorder.async_http_client(**(http_client_kwargs or {})))
        self.client = AsyncOpenAI(base_url=base_url, api_key=key, http_client=http_client, **client_kwargs)
        self._models: dict[str, Model] = {}

    def get_model(self, model_name: str | None) -> Model:
        name = model_name or self.default_model
        if not name:
            raise ConfigError("CtxwrightProvider: the agent names no model and the provider has no model= default")
        if name not in self._models:
            self._models[name] = OpenAIChatCompletionsModel(model=name, openai_client=self.client)
        return self._models[name]

    @property
    def session_id(self) -> str | None:
        """The recorded ctxwright session (``None`` before the first model call)."""
        return self.recorder.session_id

    @property
    def warnings(self) -> list[PrefixWarning]:
        """The frozen-prefix warnings said so far (one per segment)."""
        return self.recorder.warnings

    async def aclose(self) -> None:
        """Close the HTTP client and (if this provider made it) the recorder and its store."""
        await self.client.close()
        if self._owns_recorder:
            self.recorder.close()


def _changed(frozen: str, new: str) -> str:
    """The lines of ``new`` that differ from ``frozen`` (common leading and trailing lines cut);
    all of ``new`` when nothing of it is left (lines only removed)."""
    a, b = frozen.splitlines(), new.splitlines()
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    middle = b[head : len(b) - tail]
    return "\n".join(middle) if middle else new


def render_update(changed: str) -> str:
    """The default text of an instructions update: ``<context_update>...</context_update>``
    (:func:`~ctxwright.integrations.compaction.tail_reminder`, as every adapter sends it)."""
    return str(tail_reminder(changed)["content"])


@dataclass
class _AgentState:
    frozen: str | None
    last: str | None
    #: what the SDK's input was at the last call (to tell an extended history from a new one)
    seen: list[Any] = field(default_factory=list)
    #: each update message and how many of the SDK's items preceded it
    inserted: list[tuple[int, dict[str, Any]]] = field(default_factory=list)


class FrozenInstructions:
    """A ``call_model_input_filter`` that keeps each agent's instructions byte-identical.

    ``instructions``: the text to send on every call (default: each agent's instructions on
    its first call). When an agent's instructions (``Agent(instructions=callable)``) differ
    from the last call's, the lines that differ from the frozen text are appended after the
    history as a user message (``render``: how, default :func:`render_update`), and that
    message is put back at the same place on every later call, so what was sent before is
    never rewritten. State is per agent name; a history that is not the previous one extended
    (a new conversation) starts the agent's updates afresh, with the same frozen text.

    ``updates`` lists ``(agent name, text)`` of every update message added.
    """

    def __init__(self, instructions: str | None = None, *, render: Callable[[str], str] = render_update) -> None:
        self.instructions = instructions
        self.render = render
        self.updates: list[tuple[str, str]] = []
        self._agents: dict[str, _AgentState] = {}

    def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        given = data.model_data.instructions
        items = list(data.model_data.input)
        state = self._agents.get(data.agent.name)
        if state is None:
            frozen = self.instructions if self.instructions is not None else given
            state = self._agents[data.agent.name] = _AgentState(frozen=frozen, last=frozen)
        if len(items) < len(state.seen) or items[: len(state.seen)] != state.seen:
            state.inserted, state.last = [], state.frozen  # another conversation: its own updates
        if given != state.last:
            text = self.render(_changed(state.frozen or "", given or ""))
            state.inserted.append((len(items), {"role": "user", "content": text}))
            self.updates.append((data.agent.name, text))
        state.last, state.seen = given, items
        out: list[Any] = put_back(items, [(n, dict(message)) for n, message in state.inserted])
        return ModelInputData(input=out, instructions=state.frozen)


class CompactingFilter:
    """A ``call_model_input_filter`` that compacts the agent's history rarely and deeply
    (:class:`~ctxwright.integrations.compaction.WireCompactor`, one per agent name).

    Each call's items are converted to the chat messages the SDK will send (its own
    ``Converter``), the compactor decides which tool results become placeholders, and those
    results' ``function_call_output`` items get the placeholder as their output -- nothing else
    is touched, so no tool result loses its call and no parallel batch is split; a view that
    would break one of ctxwright's invariants is not sent (``refused``). Between two
    compactions every request extends the one before. ``compactor``: a factory (default:
    ``WireCompactor(trigger_tokens, keep_results=keep_results)``).
    """

    def __init__(
        self,
        trigger_tokens: int = 60_000,
        *,
        keep_results: int = 2,
        compactor: Callable[[], WireCompactor] | None = None,
    ) -> None:
        self._make = compactor or (lambda: WireCompactor(trigger_tokens, keep_results=keep_results))
        self.compactors: dict[str, WireCompactor] = {}

    @property
    def compactions(self) -> int:
        return sum(c.compactions for c in self.compactors.values())

    @property
    def ledger(self) -> list[Cleared]:
        """What each compaction cleared, and what the model lost with it, for every agent."""
        return [entry for c in self.compactors.values() for entry in c.ledger]

    @property
    def refused(self) -> list[str]:
        return [problem for c in self.compactors.values() for problem in c.refused]

    def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        compactor = self.compactors.get(data.agent.name)
        if compactor is None:
            compactor = self.compactors[data.agent.name] = self._make()
        items = list(data.model_data.input)
        wire: list[dict[str, Any]] = [dict(m) for m in Converter.items_to_messages(items)]
        if data.model_data.instructions:
            wire.insert(0, {"role": "system", "content": data.model_data.instructions})
        view = compactor(wire)
        sent = {m.get("tool_call_id"): m.get("content") for m in wire if m.get("role") == "tool"}
        cleared = {
            str(m["tool_call_id"]): m.get("content")
            for m in view
            if m.get("role") == "tool" and m.get("tool_call_id") in sent and m.get("content") != sent[m["tool_call_id"]]
        }
        if cleared:
            items = [_with_output(item, cleared) for item in items]
        return ModelInputData(input=items, instructions=data.model_data.instructions)


def _with_output(item: Any, cleared: dict[str, Any]) -> Any:
    """``item`` with its output replaced when it is a cleared ``function_call_output``."""
    if not isinstance(item, dict) or item.get("type") != "function_call_output":
        return item
    cid = item.get("call_id")
    return {**item, "output": cleared[cid]} if cid in cleared else item


Filter = Callable[[CallModelData[Any]], "ModelInputData | Awaitable[ModelInputData]"]


def chain(*filters: Filter) -> Callable[[CallModelData[Any]], Awaitable[ModelInputData]]:
    """One ``call_model_input_filter`` applying ``filters`` in order (each sees the one
    before's output), e.g. ``chain(FrozenInstructions(), CompactingFilter(60_000))``.
    :class:`FrozenInstructions` goes first: it tells a continued history from a new one by the
    SDK's own items, which a compaction before it would rewrite."""

    async def run(data: CallModelData[Any]) -> ModelInputData:
        model_data = data.model_data
        for f in filters:
            got = f(CallModelData(model_data=model_data, agent=data.agent, context=data.context))
            model_data = await got if inspect.isawaitable(got) else got
        return model_data

    return run


# -- deferred tools --------------------------------------------------------------------------------

#: the running ``call_tool``'s SDK context and event loop, for the deferred tool it runs (set by
#: the async ``call_tool``, read in the worker thread ``asyncio.to_thread`` copies it into)
_INVOKING: contextvars.ContextVar[tuple[ToolContext[Any], asyncio.AbstractEventLoop]] = contextvars.ContextVar(
    "ctxwright_openai_agents_invoking"
)


def _as_framework_tool(tool: FunctionTool, timeout_s: float | None) -> FrameworkTool:
    """``tool`` as the catalog indexes and calls it: its name, description and JSON Schema as
    the SDK has them, and a sync function running its ``on_invoke_tool`` on the agent's loop."""

    def run(**kwargs: Any) -> Any:
        arguments = json.dumps(kwargs, ensure_ascii=False)

        async def invoke(ctx: ToolContext[Any]) -> Any:  # the SDK types it Awaitable, not a coroutine
            return await tool.on_invoke_tool(ctx, arguments)

        invoking = _INVOKING.get(None)
        if invoking is None:  # called outside a run (catalog.call_tool by hand): a loop of its own
            ctx: ToolContext[Any] = ToolContext(
                context=None, tool_name=tool.name, tool_call_id="", tool_arguments=arguments
            )
            return asyncio.run(invoke(ctx))
        outer, loop = invoking
        ctx = copy.copy(outer)  # the run's context, usage and agent; this tool's name and arguments
        ctx.tool_name, ctx.tool_arguments = tool.name, arguments
        ctx._function_tool_arguments = None  # the SDK's prepared arguments were call_tool's
        future = asyncio.run_coroutine_threadsafe(invoke(ctx), loop)
        try:
            return future.result(timeout=timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"{tool.name} did not finish within {timeout_s} s") from None

    return FrameworkTool(tool.name, tool.description, tool.params_json_schema, run)


def deferred_tools(
    tools: Sequence[FunctionTool], *, timeout_s: float | None = None
) -> tuple[list[Tool], DeferredCatalog]:
    """``tools`` behind ctxwright's ``search_tools`` and ``call_tool``: ``(the two FunctionTools
    to give the agent, the DeferredCatalog holding every tool)`` (typed ``list[Tool]``, what
    ``Agent(tools=...)`` takes).

    ``Agent(tools=deferred_tools(many)[0])`` sends two tools on every call -- the names,
    descriptions and parameter schemas of ``catalog.specs``, byte-identical for the session
    (``strict_json_schema=False``: the schemas go out as ctxwright wrote them). ``search_tools``
    returns the best matches' full schemas (each tool's own ``params_json_schema``) as a tool
    result; ``call_tool`` checks the arguments against the named tool's schema and runs it. Every
    error (unknown name with the closest ones, arguments that do not match, broken JSON, the
    tool raising, ``timeout_s`` exceeded) is the structured JSON error the model reads, never an
    exception in the run.

    How a call runs: the SDK awaits ``call_tool``, which hands the model's raw arguments to the
    catalog in a worker thread (``asyncio.to_thread``: the catalog is synchronous, the loop stays
    free). The catalog validates them exactly as in a ctxwright session, then calls the tool's
    function, which schedules the SDK tool's own ``on_invoke_tool`` back on the agent's event
    loop (``run_coroutine_threadsafe``) and waits for it. So the SDK tool runs where it would
    have run directly -- same loop, same run context (a copy of ``call_tool``'s ``ToolContext``
    with the tool's name and arguments) -- and its result goes through the catalog's rendering.
    ``timeout_s`` limits each deferred tool (the worker stops waiting and cancels it).

    Not applied to the deferred tools: the SDK's own per-tool ``needs_approval``,
    ``is_enabled`` and tool guardrails (the SDK sees only ``call_tool``); put them on the agent
    or check inside the tool."""
    catalog = DeferredCatalog((_as_framework_tool(t, timeout_s) for t in tools), timeout_s=timeout_s)

    def invoker(name: str) -> Callable[[ToolContext[Any], str], Awaitable[str]]:
        async def invoke(ctx: ToolContext[Any], raw_arguments: str) -> str:
            token = _INVOKING.set((ctx, asyncio.get_running_loop()))  # copied into the worker thread
            try:
                return await asyncio.to_thread(catalog.run, name, raw_arguments or "{}", call_id=ctx.tool_call_id)
            finally:
                _INVOKING.reset(token)

        return invoke

    out: list[Tool] = []
    for name in (SEARCH_TOOL, CALL_TOOL):
        wire = catalog.specs[name].to_wire()["function"]
        out.append(
            FunctionTool(
                name=wire["name"],
                description=wire["description"],
                params_json_schema=wire["parameters"],
                on_invoke_tool=invoker(name),
                strict_json_schema=False,
            )
        )
    return out, catalog


__all__ = [
    "CompactingFilter",
    "CtxwrightProvider",
    "FrozenInstructions",
    "chain",
    "deferred_tools",
    "render_update",
]
