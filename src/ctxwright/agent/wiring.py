"""From options to a running context: the store and the session (new or resumed), the
recipe, the backend, the components in prefix order, the assembled prefix, the loop's
configuration.

Why one function (:func:`wire`): a new session and a resumed one must take the same path,
or they drift -- a resume that forgot an option ran with the defaults, and one that rebuilt
the tools in another order broke the provider's prompt cache from the first call on. The
options resolve in one pure function against what the session recorded (``recipe/``), and
each component checks its part of the stored prefix before anything is sent
(``agent/assemble.py``). ``Harness``, ``Context`` and ``ctxwright tools list`` are all built
here.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxwright.agent.assemble import Assembly, assemble, check_resume
from ctxwright.agent.context import ContextConfig
from ctxwright.agent.delegate import DelegateComponent
from ctxwright.backends.base import Backend
from ctxwright.backends.external import EXTERNAL, ExternalBackend
from ctxwright.compaction import CompactionConfig
from ctxwright.compaction.pins import PinComponent
from ctxwright.compaction.provider import configure as configure_provider
from ctxwright.compaction.recall import RecallComponent
from ctxwright.compaction.retrieval import ReaderComponent
from ctxwright.compaction.skills import shown_in
from ctxwright.core.progress import EventSink, ignore
from ctxwright.core.reasoning import META_KEY as REASONING_META_KEY
from ctxwright.core.reasoning import ReasoningPolicy
from ctxwright.core.reasoning import install as install_reasoning
from ctxwright.core.redact import is_redacted
from ctxwright.core.render import NULL_CONTENT_KEY
from ctxwright.core.request import ToolChoice
from ctxwright.core.session import Session
from ctxwright.defence.component import DefenceComponent
from ctxwright.defence.gate import Gate
from ctxwright.errors import BackendUnavailable, ConfigError, CtxwrightError
from ctxwright.mcp.component import McpComponent
from ctxwright.recipe import (
    RECORD_KEY,
    BackendDefaults,
    Recipe,
    backend_defaults,
    backend_name,
    check_same_model,
    implied_backend,
    migrate,
    options,
)
from ctxwright.recipe import check_resume as check_options
from ctxwright.recipe.options import ModelOptions
from ctxwright.skills.component import SkillsComponent
from ctxwright.skills.tools import SKILL_TOOLS, CatalogMode
from ctxwright.status.bar import StatusBar, StatusConfig
from ctxwright.status.component import StatusComponent
from ctxwright.status.todo import TodoComponent
from ctxwright.store.database import normalize_target
from ctxwright.store.lease import Lease
from ctxwright.store.lease import acquire as acquire_lease
from ctxwright.store.recovery import import_pending
from ctxwright.store.sessions import Store
from ctxwright.tools.component import Component, UserTools, WorkspaceTools
from ctxwright.tools.deferred import DeferralComponent

if TYPE_CHECKING:  # imported when otlp= is given (telemetry/ loads the OpenTelemetry SDK)
    from ctxwright.telemetry.exporter import Exporter
    from ctxwright.telemetry.spans import RunTracer

__all__ = ["DEFAULT_SYSTEM", "META_KEY", "Wired", "check_gguf", "components_for", "demo_tools_wanted", "wire"]

#: The system prompt when none is given; written for :func:`~ctxwright.tools.builtin.default_tools`.
DEFAULT_SYSTEM = """You are a careful assistant that answers with facts from tools.

