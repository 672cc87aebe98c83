"""From options to a running context: the store and the session (new or resumed), the
backend, the components in prefix order, the assembled prefix, the loop's configuration.

Why one function (:func:`wire`): a new session and a resumed one must take the same path,
or they drift -- a resume that forgot an option ran with the defaults, and one that rebuilt
the tools in another order broke the provider's prompt cache from the first call on. Every
option not given is the one the session recorded (``agent/recipe.py``), and each component
checks its part of the stored prefix before anything is sent (``agent/assemble.py``).
``Harness`` and ``Context`` are both built here; ``ctxwright tools list`` uses the same
components without starting a session (:func:`components_for`).

Defaults that depend on the backend live in :func:`backend_defaults` and nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

from ctxwright.agent import recipe
from ctxwright.agent.assemble import Assembly, assemble, check_resume
from ctxwright.agent.context import ContextConfig
from ctxwright.agent.delegate import DelegateComponent
from ctxwright.backends.base import Backend
from ctxwright.backends.external import EXTERNAL, ExternalBackend
from ctxwright.compaction import CompactionConfig
from ctxwright.compaction.retrieval import ReaderComponent
from ctxwright.compaction.skills import shown_in
from ctxwright.core.progress import EventSink, ignore
from ctxwright.core.reasoning import ReasoningMode, ReasoningPolicy
from ctxwright.core.reasoning import install as install_reasoning
from ctxwright.core.redact import is_redacted
from ctxwright.core.request import ToolChoice
from ctxwright.core.session import Session
from ctxwright.defence.component import DefenceComponent
from ctxwright.defence.gate import Gate
from ctxwright.defence.levels import LEVELS, Features
from ctxwright.defence.levels import features as defence_features
from ctxwright.errors import BackendUnavailable, ConfigError, CtxwrightError
from ctxwright.mcp.component import McpComponent
from ctxwright.skills.component import SkillsComponent
from ctxwright.skills.tools import CATALOG_MODES, SKILL_TOOLS, CatalogEntry, CatalogMode
from ctxwright.status.bar import OPERATING_MANUAL, StatusBar, StatusConfig
from ctxwright.status.component import StatusComponent
from ctxwright.status.todo import TodoComponent
from ctxwright.store.lease import Lease
from ctxwright.store.lease import acquire as acquire_lease
from ctxwright.store.recovery import import_pending
from ctxwright.store.sessions import Store
from ctxwright.tools.component import Component, UserTools, WorkspaceTools
from ctxwright.tools.deferred import DeferConfig, DeferralComponent

__all__ = [
    "DEFAULT_SYSTEM",
    "META_KEY",
    "BackendDefaults",
    "Wired",
    "backend_defaults",
    "check_gguf",
    "components_for",
    "wire",
]

#: The system prompt when none is given; written for :func:`~ctxwright.tools.builtin.default_tools`.
DEFAULT_SYSTEM = """You are a careful assistant that answers with facts from tools.

