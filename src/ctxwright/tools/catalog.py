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

One exception is read rather than refused: the type names of BFCL (the Berkeley
Function-Calling Leaderboard), whose Python-flavoured ``"dict"``, ``"float"``, ``"tuple"`` and
``"any"`` real tool sets copied. They are not JSON Schema, but what they mean is clear, so they
are mapped (:data:`BFCL_TYPES`, at every level of the schema) and one warning per catalog says so.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxwright.core.messages import canonical_json
from ctxwright.core.request import ToolSpec
from ctxwright.errors import ToolCatalogError

__all__ = [
    "BFCL_TYPES",
    "CatalogTool",
    "bfcl_to_json_schema",
    "check_parameters",
    "load_catalog",
    "read_jsonl",
    "tool_from_object",
]

_TOOL_SHAPE = 'one OpenAI tool object per line: {"type": "function", "function": {"name", "description", "parameters"}}'

#: Metaschema checks already passed, by canonical schema text: catalogs repeat the same
#: parameter shapes, and checking against the 2020-12 metaschema takes milliseconds per schema.
#: Emptied when it reaches :data:`_CHECKED_MAX` entries, so a long-lived process stays bounded.
_CHECKED: set[str] = set()
_CHECKED_MAX = 4096


#: BFCL's type names and the JSON Schema type each stands for; ``None``: any type (no ``type``).
BFCL_TYPES: dict[str, str | None] = {"dict": "object", "float": "number", "tuple": "array", "any": None}
#: Where a schema holds subschemas: a map of them, one, or a list of them (``items`` is either).
_SUB_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SUB_ONE = (
    "items",
    "additionalProperties",
    "additionalItems",
    "contains",
    "not",
    "if",
    "then",
    "else",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
)
_SUB_LISTS = ("items", "prefixItems", "anyOf", "oneOf", "allOf")


def bfcl_to_json_schema(schema: object, found: set[str]) -> object:
    """``schema`` with BFCL's type names (:data:`BFCL_TYPES`) turned into JSON Schema's, in every
    subschema (properties, items, ``anyOf``...; never inside ``default``, ``enum`` or other
    values); the names met are added to ``found``. A schema without them is returned as it is."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] | None = None

    def put(key: str, value: object) -> None:
        nonlocal out
        if value is not schema.get(key):
            out = dict(schema) if out is None else out
            out[key] = value

    kind = schema.get("type")
    names = [kind] if isinstance(kind, str) else kind if isinstance(kind, list) else []
    bfcl = [n for n in names if isinstance(n, str) and n in BFCL_TYPES]
    if bfcl:
        found.update(bfcl)
        out = dict(schema)
        mapped = [BFCL_TYPES.get(n, n) if isinstance(n, str) else n for n in names]
        if None in mapped:  # "any": every type
            del out["type"]
        elif isinstance(kind, str):
            out["type"] = mapped[0]
        else:
            out["type"] = [m for i, m in enumerate(mapped) if m not in mapped[:i]]  # float+number: once
    for key in _SUB_MAPS:
        sub = schema.get(key)
        if isinstance(sub, dict):
            new = {k: bfcl_to_json_schema(v, found) for k, v in sub.items()}
            if any(new[k] is not sub[k] for k in sub):
                put(key, new)
    for key in _SUB_ONE:
        sub = schema.get(key)
        if isinstance(sub, dict):
            put(key, bfcl_to_json_schema(sub, found))
    for key in _SUB_LISTS:
        sub = schema.get(key)
        if isinstance(sub, list):
            items = [bfcl_to_json_schema(v, found) for v in sub]
            if any(a is not b for a, b in zip(items, sub, strict=True)):
                put(key, items)
    return schema if out is None else out


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
        import jsonschema  # loaded by the first schema checked, not by every command's start
        import jsonschema.exceptions
        from jsonschema.validators import validator_for

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


def tool_from_object(data: object, where: str, bfcl: set[str] | None = None) -> ToolSpec:
    """One OpenAI tool object as a :class:`ToolSpec`, its name kept verbatim, or
    :class:`ToolCatalogError` saying what is wrong at ``where``. BFCL type names in its
    parameters are mapped to JSON Schema (:func:`bfcl_to_json_schema`) and added to ``bfcl``."""
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
    raw = function.get("parameters", {"type": "object", "properties": {}})
    try:
        parameters = check_parameters(bfcl_to_json_schema(raw, set() if bfcl is None else bfcl), f"{where} ({name})")
    except RecursionError:  # the walk and the metaschema check recurse once per level
        raise ToolCatalogError(
            f'{where} ({name}): "parameters" is nested too deeply to check; flatten the schema'
        ) from None
    return ToolSpec.create(name, description, parameters)


def read_jsonl(
    path: str | Path, what: str, on_bad: Callable[[ToolCatalogError], None] | None = None
) -> Iterator[tuple[str, object]]:
    """``(file:line, value)`` for each non-blank line of a JSONL file; a file that cannot be
    read, is not UTF-8 or is missing ends in :class:`ToolCatalogError`, and so does a line that
    is not JSON -- unless ``on_bad`` is given: then that line's error goes to it and the lines
    after it are read (a batch of queries answers every good line)."""
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
            bad = ToolCatalogError(
                f"{where}: not JSON ({exc.msg} at column {exc.colno}); a {what} is JSONL, one JSON object per line"
            )
        except RecursionError:  # Python's parser gives up on a very deep nesting
            bad = ToolCatalogError(f"{where}: JSON nested too deeply to read; a {what} line is a flat JSON object")
        else:
            yield where, value
            continue
        if on_bad is None:
            raise bad
        on_bad(bad)


def load_catalog(path: str | Path, warn: Callable[[str], None] | None = None) -> list[CatalogTool]:
    """Every tool of a JSONL catalog file, in file order; the first problem is refused with
    :class:`ToolCatalogError` (``file:line`` and what to do), duplicates naming both lines.
    BFCL type names are read as JSON Schema, with one warning for the catalog, given to
    ``warn`` (default: :func:`warnings.warn`)."""
    tools: list[CatalogTool] = []
    first_seen: dict[str, str] = {}
    bfcl: set[str] = set()
    bfcl_lines: list[str] = []
    for where, value in read_jsonl(path, "tool catalog"):
        found: set[str] = set()
        spec = tool_from_object(value, where, found)
        if found:
            bfcl |= found
            bfcl_lines.append(where)
        if spec.name in first_seen:
            raise ToolCatalogError(
                f"{where}: duplicate tool name {spec.name!r}, already defined at {first_seen[spec.name]}; "
                "tool names must be unique: rename or remove one"
            )
        first_seen[spec.name] = where
        tools.append(CatalogTool(spec, where))
    if not tools:
        raise ToolCatalogError(f"tool catalog {path} has no tools; {_TOOL_SHAPE}")
    if bfcl_lines:
        names = sorted(bfcl)
        read_as = ", ".join(f"{n} as {BFCL_TYPES[n] or 'any type'}" for n in names)
        message = (
            f"tool catalog {path}: {len(bfcl_lines)} tool(s) use BFCL type names, not JSON Schema's "
            f"(first at {bfcl_lines[0]}); read {read_as}"
        )
        (warn or (lambda m: warnings.warn(m, stacklevel=3)))(message)
    return tools
