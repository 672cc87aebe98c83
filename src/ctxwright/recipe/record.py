"""The stored record of a recipe (``Session.meta["harness"]``): versioned, and migrated.

Why a version: what a session records is read back by every later release that resumes it.
Today's record (version 2, :func:`to_record`) is a tree like the :class:`Recipe`'s, with
every recorded option explicit -- including the feature switches that decide the prefix
(status bar, TODO tools, ``read_result``, ``delegate``, skill scripts), which version 1 (the
flat dict written before it, without a ``"version"`` key) left to be read off the stored
prefix. :func:`migrate` turns a version-1 record into version 2 exactly as the harness used
to read it: a switch not given is what the prefix has. A record newer than this code is
refused: guessing at its fields could resume the session with other options than it ran.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ctxwright.backends.base import Backend
from ctxwright.defence.levels import LEVELS, Features
from ctxwright.defence.levels import features as defence_features
from ctxwright.errors import ConfigError
from ctxwright.recipe.declare import OptionSpec, options
from ctxwright.recipe.options import Recipe
from ctxwright.recipe.resolve import compaction_to_dict
from ctxwright.skills.tools import RUN_SKILL_SCRIPT_TOOL
from ctxwright.status.bar import OPERATING_MANUAL
from ctxwright.tools.deferred import DeferConfig

__all__ = [
    "DELEGATE_TOOL",
    "FILE_TOOLS",
    "READ_RESULT_TOOL",
    "RECALL_TOOL",
    "RECORD_KEY",
    "TODO_TOOLS",
    "VERSION",
    "migrate",
    "to_record",
    "with_backend",
]

#: The record's version: what :func:`to_record` writes and :func:`migrate` returns.
VERSION = 2
#: ``Session.meta`` key holding the record (what the harness has always used).
RECORD_KEY = "harness"

#: Names of the tools the harness itself adds, by the option that adds them (for resume).
TODO_TOOLS = ("rewrite_todo_list", "update_todo_status")
READ_RESULT_TOOL = "read_result"
RECALL_TOOL = "recall"
DELEGATE_TOOL = "delegate"
FILE_TOOLS = ("read_file", "list_dir")

#: The sections of a version-2 record, and those every one has (the prefix's switches)
_SECTIONS = ("model", "limits", "compaction", "status", "todo", "delegate", "skills", "mcp", "deferral", "defence")
_REQUIRED = ("status", "todo", "delegate", "compaction", "defence", "deferral")

#: Version 1's flat keys, by where version 2 keeps them (the switches read off the prefix,
#: ``defence`` and ``defer_tools`` are migrated on their own).
_V1_KEYS: dict[str, tuple[str, str]] = {
    "base_url": ("model", "base_url"),
    "api_key_env": ("model", "api_key_env"),
    "timeout": ("model", "timeout"),
    "max_retries": ("model", "max_retries"),
    "stream": ("model", "stream"),
    "gguf": ("model", "gguf"),
    "window": ("model", "window"),
    "max_iterations": ("limits", "max_iterations"),
    "max_tool_rounds": ("limits", "max_tool_rounds"),
    "tool_choice_first": ("limits", "tool_choice_first"),
    "max_tokens": ("limits", "max_tokens"),
    "tool_timeout": ("limits", "tool_timeout"),
    "max_repeats": ("limits", "max_repeats"),
    "compaction": ("compaction", "config"),
    "status_mode": ("status", "mode"),
    "cache_price_ratio": ("status", "cache_price_ratio"),
    "skill_script_timeout": ("skills", "script_timeout"),
    "skills_catalog": ("skills", "catalog"),
    "skills_frozen": ("skills", "frozen"),
    "mcp_timeout": ("mcp", "timeout"),
    "timestamps": ("", "timestamps"),
}


def _json(spec: OptionSpec, value: Any, recipe: Recipe) -> Any:
    """One recorded value, JSON-safe."""
    if spec.path == "compaction.config":
        if value is None:
            return False
        out = compaction_to_dict(value)
        if recipe.compaction.window_filled:  # filled from window=, not part of the session's config
            out["window_tokens"] = None
        return out
    if isinstance(value, DeferConfig):
        return value.to_dict()
    if isinstance(value, Features):
        return value.level
    if spec.path == "reasoning.mode":
        return value.mode
    if spec.path == "skills.frozen":
        return [e.to_dict() for e in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return [list(v) if isinstance(v, tuple) else v for v in value]
    if isinstance(value, list):
        return [list(v) if isinstance(v, (list, tuple)) else v for v in value]
    return value


def to_record(recipe: Recipe) -> dict[str, Any]:
    """See :meth:`Recipe.to_record`: ``{"version": 2, "model": {...}, "limits": {...}, ...,
    "timestamps": ..., "workspace": ...}``, each section the recorded fields of the recipe's
    section by attribute name; a ``when_given`` field only when it is set."""
    out: dict[str, Any] = {"version": VERSION}
    for spec in options(Recipe):
        if spec.record == "never":
            continue
        holder = getattr(recipe, spec.section) if spec.section else recipe
        value = getattr(holder, spec.attr)
        if spec.record == "when_given" and value is None:
            continue
        target = out.setdefault(spec.section, {}) if spec.section else out
        target[spec.attr] = _json(spec, value, recipe)
    return out


def with_backend(recipe: Recipe, backend: Backend) -> Recipe:
    """See :meth:`Recipe.with_backend`: what the backend says a resume needs to build it again
    (``Backend.recipe_record``: the base URL with credentials redacted, the GGUF path, the
    window) takes the place of what was given."""
    m = recipe.model
    rec = backend.recipe_record()
    served = backend.name in ("openai", "anthropic", "openai-responses")
    base_url = rec.get("base_url", m.base_url) if served else m.base_url
    gguf = str(rec.get("gguf", m.gguf)) if backend.name == "embedded" and m.gguf is not None else m.gguf
    window = rec.get("window", m.window)
    return replace(recipe, model=replace(m, base_url=base_url, gguf=gguf, window=window))


def migrate(
    record: Mapping[str, Any] | None, *, system_prompt: str, tool_names: Sequence[str], meta: Mapping[str, Any]
) -> dict[str, Any]:
    """The stored ``record`` (``Session.meta["harness"]``) as version :data:`VERSION`.

    ``system_prompt`` and ``tool_names`` are the session's stored prefix, ``meta`` its
    ``Session.meta``. A version-1 record (no ``"version"``) gets the feature switches from the
    prefix, as the harness read them: the status bar when the system prompt ends with its
    manual, the TODO tools when both are in the prefix, ``read_result``, ``delegate`` and
    ``allow_skill_scripts`` when their tool is; the defence level it recorded or ``none`` (a
    session from before levels); ``defer_tools`` ``none`` (a session from before deferral);
    the workspace from ``meta["workspace"]``. Every record gets the reasoning mode from
    ``meta["reasoning_mode"]`` when it has none (``core/reasoning.py`` records it there).
    A version newer than this code is a :class:`ConfigError`."""
    if record is not None and not isinstance(record, Mapping):
        raise ConfigError(
            f"the session's recorded options are a {type(record).__name__}, not an object: the record in "
            "Session.meta['harness'] is damaged: start a new session"
        )
    rec: Mapping[str, Any] = record if record is not None else {}
    version = rec.get("version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ConfigError(
            f"the session's recorded options have version {version!r}, which no ctxwright writes; the record in "
            "Session.meta['harness'] is damaged: start a new session"
        )
    if version > VERSION:
        raise ConfigError(
            f"the session's options were recorded by a newer ctxwright (record version {version}; this one reads up "
            f"to version {VERSION}): upgrade ctxwright to continue it, or start a new session"
        )
    if version == VERSION:
        bad = [k for k, v in rec.items() if k in _SECTIONS and not isinstance(v, Mapping)]
        missing = [k for k in _REQUIRED if not isinstance(rec.get(k), Mapping)]
        if bad or missing:
            raise ConfigError(
                f"the session's recorded options lack or damage the section(s) {', '.join(bad + missing)}: the "
                "record in Session.meta['harness'] is damaged: start a new session"
            )
    out = copy.deepcopy(dict(rec)) if version == VERSION else _from_v1(rec, system_prompt, tool_names, meta)
    mode = meta.get("reasoning_mode")
    reasoning = out.get("reasoning")
    if isinstance(mode, str) and not (isinstance(reasoning, Mapping) and reasoning.get("mode") is not None):
        out["reasoning"] = {**(reasoning if isinstance(reasoning, Mapping) else {}), "mode": mode}
    return out


def _from_v1(
    rec: Mapping[str, Any], system_prompt: str, tool_names: Sequence[str], meta: Mapping[str, Any]
) -> dict[str, Any]:
    names = set(tool_names)
    out: dict[str, Any] = {"version": VERSION}

    def put(section: str, attr: str, value: Any) -> None:
        (out.setdefault(section, {}) if section else out)[attr] = copy.deepcopy(value)

    for key, (section, attr) in _V1_KEYS.items():
        if key in rec:
            put(section, attr, rec[key])
    if isinstance(rec.get("skills"), list):
        put("skills", "dirs", rec["skills"])
    if isinstance(rec.get("mcp"), list):
        put("mcp", "servers", rec["mcp"])
    # the switches: what the stored prefix has
    put("status", "enabled", system_prompt.endswith(OPERATING_MANUAL))
    put("todo", "enabled", all(n in names for n in TODO_TOOLS))
    put("compaction", "read_result", READ_RESULT_TOOL in names)
    put("compaction", "recall", RECALL_TOOL in names)
    put("delegate", "enabled", DELEGATE_TOOL in names)
    put("skills", "allow_scripts", RUN_SKILL_SCRIPT_TOOL in names)
    put("skills", "catalog", rec.get("skills_catalog", "reminder"))
    defence = rec.get("defence")
    if isinstance(defence, Mapping) and defence.get("level") in LEVELS:
        sanitize = defence.get("sanitize")
        level = defence["level"]
        put("defence", "level", level)
        put("defence", "sanitize", sanitize if isinstance(sanitize, bool) else defence_features(level).sanitize)
    else:  # a session from before levels: its prompt has no section
        put("defence", "level", "none")
        put("defence", "sanitize", False)
    deferral = rec.get("defer_tools")
    put("deferral", "defer_tools", deferral if isinstance(deferral, Mapping) else DeferConfig(mode="none").to_dict())
    put("", "workspace", meta.get("workspace"))
    return out
