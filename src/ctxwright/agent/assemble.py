"""The one assembler: walks the components in prefix order and returns the system prompt,
the tool registry and the components that act during the session.

Why one: the static prefix (system prompt + tools, in order) must come out byte-identical
for a new session, a resumed one, a sub-agent and ``ctxwright tools list``. When each of
those wired the mechanisms by hand they drifted (``tools list`` listed tools ``run`` did not
send; the sub-agent lost its status bar and its MCP hook). Here the order is the list's
order, each component adds its own part (``tools/component.py``), and a child agent is the
same list forked (:func:`fork`), checked to give the same bytes.

The order, which is the prefix's order: the caller's tools (or the demo tools), the file
tools (workspace), the TODO tools, ``read_result``, ``delegate``, the skill tools, the MCP
servers' tools, then ``search_tools``/``call_tool`` when any tool is deferred; the system
prompt is the caller's prompt, then the defence level's section, then the status manual.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from ctxwright.backends.base import Backend
from ctxwright.core.prefix import Prefix
from ctxwright.core.progress import EventSink
from ctxwright.core.request import ToolSpec
from ctxwright.core.sections import SystemPromptBuilder
from ctxwright.core.session import Session
from ctxwright.core.tokens import TokenCounter
from ctxwright.errors import ConfigError, PrefixMismatch
from ctxwright.status.bar import OPERATING_MANUAL
from ctxwright.status.component import StatusComponent
from ctxwright.status.todo import TodoComponent
from ctxwright.tools.component import Build, Component
from ctxwright.tools.registry import ToolRegistry

__all__ = ["Assembly", "assemble", "fork", "system_prompt", "tools_difference"]

C = TypeVar("C", bound=Component)


@dataclass
class Assembly:
    """What the components built: the full system prompt, the registry (its order is the
    prefix's ``tools`` order; deferred tools are registered but not sent), the components."""

    system: str
    tools: ToolRegistry
    components: list[Component] = field(default_factory=list)

    def find(self, kind: type[C]) -> C | None:
        """The component of type ``kind``, if the agent has one."""
        return next((c for c in self.components if isinstance(c, kind)), None)

    def prefix(self) -> Prefix:
        """The frozen prefix these parts make; a dynamic value in it is refused here."""
        try:
            return Prefix.build(self.system, self.tools.specs())
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    def bind(self, session: Session) -> None:
        for c in self.components:
            c.bind(session)

    def before_run(self, session: Session) -> None:
        for c in self.components:
            c.before_run(session)

    def before_call(self, session: Session) -> None:
        for c in self.components:
            c.before_call(session)

    def close(self) -> None:
        for c in reversed(self.components):
            c.close()


def assemble(
    components: Sequence[Component],
    *,
    system: str,
    backend: Backend,
    stored: Session | None,
    window: int,
    counter: TokenCounter,
    on_event: EventSink,
) -> Assembly:
    """Build the tools and the system prompt from ``components``, in their order. On resume
    (``stored``), each component checks its part of the stored prefix first."""
    build = Build(ToolRegistry(), backend, stored, window, counter, on_event)
    for c in components:
        c.add_tools(build)
    sections = [section for c in components for section in c.sections(build.tools)]
    return Assembly(system_prompt(system, sections), build.tools, list(components))


def check_resume(assembly: Assembly, stored: Session, system_given: bool) -> None:
    """Refuse a resume whose system prompt, sections or tools differ from the stored prefix,
    naming the option that would change it."""
    for c in assembly.components:
        c.check_prefix(stored.prefix, stored.id)
    if assembly.find(StatusComponent) is None and stored.prefix.system_prompt.endswith(OPERATING_MANUAL):
        raise PrefixMismatch(
            f"session {stored.id} was started with the status bar, whose manual is part of its system prompt; "
            "continue it with the status bar (status=True), or start a new session"
        )
    if system_given and assembly.system != stored.prefix.system_prompt:
        raise PrefixMismatch(
            f"the system prompt differs from the one session {stored.id} was started with; leave it out "
            "to continue the session, or start a new session with the new prompt"
        )
    diff = tools_difference(stored.prefix.tools, assembly.tools.specs())
    if diff:
        raise PrefixMismatch(
            f"the tools differ from session {stored.id}'s prefix: {diff}. Pass the same tools in the same "
            "order (tools=[...] / --tool; the options workspace, todo, read_result, recall, delegate, skills and "
            "allow_skill_scripts add their own), or start a new session"
        )


def fork(parent: Assembly) -> Assembly:
    """A child agent's assembly: every component forked (``Component.fork``), the parent's
    registry with each forked component's own tools in place of the parent's of the same name
    (its own TODO list, its own results, ``delegate`` refusing), the same deferred tools.
    The child's prefix is the parent's byte for byte: checked here."""
    forks: list[Component] = []
    for c in parent.components:
        if isinstance(c, StatusComponent):
            continue  # made below, over the child's own TODO list
        f = c.fork()
        if f is not None:
            forks.append(f)
    status = parent.find(StatusComponent)
    if status is not None:
        todo = next((f for f in forks if isinstance(f, TodoComponent)), None)
        forks.append(status.fork_with(todo))
    own = {t.name: t for f in forks for t in f.own_tools()}
    tools = ToolRegistry()
    for t in parent.tools:
        tools.register(own.get(t.name, t))
    tools.defer(t.name for t in parent.tools.deferred())  # the same prefix: the same tools array
    diff = tools_difference(parent.tools.specs(), tools.specs())
    if diff is not None:  # a component's bug, not the user's
        raise RuntimeError(f"a sub-agent's tools differ from its parent's: {diff}")
    return Assembly(parent.system, tools, forks)


def system_prompt(system: str, sections: Iterable[tuple[str, str]]) -> str:
    """The caller's prompt then each section, each a global section (``core/sections.py``)."""
    builder = SystemPromptBuilder().add("system", system)
    for name, text in sections:
        builder.add(name, text)
    return builder.build()


def tools_difference(stored: Iterable[ToolSpec], given: Iterable[ToolSpec]) -> str | None:
    """What differs between two tool lists (names, order, description or schema bytes), in
    words; ``None`` when they are byte-identical."""
    old, new = {t.name: t for t in stored}, {t.name: t for t in given}
    parts = []
    missing = [n for n in old if n not in new]
    extra = [n for n in new if n not in old]
    if missing:
        parts.append("missing " + ", ".join(missing))
    if extra:
        parts.append("not in the session: " + ", ".join(extra))
    common_old = [n for n in old if n in new]
    common_new = [n for n in new if n in old]
    if common_old != common_new:
        parts.append(f"order differs (session: {', '.join(common_old)}; given: {', '.join(common_new)})")
    for n in common_old:
        a, b = old[n], new[n]
        if a.description != b.description:
            parts.append(f"{n}: description differs (session: {_short(a.description)}; given: {_short(b.description)})")
        if a.parameters_json != b.parameters_json:
            parts.append(
                f"{n}: parameter schema differs (session: {_short(a.parameters_json)}; given: {_short(b.parameters_json)})"
            )
    return "; ".join(parts) or None


def _short(text: str, limit: int = 160) -> str:
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")
