"""Per-turn CPU of ctxwright over a long session, against a bare loop.

A session is one model call after another over a history that only grows; if each turn
re-does work over the whole history (encode it, count it, hash it, scan it), the cost of a
turn grows with the session and a long session gets slower turn by turn. This benchmark
runs a long session through the Harness -- SQLite store, status bar, compaction on, a few
tools, a skills catalog and one ``Skill`` load -- on the scripted backend (no model time),
and measures each turn's CPU time:

* a turn is everything between two model calls: the tool calls of the reply and their
  results, the status bar, the compaction layers, rendering, the ledger, the audit, the
  store writes. ``time.process_time()`` is read as the backend call starts and as it
  returns; a turn's CPU is the time from one return to the next start, so the scripted
  backend's own work (which compares each request with the last, message by message) is not
  counted. The loop's own ``overhead_ms`` (wall time, measured inside the loop) is
  reported too.
* the same session again on a **lean model**: the scripted backend's reply without its
  prefix-cache simulation, which encodes every request and compares it with the last one
  message by message in this process -- work that grows with the session and is not
  counted, but leaves the CPU caches cold for the turn that follows (a real model runs in
  another process, or on another machine). The targets are judged on the first row.
* the **bare loop** does the minimum any agent loop does with the same conversation:
  append the assistant turn and its tool results to a list and serialise the request
  (``json.dumps`` of the messages and the tools) each turn. Its cost grows with the
  history, linearly in bytes; it is the floor to compare with.

Reported: the median CPU of turns 1-50 and of the last 50 turns, their ratio, for both.
Targets: the last 50 within 1.2x of the first 50, and under 1 ms median.

    python benchmarks/per_turn.py [--turns 200] [--no-skills] [--json PATH] [--profile PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from common import console, machine, save, table
from ctxwright.backends.scripted import ScriptedBackend, call
from ctxwright.core.messages import Message, Usage
from ctxwright.core.progress import EventSink
from ctxwright.core.request import ChatRequest, Completion
from ctxwright.harness import Harness
from ctxwright.tools.registry import tool

SYSTEM = "You are a research agent. Use the tools, keep notes short, answer with sources."
TASK = "Collect the weather, the time and one archive note for each of the cities in the list."
CITIES = ["Oslo", "Bergen", "Tromso", "Lima", "Quito", "Cusco", "Kyoto", "Osaka", "Nara", "Porto"]


@tool
def weather(city: str, day: int = 0) -> str:
    """Today's weather in a city.

    Args:
        city: the city's name
        day: days from today
    """
    t = (sum(map(ord, city)) + 7 * day) % 30
    return f"{city}, day {day}: {t} C, wind {t % 9} m/s, humidity {40 + t}%, clear skies until the evening."


@tool
def clock(city: str) -> str:
    """The local time in a city.

    Args:
        city: the city's name
    """
    return f"local time in {city}: {sum(map(ord, city)) % 24:02d}:{len(city) * 7 % 60:02d}"


@tool
def archive(query: str, page: int = 1) -> str:
    """Search the archive; one page of results.

    Args:
        query: what to look for
        page: result page
    """
    return "\n".join(f"hit {page}.{i}: note about {query}, filed under A{page * 10 + i}" for i in range(6))


def plan(turns: int, with_skill: bool) -> list[list[tuple[str, dict[str, Any]]]]:
    """Each turn's tool calls: one or two, never the same call twice in a row."""
    rounds: list[list[tuple[str, dict[str, Any]]]] = []
    for k in range(turns):
        city = CITIES[k % len(CITIES)]
        if with_skill and k == 3:
            rounds.append([("Skill", {"name": "city-notes"})])
        elif k % 3 == 0:
            rounds.append([("weather", {"city": city, "day": k}), ("clock", {"city": city})])
        elif k % 3 == 1:
            rounds.append([("archive", {"query": f"{city} history", "page": k})])
        else:
            rounds.append([("weather", {"city": city, "day": k})])
    return rounds


