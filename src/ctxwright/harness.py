"""The one way to assemble an agent: backend, tools, prefix, session, reasoning policy,
compaction, status bar, TODO list, sub-agents -- in the order that keeps them consistent.

Why one class: the parts depend on each other in ways a caller gets wrong when wiring them
by hand. The tool list decides the static prefix, so every optional tool (TODO, read_result,
delegate, file tools) must be registered *before* the session starts and in a fixed order;
the reasoning policy must be recorded with the session, or the renderer (``core/render.py``)
sends reasoning back as recorded, which a served model may reject (``core/reasoning.py``); a
resumed session must get exactly the tools its stored prefix declares. The CLI (``cli/main.py``) builds one
:class:`Harness` and only prints, so a Python user and the command line run the same agent.

Defaults that depend on the backend live in :func:`backend_defaults` and nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Any, cast

from ctxwright.agent import recipe
from ctxwright.agent.delegate import Delegator
from ctxwright.agent.loop import Agent, AgentConfig, EventSink, RunResult, _counter_for
from ctxwright.audit.compare import Prices
from ctxwright.backends.base import Backend
from ctxwright.compaction import CompactionConfig
from ctxwright.compaction.retrieval import ResultReader
from ctxwright.compaction.skills import shown_in
from ctxwright.core.events import MCP_TOOLS_KEY, UserEvent
from ctxwright.core.prefix import Prefix
from ctxwright.core.reasoning import ReasoningMode, ReasoningPolicy
from ctxwright.core.reasoning import install as install_reasoning
from ctxwright.core.redact import is_redacted, redact
from ctxwright.core.request import ToolChoice, ToolSpec
from ctxwright.core.sections import SystemPromptBuilder
from ctxwright.core.session import Session
from ctxwright.defence.gate import ApprovalMode, Approver, Gate, build_gate
from ctxwright.defence.levels import LEVELS, Features, Level
from ctxwright.defence.levels import features as defence_features
from ctxwright.defence.policy import GatePolicy
from ctxwright.errors import BackendUnavailable, ConfigError, CtxwrightError, PrefixMismatch
from ctxwright.mcp.connection import DEFAULT_TIMEOUT_S as MCP_DEFAULT_TIMEOUT_S
from ctxwright.mcp.connection import parse_command
from ctxwright.mcp.tools import McpTools, reminder
from ctxwright.skills.loader import Skill, load_skills
from ctxwright.skills.scripts import DEFAULT_SCRIPT_TIMEOUT_S, SkillScripts
from ctxwright.skills.tools import (
    CATALOG_MODES,
    RUN_SKILL_SCRIPT_TOOL,
    SKILL_TOOLS,
    CatalogEntry,
    CatalogMode,
    SkillTools,
    announce,
)
from ctxwright.status.bar import OPERATING_MANUAL, Mode, StatusBar, StatusConfig
from ctxwright.status.todo import TodoList
from ctxwright.store.lease import Lease
from ctxwright.store.lease import acquire as acquire_lease
from ctxwright.store.recovery import import_pending
from ctxwright.store.sessions import Store
from ctxwright.tools.builtin import default_tools, make_file_tools
from ctxwright.tools.deferred import CALL_TOOL, DISPATCH_TOOLS, SEARCH_TOOL, DeferConfig, DeferredTools, choose_deferred
from ctxwright.tools.registry import Tool, ToolRegistry, valid_function_name

__all__ = ["DEFAULT_SYSTEM", "BackendDefaults", "Harness", "backend_defaults"]

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
FILE_TOOLS = ("read_file", "list_dir")

#: ``Session.meta`` key holding what :meth:`Harness.resume` needs to rebuild the backend.
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
      served model they are on.
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
    return BackendDefaults(features=True, tool_choice_first="auto", max_tool_rounds=None, cache_price_ratio=0.1)


class Harness:
    """An agent: one session on one backend with one tool list, ready to :meth:`run`.

    Start a new session with ``Harness(...)``; continue a stored one with
    :meth:`Harness.resume` (or ``Harness(resume=ID, db=...)``). Use it as a context manager,
    or call :meth:`close`, to release the model and the database.

    Args:
        system: the system prompt; default :data:`DEFAULT_SYSTEM`. With the status bar on,
            the harness appends the status bar's manual (``status/bar.py``) to it. On resume
            it may be left out; if given, it must match the stored one.
        tools: the agent's tools, in the order the model sees them: :class:`Tool` objects
            (``@tool``) or plain typed functions with a docstring. Default: the demo tools
            (``get_current_time``, ``get_weather``, ``calculator``). The harness appends the
            file tools (with ``workspace``), the TODO tools, ``read_result`` and ``delegate``
            when those options are on. On resume the resulting list must equal the stored
            prefix's tools (names, order and schema bytes), else :class:`PrefixMismatch`.
        backend: ``"embedded"`` (llama.cpp in-process; the bundled SmolLM2-135M or ``gguf``),
            ``"openai"`` (any OpenAI-compatible server: ``model``, ``base_url``), or a backend
            object (``OpenAIBackend``, ``EmbeddedBackend``, ``ScriptedBackend``, your own
            class with ``name``, ``model``, ``complete``, ``count_tokens``, ``close``). Default:
            on resume the session's own backend; else ``"openai"`` when ``model`` or
            ``base_url`` is given, ``"embedded"`` otherwise. A backend object passed in is
            not closed by :meth:`close`; one the harness created is.
        model: the served model's name (``backend="openai"``); on resume, the session's.
        base_url: the OpenAI-compatible endpoint, e.g. ``http://127.0.0.1:8080/v1``; default
            the SDK's (``OPENAI_BASE_URL`` or OpenAI). Recorded with the session for resume.
        api_key: the API key; default read from the ``api_key_env`` variable (local servers
            need none). Never recorded.
        api_key_env: the environment variable holding the API key (default ``OPENAI_API_KEY``).
        timeout: seconds the served model may take to answer (without sending a byte) before
            a try is given up (``backend="openai"``). ``None``: 120.
        max_retries: retries after a failed try (timeouts, connection failures, HTTP 408,
            409, 429, 5xx), each announced with a ``retry`` event before its wait
            (``backend="openai"``). ``None``: 2.
        stream: stream each reply's text as ``token`` events while it is generated. ``None``:
            on for the embedded model (it generates as a stream anyway), off for served
            models (a streamed request differs on the wire, and some servers send no usage
            with it; ``backends/openai_compat.py`` falls back when a server cannot stream).
        gguf: path of a GGUF chat model for the embedded backend instead of the bundled one.
        db: where the session is stored: a SQLite file path or a :class:`Store`. ``None``
            keeps the session in memory only (it cannot be resumed). Resume needs it.
        resume: the id (or a unique prefix of it) of a stored session to continue. Every
            option left out (``None``) is then the one the session recorded
            (``agent/recipe.py``); one given again overrides it. Another backend or model
            than the session's is refused (:class:`ConfigError`).
        take_over: continue the session even if the store says another process runs it
            (one writer per session, ``core/lease.py``); for a process on another host, or
            after checking it is gone. A lease of a dead process on this host is taken over
            without it.
        workspace: a folder; gives the agent ``read_file`` and ``list_dir`` confined to it
            (off by default: fewer tools, less for a small model to confuse).
        window: the model's context window in tokens: the embedded model's ``n_ctx``
            (default 8,192), the served model's window (default 128,000), and what
            compaction plans for unless ``compaction.window_tokens`` says otherwise.
        compaction: a :class:`CompactionConfig`; ``True`` for the defaults; a mapping of
            its fields for those fields over the session's recorded config (or the
            defaults); ``False`` sends the trajectory as recorded (a character cap per
            result only). ``None``: on resume, as the session recorded; else the defaults.
        summaries: the LLM compaction layers (``archival_summaries`` and ``full_compaction``
            of the config). ``None``: as the given config says if it switched one on, else on
            for served models and off on the embedded one (:func:`backend_defaults`).
        read_result: give the agent ``read_result`` to page back offloaded and cleared
            results (only with compaction on). ``None``: by backend.
        status: an ``<agent_status>`` message before each call (``status/bar.py``). ``None``:
            by backend; on resume, as the session was started.
        status_mode: ``"auto"`` (the cost model decides, the default), ``"replace"`` or
            ``"append"``.
        cache_price_ratio: cached ÷ uncached input price, for ``status_mode="auto"``.
            ``None``: by backend.
        todo: give the agent the TODO tools, shown in the status bar. ``None``: by backend;
            on resume, as the session was started.
        delegate: give the agent ``delegate(task)``, a sub-agent in its own session.
            ``None``: by backend; on resume, as the session was started.
        skills: folders of Agent Skills (a skill folder, or a folder of them); the project's
            and the user's ``.agents/skills/`` are searched after them (``skills/loader.py``).
            When any skill loads, the agent gets ``Skill(name)`` and ``read_skill_file(name,
            path)``, and before the next user message a ``<system-reminder>`` user message
            lists the skills the session has not announced yet (never the system prompt).
            Loader warnings go to ``on_event("skills_warning", {"message": ...})`` and
            :attr:`skill_warnings`. ``None``: no skills; on resume, the recorded folders.
            A sub-agent (``delegate``) gets the same skills, announced in its own session.
        allow_skill_scripts: also give the agent ``run_skill_script(name, script, args)``,
            which runs a file of a skill's ``scripts/`` folder (``skills/scripts.py``). Off
            by default: a skill folder is third-party code. Only when skills loaded.
            ``None``: off; on resume, as the session was started (the tool is in its prefix).
        skill_script_timeout: seconds a skill script may run before its process group is
            killed (default 30). ``None``: on resume, as recorded.
        skills_catalog: where the catalog goes. ``"reminder"`` (the default): appended as
            above, one small message per new skill and no cache break. ``"prefix"``: the
            catalog known at start goes into the ``Skill`` tool's description and ``name``
            becomes an enum of those skills; no catalog message. It is frozen with the
            prefix and recorded with the session, so a resume sends the same bytes; a skill
            added later is not announced and cannot be loaded (a ``skills_warning`` says so):
            start a new session. Fixed for a session.
        mcp_servers: MCP servers to start over stdio (``mcp/``), each a command line (a
            string, split like a shell) or an argv list. Their tools are added after all
            the others (before ``search_tools`` and ``call_tool``; deferrable, see
            ``defer_tools``) as ``SERVER__TOOL``, with the server's schemas verbatim; their results
            reach the model as ``<external_content>`` (defence ``tags`` and above). A server that sends
            ``tools/list_changed`` never changes the prefix: new tools are deferred and
            announced in a ``<system-reminder>`` user message before the next model call,
            removed ones answer with an error. A server that cannot start raises
            :class:`~ctxwright.errors.McpServerError`; one that crashes or hangs later only
            fails its own calls. ``close`` stops them. ``None``: none; on resume, the
            recorded commands.
        mcp_timeout: seconds an MCP tool call may take (default 60).
        defence: the prompt-injection defence level (``defence/levels.py``; the book's
            experiment 2-5): ``"none"`` (D1), ``"warning"`` (D2: one sentence in the system
            prompt), ``"tags"`` (D3, the default: untrusted tool results wrapped as
            ``<external_content>``, the tags explained in the system prompt, the sanitizer),
            ``"gate"`` (D4: D3 + a confirmation gate before ``write``/``external`` calls) or
            ``"provenance"`` (D5: D4 + argument provenance), or a ``Features``. The level's
            system-prompt section is part of the prefix, so it is recorded with the session;
            on resume ``None`` keeps the recorded level, and a level with another section is
            refused (:class:`PrefixMismatch`).
        sanitize: the sanitizer on untrusted results (``defence/sanitize.py``). ``None``: on
            with the tags; ``False`` turns it off (marking stays).
        approve: the confirmation gate's decision on a flagged call (levels ``gate`` and
            ``provenance``; ``defence/gate.py``): ``"ask"`` (default: ask the callback, deny
            without one), ``"deny"``, ``"allow-listed"`` (run only calls whose every target
            is allowlisted), or a callback ``fn(GateRequest) -> "approve" | "deny" | bool``
            (which means ``"ask"``). Not recorded: give it again on resume.
        allow: the gate's allowlists, a ``GatePolicy`` or ``{"paths": [...], "domains":
            [...], "hosts": [...]}`` (``defence/policy.py``); the workspace is always allowed.
        gate_rules: a YAML file with the same keys, merged with ``allow``.
        approve_timeout: seconds the callback may take before its silence is a deny
            (default 120).
        defer_tools: which tools leave the request's ``tools`` array, to be found with
            ``search_tools(query, limit)`` (their full schemas come back as its tool result)
            and run with ``call_tool(name, arguments)``; both are added to the prefix when any
            tool is deferred (``tools/deferred.py``). ``"auto"`` (the default): defer every
            deferrable tool when the schemas would take more than 10% of the window or there
            are more than 30 tools, and tools marked ``@tool(deferred=True)`` always;
            ``"all"`` / ``True``; ``"none"`` / ``False``; or a :class:`DeferConfig` (other
            thresholds). The harness's own tools (demo, file, TODO, ``read_result``,
            ``delegate``, skill tools) and tools marked ``deferred=False`` are never deferred.
            Decided when the session starts and recorded: a resume rebuilds the same prefix.
        tool_index: ``"prefix"`` also lists the deferred tools, ``[name: summary]`` one a
            line, in ``search_tools``' description (frozen with the prefix; for catalogs small
            enough to list); ``"none"`` (default): search only.
        reasoning: how earlier reasoning is sent back: ``"strip"``, ``"keep"``,
            ``"must_send_back"``, ``"qwen3"`` or a :class:`ReasoningPolicy`. ``None``: the
            mode recorded with the session, else by model family (``core/reasoning.py``).
            Fixed for a session: a different mode on resume raises ``ReasoningPolicyConflict``.
        max_iterations: model calls per :meth:`run` before it stops with ``max_iterations``
            (default 20).
        max_tool_rounds: rounds of tool calls per run before an answer is required.
            ``None``: by backend (1 on the embedded model, unbounded on served ones).
        tool_choice_first: ``tool_choice`` of each run's first call (``"auto"``,
            ``"required"``, ``"none"`` or a tool name). ``None``: by backend, and ``"auto"``
            once the session has a user message (a follow-up needs no forced tool call).
        max_tokens: cap on each reply's tokens (default 256).
        tool_timeout: seconds before a tool call is abandoned (a tool's own ``timeout_s``
            wins; default 30).
        max_repeats: identical tool calls (same tool, same arguments) in a row before the
            model is told so on the result (and in the status bar); the next identical call
            is not run and ends the run with ``repeated_tool_call`` (``core/repeats.py``).
            Default 3; 0: no limit.
        timestamps: prefix user and tool contents with ``[YYYY-MM-DD HH:MM:SS]`` (default off).
        on_event: ``on_event(kind, data)`` for progress: ``user``, ``status``, ``compaction``,
            ``request``, ``token`` (streamed text, from a backend that streams), ``assistant``,
            ``tool_start``, ``tool``, ``repeated_call``, ``error``, ``stop``, ``ledger_mismatch``
            (the data of each: ``agent/loop.py``), and from the backend during a call:
            ``retry`` (``attempt``, ``max_retries``, ``reason``, ``wait_s``) and
            ``stream_fallback`` (``reason``). A sub-agent's events come with ``data["child"]``,
            its session id.
    """

    def __init__(
        self,
        system: str | None = None,
        tools: Iterable[Tool | Callable[..., Any]] | None = None,
        *,
        backend: Backend | str | None = None,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str | None = None,
        timeout: float | None = None,
        max_retries: int | None = None,
        stream: bool | None = None,
        gguf: str | Path | None = None,
        db: str | Path | Store | None = None,
        resume: str | None = None,
        take_over: bool = False,
        workspace: str | Path | None = None,
        window: int | None = None,
        compaction: CompactionConfig | Mapping[str, Any] | bool | None = None,
        summaries: bool | None = None,
        read_result: bool | None = None,
        status: bool | None = None,
        status_mode: Mode | None = None,
        cache_price_ratio: float | None = None,
        todo: bool | None = None,
        delegate: bool | None = None,
        skills: Iterable[str | Path] | None = None,
        allow_skill_scripts: bool | None = None,
        skill_script_timeout: float | None = None,
        skills_catalog: CatalogMode | None = None,
        mcp_servers: Iterable[str | Sequence[str]] | None = None,
        mcp_timeout: float | None = None,
        defence: Level | Features | None = None,
        sanitize: bool | None = None,
        approve: ApprovalMode | Approver | None = None,
        allow: GatePolicy | Mapping[str, Any] | None = None,
        gate_rules: str | Path | None = None,
        approve_timeout: float | None = None,
        defer_tools: bool | str | DeferConfig | Mapping[str, Any] | None = None,
        tool_index: str | None = None,
        reasoning: ReasoningMode | ReasoningPolicy | None = None,
        max_iterations: int | None = None,
        max_tool_rounds: int | None = None,
        tool_choice_first: ToolChoice | None = None,
        max_tokens: int | None = None,
        tool_timeout: float | None = None,
        max_repeats: int | None = None,
        timestamps: bool | None = None,
        on_event: EventSink | None = None,
    ) -> None:
        self._closed = False
        self._owned_backend: Backend | None = None
        self._owned_store: Store | None = None
        self._lease: Lease | None = None
        self.mcp: McpTools | None = None
        try:  # every parameter by name, so a new and a resumed session take one path
            self._setup(locals())
        except BaseException:
            self.close()
            raise

    @classmethod
    def resume(
        cls, session_id: str, tools: Iterable[Tool | Callable[..., Any]] | None = None, **options: Any
    ) -> Harness:
        """Continue the stored session ``session_id`` (``db=`` names the database).

        Everything the session recorded is re-derived from it: the backend and model (and
        the base URL or GGUF path it was started with), the workspace, whether the status
        bar, TODO tools, ``read_result`` and ``delegate`` were on (from its prefix), its
        reasoning mode, and every run option (``agent/recipe.py``). Pass ``tools`` again
        (the same ones: functions are not stored); every other keyword of :class:`Harness`
        may override what was recorded, but nothing that would change the stored prefix,
        the backend or the model.
        """
        return cls(tools=tools, resume=session_id, **options)

    # -- assembly ------------------------------------------------------------------------
    def _setup(self, opts: dict[str, Any]) -> None:
        if opts["max_repeats"] is not None and opts["max_repeats"] < 0:
            raise ConfigError(
                f"max_repeats={opts['max_repeats']}: give 1 or more identical calls in a row, or 0 for no limit"
            )
        self.on_event: EventSink = opts["on_event"] or (lambda kind, data: None)
        self.store: Store | None = self._open_store(opts["db"])
        stored: Session | None = None
        recorded: dict[str, Any] = {}
        if opts["resume"] is not None:
            if self.store is None:
                raise ConfigError("resuming a session needs the database it is stored in: db=PATH (CLI: --db PATH)")
            sid = self.store.get_session(opts["resume"]).id
            # one writer per session (core/lease.py), then what the store could not take last time
            self._lease = acquire_lease(self.store, sid, take_over=opts["take_over"])
            import_pending(self.store, sid)
            stored = Session.resume(self.store, sid)
            recorded = dict(stored.meta.get(META_KEY) or {})
        # every option not given: as the session recorded it, else the default (agent/recipe.py)
        opts = {**opts, **{k: recipe.pick(k, opts, recorded, v) for k, v in recipe.DEFAULTS.items()}}
        opts.update({k: recipe.pick(k, opts, recorded, None) for k in recipe.WHEN_GIVEN})

        # the backend first: what is switched on by default depends on it
        self.backend: Backend = self._backend(opts, stored, recorded)
        if stored is not None:
            recipe.check_same_model(stored.id, stored.backend, stored.model, self.backend.name, self.backend.model)
        d = backend_defaults(self.backend.name)
        names = stored.prefix.tool_names() if stored is not None else ()

        def on(option: str, in_prefix: bool) -> bool:
            value = opts[option]
            if value is not None:
                return bool(value)
            return in_prefix if stored is not None else d.features

        compaction, compaction_record = self._compaction(opts, d, recorded)
        use_status = on("status", stored is not None and stored.prefix.system_prompt.endswith(OPERATING_MANUAL))
        use_todo = on("todo", all(n in names for n in TODO_TOOLS))
        use_reader = compaction is not None and on("read_result", READ_RESULT_TOOL in names)
        use_delegate = on("delegate", DELEGATE_TOOL in names)
        skill_dirs = opts["skills"]
        if skill_dirs is None and isinstance(recorded.get("skills"), list):
            skill_dirs = recorded["skills"]
        self.skills: list[Skill] = []
        self.skill_warnings: list[str] = []
        if skill_dirs is not None:
            skill_dirs = [str(Path(d).expanduser().resolve()) for d in skill_dirs]  # a resume may run elsewhere
            loaded = load_skills(skill_dirs)
            self.skills, self.skill_warnings = loaded.skills, loaded.warnings
            for warning in self.skill_warnings:
                self.on_event("skills_warning", {"message": warning})
        self.skills_catalog: CatalogMode = self._catalog_mode(opts["skills_catalog"], stored, recorded)
        # running skill scripts: off unless asked for, and on resume as the prefix says
        allow_scripts = opts["allow_skill_scripts"]
        if allow_scripts is None:
            allow_scripts = stored is not None and RUN_SKILL_SCRIPT_TOOL in names
        script_timeout = recipe.pick("skill_script_timeout", opts, recorded, DEFAULT_SCRIPT_TIMEOUT_S)
        frozen: list[CatalogEntry] | None = None
        if self.skills_catalog == "prefix":
            # frozen with the prefix: the entries recorded at start, or the skills loaded now
            if stored is not None:
                frozen = [CatalogEntry.from_dict(e) for e in recorded.get("skills_frozen") or () if isinstance(e, dict)]
            else:
                frozen = [CatalogEntry.of(sk) for sk in self.skills]
            in_catalog = {e.name for e in frozen}
            for sk in self.skills:
                if sk.name not in in_catalog:
                    warning = (
                        f"skill {sk.name!r} ({sk.folder}) is not in this session's catalog: with --skills-catalog "
                        "prefix the catalog is frozen with the prefix when the session starts, so it is not "
                        "announced and Skill cannot load it; start a new session to use it"
                    )
                    self.skill_warnings.append(warning)
                    self.on_event("skills_warning", {"message": warning})
            has_skill_tools = bool(frozen)
        else:
            # registered when skills loaded, or when the stored prefix has them (a folder since removed)
            has_skill_tools = bool(self.skills or (names and all(n in names for n in SKILL_TOOLS)))
        self.skill_tools: SkillTools | None = (
            SkillTools(self.skills, scripts_allowed=bool(allow_scripts), frozen=frozen) if has_skill_tools else None
        )
        self.skill_scripts: SkillScripts | None = None
        if self.skill_tools is not None and allow_scripts:
            try:
                self.skill_scripts = SkillScripts(self.skill_tools, timeout_s=float(script_timeout))
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"skill_script_timeout={script_timeout!r}: give a number of seconds above 0") from exc
        workspace_opt = opts["workspace"]
        if workspace_opt is None and stored is not None:
            workspace_opt = stored.meta.get("workspace")
        self.workspace: Path | None = Path(workspace_opt).expanduser().resolve() if workspace_opt else None

        # the tools, in the order the prefix lists them
        self.tools = ToolRegistry()
        self.todo: TodoList | None = TodoList() if use_todo else None
        self.delegator: Delegator | None = None

        def add(items: Iterable[Tool | Callable[..., Any]], source: str | None = None) -> None:
            """Register; the harness's own tools (``source`` given) are core tools, never deferred."""
            for item in items:
                t = item if isinstance(item, Tool) else Tool.from_function(item)
                if source is not None:
                    t = replace(t, source=source, deferred=False if t.deferred is None else t.deferred)
                self.tools.register(t)

        try:
            if opts["tools"] is None:
                add(default_tools(), "the built-in demo tools")
            else:
                add(opts["tools"])
            if self.workspace is not None:
                add(make_file_tools(self.workspace), "the file tools (workspace=)")
            if self.todo is not None:
                add(self.todo.tools(), "the TODO tools (todo=)")
            if use_reader:  # offloaded and cleared results are paged back; the agent binds it
                add([ResultReader().tool()], "read_result (read_result=)")
            if use_delegate:
                self.delegator = Delegator(on_event=self.on_event, skills=self.skill_tools)
                add([self.delegator.tool()], "delegate (delegate=)")
            if self.skill_tools is not None:
                add(self.skill_tools.tools(), "the skill tools (skills=)")
            if self.skill_scripts is not None:
                add([self.skill_scripts.tool()], "run_skill_script (allow_skill_scripts=)")
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"the tool list cannot be used: {exc}") from None
        mcp_commands = opts["mcp_servers"]
        if mcp_commands is None and isinstance(recorded.get("mcp"), list):
            mcp_commands = recorded["mcp"]
        if mcp_commands is not None:
            mcp_commands = [parse_command(c) for c in mcp_commands]
            self._start_mcp(mcp_commands, opts, stored)
        defer_record = self._defer(opts, recorded, stored, names)

        # the defence level: its prompt section is part of the prefix (defence/levels.py)
        self.defence: Features = self._defence(opts, stored, recorded)
        # its confirmation gate (D4, D5), every rule checked now, before the session starts
        self.gate: Gate | None = build_gate(
            enabled=self.defence.gate,
            provenance=self.defence.provenance,
            approve=opts["approve"],
            allow=opts["allow"],
            gate_rules=opts["gate_rules"],
            approve_timeout=opts["approve_timeout"],
            workspace=self.workspace,
        )
        # the section only when some tool's results will be marked (deferred ones included)
        section = self.defence.prompt_section if any(t.trust == "untrusted" for t in self.tools) else None

        # the run configuration, recorded with the session for the next resume (agent/recipe.py)
        rounds = recipe.pick("max_tool_rounds", opts, recorded, d.max_tool_rounds)
        ratio = recipe.pick("cache_price_ratio", opts, recorded, d.cache_price_ratio)
        first = opts["tool_choice_first"]
        config_record = {
            **recorded,
            **self._recipe(opts),
            **{k: opts[k] for k in recipe.DEFAULTS},
            "max_tool_rounds": rounds,
            "cache_price_ratio": ratio,
            "compaction": compaction_record,
            "defence": self.defence.to_dict(),
            "defer_tools": defer_record,
        }
        config_record.update({k: opts[k] for k in recipe.WHEN_GIVEN if opts[k] is not None})
        if skill_dirs is not None:
            config_record["skills"] = skill_dirs
        if self.skill_scripts is not None:  # the tool is in the prefix; the timeout is not
            config_record["allow_skill_scripts"] = True
            config_record["skill_script_timeout"] = self.skill_scripts.timeout_s
        if skill_dirs is not None or opts["skills_catalog"] is not None or "skills_catalog" in recorded:
            config_record["skills_catalog"] = self.skills_catalog
        if frozen is not None:
            config_record["skills_frozen"] = [e.to_dict() for e in frozen]
        if mcp_commands is not None:
            config_record["mcp"] = mcp_commands

        # the session: new, or the stored one if the tools and prompt still match its prefix
        manual = "\n\n" + OPERATING_MANUAL if use_status else ""
        if stored is not None:
            self.session = stored
            _check_prefix(stored, opts["system"], manual, use_status, self.tools.specs(), self.defence, section)
            if config_record != recorded:  # overrides given again are remembered too
                self.session.meta[META_KEY] = config_record
                if self.store is not None:
                    self.store.update_meta(self.session.id, self.session.meta)
        else:
            system = system_prompt(DEFAULT_SYSTEM if opts["system"] is None else opts["system"], section, use_status)
            try:
                prefix = Prefix.build(system, self.tools.specs())
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
            self.session = Session.start(
                prefix,
                store=self.store,
                backend=self.backend.name,
                model=self.backend.model,
                meta={"workspace": str(self.workspace) if self.workspace else None, META_KEY: config_record},
            )
            if self.store is not None:  # one writer per session (core/lease.py)
                self._lease = acquire_lease(self.store, self.session.id)
        if self.skill_tools is not None:  # a second Skill(name) points back only while the view shows the body
            self.skill_tools.is_shown = shown_in(self.session)
        reasoning = opts["reasoning"]
        try:
            policy = ReasoningPolicy(cast(ReasoningMode, reasoning)) if isinstance(reasoning, str) else reasoning
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        install_reasoning(self.session, policy)  # recorded in meta; the renderer reads it (core/render.py)

        if self.todo is not None:  # the list's changes are events of this session, rebuilt on resume
            self.todo.bind(self.session)
        status_bar = None
        if use_status:
            status_bar = StatusBar(
                StatusConfig(
                    mode=opts["status_mode"],
                    max_iterations=opts["max_iterations"],
                    max_repeats=opts["max_repeats"],
                    alpha=ratio,
                ),
                todo=self.todo,
                cwd=str(self.workspace or Path.cwd()),
            )
        self._explicit_first_choice: ToolChoice | None = first
        self._default_first_choice = d.tool_choice_first
        config = AgentConfig(
            max_iterations=opts["max_iterations"],
            tool_timeout_s=opts["tool_timeout"],
            max_repeats=opts["max_repeats"],
            tool_choice_first=self._first_choice(),
            max_tool_rounds=rounds,
            max_tokens=opts["max_tokens"],
            timestamps=opts["timestamps"],
            compaction=compaction,
            defence=self.defence,
        )
        self.agent = Agent(
            self.session,
            self.backend,
            self.tools,
            config,
            on_event=self.on_event,
            status=status_bar,
            before_call=self._before_call if self.mcp is not None else None,
            gate=self.gate,
        )
        if self.delegator is not None:
            self.delegator.bind(self.agent)

    def _start_mcp(self, commands: list[list[str]], opts: dict[str, Any], stored: Session | None) -> None:
        """Start the MCP servers and register their tools after all the others.

        A new session offers every listed tool (in the prefix, or deferred by ``defer_tools``,
        :meth:`_defer`, which runs after this). A resumed one keeps its prefix:
        a tool it lists is registered as it was (or, if its server no longer lists it, as a
        stand-in with the stored schema that answers "removed"); a tool the server lists now
        but the prefix does not is deferred, and announced by :meth:`_announce_mcp`.
        """
        timeout = opts["mcp_timeout"]
        if timeout is not None and timeout <= 0:
            raise ConfigError(
                f"mcp_timeout={timeout!r}: give the seconds an MCP tool call may take (CLI: --mcp-timeout)"
            )
        self.mcp = McpTools.start(
            commands,
            timeout=MCP_DEFAULT_TIMEOUT_S if timeout is None else timeout,
            reserved=self.tools.names(),
            on_event=self.on_event,
        )
        in_prefix = {t.name: t for t in stored.prefix.tools} if stored is not None else None
        if in_prefix is None:
            for t in list(self.mcp.tools.values()):
                self.tools.register(t)
        else:  # the prefix's MCP tools in the prefix's order, then the servers' new ones deferred
            for spec in in_prefix.values():
                if spec.name not in self.tools and self.mcp.owns(spec.name):
                    self.tools.register(self.mcp.tools.get(spec.name) or self.mcp.stub(spec))
            for t in list(self.mcp.tools.values()):
                if t.name not in in_prefix:
                    t = self.mcp.tools[t.name] = replace(t, deferred=True)
                    self.tools.register(t)
        # what the model has been told of the MCP tools: the prefix's, then every reminder
        told = {n for n in (in_prefix or self.mcp.tools) if self.mcp.owns(n)}
        for ev in stored.events if stored is not None else ():
            if isinstance(ev, UserEvent) and (said := ev.mcp_tools_announced) is not None:
                told = (told | set(said[0])) - set(said[1])
        self._mcp_told = told

    def _before_call(self) -> None:
        """Before each model call: take in MCP tool-list changes (``Agent`` calls this)."""
        if self.mcp is None:
            return
        before = set(self.mcp.live())
        for t in self.mcp.refresh(reserved=self.tools.names()):
            if self.deferred is not None:  # searchable with search_tools as well as announced
                self.deferred.add([t])
            else:
                self.tools.register(t)
        if self.deferred is not None:  # a removed tool is not found (a call to it says removed)
            after = set(self.mcp.live())
            self.deferred.searchable([self.mcp.tools[n] for n in sorted(after - before)], hidden=sorted(before - after))
        self._announce_mcp()

    def _announce_mcp(self) -> None:
        """Append a ``<system-reminder>`` user message for MCP tools added or removed since
        the model was last told (recorded as a ``UserEvent`` naming them, like the skills
        catalog, so a resumed session renders it again and is not told twice)."""
        assert self.mcp is not None
        live = self.mcp.live()
        added = [self.mcp.tools[n] for n in live if n not in self._mcp_told]
        removed = sorted(self._mcp_told - set(live))
        if not added and not removed:
            return
        if self.deferred is not None:  # their schemas come from search_tools, not the reminder
            how = f"find one's parameters with {SEARCH_TOOL}(query) and run it with {CALL_TOOL}(name, arguments)."
            text = reminder(added, removed, how=how)
        else:
            how = "call one by its name with arguments matching its parameters."
            text = reminder(added, removed, how=how, schemas=True)
        names = {"added": [t.name for t in added], "removed": removed}
        self.session.add_user(text, **{MCP_TOOLS_KEY: names})
        self._mcp_told = (self._mcp_told | set(names["added"])) - set(removed)
        self.on_event("mcp_tools_changed", {**names, "content": text})

    def _defer(
        self, opts: dict[str, Any], recorded: Mapping[str, Any], stored: Session | None, names: tuple[str, ...]
    ) -> dict[str, Any]:
        """Decide which tools leave the ``tools`` array (``tools/deferred.py``) and register
        ``search_tools`` and ``call_tool`` when any does; what to record of it.

        A new session decides by its :class:`DeferConfig`; a resumed one by its stored
        prefix -- every deferrable tool not in it is deferred, when the prefix has the search
        tools -- so it rebuilds the same ``tools`` array whatever the window or tokenizer now."""
        rec = recorded.get("defer_tools")
        given = opts["defer_tools"]
        if given is None and stored is not None and not isinstance(rec, Mapping):
            given = "none"  # a session from before deferral: every tool was in its prefix
        try:
            config = DeferConfig.of(given, opts["tool_index"], rec if isinstance(rec, Mapping) else None)
        except ValueError as exc:
            raise ConfigError(f"{exc} (CLI: --defer-tools, --tool-index)") from None
        tools = [t for t in self.tools if t.name not in DISPATCH_TOOLS]
        if stored is not None:
            deferred: tuple[str, ...] = ()
            with_search = SEARCH_TOOL in names and config.mode != "none"
            if with_search:
                deferred = tuple(t.name for t in tools if t.deferred is not False and t.name not in names)
        else:
            window = opts["window"] or getattr(self.backend, "n_ctx", None)
            window = window or getattr(self.backend, "context_window", None) or 128_000
            deferred = choose_deferred(tools, config, _counter_for(self.backend), int(window))
            with_search = bool(deferred)
        named = [t.name for t in tools if t.name not in deferred and not valid_function_name(t.name)]
        if named:
            raise ConfigError(
                f"tool name(s) {', '.join(map(repr, named))} cannot be in the request's tools array (servers accept "
                "1-64 letters, digits, '_' or '-'); defer them (Tool.deferred=True, or defer_tools='all' / "
                "--defer-tools all): a deferred tool is called through call_tool, where its name is an argument"
            )
        self.deferred: DeferredTools | None = None
        self.tools.defer(deferred)
        if with_search:
            self.deferred = DeferredTools(self.tools, config)
            try:
                for t in self.deferred.tools():
                    self.tools.register(t)
            except ValueError as exc:
                raise ConfigError(f"the tool list cannot be used: {exc}") from None
            self.on_event("tools_deferred", {"names": list(deferred), "index": config.index})
        return config.to_dict()

    def _open_store(self, db: str | Path | Store | None) -> Store | None:
        if db is None or isinstance(db, Store):
            return db
        self._owned_store = Store(Path(db).expanduser())
        return self._owned_store

    def _backend(self, opts: dict[str, Any], stored: Session | None, recorded: dict[str, Any]) -> Backend:
        backend = opts["backend"]
        if backend is not None and not isinstance(backend, str):
            if not isinstance(backend, Backend):
                raise ConfigError(
                    f"backend={backend!r} is not a backend: pass 'embedded', 'openai', or an object with "
                    "name, model, complete(request), count_tokens(text) and close()"
                )
            for opt in ("model", "base_url", "gguf", "api_key", "timeout", "max_retries", "stream"):
                if opts[opt] is not None:
                    raise ConfigError(f"{opt}= is for the backends the harness creates; configure the object instead")
            return backend
        model, base_url, gguf = opts["model"], opts["base_url"], opts["gguf"]
        window = opts["window"]
        if stored is not None:  # refused before anything is loaded or sent (agent/recipe.py)
            implied = backend or ("openai" if model or base_url else "embedded" if gguf else None)
            recipe.check_same_model(stored.id, stored.backend, stored.model, implied, model)
        if backend is None and stored is not None:
            backend = stored.backend
            if backend not in ("embedded", "openai"):
                raise ConfigError(
                    f"session {stored.id} ran on the {backend!r} backend, which the harness cannot recreate "
                    "from the store: pass backend= (an object) to continue it"
                )
        if backend == "openai" or (backend is None and (model is not None or base_url is not None)):
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
                self._owned_backend = OpenAIBackend(
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
            return self._owned_backend
        if backend is None or backend == "embedded":
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

            self._owned_backend = EmbeddedBackend(
                model_path=path, n_ctx=window or 8192, stream=opts["stream"] is not False
            )
            return self._owned_backend
        raise ConfigError(f"unknown backend {backend!r}: use 'embedded', 'openai', or pass a backend object")

    def _compaction(
        self, opts: dict[str, Any], d: BackendDefaults, recorded: Mapping[str, Any]
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

    @staticmethod
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
        feats = defence_features(given, sanitize=sanitize)
        return feats

    def _recipe(self, opts: dict[str, Any]) -> dict[str, Any]:
        """What :meth:`resume` needs to rebuild this backend, stored in ``Session.meta``
        (never the API key)."""
        b: Any = self.backend
        out: dict[str, Any] = {}
        if self.backend.name == "openai":
            url = getattr(b, "base_url", None)
            out["base_url"] = redact(url) if isinstance(url, str) else url  # credentials are never stored
        if self.backend.name == "embedded" and opts["gguf"] is not None:
            out["gguf"] = str(getattr(b, "model_path", opts["gguf"]))
        window = getattr(b, "n_ctx", None) or getattr(b, "context_window", None)
        if isinstance(window, int):
            out["window"] = window
        return out

    def _first_choice(self) -> ToolChoice:
        if self._explicit_first_choice is not None:
            return self._explicit_first_choice
        started = any(isinstance(ev, UserEvent) for ev in self.session.events)
        return "auto" if started else self._default_first_choice

    # -- use -----------------------------------------------------------------------------
    @property
    def session_id(self) -> str:
        """The session's id: pass it to :meth:`resume` (or ``ctxwright run --resume``)."""
        return self.session.id

    def run(self, prompt: str | None = None) -> RunResult:
        """Add ``prompt`` as a user message and run the loop until a final answer, the
        iteration cap or a backend error (``RunResult.stop_reason``). ``None`` runs on what
        the session already holds, e.g. to retry after a backend error."""
        if self._closed:
            raise CtxwrightError("this Harness is closed; resume the session in a new one: Harness.resume(session_id)")
        if self._lease is not None:  # a newer harness of this process may have taken the session
            self._lease.check()
        self.agent.config.tool_choice_first = self._first_choice()
        self._announce_skills()
        if self.mcp is not None:  # a resumed session may find its servers' tools changed
            self._announce_mcp()
        return self.agent.run(prompt)

    def report(self, path: str | Path, prices: Prices | None = None) -> Path:
        """Write the HTML report of this session and its sub-agents' sessions to ``path``
        (``report/``): one file with plotly.js embedded, which opens without network access.

        Drawn from the store -- the calls' ledgers and audits as recorded live -- so it shows
        exactly what ``ctxwright report ID`` shows later. ``prices`` (per million tokens) add
        each call's cost."""
        from ctxwright.report import from_store, write_report

        if self.store is None:
            raise CtxwrightError(
                "a report is drawn from the stored session: give the Harness a database (db='agent.db'); "
                "db=None keeps nothing to report"
            )
        return write_report(from_store(self.store, self.session.id, self.agent.counter), path, prices)

    def _announce_skills(self) -> None:
        """In reminder mode, append a catalog message for the loaded skills the session has not
        announced yet (``skills/tools.py``: :func:`~ctxwright.skills.tools.announce`). In prefix
        mode the catalog is in the ``Skill`` tool's description and nothing is appended."""
        if self.skills_catalog == "prefix":
            return
        done = announce(self.session, self.skills)
        if done is not None:
            self.on_event("skills_catalog", {"names": done[0], "content": done[1]})

    @staticmethod
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

    def close(self) -> None:
        """Release what the harness opened: the model it loaded (and a sub-agent's fork of
        it) and the database. Everything recorded stays in the store."""
        if self._closed:
            return
        self._closed = True
        delegator = getattr(self, "delegator", None)
        child = getattr(delegator, "_child_backend", None)
        if child is not None and child is not self._owned_backend and self._owned_backend is not None:
            child.close()
        if self.mcp is not None:  # the servers' processes end here, not when the interpreter exits
            self.mcp.close()
        if self._owned_backend is not None:
            self._owned_backend.close()
        if self._lease is not None:
            # a store that cannot be written: the lease of this (ending) process is stale anyway
            with suppress(CtxwrightError):
                self._lease.release()
        if self._owned_store is not None:
            self._owned_store.close()

    def __enter__(self) -> Harness:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"session {self.session.id}"
        return f"Harness({state}, backend={self.backend.name}, model={self.backend.model}, tools={list(self.tools.names())})"


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


def system_prompt(system: str, defence_section: str | None, use_status: bool) -> str:
    """The session's system prompt: the caller's prompt, the defence level's section (when
    the session has an untrusted tool: ``Features.prompt_section``), the status bar's manual
    -- each a global section (``core/sections.py``), in that order, so the same choices give
    the same bytes in every session and the provider's cache of them is shared."""
    builder = SystemPromptBuilder().add("system", system)
    if defence_section is not None:
        builder.add("defence", defence_section)
    if use_status:
        builder.add("status_manual", OPERATING_MANUAL)
    return builder.build()


def _check_prefix(
    session: Session,
    system: str | None,
    manual: str,
    use_status: bool,
    specs: tuple[ToolSpec, ...],
    defence: Features,
    section: str | None,
) -> None:
    """Refuse a resume whose system prompt, defence section, status manual or tools differ
    from the stored prefix."""
    stored = session.prefix
    others = {lv: defence_features(lv).prompt_section for lv in LEVELS}
    present = [lv for lv, text in others.items() if text is not None and f"\n\n{text}" in stored.system_prompt]
    if (section is None and present) or (section is not None and f"\n\n{section}" not in stored.system_prompt):
        started = f"defence level {present[0]!r}" if present else "no defence section (level 'none')"
        raise PrefixMismatch(
            f"session {session.id} was started with {started} in its system prompt; defence={defence.level!r} "
            "would change the prefix. Leave defence out to continue it as it was started, or start a new session"
        )
    has_manual = stored.system_prompt.endswith(OPERATING_MANUAL)
    if use_status != has_manual:
        raise PrefixMismatch(
            f"session {session.id} was started {'with' if has_manual else 'without'} the status bar, whose "
            "manual is part of its system prompt; continue it "
            f"{'with' if has_manual else 'without'} the status bar (status={has_manual}), or start a new session"
        )
    if system is not None and system_prompt(system, section, use_status) != stored.system_prompt:
        raise PrefixMismatch(
            f"the system prompt differs from the one session {session.id} was started with; leave it out "
            "to continue the session, or start a new session with the new prompt"
        )
    diff = tools_difference(stored.tools, specs)
    if diff:
        raise PrefixMismatch(
            f"the tools differ from session {session.id}'s prefix: {diff}. Pass the same tools in the same "
            "order (tools=[...] / --tool; the options workspace, todo, read_result, delegate, skills and allow_skill_scripts add their own), "
            "or start a new session"
        )


def tools_difference(stored: Iterable[ToolSpec], given: Iterable[ToolSpec]) -> str | None:
    """What differs between two tool lists (names, order, description or schema bytes), in
    words; ``None`` when they are byte-identical."""
    old, new = {t.name: t for t in stored}, {t.name: t for t in given}
    parts = []
    missing = [n for n in old if n not in new]
    extra = [n for n in new if n not in old]
    if missing:
        parts.append("missing " + ", ".join(missing))
    if extra:
        parts.append("not in the session: " + ", ".join(extra))
    common_old = [n for n in old if n in new]
    common_new = [n for n in new if n in old]
    if common_old != common_new:
        parts.append(f"order differs (session: {', '.join(common_old)}; given: {', '.join(common_new)})")
    for n in common_old:
        a, b = old[n], new[n]
        if a.description != b.description:
            parts.append(f"{n}: description differs (session: {_short(a.description)}; given: {_short(b.description)})")
        if a.parameters_json != b.parameters_json:
            parts.append(
                f"{n}: parameter schema differs (session: {_short(a.parameters_json)}; given: {_short(b.parameters_json)})"
            )
    return "; ".join(parts) or None


def _short(text: str, limit: int = 160) -> str:
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")
