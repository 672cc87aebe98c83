"""The Harness: an agent's lifecycle -- open (or resume), run, report, close.

Everything an agent is made of is built elsewhere, once: the options resolve against what
the session recorded (``agent/wiring.py``), the mechanisms are components walked in prefix
order by the assembler (``agent/assemble.py``), the context records and renders every call
(``agent/context.py``) and the loop drives it (``agent/loop.py``). The Harness adds a backend
it can create by name, and the loop. The CLI (``cli/main.py``) builds one :class:`Harness`
and only prints, so a Python user and the command line run the same agent.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

from ctxwright.agent.context import Context
from ctxwright.agent.delegate import DelegateComponent, Delegator
from ctxwright.agent.loop import Agent, EventSink, RunResult
from ctxwright.agent.wiring import DEFAULT_SYSTEM, META_KEY, check_gguf, wire
from ctxwright.audit.compare import Prices
from ctxwright.backends.base import Backend
from ctxwright.cache.prices import Pricing, pricing_of
from ctxwright.core.events import Event, PinEvent, UserEvent
from ctxwright.core.messages import Message
from ctxwright.core.request import ToolChoice
from ctxwright.core.session import Session
from ctxwright.defence.component import DefenceComponent
from ctxwright.defence.gate import Gate
from ctxwright.defence.levels import Features
from ctxwright.errors import CtxwrightError
from ctxwright.mcp.component import McpComponent
from ctxwright.mcp.tools import McpTools
from ctxwright.recipe import harness_doc, harness_parameters
from ctxwright.skills.component import SkillsComponent
from ctxwright.skills.loader import Skill
from ctxwright.skills.scripts import SkillScripts
from ctxwright.skills.tools import CatalogMode, SkillTools
from ctxwright.status.todo import TodoComponent, TodoList
from ctxwright.store.sessions import Store
from ctxwright.tools.deferred import DeferralComponent, DeferredTools
from ctxwright.tools.registry import Tool, ToolRegistry

__all__ = ["DEFAULT_SYSTEM", "META_KEY", "Harness", "check_gguf"]


class Harness:
    """An agent: one session on one backend with one tool list, ready to :meth:`run`.

    Start a new session with ``Harness(system, tools, **options)``; continue a stored one
    with :meth:`Harness.resume` (or ``Harness(resume=ID, db=...)``). Use it as a context
    manager, or call :meth:`close`, to release the model, the MCP servers and the database.
    Every option is listed, with its default and its CLI flag, in ``docs/options.md``.
    """

    def __init__(
        self,
        system: str | None = None,
        tools: Iterable[Tool | Callable[..., Any]] | None = None,
        *,
        backend: Backend | str | None = None,
        db: str | Path | Store | None = None,
        resume: str | None = None,
        take_over: bool = False,
        on_event: EventSink | None = None,
        **options: Any,
    ) -> None:
        self._closed = False
        #: how this session's calls are priced (``prices=``: a TOML file over the built-in
        #: table); read first, so a bad file is refused before a model is loaded
        self.pricing: Pricing = pricing_of(options.get("prices"))
        wired = wire(
            {"system": system, "tools": tools, **options},
            backend=backend,
            db=db,
            resume=resume,
            take_over=take_over,
            on_event=on_event,
            default_backend="embedded",
        )
        self._wired = wired
        # one pricing object: the calls' cost, each expiry's and the --cache-ttl auto choice
        wired.config.pricing = self.pricing
        try:
            self.context = Context.of(wired)
            self.agent = Agent.on(self.context)
            delegate = wired.assembly.find(DelegateComponent)
            self.delegator: Delegator | None = delegate.delegator if delegate is not None else None
            if self.delegator is not None:
                self.delegator.bind(self.agent)
        except BaseException:
            wired.close()
            raise

    @classmethod
    def resume(
        cls, session_id: str, tools: Iterable[Tool | Callable[..., Any]] | None = None, **options: Any
    ) -> Harness:
        """Continue the stored session ``session_id`` (``db=`` names the database).

        Everything the session recorded is re-derived from it: the backend and model (and
        the base URL or GGUF path it was started with), the workspace, whether the status
        bar, TODO tools, ``read_result`` and ``delegate`` were on (from its prefix), its
        reasoning mode, and every run option. Pass ``tools`` again (the same ones: functions
        are not stored); every other keyword may override what was recorded, but nothing
        that would change the stored prefix, the backend or the model.
        """
        return cls(tools=tools, resume=session_id, **options)

    # -- what it is made of ----------------------------------------------------------------
    @property
    def session(self) -> Session:
        return self._wired.session

    @property
    def session_id(self) -> str:
        """The session's id: pass it to :meth:`resume` (or ``ctxwright run --resume``)."""
        return self._wired.session.id

    @property
    def backend(self) -> Backend:
        return self._wired.backend

    @property
    def store(self) -> Store | None:
        return self._wired.store

    @property
    def tools(self) -> ToolRegistry:
        return self._wired.assembly.tools

    @property
    def on_event(self) -> EventSink:
        return self._wired.on_event

    @property
    def workspace(self) -> Path | None:
        return self._wired.workspace

    @property
    def skills(self) -> list[Skill]:
        comp = self._wired.assembly.find(SkillsComponent)
        return comp.skills if comp is not None else []

    @property
    def skill_warnings(self) -> list[str]:
        comp = self._wired.assembly.find(SkillsComponent)
        return comp.warnings if comp is not None else []

    @property
    def skills_catalog(self) -> CatalogMode:
        """Where the session's skills catalog goes: ``reminder`` or ``prefix``."""
        comp = self._wired.assembly.find(SkillsComponent)
        return comp.catalog if comp is not None else self._wired.catalog

    @property
    def skill_tools(self) -> SkillTools | None:
        comp = self._wired.assembly.find(SkillsComponent)
        return comp.tools if comp is not None else None

    @property
    def skill_scripts(self) -> SkillScripts | None:
        comp = self._wired.assembly.find(SkillsComponent)
        return comp.scripts if comp is not None else None

    @property
    def mcp(self) -> McpTools | None:
        comp = self._wired.assembly.find(McpComponent)
        return comp.mcp if comp is not None else None

    @property
    def deferred(self) -> DeferredTools | None:
        comp = self._wired.assembly.find(DeferralComponent)
        return comp.deferred if comp is not None else None

    @property
    def todo(self) -> TodoList | None:
        comp = self._wired.assembly.find(TodoComponent)
        return comp.todo if comp is not None else None

    @property
    def defence(self) -> Features:
        comp = self._wired.assembly.find(DefenceComponent)
        assert comp is not None
        return comp.features

    @property
    def gate(self) -> Gate | None:
        return self._wired.gate

    # -- use -----------------------------------------------------------------------------
    def _first_choice(self) -> ToolChoice:
        """``tool_choice`` of a run's first call: as given, else the backend's default until
        the session has a user message (a follow-up needs no forced tool call)."""
        w = self._wired
        if w.explicit_first_choice is not None:
            return w.explicit_first_choice
        started = any(isinstance(ev, UserEvent) for ev in self.session.events)
        return "auto" if started else w.default_first_choice

    def run(self, prompt: str | None = None) -> RunResult:
        """Add ``prompt`` as a user message and run the loop until a final answer, the
        iteration cap or a backend error (``RunResult.stop_reason``). ``None`` runs on what
        the session already holds, e.g. to retry after a backend error."""
        if self._closed:
            raise CtxwrightError("this Harness is closed; resume the session in a new one: Harness.resume(session_id)")
        self.agent.config.tool_choice_first = self._first_choice()
        cache = self.context.provider_cache
        tracer = self._wired.telemetry
        with cache.lock:  # a keep-warm refresh waits for the run, and the run for a refresh
            if tracer is None:
                result = self.agent.run(prompt)
            else:
                with tracer.run() as root:  # otlp=: the run's trace (telemetry/spans.py)
                    result = self.agent.run(prompt)
                    root.done(result)
        cache.start_timer()  # keep_warm on: refresh the provider's cache until the next run
        return result

    def pin(self, what: int | Message | Event | str) -> PinEvent:
        """Pin a message (by event seq, the :class:`Message` or its event) or a text -- a fact
        you state, appended as a pinned note -- so every compaction keeps it whole; recorded as
        a ``pin`` event, kept on resume. See :meth:`Context.pin <ctxwright.agent.context.Context.pin>`."""
        if self._closed:
            raise CtxwrightError("this Harness is closed; resume the session in a new one: Harness.resume(session_id)")
        with self.context.provider_cache.lock:  # not while a keep-warm refresh reads the session
            return self.context.pin(what)

    def keep_warm(self) -> float | None:
        """Refresh the provider's prompt cache now: re-send the last request unchanged with
        ``max_tokens=1`` (identical bytes: a full cache read, which renews the entry's TTL).
        The reply is discarded; the call is recorded and counted as cost, not as a request
        of the trajectory. Returns when it was sent (the backend's clock), ``None`` when
        there is nothing to refresh (no call yet, or a backend that does not report the
        provider's cache) or the backend failed. With ``keep_warm=True`` a background timer
        does this before each expiry while the harness stays open (``cache/expiry.py``)."""
        if self._closed:
            raise CtxwrightError("this Harness is closed; resume the session in a new one: Harness.resume(session_id)")
        return self.context.provider_cache.refresh()

    def report(self, path: str | Path, prices: Prices | Pricing | None = None) -> Path:
        """Write the HTML report of this session and its sub-agents' sessions to ``path``
        (``report/``): one file with plotly.js embedded, which opens without network access.

        Drawn from the store -- the calls' ledgers and audits as recorded live -- so it shows
        exactly what ``ctxwright report ID`` shows later. Each call's cost, and what it would
        have cost had the cache held, by :attr:`pricing` (the ``prices=`` table); ``prices``
        (flat ``Prices`` per million tokens, or a ``Pricing``) overrides it."""
        if self.store is None:
            raise CtxwrightError(
                "a report is drawn from the stored session: give the Harness a database (db='agent.db'); "
                "db=None keeps nothing to report"
            )
        return self.context.report(path, self.pricing if prices is None else prices)

    def close(self) -> None:
        """Release what the harness opened: the model it loaded (and a sub-agent's fork of
        it), the MCP servers and the database. Everything recorded stays in the store."""
        if self._closed:
            return
        self._closed = True
        self.context.close()  # the components, the model it loaded, the lease, the database

    def __enter__(self) -> Harness:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"session {self.session.id}"
        return f"Harness({state}, backend={self.backend.name}, model={self.backend.model}, tools={list(self.tools.names())})"


# The keywords, their defaults and their help come from the one declaration (recipe/options.py):
# help(Harness), inspect.signature(Harness) and docs/options.md show the same options.
Harness.__signature__ = inspect.Signature(harness_parameters())  # type: ignore[attr-defined]
Harness.__doc__ = f"{Harness.__doc__}\n{harness_doc()}\n"