# How to work
1. Decide which tools give the facts the question needs; call them, in parallel when they are independent.
2. Read each tool result. Never invent a time, a temperature or a file's content.
3. When you have the facts, answer in one or two sentences that quote the tool results.
4. If a tool returns an error, read its hint and fix the call instead of repeating it."""

#: ``Session.meta`` key holding the recipe's record (``recipe/record.py``).
META_KEY = RECORD_KEY

_GGUF_MAGIC = b"GGUF"
#: the keywords the wiring takes besides the recipe's options (the Harness's own arguments)
_RUNTIME = ("backend", "db", "resume", "take_over", "on_event")


@dataclass
class Wired:
    """Everything :func:`wire` built, and what it owns (closed by :meth:`close`)."""

    session: Session
    backend: Backend
    recipe: Recipe
    assembly: Assembly
    config: ContextConfig
    store: Store | None
    on_event: EventSink
    status: StatusBar | None = None
    gate: Gate | None = None
    lease: Lease | None = None
    owned_backend: Backend | None = None
    #: where the LLM summaries run (``summarizer=``); ``None``: the backend (``ContextManager.for_backend``)
    summary_backend: Backend | None = None
    owned_summary_backend: Backend | None = None
    owned_store: Store | None = None
    #: the run's spans (``telemetry/spans.py``) when ``otlp`` is given: ``on_event`` is this tracer,
    #: wrapped around the caller's sink; closed last (its exporter's flush is bounded)
    telemetry: RunTracer | None = None
    #: ``tool_choice`` of a run's first call when given, else the backend's default (used
    #: until the session has a user message)
    explicit_first_choice: ToolChoice | None = None
    default_first_choice: ToolChoice = "auto"
    _closed: bool = False

    @property
    def workspace(self) -> Path | None:
        return self.recipe.workspace

    @property
    def catalog(self) -> CatalogMode:
        return self.recipe.skills.catalog

    def close(self) -> None:
        """Stop the components, the model the wiring loaded and the database it opened."""
        if self._closed:
            return
        self._closed = True
        self.assembly.close()
        if self.owned_backend is not None:
            self.owned_backend.close()
        if self.owned_summary_backend is not None:
            self.owned_summary_backend.close()
        if self.lease is not None:
            # a store that cannot be written: the lease of this (ending) process is stale anyway
            with suppress(CtxwrightError):
                self.lease.release()
        if self.owned_store is not None:
            self.owned_store.close()
        if self.telemetry is not None:
            self.telemetry.close()


@dataclass
class _Open:
    """The store and the stored session, before anything else is decided."""

    store: Store | None
    owned_store: Store | None = None
    stored: Session | None = None
    lease: Lease | None = None
    recorded: dict[str, Any] | None = None


def wire(
    options: Mapping[str, Any],
    *,
    backend: Backend | str | None,
    db: str | Path | Store | None,
    resume: str | None,
    take_over: bool,
    on_event: EventSink | None,
    default_backend: str = EXTERNAL,
) -> Wired:
    """Open (or resume) a session and build everything around it. On any failure what was
    opened is closed again and nothing is left running."""
    given = {k: v for k, v in options.items()}
    _check_keywords(given)
    given["backend"] = backend
    sink: EventSink = on_event or ignore
    opened = _open(db, resume, take_over)
    owned: Backend | None = None
    owned_summary: Backend | None = None
    comps: list[Component] = []
    tracer: RunTracer | None = None
    exporter: Exporter | None = None
    try:
        stored, recorded = opened.stored, opened.recorded
        if stored is not None:  # refused before anything is loaded or sent (recipe/check.py)
            assert recorded is not None
            check_options(given, recorded, session_id=stored.id, prefix=stored.prefix)
            check_same_model(stored.id, stored.backend, stored.model, _implied(given, stored), given.get("model"))
        # the backend first: what is switched on by default depends on it
        name = backend_name(given, stored.backend if stored is not None else None, default=default_backend)
        recipe = Recipe.resolve(given, recorded, backend_defaults(name))
        exporter = _exporter(recipe)  # an --otlp without the otel extra is refused before a model loads
        chosen, owned = _backend(backend, recipe.model, given, stored, default_backend)
        if stored is not None:
            check_same_model(stored.id, stored.backend, stored.model, chosen.name, chosen.model)
        if chosen.name != name:  # an object's name decides its defaults
            recipe = Recipe.resolve(given, recorded, backend_defaults(chosen.name))
        recipe = recipe.with_backend(chosen)
        summary_backend, owned_summary = _summarizer(recipe.compaction.summarizer, chosen, recipe.model, given)
        d = backend_defaults(chosen.name)
        configure_provider(chosen, recipe.compaction.config)  # the provider's own context management
        if exporter is not None:  # every event of the run, a sub-agent's too, passes the tracer
            tracer = _tracer(exporter, sink, chosen, recipe)
            sink = tracer
        comps = components_for(recipe, chosen, stored, sink)
        assembly = assemble(
            comps,
            system=DEFAULT_SYSTEM if recipe.runtime.system is None else recipe.runtime.system,
            backend=chosen,
            stored=stored,
            window=recipe.model.window or chosen.context_window or 128_000,
            counter=chosen.token_counter(),
            on_event=sink,
        )
        mcp, deferral = assembly.find(McpComponent), assembly.find(DeferralComponent)
        if mcp is not None:  # the deferral decision is made: MCP list changes go to its index
            mcp.deferred = deferral.deferred if deferral is not None else None
        skills = assembly.find(SkillsComponent)
        if skills is not None:  # what the components decided: the scripts tool, the frozen catalog
            recipe = replace(
                recipe,
                skills=replace(recipe.skills, allow_scripts=skills.scripts is not None, frozen=skills.frozen),
            )
        record = recipe.to_record()  # what the next resume reads (recipe/record.py)
        lease = opened.lease
        if stored is not None:
            session = stored
            check_resume(assembly, stored, system_given=recipe.runtime.system is not None)
            if record != stored.meta.get(META_KEY):  # migrated, or overrides given again: remembered
                session.meta[META_KEY] = record
                if opened.store is not None:
                    opened.store.update_meta(session.id, session.meta)
        else:
            workspace = recipe.workspace
            session = Session.start(
                assembly.prefix(),
                store=opened.store,
                backend=chosen.name,
                model=chosen.model,
                # the tool-call turn's wire form the backend's server takes (core/render.py)
                meta={
                    "workspace": str(workspace) if workspace else None,
                    META_KEY: record,
                    NULL_CONTENT_KEY: chosen.null_content,
                },
            )
            if opened.store is not None:  # one writer per session (store/lease.py)
                lease = acquire_lease(opened.store, session.id)
        mode = recipe.reasoning.mode
        if mode is None and chosen.name == "openai-responses" and REASONING_META_KEY not in session.meta:
            # the Responses API takes its reasoning items back (stateless, with encrypted_content)
            # and a reasoning model re-thinks a tool loop without them: keep them, byte for byte
            mode = ReasoningPolicy("keep")
        install_reasoning(session, mode)  # recorded in meta; the renderer reads it
        if tracer is not None:
            tracer.bind(session.id)
        assembly.bind(session)
        status = assembly.find(StatusComponent)
        defence = assembly.find(DefenceComponent)
        assert defence is not None
        return Wired(
            session=session,
            backend=chosen,
            recipe=recipe,
            assembly=assembly,
            config=context_config(recipe, d),
            store=opened.store,
            on_event=sink,
            status=status.bar if status is not None else None,
            gate=defence.gate,
            lease=lease,
            owned_backend=owned,
            summary_backend=summary_backend,
            owned_summary_backend=owned_summary,
            owned_store=opened.owned_store,
            telemetry=tracer,
            explicit_first_choice=recipe.limits.tool_choice_first,
            default_first_choice=d.tool_choice_first,
        )
    except BaseException:
        for c in reversed(comps):
            with suppress(Exception):
                c.close()
        if owned is not None:
            owned.close()
        if owned_summary is not None:
            owned_summary.close()
        if opened.lease is not None:
            with suppress(CtxwrightError):
                opened.lease.release()
        if opened.owned_store is not None:
            opened.owned_store.close()
        if exporter is not None:
            exporter.close()
        raise


def _summarizer(
    value: Backend | str | None, chosen: Backend, m: ModelOptions, given: Mapping[str, Any]
) -> tuple[Backend | None, Backend | None]:
    """The backend the LLM summaries run on (``summarizer=``) and the one this wiring created
    (and so closes): an object as given; a name resolved like the backend's -- another model on
    the same served backend (its base URL and key), a GGUF path for the embedded one."""
    if value is None:
        return None, None
    if isinstance(value, Backend):
        return value, None
    if not isinstance(value, str) or not value:
        raise ConfigError(f"summarizer={value!r} is not a backend: pass a Backend object or a model name")
    if isinstance(given.get("backend"), Backend):
        raise ConfigError(
            f"summarizer={value!r} names a model, but the backend is an object the harness did not create: "
            "pass the summarizer as a backend object too"
        )
    if chosen.name == "embedded":
        return _backend(None, replace(m, gguf=value), {"gguf": value}, None, "embedded")
    if chosen.name not in ("openai", "openai-responses", "anthropic"):
        raise ConfigError(f"summarizer={value!r}: the {chosen.name!r} backend runs no model; pass a backend object")
    return _backend(None, replace(m, model=value), {**given, "backend": chosen.name, "model": value}, None, chosen.name)


def _exporter(recipe: Recipe) -> Exporter | None:
    """The OTLP exporter ``otlp=`` asks for, or ``None`` (``telemetry/``: imported only then)."""
    if recipe.telemetry.otlp is None:
        return None
    from ctxwright.telemetry import open_exporter

    return open_exporter(recipe.telemetry)


def _tracer(exporter: Exporter, sink: EventSink, backend: Backend, recipe: Recipe) -> RunTracer:
    from ctxwright.telemetry.spans import RunTracer

    return RunTracer(exporter, sink, backend=backend.name, model=backend.model, content=recipe.telemetry.content)


def context_config(recipe: Recipe, d: BackendDefaults) -> ContextConfig:
    """The loop's and the context's knobs, from the recipe."""
    lim = recipe.limits
    return ContextConfig(
        max_iterations=lim.max_iterations,
        tool_timeout_s=lim.tool_timeout,
        max_repeats=lim.max_repeats,
        tool_choice_first=lim.tool_choice_first if lim.tool_choice_first is not None else d.tool_choice_first,
        max_tool_rounds=lim.max_tool_rounds,
        max_tokens=lim.max_tokens,
        timestamps=recipe.timestamps,
        keep_warm=recipe.keep_warm,
        compaction=_priced(recipe.compaction.config, recipe.status.cache_price_ratio),
        compaction_hooks=recipe.runtime.compaction_hooks,
        defence=recipe.defence.features,
    )


def _priced(config: CompactionConfig | None, ratio: float) -> CompactionConfig | None:
    """The compaction planner's α (``compaction/planner.py``) is the backend's cache price ratio,
    the one the status bar's mode chooser uses, unless the config gives its own."""
    if config is None or config.cache_price_ratio is not None:
        return config
    return dataclasses.replace(config, cache_price_ratio=ratio)


