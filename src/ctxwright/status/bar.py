"""The agent status bar: state computed by code, shown at the end of every request.

Why (the book, "Agent 狀態列"): in-context learning retrieves well but does not count or
summarize. Asked "how many times have I called this merchant?", a model must re-read and
count its whole trajectory, and weak models get it wrong. So the harness computes the
state -- counters, TODO list, time, timings, the last error, environment, budget -- and
shows it as ``key: value`` lines inside ``<agent_status>`` in a user-role message placed
last before each model call. Never in the system prompt: it changes every call and would
break the prefix cache (see ``core/prefix.py``).

Two update modes, and a chooser
-------------------------------
``replace`` drops the previous status message and appends the new one (the renderer,
``core/render.py``, applies the mode recorded with each status): one status in context,
but removing the old one invalidates the cache from its position on, so the R tokens
added since the last update are prefilled again at full price.
``append`` keeps every status message: nothing is invalidated, but stale statuses stay
in the context and are paid for (at the cached price) on every later call.

Cost per update, in units of the uncached price, with S the status size in tokens, R
the suffix added between two updates, N the number of updates in the session and α the
backend's cached-token price ratio (cached price ÷ uncached price):

* append: the k-th call carries k earlier statuses at price α -> over N calls
  α·S·(0+1+…+(N−1)) ≈ α·S·N²/2, i.e. α·S·N/2 per update;
* replace: each update re-prefills the R tokens after the old status, which would have
  been cached: (1−α)·R per update.

So append wins when α·S·N/2 < (1−α)·R (the book's cost model) -- small statuses, fast-growing
suffixes. ``auto`` measures S and R in the session and decides before each update. The rule
itself is ``cache/stale_cost.py``'s (compaction's planner decides when to compact with it too).
"""

from __future__ import annotations

import bisect
import json
import os
import platform
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ctxwright.cache.stale_cost import keeping_pays
from ctxwright.core.events import AssistantEvent, BreakerEvent, Event, MessageEvent, StatusEvent, ToolEvent
from ctxwright.core.incremental import EventFold
from ctxwright.core.messages import Message, ToolCall
from ctxwright.core.repeats import RepeatTracker, call_key, without_note
from ctxwright.core.words import quoted
from ctxwright.errors import ConfigError

if TYPE_CHECKING:
    from ctxwright.core.session import Session
    from ctxwright.status.todo import TodoList

Mode = Literal["replace", "append", "auto"]
ITEMS = ("counters", "repeats", "todo", "time", "timing", "error", "env", "budget", "compaction")
#: The keys of the ``env`` item (:meth:`StatusBar.environment`): fixed for a session, so the model
#: reads them in every status while a terminal echo needs them once (``cli/progress.py``).
ENV_KEYS = ("cwd", "os", "shell", "python", "git_branch")
#: What ``status_fields`` chooses from, in the order the block shows them: the items, with
#: ``env`` as its own lines -- the working directory's path and the OS string go to the
#: provider in every status on a served model, and a user may keep one without the others.
FIELDS = (*ITEMS[: ITEMS.index("env")], *ENV_KEYS, *ITEMS[ITEMS.index("env") + 1 :])
#: Names that stand for several fields in ``status_fields``.
FIELD_GROUPS: dict[str, tuple[str, ...]] = {"all": FIELDS, "env": ENV_KEYS}
STATUS_OPEN, STATUS_CLOSE = "<agent_status>", "</agent_status>"

#: Fixed text for the system prompt (part of the stable prefix): what to do with the readings.
OPERATING_MANUAL = """# Reading <agent_status>
The last message before each of your turns is an <agent_status> block written by the harness, not by the user. Its values are exact; trust them over your own counting.
- A counter shows "limit reached": do not call that tool (or that tool with that key) again; stop and report.
- A call took far longer than expected: diagnose (check the arguments, the target) before retrying.
- The same error twice: change your approach instead of repeating the call.
- Little time, iterations or tokens left: deliver what you have now.
- Keep the TODO list current: one item in_progress at a time."""


