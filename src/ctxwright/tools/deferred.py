"""Deferred tools: schemas found by search and appended to the trajectory, never to the prefix.

Why: an agent with hundreds of tools (a few MCP servers are enough) pays for every schema
on every request, and a model picks worse from a long list. The book's rule for what goes
in the prefix is "only what is fixed": a tool the model may need later is not fixed
knowledge of every call. The naive fix, adding a tool to the request's ``tools`` array
when it is found, rewrites the prefix on every discovery: a provider's prompt cache reuses
only the longest byte-identical prefix (OpenAI, Anthropic, DeepSeek, vLLM, llama.cpp
alike), so every later call would prefill the whole conversation again.

So deferral keeps the ``tools`` array fixed for the session and adds two fixed tools to it
whenever any tool is deferred:

* ``search_tools(query, limit)`` answers with the *full* JSON schemas of the best matches
  (the BM25 index of ``tools/search.py``), as a tool result: appended to the trajectory,
  where it stays and is cached like any other message;
* ``call_tool(name, arguments)`` checks ``arguments`` against the named tool's JSON Schema
  (``jsonschema``, so a schema from an MCP server is checked by the standard, not by our
  reading of it) and hands the call to the registry, which runs it exactly as if the model
  had called the tool directly: its validation, its timeout, the result budget, the events.

Which tools are deferred is decided once, when the session starts (:func:`choose_deferred`),
and recorded; ``tool_index="prefix"`` also lists the deferred tools, one line each, in
``search_tools``' description, frozen with the prefix -- for catalogs small enough to list.
"""

from __future__ import annotations

import difflib
import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

from ctxwright.core.messages import ToolCall, canonical_json
from ctxwright.core.progress import ToolsDeferred
from ctxwright.core.request import ToolSpec
from ctxwright.core.tokens import TokenCounter
from ctxwright.errors import ConfigError
from ctxwright.tools.component import Build, Component
from ctxwright.tools.fusion import RANKERS, Ranker
from ctxwright.tools.registry import (
    ERROR_INVALID_ARGUMENTS,
    ERROR_INVALID_JSON,
    ERROR_UNKNOWN_TOOL,
    BoundCall,
    Tool,
    ToolOutcome,
    ToolRegistry,
    ToolResult,
    _brief_schema,
    error_outcome,
    valid_function_name,
)

if TYPE_CHECKING:
    from ctxwright.tools.search import ToolIndex

__all__ = [
    "CALL_TOOL",
    "DISPATCH_TOOLS",
    "MAX_LIMIT",
    "SEARCH_TOOL",
    "DeferConfig",
    "DeferredTools",
    "choose_deferred",
    "schema_tokens",
]

SEARCH_TOOL = "search_tools"
CALL_TOOL = "call_tool"
#: The two tools deferral adds to the prefix; never deferred, never reached through call_tool.
DISPATCH_TOOLS = (SEARCH_TOOL, CALL_TOOL)
#: At most this many schemas per search: each one is appended to the trajectory for good.
MAX_LIMIT = 20
#: Characters of a description kept in the ``tool_index="prefix"`` list.
SUMMARY_CHARS = 100

DeferMode = Literal["auto", "all", "none"]
IndexMode = Literal["none", "prefix"]
_MODES: dict[object, DeferMode] = {"auto": "auto", "all": "all", "none": "none", True: "all", False: "none"}


