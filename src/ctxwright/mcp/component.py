"""MCP servers as a component: their tools after all the others, list changes announced at
the end of the trajectory, never in the prefix.

Cache rule protected: a server that sends ``tools/list_changed`` mid-session must not change
the request's ``tools`` array (a provider's cached prefix would be lost on every change).
So a resumed session keeps its prefix's MCP tools in its prefix's order (a tool the server
no longer lists becomes a stand-in that answers "removed"), new tools are deferred (found
with ``search_tools`` when deferral is on), and each change is told to the model in one
appended ``<system-reminder>`` user message, recorded as a ``UserEvent`` naming the tools so
that a resumed session is not told twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ctxwright.core.events import MCP_TOOLS_KEY, UserEvent
from ctxwright.core.progress import EventSink, McpToolsChanged
from ctxwright.core.session import Session
from ctxwright.mcp.connection import DEFAULT_RESULT_CAP_MB, DEFAULT_TIMEOUT_S
from ctxwright.mcp.tools import McpTools, reminder
from ctxwright.tools.component import Build, Component
from ctxwright.tools.deferred import CALL_TOOL, SEARCH_TOOL, DeferredTools
from ctxwright.tools.registry import ToolRegistry

__all__ = ["McpComponent"]


class McpComponent(Component):
    """Starts the servers when the prefix is built; takes in their list changes before each call."""

    name = "mcp"

    def __init__(
        self,
        commands: Sequence[Sequence[str]],
        *,
        timeout: float | None,
        on_event: EventSink,
        trust: Sequence[str] | None = None,
        result_cap: float | None = None,
    ) -> None:
        #: argv lists, parsed and the timeout checked by the recipe (recipe/resolve.py)
        self.commands = [list(c) for c in commands]
        self.timeout = DEFAULT_TIMEOUT_S if timeout is None else timeout
        #: the servers whose tool annotations count (``mcp_trust``)
        self.trust = list(trust or ())
        self.result_cap = DEFAULT_RESULT_CAP_MB if result_cap is None else result_cap
        self.on_event = on_event
        self.mcp: McpTools | None = None
        self.registry: ToolRegistry | None = None
        #: the deferral component's index, when tools are deferred (set by the assembler)
        self.deferred: DeferredTools | None = None
        self._in_prefix: set[str] = set()
        self._told: set[str] = set()

    def add_tools(self, build: Build) -> None:
        """Start the servers and register their tools after all the others.

        A new session offers every listed tool (in the prefix, or deferred by the deferral
        component, which comes next). A resumed one keeps its prefix: a tool it lists is
        registered as it was (or, if its server no longer lists it, as a stand-in with the
        stored schema that answers "removed"); a tool the server lists now but the prefix
        does not is deferred, and announced before the next call."""
        tools = build.tools
        self.registry = tools
        self.mcp = mcp = McpTools.start(
            self.commands,
            timeout=self.timeout,
            reserved=tools.names(),
            on_event=self.on_event,
            trusted=self.trust,
            result_cap_mb=self.result_cap,
        )
        in_prefix = {t.name: t for t in build.stored.prefix.tools} if build.stored is not None else None
        if in_prefix is None:
            for t in list(mcp.tools.values()):
                tools.register(t)
        else:  # the prefix's MCP tools in the prefix's order, then the servers' new ones deferred
            for spec in in_prefix.values():
                if spec.name not in tools and mcp.owns(spec.name):
                    tools.register(mcp.tools.get(spec.name) or mcp.stub(spec))
            for t in list(mcp.tools.values()):
                if t.name not in in_prefix:
                    t = mcp.tools[t.name] = replace(t, deferred=True)
                    tools.register(t)
        self._in_prefix = {n for n in (in_prefix or mcp.tools) if mcp.owns(n)}

    def bind(self, session: Session) -> None:
        """What the model has been told of the MCP tools: the prefix's, then every reminder."""
        self._told = told_in(session, self._in_prefix)

    def before_run(self, session: Session) -> None:
        self._announce(session, self._told)  # a resumed session may find its servers' tools changed

    def before_call(self, session: Session) -> None:
        self.refresh()
        self._announce(session, self._told)

    def refresh(self) -> None:
        """Take in the servers' list changes: new tools deferred (and searchable) or registered."""
        assert self.mcp is not None and self.registry is not None
        before = set(self.mcp.live())
        for t in self.mcp.refresh(reserved=self.registry.names()):
            if self.deferred is not None:  # searchable with search_tools as well as announced
                self.deferred.add([t])
            else:
                self.registry.register(t)
        if self.deferred is not None:  # a removed tool is not found (a call to it says removed)
            after = set(self.mcp.live())
            self.deferred.searchable([self.mcp.tools[n] for n in sorted(after - before)], hidden=sorted(before - after))

    def _announce(self, session: Session, told: set[str], child: str | None = None) -> None:
        """Append a ``<system-reminder>`` user message for MCP tools added or removed since
        the model was last told (recorded as a ``UserEvent`` naming them, like the skills
        catalog, so a resumed session renders it again and is not told twice)."""
        assert self.mcp is not None
        live = self.mcp.live()
        added = [self.mcp.tools[n] for n in live if n not in told]
        removed = sorted(told - set(live))
        if not added and not removed:
            return
        if self.deferred is not None:  # their schemas come from search_tools, not the reminder
            how = f"find one's parameters with {SEARCH_TOOL}(query) and run it with {CALL_TOOL}(name, arguments)."
            text = reminder(added, removed, how=how)
        else:
            how = "call one by its name with arguments matching its parameters."
            text = reminder(added, removed, how=how, schemas=True)
        names = {"added": [t.name for t in added], "removed": removed}
        session.add_user(text, **{MCP_TOOLS_KEY: names})
        told |= set(names["added"])
        told -= set(removed)
        self.on_event(McpToolsChanged(added=tuple(names["added"]), removed=tuple(removed), content=text, child=child))

    def fork(self) -> Component | None:
        return _ChildMcp(self)

    def close(self) -> None:
        if self.mcp is not None:  # the servers' processes end here, not when the interpreter exits
            self.mcp.close()


class _ChildMcp(Component):
    """A sub-agent's view of the parent's servers: the same tools (the prefix is shared), its
    own record of what its model has been told, list changes announced in its own trajectory."""

    name = "mcp"

    def __init__(self, parent: McpComponent) -> None:
        self.parent = parent
        self._told: set[str] = set()

    def bind(self, session: Session) -> None:
        self._told = told_in(session, self.parent._in_prefix)

    def before_call(self, session: Session) -> None:
        self.parent.refresh()
        self.parent._announce(session, self._told, child=session.id)


def told_in(session: Session, in_prefix: set[str]) -> set[str]:
    """The MCP tools a session's model knows of: those in its prefix, then every reminder's changes."""
    told = set(in_prefix)
    for ev in session.events:
        if isinstance(ev, UserEvent) and (said := ev.mcp_tools_announced) is not None:
            told = (told | set(said[0])) - set(said[1])
    return told