def components_for(recipe: Recipe, backend: Backend, stored: Session | None, on_event: EventSink) -> list[Component]:
    """The components in prefix order for a resolved recipe. The feature switches are the
    recipe's (a resumed session's as it was started, ``recipe/record.py``); the skill tools
    are also kept when the stored prefix has them (a skills folder removed since)."""
    names = stored.prefix.tool_names() if stored is not None else ()
    if backend.name == EXTERNAL and recipe.delegate.enabled:
        raise ConfigError(
            "delegate needs a model to run the sub-agent: pass backend= to the Context, or leave delegate off"
        )
    cfg = recipe.compaction.config
    if backend.name == EXTERNAL and cfg is not None and cfg.uses_llm:
        raise ConfigError(
            "LLM summaries need a model to write them: pass backend= to the Context, or leave summaries off "
            "(summaries=False)"
        )
    comps: list[Component] = [UserTools(recipe.runtime.tools, demo=demo_tools_wanted(recipe, stored))]
    if recipe.workspace is not None:
        comps.append(WorkspaceTools(recipe.workspace))
    todo = TodoComponent() if recipe.todo.enabled else None
    if todo is not None:
        comps.append(todo)
    if recipe.compaction.config is not None and recipe.compaction.read_result:
        comps.append(ReaderComponent())  # offloaded and cleared results are paged back
    if recipe.compaction.config is not None and recipe.compaction.recall:
        comps.append(RecallComponent())  # what compaction hid, searched and handed back
    if recipe.compaction.config is not None and recipe.compaction.pin_tool:
        comps.append(PinComponent())  # the model pins a fact (compaction/pins.py)
    if recipe.delegate.enabled:
        comps.append(DelegateComponent(on_event=on_event))
    sk = recipe.skills
    if sk.dirs is not None or sk.catalog == "prefix" or (names and all(n in names for n in SKILL_TOOLS)):
        comps.append(
            SkillsComponent(
                sk.dirs,
                catalog=sk.catalog,
                allow_scripts=sk.allow_scripts,
                script_timeout=sk.script_timeout,
                frozen=sk.frozen,
                on_event=on_event,
                shown_in=shown_in,
            )
        )
    m = recipe.mcp
    if m.servers is not None:
        comps.append(
            McpComponent(m.servers, timeout=m.timeout, trust=m.trust, result_cap=m.result_cap, on_event=on_event)
        )
    comps.append(DeferralComponent(recipe.deferral.defer_tools))
    df = recipe.defence
    comps.append(
        DefenceComponent(
            df.features,
            approve=df.approve,
            allow=df.allow,
            gate_rules=df.gate_rules,
            approve_timeout=df.approve_timeout,
            workspace=recipe.workspace,
        )
    )
    if recipe.status.enabled:
        status = StatusConfig(
            items=recipe.status.fields,
            mode=recipe.status.mode,
            max_iterations=recipe.limits.max_iterations,
            max_repeats=recipe.limits.max_repeats,
            alpha=recipe.status.cache_price_ratio,
        )
        comps.append(StatusComponent(status, todo=todo, cwd=recipe.workspace))
    return comps


