"""The recipe: every option of an agent, declared once (``recipe/declare.py``), as a tree of
frozen dataclasses whose values are *resolved* -- what the session runs with.

``Recipe()`` is a new session's recipe on a served model when nothing is given (the values
:meth:`Recipe.resolve` gives with ``backend_defaults("openai")``); the fields whose default
depends on the backend say so (``default_text``). The ``Harness`` keyword of each field is
in its declaration; the keyword's value before resolution may be looser (``compaction=True``,
a mapping of fields, ``defence="D3"``), which is what ``accepts`` documents.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxwright.backends.base import Backend
from ctxwright.cache.prices import PriceTable
from ctxwright.compaction import CompactionConfig
from ctxwright.compaction.config import POLICIES
from ctxwright.compaction.hooks import CompactionHooks
from ctxwright.compaction.strategies import STRATEGIES
from ctxwright.core.reasoning import REASONING_MODES, ReasoningPolicy
from ctxwright.core.repeats import DEFAULT_MAX_REPEATS
from ctxwright.core.request import ToolChoice
from ctxwright.defence.gate import APPROVAL_MODES, ApprovalMode, Approver
from ctxwright.defence.levels import DEFAULT_LEVEL, LEVELS, Features, Level
from ctxwright.defence.levels import features as defence_features
from ctxwright.defence.policy import GatePolicy
from ctxwright.mcp.limits import DEFAULT_RESULT_CAP_MB as MCP_DEFAULT_RESULT_CAP_MB
from ctxwright.mcp.limits import DEFAULT_TIMEOUT_S as MCP_DEFAULT_TIMEOUT_S
from ctxwright.recipe.declare import BY_BACKEND, Flag, opt
from ctxwright.skills.scripts import DEFAULT_SCRIPT_TIMEOUT_S
from ctxwright.skills.tools import CATALOG_MODES, CatalogEntry, CatalogMode
from ctxwright.status.bar import FIELD_GROUPS, FIELDS, Mode
from ctxwright.store.sessions import Store
from ctxwright.tools.deferred import DeferConfig
from ctxwright.tools.fusion import RANKERS
from ctxwright.tools.registry import Tool

if TYPE_CHECKING:
    from ctxwright.recipe.defaults import BackendDefaults

__all__ = [
    "MAX_RESULT_CHARS",
    "CompactionOptions",
    "DefenceOptions",
    "DeferralOptions",
    "DelegateOptions",
    "Limits",
    "McpOptions",
    "ModelOptions",
    "ReasoningOptions",
    "Recipe",
    "RuntimeOptions",
    "SkillsOptions",
    "StatusOptions",
    "TelemetryOptions",
    "TodoOptions",
]

#: Characters a tool result is cut to when compaction is off (``--no-compaction``): the
#: loop's plain cap (``AgentConfig.max_result_chars`` takes its default from here).
MAX_RESULT_CHARS = 200_000
#: The embedded model's default window (``backends/embedded.py``), for the help's numbers.
_EMBEDDED_WINDOW = 8192

_COMPACTION_GROUP = "compaction (layers without an LLM; see CompactionConfig)"
_GATE_GROUP = "confirmation gate (with --defence gate or provenance; docs/defence.md)"
_ON_BUT_EMBEDDED = " (default: on, except on the embedded model)"


def result_cap_help() -> str:
    """What ``--result-cap`` does, with the numbers the code uses (``compaction/config.py``
    ``cap_for``, ``compaction/budget.py``, :data:`MAX_RESULT_CHARS`)."""
    c = CompactionConfig()
    small = _EMBEDDED_WINDOW
    return (
        f"tokens of one tool result before it is saved whole to disk (when it is recorded) and the model "
        f"gets a preview instead: up to its first {c.preview_head_chars:,} and last {c.preview_tail_chars:,} "
        f"characters and its result_id, for read_result (--read-result) to page through. The cap used is the "
        f"smaller of this (default {c.result_cap_tokens:,}) and {c.max_result_share:.0%} of the window less the "
        f"{c.reserve_output_tokens:,} tokens kept for the reply: "
        f"{c.cap_for('', small - c.reserve_output_tokens):,} on the embedded model's {small:,}-token window. "
        f"No effect with --no-compaction, which cuts every result to {MAX_RESULT_CHARS:,} characters instead"
    )


def _compaction_from_flags(values: Mapping[str, Any]) -> Any:
    """``--no-compaction``: off; else only the compaction fields given (on ``--resume`` the
    others are the session's), or not given at all."""
    if values.get("no_compaction"):
        return False
    # a ``true`` flag not given reads False: not given, so the session's (or the default) stands
    fields = {k: v for k, v in values.items() if k != "no_compaction" and v is not None and v is not False}
    return fields or None


def _allow_from_flags(values: Mapping[str, Any]) -> Any:
    """``--allow-path/--allow-domain/--allow-host``: the allowlists given, or not given."""
    return {k: v for k, v in values.items() if v} or None


def _served_compaction() -> CompactionConfig:
    """A new session's compaction on a served model: the defaults, with the LLM layers on."""
    return CompactionConfig(archival_summaries=True, full_compaction=True)


@dataclass(frozen=True)
class ModelOptions:
    """Which model answers, and how it is reached."""

    backend: str | Backend | None = opt(
        keyword="backend",
        flag="--backend",
        choices=("embedded", "openai", "anthropic", "openai-responses"),
        cli_help="default: the resumed session's; else openai with --model or --base-url, embedded otherwise",
        accepts="Backend | str | None",
        fixed=True,
        record="never",
        default_text="the session's; else openai with model or base_url, embedded",
        help="""``"embedded"`` (llama.cpp in-process; the bundled SmolLM2-135M or ``gguf``),
        ``"openai"`` (any OpenAI-compatible server: ``model``, ``base_url``), ``"anthropic"`` (the
        Anthropic Messages API through the official SDK, with ctxwright's ``cache_control``
        breakpoints; key from ``ANTHROPIC_API_KEY`` unless ``api_key_env`` says), ``"openai-responses"``
        (OpenAI's Responses API, stateless, with ``prompt_cache_key`` and the model's cache options:
        ``backends/openai_responses.py``), or a backend object (``OpenAIBackend``, ``AnthropicBackend``,
        ``ResponsesBackend``, ``EmbeddedBackend``, ``ScriptedBackend``, or your own subclass of
        ``ctxwright.backends.base.Backend``). Default: on resume the session's own
        backend; else ``"openai"`` when ``model`` or ``base_url`` is given, ``"embedded"`` otherwise. A
        backend object passed in is not closed by ``close``; one the harness created is. Recorded as the
        session's backend; another one on resume is refused (``check_same_model``).""",
    )
    model: str | None = opt(
        keyword="model",
        flag="--model",
        cli_help="model name on the served endpoint",
        accepts="str | None",
        fixed=True,
        record="never",
        default_text="the session's",
        help="""the served model's name (``backend="openai"``); on resume, the session's. Recorded as the
        session's model; another one on resume is refused.""",
    )
    base_url: str | None = opt(
        keyword="base_url",
        flag="--base-url",
        cli_help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1",
        accepts="str | None",
        record="when_given",
        default_text="the SDK's",
        help="""the OpenAI-compatible endpoint, e.g. ``http://127.0.0.1:8080/v1``; default the SDK's
        (``OPENAI_BASE_URL`` or OpenAI). Recorded with the session for resume, without credentials (a
        URL with them must be given again).""",
    )
    api_key: str | None = opt(
        keyword="api_key",
        accepts="str | None",
        record="never",
        default_text="from api_key_env",
        help="the API key; default read from the ``api_key_env`` variable (local servers need none). Never recorded.",
    )
    api_key_env: str = opt(
        "OPENAI_API_KEY",
        keyword="api_key_env",
        flag="--api-key-env",
        cli_help="environment variable holding the API key (default: OPENAI_API_KEY; ANTHROPIC_API_KEY on anthropic)",
        accepts="str | None",
        help="""the environment variable holding the API key (default ``OPENAI_API_KEY``;
        ``ANTHROPIC_API_KEY`` when the backend is ``"anthropic"`` and this is not given).""",
    )
    timeout: float | None = opt(
        keyword="timeout",
        flag="--timeout",
        type=float,
        metavar="SECONDS",
        cli_help="seconds a served model may take to answer before a try is given up (default: 120)",
        accepts="float | None",
        record="when_given",
        default_text="120",
        help="""seconds the served model may take to answer, the whole answer included (streamed or not),
        before a try is given up (served backends): above 0, at most a week. ``None``: 120.""",
    )
    max_retries: int | None = opt(
        keyword="max_retries",
        flag="--max-retries",
        type=int,
        metavar="N",
        cli_help="retries after a timeout, connection failure, HTTP 429 or 5xx, each printed (default: 2)",
        accepts="int | None",
        record="when_given",
        default_text="2",
        help="""retries after a failed try (timeouts, connection failures, HTTP 408, 409, 429, 5xx), each
        announced with a ``retry`` event before its wait (``backend="openai"``). ``None``: 2.""",
    )
    stream: bool | None = opt(
        keyword="stream",
        flag="--stream",
        action="switch",
        cli_help="stream the answer's tokens as they are generated (default: on for the embedded model, off for served)",
        accepts="bool | None",
        record="when_given",
        default_text="on embedded, off served",
        help="""stream each reply's text as ``token`` events while it is generated. ``None``: on for the
        embedded model (it generates as a stream anyway), off for served models (a streamed request
        differs on the wire, and some servers send no usage with it; ``backends/openai_compat.py`` falls
        back when a server cannot stream).""",
    )
    cache_ttl: str | None = opt(
        keyword="cache_ttl",
        flag="--cache-ttl",
        choices=("5m", "1h", "auto"),
        cli_help="lifetime of the provider's cache entries (backend anthropic): 5m, 1h, or auto (chosen per "
        "call from the idle gaps seen, by the session's prices)",
        accepts="str | None",
        record="when_given",
        default_text="5m",
        help="""how long the provider keeps each cache entry ctxwright writes (``backend="anthropic"``):
        ``"5m"`` (Anthropic's default; a write costs 1.25x the input price) or ``"1h"`` (a write costs
        2x, and an idle gap of up to an hour still reads the cache). ``"auto"``: chosen before each call
        from the idle gaps the session has seen so far (``cache/expiry.py: choose_ttl``): the TTL whose
        expected cost over those gaps is lower, priced by the session's prices (the built-in table, the
        ``prices`` file over it); 5m until a gap is seen or when the model has no price. ``None``: 5m.""",
    )
    cache_diagnostics: bool | None = opt(
        keyword="cache_diagnostics",
        flag="--cache-diagnostics",
        action="switch",
        cli_help="ask the provider why each call missed its cache (backends anthropic, openai-responses; default on)",
        accepts="bool | None",
        record="when_given",
        default_text="on",
        help="""ask the provider why a call missed its cache, so the audit shows the provider's reason beside
        ctxwright's byte diff: on ``backend="anthropic"`` each request names the previous reply
        (``diagnostics.previous_message_id``, with the cache-diagnosis beta header) and the reply says
        which part changed (``cache_miss_reason``); on ``"openai-responses"`` (models with explicit
        breakpoints, gpt-5.6 and later) ``prompt_cache_options.comparison_response_id``. It costs nothing
        and changes no cached bytes. When a server refuses the diagnostics (a gateway without the beta),
        the Anthropic backend drops them for the rest of the session and says so with a ``retry`` event.
        ``None``: on.""",
    )
    routing_header: str | None = opt(
        keyword="routing_header",
        flag="--routing-header",
        metavar="NAME",
        cli_help="send the session's stable routing key in this request header: a header name, or vllm, sglang, dynamo",
        accepts="str | None",
        record="when_given",
        default_text="none",
        help="""send the session's stable routing key (the frozen prefix's hash and the session lineage's
        root: a sub-agent keeps its parent's key; ``cache/routing.py``) in this request header, so a
        router sends the session's requests to the engine that holds its prefix: a header name, or
        ``vllm`` (``x-user-id``, the production-stack router's ``--session-key``), ``sglang``
        (``x-smg-routing-key``), ``dynamo`` (``X-Dynamo-Session-ID``); docs/servers.md. Served backends
        only. The key is recorded with each call, not in the request's bytes.""",
    )
    prompt_cache_key: str | None = opt(
        keyword="prompt_cache_key",
        flag="--prompt-cache-key",
        metavar="KEY",
        cli_help="prompt_cache_key to send (OpenAI routing): a fixed key, or auto for the session's derived key",
        accepts="str | None",
        record="when_given",
        default_text="derived on openai-responses; none on openai",
        help="""the body's ``prompt_cache_key`` (OpenAI routes on the prompt's first ~256 tokens plus this key):
        a fixed key, or ``"auto"`` for the session's derived routing key. ``None``: the derived key on
        ``backend="openai-responses"``, none on ``"openai"`` (other chat-completions servers may not
        take the field).""",
    )
    prompt_cache_retention: str | None = opt(
        keyword="prompt_cache_retention",
        flag="--prompt-cache-retention",
        choices=("in_memory", "24h", "30m", "12h"),
        cli_help="how long OpenAI keeps the cached prefix (openai-responses): in_memory, 24h; 30m, 12h on gpt-5.6+",
        accepts="str | None",
        record="when_given",
        default_text="the API's",
        help="""how long OpenAI keeps the cached prefix (``backend="openai-responses"``): ``in_memory``
        (5 to 10 minutes idle) or ``24h`` as ``prompt_cache_retention`` on models before gpt-5.6;
        ``30m`` or ``12h`` as ``prompt_cache_options.ttl`` on gpt-5.6 and later. ``None``: the API's
        default (``in_memory``; ``30m``).""",
    )
    gguf: str | None = opt(
        keyword="gguf",
        flag="--gguf",
        metavar="PATH",
        cli_help="run the embedded backend on this GGUF chat model",
        accepts="str | Path | None",
        record="when_given",
        fixed=True,
        default_text="the bundled model",
        help="path of a GGUF chat model for the embedded backend instead of the bundled one.",
    )
    window: int | None = opt(
        keyword="window",
        flag="--window",
        type=int,
        group=_COMPACTION_GROUP,
        cli_help="the model's context window in tokens (default: the embedded model's n_ctx; 128,000 for a served model)",
        accepts="int | None",
        record="when_given",
        default_text="8,192 embedded; 128,000 served",
        help="""the model's context window in tokens: the embedded model's ``n_ctx`` (default 8,192), the
        served model's window (default 128,000), and what compaction plans for unless
        ``compaction.window_tokens`` says otherwise. Recorded as the backend's window.""",
    )


@dataclass(frozen=True)
class Limits:
    """Bounds of the loop: calls, tool rounds, reply tokens, tool time, repeated calls."""

    max_iterations: int = opt(
        20,
        keyword="max_iterations",
        flag="--max-iterations",
        type=int,
        cli_help="model calls before the run stops (default: 20)",
        accepts="int | None",
        help="model calls per ``run`` before it stops with ``max_iterations`` (default 20).",
    )
    max_tool_rounds: int | None = opt(
        None,
        keyword="max_tool_rounds",
        flag="--max-tool-rounds",
        type=int,
        cli_help="rounds of tool calls before an answer is required (embedded default: 1)",
        accepts="int | None",
        default_text=BY_BACKEND,
        help="""rounds of tool calls per run before an answer is required. ``None``: by backend (1 on the
        embedded model, unbounded on served ones); recorded resolved.""",
    )
    tool_choice_first: ToolChoice | None = opt(
        keyword="tool_choice_first",
        flag="--tool-choice-first",
        choices=("auto", "required", "none"),
        cli_help="tool_choice of the first call (embedded default: required)",
        accepts="ToolChoice | None",
        record="when_given",
        default_text=BY_BACKEND,
        help="""``tool_choice`` of each run's first call (``"auto"``, ``"required"``, ``"none"`` or a tool
        name). ``None``: by backend, and ``"auto"`` once the session has a user message (a follow-up needs
        no forced tool call).""",
    )
    max_tokens: int = opt(
        256,
        keyword="max_tokens",
        flag="--max-tokens",
        type=int,
        cli_help="cap on each reply's tokens (default: 256)",
        accepts="int | None",
        help="cap on each reply's tokens (default 256).",
    )
    tool_timeout: float = opt(
        30.0,
        keyword="tool_timeout",
        flag="--tool-timeout",
        type=float,
        cli_help="seconds before a tool call is abandoned (default: 30)",
        accepts="float | None",
        help="seconds before a tool call is abandoned (a tool's own ``timeout_s`` wins; default 30).",
    )
    max_repeats: int = opt(
        DEFAULT_MAX_REPEATS,
        keyword="max_repeats",
        flag="--max-repeats",
        type=int,
        metavar="N",
        cli_help="identical tool calls (same tool, same arguments) in a row before the model is told; the next "
        f"one is not run and ends the run with repeated_tool_call (default: {DEFAULT_MAX_REPEATS}; 0: no limit)",
        accepts="int | None",
        help=f"""identical tool calls (same tool, same arguments) in a row before the model is told so on the
        result (and in the status bar); the next identical call is not run and ends the run with
        ``repeated_tool_call`` (``core/repeats.py``). Default {DEFAULT_MAX_REPEATS}; 0: no limit.""",
    )


@dataclass(frozen=True)
class CompactionOptions:
    """The compaction layers (``compaction/``) and what pages their work back."""

    config: CompactionConfig | None = opt(
        keyword="compaction",
        factory=_served_compaction,
        flag=(
            Flag(
                "--no-compaction",
                action="true",
                group=_COMPACTION_GROUP,
                help="send the trajectory as recorded (a plain character cap per result only)",
            ),
            Flag(
                "--result-cap",
                type=int,
                metavar="TOKENS",
                key="result_cap_tokens",
                group=_COMPACTION_GROUP,
                help=lambda: result_cap_help().replace("%", "%%"),  # argparse formats help with %
            ),
            Flag(
                "--clear-at",
                type=float,
                key="trigger_ratio",
                group=_COMPACTION_GROUP,
                help="share of the window at which noise and clearing run under --compaction-policy eager (default 0.55)",
            ),
            Flag(
                "--compaction-policy",
                choices=POLICIES,
                key="policy",
                group=_COMPACTION_GROUP,
                help="when compaction runs and how deep: cost (rarely, deeply, when the cache cost says so "
                "or the window needs it; the default) or eager (at --clear-at, shallowly)",
            ),
            Flag(
                "--keep-results",
                type=int,
                key="keep_recent_results",
                group=_COMPACTION_GROUP,
                help="newest tool results clearing keeps (default 4)",
            ),
            Flag(
                "--compaction",
                choices=STRATEGIES,
                key="strategy",
                group=_COMPACTION_GROUP,
                help="how new tool results are compressed (default none; experiment 2-9, see compaction/strategies.py)",
            ),
            Flag(
                "--keep",
                action="append",
                metavar="ITEM",
                key="keep",
                group=_COMPACTION_GROUP,
                help="what must survive every compaction, checked and recorded after each (repeatable): task, todos, "
                "files, errors, constraints, or a regular expression (show ID --compactions prints the check)",
            ),
            Flag(
                "--summaries-ahead",
                action="true",
                key="background",
                group=_COMPACTION_GROUP,
                help="write LLM summaries on a background thread once the request passes the soft threshold "
                "and apply them at the next call, so the loop does not wait on them",
            ),
            Flag(
                "--provider-compaction",
                choices=("clear", "compact"),
                key="provider",
                group=_COMPACTION_GROUP,
                help="the provider's own compaction beside ctxwright's (Anthropic, openai-responses): clear "
                "(Anthropic's tool-result clearing) or compact (its server-side compaction; the Responses API's)",
            ),
        ),
        from_flags=_compaction_from_flags,
        accepts="CompactionConfig | Mapping[str, Any] | bool | str | None",
        default_text="CompactionConfig() (summaries by backend)",
        help="""a ``CompactionConfig``; ``True`` for the defaults; a mapping of its fields for those fields
        over the session's recorded config (or the defaults); ``False`` sends the trajectory as recorded (a
        character cap per result only); ``"provider"`` the provider's own compaction instead
        (``compaction/provider.py``). ``None``: on resume, as the session recorded; else the defaults.
        Recorded resolved (``window_tokens`` filled from ``window`` is not).""",
    )
    summaries: bool = opt(
        True,
        keyword="summaries",
        flag="--summaries",
        action="switch",
        group=_COMPACTION_GROUP,
        cli_help="LLM layers: per-round archival summaries and two-stage full compaction, with a circuit breaker"
        + _ON_BUT_EMBEDDED,
        accepts="bool | None",
        record="never",
        default_text=BY_BACKEND,
        help="""the LLM compaction layers (``archival_summaries`` and ``full_compaction`` of the config).
        ``None``: as the given config says if it switched one on, else on for served models and off on the
        embedded one (``backend_defaults``). Recorded as the compaction config's fields.""",
    )
    summarizer: Backend | str | None = opt(
        keyword="summarizer",
        flag="--summarizer",
        metavar="MODEL",
        group=_COMPACTION_GROUP,
        cli_help="the model that writes LLM summaries, served like the backend's (a GGUF path for the "
        "embedded one); default: the backend's own model",
        accepts="Backend | str | None",
        record="never",
        default_text="the backend",
        help="""where the LLM summaries run (``summaries``, the result strategies): a backend object, or a
        model name served like the backend's (the same kind, base URL and key; for the embedded backend a
        GGUF path), e.g. a small fast model summarising for a large one. ``None``: the backend itself (the
        embedded model: a second model object, so the session's KV state is never disturbed). Not
        recorded: give it again on resume.""",
    )
    read_result: bool = opt(
        True,
        keyword="read_result",
        flag="--read-result",
        action="switch",
        group=_COMPACTION_GROUP,
        cli_help="give the agent read_result(result_id, offset, limit) to page back offloaded and cleared results"
        + _ON_BUT_EMBEDDED,
        accepts="bool | None",
        prefix=True,
        default_text=BY_BACKEND,
        help="""give the agent ``read_result`` to page back offloaded and cleared results (only with
        compaction on). ``None``: by backend; on resume, as the session was started (the tool is in its
        prefix).""",
    )
    recall: bool = opt(
        True,
        keyword="recall",
        flag="--recall",
        action="switch",
        group=_COMPACTION_GROUP,
        cli_help="give the agent recall(query, limit) to search what compaction hid and get the passages back"
        + _ON_BUT_EMBEDDED,
        accepts="bool | None",
        prefix=True,
        default_text=BY_BACKEND,
        help="""give the agent ``recall`` to search (BM25) the events compaction hid from its view and get the
        best passages back with their event ids (only with compaction on). ``None``: by backend, as
        ``read_result``; on resume, as the session was started (the tool is in its prefix).""",
    )
    pin_tool: bool = opt(
        False,
        keyword="pin_tool",
        flag="--pin-tool",
        action="switch",
        group=_COMPACTION_GROUP,
        cli_help="give the agent pin(fact) to keep a fact in view through every compaction",
        accepts="bool | None",
        prefix=True,
        help="""give the agent ``pin(fact)``: the fact, as its result, is pinned and kept whole through every
        compaction (``compaction/pins.py``; only with compaction on). Off unless asked: a model that pins
        freely fills its context with what can never be freed. On resume, as the session was started (the
        tool is in its prefix).""",
    )
    window_filled: bool = opt(
        False,
        record="never",
        accepts="bool",
        help="""whether ``config.window_tokens`` was filled from the ``window`` given (set by ``resolve``): the
        record keeps it unset, as the session's config had it.""",
    )


@dataclass(frozen=True)
class StatusOptions:
    """The ``<agent_status>`` message before each call (``status/bar.py``)."""

    enabled: bool = opt(
        True,
        keyword="status",
        flag="--status",
        action="switch",
        cli_help="an <agent_status> message before each call" + _ON_BUT_EMBEDDED,
        accepts="bool | None",
        prefix=True,
        default_text=BY_BACKEND,
        help="""an ``<agent_status>`` message before each call (``status/bar.py``); its manual is appended to
        the system prompt. ``None``: by backend; on resume, as the session was started.""",
    )
    mode: Mode = opt(
        "auto",
        keyword="status_mode",
        flag="--status-mode",
        choices=("auto", "replace", "append"),
        cli_help="how status messages are updated (default auto: the cost model)",
        accepts="Mode | None",
        help="""``"auto"`` (the cost model decides, the default), ``"replace"`` or ``"append"``.""",
    )
    cache_price_ratio: float = opt(
        0.1,
        keyword="cache_price_ratio",
        flag="--cache-price-ratio",
        type=float,
        cli_help="cached ÷ uncached input price of the backend, for --status-mode auto (default: 0.1; 0 embedded)",
        accepts="float | None",
        default_text=BY_BACKEND,
        help="""cached ÷ uncached input price, for ``status_mode="auto"``. ``None``: by backend (0.1 served,
        0 embedded); recorded resolved.""",
    )
    fields: tuple[str, ...] = opt(
        FIELDS,
        keyword="status_fields",
        flag="--status-fields",
        metavar="FIELDS",
        cli_help="the status lines sent, comma-separated; -NAME drops one, e.g. --status-fields all,-cwd,-os "
        f"(fields: {', '.join([*FIELDS, *FIELD_GROUPS])}; default: all, cwd and os included)",
        accepts="Sequence[str] | str | None",
        default_text="all",
        help=f"""which lines the status shows, and so sends to the model's provider (the ``env`` lines
        ``cwd`` and ``os`` are the working directory's path and the OS string): field names
        ({", ".join(f"``{f}``" for f in FIELDS)}; ``env`` and ``all`` for groups) as a list or one
        comma-separated string. ``-name`` drops a field: ``["-cwd", "-os"]`` is every field but those two;
        names alone keep just those (``["counters", "todo", "error"]``). An unknown name is refused with
        the valid ones. ``None``: on resume, the session's; else every field. Recorded resolved, so a
        resume renders the same lines.""",
    )


@dataclass(frozen=True)
class TodoOptions:
    """The TODO tools (``status/todo.py``), shown in the status bar."""

    enabled: bool = opt(
        True,
        keyword="todo",
        flag="--todo",
        action="switch",
        cli_help="give the agent the TODO tools" + _ON_BUT_EMBEDDED,
        accepts="bool | None",
        prefix=True,
        default_text=BY_BACKEND,
        help="""give the agent the TODO tools, shown in the status bar. ``None``: by backend; on resume, as
        the session was started.""",
    )


@dataclass(frozen=True)
class DelegateOptions:
    """``delegate(task)``: a sub-agent in its own session (``agent/delegate.py``)."""

    enabled: bool = opt(
        True,
        keyword="delegate",
        flag="--delegate",
        action="switch",
        cli_help="give the agent the delegate(task) sub-agent tool" + _ON_BUT_EMBEDDED,
        accepts="bool | None",
        prefix=True,
        default_text=BY_BACKEND,
        help="""give the agent ``delegate(task)``, a sub-agent in its own session. ``None``: by backend; on
        resume, as the session was started.""",
    )


@dataclass(frozen=True)
class SkillsOptions:
    """Agent Skills (``skills/``): where they are loaded from, their catalog, their scripts."""

    dirs: list[str] | None = opt(
        keyword="skills",
        flag="--skills",
        action="append",
        metavar="DIR",
        cli_help="load Agent Skills from DIR (a skill folder or a folder of them; repeatable), then "
        ".agents/skills/ and ~/.agents/skills/; adds the Skill and read_skill_file tools",
        accepts="Iterable[str | Path] | None",
        record="when_given",
        default_text="none",
        help="""folders of Agent Skills (a skill folder, or a folder of them); the project's and the user's
        ``.agents/skills/`` are searched after them (``skills/loader.py``). When any skill loads, the agent
        gets ``Skill(name)`` and ``read_skill_file(name, path)``, and before the next user message a
        ``<system-reminder>`` user message lists the skills the session has not announced yet (never the
        system prompt). Loader warnings go to ``on_event("skills_warning", {"message": ...})`` and
        ``skill_warnings``. ``None``: no skills; on resume, the recorded folders (recorded absolute). A
        sub-agent (``delegate``) gets the same skills, announced in its own session.""",
    )
    allow_scripts: bool = opt(
        False,
        keyword="allow_skill_scripts",
        flag="--allow-skill-scripts",
        action="true",
        cli_help="also let the agent run files of a skill's scripts/ folder (run_skill_script; off by default: "
        "a skill folder is third-party code); a resumed session keeps the setting",
        accepts="bool | None",
        prefix=True,
        help="""also give the agent ``run_skill_script(name, script, args)``, which runs a file of a skill's
        ``scripts/`` folder (``skills/scripts.py``). Off by default: a skill folder is third-party code. Only
        when skills loaded. ``None``: off; on resume, as the session was started (the tool is in its
        prefix).""",
    )
    script_timeout: float = opt(
        DEFAULT_SCRIPT_TIMEOUT_S,
        keyword="skill_script_timeout",
        flag="--skill-script-timeout",
        type=float,
        metavar="SECONDS",
        cli_help=f"seconds a skill script may run before it is killed (default {DEFAULT_SCRIPT_TIMEOUT_S:g})",
        accepts="float | None",
        help=f"""seconds a skill script may run before its process group is killed (default
        {DEFAULT_SCRIPT_TIMEOUT_S:g}). ``None``: on resume, as recorded.""",
    )
    catalog: CatalogMode = opt(
        "reminder",
        keyword="skills_catalog",
        flag="--skills-catalog",
        choices=CATALOG_MODES,
        cli_help="where the skills catalog goes: 'reminder' (default) appends it as a user message, one per new "
        "skill, no cache break; 'prefix' puts the skills known at start into the Skill tool's description, "
        "frozen with the prefix (a skill added later needs a new session)",
        accepts="CatalogMode | None",
        prefix=True,
        help="""where the catalog goes. ``"reminder"`` (the default): appended as above, one small message per
        new skill and no cache break. ``"prefix"``: the catalog known at start goes into the ``Skill`` tool's
        description and ``name`` becomes an enum of those skills; no catalog message. It is frozen with the
        prefix and recorded with the session, so a resume sends the same bytes; a skill added later is not
        announced and cannot be loaded (a ``skills_warning`` says so): start a new session. Fixed for a
        session.""",
    )
    frozen: list[CatalogEntry] | None = opt(
        record="when_given",
        prefix=True,
        accepts="list[CatalogEntry] | None",
        help="""the catalog frozen with the prefix (``skills_catalog="prefix"``): the entries of the skills
        loaded when the session started, set by the harness then and recorded; a resume reads them back.""",
    )


@dataclass(frozen=True)
class McpOptions:
    """MCP servers over stdio (``mcp/``)."""

    servers: list[list[str]] | None = opt(
        keyword="mcp_servers",
        flag="--mcp",
        action="append",
        metavar="COMMAND",
        cli_help="start an MCP server over stdio (the command line in one quoted argument; repeatable) and give "
        "the agent its tools as SERVER__TOOL; on --resume, the session's servers unless given",
        accepts="Iterable[str | Sequence[str]] | None",
        record="when_given",
        default_text="none",
        help="""MCP servers to start over stdio (``mcp/``), each a command line (a string, split like a
        shell) or an argv list. Their tools are added after all the others (before ``search_tools`` and
        ``call_tool``; deferrable, see ``defer_tools``) as ``SERVER__TOOL``, with the server's schemas
        verbatim; their results reach the model as ``<external_content>`` (defence ``tags`` and above). A
        server that sends ``tools/list_changed`` never changes the prefix: new tools are deferred and
        announced in a ``<system-reminder>`` user message before the next model call, removed ones answer
        with an error. A server that cannot start raises ``McpServerError``; one that crashes or hangs
        later only fails its own calls. ``close`` stops them. ``None``: none; on resume, the recorded
        commands (recorded as argv lists).""",
    )
    timeout: float | None = opt(
        keyword="mcp_timeout",
        flag="--mcp-timeout",
        type=float,
        metavar="SECONDS",
        cli_help=f"seconds an MCP tool call may take before it is answered with a timeout error "
        f"(default {MCP_DEFAULT_TIMEOUT_S:g})",
        accepts="float | None",
        record="when_given",
        default_text=f"{MCP_DEFAULT_TIMEOUT_S:g}",
        help=f"seconds an MCP tool call may take (default {MCP_DEFAULT_TIMEOUT_S:g}).",
    )
    trust: list[str] | None = opt(
        keyword="mcp_trust",
        flag="--mcp-trust",
        action="append",
        metavar="SERVER",
        cli_help="trust the tool annotations of this MCP server (the SERVER of SERVER__TOOL; repeatable): only "
        "then does readOnlyHint take its tools out of the confirmation gate",
        accepts="Iterable[str] | None",
        record="when_given",
        default_text="none",
        help="""the MCP servers whose tool annotations are believed, by the ``SERVER`` of their tools'
        names ``SERVER__TOOL`` (or the name the server gives). Every other server's tools have ``effects``
        ``external`` whatever they declare: ``readOnlyHint: true`` would take a tool out of the
        confirmation gate on the server's word alone. A name that is no connected server's raises
        ``McpServerError``. Results stay untrusted content either way.""",
    )
    result_cap: float | None = opt(
        keyword="mcp_result_cap",
        flag="--mcp-result-cap",
        type=float,
        metavar="MB",
        cli_help=f"megabytes one message from an MCP server may take; a tool call answered with more fails "
        f"at once and the server answers later calls (default {MCP_DEFAULT_RESULT_CAP_MB:g})",
        accepts="float | None",
        record="when_given",
        default_text=f"{MCP_DEFAULT_RESULT_CAP_MB:g}",
        help=f"""megabytes one message from an MCP server (a tool's result, its tool listing) may take
        (default {MCP_DEFAULT_RESULT_CAP_MB:g}: {MCP_DEFAULT_RESULT_CAP_MB * 1e6 / MAX_RESULT_CHARS:g} times the
        {MAX_RESULT_CHARS:,} characters the loop keeps of a result without compaction, room for JSON escaping). A larger answer is dropped as it is read
        and its call fails with ``mcp_result_too_large``; the connection goes on.""",
    )


@dataclass(frozen=True)
class DeferralOptions:
    """Tools kept out of the request's ``tools`` array (``tools/deferred.py``)."""

    defer_tools: DeferConfig = opt(
        keyword="defer_tools",
        factory=DeferConfig,
        flag="--defer-tools",
        choices=("auto", "all", "none"),
        cli_help="keep tools out of the request's tools array, found with search_tools and run with call_tool "
        "(default auto: when the schemas would take over 10%% of the window or there are over 30 tools; "
        "the harness's own tools are never deferred)",
        accepts="bool | str | DeferConfig | Mapping[str, Any] | None",
        prefix=True,
        default_text='"auto"',
        help="""which tools leave the request's ``tools`` array, to be found with ``search_tools(query,
        limit)`` (their full schemas come back as its tool result) and run with ``call_tool(name,
        arguments)``; both are added to the prefix when any tool is deferred (``tools/deferred.py``).
        ``"auto"`` (the default): defer every deferrable tool when the schemas would take more than 10% of
        the window or there are more than 30 tools, and tools marked ``@tool(deferred=True)`` always;
        ``"all"`` / ``True``; ``"none"`` / ``False``; or a ``DeferConfig`` (other thresholds). The harness's
        own tools (demo, file, TODO, ``read_result``, ``delegate``, skill tools) and tools marked
        ``deferred=False`` are never deferred. Decided when the session starts and recorded: a resume
        rebuilds the same prefix.""",
    )
    tool_index: str = opt(
        "none",
        keyword="tool_index",
        flag="--tool-index",
        choices=("none", "prefix"),
        cli_help="prefix: also list the deferred tools, [name: summary] one a line, in search_tools' "
        "description (for small catalogs; default none: search only)",
        accepts="str | None",
        prefix=True,
        record="never",
        help="""``"prefix"`` also lists the deferred tools, ``[name: summary]`` one a line, in
        ``search_tools``' description (frozen with the prefix; for catalogs small enough to list);
        ``"none"`` (default): search only. Recorded in ``defer_tools``' config.""",
    )
    tool_search_ranker: str = opt(
        "bm25",
        keyword="tool_search_ranker",
        flag="--tool-search-ranker",
        choices=RANKERS,
        cli_help="how search_tools ranks the deferred tools: bm25 (default, words), embed (meaning, a small "
        "sentence-embedding model) or hybrid (both fused); embed and hybrid need pip install 'ctxwright[embeddings]'",
        accepts="str | None",
        record="never",
        help="""how ``search_tools`` ranks the deferred tools (``tools/search.py``): ``"bm25"`` (default),
        ``"embed"`` (all-MiniLM-L6-v2 cosine, ``tools/embeddings.py``) or ``"hybrid"`` (a weighted sum of both,
        ``tools/fusion.py``); the last two need the ``embeddings`` extra and cache the tools' vectors in
        ``CTXWRIGHT_EMBEDDINGS`` (default: the user cache folder). Not part of the prefix: a resumed session may
        change it. Recorded in ``defer_tools``' config.""",
    )


@dataclass(frozen=True)
class DefenceOptions:
    """The prompt-injection defence (``defence/``) and its confirmation gate."""

    level: Level | Features = opt(
        DEFAULT_LEVEL,
        keyword="defence",
        flag="--defence",
        choices=LEVELS,
        cli_help="prompt-injection defence (the book's D1..D5): none; warning (a sentence in the system prompt); "
        "tags (default: untrusted results wrapped as <external_content>, the sanitizer); gate (tags + a "
        "confirmation before write/external tools); provenance (gate + argument provenance). "
        "See docs/defence.md; a resumed session keeps its level",
        accepts="Level | Features | None",
        prefix=True,
        help="""the prompt-injection defence level (``defence/levels.py``; the book's experiment 2-5):
        ``"none"`` (D1), ``"warning"`` (D2: one sentence in the system prompt), ``"tags"`` (D3, the default:
        untrusted tool results wrapped as ``<external_content>``, the tags explained in the system prompt,
        the sanitizer), ``"gate"`` (D4: D3 + a confirmation gate before ``write``/``external`` calls) or
        ``"provenance"`` (D5: D4 + argument provenance), or a ``Features``. The level's system-prompt section
        is part of the prefix, so it is recorded with the session; on resume ``None`` keeps the recorded
        level, and a level with another section is refused (``PrefixMismatch``).""",
    )
    sanitize: bool = opt(
        True,
        keyword="sanitize",
        flag="--sanitize",
        action="switch",
        cli_help="strip invisible characters, chat-template tokens and fake role headers from untrusted results "
        "(default: on with tags)",
        accepts="bool | None",
        default_text="on with the tags",
        help="""the sanitizer on untrusted results (``defence/sanitize.py``). ``None``: on with the tags (on
        resume, as recorded); ``False`` turns it off (marking stays).""",
    )
    approve: ApprovalMode | Approver | None = opt(
        keyword="approve",
        flag="--approve",
        choices=APPROVAL_MODES,
        group=_GATE_GROUP,
        cli_help="what happens to a flagged write/external call: 'ask' (default) asks y/N on a terminal and denies "
        "without one; 'deny' denies it; 'allow-listed' runs only calls whose every target is allowlisted",
        accepts="ApprovalMode | Approver | None",
        record="never",
        default_text='"ask"',
        help="""the confirmation gate's decision on a flagged call (levels ``gate`` and ``provenance``;
        ``defence/gate.py``): ``"ask"`` (default: ask the callback, deny without one), ``"deny"``,
        ``"allow-listed"`` (run only calls whose every target is allowlisted), or a callback
        ``fn(GateRequest) -> "approve" | "deny" | bool`` (which means ``"ask"``). Not recorded: give it again
        on resume.""",
    )
    allow: GatePolicy | Mapping[str, Any] | None = opt(
        keyword="allow",
        flag=(
            Flag(
                "--allow-path",
                action="append",
                metavar="DIR",
                key="paths",
                group=_GATE_GROUP,
                help="an allowed folder for written paths (repeatable)",
            ),
            Flag(
                "--allow-domain",
                action="append",
                metavar="DOMAIN",
                key="domains",
                group=_GATE_GROUP,
                help="an allowed e-mail domain (example.com) or address (bob@example.com) (repeatable)",
            ),
            Flag(
                "--allow-host",
                action="append",
                metavar="HOST",
                key="hosts",
                group=_GATE_GROUP,
                help="an allowed host (api.example.com) or URL prefix (https://example.com/hooks/) (repeatable)",
            ),
        ),
        from_flags=_allow_from_flags,
        accepts="GatePolicy | Mapping[str, Any] | None",
        record="never",
        default_text="the workspace only",
        help="""the gate's allowlists, a ``GatePolicy`` or ``{"paths": [...], "domains": [...], "hosts":
        [...]}`` (``defence/policy.py``); the workspace is always allowed. Not recorded.""",
    )
    gate_rules: str | Path | None = opt(
        keyword="gate_rules",
        flag="--gate-rules",
        metavar="FILE",
        group=_GATE_GROUP,
        cli_help="a YAML file of allowlists: keys paths, domains, hosts (lists)",
        accepts="str | Path | None",
        record="never",
        default_text="none",
        help="a YAML file with the same keys as ``allow``, merged with it. Not recorded.",
    )
    approve_timeout: float | None = opt(
        keyword="approve_timeout",
        flag="--approve-timeout",
        type=float,
        metavar="SECONDS",
        group=_GATE_GROUP,
        cli_help="seconds to wait for an answer before a call counts as denied (default 120)",
        accepts="float | None",
        record="never",
        default_text="120",
        help="seconds the callback may take before its silence is a deny (default 120). Not recorded.",
    )

    @property
    def features(self) -> Features:
        """What the level switches on, with the sanitizer as resolved (``defence/levels.py``)."""
        return defence_features(self.level, sanitize=self.sanitize)


@dataclass(frozen=True)
class ReasoningOptions:
    """How earlier reasoning is sent back (``core/reasoning.py``)."""

    mode: ReasoningPolicy | None = opt(
        keyword="reasoning",
        flag="--reasoning",
        choices=REASONING_MODES,
        cli_help="how earlier reasoning is sent back (default: by model family; fixed per session)",
        accepts="ReasoningMode | ReasoningPolicy | None",
        fixed=True,
        record="when_given",
        default_text="by model family",
        help="""how earlier reasoning is sent back: ``"strip"``, ``"keep"``, ``"must_send_back"``, ``"qwen3"``
        or a ``ReasoningPolicy``. ``None``: the mode recorded with the session, else by model family
        (``core/reasoning.py``, which records it as ``Session.meta["reasoning_mode"]``). Fixed for a
        session: a different mode on resume raises ``ReasoningPolicyConflict``.""",
    )


_TELEMETRY_GROUP = "OpenTelemetry export (pip install 'ctxwright[otel]'; docs/telemetry.md)"


@dataclass(frozen=True)
class TelemetryOptions:
    """Where the run's spans go (``telemetry/``): a process's setting, never recorded with the session."""

    otlp: str | None = opt(
        keyword="otlp",
        flag="--otlp",
        metavar="URL",
        cli_help="send one OpenTelemetry span per model call, tool run and compaction, under one trace per run, "
        "to this OTLP/HTTP endpoint (http://localhost:4318 for a collector or Jaeger, http://localhost:6006 for "
        "Phoenix; /v1/traces is added to a URL without a path); 'env': OTEL_EXPORTER_OTLP_ENDPOINT's",
        group=_TELEMETRY_GROUP,
        accepts="str | bool | None",
        record="never",
        default_text="off",
        help="""export the run as OpenTelemetry traces over OTLP/HTTP (``telemetry/``; needs
        ``pip install 'ctxwright[otel]'``): one trace per ``run``, one span per model call (the GenAI
        semantic conventions' ``chat`` span, with ctxwright's cache audit and ledger as ``ctxwright.*``
        attributes), per tool run and per compaction. The endpoint's URL (``/v1/traces`` is added to one
        without a path), or ``True`` / ``"env"``: ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or
        ``OTEL_EXPORTER_OTLP_ENDPOINT``, else ``http://localhost:4318``. A collector that is down or stalls
        never blocks or fails the agent (short export timeouts, one logged warning). Not recorded: a resume
        exports only when asked again.""",
    )
    content: bool = opt(
        False,
        keyword="otlp_content",
        flag="--otlp-content",
        action="true",
        cli_help="with --otlp: add the messages, tool arguments and tool results to the spans "
        "(gen_ai.input.messages, gen_ai.output.messages; default: counts and ids only)",
        group=_TELEMETRY_GROUP,
        accepts="bool | None",
        record="never",
        help="""with ``otlp``: add what was said to the spans, as the GenAI conventions name it --
        ``gen_ai.input.messages`` and ``gen_ai.output.messages`` on each model call,
        ``gen_ai.tool.call.arguments`` and ``gen_ai.tool.call.result`` on each tool run -- each bounded in
        size. Off by default: the spans then carry counts, ids, names and the cache audit, never a prompt,
        a tool's arguments or result, a key or a header.""",
    )


@dataclass(frozen=True)
class RuntimeOptions:
    """What a harness is given to run with but never records: objects, callbacks, the store."""

    system: str | None = opt(
        keyword="system",
        flag=(
            Flag(
                "--system",
                metavar="FILE",
                help="the system prompt: the text of this file. A value that looks like a path (a / or an "
                "extension, no spaces) must be an existing file; other text is taken as the prompt itself, "
                "as --system-text does (default: the demo's)",
            ),
            Flag(
                "--system-text",
                metavar="TEXT",
                help="the system prompt given as text, never read as a file name (instead of --system)",
            ),
        ),
        accepts="str | None",
        prefix=True,
        record="never",
        default_text="DEFAULT_SYSTEM",
        help="""the system prompt; default ``DEFAULT_SYSTEM``. With the status bar on, the harness appends the
        status bar's manual (``status/bar.py``) to it. Not recorded as an option: it is the stored prefix's
        system prompt. On resume it may be left out; if given, it must match the stored one. (CLI:
        ``--system FILE`` reads a file -- a missing file whose name looks like a path is an error, not the
        prompt -- and ``--system-text TEXT`` takes the text as it is.)""",
    )
    tools: Iterable[Tool | Callable[..., Any]] | None = opt(
        keyword="tools",
        flag=Flag(
            "--tool",
            action="append",
            metavar="MODULE:FUNCTION",
            help="a function of yours as a tool (repeatable; the current directory is importable); "
            "its type hints and docstring are its schema. The demo tools are there only when no tool "
            "source at all is given (--tool, --workspace, --skills, --mcp)",
        ),
        accepts="Iterable[Tool | Callable[..., Any]] | None",
        prefix=True,
        record="never",
        default_text="the demo tools, if no other tool source",
        help="""the agent's tools, in the order the model sees them: ``Tool`` objects (``@tool``) or plain
        typed functions with a docstring. Default: the demo tools (``get_current_time``, ``get_weather``,
        ``calculator``), but only when no other source of tools is given either (``workspace``, ``skills``,
        ``skills_catalog="prefix"``, ``mcp_servers``): beside real tools a small model calls the demo ones
        instead (add them yourself, e.g. ``--tool ctxwright.tools.builtin:get_weather``). On resume, as the
        stored prefix has them. The harness appends the file tools (with ``workspace``), the TODO tools,
        ``read_result`` and ``delegate`` when those options are on. On resume the resulting list must equal
        the stored prefix's tools (names, order and schema bytes), else ``PrefixMismatch``.""",
    )
    prices: str | Path | PriceTable | None = opt(
        keyword="prices",
        flag="--prices",
        metavar="FILE",
        cli_help="a TOML file of prices per model (input, cached_read, cache_write_5m, cache_write_1h, output; "
        "USD per million tokens) over the built-in table, for each call's cost and 'if the cache had held' "
        "(docs/prefix-cache.md); also for show, report and audit",
        accepts="str | Path | PriceTable | None",
        record="never",
        default_text="the built-in table",
        help="""prices per model for the cost of each call and of the session, and what they would have cost
        had the cache held (``cache/prices.py``): a TOML file of ``[models."NAME"]`` tables (``provider``,
        ``input``, ``cached_read``, ``cache_write_5m``, ``cache_write_1h``, ``output``, USD per million
        tokens) or a ``PriceTable``, laid over the built-in table (Anthropic, OpenAI, DeepSeek; sources and
        dates in ``docs/prefix-cache.md``). A file that is not TOML, over 1 MB, with an unknown key or a
        negative or non-numeric price is refused (``PricesFileError``). Not recorded. (CLI: ``--prices FILE``
        on ``run``, ``show``, ``report`` and ``audit``.)""",
    )
    db: str | Path | Store | None = opt(
        keyword="db",
        accepts="str | Path | Store | None",
        record="never",
        default_text="in memory",
        help="""where the session is stored: an SQLite file path, a ``postgresql://`` URL (the ``postgres``
        extra; a team's agents share one store) or a ``Store``. ``None`` keeps the session in
        memory only (it cannot be resumed). Resume needs it. (CLI: ``--db``, before or after the command.)""",
    )
    resume: str | None = opt(
        keyword="resume",
        accepts="str | None",
        record="never",
        default_text="a new session",
        help="""the id (or a unique prefix of it) of a stored session to continue. Every option left out
        (``None``) is then the one the session recorded (``recipe/``); one given again overrides it.
        Another backend or model than the session's is refused (``ConfigError``). (CLI: ``--resume ID``,
        ``--continue``.)""",
    )
    take_over: bool = opt(
        False,
        keyword="take_over",
        accepts="bool",
        record="never",
        help="""continue the session even if the store says another process runs it (one writer per session,
        ``store/lease.py``); for a process on another host, or after checking it is gone. A lease of a dead
        process on this host is taken over without it. (CLI: ``--take-over``.)""",
    )
    on_event: Callable[[str, dict[str, Any]], None] | None = opt(
        keyword="on_event",
        accepts="EventSink | None",
        record="never",
        default_text="none",
        help="""``on_event(event)`` for progress: one typed ``ProgressEvent`` (``core/progress.py``) per
        thing that happens -- a user message, a model call, a tool start and result, a retry, a streamed
        token...; every type and its fields: ``docs/events.md``. A sub-agent's events come with
        ``event.child``, its session id.""",
    )
    compaction_hooks: CompactionHooks | None = opt(
        keyword="compaction_hooks",
        accepts="CompactionHooks | None",
        record="never",
        default_text="none",
        help="""``CompactionHooks(before=..., after=..., timeout_s=5.0)``: ``before(plan)`` sees each plan a
        compaction tier is about to apply (a read-only ``PlanView``) and may veto it (return or raise
        ``Veto``), keep events out of it or add to its note (return ``PlanEdit``); ``after(report)`` sees
        each recorded compaction's report and loss ledger. Each call runs in a worker thread bounded by
        ``timeout_s`` and is recorded as a ``compaction_hook`` event; a hook that raises or hangs is
        reported and the compaction goes on as planned (``compaction/hooks.py``, ``docs/compaction.md``).
        Not recorded: give them again on resume.""",
    )


@dataclass(frozen=True)
class Recipe:
    """Every option of an agent, resolved: what one session runs with.

    Build it with :meth:`resolve` (from the keywords given, the session's record and the
    backend's defaults); store it with :meth:`to_record`; read a stored one back with
    ``recipe.migrate`` then :meth:`resolve`.
    """

    runtime: RuntimeOptions = field(default_factory=RuntimeOptions)
    model: ModelOptions = field(default_factory=ModelOptions)
    limits: Limits = field(default_factory=Limits)
    compaction: CompactionOptions = field(default_factory=CompactionOptions)
    status: StatusOptions = field(default_factory=StatusOptions)
    todo: TodoOptions = field(default_factory=TodoOptions)
    delegate: DelegateOptions = field(default_factory=DelegateOptions)
    skills: SkillsOptions = field(default_factory=SkillsOptions)
    mcp: McpOptions = field(default_factory=McpOptions)
    deferral: DeferralOptions = field(default_factory=DeferralOptions)
    defence: DefenceOptions = field(default_factory=DefenceOptions)
    reasoning: ReasoningOptions = field(default_factory=ReasoningOptions)
    telemetry: TelemetryOptions = field(default_factory=TelemetryOptions)
    timestamps: bool = opt(
        False,
        keyword="timestamps",
        flag="--timestamps",
        action="true",
        cli_help="prefix user and tool contents with [YYYY-MM-DD HH:MM:SS]",
        accepts="bool | None",
        help="prefix user and tool contents with ``[YYYY-MM-DD HH:MM:SS]`` (default off).",
    )
    keep_warm: bool = opt(
        False,
        keyword="keep_warm",
        flag="--keep-warm",
        action="true",
        cli_help="refresh the provider's prompt cache before it expires while the harness is open between runs",
        accepts="bool | None",
        help="""on a provider-caching backend (``anthropic``, ``openai-responses``), re-send the last request
        with ``max_tokens=1`` shortly before the cache entry's TTL runs out while the harness stays open
        between runs (``cache/expiry.py: KeepWarm``: at most 3 refreshes per idle period, none past 30
        minutes idle): a cache read at 0.1x that renews the entry, instead of the next call re-writing the
        prefix at 1.25x/2x. Each refresh is recorded as a call whose usage says ``"keep_warm": true`` and
        counted as cost, never as a request of the trajectory (default off).""",
    )
    workspace: Path | None = opt(
        keyword="workspace",
        flag="--workspace",
        cli_help="give the agent read_file/list_dir confined to this folder",
        accepts="str | Path | None",
        prefix=True,
        default_text="none",
        help="""a folder; gives the agent ``read_file`` and ``list_dir`` confined to it (off by default: fewer
        tools, less for a small model to confuse). On resume, the session's (recorded absolute).""",
    )

    @classmethod
    def resolve(cls, given: Mapping[str, Any], recorded: Mapping[str, Any] | None, defaults: BackendDefaults) -> Recipe:
        """The recipe of a session: each option as ``given`` (a ``Harness`` keyword; ``None``
        or absent: not given), else as ``recorded`` (a stored record as :func:`~ctxwright.recipe.migrate`
        returns it; ``None`` for a new session), else the default -- by backend where
        ``defaults`` (:func:`~ctxwright.recipe.backend_defaults`) says. Pure: it starts nothing
        and reads no file. A value that cannot work is a ``ConfigError`` saying what to give."""
        from ctxwright.recipe.resolve import resolve

        return resolve(given, recorded, defaults)

    def to_record(self) -> dict[str, Any]:
        """What the session stores for the next resume (``Session.meta["harness"]``): every
        recorded option, JSON-safe, with ``"version"``; never a key, an object or a callback."""
        from ctxwright.recipe.record import to_record

        return to_record(self)

    def with_backend(self, backend: Backend) -> Recipe:
        """This recipe with what the created ``backend`` says of itself: its base URL (without
        credentials), its GGUF path (when one was given or recorded), its context window -- what a resume
        needs to rebuild it."""
        from ctxwright.recipe.record import with_backend

        return with_backend(self, backend)
