"""ctxwright under a LangChain v1 agent (``create_agent``): every model call recorded and
audited, a middleware that keeps the system prompt frozen, and one that compacts tool results
without breaking the cache or an invariant (``pip install 'ctxwright[langchain]'``).

Three pieces, each usable alone::

    from langchain.agents import create_agent
    from ctxwright.integrations.langchain import CompactToolResults, FrozenSystemPrompt, recorded_chat_model

    model, recorder = recorded_chat_model("ctx.db", model="gpt-4.1-mini", name="support-bot")
    agent = create_agent(model, tools=[...], system_prompt="...",
                         middleware=[my_dynamic_prompt, FrozenSystemPrompt(),
                                     CompactToolResults(trigger_tokens=60_000)])
    agent.invoke({"messages": [{"role": "user", "content": "..."}]})
    print(recorder.session_id)  # ctxwright audit --proxy-session <id>
    recorder.close()

:func:`recorded_chat_model` builds ``langchain_openai.ChatOpenAI`` on the ``httpx`` clients of a
:class:`~ctxwright.integrations.recording.FrameworkRecorder`: LangChain's OpenAI model calls the
official ``openai`` SDK, which sends through those clients, so what is recorded is the bytes the
provider received (after every middleware, LangChain's message conversion and the SDK), not
LangChain's objects. The calls form one ctxwright proxy session named ``name``; each is audited
live (``first``, ``append``, ``system_changed`` ...) and read back by ``ctxwright audit
--proxy-session``, ``report --proxy-session`` and the CI gate with the same numbers.

:class:`FrozenSystemPrompt` is the fix for the commonest cache breaker in LangChain agents: a
``@dynamic_prompt`` middleware (or any ``wrap_model_call`` that overrides ``system_message``)
that puts the time, the user's state or a TODO list into the system prompt. The system prompt
is the first thing in the request, so changing one byte of it loses the provider's cached
prefix for the whole conversation on every call. The middleware sends the first call's system
prompt (or the one given) byte-identical on every call and moves what changed into a user
message appended after the history; that message is also added to the agent's state (it is
returned with the model's answer, before it), so the next call sends it again in the same place
and every call stays an append of the one before. A new note is appended only when the
effective prompt changed since the last one. It must run *inside* the middleware that changes
the prompt: LangChain composes ``wrap_model_call`` with the first in the list outermost, so put
it **after** them in ``middleware=[...]``. The note is the adapters' shared tail reminder
(``<context_update>...</context_update>``, :func:`~ctxwright.integrations.compaction.tail_reminder`).

:class:`CompactToolResults` is ctxwright's compaction as a middleware (the adapters' shared
:class:`~ctxwright.integrations.compaction.WireCompactor`): rarely and deeply, invariants kept,
a loss ledger; it changes what is sent, never the agent's state.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxwright.errors import ConfigError
from ctxwright.integrations.compaction import Cleared, WireCompactor, tail_reminder
from ctxwright.integrations.deferred import CALL_TOOL, SEARCH_TOOL, DeferredCatalog, FrameworkTool
from ctxwright.integrations.recording import (
    FrameworkRecorder,
    PrefixWarning,
)

_INSTALL = "pip install 'ctxwright[langchain]'"

try:  # absolute imports: the top-level ``langchain`` package, never this module
    from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
    from langchain_core.messages import (
        AnyMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
        convert_to_openai_messages,
    )
    from langchain_core.tools import BaseTool, StructuredTool
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langchain_openai import ChatOpenAI
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ConfigError(
        f"ctxwright.integrations.langchain needs langchain and langchain-openai ({exc.name} is missing): {_INSTALL}"
    ) from exc

if TYPE_CHECKING:
    from ctxwright.store.sessions import Store

#: the key, in a note's ``additional_kwargs`` (never sent), holding the whole prompt it stands for
NOTE_KEY = "ctxwright_system_prompt"
#: how a note opens that replaces the system prompt from one line on (``{line}``: 1-based)
REPLACES = "Updated instructions (they replace the system prompt's, from its line {line} on):\n"
#: the note when the prompt is the frozen one again
RESTORED = "The system prompt's instructions apply again, as written there."


def recorded_chat_model(
    db: str | Path | Store | None = None,
    *,
    model: str,
    base_url: str | None = None,
    api_key: str | None = None,
    name: str | None = None,
    on_warning: Callable[[PrefixWarning], None] | None = None,
    recorder: FrameworkRecorder | None = None,
    null_content: str | None = "",
    quiet: bool = False,
    **chat_options: Any,
) -> tuple[ChatOpenAI, FrameworkRecorder]:
    """A ``ChatOpenAI`` whose every call (sync or async, streamed or not) is recorded into
    ``db`` as one ctxwright session, and the recorder (:meth:`FrameworkRecorder.close` it when
    done; ``recorder.session_id`` names the session after the first call).

    ``name`` groups the calls (the same name again adds to the same session; a new random one
    by default). ``on_warning`` receives the frozen-prefix warnings (default: stderr, once per
    segment). ``recorder``: an existing recorder instead (``db``, ``name``, ``on_warning``
    unused; e.g. one session for several models). ``null_content``: send an assistant
    message's ``"content": null`` (what LangChain sends with tool calls) as this text instead,
    on the recorder made or given -- by default ``""``, as llama-cpp-python's server answers the
    null with HTTP 500 and OpenAI and the other servers take either; ``None`` sends the null as
    it is. The recording is what was sent. Each call prints the proxy's one line on stderr, and
    the first where the session is stored (``quiet=True``: neither; on the recorder made here). ``chat_options`` go to ``ChatOpenAI`` unchanged (``temperature``,
    ``max_tokens``, ``max_retries``, ``streaming`` ...); ``base_url`` / ``api_key`` default to
    the ``openai`` SDK's environment variables as ``ChatOpenAI`` reads them.
    """
    owned = recorder is None
    if recorder is None:
        if db is None:
            raise ConfigError("recorded_chat_model needs db= (the ctxwright store to record into) or recorder=")
        recorder = FrameworkRecorder(db, name=name, framework="langchain", on_warning=on_warning, quiet=quiet)
    options: dict[str, Any] = dict(chat_options)
    if base_url is not None:
        options["base_url"] = base_url
    if api_key is not None:
        options["api_key"] = api_key
    recorder.null_content = null_content
    sync_client, async_client = recorder.http_client(), recorder.async_http_client()
    try:
        chat = ChatOpenAI(model=model, http_client=sync_client, http_async_client=async_client, **options)
    except BaseException:
        sync_client.close()
        if owned:
            recorder.close()
        raise
    return chat, recorder


def note_text(frozen: str | None, current: str) -> str:
    """What a note says when the system prompt sent is ``frozen`` and the one meant is
    ``current``: the addition alone when ``current`` only adds to ``frozen``; otherwise the lines
    of ``current`` from the first one that differs, opened by :data:`REPLACES` (so a static
    preamble with a changing tail -- the time, the state -- sends only the tail)."""
    if current == frozen:  # back to the frozen prompt after a note said otherwise
        return RESTORED
    if frozen and current.startswith(frozen) and current[len(frozen) :].strip():
        return current[len(frozen) :].strip()
    old, new = (frozen or "").splitlines(keepends=True), current.splitlines(keepends=True)
    same = 0
    while same < min(len(old), len(new)) and old[same] == new[same]:
        same += 1
    return REPLACES.format(line=same + 1) + "".join(new[same:])


def _text(message: SystemMessage | None) -> str | None:
    return None if message is None else message.text


def _last_note(messages: list[AnyMessage]) -> str | None:
    """The prompt the latest note in the history stands for (``None``: no note yet)."""
    for m in reversed(messages):
        value = m.additional_kwargs.get(NOTE_KEY) if isinstance(m, HumanMessage) else None
        if isinstance(value, str):
            return value
    return None


class FrozenSystemPrompt(AgentMiddleware):
    """Keeps the system prompt byte-identical on every model call; what a middleware changed
    in it goes into a user message appended after the history (and kept in the agent's state).

    ``system_prompt``: the prompt to freeze (default: the system message the first call through
    this middleware carries, content blocks and all, for every later call and thread of the
    agent). A changed prompt that starts with the frozen one is sent as its remainder alone; any
    other from its first changed line on (:func:`note_text`). ``notes`` counts the notes
    appended. Put it after the middleware that changes the prompt
    (``middleware=[dynamic, FrozenSystemPrompt()]``).
    """

    def __init__(self, system_prompt: str | None = None) -> None:
        super().__init__()
        self.message: SystemMessage | None = None if system_prompt is None else SystemMessage(content=system_prompt)
        self.notes = 0
        self._given = system_prompt is not None
        self._lock = threading.Lock()

    @property
    def frozen(self) -> str | None:
        """The frozen system prompt's text (``None``: none yet, or the first call had none)."""
        return _text(self.message)

    # -- the request the model gets, and the note the state keeps -------------------------------
    def freeze(self, request: ModelRequest) -> tuple[ModelRequest, HumanMessage | None]:
        """``request`` with the frozen system prompt and, when the effective prompt changed since
        the history's last note, the note appended; and that note (``None``: nothing changed)."""
        current = _text(request.system_message)
        with self._lock:
            if not self._given:
                self._given = True
                self.message = request.system_message
            system = self.message
        frozen = _text(system)
        if current == frozen and _last_note(request.messages) is None:
            return request, None
        if current is None or current == (_last_note(request.messages) or frozen):
            return request.override(system_message=system), None
        body = note_text(frozen, current)
        note = HumanMessage(
            content=tail_reminder(body)["content"],
            additional_kwargs={NOTE_KEY: current},
            id=f"ctxwright-{uuid.uuid4().hex}",
        )
        with self._lock:
            self.notes += 1
        return request.override(system_message=system, messages=[*request.messages, note]), note

    @staticmethod
    def _kept(response: ModelResponse, note: HumanMessage | None) -> ModelResponse:
        if note is None:
            return response
        return ModelResponse(result=[note, *response.result], structured_response=response.structured_response)

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]) -> ModelResponse:
        request, note = self.freeze(request)
        return self._kept(handler(request), note)

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelResponse:
        request, note = self.freeze(request)
        return self._kept(await handler(request), note)