def demo_tools_wanted(recipe: Recipe, stored: Session | None) -> bool:
    """Whether the demo tools (``get_current_time``, ``get_weather``, ``calculator``) go first in
    the prefix when no ``tools`` are given: only when no other source of tools is given either
    (a workspace, skills, MCP servers). Why: a small model offered ``get_weather`` next to the
    user's own tools called it instead of theirs; the demo tools are there for a first try with
    nothing given, never beside a real tool set. A resumed session keeps what its prefix has
    (the prefix is frozen: a session started with them beside skills goes on with them)."""
    if recipe.runtime.tools is not None:
        return False
    if stored is not None:
        from ctxwright.tools.builtin import DEMO_TOOL_NAMES

        return stored.prefix.tool_names()[: len(DEMO_TOOL_NAMES)] == DEMO_TOOL_NAMES
    sk = recipe.skills
    return recipe.workspace is None and recipe.mcp.servers is None and sk.dirs is None and sk.catalog != "prefix"


def _check_keywords(given: Mapping[str, Any]) -> None:
    """Refuse an option no declaration has (a misspelt one would be silently ignored)."""
    known = {s.keyword for s in options(Recipe) if s.keyword is not None} - set(_RUNTIME)
    unknown = sorted(set(given) - known)
    if not unknown:
        return
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, sorted(known), n=1)
        hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    raise ConfigError(f"unknown option(s) {', '.join(hints)}: the options are listed in docs/options.md")


