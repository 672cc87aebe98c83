"""Tools: typed Python functions turned into model-facing specs, and safe execution.

Why this module exists:

* The tool list is part of the frozen prompt prefix, so a tool's JSON schema must come
  out byte-identical every time (no pydantic ``title`` noise, no dict-order drift) and
  the registry must keep the order tools were registered in -- re-sorting would change
  the prefix and miss the provider's prompt cache.
* A model's tool call is untrusted input. :meth:`ToolRegistry.execute` never raises: every
  failure (unknown tool, broken JSON, wrong fields, the tool itself crashing) becomes a
  structured JSON error the model can read and correct on its next turn.
* Every tool declares where its results come from and what running it does
  (``Tool.trust``, ``Tool.effects``; :data:`Trust`, :data:`Effects`). An *untrusted* tool's
  results come from outside (an MCP server, a web page, a file) and are marked as external
  content where they are recorded (``defence/``), so the model can tell the data it was
  handed from the instructions it was given (the book: retrieved content is context, not a
  command); a ``write`` or ``external`` tool is what a confirmation gate checks before it
  runs. The registry only declares and reports (:attr:`ToolOutcome.external`); it changes
  no bytes.
* Execution is split into :meth:`ToolRegistry.resolve` (lookup + validation, cheap) and
  :meth:`BoundCall.run` (the tool's own code), so an agent loop can validate on its own
  thread and run only the tool body in a worker thread with ``Tool.timeout_s``.
* A tool may be *deferred*: registered and callable (through ``call_tool``,
  ``tools/deferred.py``) but left out of the request's ``tools`` array, so hundreds of
  schemas do not ride in every request's prefix. :meth:`ToolRegistry.specs` is the array
  the prefix is built from; :meth:`ToolRegistry.all_specs` is every registered tool.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import json
import re
import time
import types
import typing
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Union, overload

from ctxwright.core.messages import ToolCall, canonical_json
from ctxwright.core.request import ToolSpec
from ctxwright.errors import ToolFailure
from ctxwright.tools.catalog import check_parameters

if TYPE_CHECKING:
    # pydantic and jsonschema are imported where a tool is built or its arguments checked: a
    # command that only declares options (``ctxwright --help``) never loads them
    import jsonschema
    from pydantic import BaseModel, ValidationError

__all__ = [
    "ERROR_INVALID_ARGUMENTS",
    "ERROR_INVALID_JSON",
    "ERROR_UNKNOWN_TOOL",
    "BoundCall",
    "Effects",
    "Tool",
    "ToolOutcome",
    "ToolRegistry",
    "ToolResult",
    "Trust",
    "check_declarations",
    "error_outcome",
    "render_result",
    "tool",
    "valid_function_name",
]

ERROR_UNKNOWN_TOOL = "unknown_tool"
ERROR_INVALID_JSON = "invalid_arguments_json"
ERROR_INVALID_ARGUMENTS = "invalid_arguments"

# OpenAI-compatible servers reject other function names; failing at registration is kinder.
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_ARGS_HEADERS = ("Args:", "Arguments:", "Parameters:")
_SECTION_HEADER = re.compile(r"^[A-Z][A-Za-z ]*:$")
_ARG_LINE = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")

#: ``"trusted"``: the tool's output is ctxwright's or the user's own code; ``"untrusted"``: it
#: comes from outside (an MCP server, a fetched page, a file, a skill's resources) and is marked
#: as external content when it is recorded (``defence/marking.py``).
Trust = Literal["trusted", "untrusted"]
#: What running the tool does: ``"none"`` (pure computation, the harness's own state),
#: ``"read"`` (reads files, pages, records), ``"write"`` (changes files or records the user
#: owns), ``"external"`` (sends, pays, deletes, posts: reaches outside the user's machine or
#: cannot be undone). A confirmation gate checks ``write`` and ``external`` calls.
Effects = Literal["none", "read", "write", "external"]
TRUST_VALUES: tuple[Trust, ...] = ("trusted", "untrusted")
EFFECTS_VALUES: tuple[Effects, ...] = ("none", "read", "write", "external")
#: The safe defaults of a tool that declares nothing. A function the user registers is their
#: own code (trusted), but nothing says what it does, so it counts as reaching outside
#: (``external``): a gate asks before it runs rather than letting it pass unseen. Declare
#: ``@tool(effects="none")`` on a pure function.
DEFAULT_TRUST: Trust = "trusted"
DEFAULT_EFFECTS: Effects = "external"


def check_declarations(name: str, trust: object, effects: object) -> None:
    """``ValueError`` naming the tool and the allowed values when a declaration is not one."""
    if trust not in TRUST_VALUES:
        raise ValueError(f"tool {name!r}: trust must be one of {', '.join(TRUST_VALUES)}, not {trust!r}")
    if effects not in EFFECTS_VALUES:
        raise ValueError(f"tool {name!r}: effects must be one of {', '.join(EFFECTS_VALUES)}, not {effects!r}")


@functools.cache
def _any_arguments() -> type[BaseModel]:
    """The arguments model of a tool checked by JSON Schema instead (:meth:`Tool.from_schema`):
    built on first use, so importing the registry does not load pydantic."""
    from pydantic import BaseModel, ConfigDict

    class _AnyArguments(BaseModel):
        model_config = ConfigDict(extra="allow")

    return _AnyArguments


# --------------------------------------------------------------------------- schema


def _json_type_of(value: Any) -> str | None:
    """The JSON-schema type name of a Literal value (bool before int: bool is an int)."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return None


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` that also accepts ``null``, in the compact ``"type": [T, "null"]`` form."""
    out = dict(schema)
    if "enum" in out:
        out["enum"] = [*out["enum"], None]
    kind = out.get("type")
    if isinstance(kind, str):
        out["type"] = [kind, "null"]
    elif "enum" not in out:
        return {"anyOf": [schema, {"type": "null"}]}
    return out


def _split_optional(hint: Any) -> tuple[Any, bool]:
    """``(T, True)`` for ``Optional[T]`` / ``T | None``; ``(hint, False)`` otherwise."""
    origin = typing.get_origin(hint)
    if origin is Union or origin is types.UnionType:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) != 1 or len(typing.get_args(hint)) != 2:
            raise TypeError(f"unsupported union {hint!r}: only Optional[T] / T | None is supported")
        return args[0], True
    return hint, False


def _schema_for(hint: Any) -> dict[str, Any]:
    """Compact JSON schema for one supported type hint; ``TypeError`` names what is not."""
    if typing.get_origin(hint) is typing.Annotated:
        return _schema_for(typing.get_args(hint)[0])
    inner, optional = _split_optional(hint)
    if optional:
        return _nullable(_schema_for(inner))
    if hint is str:
        return {"type": "string"}
    if hint is bool:
        return {"type": "boolean"}
    if hint is int:
        return {"type": "integer"}
    if hint is float:
        return {"type": "number"}
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        values = list(args)
        kinds = {_json_type_of(v) for v in values if v is not None}
        if None in kinds or not values:
            raise TypeError(f"unsupported Literal {hint!r}: values must be str, int, float or bool")
        schema: dict[str, Any] = {"enum": [v for v in values if v is not None]}
        if len(kinds) == 1:
            schema["type"] = kinds.pop()
        return _nullable(schema) if None in values else schema
    if origin is list and len(args) == 1:
        return {"type": "array", "items": _schema_for(args[0])}
    if origin is dict and len(args) == 2:
        if args[0] is not str:
            raise TypeError(f"unsupported {hint!r}: JSON object keys are strings, use dict[str, T]")
        return {"type": "object", "additionalProperties": _schema_for(args[1])}
    raise TypeError(
        f"unsupported type hint {hint!r}: use str, int, float, bool, Literal[...], list[T], dict[str, T] or Optional[T]"
    )


def valid_function_name(name: str) -> bool:
    """Whether ``name`` may be a function name in a request's ``tools`` array (OpenAI-compatible
    servers refuse others); a deferred tool, called through ``call_tool``, need not be one."""
    return bool(_TOOL_NAME.match(name))


def _source_of(func: Callable[..., Any]) -> str:
    """``module:qualname`` of a function, how ``ctxwright run --tool`` names it too."""
    module = getattr(func, "__module__", None) or "?"
    qualname = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or type(func).__name__
    return f"{module}:{qualname}"


def _is_json_value(value: Any) -> bool:
    """True when ``value`` survives a strict JSON round trip unchanged (usable as a default)."""
    try:
        return json.loads(json.dumps(value, allow_nan=False)) == value
    except (TypeError, ValueError):
        return False


# --------------------------------------------------------------------------- docstrings


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """``(summary, {param: description})`` from a Google-style docstring.

    The summary is the first paragraph joined onto one line; ``Args:`` entries may wrap
    onto more-indented continuation lines.
    """
    if not doc:
        return "", {}
    lines = doc.splitlines()
    summary: list[str] = []
    for line in lines:
        stripped = line.strip()
        if not stripped or _SECTION_HEADER.match(stripped):
            if summary or _SECTION_HEADER.match(stripped):
                break
            continue
        summary.append(stripped)

    params: dict[str, str] = {}
    start = next((i for i, ln in enumerate(lines) if ln.strip() in _ARGS_HEADERS), None)
    if start is not None:
        header_indent = len(lines[start]) - len(lines[start].lstrip())
        entry_indent: int | None = None
        current: str | None = None
        for line in lines[start + 1 :]:
            if not line.strip():
                continue
            indent = len(line) - len(line.lstrip())
            if indent <= header_indent:
                break
            if entry_indent is None:
                entry_indent = indent
            match = _ARG_LINE.match(line.strip()) if indent == entry_indent else None
            if match:
                current = match.group(1)
                params[current] = match.group(2).strip()
            elif current is not None:
                params[current] = f"{params[current]} {line.strip()}".strip()
    return " ".join(summary), params


# --------------------------------------------------------------------------- Tool


@dataclass(frozen=True)
class Tool:
    """A callable the model may use, with its model-facing spec and argument validator.

    Build one with :meth:`from_function` or the :func:`tool` decorator rather than by
    hand, so ``spec`` and ``args_model`` always agree with the function's signature.
    A ``Tool`` stays callable like the function it wraps.
    """

    name: str
    description: str
    func: Callable[..., Any]
    spec: ToolSpec
    args_model: type[BaseModel]
    timeout_s: float | None = None
    #: ``True``: never in the ``tools`` array (found with ``search_tools`` and run with
    #: ``call_tool``, or announced and called by name); ``False``: a core tool, always in the
    #: array; ``None``: deferred when the harness's ``defer_tools`` policy says so.
    deferred: bool | None = None
    #: where its results come from; ``"untrusted"`` results are marked as external content
    trust: Trust = DEFAULT_TRUST
    #: what running it does; ``write`` and ``external`` calls are what a confirmation gate checks
    effects: Effects = DEFAULT_EFFECTS
    #: checks the arguments against ``spec``'s JSON Schema (tools built by :meth:`from_schema`)
    schema_validator: jsonschema.protocols.Validator | None = None
    #: where the tool comes from (``module:function``, ``MCP server ...``), named when two
    #: sources register the same name
    source: str = ""
    #: for a dispatcher such as ``call_tool``: turns its call into the call of another tool,
    #: which then runs as if the model had called it (validation, timeout, result budget)
    resolver: Callable[[ToolCall], BoundCall | ToolOutcome] | None = None
    #: ``True``: every result of this tool is pinned when recorded (``compaction/pins.py``):
    #: no compaction tier clears, summarizes or drops it -- for results the rest of the task
    #: depends on whole (a spec read once, the plan a planner tool returned)
    pin: bool = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    @property
    def parameters(self) -> dict[str, Any]:
        """The JSON schema of the arguments (a fresh dict each time)."""
        return self.spec.parameters

    @classmethod
    def from_function(
        cls,
        func: Callable[..., Any],
        name: str | None = None,
        description: str | None = None,
        timeout_s: float | None = None,
        *,
        trust: Trust = DEFAULT_TRUST,
        effects: Effects = DEFAULT_EFFECTS,
        deferred: bool | None = None,
        source: str | None = None,
        pin: bool = False,
    ) -> Tool:
        """Build a tool from ``func``'s type hints and Google-style docstring.

        Raises ``TypeError`` for parameters without a supported hint (or ``*args``,
        ``**kwargs``, positional-only), ``ValueError`` for an invalid name or missing
        description -- mistakes worth catching at import time, not mid-conversation.
        """
        tool_name = name or str(getattr(func, "__name__", ""))
        if not _TOOL_NAME.match(tool_name):
            raise ValueError(f"invalid tool name {tool_name!r}: use 1-64 letters, digits, '_' or '-' (pass name=...)")
        summary, param_docs = _parse_docstring(inspect.getdoc(func))
        tool_description = (description if description is not None else summary).strip()
        if not tool_description:
            raise ValueError(f"tool {tool_name!r} has no description: add a docstring or pass description=")
        if timeout_s is not None and timeout_s <= 0:
            raise ValueError(f"tool {tool_name!r}: timeout_s must be positive or None, got {timeout_s!r}")
        check_declarations(tool_name, trust, effects)

        try:
            hints = typing.get_type_hints(func, include_extras=True)
        except Exception as exc:  # unresolved forward refs, non-function callables
            raise TypeError(f"tool {tool_name!r}: cannot read type hints ({exc})") from exc

        properties: dict[str, Any] = {}
        required: list[str] = []
        fields: dict[str, Any] = {}
        from pydantic import ConfigDict, Field, create_model

        for index, param in enumerate(inspect.signature(func).parameters.values()):
            if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
                raise TypeError(
                    f"tool {tool_name!r}: parameter {param.name!r} is {param.kind.description}; "
                    "tools take named parameters only"
                )
            if param.name not in hints:
                raise TypeError(f"tool {tool_name!r}: parameter {param.name!r} needs a type hint")
            hint = hints[param.name]
            has_default = param.default is not inspect.Parameter.empty
            if has_default and param.default is None and not _split_optional(hint)[1]:
                hint = typing.Optional[hint]  # noqa: UP045 -- a runtime value: `x: int = None` means "may be null"
            try:
                prop = _schema_for(hint)
            except TypeError as exc:
                raise TypeError(f"tool {tool_name!r}, parameter {param.name!r}: {exc}") from None
            if param_docs.get(param.name):
                prop["description"] = param_docs[param.name]
            if has_default:
                if _is_json_value(param.default):
                    prop["default"] = param.default
            else:
                required.append(param.name)
            properties[param.name] = prop
            # Internal field names + aliases: a parameter called "json" or "schema" must not
            # shadow pydantic's BaseModel attributes.
            default = param.default if has_default else ...
            fields[f"p{index}"] = (hint, Field(default, alias=param.name))

        schema = {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
        args_model = create_model(
            f"{tool_name}_arguments",
            __config__=ConfigDict(extra="forbid", populate_by_name=False),
            **fields,
        )
        return cls(
            name=tool_name,
            description=tool_description,
            func=func,
            spec=ToolSpec.create(tool_name, tool_description, schema),
            args_model=args_model,
            timeout_s=timeout_s,
            trust=trust,
            effects=effects,
            deferred=deferred,
            source=source or _source_of(func),
            pin=pin,
        )

    @classmethod
    def from_schema(
        cls,
        name: str,
        description: str,
        parameters: dict[str, Any],
        func: Callable[..., Any],
        *,
        timeout_s: float | None = None,
        deferred: bool | None = None,
        trust: Trust = DEFAULT_TRUST,
        effects: Effects = DEFAULT_EFFECTS,
        source: str = "",
        pin: bool = False,
    ) -> Tool:
        """A tool whose schema is given, not derived: an MCP server's tool, kept verbatim.

        Its arguments are checked with ``jsonschema`` against ``parameters`` (the dialect its
        ``$schema`` names, else JSON Schema 2020-12, MCP's default) and passed to ``func`` as
        keywords. ``ValueError`` for a name providers refuse, or (``ToolCatalogError``, also a
        ``ValueError``) a schema that is not valid JSON Schema -- found here rather than on the
        model's first call.
        """
        if not _TOOL_NAME.match(name):
            raise ValueError(f"invalid tool name {name!r}: use 1-64 letters, digits, '_' or '-'")
        check_declarations(name, trust, effects)
        check_parameters(parameters, f"tool {name!r}")  # the catalog's rule: one check of a schema
        import jsonschema

        validator_cls = jsonschema.validators.validator_for(parameters, default=jsonschema.Draft202012Validator)
        return cls(
            name=name,
            description=description,
            func=func,
            spec=ToolSpec.create(name, description, parameters),
            args_model=_any_arguments(),
            timeout_s=timeout_s,
            deferred=deferred,
            trust=trust,
            effects=effects,
            schema_validator=validator_cls(parameters),
            source=source,
            pin=pin,
        )

    def validate_arguments(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Validated keyword arguments for ``func``; raises pydantic ``ValidationError`` (or
        ``jsonschema.ValidationError`` for a tool built by :meth:`from_schema`)."""
        if self.schema_validator is not None:
            import jsonschema

            error = jsonschema.exceptions.best_match(self.schema_validator.iter_errors(arguments))
            if error is not None:
                raise error
            return dict(arguments)
        validated = self.args_model.model_validate(arguments)
        return {field.alias or key: getattr(validated, key) for key, field in type(validated).model_fields.items()}


@overload
def tool(func: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float | None = None,
    trust: Trust = DEFAULT_TRUST,
    effects: Effects = DEFAULT_EFFECTS,
    deferred: bool | None = None,
    pin: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    func: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float | None = None,
    trust: Trust = DEFAULT_TRUST,
    effects: Effects = DEFAULT_EFFECTS,
    deferred: bool | None = None,
    pin: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Decorator form of :meth:`Tool.from_function`: ``@tool``, ``@tool(timeout_s=5)``,
    ``@tool(trust="untrusted", effects="external")``, ``@tool(deferred=True)`` (kept out of the
    prefix, found with ``search_tools``), ``@tool(pin=True)`` (every result pinned: kept whole
    through every compaction). A bad declaration fails here, at import."""
    if func is None:
        check_declarations(name or "(decorated)", trust, effects)

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool.from_function(
            f,
            name=name,
            description=description,
            timeout_s=timeout_s,
            trust=trust,
            effects=effects,
            deferred=deferred,
            pin=pin,
        )

    return wrap(func) if func is not None else wrap


# --------------------------------------------------------------------------- execution


@dataclass(frozen=True)
class ToolResult:
    """What a tool may return instead of its text, to say what the text is.

    ``skill``: the text is that skill's full instructions (the ``Skill`` tool's activation,
    ``skills/tools.py``). The loop records it on the tool-result event, and compaction keeps
    such a result in the context (``compaction/skills.py``) -- decided by the tool that wrote
    it, not by reading its text back.

    ``external``: the text is (or holds) untrusted content although the tool is declared
    trusted -- ``recall`` returning passages of an untrusted tool's results
    (``compaction/recall.py``). It can only add the marking, never remove it: an untrusted
    tool's text is external whatever it returns."""

    content: str
    skill: str | None = None
    external: bool = False


@dataclass(frozen=True)
class ToolOutcome:
    """The result of one tool call: ``content`` is the text of the tool message, or -- for a
    tool that returned more than :data:`INLINE_BYTES` of bytes -- those bytes, decoded slice
    by slice where the result is recorded (``compaction/budget.py``). ``external``: the
    content is an untrusted tool's own text (its result, or the error it reported), to be
    marked as external content where it is recorded (``defence/``)."""

    ok: bool
    content: str | bytes
    error_type: str | None
    elapsed_ms: float
    external: bool = False
    #: the tool that ran and produced ``content`` -- not the called one when ``call_tool`` runs a
    #: deferred tool -- so external content names its real source, ``tool:read_webpage``
    source: str | None = field(default=None, compare=False)
    #: the skill whose full instructions ``content`` is (the tool returned a :class:`ToolResult`)
    skill: str | None = None


def error_outcome(call: ToolCall, error_type: str, message: str, hint: str, elapsed_ms: float = 0.0) -> ToolOutcome:
    """A failed outcome in the one structured error shape the model sees.

    Public so the agent loop reports timeouts (and anything else it detects) exactly the
    way the registry reports its own errors.
    """
    body = {
        "error": {"type": error_type, "message": message, "tool": call.name, "arguments": call.arguments, "hint": hint}
    }
    return ToolOutcome(ok=False, content=canonical_json(body), error_type=error_type, elapsed_ms=elapsed_ms)


def _safe_str(value: object) -> str:
    """``str(value)`` that cannot itself raise (a broken ``__str__`` must not escape)."""
    try:
        return str(value)
    except Exception:
        return f"<unprintable {type(value).__name__}>"


#: A bytes result up to this size is decoded here; a larger one stays bytes until it is
#: recorded. Why: decoded whole, 50 MB of binary output is a string of up to 100 MB next to
#: the 50 MB of bytes (each invalid byte becomes a character outside Latin-1, which makes
#: Python store every character in two bytes); the recorder decodes it a slice at a time,
#: writes it to disk or keeps only what it shows, and never holds the whole text.
INLINE_BYTES = 1 << 20


def render_result(value: Any) -> str | bytes:
    """Text for a tool's return value: str as is, bytes as UTF-8 (invalid bytes kept as
    surrogate escapes for the budget layer to report; more than :data:`INLINE_BYTES` of
    them returned as bytes, see there), else canonical JSON, else ``str()``."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = value if isinstance(value, bytes) else bytes(value)
        return data if len(data) > INLINE_BYTES else data.decode("utf-8", "surrogateescape")
    try:
        return canonical_json(value)
    except (TypeError, ValueError):
        return _safe_str(value)


def _brief_schema(schema: dict[str, Any]) -> str:
    """One line describing the expected arguments, e.g. ``city (string, required)``."""
    required = set(schema.get("required", ()))
    parts = []
    for pname, prop in schema.get("properties", {}).items():
        if "enum" in prop:
            kind = " | ".join(canonical_json(v) for v in prop["enum"])
        else:
            kind = prop.get("type", "any")
            if isinstance(kind, list):
                kind = " | ".join(kind)
            if kind == "array" and isinstance(prop.get("items"), dict):
                kind = f"array of {prop['items'].get('type', 'any')}"
        if pname in required:
            detail = "required"
        elif "default" in prop:
            detail = f"default {canonical_json(prop['default'])}"
        else:
            detail = "optional"
        parts.append(f"{pname} ({kind}, {detail})")
    if not parts:
        return "an empty JSON object {}"
    return "a JSON object with " + "; ".join(parts) + "; no other fields"


def _describe_validation_error(exc: ValidationError) -> str:
    """Which fields failed and why, in one line the model can act on."""
    problems = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err.get("loc", ())) or "(arguments)"
        if err.get("type") == "missing":
            problems.append(f"{loc}: required field is missing")
        elif err.get("type") == "extra_forbidden":
            problems.append(f"{loc}: unexpected field (not in the schema)")
        else:
            got = _safe_str(repr(err.get("input")))
            got = got if len(got) <= 80 else got[:77] + "..."
            problems.append(f"{loc}: {err.get('msg', 'invalid')} (got {got})")
    noun = "field" if len(problems) == 1 else "fields"
    return f"{len(problems)} invalid {noun}: " + "; ".join(problems)


@dataclass(frozen=True)
class BoundCall:
    """A call that passed lookup and validation: ``run()`` only executes the tool body.

    This is the unit an agent loop hands to a worker thread (with ``tool.timeout_s``).
    """

    tool: Tool
    call: ToolCall
    kwargs: dict[str, Any]

    def run(self) -> ToolOutcome:
        """Run the tool; never raises (except ``KeyboardInterrupt``, so Ctrl-C still works)."""
        start = time.perf_counter()
        try:
            value = self.tool.func(**self.kwargs)
        except ToolFailure as exc:  # the tool named its failure and the way out
            failed = error_outcome(
                self.call, exc.error_type, _safe_str(exc), exc.hint, (time.perf_counter() - start) * 1000.0
            )
            return replace(failed, external=exc.external and self.tool.trust == "untrusted", source=self._source())
        except (Exception, SystemExit) as exc:  # a tool calling sys.exit must not end the agent
            return error_outcome(
                self.call,
                type(exc).__name__,
                _safe_str(exc),
                "The tool ran and failed. Read the message, fix the arguments and retry, "
                "or continue without this tool.",
                (time.perf_counter() - start) * 1000.0,
            )
        skill = None
        external = self.tool.trust == "untrusted"
        if isinstance(value, ToolResult):
            skill = value.skill
            external = external or value.external
            value = value.content
        return ToolOutcome(
            ok=True,
            content=render_result(value),
            error_type=None,
            elapsed_ms=(time.perf_counter() - start) * 1000.0,
            external=external,
            source=self._source(),
            skill=skill,
        )

    def _source(self) -> str:
        return self.tool.name


class ToolRegistry:
    """Tools in the order the model sees them: insertion order, never re-sorted.

    Some may be deferred (:meth:`defer`): still registered and callable, but not in
    :meth:`specs`, the request's ``tools`` array."""

    def __init__(self, tools: Iterable[Tool | Callable[..., Any]] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._deferred: set[str] = set()
        for item in tools:
            self.register(item)

    def register(self, tool_or_func: Tool | Callable[..., Any]) -> Tool:
        """Add a tool (a plain function is converted with :meth:`Tool.from_function`).

        A second tool of the same name is refused, naming both sources: a model sees one
        name, and which of two tools it would run is not something to decide silently."""
        item = tool_or_func if isinstance(tool_or_func, Tool) else Tool.from_function(tool_or_func)
        old = self._tools.get(item.name)
        if old is not None:
            raise ValueError(
                f"a tool named {item.name!r} from {item.source or 'an unnamed source'} is already registered "
                f"from {old.source or 'an unnamed source'}; tool names must be unique (rename one: pass name=... "
                "to Tool.from_function / @tool, or leave one source out)"
            )
        self._tools[item.name] = item
        return item

    def unregister(self, name: str) -> Tool:
        """Remove a tool (a deferred tool whose server dropped it); ``KeyError`` if unknown.

        Never used on a tool in the prefix: the ``tools`` array is frozen for the session."""
        found = self.get(name)
        del self._tools[name]
        self._deferred.discard(name)
        return found

    def defer(self, names: Iterable[str]) -> None:
        """Keep these registered tools out of :meth:`specs` (the request's ``tools`` array)."""
        for name in names:
            self.get(name)  # KeyError naming the available tools
            self._deferred.add(name)

    def is_deferred(self, name: str) -> bool:
        """Kept out of the ``tools`` array: marked ``deferred=True``, or deferred by :meth:`defer`."""
        found = self._tools.get(name)
        return found is not None and (found.deferred is True or name in self._deferred)

    def deferred(self) -> tuple[Tool, ...]:
        """The deferred tools, in registration order."""
        return tuple(t for t in self._tools.values() if self.is_deferred(t.name))

    def get(self, name: str) -> Tool:
        """The tool called ``name``; ``KeyError`` listing the available names otherwise."""
        try:
            return self._tools[name]
        except KeyError:
            available = ", ".join(self._tools) or "(none)"
            raise KeyError(f"no tool named {name!r}; available: {available}") from None

    def specs(self) -> tuple[ToolSpec, ...]:
        """The request's ``tools`` array: every tool not deferred, in registration order."""
        return tuple(t.spec for t in self._tools.values() if not self.is_deferred(t.name))

    def all_specs(self) -> tuple[ToolSpec, ...]:
        """Every registered tool's spec, deferred ones included."""
        return tuple(t.spec for t in self._tools.values())

    def names(self) -> tuple[str, ...]:
        return tuple(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(tuple(self._tools.values()))

    def _dispatched(self, call: ToolCall) -> tuple[Tool, Tool | None] | None:
        """The tool ``call`` names and, for a dispatcher (``call_tool``), the tool it dispatches
        to (``None`` when the call does not resolve to one); ``None`` for an unknown name."""
        found = self._tools.get(call.name)
        if found is None:
            return None
        if found.resolver is not None:
            try:
                bound = found.resolver(call)
            except Exception:
                return found, None
            if isinstance(bound, BoundCall):
                return found, bound.tool
        return found, None

    def pins(self, call: ToolCall) -> bool:
        """Whether the result of ``call`` is pinned (``Tool.pin``): for a dispatcher
        (``call_tool``), the tool it dispatches to, so a deferred tool keeps its pin."""
        got = self._dispatched(call)
        if got is None:
            return False
        found, inner = got
        return (inner is not None and inner.pin) or found.pin

    def timeout_for(self, call: ToolCall) -> float | None:
        """The ``timeout_s`` of the tool ``call`` will run: for a dispatcher (``call_tool``),
        the tool it dispatches to, so a deferred tool keeps its own deadline."""
        got = self._dispatched(call)
        if got is None:
            return None
        found, inner = got
        return (inner.timeout_s if inner is not None else None) or found.timeout_s

    def resolve(self, call: ToolCall) -> BoundCall | ToolOutcome:
        """Look up and validate ``call``: a :class:`BoundCall` ready to run, or an error outcome."""
        start = time.perf_counter()

        def elapsed() -> float:
            return (time.perf_counter() - start) * 1000.0

        found = self._tools.get(call.name)
        if found is None:
            listed = [n for n in self._tools if not self.is_deferred(n)]  # not hundreds of deferred names
            available = ", ".join(listed) or "(none)"
            close = difflib.get_close_matches(call.name, list(self._tools), n=1)
            hint = f"Available tools: {available}."
            if len(listed) < len(self._tools) and "search_tools" in self._tools:
                hint += " More tools are found with search_tools and run with call_tool."
            if close:
                hint += f" Did you mean {close[0]!r}?"
            return error_outcome(call, ERROR_UNKNOWN_TOOL, f"there is no tool named {call.name!r}", hint, elapsed())
        if found.resolver is not None:
            return found.resolver(call)
        import jsonschema
        from pydantic import ValidationError

        try:
            arguments = call.parsed_arguments()
        except ValueError as exc:
            return error_outcome(
                call,
                ERROR_INVALID_JSON,
                _safe_str(exc),
                f"Send the arguments as one JSON object matching the schema: {_brief_schema(found.parameters)}.",
                elapsed(),
            )
        try:
            kwargs = found.validate_arguments(arguments)
        except ValidationError as exc:
            return error_outcome(
                call,
                ERROR_INVALID_ARGUMENTS,
                _describe_validation_error(exc),
                f"Expected {_brief_schema(found.parameters)}.",
                elapsed(),
            )
        except jsonschema.ValidationError as exc:
            where = "/".join(str(p) for p in exc.absolute_path) or "(arguments)"
            return error_outcome(
                call,
                ERROR_INVALID_ARGUMENTS,
                f"{where}: {exc.message}",
                f"Expected {_brief_schema(found.parameters)}.",
                elapsed(),
            )
        return BoundCall(tool=found, call=call, kwargs=kwargs)

    def execute(self, call: ToolCall) -> ToolOutcome:
        """Validate and run one call synchronously. Never raises; safe to run in a thread."""
        start = time.perf_counter()
        try:
            bound = self.resolve(call)
            outcome = bound if isinstance(bound, ToolOutcome) else bound.run()
        except Exception as exc:  # defensive: a bug here must still not crash the agent loop
            outcome = error_outcome(
                call, type(exc).__name__, _safe_str(exc), "Internal error while handling this tool call; try again."
            )
        return replace(outcome, elapsed_ms=(time.perf_counter() - start) * 1000.0)
