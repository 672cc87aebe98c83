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

Skills: the child gets the parent's skills, so a side task can follow one. Its ``Skill`` and
``read_skill_file`` are the same tool bytes over its own :class:`SkillTools` (a skill the
child loads is not "already loaded" for the parent, which never saw it), and in reminder mode
the catalog is announced in the child's own trajectory, before its task; in prefix mode it is
already in the shared prefix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ctxwright.compaction.skills import shown_in
from ctxwright.core.session import Session
from ctxwright.skills.tools import SkillTools, announce
from ctxwright.tools.registry import Tool, ToolRegistry

if TYPE_CHECKING:
    from ctxwright.agent.loop import Agent, RunResult

CHILD_TASK = (
    "You are a sub-agent working for another agent, which will see only your final reply. Do the task "
    "below on your own with the tools you have. Then reply with a conclusion of at most {limit} "
    "characters: the facts you found (with where they came from), and what you could not do.\n\n"
    "Task: {task}"
)


class Delegator:
    """Owns the ``delegate`` tool; :meth:`bind` it to the parent agent once that exists."""

    def __init__(
        self,
        *,
        max_conclusion_chars: int = 1_500,
        max_iterations: int = 8,
        timeout_s: float = 900.0,
        on_event: Callable[[str, dict[str, Any]], None] | None = None,
        skills: SkillTools | None = None,
    ) -> None:
        self.skills = skills
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

    def _child_tools(self, skills: SkillTools | None) -> ToolRegistry:
        """The parent's tools, except that ``delegate`` refuses, ``read_result`` reads the
        child's own results and the skill tools are ``skills``' (the child's own activations)."""
        from ctxwright.compaction.retrieval import ResultReader

        assert self.parent is not None
        own = {t.name: t for t in skills.tools()} if skills is not None else {}
        reg = ToolRegistry()
        for t in self.parent.tools:
            if t.name == "delegate":
                reg.register(Tool.from_function(_refuse_nested, name="delegate", description=t.description))
            elif t.name == "read_result":
                reg.register(ResultReader().tool())
            elif t.name in own:
                reg.register(own[t.name])
            else:
                reg.register(t)
        reg.defer(t.name for t in self.parent.tools.deferred())  # the same prefix: the same tools array
        return reg

    def delegate(self, task: str) -> str:
        """Hand a self-contained side task to a sub-agent; you get back only its short conclusion.

        Args:
            task: the whole task, with every detail the sub-agent needs (it sees nothing else)
        """
        from ctxwright.agent.loop import Agent

        if self.parent is None:
            raise RuntimeError("delegate is not bound to a parent agent")
        if not task.strip():
            raise ValueError("the task is empty; describe the whole side task in one message")
        parent = self.parent
        ps = parent.session
        child = Session.start(
            ps.prefix,
            store=ps.store,
            backend=ps.backend,
            model=ps.model,
            parent_id=ps.id,
            meta={"delegated_task": task},
        )
        self.children.append(child.id)
        cfg = replace(parent.config, max_iterations=self.max_iterations)
        sink = self.on_event or (lambda kind, data: None)
        skills = self.skills.fork() if self.skills is not None else None
        if skills is not None:  # its activations are its own: the child's view answers
            skills.is_shown = shown_in(child)
        if skills is not None and skills.frozen is None:  # reminder mode: the child is told too
            done = announce(child, list(skills.skills.values()))
            if done is not None:
                sink("skills_catalog", {"names": done[0], "content": done[1], "child": child.id})
        summ = parent.context.summarizer if parent.context is not None else None
        agent = Agent(
            child,
            self._backend(),
            self._child_tools(skills),
            cfg,
            counter=parent.counter,
            on_event=lambda kind, data: sink(kind, {**data, "child": child.id}),
            summary_backend=summ.backend if summ is not None else None,
            # the child's calls pass the parent's gate; its task is the parent model's words, so
            # provenance reads the parent's sources (defence/provenance.py)
            gate=parent.gate,
            gate_parents=(*parent.gate_parents, ps),
        )  # no third model object
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
            description="Hand a self-contained side task to a sub-agent that works in its "
            "own context; only its short conclusion comes back.",
            # the conclusion is our own model's writing: the child's untrusted results were marked
            # in its own context, and its calls run in its own loop with the parent's config
            # (the same defence level); delegating itself changes nothing outside
            trust="trusted",
            effects="none",
        )


def _refuse_nested(task: str) -> str:
    """Not available inside a sub-agent.

    Args:
        task: ignored
    """
    raise RuntimeError("delegate is not available inside a sub-agent: do this part of the task yourself")