def _open(db: str | Path | Store | None, resume: str | None, take_over: bool) -> _Open:
    owned = None
    if db is None or isinstance(db, Store):
        store = db
    else:
        store = owned = Store(normalize_target(db))
    opened = _Open(store, owned)
    if resume is None:
        return opened
    try:
        if store is None:
            raise ConfigError("resuming a session needs the database it is stored in: db=PATH (CLI: --db PATH)")
        sid = store.get_session(resume).id
        # one writer per session (store/lease.py), then what the store could not take last time
        opened.lease = acquire_lease(store, sid, take_over=take_over)
        import_pending(store, sid)
        stored = opened.stored = Session.resume(store, sid)
        opened.recorded = migrate(
            stored.meta.get(META_KEY),
            system_prompt=stored.prefix.system_prompt,
            tool_names=stored.prefix.tool_names(),
            meta=stored.meta,
        )
    except BaseException:
        if opened.lease is not None:
            with suppress(CtxwrightError):
                opened.lease.release()
        if owned is not None:
            owned.close()
        raise
    return opened


def _implied(given: Mapping[str, Any], stored: Session) -> str | None:
    """The backend the given keywords point to, for the resume check; a ``model`` alone is
    the caller's own model's name on a context driven by its loop."""
    implied = implied_backend(given)
    if implied == "openai" and stored.backend == EXTERNAL and given.get("base_url") is None:
        return None
    if implied == "openai" and given.get("backend") is None and stored.backend == "openai-responses":
        return None  # a base URL or model alone names no API: the session's own served backend
    return implied