@dataclass(frozen=True)
class DeferConfig:
    """Which tools leave the ``tools`` array.

    ``mode``: ``"auto"`` defers every deferrable tool when the tool schemas would take more
    than ``max_share`` of the context window or there are more than ``max_tools`` tools;
    ``"all"`` defers every deferrable tool; ``"none"`` defers none. Tools marked
    ``deferred=True`` are deferred in every mode (their author, or an MCP server's
    ``list_changed`` after the prefix was frozen, says they cannot be in the array). Core tools (``Tool.deferred=False``: the
    harness's own tools -- builtins, file tools, TODO, ``read_result``, ``delegate``,
    ``Skill``, ``read_skill_file``) are never deferred: the agent's way of working must not
    depend on a search. ``index``: ``"prefix"`` lists the deferred tools as ``[name:
    summary]`` lines in ``search_tools``' description. ``ranker``: how ``search_tools``
    ranks (``tools/search.py``: ``bm25``, ``embed``, ``hybrid``).
    """

    mode: DeferMode = "auto"
    max_share: float = 0.10
    max_tools: int = 30
    index: IndexMode = "none"
    ranker: Ranker = "bm25"

    def __post_init__(self) -> None:
        if self.mode not in ("auto", "all", "none"):
            raise ValueError(f"defer_tools={self.mode!r}: use 'auto', 'all' (True) or 'none' (False)")
        if not 0.0 < self.max_share <= 1.0:
            raise ValueError(f"defer max_share={self.max_share!r}: give a share of the window in (0, 1], e.g. 0.1")
        if self.max_tools < 0:
            raise ValueError(f"defer max_tools={self.max_tools!r}: give 0 or more tools")
        if self.index not in ("none", "prefix"):
            raise ValueError(f"tool_index={self.index!r}: use 'none' (search only) or 'prefix' (list them too)")
        if self.ranker not in RANKERS:
            raise ValueError(f"tool_search_ranker={self.ranker!r}: use one of {', '.join(RANKERS)}")

    @classmethod
    def of(
        cls,
        value: object,
        index: str | None = None,
        recorded: Mapping[str, Any] | None = None,
        *,
        ranker: str | None = None,
    ) -> DeferConfig:
        """A config from ``defer_tools=`` (``"auto"``, ``"all"``, ``"none"``, ``True``,
        ``False``, a :class:`DeferConfig` or a mapping of its fields), over ``recorded``."""
        known = {"mode", "max_share", "max_tools", "index", "ranker"}
        fields = {k: v for k, v in (recorded or {}).items() if k in known}  # a newer release's: ignored
        if isinstance(value, DeferConfig):
            fields = asdict(value)
        elif isinstance(value, Mapping):
            unknown = sorted(set(value) - known)
            if unknown:
                raise ValueError(f"defer_tools: unknown field(s) {', '.join(unknown)}; the fields are {sorted(known)}")
            fields.update(value)
        elif value is not None:
            try:
                fields["mode"] = _MODES[cast(Any, value)]
            except (KeyError, TypeError):
                raise ValueError(f"defer_tools={value!r}: use 'auto', 'all' (True) or 'none' (False)") from None
        if index is not None:
            fields["index"] = index
        if ranker is not None:
            fields["ranker"] = ranker
        return cls(**fields)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def schema_tokens(specs: Iterable[ToolSpec], counter: TokenCounter) -> int:
    """Tokens of these tools as the request's ``tools`` array carries them (canonical JSON)."""
    wire = [s.to_wire() for s in specs]
    return counter.count(canonical_json(wire)) if wire else 0


def choose_deferred(tools: Sequence[Tool], config: DeferConfig, counter: TokenCounter, window: int) -> tuple[str, ...]:
    """The names of the tools to defer, in registration order (see :class:`DeferConfig`)."""
    marked = {t.name for t in tools if t.deferred is True}  # deferred in every mode
    if config.mode == "none":
        return tuple(t.name for t in tools if t.name in marked)
    deferrable = {t.name for t in tools if t.deferred is None}
    if config.mode == "all":
        chosen = marked | deferrable
    else:
        too_many = len(tools) > config.max_tools
        too_big = too_many or schema_tokens((t.spec for t in tools), counter) > config.max_share * window
        chosen = marked | (deferrable if too_big else set())
    return tuple(t.name for t in tools if t.name in chosen and t.name not in DISPATCH_TOOLS)


def _summary(description: str) -> str:
    """The first sentence of a description, on one line, at most :data:`SUMMARY_CHARS`."""
    text = " ".join(description.split())
    for end in (". ", "; "):
        if end in text:
            text = text[: text.index(end) + 1]
            break
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


