"""``Recipe.resolve``: each option as given, else as the session recorded, else its default.

Why one pure function: a new session and a resumed one must take one path, or they drift
(a resume that forgot an option ran with the default: a session started with
``--max-tokens 1024 --result-cap 2000`` continued with 256 and 25,000). The rules, each as
the harness has applied them since resume existed:

* an option with a fixed default: given, else recorded (``None`` included: an unbounded
  ``max_tool_rounds``), else the default;
* an option decided by backend (``max_tool_rounds``, ``cache_price_ratio``; the features
  status, TODO, ``read_result``, ``delegate`` and the LLM summaries): the backend's default
  for a new session, recorded resolved so that a resume does not decide it again;
* an option recorded only when given (``tool_choice_first``, ``timeout``, ``max_retries``,
  ``stream``, ``mcp_timeout``): its default is decided where it is used;
* ``compaction`` given as a config, a mapping of fields over the recorded config, ``True``
  or ``False``; ``defence`` by level or ``Features``; ``defer_tools`` through
  :meth:`DeferConfig.of`; skill folders made absolute (a resume may run elsewhere).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any, cast

from ctxwright.compaction import CompactionConfig
from ctxwright.compaction.hooks import CompactionHooks
from ctxwright.core.reasoning import ReasoningMode, ReasoningPolicy
from ctxwright.core.redact import redact
from ctxwright.defence.levels import Features
from ctxwright.defence.levels import features as defence_features
from ctxwright.errors import ConfigError
from ctxwright.recipe.defaults import BackendDefaults
from ctxwright.recipe.options import (
    CompactionOptions,
    DefenceOptions,
    DeferralOptions,
    DelegateOptions,
    Limits,
    McpOptions,
    ModelOptions,
    ReasoningOptions,
    Recipe,
    RuntimeOptions,
    SkillsOptions,
    StatusOptions,
    TelemetryOptions,
    TodoOptions,
)
from ctxwright.skills.tools import CATALOG_MODES, CatalogEntry, CatalogMode
from ctxwright.status.bar import status_fields
from ctxwright.tools.deferred import DeferConfig

__all__ = ["compaction_from_dict", "compaction_overrides", "compaction_to_dict", "resolve"]


def compaction_to_dict(cfg: CompactionConfig) -> dict[str, Any]:
    """A config as the session records it (JSON-safe)."""
    out = asdict(cfg)
    if out.get("results_dir") is not None:
        out["results_dir"] = str(out["results_dir"])
    return out


def compaction_from_dict(data: Mapping[str, Any], where: str) -> CompactionConfig:
    """A config from its recorded (or given) fields; a field this build does not know (a
    newer release's) is ignored, one of the wrong type is refused."""
    known = {f.name for f in fields(CompactionConfig)}
    kept = {k: v for k, v in data.items() if k in known}
    if kept.get("results_dir") is not None:
        kept["results_dir"] = Path(kept["results_dir"])
    try:
        cfg = CompactionConfig(**kept)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from None
    from ctxwright.recipe.values import check_fields

    check_fields(cfg, where)
    return cfg


def compaction_overrides(given: Mapping[str, Any]) -> dict[str, Any]:
    """Field overrides given as a mapping (``compaction={"result_cap_tokens": 2000}``),
    checked against :class:`CompactionConfig`'s fields: a misspelt one would be ignored."""
    known = {f.name for f in fields(CompactionConfig)}
    unknown = sorted(set(given) - known)
    if unknown:
        raise ConfigError(
            f"compaction={dict(given)!r}: unknown field(s) {', '.join(unknown)}; the fields are those of "
            "CompactionConfig (e.g. result_cap_tokens, trigger_ratio, keep_recent_results, strategy)"
        )
    return dict(given)


class _Sources:
    """The keywords given and the record's sections, read the same way for every option."""

    def __init__(self, given: Mapping[str, Any], recorded: Mapping[str, Any] | None) -> None:
        self.given = given
        self.recorded = recorded
        self.resumed = recorded is not None

    def g(self, keyword: str) -> Any:
        return self.given.get(keyword)

    def section(self, name: str) -> Mapping[str, Any]:
        sec = (self.recorded or {}).get(name)
        return sec if isinstance(sec, Mapping) else {}

    def pick(self, keyword: str, section: str, attr: str, default: Any) -> Any:
        """Given (not ``None``), else recorded (``None`` included), else ``default``."""
        value = self.g(keyword)
        if value is not None:
            return value
        sec = self.section(section) if section else (self.recorded or {})
        return sec.get(attr, default)

    def on(self, keyword: str, section: str, attr: str, default: bool) -> bool:
        """A switch: given, else recorded (a resumed session: as it was started), else
        ``default`` (the backend's)."""
        value = self.g(keyword)
        if value is not None:
            return bool(value)
        if self.resumed:
            return bool(self.section(section).get(attr, False))
        return default


def resolve(given: Mapping[str, Any], recorded: Mapping[str, Any] | None, defaults: BackendDefaults) -> Recipe:
    """See :meth:`Recipe.resolve`."""
    src = _Sources(given, recorded)
    d = defaults
    model = ModelOptions(
        backend=src.g("backend"),
        model=src.g("model"),
        base_url=src.pick("base_url", "model", "base_url", None),
        api_key=src.g("api_key"),
        api_key_env=src.pick("api_key_env", "model", "api_key_env", "OPENAI_API_KEY"),
        timeout=src.pick("timeout", "model", "timeout", None),
        max_retries=src.pick("max_retries", "model", "max_retries", None),
        stream=src.pick("stream", "model", "stream", None),
        cache_ttl=src.pick("cache_ttl", "model", "cache_ttl", None),
        cache_diagnostics=src.pick("cache_diagnostics", "model", "cache_diagnostics", None),
        routing_header=src.pick("routing_header", "model", "routing_header", None),
        prompt_cache_key=src.pick("prompt_cache_key", "model", "prompt_cache_key", None),
        prompt_cache_retention=src.pick("prompt_cache_retention", "model", "prompt_cache_retention", None),
        gguf=_str_or_none(src.pick("gguf", "model", "gguf", None)),
        window=src.pick("window", "model", "window", None),
    )
    repeats = src.g("max_repeats")
    if repeats is not None and repeats < 0:
        raise ConfigError(f"max_repeats={repeats}: give 1 or more identical calls in a row, or 0 for no limit")
    limits = Limits(
        max_iterations=src.pick("max_iterations", "limits", "max_iterations", Limits.max_iterations),
        max_tool_rounds=src.pick("max_tool_rounds", "limits", "max_tool_rounds", d.max_tool_rounds),
        tool_choice_first=src.pick("tool_choice_first", "limits", "tool_choice_first", None),
        max_tokens=src.pick("max_tokens", "limits", "max_tokens", Limits.max_tokens),
        tool_timeout=src.pick("tool_timeout", "limits", "tool_timeout", Limits.tool_timeout),
        max_repeats=src.pick("max_repeats", "limits", "max_repeats", Limits.max_repeats),
    )
    compaction = _compaction(src, d)
    status = StatusOptions(
        enabled=src.on("status", "status", "enabled", d.features),
        mode=src.pick("status_mode", "status", "mode", StatusOptions.mode),
        cache_price_ratio=src.pick("cache_price_ratio", "status", "cache_price_ratio", d.cache_price_ratio),
        fields=status_fields(src.pick("status_fields", "status", "fields", None)),
    )
    recipe = Recipe(
        model=model,
        limits=limits,
        compaction=compaction,
        status=status,
        todo=TodoOptions(enabled=src.on("todo", "todo", "enabled", d.features)),
        delegate=DelegateOptions(enabled=src.on("delegate", "delegate", "enabled", d.features)),
        skills=_skills(src),
        mcp=_mcp(src),
        deferral=_deferral(src),
        defence=_defence(src),
        reasoning=ReasoningOptions(mode=_reasoning(src)),
        telemetry=_telemetry(src),
        timestamps=bool(src.pick("timestamps", "", "timestamps", False)),
        keep_warm=bool(src.pick("keep_warm", "", "keep_warm", False)),
        workspace=_workspace(src.pick("workspace", "", "workspace", None)),
        runtime=RuntimeOptions(
            system=src.g("system"),
            tools=src.g("tools"),
            db=src.g("db"),
            resume=src.g("resume"),
            take_over=bool(src.g("take_over")),
            on_event=src.g("on_event"),
            prices=src.g("prices"),
            compaction_hooks=_compaction_hooks(src.g("compaction_hooks")),
        ),
    )
    from ctxwright.recipe.values import check_values

    check_values(recipe, given)
    return recipe


def _compaction_hooks(value: Any) -> CompactionHooks | None:
    """Hooks are called mid-run from a worker thread: anything but ``CompactionHooks`` is
    refused now, not when the first compaction would call it."""
    if value is None or isinstance(value, CompactionHooks):
        return value
    raise ConfigError(
        f"compaction_hooks={type(value).__name__}: give CompactionHooks(before=..., after=...) "
        "(ctxwright.compaction.hooks)"
    )


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _compaction(src: _Sources, d: BackendDefaults) -> CompactionOptions:
    """The config to run with: given (a config, a mapping over the recorded one, ``True``,
    ``False``), else the recorded one, else the defaults; the LLM layers by ``summaries``,
    else as the config says, else by backend; ``window_tokens`` from the ``window`` given."""
    given = src.g("compaction")
    stored = src.section("compaction").get("config")
    if isinstance(stored, Mapping) and "policy" not in stored:
        # recorded before the cost planner (compaction/planner.py): resumes compacting as it ran
        stored = {**stored, "policy": "eager"}
    if isinstance(stored, Mapping) and "compress" not in stored:
        # recorded before the compressors (compaction/compress/): resumes recording results as it did
        stored = {**stored, "compress": False}
    from_record = given is None and stored is not None
    if given is None:
        given = True if stored is None else stored
    if given is False:
        return CompactionOptions(config=None, summaries=False, read_result=False, recall=False, pin_tool=False)
    if isinstance(given, CompactionConfig):
        cfg = replace(given)  # a copy: the caller's stays as given
    elif given is True:
        cfg = CompactionConfig()
    elif isinstance(given, Mapping):  # fields over the recorded config (or the defaults)
        base = stored if isinstance(stored, Mapping) else {}
        values = given if from_record else {**base, **compaction_overrides(given)}
        cfg = compaction_from_dict(values, "compaction")
        from_record = from_record or isinstance(stored, Mapping)
    elif given == "provider":  # the provider's server-side compaction instead of ctxwright's tiers
        cfg = CompactionConfig(enabled=False, provider="compact")
    else:
        raise ConfigError(
            f"compaction={given!r}: pass a CompactionConfig, a mapping of its fields, True (defaults), False (off) "
            "or 'provider' (the provider's own compaction)"
        )
    summaries = src.g("summaries")
    if summaries is not None:
        cfg.archival_summaries = cfg.full_compaction = bool(summaries)
    elif not from_record and not (cfg.archival_summaries or cfg.full_compaction):
        cfg.archival_summaries = cfg.full_compaction = d.features
    filled = False
    if cfg.window_tokens is None and src.g("window") is not None:
        cfg.window_tokens = src.g("window")
        filled = True
    return CompactionOptions(
        config=cfg,
        summaries=cfg.archival_summaries or cfg.full_compaction,
        read_result=src.on("read_result", "compaction", "read_result", d.features),
        recall=src.on("recall", "compaction", "recall", d.features),
        pin_tool=src.on("pin_tool", "compaction", "pin_tool", False),
        summarizer=src.g("summarizer"),
        window_filled=filled,
    )


def _skills(src: _Sources) -> SkillsOptions:
    rec = src.section("skills")
    dirs = src.g("skills")
    if dirs is None and isinstance(rec.get("dirs"), list):
        dirs = rec["dirs"]
    absolute = None if dirs is None else [str(Path(p).expanduser().resolve()) for p in dirs]
    allow = src.g("allow_skill_scripts")
    allow = bool(rec.get("allow_scripts", False)) if allow is None else bool(allow)
    timeout = src.pick("skill_script_timeout", "skills", "script_timeout", SkillsOptions.script_timeout)
    if allow:
        try:
            ok = float(timeout) > 0
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ConfigError(f"skill_script_timeout={timeout!r}: give a number of seconds above 0")
        timeout = float(timeout)
    catalog = _catalog(src.g("skills_catalog"), rec.get("catalog", "reminder"))
    frozen: list[CatalogEntry] | None = None
    if catalog == "prefix" and src.resumed:  # frozen with the prefix: the entries recorded at start
        frozen = [CatalogEntry.from_dict(e) for e in rec.get("frozen") or () if isinstance(e, Mapping)]
    return SkillsOptions(dirs=absolute, allow_scripts=allow, script_timeout=timeout, catalog=catalog, frozen=frozen)


def _catalog(given: Any, recorded: Any) -> CatalogMode:
    """As given, else as recorded, else ``reminder``. (A resume in the other mode is refused
    by ``check_resume``: the mode decides the ``Skill`` tool's bytes.)"""
    if given is not None and given not in CATALOG_MODES:
        raise ConfigError(f"skills_catalog={given!r}: use 'reminder' (the default) or 'prefix'")
    mode = given or recorded
    return cast(CatalogMode, mode if mode in CATALOG_MODES else "reminder")


def _mcp(src: _Sources) -> McpOptions:
    rec = src.section("mcp")
    commands = src.g("mcp_servers")
    if commands is None and isinstance(rec.get("servers"), list):
        commands = rec["servers"]
    from ctxwright.recipe.values import mcp_command

    servers = None if commands is None else [mcp_command(c) for c in commands]
    timeout = src.pick("mcp_timeout", "mcp", "timeout", None)
    if servers is not None and timeout is not None and timeout <= 0:
        raise ConfigError(f"mcp_timeout={timeout!r}: give the seconds an MCP tool call may take (CLI: --mcp-timeout)")
    trust = src.pick("mcp_trust", "mcp", "trust", None)
    if trust is not None:
        if isinstance(trust, str) or not all(isinstance(n, str) and n for n in trust):
            raise ConfigError(f"mcp_trust={trust!r}: give a list of MCP server names (CLI: --mcp-trust NAME)")
        trust = list(trust)
        if trust and not servers:
            # a trust that names nothing would read as if it had been applied
            raise ConfigError(
                f"mcp_trust={trust!r} without an MCP server: give the server too "
                "(CLI: --mcp COMMAND --mcp-trust NAME; library: mcp_servers=[...])"
            )
    cap = src.pick("mcp_result_cap", "mcp", "result_cap", None)
    return McpOptions(servers=servers, timeout=timeout, trust=trust, result_cap=cap)


def _deferral(src: _Sources) -> DeferralOptions:
    rec = src.section("deferral").get("defer_tools")
    given = src.g("defer_tools")
    if given is None and src.resumed and not isinstance(rec, Mapping):
        given = "none"  # a session from before deferral: every tool was in its prefix
    try:
        config = DeferConfig.of(
            given, src.g("tool_index"), rec if isinstance(rec, Mapping) else None, ranker=src.g("tool_search_ranker")
        )
    except ValueError as exc:
        raise ConfigError(f"{exc} (CLI: --defer-tools, --tool-index, --tool-search-ranker)") from None
    return DeferralOptions(defer_tools=config, tool_index=config.index, tool_search_ranker=config.ranker)


def _defence(src: _Sources) -> DefenceOptions:
    """The level given, else the one the session recorded, else the default."""
    given, sanitize = src.g("defence"), src.g("sanitize")
    rec = src.section("defence")
    if given is None and src.resumed:
        given = rec.get("level", "none")
        if sanitize is None and isinstance(rec.get("sanitize"), bool):
            sanitize = rec["sanitize"]
    feats = defence_features(given, sanitize=sanitize)
    return DefenceOptions(
        level=given if isinstance(given, Features) else feats.level,
        sanitize=feats.sanitize,
        approve=src.g("approve"),
        allow=src.g("allow"),
        gate_rules=src.g("gate_rules"),
        approve_timeout=src.g("approve_timeout"),
    )


def _reasoning(src: _Sources) -> ReasoningPolicy | None:
    value = src.g("reasoning")
    if value is None:
        value = src.section("reasoning").get("mode")
    try:
        return ReasoningPolicy(cast(ReasoningMode, value)) if isinstance(value, str) else value
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _telemetry(src: _Sources) -> TelemetryOptions:
    """``otlp``: a URL, or ``True`` / ``"env"`` (the endpoint of the environment's OTLP
    variables, resolved when the exporter opens); anything else is refused here, before a model
    loads. Never recorded: the endpoint is this process's setting, not the session's."""
    otlp, content = src.g("otlp"), src.g("otlp_content")
    if otlp is True:
        otlp = "env"
    elif otlp is False:
        otlp = None
    if otlp is not None:
        text = otlp.strip() if isinstance(otlp, str) else ""
        scheme = text.split("://", 1)[0].lower() if "://" in text else ""
        if text != "env" and (scheme not in ("http", "https") or not text.split("://", 1)[1].strip("/")):
            raise ConfigError(
                f"otlp={redact(repr(otlp))}: give the OTLP/HTTP endpoint's URL, e.g. http://localhost:4318 "
                "(CLI: --otlp URL), "
                "or 'env' for OTEL_EXPORTER_OTLP_ENDPOINT's"
            )
        otlp = text
    if content and otlp is None:
        raise ConfigError("otlp_content= (--otlp-content) adds content to exported spans: give --otlp URL too")
    return TelemetryOptions(otlp=otlp, content=bool(content))


def _workspace(value: Any) -> Path | None:
    return Path(value).expanduser().resolve() if value else None
