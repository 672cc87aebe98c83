"""Deferred tools for a framework agent with many tools: ``search_tools`` and ``call_tool``.

Why: a framework sends every registered tool's schema on every call, and adding a tool found
later to the list changes the prefix (``tools/deferred.py`` says why both cost). ctxwright's
answer is two fixed tools: ``search_tools(query, limit)`` returns the full schemas of the best
matches as a tool result (appended to the history, cached like any message), and
``call_tool(name, arguments)`` checks the arguments against the named tool's JSON Schema and
runs it. The tool list the framework sends is then these two, byte-identical for the session.

This module is that mechanism for a framework's tools, unchanged: the tools go into a ctxwright
``ToolRegistry`` (``Tool.from_schema``: each tool's own schema, checked by ``jsonschema``), all
deferred, and :class:`~ctxwright.tools.deferred.DeferredTools` provides the two tools -- the same
BM25 index, the same result shape, the same structured errors with the closest names, as in a
ctxwright session. Each adapter wraps :meth:`DeferredCatalog.search_tools` and
:meth:`DeferredCatalog.call_tool` as two tools of its framework, with the names, descriptions
and parameter schemas given here (:attr:`DeferredCatalog.specs`), so every framework shows the
model the same two tools.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ctxwright.core.messages import ToolCall, canonical_json
from ctxwright.core.request import ToolSpec
from ctxwright.tools.deferred import CALL_TOOL, SEARCH_TOOL, DeferredTools
from ctxwright.tools.registry import Tool, ToolRegistry


@dataclass(frozen=True)
class FrameworkTool:
    """One framework tool as ctxwright indexes and calls it: its name, description, JSON Schema
    of its parameters, and a function taking the parameters as keywords (run synchronously)."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    func: Callable[..., Any]


class DeferredCatalog:
    """A framework agent's tools behind ``search_tools`` and ``call_tool`` (see the module
    docstring). ``tools``: every tool of the agent; ``timeout_s``: each call's limit."""

    def __init__(self, tools: Iterable[FrameworkTool], *, timeout_s: float | None = None) -> None:
        self.registry = ToolRegistry()
        names = []
        for t in tools:
            self.registry.register(
                Tool.from_schema(t.name, t.description, dict(t.parameters), t.func, timeout_s=timeout_s)
            )
            names.append(t.name)
        self.registry.defer(names)
        self.deferred = DeferredTools(self.registry)
        for tool in self.deferred.tools():
            self.registry.register(tool)
        self._ids = itertools.count()

    @property
    def specs(self) -> dict[str, ToolSpec]:
        """The two tools' names, descriptions and parameter schemas, as ctxwright sends them."""
        search, call = self.deferred.tools()
        return {SEARCH_TOOL: search.spec, CALL_TOOL: call.spec}

    def search_tools(self, query: str, limit: int = 5) -> str:
        """``search_tools``' result text: the best matches' full definitions, or the error."""
        return self.run(SEARCH_TOOL, {"query": query, "limit": limit})

    def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None) -> str:
        """``call_tool``'s result text: the named tool's result, or the structured error (an
        unknown name with the closest ones, arguments that do not match its schema)."""
        return self.run(CALL_TOOL, {"name": name, "arguments": dict(arguments or {})})

    def run(self, tool: str, arguments: str | Mapping[str, Any], *, call_id: str | None = None) -> str:
        """One call of ``search_tools`` or ``call_tool`` as the model made it: ``arguments`` as
        the JSON text it sent (or a mapping). Whatever they are -- not JSON, not an object, a
        missing field -- the answer is the tool's result or the structured error, never an
        exception: the registry checks them as in a ctxwright session."""
        text = arguments if isinstance(arguments, str) else canonical_json(dict(arguments))
        call = ToolCall(id=call_id or f"deferred_{next(self._ids)}", name=tool, arguments=text)
        outcome = self.registry.execute(call)
        content = outcome.content
        return content if isinstance(content, str) else content.decode("utf-8", "replace")


__all__ = ["CALL_TOOL", "SEARCH_TOOL", "DeferredCatalog", "FrameworkTool"]