class CompactToolResults(AgentMiddleware):
    """ctxwright's compaction for ``create_agent``: past ``trigger_tokens`` every tool result
    but the newest ``keep_results`` is sent as a one-line placeholder, all in one step, and
    stays one (:class:`~ctxwright.integrations.compaction.WireCompactor`, shared with the other
    framework adapters), so every call between two compactions is an append of the one before.

    Why ``wrap_model_call`` and not ``before_model``: it changes what is *sent*, not the agent's
    state -- the full results stay in the history (a checkpointer keeps them), and a compaction
    cannot lose a tool result the agent's own code still reads. No view breaking an invariant is
    sent (no result without its call, no call without its result, no split parallel batch, the
    system prompt and first user message kept; ``compactor.refused`` lists any, and the request
    then goes out unchanged). ``compactor.ledger`` names what each cleared result held that is
    no longer visible. Put it last in ``middleware=[...]`` (innermost: it sees what is sent).
    """

    def __init__(
        self,
        trigger_tokens: int = 60_000,
        *,
        keep_results: int = 2,
        min_tokens: int = 50,
        compactor: WireCompactor | None = None,
    ) -> None:
        super().__init__()
        self.compactor = compactor or WireCompactor(trigger_tokens, keep_results=keep_results, min_tokens=min_tokens)
        self._lock = threading.Lock()

    @property
    def ledger(self) -> list[Cleared]:
        return self.compactor.ledger

    def compact(self, request: ModelRequest) -> ModelRequest:
        """``request`` with the cleared tool results' content replaced (nothing else changes)."""
        lead = [request.system_message] if request.system_message is not None else []
        wire = convert_to_openai_messages([*lead, *request.messages])
        with self._lock:
            view = self.compactor(wire)
        changed = {
            str(v["tool_call_id"]): v["content"]
            for w, v in zip(wire, view, strict=True)
            if v.get("role") == "tool" and v.get("content") != w.get("content")
        }
        if not changed:
            return request
        messages = [
            m.model_copy(update={"content": changed[m.tool_call_id]})
            if isinstance(m, ToolMessage) and m.tool_call_id in changed
            else m
            for m in request.messages
        ]
        return request.override(messages=messages)

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]) -> ModelResponse:
        return handler(self.compact(request))

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelResponse:
        return await handler(self.compact(request))


