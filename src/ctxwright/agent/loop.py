"""The ReAct loop: call the model, run the tools it asks for, feed results back, repeat --
built on :class:`~ctxwright.agent.context.Context`, which owns every rule about what is sent
and recorded (ids, the audit, the ledger check, the gate, repeats, the result steps).

What the loop itself adds:

* an iteration cap (default 20) with the stop reason reported -- a loop without a bound
  can call the same tool forever;
* a tool-round budget (``max_tool_rounds``): past it the call asks for an answer
  (``tool_choice="none"``), for models that cannot tell when to stop;
* a reply without tool calls is the final answer;
* a backend error ends the run with ``backend_error``, the failed call recorded -- except a
  first context-length error, which gets one forced compaction and one retry;
* a call that repeated past the limit was not run, and ends the run with ``repeated_tool_call``;
* each call's wall time is measured around the backend call and stored with it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

from ctxwright.agent.context import CallReport, Context, ContextConfig, Step
from ctxwright.audit.compare import Auditor
from ctxwright.backends.base import Backend
from ctxwright.compaction import ContextManager
from ctxwright.core.progress import BackendFailed, EventSink, Stopped
from ctxwright.core.request import ChatRequest, Completion, ToolChoice
from ctxwright.core.session import Session
from ctxwright.core.tokens import TokenCounter
from ctxwright.defence.gate import Gate
from ctxwright.errors import BackendError, ContextWindowExceeded
from ctxwright.status.bar import StatusBar
from ctxwright.tools.registry import ToolRegistry

StopReason = Literal["final_answer", "max_iterations", "backend_error", "repeated_tool_call"]

#: The loop's knobs are the context's (one declaration: ``agent/context.py``).
AgentConfig = ContextConfig


@dataclass
class RunResult:
    final_answer: str | None
    stop_reason: StopReason
    iterations: int
    calls: list[CallReport] = field(default_factory=list)
    error: str | None = None


class Agent:
    """Runs one context against one backend: ``Agent.on(ctx)``, or from bare parts (a
    session, a backend, a registry) as ``Agent(session, backend, tools, config)``."""

    def __init__(
        self,
        session: Session,
        backend: Backend,
        tools: ToolRegistry,
        config: ContextConfig | None = None,
        *,
        on_event: EventSink | None = None,
        counter: TokenCounter | None = None,
        status: StatusBar | None = None,
        summary_backend: Backend | None = None,
        gate: Gate | None = None,
        gate_parents: tuple[Session, ...] = (),
    ) -> None:
        ctx = Context.over(
            session,
            backend,
            tools,
            config,
            on_event=on_event,
            counter=counter,
            status=status,
            summary_backend=summary_backend,
            gate=gate,
            gate_parents=gate_parents,
        )
        self._bind(ctx)

    @classmethod
    def on(cls, ctx: Context) -> Agent:
        """The loop over a context built already (``Harness``, a sub-agent)."""
        agent = cls.__new__(cls)
        agent._bind(ctx)
        return agent

    def _bind(self, ctx: Context) -> None:
        self.ctx = ctx

    # the context's parts, by the names this class has always had
    @property
    def session(self) -> Session:
        return self.ctx.session

    @property
    def backend(self) -> Backend:
        return self.ctx.backend

    @backend.setter
    def backend(self, value: Backend) -> None:
        self.ctx.backend = value

    @property
    def tools(self) -> ToolRegistry:
        return self.ctx.tools

    @property
    def config(self) -> ContextConfig:
        return self.ctx.config

    @property
    def counter(self) -> TokenCounter:
        return self.ctx.counter

    @property
    def auditor(self) -> Auditor:
        return self.ctx.auditor

    @property
    def context(self) -> ContextManager | None:
        """The compaction layers (``compaction/manager.py``), ``None`` when off."""
        return self.ctx.compaction

    @property
    def status(self) -> StatusBar | None:
        return self.ctx.status

    @property
    def gate(self) -> Gate | None:
        return self.ctx.gate

    @property
    def gate_parents(self) -> tuple[Session, ...]:
        return self.ctx.gate_parents

    @property
    def on_event(self) -> EventSink:
        return self.ctx.on_event

    @property
    def tokens_used(self) -> int:
        return self.ctx.tokens_used

    # -- one model call ----------------------------------------------------------------
    def _complete(self, request: ChatRequest) -> Completion:
        """The backend call; the backend reports retries and streamed tokens through the
        harness's callback while it runs."""
        return self.backend.complete(request, on_event=self.on_event)

    def _call_model(self, tool_choice: ToolChoice, iteration: int | None = None) -> Step:
        """One model call. A context-length error from the server (its tokenizer counted more
        than ours, or a chat template added more) gets one forced compaction and one retry
        (:meth:`Context.compact_for_overflow`); a second one ends the run with the error."""
        ctx = self.ctx
        retried = False
        while True:
            request = ctx.prepare(tool_choice, iteration)
            t_call = time.perf_counter()
            try:
                completion = self._complete(request)
            except BackendError as exc:
                ctx.failed(exc, wall_ms=round((time.perf_counter() - t_call) * 1000, 3))
                if isinstance(exc, ContextWindowExceeded) and not retried and ctx.compact_for_overflow(exc):
                    retried = True
                    continue
                raise
            return ctx.record(completion, wall_ms=round((time.perf_counter() - t_call) * 1000, 3))

    # -- the loop ------------------------------------------------------------------------
    def run(self, user_input: str | None = None) -> RunResult:
        ctx = self.ctx
        if user_input is not None:
            ctx.add_user(user_input)
        else:
            ctx.begin()
        reports: list[CallReport] = []
        rounds = 0
        for it in range(1, self.config.max_iterations + 1):
            choice: ToolChoice = self.config.tool_choice_first if it == 1 and self.tools.specs() else "auto"
            if self.config.max_tool_rounds is not None and rounds >= self.config.max_tool_rounds:
                choice = "none"
            try:
                step = self._call_model(choice, it)
            except BackendError as exc:
                self.on_event(BackendFailed(error=f"{type(exc).__name__}: {exc}"))
                return RunResult(None, "backend_error", it, reports, error=f"{type(exc).__name__}: {exc}")
            reports.append(step.report)
            if not step.tool_calls:
                return RunResult(step.text, "final_answer", it, reports)
            rounds += 1  # noqa: SIM113 -- counts tool rounds, not loop iterations
            ctx.run_tools(step)
            if step.blocked:
                self.on_event(Stopped(reason="repeated_tool_call"))
                return RunResult(None, "repeated_tool_call", it, reports)
        self.on_event(Stopped(reason="max_iterations"))
        return RunResult(None, "max_iterations", self.config.max_iterations, reports)


__all__ = ["Agent", "AgentConfig", "CallReport", "RunResult"]