class Policy:
    """The scripted model: the plan's calls, a short note now and then, then an answer."""

    def __init__(self, rounds: list[list[tuple[str, dict[str, Any]]]]) -> None:
        self.rounds = rounds
        self.i = 0

    def __call__(self, request: ChatRequest) -> Message:
        if self.i >= len(self.rounds):
            return Message(role="assistant", content="Done: every city's weather, time and notes are above.")
        batch = self.rounds[self.i]
        self.i += 1
        calls = tuple(call(name, args, f"c{self.i}_{j}") for j, (name, args) in enumerate(batch))
        note = f"Turn {self.i}: checking {batch[0][1].get('city') or batch[0][1].get('query')}." if self.i % 4 else None
        return Message(role="assistant", content=note, tool_calls=calls)


class TimedBackend(ScriptedBackend):
    """The scripted backend, with the process CPU clock read around each call. ``lean``: the
    reply without the scripted backend's prefix-cache simulation (it encodes the whole request
    and compares it with the last one message by message, in this process: work that grows
    with the session and, though not counted, leaves the CPU caches cold for what runs next)."""

    def __init__(self, policy: Policy, lean: bool = False) -> None:
        super().__init__([policy], model="scripted-plan")
        self.spans: list[tuple[float, float]] = []
        self.lean = lean
        self.policy = policy

    def complete(self, request: ChatRequest, *, on_event: EventSink | None = None) -> Completion:
        t_in = time.process_time()
        try:
            if not self.lean:
                return super().complete(request, on_event=on_event)
            msg = self.policy(request)
            usage = Usage(prompt_tokens=None, completion_tokens=None)
            return Completion(msg, usage, "tool_calls" if msg.tool_calls else "stop", self.model)
        finally:
            self.spans.append((t_in, time.process_time()))


def turn_cpu_ms(spans: list[tuple[float, float]]) -> list[float]:
    """CPU of each turn between two model calls: from one call's return to the next call's start."""
    return [(spans[k + 1][0] - spans[k][1]) * 1000 for k in range(len(spans) - 1)]


