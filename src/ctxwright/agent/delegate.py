"""Sub-agent isolation: the ``delegate(task)`` tool runs a child agent and returns only its
conclusion.

Why isolation beats compression (the book, 子 Agent): a side task's searches and dead ends
would otherwise stay in the parent's context for the rest of the session. The child works
in its own session and the parent sees one bounded tool result.

Cache rule protected: the child's requests start with the parent's *exact* prefix bytes
(same system prompt, same tool list, same order), so a provider's prefix cache serves the
child from the parent's entry. The child therefore has the same tools in its prefix; it
may not delegate again (that call gets a clear error), which bounds the depth at one.

On the embedded backend the child runs on a second model object (``backend.fork()``) so
the parent's llama.cpp KV state -- its prefilled prefix and trajectory -- survives.

Confirmation gate: the child's calls pass the parent's gate, with the parent's sessions as
the provenance of its values -- the task the parent model wrote is not a user message, so
an address the parent read in a web page stays untrusted in the child (``defence/``).

Components: the child is the parent's assembly forked (``agent/assemble.py: fork``): every
component goes on in the child as its ``fork()`` says -- its own TODO list and status bar, its
own ``read_result`` over its own results, the parent's skills with its own activations (the
catalog announced in its own trajectory in reminder mode), the parent's MCP servers with list
changes announced to it -- behind the same tool bytes, checked to be the parent's.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ctxwright.core.progress import EventSink, ignore
from ctxwright.core.render import NULL_CONTENT_KEY
from ctxwright.core.session import Session
from ctxwright.tools.component import Build, Component, register_core
from ctxwright.tools.registry import Tool

if TYPE_CHECKING:
    from ctxwright.agent.assemble import Assembly
    from ctxwright.agent.loop import Agent, RunResult

CHILD_TASK = (
    "You are a sub-agent working for another agent, which will see only your final reply. Do the task "
    "below on your own with the tools you have. Then reply with a conclusion of at most {limit} "
    "characters: the facts you found (with where they came from), and what you could not do.\n\n"
    "Task: {task}"
)
DESCRIPTION = (
    "Hand a self-contained side task to a sub-agent that works in its "
    "own context; only its short conclusion comes back."
)


class Delegator:
    """Owns the ``delegate`` tool; :meth:`bind` it to the parent agent once that exists."""

    def __init__(
        self,
        *,
        max_conclusion_chars: int = 1_500,
        max_iterations: int = 8,
        timeout_s: float = 900.0,
        on_event: EventSink | None = None,
    ) -> None:
        self.max_conclusion_chars = max_conclusion_chars
        self.max_iterations = max_iterations
        self.timeout_s = timeout_s
        self.on_event = on_event
        self.parent: Agent | None = None
        self._child_backend: Any = None
        self.children: list[str] = []

    def bind(self, parent: Agent) -> None:
        self.parent = parent

    def _backend(self) -> Any:
        assert self.parent is not None
        if self._child_backend is None:
            self._child_backend = self.parent.backend.fork()
        return self._child_backend

    def _parent_assembly(self) -> Assembly:
        """The parent's components; for an agent built from bare parts (a registry, no
        components), the two tools that must differ in a child: ``read_result`` (the child's
        own results) and ``delegate`` (refusing)."""
        from ctxwright.agent.assemble import Assembly
        from ctxwright.compaction.recall import RECALL_TOOL, RecallComponent
        from ctxwright.compaction.retrieval import ReaderComponent

        assert self.parent is not None
        if self.parent.ctx.assembly is not None:
            return self.parent.ctx.assembly
        tools = self.parent.tools
        comps: list[Component] = [ReaderComponent()] if "read_result" in tools else []
        if RECALL_TOOL in tools:
            comps.append(RecallComponent())
        if "delegate" in tools:
            comps.append(DelegateComponent(delegator=self))
        return Assembly(self.parent.session.prefix.system_prompt, tools, comps)

    def delegate(self, task: str) -> str:
        """Hand a self-contained side task to a sub-agent; you get back only its short conclusion.

        Args:
            task: the whole task, with every detail the sub-agent needs (it sees nothing else)
        """
        from ctxwright.agent.assemble import fork
        from ctxwright.agent.context import Context
        from ctxwright.agent.loop import Agent
        from ctxwright.status.component import StatusComponent

        if self.parent is None:
            raise RuntimeError("delegate is not bound to a parent agent")
        if not task.strip():
            raise ValueError("the task is empty; describe the whole side task in one message")
        parent = self.parent
        ps = parent.session
        assembly = fork(self._parent_assembly())
        child = Session.start(
            ps.prefix,
            store=ps.store,
            backend=ps.backend,
            model=ps.model,
            parent_id=ps.id,
            # the parent's wire form: the same server takes it (core/render.py)
            meta={"delegated_task": task, NULL_CONTENT_KEY: ps.settings().null_content},
        )
        self.children.append(child.id)
        assembly.bind(child)
        cfg = replace(parent.config, max_iterations=self.max_iterations)
        sink = self.on_event or ignore
        summ = parent.context.summarizer if parent.context is not None else None
        status = assembly.find(StatusComponent)
        ctx = Context.over(
            child,
            self._backend(),
            assembly.tools,
            cfg,
            counter=parent.counter,
            on_event=lambda event: sink(replace(event, child=child.id)),
            status=status.bar if status is not None else None,
            summary_backend=summ.backend if summ is not None else None,
            assembly=assembly,
            # the child's calls pass the parent's gate; its task is the parent model's words, so
            # provenance reads the parent's sources (defence/provenance.py)
            gate=parent.gate,
            gate_parents=(*parent.gate_parents, ps),
        )  # no third model object
        agent = Agent.on(ctx)
        try:
            result: RunResult = agent.run(CHILD_TASK.format(limit=self.max_conclusion_chars, task=task))
        except Exception as exc:
            raise RuntimeError(
                f"the sub-agent (session {child.id}) failed: {type(exc).__name__}: {exc}. "
                f"Its events are stored: ctxwright show {child.id}"
            ) from exc
        if result.stop_reason != "final_answer":
            raise RuntimeError(
                f"the sub-agent (session {child.id}) stopped without a conclusion: {result.stop_reason} after "
                f"{result.iterations} iteration(s){': ' + result.error if result.error else ''}. Do the task "
                f"yourself or split it into smaller tasks; its events are stored: ctxwright show {child.id}"
            )
        text = (result.final_answer or "").strip()
        if len(text) > self.max_conclusion_chars:
            text = text[: self.max_conclusion_chars] + f" [... cut at {self.max_conclusion_chars:,} characters]"
        return f"[sub-agent {child.id}, {result.iterations} step(s)] {text}"

    def tool(self) -> Tool:
        return Tool.from_function(
            self.delegate,
            name="delegate",
            timeout_s=self.timeout_s,
            description=DESCRIPTION,
            # the conclusion is our own model's writing: the child's untrusted results were marked
            # in its own context, and its calls run in its own loop with the parent's config
            # (the same defence level); delegating itself changes nothing outside
            trust="trusted",
            effects="none",
        )

    def close(self) -> None:
        """Close the child's model object, when the delegator made one of its own."""
        child = self._child_backend
        if child is not None and self.parent is not None and child is not self.parent.backend:
            child.close()
        self._child_backend = None


class DelegateComponent(Component):
    """``delegate(task)`` in the prefix; the Harness binds it to the parent agent."""

    name = "delegate"

    def __init__(self, on_event: EventSink | None = None, *, delegator: Delegator | None = None) -> None:
        self.delegator = delegator or Delegator(on_event=on_event)

    def add_tools(self, build: Build) -> None:
        register_core(build.tools, [self.delegator.tool()], "delegate (delegate=)")

    def fork(self) -> Component | None:
        return _NoDelegate(self.delegator.tool())

    def close(self) -> None:
        self.delegator.close()


class _NoDelegate(Component):
    """In a child, ``delegate`` is the same bytes but refuses: the depth is bounded at one."""

    name = "delegate"

    def __init__(self, tool: Tool) -> None:
        self.tool = replace(tool, func=_refuse_nested)

    def own_tools(self) -> list[Tool]:
        return [self.tool]


def _refuse_nested(task: str) -> str:
    """Not available inside a sub-agent (the tool keeps the parent's bytes: the same prefix)."""
    raise RuntimeError("delegate is not available inside a sub-agent: do this part of the task yourself")
