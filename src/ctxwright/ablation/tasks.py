"""The tasks file of an ablation: JSONL, one task per line, every expectation checkable by code.

Why code-scored and not judged by a model: an ablation compares arms that differ by one
section, often by a few points; a judge model's own noise (and its own reading of the prompt)
would be of the same size. Each task says what a right run does, in three independent parts,
any of which may be left out:

* ``expected_calls``: tool calls that must be made, each ``{"name", "arguments"}``; the
  arguments are a *subset* match (keys not listed are not checked), strings compared without
  case and surrounding space, numbers by value; order does not matter, and each expected call
  needs its own actual call. ``forbidden_calls``: tool names that must not be called at all
  (the refund the policy forbids).
* ``expected_state``: ``{"dotted.path": value}`` the environment's state must hold after the
  run (``orders.A1003.status``: ``"refunded"``), compared as the arguments are.
* ``expected_answer``: substrings the final answer must contain (without case), all of them.

A line looks like::

    {"id": "refund-damaged", "prompt": "Order A1003 arrived broken, please refund it.",
     "env": "domain.py:make_env",
     "expected_calls": [{"name": "refund_order", "arguments": {"order_id": "A1003", "reason": "damaged"}}],
     "expected_state": {"orders.A1003.status": "refunded"}, "expected_answer": ["A1003"]}

``env`` names the task's environment (``ablation/env.py``): a factory that makes fresh tools and
state for every run. Blank lines and lines starting with ``//`` are skipped. Inputs are bounded
(:data:`MAX_FILE_BYTES`, :data:`MAX_TASKS`); every problem is one
:class:`~ctxwright.errors.AblationInputError` naming ``file:line``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxwright.errors import AblationInputError

__all__ = ["MAX_FILE_BYTES", "MAX_TASKS", "ExpectedCall", "Task", "load_tasks", "parse_task"]

#: a tasks file larger than this is refused before it is read (a task is a few hundred bytes)
MAX_FILE_BYTES = 4 * 1024 * 1024
#: more tasks than this is refused: each runs once per arm and trial on a model
MAX_TASKS = 2000
#: a task's prompt longer than this is refused (characters)
MAX_PROMPT_CHARS = 20_000

_KEYS = {
    "id",
    "prompt",
    "env",
    "expected_calls",
    "forbidden_calls",
    "expected_state",
    "expected_answer",
    "note",
}


@dataclass(frozen=True)
class ExpectedCall:
    """A tool call a right run makes: the tool's name and the arguments it must have (a subset)."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Task:
    """One line of the tasks file (see the module's docstring for each field)."""

    id: str
    prompt: str
    env: str | None = None
    expected_calls: tuple[ExpectedCall, ...] = ()
    forbidden_calls: tuple[str, ...] = ()
    expected_state: dict[str, Any] = field(default_factory=dict)
    expected_answer: tuple[str, ...] = ()
    #: free text for the reader of the file (what the task tests); not scored
    note: str = ""
    #: where the task was read, ``file:line``
    where: str = ""
    #: the folder of the tasks file: an ``env`` given as a ``.py`` path is relative to it
    base: Path | None = None

    def checks(self) -> tuple[str, ...]:
        """The parts this task is scored on: ``calls``, ``state``, ``answer``."""
        out = []
        if self.expected_calls or self.forbidden_calls:
            out.append("calls")
        if self.expected_state:
            out.append("state")
        if self.expected_answer:
            out.append("answer")
        return tuple(out)


def _bad(where: str, what: str) -> AblationInputError:
    return AblationInputError(f"{where}: {what}")