def make_skills(root: Path) -> list[Path]:
    out = []
    for name, body in [
        ("city-notes", "Write one line per city: weather, local time, one archive note with its filing code."),
        ("pdf-tools", "Extract text from PDF files with the bundled script, then summarise each section."),
        ("travel-plans", "Plan a trip: list the cities in order, the days in each, and the travel between them."),
    ]:
        folder = root / name
        folder.mkdir(parents=True)
        (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: Use for {name} tasks.\n---\n{body}\n")
        out.append(folder)
    return [root]


def harness_run(
    turns: int, skills: bool, window: int, work: Path, profile: str | None, lean: bool = False
) -> dict[str, Any]:
    rounds = plan(turns, skills)
    backend = TimedBackend(Policy(rounds), lean)
    h = Harness(
        SYSTEM,
        [weather, clock, archive],
        backend=backend,
        db=work / f"per_turn{'_lean' if lean else ''}.db",
        window=window,
        compaction=True,
        status=True,
        skills=make_skills(work / ("skills_lean" if lean else "skills")) if skills else None,
        max_iterations=turns + 2,
        tool_timeout=30,
    )
    try:
        if profile:
            import cProfile

            prof = cProfile.Profile()
            prof.enable()
            result = h.run(TASK)
            prof.disable()
            prof.dump_stats(profile)
        else:
            result = h.run(TASK)
        events = len(h.session.events)
    finally:
        h.close()
    cpu = turn_cpu_ms(backend.spans)[:turns]
    overhead = [c.overhead_ms for c in result.calls if c.overhead_ms is not None][1 : turns + 1]
    return {
        "stop_reason": result.stop_reason,
        "model_calls": len(result.calls),
        "events": events,
        "compactions": sum(len(c.compactions) for c in result.calls),
        "last_prompt_tokens": result.calls[-1].prompt_tokens,
        "cpu_ms": cpu,
        "overhead_ms": overhead,
    }


def bare_run(turns: int) -> list[float]:
    """The same conversation's shape, serialised each turn by a loop that does nothing else."""
    rounds = plan(turns, False)
    policy = Policy(rounds)
    tools = [t.to_wire() for t in (weather.spec, clock.spec, archive.spec)]
    fns = {"weather": weather.func, "clock": clock.func, "archive": archive.func}
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
    sent: list[bytes] = []
    spans: list[tuple[float, float]] = []
    dummy = ChatRequest(messages=())
    for _ in range(turns + 1):
        body = json.dumps({"model": "m", "messages": messages, "tools": tools, "tool_choice": "auto"}).encode()
        sent.append(body)
        t_in = time.process_time()
        reply = policy(dummy)
        spans.append((t_in, time.process_time()))
        wire: dict[str, Any] = {"role": "assistant", "content": reply.content or ""}
        if reply.tool_calls:
            wire["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in reply.tool_calls
            ]
        messages.append(wire)
        for c in reply.tool_calls:
            out = fns[c.name](**json.loads(c.arguments))
            messages.append({"role": "tool", "tool_call_id": c.id, "content": out})
    return turn_cpu_ms(spans)[:turns]


def summary(xs: list[float], turns: int) -> dict[str, float]:
    first, last = xs[:50], xs[max(50, turns - 50) :]
    a, b = statistics.median(first), statistics.median(last)
    return {"first_50_ms": round(a, 4), "last_50_ms": round(b, 4), "ratio": round(b / a, 3) if a else float("nan")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--turns", type=int, default=200, help="model calls with tool calls (at least 100)")
    p.add_argument("--window", type=int, default=131_072, help="the context window the compaction plans for")
    p.add_argument("--no-skills", action="store_true", help="no skills catalog and no Skill load")
    p.add_argument("--profile", metavar="PATH", help="write a cProfile of the Harness run here")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args()
    if args.turns < 100:
        p.error("--turns: at least 100 (two windows of 50 turns)")

    work = Path(tempfile.mkdtemp(prefix="ctxwright-per-turn-"))
    load = os.getloadavg()
    t0 = time.perf_counter()
    run = harness_run(args.turns, not args.no_skills, args.window, work, args.profile)
    lean = harness_run(args.turns, not args.no_skills, args.window, work, None, lean=True)
    bare = bare_run(args.turns)
    wall = time.perf_counter() - t0
    cw, ow, bw = summary(run["cpu_ms"], args.turns), summary(run["overhead_ms"], args.turns), summary(bare, args.turns)
    lw = summary(lean["cpu_ms"], args.turns)
    data = {
        "turns": args.turns,
        "window": args.window,
        "skills": not args.no_skills,
        "stop_reason": run["stop_reason"],
        "model_calls": run["model_calls"],
        "events": run["events"],
        "compactions": run["compactions"],
        "last_prompt_tokens": run["last_prompt_tokens"],
        "ctxwright_cpu": cw,
        "ctxwright_overhead_wall": ow,
        "ctxwright_cpu_lean_model": lw,
        "bare_loop_cpu": bw,
        "flat": cw["ratio"] <= 1.2,
        "under_1ms": cw["last_50_ms"] < 1.0,
        "loadavg_1_5_15": [round(x, 2) for x in load],
        "wall_s": round(wall, 2),
        "machine": machine(),
    }
    last = f"turns {max(51, args.turns - 49)}-{args.turns}"
    console.print(
        table(
            f"per_turn · {args.turns} turns · {run['events']} events · {run['compactions']} compactions · "
            f"load {load[0]:.2f} · {wall:.1f} s",
            ["loop", "turns 1-50 (ms)", f"{last} (ms)", "ratio"],
            [
                ["ctxwright CPU", cw["first_50_ms"], cw["last_50_ms"], cw["ratio"]],
                ["ctxwright overhead_ms (wall)", ow["first_50_ms"], ow["last_50_ms"], ow["ratio"]],
                ["ctxwright CPU, lean model (no prefix simulation)", lw["first_50_ms"], lw["last_50_ms"], lw["ratio"]],
                ["bare loop CPU (json.dumps)", bw["first_50_ms"], bw["last_50_ms"], bw["ratio"]],
            ],
        )
    )
    for ok, what in [
        (data["flat"], f"ctxwright {last} within 1.2x of turns 1-50 (ratio {cw['ratio']})"),
        (data["under_1ms"], f"ctxwright median CPU under 1 ms at {last} ({cw['last_50_ms']} ms)"),
    ]:
        console.print(("[green]PASS[/] " if ok else "[red]FAIL[/] ") + what)
    save(args, data)


if __name__ == "__main__":
    main()