# How to work
1. Decide which tools give the facts the question needs; call them, in parallel when they are independent.
2. Read each tool result. Never invent a time, a temperature or a file's content.
3. When you have the facts, answer in one or two sentences that quote the tool results.
4. If a tool returns an error, read its hint and fix the call instead of repeating it."""

#: Names of the tools the harness itself adds, by the option that adds them (for resume).
TODO_TOOLS = ("rewrite_todo_list", "update_todo_status")
READ_RESULT_TOOL = "read_result"
DELEGATE_TOOL = "delegate"

#: ``Session.meta`` key holding what a resume needs to rebuild the backend and the options.
META_KEY = "harness"

_GGUF_MAGIC = b"GGUF"


@dataclass(frozen=True)
class BackendDefaults:
    """What the harness does when an option is not given, for one kind of backend.

    The embedded backend runs SmolLM2-135M (``backends/embedded.py``), and each value below
    that differs from a served model's was measured on it:

    * ``features`` (status bar, TODO tools, ``read_result``, ``delegate``, LLM summaries):
      with the status block last and its manual in the prompt, the 135M model calls
      ``get_current_time("UTC")`` alone and answers "10.23" (without them it calls both demo
      tools); with ``read_result`` in its tool list it calls it with invented ids and answers
      about the error; it summarizes poorly (``benchmarks/compression.py`` measures it). On a
      served model they are on. A context driven by the caller's loop (``external``) has
      them off: the loop is the caller's, and delegate and summaries need a model to call.
    * ``tool_choice_first="required"``: the first call of a new session must call a tool,
      or the tiny model answers from nothing.
    * ``max_tool_rounds=1``: it never decides on its own that it has enough facts.
    * ``cache_price_ratio``: cached ÷ uncached input price, for the status bar's mode chooser;
      a local model pays nothing per token, a served one typically 0.1.
    """

    features: bool
    tool_choice_first: ToolChoice
    max_tool_rounds: int | None
    cache_price_ratio: float


def backend_defaults(backend_name: str) -> BackendDefaults:
    """The defaults for a backend by its ``name`` (``"embedded"``, ``"openai"``, ``"scripted"``...)."""
    if backend_name == "embedded":
        return BackendDefaults(features=False, tool_choice_first="required", max_tool_rounds=1, cache_price_ratio=0.0)
    if backend_name == EXTERNAL:
        return BackendDefaults(features=False, tool_choice_first="auto", max_tool_rounds=None, cache_price_ratio=0.1)
    return BackendDefaults(features=True, tool_choice_first="auto", max_tool_rounds=None, cache_price_ratio=0.1)


@dataclass
class Wired:
    """Everything :func:`wire` built, and what it owns (closed by :meth:`close`)."""

    session: Session
    backend: Backend
    assembly: Assembly
    config: ContextConfig
    store: Store | None
    on_event: EventSink
    status: StatusBar | None = None
    gate: Gate | None = None
    lease: Lease | None = None
    owned_backend: Backend | None = None
    owned_store: Store | None = None
    #: ``tool_choice`` of a run's first call when given, else the backend's default (used
    #: until the session has a user message)
    explicit_first_choice: ToolChoice | None = None
    default_first_choice: ToolChoice = "auto"
    workspace: Path | None = None
    #: the session's skills catalog mode (recorded even without skills)
    catalog: CatalogMode = "reminder"
    closers: list[Callable[[], None]] = field(default_factory=list)
    _closed: bool = False

    def close(self) -> None:
        """Stop the components, the model the wiring loaded and the database it opened."""
        if self._closed:
            return
        self._closed = True
        for close in self.closers:
            close()
        self.assembly.close()
        if self.owned_backend is not None:
            self.owned_backend.close()
        if self.lease is not None:
            # a store that cannot be written: the lease of this (ending) process is stale anyway
            with suppress(CtxwrightError):
                self.lease.release()
        if self.owned_store is not None:
            self.owned_store.close()


@dataclass
class _Open:
    """The store and the stored session, before anything else is decided."""

    store: Store | None
    owned_store: Store | None = None
    stored: Session | None = None
    lease: Lease | None = None
    recorded: dict[str, Any] = field(default_factory=dict)


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
    opts = _with_defaults(options)
    if opts["max_repeats"] is not None and opts["max_repeats"] < 0:
        raise ConfigError(
            f"max_repeats={opts['max_repeats']}: give 1 or more identical calls in a row, or 0 for no limit"
        )
    sink: EventSink = on_event or ignore
    opened = _open(db, resume, take_over)
    owned: Backend | None = None
    comps: list[Component] = []
    try:
        stored, recorded = opened.stored, opened.recorded
        # every option not given: as the session recorded it, else the default (agent/recipe.py)
        opts = {**opts, **{k: recipe.pick(k, opts, recorded, v) for k, v in recipe.DEFAULTS.items()}}
        opts.update({k: recipe.pick(k, opts, recorded, None) for k in recipe.WHEN_GIVEN})
        # the backend first: what is switched on by default depends on it
        chosen, owned = _backend(backend, opts, stored, recorded, default_backend)
        if stored is not None:
            recipe.check_same_model(stored.id, stored.backend, stored.model, chosen.name, chosen.model)
        d = backend_defaults(chosen.name)
        comps, parts = components_for(opts, chosen, stored, recorded, sink, d)
        window = opts["window"] or chosen_window(chosen)
        assembly = assemble(
            comps,
            system=DEFAULT_SYSTEM if opts["system"] is None else opts["system"],
            backend=chosen,
            stored=stored,
            window=int(window),
            counter=chosen.token_counter(),
            on_event=sink,
        )
        for c in comps:  # the deferral decision is made: MCP list changes go to its index
            if isinstance(c, McpComponent):
                deferral = assembly.find(DeferralComponent)
                c.deferred = deferral.deferred if deferral is not None else None
        # the run configuration, recorded with the session for the next resume (agent/recipe.py)
        config_record = _record(opts, recorded, chosen, parts, comps)
        workspace = parts.workspace
        lease = opened.lease
        if stored is not None:
            session = stored
            check_resume(assembly, stored, system_given=opts["system"] is not None)
            if config_record != recorded:  # overrides given again are remembered too
                session.meta[META_KEY] = config_record
                if opened.store is not None:
                    opened.store.update_meta(session.id, session.meta)
        else:
            session = Session.start(
                assembly.prefix(),
                store=opened.store,
                backend=chosen.name,
                model=chosen.model,
                meta={"workspace": str(workspace) if workspace else None, META_KEY: config_record},
            )
            if opened.store is not None:  # one writer per session (core/lease.py)
                lease = acquire_lease(opened.store, session.id)
        reasoning = opts["reasoning"]
        try:
            policy = ReasoningPolicy(cast(ReasoningMode, reasoning)) if isinstance(reasoning, str) else reasoning
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        install_reasoning(session, policy)  # recorded in meta; the renderer reads it (core/render.py)
        assembly.bind(session)
        status = assembly.find(StatusComponent)
        defence = assembly.find(DefenceComponent)
        assert defence is not None
        first = opts["tool_choice_first"]
        config = ContextConfig(
            max_iterations=opts["max_iterations"],
            tool_timeout_s=opts["tool_timeout"],
            max_repeats=opts["max_repeats"],
            tool_choice_first=first if first is not None else d.tool_choice_first,
            max_tool_rounds=parts.rounds,
            max_tokens=opts["max_tokens"],
            timestamps=opts["timestamps"],
            compaction=parts.compaction,
            defence=defence.features,
        )
        return Wired(
            session=session,
            backend=chosen,
            assembly=assembly,
            config=config,
            store=opened.store,
            on_event=sink,
            status=status.bar if status is not None else None,
            gate=defence.gate,
            lease=lease,
            owned_backend=owned,
            owned_store=opened.owned_store,
            explicit_first_choice=first,
            default_first_choice=d.tool_choice_first,
            workspace=workspace,
            catalog=parts.catalog,
        )
    except BaseException:
        for c in reversed(comps):
            with suppress(Exception):
                c.close()
        if owned is not None:
            owned.close()
        if opened.lease is not None:
            with suppress(CtxwrightError):
                opened.lease.release()
        if opened.owned_store is not None:
            opened.owned_store.close()
        raise


@dataclass
class Parts:
    """What :func:`components_for` decided besides the components, for the record and the loop."""

    compaction: CompactionConfig | None
    compaction_record: dict[str, Any] | bool
    rounds: int | None
    ratio: float
    defence: Features
    defer: DeferConfig
    catalog: CatalogMode
    workspace: Path | None


def components_for(
    opts: Mapping[str, Any],
    backend: Backend,
    stored: Session | None,
    recorded: Mapping[str, Any],
    on_event: EventSink,
    d: BackendDefaults,
) -> tuple[list[Component], Parts]:
    """The components in prefix order for these (resolved) options, and what was decided.

    A feature left out (``None``) is on for a new session when the backend's defaults say
    so, and on a resume exactly when the stored prefix has it (its tools, its manual)."""
    names = stored.prefix.tool_names() if stored is not None else ()

    def on(option: str, in_prefix: bool) -> bool:
        value = opts[option]
        if value is not None:
            return bool(value)
        return in_prefix if stored is not None else d.features

    compaction, compaction_record = _compaction(opts, d, recorded)
    use_status = on("status", stored is not None and stored.prefix.system_prompt.endswith(OPERATING_MANUAL))
    use_todo = on("todo", all(n in names for n in TODO_TOOLS))
    use_reader = compaction is not None and on("read_result", READ_RESULT_TOOL in names)
    use_delegate = on("delegate", DELEGATE_TOOL in names)
    if backend.name == EXTERNAL and use_delegate:
        raise ConfigError(
            "delegate needs a model to run the sub-agent: pass backend= to the Context, or leave delegate off"
        )
    workspace_opt = opts["workspace"]
    if workspace_opt is None and stored is not None:
        workspace_opt = stored.meta.get("workspace")
    workspace = Path(workspace_opt).expanduser().resolve() if workspace_opt else None
    skill_dirs = opts["skills"]
    if skill_dirs is None and isinstance(recorded.get("skills"), list):
        skill_dirs = recorded["skills"]
    catalog = _catalog_mode(opts["skills_catalog"], stored, recorded)
    frozen = [CatalogEntry.from_dict(e) for e in recorded.get("skills_frozen") or () if isinstance(e, dict)]
    mcp_commands = opts["mcp_servers"]
    if mcp_commands is None and isinstance(recorded.get("mcp"), list):
        mcp_commands = recorded["mcp"]
    defer = _defer_config(opts, recorded, stored)
    defence = _defence(opts, stored, recorded)
    rounds = recipe.pick("max_tool_rounds", opts, recorded, d.max_tool_rounds)
    ratio = recipe.pick("cache_price_ratio", opts, recorded, d.cache_price_ratio)

    comps: list[Component] = [UserTools(opts["tools"])]
    if workspace is not None:
        comps.append(WorkspaceTools(workspace))
    todo = TodoComponent() if use_todo else None
    if todo is not None:
        comps.append(todo)
    if use_reader:  # offloaded and cleared results are paged back; the context binds it
        comps.append(ReaderComponent())
    if use_delegate:
        comps.append(DelegateComponent(on_event=on_event))
    has_skills = skill_dirs is not None or (names and all(n in names for n in SKILL_TOOLS))
    if has_skills or catalog == "prefix":
        comps.append(
            SkillsComponent(
                skill_dirs,
                catalog=catalog,
                allow_scripts=opts["allow_skill_scripts"],
                script_timeout=recipe.pick("skill_script_timeout", opts, recorded, None),
                frozen=frozen,
                on_event=on_event,
                shown_in=shown_in,
            )
        )
    if mcp_commands is not None:
        comps.append(McpComponent(mcp_commands, timeout=opts["mcp_timeout"], on_event=on_event))
    comps.append(DeferralComponent(defer))
    comps.append(
        DefenceComponent(
            defence,
            approve=opts["approve"],
            allow=opts["allow"],
            gate_rules=opts["gate_rules"],
            approve_timeout=opts["approve_timeout"],
            workspace=workspace,
        )
    )
    if use_status:
        comps.append(
            StatusComponent(
                StatusConfig(
                    mode=opts["status_mode"],
                    max_iterations=opts["max_iterations"],
                    max_repeats=opts["max_repeats"],
                    alpha=ratio,
                ),
                todo=todo,
                cwd=workspace,
            )
        )
    parts = Parts(compaction, compaction_record, rounds, ratio, defence, defer, catalog, workspace)
    return comps, parts


def chosen_window(backend: Backend) -> int:
    """The backend's context window: the embedded model's ``n_ctx``, the served model's given
    window, else 128,000."""
    return backend.context_window or 128_000


# -- the options ----------------------------------------------------------------------------
#: every option :func:`wire` reads, with the value that means "not given"
OPTION_NAMES = (
    "system",
    "tools",
    "model",
    "base_url",
    "api_key",
    "api_key_env",
    "timeout",
    "max_retries",
    "stream",
    "gguf",
    "workspace",
    "window",
    "compaction",
    "summaries",
    "read_result",
    "status",
    "status_mode",
    "cache_price_ratio",
    "todo",
    "delegate",
    "skills",
    "allow_skill_scripts",
    "skill_script_timeout",
    "skills_catalog",
    "mcp_servers",
    "mcp_timeout",
    "defence",
    "sanitize",
    "approve",
    "allow",
    "gate_rules",
    "approve_timeout",
    "defer_tools",
    "tool_index",
    "reasoning",
    "max_iterations",
    "max_tool_rounds",
    "tool_choice_first",
    "max_tokens",
    "tool_timeout",
    "max_repeats",
    "timestamps",
)


def _with_defaults(options: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(options) - set(OPTION_NAMES))
    if unknown:
        import difflib

        hints = []
        for name in unknown:
            close = difflib.get_close_matches(name, OPTION_NAMES, n=1)
            hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise ConfigError(f"unknown option(s) {', '.join(hints)}: the options are listed in docs/options.md")
    return {name: options.get(name) for name in OPTION_NAMES}


def _open(db: str | Path | Store | None, resume: str | None, take_over: bool) -> _Open:
    owned = None
    if db is None or isinstance(db, Store):
        store = db
    else:
        store = owned = Store(Path(db).expanduser())
    opened = _Open(store, owned)
    if resume is None:
        return opened
    try:
        if store is None:
            raise ConfigError("resuming a session needs the database it is stored in: db=PATH (CLI: --db PATH)")
        sid = store.get_session(resume).id
        # one writer per session (core/lease.py), then what the store could not take last time
        opened.lease = acquire_lease(store, sid, take_over=take_over)
        import_pending(store, sid)
        opened.stored = Session.resume(store, sid)
        opened.recorded = dict(opened.stored.meta.get(META_KEY) or {})
    except BaseException:
        if opened.lease is not None:
            with suppress(CtxwrightError):
                opened.lease.release()
        if owned is not None:
            owned.close()
        raise
    return opened


def _record(
    opts: Mapping[str, Any], recorded: Mapping[str, Any], backend: Backend, parts: Parts, comps: Sequence[Component]
) -> dict[str, Any]:
    """What a resume needs: every recorded option, the backend's own record, each
    component's (never the API key)."""
    out: dict[str, Any] = {
        **recorded,
        **backend.recipe_record(),  # what a resume needs to rebuild it (never the API key)
        **{k: opts[k] for k in recipe.DEFAULTS},
        "max_tool_rounds": parts.rounds,
        "cache_price_ratio": parts.ratio,
        "compaction": parts.compaction_record,
        "defence": parts.defence.to_dict(),
        "defer_tools": parts.defer.to_dict(),
    }
    out.update({k: opts[k] for k in recipe.WHEN_GIVEN if opts[k] is not None})
    for c in comps:
        if isinstance(c, (SkillsComponent, McpComponent)):
            out.update(c.record())
    skills = next((c for c in comps if isinstance(c, SkillsComponent)), None)
    has_dirs = skills is not None and skills.dirs is not None
    if has_dirs or opts["skills_catalog"] is not None or "skills_catalog" in recorded:
        out["skills_catalog"] = parts.catalog
    return out


