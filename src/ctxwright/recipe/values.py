"""The resolved values checked against their declared types and ranges.

Why: a value reaches the recipe from a caller (``max_tokens="lots"``) or from a stored record
that something else wrote or damaged. Unchecked, it fails far from where it came from -- a
server's HTTP 400 on ``max_tokens``, a loop that runs zero iterations, a timeout that never
fires -- after the session has been opened and perhaps written to. So every simple field (an
``int``, ``float``, ``bool`` or ``str``, optionally ``None``) is checked against its declared
type, and the counts and durations against their range, right after :func:`resolve`, in one
line that says where the value came from and what to give instead.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ctxwright.errors import ConfigError
from ctxwright.mcp.command import parse_command
from ctxwright.recipe.declare import OptionSpec, options
from ctxwright.recipe.options import Recipe

__all__ = ["check_fields", "check_values", "check_workspace", "mcp_command"]

_SIMPLE: dict[str, tuple[type, ...]] = {"int": (int,), "float": (int, float), "bool": (bool,), "str": (str,)}
_WORDS = {"int": "a whole number", "float": "a number", "bool": "true or false", "str": "a string"}
#: the least value each count or duration takes, and whether the bound itself is allowed
#: (a served model's ``timeout`` and ``max_retries`` are checked by ``OpenAIBackend`` itself,
#: for its direct users too: one rule, one place)
_LOWER: dict[str, tuple[float, bool]] = {
    "limits.max_iterations": (1, True),
    "limits.max_tokens": (1, True),
    "limits.tool_timeout": (0, False),
    "limits.max_tool_rounds": (0, True),
    "limits.max_repeats": (0, True),
    "model.window": (1, True),
    "status.cache_price_ratio": (0, True),
    "mcp.timeout": (0, False),
    "mcp.result_cap": (0, False),
    "defence.approve_timeout": (0, False),
}


def _types(spec: OptionSpec) -> tuple[list[str], bool] | None:
    """The simple types a field's annotation names and whether ``None`` is allowed; ``None``
    when the annotation holds anything else (a config object, a literal alias): not checked here."""
    holder = Recipe if not spec.section else _section_type(spec.section)
    field = next(f for f in dataclasses.fields(holder) if f.name == spec.attr)
    return _simple(field)


def _simple(field: dataclasses.Field[Any]) -> tuple[list[str], bool] | None:
    parts = [p.strip() for p in str(field.type).split("|")]
    simple = [p for p in parts if p in _SIMPLE]
    if len(simple) + parts.count("None") != len(parts) or not simple:
        return None
    return simple, "None" in parts


def _section_type(section: str) -> type:
    field = next(f for f in dataclasses.fields(Recipe) if f.name == section)
    return type(field.default_factory()) if callable(field.default_factory) else type(field.default)


def check_values(recipe: Recipe, given: Mapping[str, Any]) -> None:
    """Raise :class:`ConfigError` for the first value of the wrong type or out of range."""
    for spec in options(Recipe):
        kinds = _types(spec)
        if kinds is None:
            continue
        holder = getattr(recipe, spec.section) if spec.section else recipe
        value = getattr(holder, spec.attr)
        simple, optional = kinds
        if value is None and optional:
            continue
        ok = any(isinstance(value, _SIMPLE[k]) for k in simple) and not (
            isinstance(value, bool) and "bool" not in simple
        )
        low = _LOWER.get(spec.path)
        if ok and low is not None and isinstance(value, (int, float)):
            bound, inclusive = low
            ok = math.isfinite(value) and (value >= bound if inclusive else value > bound)
        if ok:
            continue
        want = " or ".join(_WORDS[k] for k in simple)
        if low is not None:
            want += f" {'of at least' if low[1] else 'above'} {low[0]:g}"
        keyword = spec.keyword or spec.path
        if given.get(keyword) is not None:
            raise ConfigError(f"{keyword}={value!r}: give {want}")
        raise ConfigError(
            f"the session's record has {spec.path}={value!r}, not {want}: the record is damaged; give "
            f"{keyword}= to override it, or start a new session"
        )
    check_workspace(recipe.workspace, given.get("workspace"))


def check_workspace(workspace: Path | None, given: Any) -> None:
    """A workspace given must be an existing folder: the file tools are confined to it, and a
    missing one would only fail once the agent is being built, as an ``OSError`` that names no
    option. ``given`` is the value as given; ``None`` (it came from the session's record) is
    not checked here: a record is resolved for more than a run, and a workspace moved since is
    said when the file tools are built (``tools/component.py``)."""
    if given is None or workspace is None or workspace.is_dir():
        return
    what = "is a file, not a folder" if workspace.exists() else "does not exist"
    raise ConfigError(f"workspace={str(given)!r}: {workspace} {what}; give an existing folder (CLI: --workspace DIR)")


def mcp_command(spec: str | Sequence[str]) -> list[str]:
    """An MCP server's command as its argv (``mcp/connection.py``'s rule). A string split like
    a shell that a shell could not split (an unterminated quote, a trailing backslash) is a
    :class:`ConfigError` naming the option, not ``shlex``'s bare ``ValueError``."""
    try:
        return parse_command(spec)
    except ValueError as exc:
        raise ConfigError(
            f"mcp_servers={spec!r}: {str(exc).lower()} when it is split like a shell command; close the "
            "quote or escape it (CLI: --mcp 'python server.py --name \"two words\"')"
        ) from None


def check_fields(obj: Any, where: str) -> None:
    """The simple fields of a dataclass instance (a ``CompactionConfig`` from a record or a
    mapping given) against their annotations: ``where`` names the option in the message."""
    for field in dataclasses.fields(obj):
        kinds = _simple(field)
        if kinds is None:
            continue
        value = getattr(obj, field.name)
        simple, optional = kinds
        if value is None and optional:
            continue
        if any(isinstance(value, _SIMPLE[k]) for k in simple) and not (
            isinstance(value, bool) and "bool" not in simple
        ):
            continue
        want = " or ".join(_WORDS[k] for k in simple)
        raise ConfigError(f"{where}: {field.name}={value!r} is not {want}")