def _strings(value: Any, where: str, key: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise _bad(where, f"{key} must be a list of non-empty strings")
    return tuple(value)


def parse_task(obj: Any, where: str, base: Path | None = None) -> Task:
    """One task from a parsed JSON line; ``where`` (``file:line``) starts every error."""
    if not isinstance(obj, dict):
        raise _bad(where, 'expected a JSON object: {"id": ..., "prompt": ..., "expected_calls": [...]}')
    unknown = sorted(set(obj) - _KEYS)
    if unknown:
        raise _bad(where, f"unknown key(s) {', '.join(unknown)}; a task has {', '.join(sorted(_KEYS))}")
    tid = obj.get("id")
    if isinstance(tid, int) and not isinstance(tid, bool):
        tid = str(tid)
    if not isinstance(tid, str) or not tid.strip():
        raise _bad(where, 'every task needs an "id" (a string)')
    prompt = obj.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise _bad(where, f'task {tid!r} needs a "prompt": the user message the agent gets')
    if len(prompt) > MAX_PROMPT_CHARS:
        raise _bad(where, f"task {tid!r}: prompt of {len(prompt):,} characters, more than {MAX_PROMPT_CHARS:,}")
    env = obj.get("env")
    if env is not None and (not isinstance(env, str) or ":" not in env):
        raise _bad(where, 'task "env" must be "module:factory" or "file.py:factory"')
    calls_raw = obj.get("expected_calls", [])
    if not isinstance(calls_raw, list):
        raise _bad(where, 'expected_calls must be a list of {"name": ..., "arguments": {...}}')
    calls = []
    for c in calls_raw:
        if isinstance(c, str):
            c = {"name": c}
        if not isinstance(c, dict) or not isinstance(c.get("name"), str) or set(c) - {"name", "arguments"}:
            raise _bad(where, 'each expected call is {"name": "tool", "arguments": {...}} (arguments optional)')
        args = c.get("arguments", {})
        if not isinstance(args, dict):
            raise _bad(where, f"expected call {c['name']!r}: arguments must be an object")
        calls.append(ExpectedCall(c["name"], args))
    forbidden = _strings(obj.get("forbidden_calls", []), where, "forbidden_calls")
    state = obj.get("expected_state", {})
    if not isinstance(state, dict) or not all(isinstance(k, str) and k for k in state):
        raise _bad(where, 'expected_state must be an object of {"dotted.path": value}')
    answer = _strings(obj.get("expected_answer", []), where, "expected_answer")
    if state and env is None:
        raise _bad(where, f"task {tid!r} expects a final state but names no env to read it from")
    note = obj.get("note", "")
    task = Task(
        id=tid.strip(),
        prompt=prompt,
        env=env,
        expected_calls=tuple(calls),
        forbidden_calls=forbidden,
        expected_state=state,
        expected_answer=answer,
        note=note if isinstance(note, str) else "",
        where=where,
        base=base,
    )
    if not task.checks():
        raise _bad(where, f"task {tid!r} checks nothing: give expected_calls, expected_state or expected_answer")
    return task


def load_tasks(path: str | Path, *, limit: int | None = None) -> list[Task]:
    """Every task of the JSONL file at ``path`` (the first ``limit`` of them, when given).

    Refused, as one :class:`AblationInputError`: a missing or unreadable file, a file over
    :data:`MAX_FILE_BYTES`, a line that is not JSON or not a task, two tasks with one id, no
    task at all, more than :data:`MAX_TASKS`."""
    p = Path(path).expanduser()
    name = str(path)
    try:
        if not p.is_file():
            raise AblationInputError(
                f"--tasks {name}: {'not a file' if p.exists() else 'no such file'}; give a JSONL file of tasks"
            )
        size = p.stat().st_size
        if size > MAX_FILE_BYTES:
            raise AblationInputError(
                f"--tasks {name}: {size:,} bytes, more than {MAX_FILE_BYTES:,}; split it into smaller files"
            )
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AblationInputError(f"--tasks {name}: cannot read it ({exc}); give a readable UTF-8 file") from None
    tasks: list[Task] = []
    ids: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("//"):
            continue
        where = f"{name}:{n}"
        try:
            obj = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise _bad(where, f"not JSON ({exc.msg} at column {exc.colno}); one task object per line") from None
        except RecursionError:  # [[[[...: nested deeper than the parser recurses
            raise _bad(where, "nested too deeply to be a task; one task object per line") from None
        task = parse_task(obj, where, p.parent)
        if task.id in ids:
            raise _bad(where, f"task id {task.id!r} is used again (first at {ids[task.id]}); give each task its own id")
        ids[task.id] = where
        tasks.append(task)
        if len(tasks) > MAX_TASKS:
            raise AblationInputError(f"--tasks {name}: more than {MAX_TASKS} tasks; split the file")
        if limit is not None and len(tasks) >= limit:
            break
    if not tasks:
        raise AblationInputError(f"--tasks {name}: no task in the file; write one JSON object per line")
    return tasks