def _backend(
    backend: Backend | str | None, m: ModelOptions, given: Mapping[str, Any], stored: Session | None, default: str
) -> tuple[Backend, Backend | None]:
    """The backend to run on, and the one this wiring created (and so closes). ``m`` holds
    the model options given, else recorded (base URL, GGUF path, window)."""
    if backend is not None and not isinstance(backend, str):
        if not isinstance(backend, Backend):
            raise ConfigError(
                f"backend={backend!r} is not a backend: pass 'embedded', 'openai', or an instance of a "
                "subclass of ctxwright.backends.base.Backend (it writes complete(request, *, on_event=None))"
            )
        for opt in (
            "model",
            "base_url",
            "gguf",
            "api_key",
            "timeout",
            "max_retries",
            "stream",
            "routing_header",
            "prompt_cache_key",
            "prompt_cache_retention",
            "cache_ttl",
            "cache_diagnostics",
        ):
            if given.get(opt) is not None and not (opt == "model" and backend.name == EXTERNAL):
                raise ConfigError(f"{opt}= is for the backends the harness creates; configure the object instead")
        return backend, None
    name = backend_name(given, stored.backend if stored is not None else None, default=default)
    model = m.model or (stored.model if stored is not None else None)
    if stored is not None and name not in ("embedded", "openai", "anthropic", "openai-responses", EXTERNAL):
        raise ConfigError(
            f"session {stored.id} ran on the {name!r} backend, which the harness cannot recreate "
            "from the store: pass backend= (an object) to continue it"
        )
    if name == EXTERNAL:
        return ExternalBackend(model, context_window=m.window), None
    _refuse_cache_options(name, given)
    if name in ("openai", "openai-responses"):
        if given.get("gguf") is not None:
            raise ConfigError(f"gguf= (--gguf) is for the embedded backend; drop it or drop backend={name!r}")
        if not model:
            raise ConfigError(f"the {name} backend needs the served model's name: model=NAME (CLI: --model NAME)")
        from ctxwright.backends.openai_compat import DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT_S, OpenAIBackend

        base_url = m.base_url
        if stored is not None and given.get("base_url") is None and base_url is not None and is_redacted(base_url):
            raise ConfigError(
                f"session {stored.id} was started on a base URL with credentials ({base_url}), which are never "
                "stored; pass the full URL again: base_url= (CLI: --base-url)"
            )
        common: dict[str, Any] = {
            "model": model,
            "base_url": base_url,
            "api_key": m.api_key,
            "api_key_env": m.api_key_env,
            "context_window": m.window,
            "timeout": DEFAULT_TIMEOUT_S if m.timeout is None else m.timeout,
            "max_retries": DEFAULT_MAX_RETRIES if m.max_retries is None else m.max_retries,
            "stream": bool(m.stream),
            "routing_header": m.routing_header,
            "prompt_cache_key": m.prompt_cache_key,
        }
        made: OpenAIBackend
        try:
            if name == "openai-responses":
                from ctxwright.backends.openai_responses import ResponsesBackend

                made = ResponsesBackend(
                    **common, retention=m.prompt_cache_retention, diagnostics=m.cache_diagnostics is not False
                )
            else:
                if m.prompt_cache_retention is not None:
                    raise ConfigError(
                        "prompt_cache_retention= (--prompt-cache-retention) is for backend='openai-responses' "
                        "(OpenAI's Responses API); drop it, or use --backend openai-responses"
                    )
                made = OpenAIBackend(**common)
        except ValueError as exc:
            raise ConfigError(
                f"{exc} (CLI: --timeout, --max-retries, --routing-header, --prompt-cache-retention)"
            ) from None
        return made, made
    if name == "anthropic":
        return _anthropic(model, m, given, stored)
    if name == "embedded":
        if given.get("model") is not None or given.get("base_url") is not None or m.api_key is not None:
            raise ConfigError(
                "model=, base_url= and api_key= are for backend='openai' (CLI: --backend openai); "
                "the embedded backend takes gguf= (--gguf PATH) for another model"
            )
        hints = [
            k for k in ("routing_header", "prompt_cache_key", "prompt_cache_retention") if given.get(k) is not None
        ]
        if hints:
            raise ConfigError(
                f"{hints[0]}= is for a served model (backend='openai' or 'openai-responses'): the embedded "
                "model runs in-process, on no fleet to route"
            )
        if given.get("timeout") is not None or given.get("max_retries") is not None:
            raise ConfigError(
                "timeout= and max_retries= (--timeout, --max-retries) are for a served model "
                "(backend='openai'); the embedded model runs in-process"
            )
        path = check_gguf(m.gguf) if m.gguf is not None else None
        from ctxwright.backends.embedded import EmbeddedBackend

        made_e = EmbeddedBackend(model_path=path, n_ctx=m.window or 8192, stream=m.stream is not False)
        return made_e, made_e
    raise ConfigError(
        f"unknown backend {name!r}: use 'embedded', 'openai', 'anthropic', 'openai-responses', or pass a backend object"
    )


