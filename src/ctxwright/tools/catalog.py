"""Tool catalogs: tool definitions read from outside (a JSONL file, an MCP server) and checked
before anything searches or calls them.

A catalog file is JSONL, one OpenAI tool object per line::

    {"type": "function", "function": {"name": "github.issues.create", "description": "...", "parameters": {...}}}

Names are kept verbatim, dots included: a catalog tool is found by ``search_tools`` and called
through ``call_tool(name, arguments)``, where the name is an argument, so the function-name rule
the registry applies to tools sent in the ``tools`` array (OpenAI's ``^[A-Za-z0-9_-]{1,64}$``)
does not apply. A name must still be non-empty and free of whitespace, since a model has to
write it back exactly.

Each problem is refused with one :class:`ToolCatalogError` line that names where it is
(``file:line``) and what to do: a line that is not JSON or not a tool object, a duplicate name
(both lines named), a ``parameters`` that is not valid JSON Schema (checked against the
metaschema of the draft its ``$schema`` names, JSON Schema 2020-12 when it names none, as MCP
specifies for ``inputSchema``) or that does not describe an object (tool arguments are always a
JSON object). A catalog that would fail later, at call time, with a confusing validator error
is better refused when it is loaded.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import jsonschema.exceptions
from jsonschema.validators import validator_for

from ctxwright.core.messages import canonical_json
from ctxwright.core.request import ToolSpec
from ctxwright.errors import ToolCatalogError

__all__ = ["CatalogTool", "check_parameters", "load_catalog", "read_jsonl", "tool_from_object"]

_TOOL_SHAPE = 'one OpenAI tool object per line: {"type": "function", "function": {"name", "description", "parameters"}}'

#: Metaschema checks already passed, by canonical schema text: catalogs repeat the same
#: parameter shapes, and checking against the 2020-12 metaschema takes milliseconds per schema.
#: Emptied when it reaches :data:`_CHECKED_MAX` entries, so a long-lived process stays bounded.
_CHECKED: set[str] = set()
_CHECKED_MAX = 4096


@dataclass(frozen=True)
class CatalogTool:
    """A tool read from a catalog, with where it came from (``file:line``) for error messages."""

    spec: ToolSpec
    source: str


def check_parameters(schema: object, where: str) -> dict[str, Any]:
    """``schema`` as a tool's parameters schema, or :class:`ToolCatalogError` naming ``where``.

    Valid means: a JSON object, valid against its draft's metaschema, describing an object."""
    if not isinstance(schema, dict):
        raise ToolCatalogError(
            f'{where}: "parameters" must be a JSON Schema object, got {type(schema).__name__}; '
            'use {"type": "object", "properties": {...}}'
        )
    key = canonical_json(schema)
    if key not in _CHECKED:
        validator = validator_for(schema, default=jsonschema.Draft202012Validator)
        error = jsonschema.exceptions.best_match(validator(validator.META_SCHEMA).iter_errors(schema))
        if error is not None:
            raise ToolCatalogError(
                f'{where}: "parameters" is not valid JSON Schema: {error.message} at {error.json_path}; '
                "fix the schema (check it with any JSON Schema validator)"
            )
        if len(_CHECKED) >= _CHECKED_MAX:
            _CHECKED.clear()
        _CHECKED.add(key)
    if schema.get("type", "object") != "object":
        raise ToolCatalogError(
            f'{where}: "parameters" must describe an object (tool arguments are a JSON object), '
            f'not type {schema.get("type")!r}; use {{"type": "object", "properties": {{...}}}}'
        )
    return schema


def tool_from_object(data: object, where: str) -> ToolSpec:
    """One OpenAI tool object as a :class:`ToolSpec`, its name kept verbatim, or
    :class:`ToolCatalogError` saying what is wrong at ``where``."""
    if not isinstance(data, dict):
        raise ToolCatalogError(f"{where}: expected a JSON object, got {type(data).__name__}; {_TOOL_SHAPE}")
    function = data.get("function")
    if data.get("type") != "function" or not isinstance(function, dict):
        hint = " (it looks like a bare function: wrap it)" if "name" in data else ""
        raise ToolCatalogError(f"{where}: not a tool object{hint}; {_TOOL_SHAPE}")
    name = function.get("name")
    if not isinstance(name, str) or not name or any(c.isspace() for c in name):
        raise ToolCatalogError(
            f'{where}: "function.name" must be a non-empty string without spaces, got {name!r}; '
            "give the tool the name a model should call it by"
        )
    description = function.get("description", "")
    if not isinstance(description, str):
        raise ToolCatalogError(f'{where}: "function.description" of {name!r} must be a string; say what the tool does')
    parameters = check_parameters(function.get("parameters", {"type": "object", "properties": {}}), f"{where} ({name})")
    return ToolSpec.create(name, description, parameters)


def read_jsonl(path: str | Path, what: str) -> Iterator[tuple[str, object]]:
    """``(file:line, value)`` for each non-blank line of a JSONL file; a line that is not JSON,
    a file that cannot be read, is not UTF-8 or is missing ends in :class:`ToolCatalogError`."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ToolCatalogError(f"{what} {path} does not exist; check the path") from None
    except UnicodeDecodeError as exc:
        raise ToolCatalogError(
            f"{what} {path} is not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8"
        ) from None
    except OSError as exc:
        raise ToolCatalogError(
            f"{what} {path} cannot be read: {exc.strerror or exc}; check the path and its permissions"
        ) from None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ToolCatalogError(
                f"{where}: not JSON ({exc.msg} at column {exc.colno}); a {what} is JSONL, one JSON object per line"
            ) from None
        yield where, value


def load_catalog(path: str | Path) -> list[CatalogTool]:
    """Every tool of a JSONL catalog file, in file order; the first problem is refused with
    :class:`ToolCatalogError` (``file:line`` and what to do), duplicates naming both lines."""
    tools: list[CatalogTool] = []
    first_seen: dict[str, str] = {}
    for where, value in read_jsonl(path, "tool catalog"):
        spec = tool_from_object(value, where)
        if spec.name in first_seen:
            raise ToolCatalogError(
                f"{where}: duplicate tool name {spec.name!r}, already defined at {first_seen[spec.name]}; "
                "tool names must be unique: rename or remove one"
            )
        first_seen[spec.name] = where
        tools.append(CatalogTool(spec, where))
    if not tools:
        raise ToolCatalogError(f"tool catalog {path} has no tools; {_TOOL_SHAPE}")
    return tools
