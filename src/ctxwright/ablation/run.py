"""Run every arm on every task, score each run by code, and summarise per arm.

Why one real :class:`~ctxwright.harness.Harness` session per run: the ablation must measure the
agent the user ships -- the same loop, defaults by backend, tool handling and caps -- with only
the system prompt changed. Each run gets a fresh in-memory session and a fresh environment
(``ablation/env.py``), so no run sees another's trajectory or state.

Why one backend object for all runs: the embedded model loads once, and runs go arm by arm, so
an arm's prefix (system prompt + tools) stays in the model's KV cache across that arm's tasks
(``backends/embedded.py``); on a served model, one HTTP client. The backend is made from the
options the way ``ctxwright run`` makes it (``agent/wiring.py``), by a first in-memory Harness
that is closed at the end.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from statistics import mean
from typing import Any

from ctxwright.ablation.arms import Arm
from ctxwright.ablation.env import EnvironmentFactory, load_factory, make_environment
from ctxwright.ablation.scoring import ActualCall, RunScore, score
from ctxwright.ablation.stats import wilson
from ctxwright.ablation.tasks import Task
from ctxwright.backends.base import Backend
from ctxwright.errors import AblationInputError, BackendError
from ctxwright.harness import Harness
from ctxwright.recipe import Recipe, options

__all__ = [
    "MAX_RUNS",
    "MAX_TRIALS",
    "AblationResult",
    "ArmSummary",
    "RunRecord",
    "Runner",
    "make_plan",
    "run_ablation",
]

#: trials per task and arm above this are refused (a greedy model repeats itself anyway)
MAX_TRIALS = 100
#: arms x tasks x trials above this is refused: an ablation is a measurement, not a load test
MAX_RUNS = 50_000

#: the Harness keywords that make a backend: given once, to the run that creates it
_MODEL_KEYWORDS = frozenset(s.keyword for s in options(Recipe) if s.section == "model" and s.keyword is not None)


@dataclass(frozen=True)
class RunRecord:
    """One run of one task in one arm: its score and what it did."""

    arm: str
    task: str
    trial: int
    success: bool
    calls_ok: bool | None
    state_ok: bool | None
    answer_ok: bool | None
    expected_calls: int
    matched_calls: int
    #: prompt tokens of the run's first model call (the server's count when it reports one)
    prompt_tokens: int | None
    calls: tuple[str, ...]
    answer: str | None
    stop_reason: str
    seconds: float
    problems: tuple[str, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class ArmSummary:
    """One arm over all its runs: the success rate with its 95% Wilson interval, each part's
    pass rate (``None``: no task checks it), expected calls matched, mean prompt tokens."""

    arm: str
    removed: str | None
    system_chars: int
    runs: int
    successes: int
    success: float
    low: float
    high: float
    calls_ok: float | None
    state_ok: float | None
    answer_ok: float | None
    call_accuracy: float | None
    prompt_tokens: float | None
    backend_errors: int


@dataclass
class AblationResult:
    """Every run and every arm's summary, in arm order (``full`` first)."""

    arms: list[ArmSummary]
    runs: list[RunRecord]
    tasks: int
    trials: int
    backend: str = ""
    model: str = ""
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    #: ``False`` while runs are missing (an ablation stopped, or one still running): ``arms``
    #: then summarises the finished arms only, ``runs`` every run so far
    complete: bool = True
    #: the runs the whole ablation makes (arms x tasks x trials)
    runs_total: int = 0
    #: what is measured (:func:`make_plan`): a resumed ablation must have the same
    plan: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "model": self.model,
            "tasks": self.tasks,
            "trials": self.trials,
            "seconds": round(self.seconds, 1),
            "complete": self.complete,
            "runs_done": len(self.runs),
            "runs_total": self.runs_total or len(self.runs),
            **self.extra,
            "plan": self.plan,
            "arms": [asdict(a) for a in self.arms],
            "runs": [asdict(r) for r in self.runs],
        }


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def make_plan(arms: Sequence[Arm], tasks: Sequence[Task], trials: int, backend: str, model: str) -> dict[str, Any]:
    """What an ablation measures: each arm with a hash of its system prompt, each task with a
    hash of its prompt, environment and checks, the trials, the backend and the model. A resumed
    ablation (``ablation/results.py``) must have the same plan, or its runs measure another thing."""

    def task_hash(t: Task) -> str:
        scored = (t.prompt, t.env, t.expected_calls, t.forbidden_calls, sorted(t.expected_state.items()))
        return _sha(repr((*scored, t.expected_answer)))

    return {
        "backend": backend,
        "model": model,
        "trials": trials,
        "arms": [{"name": a.name, "system_sha256": _sha(a.system)} for a in arms],
        "tasks": [{"id": t.id, "sha256": task_hash(t)} for t in tasks],
    }