def _backend(
    backend: Backend | str | None,
    opts: dict[str, Any],
    stored: Session | None,
    recorded: Mapping[str, Any],
    default: str,
) -> tuple[Backend, Backend | None]:
    """The backend to run on, and the one this wiring created (and so closes)."""
    if backend is not None and not isinstance(backend, str):
        if not isinstance(backend, Backend):
            raise ConfigError(
                f"backend={backend!r} is not a backend: pass 'embedded', 'openai', or an instance of a "
                "subclass of ctxwright.backends.base.Backend (it writes complete(request, *, on_event=None))"
            )
        for opt in ("model", "base_url", "gguf", "api_key", "timeout", "max_retries", "stream"):
            if opts[opt] is not None and not (opt == "model" and backend.name == EXTERNAL):
                raise ConfigError(f"{opt}= is for the backends the harness creates; configure the object instead")
        return backend, None
    model, base_url, gguf = opts["model"], opts["base_url"], opts["gguf"]
    window = opts["window"]
    if stored is not None:  # refused before anything is loaded or sent (agent/recipe.py)
        implied = backend or ("openai" if base_url else "embedded" if gguf else None)
        if implied is None and model is not None and stored.backend != EXTERNAL:
            implied = "openai"
        recipe.check_same_model(stored.id, stored.backend, stored.model, implied, model)
    if backend is None and stored is not None:
        backend = stored.backend
        if backend not in ("embedded", "openai", EXTERNAL):
            raise ConfigError(
                f"session {stored.id} ran on the {backend!r} backend, which the harness cannot recreate "
                "from the store: pass backend= (an object) to continue it"
            )
    if backend is None and (base_url is not None or (model is not None and default != EXTERNAL)):
        backend = "openai"
    backend = backend or default
    if backend == EXTERNAL:
        if stored is not None:
            model = model or stored.model
            window = window or recorded.get("window")
        ext = ExternalBackend(model, context_window=window)
        return ext, None
    if backend == "openai":
        if stored is not None and stored.backend == "openai":
            model = model or stored.model
            base_url = base_url or recorded.get("base_url")
            window = window or recorded.get("window")
        if gguf is not None:
            raise ConfigError("gguf= (--gguf) is for the embedded backend; drop it or drop backend='openai'")
        if not model:
            raise ConfigError("the openai backend needs the served model's name: model=NAME (CLI: --model NAME)")
        from ctxwright.backends.openai_compat import DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT_S, OpenAIBackend

        if stored is not None and opts["base_url"] is None and base_url is not None and is_redacted(base_url):
            raise ConfigError(
                f"session {stored.id} was started on a base URL with credentials ({base_url}), which are never "
                "stored; pass the full URL again: base_url= (CLI: --base-url)"
            )
        try:
            made = OpenAIBackend(
                model=model,
                base_url=base_url,
                api_key=opts["api_key"],
                api_key_env=opts["api_key_env"],
                context_window=window,
                timeout=DEFAULT_TIMEOUT_S if opts["timeout"] is None else opts["timeout"],
                max_retries=DEFAULT_MAX_RETRIES if opts["max_retries"] is None else opts["max_retries"],
                stream=bool(opts["stream"]),
            )
        except ValueError as exc:
            raise ConfigError(f"{exc} (CLI: --timeout, --max-retries)") from None
        return made, made
    if backend == "embedded":
        if model is not None or base_url is not None or opts["api_key"] is not None:
            raise ConfigError(
                "model=, base_url= and api_key= are for backend='openai' (CLI: --backend openai); "
                "the embedded backend takes gguf= (--gguf PATH) for another model"
            )
        if opts["timeout"] is not None or opts["max_retries"] is not None:
            raise ConfigError(
                "timeout= and max_retries= (--timeout, --max-retries) are for a served model "
                "(backend='openai'); the embedded model runs in-process"
            )
        if stored is not None:
            gguf = gguf or recorded.get("gguf")
            window = window or recorded.get("window")
        path = check_gguf(gguf) if gguf is not None else None
        from ctxwright.backends.embedded import EmbeddedBackend

        made_e = EmbeddedBackend(model_path=path, n_ctx=window or 8192, stream=opts["stream"] is not False)
        return made_e, made_e
    raise ConfigError(f"unknown backend {backend!r}: use 'embedded', 'openai', or pass a backend object")