class DeferredTools:
    """The deferred tools of one registry, their search index, and ``search_tools`` and
    ``call_tool``.

    Build it after the registry holds every tool and :meth:`ToolRegistry.defer` has marked
    the deferred ones; register :meth:`tools` last, then build the prefix. :meth:`add` and
    :meth:`remove` change what is searchable later (an MCP server's ``list_changed``)
    without touching the ``tools`` array.
    """

    def __init__(self, registry: ToolRegistry, config: DeferConfig | None = None) -> None:
        self.registry = registry
        self.config = config or DeferConfig()
        self._lock = threading.Lock()
        self._index = self._new_index([t.spec for t in registry.deferred()])
        self._validators: dict[str, Any] = {}
        self._tools = (self._search_tool(), self._call_tool())

    def _new_index(self, specs: list[ToolSpec]) -> ToolIndex:
        """The search index with the configured ranker; an embedding ranker's tool vectors
        are cached on disk (``tools/embeddings.py``), so a restart does not embed them again.
        The index (numpy, bm25s) is imported here, where a session defers tools, not by the
        options that only declare the mode."""
        from ctxwright.tools.search import ToolIndex

        if self.config.ranker == "bm25":
            return ToolIndex(specs)
        from ctxwright.tools.embeddings import VectorCache

        cache = VectorCache.at_default_path(warn=logging.getLogger("ctxwright").warning)
        return ToolIndex(specs, ranker=self.config.ranker, cache=cache)

    # -- the two tools ---------------------------------------------------------------------
    def tools(self) -> tuple[Tool, Tool]:
        """``search_tools`` and ``call_tool``, to register after every other tool."""
        return self._tools

    def _search_tool(self) -> Tool:
        description = (
            "Find tools that are not in your tool list: describe what you need in a few words. "
            "Returns the full definitions (name, description, JSON Schema of the parameters) of the best "
            f"matches; run one with {CALL_TOOL}(name, arguments)."
        )
        if self.config.index == "prefix":
            lines = [f"[{t.name}: {_summary(t.description)}]" for t in self.registry.deferred()]
            description += " Tools you can find:\n" + "\n".join(lines)

        def search_tools(query: str, limit: int = 5) -> dict[str, Any] | ToolResult:
            """Search the deferred tools.

            Args:
                query: what the tool should do, in a few words (e.g. "convert currency").
                limit: how many tool definitions to return (1-20).
            """
            found = self.search(query, limit)
            # an MCP server's (or any untrusted source's) descriptions are its text, not ours:
            # marked as external content like its results, so an injected "ignore your
            # instructions" in a description reaches the model inside <external_content>
            if any(self._untrusted(t["function"]["name"]) for t in found["tools"]):
                return ToolResult(canonical_json(found), external=True)
            return found

        return Tool.from_function(
            search_tools, name=SEARCH_TOOL, description=description, deferred=False, source="ctxwright tool search"
        )

    def _call_tool(self) -> Tool:
        schema = {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": f"the tool's name, from {SEARCH_TOOL}' results"},
                "arguments": {"type": "object", "description": "the tool's arguments, matching its parameters schema"},
            },
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        description = (
            f"Run a tool found with {SEARCH_TOOL}: give its name and its arguments as a JSON object matching "
            "its parameters schema."
        )

        def unreachable(**_: Any) -> None:  # the registry runs the resolver's call instead
            raise RuntimeError("call_tool runs through its resolver")

        from pydantic import create_model

        return Tool(
            name=CALL_TOOL,
            description=description,
            func=unreachable,
            spec=ToolSpec.create(CALL_TOOL, description, schema),
            args_model=create_model("call_tool_arguments", name=(str, ...), arguments=(dict[str, Any], ...)),
            deferred=False,
            source="ctxwright tool search",
            resolver=self.resolve,
        )

    def _untrusted(self, name: str) -> bool:
        return name in self.registry and self.registry.get(name).trust == "untrusted"

    # -- search ------------------------------------------------------------------------------
    def search(self, query: str, limit: int = 5) -> dict[str, Any]:
        """What ``search_tools`` returns: the best matches' full definitions. An empty or
        overlong query or a bad limit raises :class:`~ctxwright.errors.ToolSearchError`
        (``tools/search.py`` decides), which the registry turns into a tool error the model
        reads; more than :data:`MAX_LIMIT` results are never returned."""
        with self._lock:
            hits = self._index.search(query, min(limit, MAX_LIMIT) if isinstance(limit, int) else limit)
        found = [h.spec.to_wire() for h in hits if h.name in self.registry]
        out: dict[str, Any] = {"query": query.strip(), "tools": found}
        if found:
            out["next"] = f"Run one with {CALL_TOOL}(name, arguments); the arguments must match its parameters."
        else:
            out["next"] = "No tool matched: try other words for what the tool does."
        return out

    def add(self, tools: Iterable[Tool]) -> list[str]:
        """Register new tools as deferred and searchable; the ``tools`` array is untouched.
        Raises ``ValueError`` for a name already registered (both sources named)."""
        added = []
        with self._lock:
            for t in tools:
                self.registry.register(t)
                self.registry.defer([t.name])
                self._index.add([t.spec])
                added.append(t.name)
        return added

    def searchable(self, tools: Iterable[Tool], *, hidden: Iterable[str] = ()) -> None:
        """Make registered deferred ``tools`` searchable (again) and the ``hidden`` names not,
        keeping them registered: an MCP tool its server removed stays callable so that a call
        to it gets the server's "removed" error, not an unknown-tool one, but no search finds it."""
        with self._lock:
            self._index.remove(list(hidden))
            self._index.add([t.spec for t in tools if t.name not in self._index and self.registry.is_deferred(t.name)])

    def remove(self, names: Iterable[str]) -> list[str]:
        """Unregister deferred tools (a call to one becomes an unknown-tool error)."""
        removed = []
        with self._lock:
            for name in names:
                if name in self.registry and self.registry.is_deferred(name):
                    self.registry.unregister(name)
                    self._validators.pop(name, None)
                    removed.append(name)
            self._index.remove(removed)
        return removed

    # -- call_tool ---------------------------------------------------------------------------
    def resolve(self, call: ToolCall) -> BoundCall | ToolOutcome:
        """``call_tool``'s call as the call of the tool it names, checked against that tool's
        JSON Schema, then resolved by the registry like a direct call; an error outcome else."""
        expected = f"Expected {_brief_schema(self._tools[1].parameters)}."
        try:
            outer = call.parsed_arguments()
        except ValueError as exc:
            return error_outcome(call, ERROR_INVALID_JSON, str(exc), expected)
        if not isinstance(outer, dict):
            return error_outcome(
                call, ERROR_INVALID_ARGUMENTS, "the arguments of call_tool are not an object", expected
            )
        extra = sorted(set(outer) - {"name", "arguments"})
        name = outer.get("name")
        if extra or not isinstance(name, str) or not name:
            problem = f"unexpected field(s) {', '.join(extra)}" if extra else "name must be the tool's name (a string)"
            return error_outcome(call, ERROR_INVALID_ARGUMENTS, problem, expected)
        if name in DISPATCH_TOOLS:
            return error_outcome(
                call, ERROR_INVALID_ARGUMENTS, f"{name} is called directly, not through {CALL_TOOL}", expected
            )
        if name not in self.registry:
            return error_outcome(
                call,
                ERROR_UNKNOWN_TOOL,
                f"there is no tool named {name!r}",
                f"Search first: {SEARCH_TOOL}(query) returns the tools that exist with their schemas; then call one "
                f"by a name from its results.{self._closest(name)}",
            )
        target = self.registry.get(name)
        arguments = outer.get("arguments", {})
        if not isinstance(arguments, dict):
            return error_outcome(
                call,
                ERROR_INVALID_ARGUMENTS,
                f"arguments must be a JSON object of {name}'s parameters, not {_json_kind(arguments)}",
                f"Expected for {name}: {_brief_schema(target.parameters)}.",
            )
        complaint = self._check(target, arguments)
        if complaint is not None:
            return error_outcome(
                call,
                ERROR_INVALID_ARGUMENTS,
                f"the arguments do not match {name}'s schema: {complaint}",
                f"Expected for {name}: {_brief_schema(target.parameters)}. Its full schema is in {SEARCH_TOOL}' result.",
            )
        return self.registry.resolve(ToolCall(id=call.id, name=name, arguments=canonical_json(arguments)))

    def _check(self, target: Tool, arguments: dict[str, Any]) -> str | None:
        """The JSON Schema validator's complaint about ``arguments``, or ``None``.

        A tool built from a given schema (``Tool.from_schema``: an MCP tool) already holds its
        checked validator; only a tool whose schema was derived from a function needs one here."""
        from jsonschema import SchemaError, validators
        from jsonschema.exceptions import best_match

        validator = target.schema_validator or self._validators.get(target.name)
        if validator is None:
            schema = target.parameters
            cls = validators.validator_for(schema)
            try:
                cls.check_schema(schema)
            except SchemaError as exc:
                return f"the tool's own schema is not valid JSON Schema ({exc.message}); it cannot be called"
            validator = self._validators[target.name] = cls(schema)
        errors = list(validator.iter_errors(arguments))
        if not errors:
            return None
        best = best_match(errors)
        where = "/".join(str(p) for p in best.absolute_path)
        more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
        return f"{best.message}" + (f" at {where}" if where else "") + more

    def _closest(self, name: str) -> str:
        """`` Closest names: a, b, c.`` -- by spelling, then by the index."""
        names = [t.name for t in self.registry if t.name not in DISPATCH_TOOLS]
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
        if len(close) < 3:
            try:
                with self._lock:
                    hits = self._index.search(name.replace(".", " ").replace("_", " ")[:200], 3)
            except ValueError:  # a name of only punctuation is no query
                hits = []
            close += [h.name for h in hits if h.name not in close][: 3 - len(close)]
        return f" Closest names: {', '.join(close)}." if close else ""