def status_fields(spec: str | Sequence[str] | None) -> tuple[str, ...]:
    """The fields a ``status_fields`` value keeps, in :data:`FIELDS` order.

    ``spec``: field names (:data:`FIELDS`, or ``env`` / ``all`` for a group), as a list or one
    string split on commas and spaces (the command line's ``--status-fields all,-cwd``). A name
    keeps its field(s); ``-name`` drops them. Only drops: every field but those
    (``["-cwd", "-os"]``); names: just those, less any drops (``["env", "-cwd"]``). ``None``:
    every field. An unknown name, or a choice that keeps nothing, is a :class:`ConfigError`."""
    if spec is None:
        return FIELDS
    valid = ", ".join([*FIELDS, *FIELD_GROUPS])
    if not isinstance(spec, str | Sequence):
        raise ConfigError(
            f"status_fields={quoted(str(spec))}: give a list of field names ({valid}), e.g. ['-cwd', '-os']"
        )
    words = spec.replace(",", " ").split() if isinstance(spec, str) else list(spec)
    if not words:  # an empty --status-fields "" would otherwise keep every field, the opposite of what it says
        raise ConfigError(
            f"status_fields={quoted(str(spec))} names no field; give names ({valid}), or None for every field"
        )
    keep: set[str] = set()
    drop: set[str] = set()
    named = False
    for word in words:
        name = word.strip() if isinstance(word, str) else ""
        dropped = name.startswith("-")
        name = name.removeprefix("-").removeprefix("+")
        group = FIELD_GROUPS.get(name, (name,) if name in FIELDS else None)
        if group is None:
            raise ConfigError(
                f"status_fields={quoted(str(spec))}: unknown field {quoted(str(word), 40)}; use {valid} "
                "(a leading '-' drops one: --status-fields all,-cwd,-os)"
            )
        if dropped:
            drop.update(group)
        else:
            keep.update(group)
            named = True
    chosen = tuple(f for f in FIELDS if (f in keep or not named) and f not in drop)
    if not chosen:
        raise ConfigError(
            f"status_fields={quoted(str(spec))} keeps no field; to send no status, turn the bar off (status=False, --no-status)"
        )
    return chosen


def choose_mode(S: float, R: float, N: float, alpha: float) -> Literal["append", "replace"]:
    """The book's rule: append when α·S·N/2 < (1−α)·R, else replace."""
    return "append" if keeping_pays(alpha, S, N, R) else "replace"


@dataclass
class StatusConfig:
    """What the status bar shows and how it is updated."""

    #: the items shown (:data:`ITEMS`); ``env`` shows every environment line, and one of
    #: :data:`ENV_KEYS` alone shows that line (:func:`status_fields` gives such a tuple)
    items: tuple[str, ...] = ITEMS
    mode: Mode = "auto"
    #: per-tool limits; key ``"tool"`` or ``"tool[key value]"``
    limits: dict[str, int] = field(default_factory=dict)
    #: tool name -> the argument that names what it acts on (counted per value)
    key_args: dict[str, str] = field(default_factory=dict)
    #: tool name -> expected milliseconds
    expected_ms: dict[str, float] = field(default_factory=dict)
    max_iterations: int | None = None
    #: identical tool calls in a row before the loop tells the model (``core/repeats.py``);
    #: past it, a ``repeated_call`` line. ``None``: no line
    max_repeats: int | None = None
    token_budget: int | None = None
    wall_budget_s: float | None = None
    #: cached-token price ÷ uncached price of the backend (OpenAI 0.5/0.25/0.1, Anthropic 0.1, local 0)
    alpha: float = 0.1
    #: expected number of updates in a session, for the chooser (defaults to max_iterations or 20)
    expected_updates: int | None = None
    last_timings: int = 3


#: The timestamp the loop puts before user and tool contents (``AgentConfig.timestamps``).
_STAMP = re.compile(r"\A\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\] ")


def _git_branch(cwd: str) -> str | None:
    if not shutil.which("git"):
        return None
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--abbrev-ref", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=2
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _key_value(call: ToolCall, arg: str | None) -> str | None:
    if not arg:
        return None
    try:
        v = call.parsed_arguments().get(arg)
    except ValueError:
        return None
    return None if v is None else str(v)


@dataclass
class _Readings:
    """What the status shows that is read from the events, kept up to date as they are
    appended (``core/incremental.py``): a status computed on every call from a scan of
    the whole session would cost more each turn."""

    per_tool: dict[str, int] = field(default_factory=dict)
    per_key: dict[tuple[str, str], int] = field(default_factory=dict)
    timed: list[ToolEvent] = field(default_factory=list)  # tool events with a duration, in order
    last_failed: ToolEvent | None = None
    last_breaker: BreakerEvent | None = None


@dataclass
class _Gaps:
    """The cost model's R: tokens added between consecutive status updates (``decide_mode``)."""

    closed: list[int] = field(default_factory=list)  # sorted, for the median
    acc: int = 0
    seen: bool = False