#: The provider-cache options and the backends that send them: a flag another backend would
#: drop silently is refused, so nobody believes a cache setting is in force that is not.
_CACHE_OPTION_BACKENDS: dict[str, tuple[str, ...]] = {
    "cache_ttl": ("anthropic",),
    "cache_diagnostics": ("anthropic", "openai-responses"),
}


def _refuse_cache_options(name: str, given: Mapping[str, Any]) -> None:
    """A ConfigError for a provider-cache option given to a backend that does not send it.

    Why: chat completions and the embedded llama.cpp have no TTL to choose and no miss reason
    to ask for (OpenAI's TTL on Responses is ``prompt_cache_retention``); ignoring the flag would
    leave a user reading an audit that lacks the provider's reasons they asked for."""
    for opt, backends in _CACHE_OPTION_BACKENDS.items():
        if given.get(opt) is not None and name not in backends:
            flag = "--" + opt.replace("_", "-")
            where = " or ".join(f"backend={b!r}" for b in backends)
            extra = "; on 'openai-responses' the TTL is prompt_cache_retention=" if opt == "cache_ttl" else ""
            raise ConfigError(
                f"{opt}= ({flag}) is for {where}: the {name!r} backend has no such setting; drop it{extra}"
            )


def _anthropic(
    model: str | None, m: ModelOptions, given: Mapping[str, Any], stored: Session | None
) -> tuple[Backend, Backend | None]:
    """The Anthropic Messages backend; its key is read from ``ANTHROPIC_API_KEY`` unless
    another variable is named (``api_key_env``)."""
    if given.get("gguf") is not None:
        raise ConfigError("gguf= (--gguf) is for the embedded backend; drop it or drop backend='anthropic'")
    if not model:
        raise ConfigError("the anthropic backend needs the model's name: model=NAME (CLI: --model claude-sonnet-4-5)")
    from ctxwright.backends.anthropic import DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT_S, AnthropicBackend

    base_url = m.base_url
    if stored is not None and given.get("base_url") is None and base_url is not None and is_redacted(base_url):
        raise ConfigError(
            f"session {stored.id} was started on a base URL with credentials ({base_url}), which are never "
            "stored; pass the full URL again: base_url= (CLI: --base-url)"
        )
    key_env = m.api_key_env if given.get("api_key_env") is not None else "ANTHROPIC_API_KEY"
    try:
        made = AnthropicBackend(
            model=model,
            base_url=base_url,
            api_key=m.api_key,
            api_key_env=key_env,
            context_window=m.window,
            timeout=DEFAULT_TIMEOUT_S if m.timeout is None else m.timeout,
            max_retries=DEFAULT_MAX_RETRIES if m.max_retries is None else m.max_retries,
            stream=bool(m.stream),
            ttl=m.cache_ttl or "5m",
            diagnostics=m.cache_diagnostics is not False,
        )
    except ValueError as exc:
        raise ConfigError(f"{exc} (CLI: --timeout, --max-retries)") from None
    return made, made


def check_gguf(path: str | Path) -> Path:
    """``path`` if it is a readable GGUF file, else :class:`BackendUnavailable` saying which
    check failed -- before llama.cpp is loaded, whose own message for a bad file is vague."""
    p = Path(path).expanduser()
    if not p.exists():
        raise BackendUnavailable(f"the GGUF model {p} does not exist: give the path of a GGUF chat model file")
    if not p.is_file():
        raise BackendUnavailable(f"the GGUF model {p} is not a file: give the path of a GGUF chat model file")
    try:
        with p.open("rb") as f:
            magic = f.read(len(_GGUF_MAGIC))
    except OSError as exc:
        raise BackendUnavailable(
            f"cannot read the GGUF model {p}: {exc.strerror or exc}; check its permissions"
        ) from None
    if magic != _GGUF_MAGIC:
        raise BackendUnavailable(
            f"{p} is not a GGUF file (it does not start with 'GGUF'): llama.cpp loads GGUF models only; "
            "convert the model or download its GGUF version"
        )
    return p