def _json_kind(value: object) -> str:
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a number" if isinstance(value, (int, float)) else type(value).__name__


class DeferralComponent(Component):
    """Decides which tools leave the request's ``tools`` array and registers ``search_tools``
    and ``call_tool`` when any does (last of all tools, so every other one can be deferred).

    A new session decides by its :class:`DeferConfig`; a resumed one by its stored prefix --
    every deferrable tool not in it is deferred, when the prefix has the search tools -- so it
    rebuilds the same ``tools`` array whatever the window or tokenizer now."""

    name = "deferral"

    def __init__(self, config: DeferConfig) -> None:
        self.config = config
        self.deferred: DeferredTools | None = None
        self.names: tuple[str, ...] = ()

    def add_tools(self, build: Build) -> None:
        registry = build.tools
        tools = [t for t in registry if t.name not in DISPATCH_TOOLS]
        names = build.stored_names
        if build.stored is not None:
            deferred: tuple[str, ...] = ()
            with_search = SEARCH_TOOL in names and self.config.mode != "none"
            if with_search:
                deferred = tuple(t.name for t in tools if t.deferred is not False and t.name not in names)
        else:
            deferred = choose_deferred(tools, self.config, build.counter, build.window)
            with_search = bool(deferred)
        named = [t.name for t in tools if t.name not in deferred and not valid_function_name(t.name)]
        if named:
            raise ConfigError(
                f"tool name(s) {', '.join(map(repr, named))} cannot be in the request's tools array (servers accept "
                "1-64 letters, digits, '_' or '-'); defer them (Tool.deferred=True, or defer_tools='all' / "
                "--defer-tools all): a deferred tool is called through call_tool, where its name is an argument"
            )
        registry.defer(deferred)
        self.names = deferred
        if with_search:
            self.deferred = DeferredTools(registry, self.config)
            try:
                for t in self.deferred.tools():
                    registry.register(t)
            except ValueError as exc:
                raise ConfigError(f"the tool list cannot be used: {exc}") from None
            build.on_event(ToolsDeferred(names=deferred, index=self.config.index))