class StatusBar:
    """Computes the status from the session's events and records it before each call."""

    def __init__(
        self,
        config: StatusConfig | None = None,
        todo: TodoList | None = None,
        clock: Callable[[], float] = time.time,
        cwd: str | None = None,
    ) -> None:
        self.config = config or StatusConfig()
        self.todo = todo
        self.clock = clock
        self.cwd = cwd or os.getcwd()
        self._env: dict[str, str] | None = None
        self._readings = EventFold(_Readings, self._read)
        self._key_args: dict[str, str] = dict(self.config.key_args)  # what the readings were counted by
        self._repeats = RepeatTracker()
        self._gaps: EventFold[_Gaps] | None = None
        self._gap_count: Callable[[str], int] | None = None

    def _read(self, r: _Readings, ev: Event) -> None:
        if isinstance(ev, AssistantEvent):
            for tc in ev.message.tool_calls:
                r.per_tool[tc.name] = r.per_tool.get(tc.name, 0) + 1
                kv = _key_value(tc, self._key_args.get(tc.name))
                if kv is not None:
                    r.per_key[(tc.name, kv)] = r.per_key.get((tc.name, kv), 0) + 1
        elif isinstance(ev, ToolEvent):
            if ev.elapsed_ms is not None:
                r.timed.append(ev)
            if not ev.ok:
                r.last_failed = ev
        elif isinstance(ev, BreakerEvent):
            r.last_breaker = ev

    def readings(self, session: Session) -> _Readings:
        if self.config.key_args != self._key_args:  # counted per another argument: count again
            self._key_args = dict(self.config.key_args)
            self._readings = EventFold(_Readings, self._read)
        return self._readings.over(session.events)

    # -- the state -----------------------------------------------------------------------
    def counters(self, session: Session) -> dict[str, str]:
        """Calls per tool and per (tool, key argument), with limits where configured."""
        r = self.readings(session)
        per_tool, per_key = r.per_tool, r.per_key
        out: dict[str, str] = {}
        for name, n in per_tool.items():
            out[name] = self._with_limit(name, n)
        for (name, kv), n in per_key.items():
            out[f"{name}[{kv}]"] = self._with_limit(f"{name}[{kv}]", n)
        return out

    def _with_limit(self, key: str, n: int) -> str:
        limit = self.config.limits.get(key)
        if limit is None:
            return f"{n} call{'s' if n != 1 else ''}"
        return f"{n}/{limit}" + (" limit reached" if n >= limit else f" ({limit - n} left)")

    def timings(self, session: Session) -> list[str]:
        out = []
        tool_events = self.readings(session).timed
        for ev in tool_events[-self.config.last_timings :]:
            name = ev.tool_name
            ms = ev.elapsed_ms or 0.0
            exp = self.config.expected_ms.get(name)
            out.append(f"{name}: {ms:.0f} ms" + (f", expected ~{exp:.0f} ms" if exp is not None else ""))
        return out

    def last_error(self, session: Session) -> str | None:
        """The latest failed tool call as ``tool: type: message``, read from its structured
        error body (``tools/registry.py``), after the timestamp the loop puts in front of
        every tool content with ``timestamps`` on (``agent/loop.py``)."""
        ev = self.readings(session).last_failed
        if ev is None:
            return None
        # the repeat note (core/repeats.py) may follow the error's JSON: read the JSON alone
        body = without_note(_STAMP.sub("", ev.message.content or "", count=1)).strip()
        try:
            parsed = json.loads(body or "{}")
        except json.JSONDecodeError:
            parsed = None
        err = parsed.get("error") if isinstance(parsed, dict) else None
        if isinstance(err, dict):
            kind, message = err.get("type") or ev.error_type or "error", err.get("message")
        else:  # not a structured error (a tool that failed with plain text): its text is the message
            kind, message = ev.error_type or "error", body
        text = " ".join(str(message or "").split()) or "(no message)"
        return f"{ev.tool_name}: {kind}: {text}"[:200]

    def repeated_call(self, session: Session) -> str | None:
        """While the latest tool call is one of more than ``max_repeats`` identical calls in
        a row (the loop's rule, ``core/repeats.py``): say so."""
        limit = self.config.max_repeats
        counts = self._repeats.tail(session.events, 1) if limit else []
        if not limit or not counts or counts[-1][1] <= limit:
            return None
        call, n = counts[-1]
        name, args = call_key(call)
        shown = args if len(args) <= 120 else args[:119] + "…"
        return (
            f"{name} {shown} called {n} times in a row (limit {limit}); its result will not change, "
            "and one more identical call ends the run"
        )

    def environment(self) -> dict[str, str]:
        if self._env is None:  # fixed for the session: computed once
            cwd, system, shell, python, git = ENV_KEYS
            env = {
                cwd: self.cwd,
                system: f"{platform.system()} {platform.release()}",
                shell: os.environ.get("SHELL", "unknown"),
                python: platform.python_version(),
            }
            branch = _git_branch(self.cwd)
            if branch:
                env[git] = branch
            self._env = env
        return self._env

    def values(
        self, session: Session, *, iteration: int | None = None, tokens_used: int | None = None
    ) -> dict[str, str]:
        """The status as ordered ``key: value`` pairs (only the configured items)."""
        c, items, v = self.config, self.config.items, {}
        now = self.clock()
        started = session.events[0].created_at if session.events else now
        if "counters" in items:
            for k, val in self.counters(session).items():
                v[f"calls.{k}"] = val
        if "repeats" in items:
            line = self.repeated_call(session)
            if line:
                v["repeated_call"] = line
        if "todo" in items and self.todo is not None:
            v["todo"] = self.todo.render()
        if "time" in items:
            v["time_now"] = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
            v["elapsed"] = f"{now - started:.0f} s since the session started"
        if "timing" in items:
            t = self.timings(session)
            if t:
                v["last_calls"] = "; ".join(t)
        if "error" in items:
            e = self.last_error(session)
            v["last_error"] = e or "none"
        if "env" in items or any(k in items for k in ENV_KEYS):
            for k, val in self.environment().items():
                if "env" in items or k in items:
                    v[k] = val
        if "compaction" in items:
            line = breaker_line(self.readings(session).last_breaker)
            if line:
                v["compaction"] = line
        if "budget" in items:
            if c.max_iterations is not None and iteration is not None:
                v["iterations_left"] = str(max(0, c.max_iterations - iteration + 1))
            if c.token_budget is not None and tokens_used is not None:
                v["tokens_left"] = f"{max(0, c.token_budget - tokens_used):,}"
            if c.wall_budget_s is not None:
                v["time_left"] = f"{max(0.0, c.wall_budget_s - (now - started)):.0f} s"
        return v

    @staticmethod
    def render(values: dict[str, Any]) -> str:
        return "\n".join([STATUS_OPEN, *(f"{k}: {val}" for k, val in values.items()), STATUS_CLOSE])

    # -- the update ----------------------------------------------------------------------
    def decide_mode(self, session: Session, status_tokens: int, count: Callable[[str], int]) -> str:
        """``replace`` or ``append``: the configured one, or the cost model on measured sizes."""
        if self.config.mode != "auto":
            return self.config.mode
        # R: tokens added between consecutive status updates, measured on this session
        if self._gaps is None or count != self._gap_count:
            self._gap_count = count

            def step(g: _Gaps, ev: Event) -> None:
                if isinstance(ev, StatusEvent):
                    if g.seen:
                        bisect.insort(g.closed, g.acc)
                    g.acc, g.seen = 0, True
                elif isinstance(ev, MessageEvent):
                    g.acc += count(ev.message.content or "") + sum(count(tc.arguments) for tc in ev.message.tool_calls)

            self._gaps = EventFold(_Gaps, step)
        g = self._gaps.over(session.events)
        R = _median_with(g.closed, g.acc if g.seen else None, empty=g.acc)
        N = self.config.expected_updates or self.config.max_iterations or 20
        return choose_mode(status_tokens, R, N, self.config.alpha)

    def record(
        self,
        session: Session,
        *,
        iteration: int | None = None,
        tokens_used: int | None = None,
        count: Callable[[str], int] = lambda t: len(t) // 4,
    ) -> Message:
        """Compute the status, choose the mode, append it as a ``status`` event."""
        text = self.render(self.values(session, iteration=iteration, tokens_used=tokens_used))
        replace = self.decide_mode(session, count(text), count) == "replace"
        msg = Message(role="user", content=text)
        session.append(StatusEvent(message=msg, mode="replace" if replace else "append"))
        return msg


def _median_with(closed: list[int], extra: int | None, *, empty: int) -> float:
    """``statistics.median`` of the sorted ``closed`` with ``extra`` inserted where ``insort``
    would put it (``empty`` when there is nothing at all), without copying the list: the gaps
    are as many as the session's turns."""
    p = bisect.bisect_right(closed, extra) if extra is not None else len(closed)
    n = len(closed) + (extra is not None)
    if not n:
        return empty

    def at(j: int) -> int:
        return closed[j] if j < p else extra if j == p and extra is not None else closed[j - 1]

    if n % 2:
        return at(n // 2)
    return (at(n // 2 - 1) + at(n // 2)) / 2


def compaction_line(session: Session) -> str | None:
    """While the LLM-compaction breaker is open (its last ``breaker`` event): say so."""
    return breaker_line(next((ev for ev in reversed(session.events) if isinstance(ev, BreakerEvent)), None))


def breaker_line(last: BreakerEvent | None) -> str | None:
    """The status line for the session's last ``breaker`` event (``None``: there is none)."""
    if last is None or last.state != "open":
        return None
    return (
        f"LLM summaries paused after {last.failures} failures ({last.reason}); using clearing and trim; "
        f"next try at call {last.retry_at_call}"
    )