def _rate(values: Sequence[bool | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def summarise(arm: Arm, runs: Sequence[RunRecord]) -> ArmSummary:
    """The summary of ``arm`` over ``runs`` (its own)."""
    n = len(runs)
    wins = sum(r.success for r in runs)
    low, high = wilson(wins, n)
    expected = sum(r.expected_calls for r in runs)
    tokens = [r.prompt_tokens for r in runs if r.prompt_tokens is not None]
    return ArmSummary(
        arm=arm.name,
        removed=arm.removed,
        system_chars=len(arm.system),
        runs=n,
        successes=wins,
        success=wins / n if n else 0.0,
        low=low,
        high=high,
        calls_ok=_rate([r.calls_ok for r in runs]),
        state_ok=_rate([r.state_ok for r in runs]),
        answer_ok=_rate([r.answer_ok for r in runs]),
        call_accuracy=sum(r.matched_calls for r in runs) / expected if expected else None,
        prompt_tokens=mean(tokens) if tokens else None,
        backend_errors=sum(r.stop_reason == "backend_error" for r in runs),
    )


def _calls_of(h: Harness) -> list[ActualCall]:
    """The tool calls of the session, in order, arguments parsed (``{}`` when not JSON)."""
    out = []
    for m in h.session.messages():
        for c in m.tool_calls or ():
            try:
                args = c.parsed_arguments()
            except ValueError:
                args = {}
            out.append(ActualCall(c.name, args))
    return out


class Runner:
    """Makes one Harness per run, all on one backend.

    ``options`` are ``Harness`` keywords (``ctxwright ablate`` passes the flags given, as
    ``ctxwright run`` does); ``backend`` is a backend object to use instead of making one
    (tests pass a scripted one). ``tools`` are added to every run's environment tools."""

    def __init__(
        self, options: Mapping[str, Any] | None = None, *, backend: Backend | None = None, tools: Sequence[Any] = ()
    ) -> None:
        self.options = dict(options or {})
        self.tools = list(tools)
        self._probe: Harness | None = None
        if backend is None:
            # the backend as `ctxwright run` makes it, from the same options; kept for every run
            self._probe = Harness("ablation", [], db=None, **self.options)
            backend = self._probe.backend
        self.backend = backend
        self._per_run = {k: v for k, v in self.options.items() if k not in _MODEL_KEYWORDS}
        self._factories: dict[tuple[str, str], EnvironmentFactory] = {}

    def factory(self, task: Task) -> EnvironmentFactory | None:
        """The task's environment factory, imported once per spec and folder."""
        if task.env is None:
            return None
        key = (task.env, str(task.base))
        if key not in self._factories:
            self._factories[key] = load_factory(task.env, base=task.base, where=task.where)
        return self._factories[key]

    def check(self, tasks: Sequence[Task]) -> None:
        """Import every task's environment and make one, before any model call: a bad ``env``
        is an input error now, not a failure in the middle of the ablation."""
        for t in tasks:
            f = self.factory(t)
            if f is not None:
                env = make_environment(f, t.env or "")
                env.state()
        if not self.tools and all(t.env is None for t in tasks):
            raise AblationInputError(
                "the tasks name no env and no --tool is given: the agent would have no tools to call; add "
                '"env": "file.py:factory" to the tasks, or give --tool module:function'
            )

    def run_one(self, arm: Arm, task: Task, trial: int) -> RunRecord:
        """One run of ``task`` in ``arm``, scored."""
        f = self.factory(task)
        env = make_environment(f, task.env or "") if f is not None else None
        tools = [*(env.tools if env is not None else ()), *self.tools]
        start = time.perf_counter()
        with Harness(arm.system, tools, backend=self.backend, db=None, **self._per_run) as h:
            result = h.run(task.prompt)
            calls = _calls_of(h)
        seconds = time.perf_counter() - start
        state = env.state() if env is not None else None
        s: RunScore = score(task, calls, state, result.final_answer)
        return RunRecord(
            arm=arm.name,
            task=task.id,
            trial=trial,
            success=s.success,
            calls_ok=s.calls_ok,
            state_ok=s.state_ok,
            answer_ok=s.answer_ok,
            expected_calls=s.expected_calls,
            matched_calls=s.matched_calls,
            prompt_tokens=result.calls[0].prompt_tokens if result.calls else None,
            calls=tuple(f"{c.name}({_args(c.arguments)})" for c in calls),
            answer=result.final_answer,
            stop_reason=result.stop_reason,
            seconds=round(seconds, 3),
            problems=s.problems,
            error=result.error,
        )

    def close(self) -> None:
        if self._probe is not None:
            self._probe.close()
            self._probe = None

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _args(arguments: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in arguments.items())


def run_ablation(
    runner: Runner,
    arms: Sequence[Arm],
    tasks: Sequence[Task],
    *,
    trials: int = 1,
    on_run: Callable[[int, int, RunRecord], None] | None = None,
    resume: AblationResult | None = None,
    on_progress: Callable[[Callable[[], AblationResult], bool], None] | None = None,
) -> AblationResult:
    """Every arm on every task ``trials`` times, arm by arm (so an arm's prefix stays cached),
    each run reported to ``on_run(done, total, record)`` as it ends.

    ``resume``: an ablation of the same plan stopped before its end (``ablation/results.py``
    reads it): its runs are kept and not made again. ``on_progress(so_far, arm_ended)`` is
    called after every run made and every arm ended; ``so_far()`` builds the ablation up to that
    moment (``complete=False`` until the last run) -- what a stop must not lose
    (``results.Checkpoint`` writes it, at most every few seconds).

    A first run that fails on the model call (a server that is down, a model that does not
    load) stops the ablation with that error: every other run would fail the same way, and
    would be scored as the arm's failures."""
    if not 1 <= trials <= MAX_TRIALS:
        raise AblationInputError(f"--trials {trials}: give 1 to {MAX_TRIALS}")
    total = len(arms) * len(tasks) * trials
    if total > MAX_RUNS:
        raise AblationInputError(
            f"{len(arms)} arms x {len(tasks)} tasks x {trials} trials is {total:,} runs, more than {MAX_RUNS:,}; "
            "use fewer tasks (--limit), arms (--only) or trials"
        )
    runner.check(tasks)
    plan = make_plan(arms, tasks, trials, runner.backend.name, str(runner.backend.model))
    kept = {(r.arm, r.task, r.trial): r for r in (resume.runs if resume is not None else ())}
    before = resume.seconds if resume is not None else 0.0
    start = time.perf_counter()
    records: list[RunRecord] = []
    summaries: list[ArmSummary] = []

    def so_far() -> AblationResult:
        return AblationResult(
            arms=list(summaries),
            runs=list(records),
            tasks=len(tasks),
            trials=trials,
            backend=runner.backend.name,
            model=str(runner.backend.model),
            seconds=before + time.perf_counter() - start,
            complete=len(records) == total,
            runs_total=total,
            plan=plan,
        )

    for arm in arms:
        mine: list[RunRecord] = []
        for task in tasks:
            for trial in range(1, trials + 1):
                rec = kept.get((arm.name, task.id, trial))
                if rec is None:
                    rec = runner.run_one(arm, task, trial)
                    if rec.stop_reason == "backend_error" and all(r.stop_reason == "backend_error" for r in records):
                        raise BackendError(f"the first model call failed, so no arm can be scored: {rec.error}")
                    mine.append(rec)
                    records.append(rec)
                    if on_run is not None:
                        on_run(len(records), total, rec)
                    if on_progress is not None and len(mine) < len(tasks) * trials:
                        on_progress(so_far, False)
                else:
                    mine.append(rec)
                    records.append(rec)
        summaries.append(summarise(arm, mine))
        if on_progress is not None:
            on_progress(so_far, True)
    return so_far()
