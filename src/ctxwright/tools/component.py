"""A mechanism as a component: what it adds to the frozen prefix, what it appends before a
call, what it checks in a stored prefix, and how it goes on in a sub-agent.

Why components: the prefix (system prompt + tools) is byte-identical for a session only if
every mechanism adds its part in the same order every time -- a new session, a resumed one,
a sub-agent and ``ctxwright tools list`` alike. So each mechanism (TODO tools, skills, MCP,
deferral, the defence level, the status bar...) is one :class:`Component` that says what it
contributes, and one assembler (``agent/assemble.py``) walks them in prefix order. A
component overrides only the hooks it needs; every default contributes nothing.

The hooks, in the order the assembler and the context call them:

1. :meth:`Component.add_tools` -- register this component's tools into the registry built so
   far (the registry's order is the prefix's ``tools`` order);
2. :meth:`Component.sections` -- system-prompt sections after the caller's prompt (global
   sections: the same choices give the same bytes in every session, ``core/sections.py``);
3. :meth:`Component.check_prefix` -- on resume, refuse a stored prefix this component would
   now build differently (a :class:`~ctxwright.errors.PrefixMismatch` naming the option);
4. :meth:`Component.bind` -- the session exists (new or resumed): restore state from its events;
5. :meth:`Component.before_run` / :meth:`Component.before_call` -- append what changed (a
   catalog, a list-changed reminder) as events at the end of the trajectory, never in the
   prefix;
6. :meth:`Component.fork` -- the component of a child agent (``delegate``), or ``None`` when the
   child goes without it; the child's prefix bytes are the parent's, so its tools are too;
7. :meth:`Component.close` -- release processes and files.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxwright.backends.base import Backend
from ctxwright.core.progress import EventSink
from ctxwright.core.tokens import TokenCounter
from ctxwright.errors import ConfigError
from ctxwright.tools.registry import Tool, ToolRegistry

if TYPE_CHECKING:
    from ctxwright.core.prefix import Prefix
    from ctxwright.core.session import Session

__all__ = ["Build", "Component", "UserTools", "WorkspaceTools", "register_core"]


@dataclass
class Build:
    """What the assembler hands each component while it builds the prefix.

    ``stored`` is the resumed session (its prefix decides what a resumed component
    registers), ``None`` for a new one; ``window`` the model's context window in tokens."""

    tools: ToolRegistry
    backend: Backend
    stored: Session | None
    window: int
    counter: TokenCounter
    on_event: EventSink

    @property
    def stored_names(self) -> tuple[str, ...]:
        """The tool names of the stored prefix (empty for a new session)."""
        return self.stored.prefix.tool_names() if self.stored is not None else ()


class Component:
    """One mechanism's contribution to an agent. Every hook's default contributes nothing."""

    #: a short name for messages and ``ctxwright tools list``
    name = "component"

    def add_tools(self, build: Build) -> None:
        """Register this component's tools in ``build.tools``, in prefix order."""

    def sections(self, tools: ToolRegistry) -> list[tuple[str, str]]:
        """``(section name, text)`` pairs appended to the system prompt, in order."""
        return []

    def check_prefix(self, prefix: Prefix, session_id: str) -> None:
        """Raise :class:`~ctxwright.errors.PrefixMismatch` if this component's part of a
        stored prefix differs from what it would build now."""

    def bind(self, session: Session) -> None:
        """The session exists (new or resumed): take up its state."""

    def before_run(self, session: Session) -> None:
        """Before a run's first call (before the user message is added)."""

    def before_call(self, session: Session) -> None:
        """Before each model call: append what changed since the last one."""

    def own_tools(self) -> list[Tool]:
        """In a child agent: tools that take the place of the parent's of the same name (the
        same bytes, this instance's state: its own TODO list, its own results)."""
        return []

    def fork(self) -> Component | None:
        """This component in a child agent (``self`` when it can be shared), or ``None``."""
        return self

    def close(self) -> None:
        """Release what the component started (processes, files)."""


def register_core(tools: ToolRegistry, items: Iterable[Tool | Callable[..., Any]], source: str | None = None) -> None:
    """Register tools in order; the harness's own tools (``source`` given) are core tools,
    never deferred (a small model must always see them)."""
    try:
        for item in items:
            t = item if isinstance(item, Tool) else Tool.from_function(item)
            if source is not None:
                t = replace(t, source=source, deferred=False if t.deferred is None else t.deferred)
            tools.register(t)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"the tool list cannot be used: {exc}") from None


class UserTools(Component):
    """The caller's tools, first in the prefix; the demo tools when none are given and
    ``demo`` says so (the wiring decides: only when no other source of tools is given)."""

    name = "tools"

    def __init__(self, tools: Iterable[Tool | Callable[..., Any]] | None, *, demo: bool = True) -> None:
        self.given = list(tools) if tools is not None else None
        self.demo = demo

    def add_tools(self, build: Build) -> None:
        if self.given is not None:
            register_core(build.tools, self.given)
        elif self.demo:
            from ctxwright.tools.builtin import default_tools

            register_core(build.tools, default_tools(), "the built-in demo tools")


class WorkspaceTools(Component):
    """``read_file`` and ``list_dir`` confined to the workspace (off unless a workspace is given:
    fewer tools, less for a small model to confuse)."""

    name = "workspace"

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace

    def add_tools(self, build: Build) -> None:
        from ctxwright.tools.builtin import make_file_tools

        try:
            tools = make_file_tools(self.workspace)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"the tool list cannot be used: {exc}") from None
        except NotADirectoryError as exc:  # a session's workspace moved or removed since
            raise ConfigError(
                f"{exc}: give --workspace DIR (workspace=) where it is now, or start a new session"
            ) from None
        register_core(build.tools, tools, "the file tools (workspace=)")