def _compaction(
    opts: Mapping[str, Any], d: BackendDefaults, recorded: Mapping[str, Any]
) -> tuple[CompactionConfig | None, dict[str, Any] | bool]:
    """The compaction config to run with, and what to record of it (``False``: off)."""
    given = opts["compaction"]
    stored = recorded.get("compaction")
    from_record = given is None and stored is not None
    if given is None:
        given = True if stored is None else stored
    if given is False:
        return None, False
    if isinstance(given, CompactionConfig):
        cfg = replace(given)  # a copy: the caller's stays as given
    elif given is True:
        cfg = CompactionConfig()
    elif isinstance(given, Mapping):  # fields over the recorded config (or the defaults)
        base = stored if isinstance(stored, Mapping) else {}
        fields = given if from_record else {**base, **recipe.overrides(given)}
        cfg = recipe.compaction_from_dict(fields, "compaction")
        from_record = from_record or isinstance(stored, Mapping)
    else:
        raise ConfigError(
            f"compaction={given!r}: pass a CompactionConfig, a mapping of its fields, True (defaults) or False (off)"
        )
    summaries = opts["summaries"]
    if summaries is not None:
        cfg.archival_summaries = cfg.full_compaction = bool(summaries)
    elif not from_record and not (cfg.archival_summaries or cfg.full_compaction):
        cfg.archival_summaries = cfg.full_compaction = d.features
    record = recipe.compaction_to_dict(cfg)
    if cfg.window_tokens is None:
        cfg.window_tokens = opts["window"]
    return cfg, record