# -- deferred tools ------------------------------------------------------------------------------


def _framework_tool(tool: BaseTool) -> FrameworkTool:
    """``tool`` as the catalog indexes and runs it: its name, description and the parameters
    schema LangChain would send for it (``convert_to_openai_tool``: injected arguments left
    out), run by ``tool.invoke(arguments)``."""
    function = convert_to_openai_tool(tool)["function"]

    def run(**arguments: Any) -> Any:
        return tool.invoke(arguments)

    return FrameworkTool(tool.name, str(function.get("description", tool.description)), function["parameters"], run)


def _catalog_tool(catalog: DeferredCatalog, name: str) -> StructuredTool:
    """One of the catalog's two tools as a LangChain tool whose schema is ctxwright's, dict and
    all (a dict ``args_schema`` is sent unchanged, and the arguments reach the function
    unchecked: the catalog checks them and answers a structured error, never raises)."""
    function = catalog.specs[name].to_wire()["function"]

    def run(**arguments: Any) -> str:
        return catalog.run(name, arguments)  # checked there: a wrong call is the structured error

    return StructuredTool.from_function(
        func=run, name=function["name"], description=function["description"], args_schema=function["parameters"]
    )


def deferred_tools(
    tools: Sequence[BaseTool], *, timeout_s: float | None = None
) -> tuple[list[BaseTool], DeferredCatalog]:
    """``tools`` behind ctxwright's two tools, for ``create_agent(model, tools=...)``: the two
    LangChain tools ``search_tools`` and ``call_tool`` (what the model is sent, byte-identical on
    every call: the names, descriptions and parameter schemas of :attr:`DeferredCatalog.specs`)
    and the catalog holding ``tools``.

    ``search_tools`` answers with the full schemas of the best matches (as LangChain would have
    sent them); ``call_tool`` checks the arguments against the named tool's schema and runs
    ``tool.invoke(arguments)`` synchronously (``timeout_s``: each call's limit). A tool that
    needs what LangChain injects (``ToolRuntime``, ``InjectedToolCallId``, state) gets none:
    keep such tools in the agent's list directly.
    """
    catalog = DeferredCatalog([_framework_tool(t) for t in tools], timeout_s=timeout_s)
    return [_catalog_tool(catalog, SEARCH_TOOL), _catalog_tool(catalog, CALL_TOOL)], catalog


__all__ = [
    "NOTE_KEY",
    "REPLACES",
    "RESTORED",
    "CompactToolResults",
    "FrozenSystemPrompt",
    "deferred_tools",
    "note_text",
    "recorded_chat_model",
]
