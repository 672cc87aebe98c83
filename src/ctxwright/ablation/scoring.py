"""Score one run of a task by code: its tool calls, the state it left, its final answer.

Why these rules (``ablation/tasks.py`` has the file format): a model writes ``"a1003"`` for
``"A1003"`` and ``3`` for ``3.0``; a scorer that failed on that would measure formatting, not
whether the agent did the right thing. So strings match without case and surrounding space,
numbers by value, booleans only as booleans; dicts and lists element by element. Arguments
and state are *subset* matches: a task names what matters and nothing more.

A run succeeds when every part its task checks passes; each part is also reported on its own,
so an arm's table can say *what* a section changes (the calls made, the state, the wording).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxwright.ablation.tasks import ExpectedCall, Task

__all__ = ["ActualCall", "RunScore", "lookup", "same", "score"]

_MISSING = object()


@dataclass(frozen=True)
class ActualCall:
    """A tool call the model made, with its arguments parsed (``{}`` when they were not JSON)."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunScore:
    """How one run did: each part's verdict (``None``: the task does not check it), how many
    expected calls were matched, and why it failed, in words."""

    success: bool
    calls_ok: bool | None
    state_ok: bool | None
    answer_ok: bool | None
    expected_calls: int
    matched_calls: int
    problems: tuple[str, ...] = ()


def same(expected: Any, actual: Any) -> bool:
    """``actual`` matches ``expected`` (a dict: every key of ``expected``, recursively)."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return isinstance(expected, bool) and isinstance(actual, bool) and expected == actual
    if isinstance(expected, int | float) and isinstance(actual, int | float):
        return float(expected) == float(actual)
    if isinstance(expected, str) and isinstance(actual, str):
        return expected.strip().casefold() == actual.strip().casefold()
    if isinstance(expected, dict):
        return isinstance(actual, Mapping) and all(k in actual and same(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list):
        return (
            isinstance(actual, list | tuple)
            and len(expected) == len(actual)
            and all(same(e, a) for e, a in zip(expected, actual, strict=True))
        )
    return bool(expected == actual)


def lookup(state: Any, path: str) -> Any:
    """The value at ``path`` (``orders.A1003.status``; a list is indexed by a number) in
    ``state``, or a private marker when it is not there."""
    node = state
    for part in path.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list | tuple) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return _MISSING
    return node


def _match_calls(expected: Sequence[ExpectedCall], actual: Sequence[ActualCall]) -> int:
    """How many expected calls each get an actual call of their own (order-free; the most
    specific expectations are placed first, so a loose one cannot take a call a strict one needs)."""
    free = list(actual)
    matched = 0
    for e in sorted(expected, key=lambda c: -len(c.arguments)):
        for i, a in enumerate(free):
            if a.name == e.name and same(e.arguments, a.arguments):
                del free[i]
                matched += 1
                break
    return matched


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def score(task: Task, calls: Sequence[ActualCall], state: Any, answer: str | None) -> RunScore:
    """Score one run of ``task``: the calls it made (in order), the environment's state after
    it (``None`` without an environment) and its final answer (``None``: it gave none)."""
    problems: list[str] = []
    calls_ok: bool | None = None
    matched = 0
    if task.expected_calls or task.forbidden_calls:
        matched = _match_calls(task.expected_calls, calls)
        if matched < len(task.expected_calls):
            made = ", ".join(f"{c.name}({_show(c.arguments)})" for c in calls) or "none"
            problems.append(f"matched {matched} of {len(task.expected_calls)} expected call(s); made: {made}")
        bad = sorted({c.name for c in calls} & set(task.forbidden_calls))
        if bad:
            problems.append(f"called forbidden {', '.join(bad)}")
        calls_ok = matched == len(task.expected_calls) and not bad
    state_ok: bool | None = None
    if task.expected_state:
        state_ok = True
        for path, want in task.expected_state.items():
            got = lookup(state, path)
            if got is _MISSING or not same(want, got):
                state_ok = False
                problems.append(f"state {path} is {'missing' if got is _MISSING else _show(got)}, not {_show(want)}")
    answer_ok: bool | None = None
    if task.expected_answer:
        text = (answer or "").casefold()
        missing = [s for s in task.expected_answer if s.casefold() not in text]
        answer_ok = not missing
        if missing:
            problems.append(f"answer lacks {', '.join(repr(s) for s in missing)}")
    verdicts = [v for v in (calls_ok, state_ok, answer_ok) if v is not None]
    return RunScore(
        success=bool(verdicts) and all(verdicts),
        calls_ok=calls_ok,
        state_ok=state_ok,
        answer_ok=answer_ok,
        expected_calls=len(task.expected_calls),
        matched_calls=matched,
        problems=tuple(problems),
    )