def _defence(opts: Mapping[str, Any], stored: Session | None, recorded: Mapping[str, Any]) -> Features:
    """The level given, else the one the session recorded, else the default. A session
    from before levels existed recorded none and its prompt has no section: ``none``."""
    given, sanitize = opts["defence"], opts["sanitize"]
    rec = recorded.get("defence")
    if given is None and stored is not None:
        if isinstance(rec, Mapping) and rec.get("level") in LEVELS:
            given = rec["level"]
            if sanitize is None and isinstance(rec.get("sanitize"), bool):
                sanitize = rec["sanitize"]
        else:
            given = "none"
    return defence_features(given, sanitize=sanitize)


def _defer_config(opts: Mapping[str, Any], recorded: Mapping[str, Any], stored: Session | None) -> DeferConfig:
    rec = recorded.get("defer_tools")
    given = opts["defer_tools"]
    if given is None and stored is not None and not isinstance(rec, Mapping):
        given = "none"  # a session from before deferral: every tool was in its prefix
    try:
        return DeferConfig.of(given, opts["tool_index"], rec if isinstance(rec, Mapping) else None)
    except ValueError as exc:
        raise ConfigError(f"{exc} (CLI: --defer-tools, --tool-index)") from None


def _catalog_mode(given: str | None, stored: Session | None, recorded: Mapping[str, Any]) -> CatalogMode:
    """The session's catalog mode: as given, else as recorded, else ``reminder``. It decides
    the ``Skill`` tool's bytes, so a resume in the other mode is refused."""
    if given is not None and given not in CATALOG_MODES:
        raise ConfigError(f"skills_catalog={given!r}: use 'reminder' (the default) or 'prefix'")
    was = recorded.get("skills_catalog", "reminder")
    if stored is not None and given is not None and given != was:
        raise ConfigError(
            f"session {stored.id} was started with skills_catalog={was!r} (--skills-catalog {was}); the catalog "
            "mode decides the Skill tool's bytes in its prefix. Leave the option out to continue it, or start "
            "a new session"
        )
    mode = given or was
    return cast(CatalogMode, mode if mode in CATALOG_MODES else "reminder")


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
