"""A session's run configuration, recorded with it so that resuming runs it the same way.

Why: a session is more than its events. The backend, the model and the server it ran on,
and the options that shaped every request (``max_tokens``, the tool-round budget, the
compaction settings, the status bar's mode, timestamps...) decide what the next request
looks like. A resume that forgot them ran with the defaults: a session started with
``--max-tokens 1024 --result-cap 2000`` continued with 256 and 25,000, another model could
answer in the middle of a trajectory it never saw (and write its compactions into it), and
a served session without ``--base-url`` went to api.openai.com and failed with a misleading
error. So the harness stores the whole configuration in the session's meta (``harness``
key) when it starts, and on resume every option not given again comes from there; an
option given again overrides it (and is recorded for the next resume). The API key is never
stored, only the name of the variable that holds it.

Switching the backend or the model of a session is refused (:func:`check_same_model`):
one trajectory is one model's conversation, and every reply after the switch would be
conditioned on turns another model wrote.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from ctxwright.compaction import CompactionConfig
from ctxwright.core.repeats import DEFAULT_MAX_REPEATS
from ctxwright.errors import ConfigError

#: Options with a fixed default: what a new session gets when they are not given.
DEFAULTS: dict[str, Any] = {
    "max_iterations": 20,
    "max_tokens": 256,
    "tool_timeout": 30.0,
    "max_repeats": DEFAULT_MAX_REPEATS,
    "timestamps": False,
    "status_mode": "auto",
    "api_key_env": "OPENAI_API_KEY",
}
#: Options whose default depends on the backend (``harness.backend_defaults``); recorded
#: resolved, so a resume does not re-decide them.
BY_BACKEND = ("max_tool_rounds", "cache_price_ratio")
#: Options recorded only when given (their default is decided where they are used: the
#: served backend's timeout and retries, streaming by backend); reused when not given again.
WHEN_GIVEN = ("tool_choice_first", "timeout", "max_retries", "stream", "mcp_timeout")
#: Every option recorded with a session (besides base_url, gguf and window, which rebuild
#: the backend, and compaction).
RECORDED = (*DEFAULTS, *BY_BACKEND, *WHEN_GIVEN)


def pick(name: str, given: Mapping[str, Any], recorded: Mapping[str, Any], default: Any) -> Any:
    """``given[name]`` if given (not ``None``), else the recorded value (``None`` included:
    e.g. an unbounded ``max_tool_rounds``), else ``default``."""
    value = given.get(name)
    if value is not None:
        return value
    if name in recorded:
        return recorded[name]
    return default


def compaction_to_dict(cfg: CompactionConfig) -> dict[str, Any]:
    out = asdict(cfg)
    if out.get("results_dir") is not None:
        out["results_dir"] = str(out["results_dir"])
    return out


def compaction_from_dict(data: Mapping[str, Any], where: str) -> CompactionConfig:
    """A config from its recorded (or given) fields; a field this build does not know (a
    newer release's) is ignored, one of the wrong name given by the caller is refused."""
    known = {f.name for f in fields(CompactionConfig)}
    kept = {k: v for k, v in data.items() if k in known}
    if kept.get("results_dir") is not None:
        kept["results_dir"] = Path(kept["results_dir"])
    try:
        return CompactionConfig(**kept)
    except TypeError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def overrides(given: Mapping[str, Any]) -> dict[str, Any]:
    """Field overrides given as a mapping (``compaction={"result_cap_tokens": 2000}``),
    checked against :class:`CompactionConfig`'s fields."""
    known = {f.name for f in fields(CompactionConfig)}
    unknown = sorted(set(given) - known)
    if unknown:
        raise ConfigError(
            f"compaction={dict(given)!r}: unknown field(s) {', '.join(unknown)}; the fields are those of "
            "CompactionConfig (e.g. result_cap_tokens, trigger_ratio, keep_recent_results, strategy)"
        )
    return dict(given)


def check_same_model(
    session_id: str, stored_backend: str | None, stored_model: str | None, backend: str | None, model: str | None
) -> None:
    """Refuse to continue a session on another backend or model than it ran on."""
    if stored_backend and backend and backend != stored_backend:
        raise ConfigError(
            f"session {session_id} ran on the {stored_backend} backend; continuing it on {backend} would mix two "
            f"models' turns in one trajectory. Leave --backend out to continue it on {stored_backend}, or start a "
            "new session"
        )
    if stored_model and model and model != stored_model:
        raise ConfigError(
            f"session {session_id} ran on model {stored_model!r}; continuing it on {model!r} would have that model "
            "answer (and compact) a conversation another model wrote. Leave --model/--gguf out to continue it on "
            f"{stored_model!r}, or start a new session"
        )


__all__ = [
    "BY_BACKEND",
    "DEFAULTS",
    "RECORDED",
    "WHEN_GIVEN",
    "check_same_model",
    "compaction_from_dict",
    "compaction_to_dict",
    "overrides",
    "pick",
]
