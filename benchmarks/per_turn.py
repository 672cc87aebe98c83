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

**Through the openai SDK** (``--sdk-rounds``, default 1; 0 leaves it out): a loop of one's
own calls ``client.chat.completions.create`` each turn, and at 200 turns the SDK's own work
on the request (its request transform walks every key of every message) is most of a turn's
CPU. Three loops run in lockstep -- turn k of each, one after the other, the order rotating
each turn, so a burst of load on the shared machine falls on all three alike -- against an
in-process stand-in server (an ``httpx.MockTransport`` answering each call with a reply made
before any timing, so no network time and no server CPU is counted):

* the **bare SDK loop**, the floor: it builds the same messages itself (the reply appended as
  the server needs it, no ``content`` key on a tool-call turn without text; each tool run and
  its result appended) and sends them with the same tools and options;
* **Context + SDK**: ``ctx.request()`` -> ``create`` -> ``ctx.record(reply)`` ->
  ``ctx.run_tools(step)`` (SQLite store, compaction on), the session's wire form of a
  tool-call turn without text ``omit`` (the form OpenAI takes);
* the same with the form ``empty`` (``"content": ""``, the default where the server is not
  known), to show what that key costs in the SDK.

A turn's CPU is ``time.process_time()`` around the whole turn (the SDK call, the reply's
parsing, the tools, ctxwright's work). Checked: the bare loop's last request holds the same
messages and tools as the Context's. Target: Context + SDK within 1.1x of the bare loop's
median CPU per turn over the last 50 turns. Also reported: the SDK's request transform of
each loop's last request, alone.

    python benchmarks/per_turn.py [--turns 200] [--no-skills] [--sdk-rounds 1] [--json PATH] [--profile PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
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


# -- through the openai SDK ---------------------------------------------------------------------

SDK_MODEL = "gpt-4o-mini"


def sdk_replies(turns: int) -> list[bytes]:
    """The chat-completion JSON the stand-in server answers each call with, made before any
    timing: the plan's tool calls (a short note on three turns of four), then an answer."""
    policy = Policy(plan(turns, False))
    dummy = ChatRequest(messages=())
    out = []
    for k in range(turns + 1):
        reply = policy(dummy)
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = [c.to_wire() for c in reply.tool_calls]
        body = {
            "id": f"chatcmpl-{k}",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": SDK_MODEL,
            "choices": [
                {"index": 0, "message": message, "finish_reason": "tool_calls" if reply.tool_calls else "stop"}
            ],
            "usage": {"prompt_tokens": 100 + 120 * k, "completion_tokens": 20, "total_tokens": 120 + 120 * k},
        }
        out.append(json.dumps(body).encode())
    return out


class StandIn:
    """The server, in process and as cheap as can be: an ``httpx.MockTransport`` that answers
    call k with reply k, and keeps the raw request bodies (for the check that both loops sent
    the same messages) without parsing them."""

    def __init__(self, replies: list[bytes]) -> None:
        self.replies = replies
        self.bodies: list[bytes] = []

    def __call__(self, request: Any) -> Any:
        import httpx

        self.bodies.append(request.content)
        return httpx.Response(
            200, content=self.replies[len(self.bodies) - 1], headers={"content-type": "application/json"}
        )

    def client(self) -> Any:
        import httpx
        import openai

        return openai.OpenAI(
            api_key="sk-bench", max_retries=0, http_client=httpx.Client(transport=httpx.MockTransport(self))
        )


def context_sdk_loop(server: StandIn, work: Path, form: str) -> Iterator[None]:
    """A loop of one's own around the SDK, with ctxwright's ``Context`` deciding the request:
    ``ctx.request()`` -> ``client.chat.completions.create`` -> ``ctx.record`` -> ``ctx.run_tools``
    (SQLite store, compaction on, the defaults of a context without a backend of its own).
    ``form``: the session's wire form of a tool-call turn without text (``core/render.py``).
    Yields after each turn."""
    from ctxwright import Context
    from ctxwright.backends.external import ExternalBackend

    client = server.client()
    backend = ExternalBackend(SDK_MODEL, null_content=form)
    with Context(SYSTEM, [weather, clock, archive], backend=backend, db=work / f"sdk_{form}.db") as ctx:
        ctx.add_user(TASK)
        while True:
            reply = client.chat.completions.create(model=SDK_MODEL, **ctx.request())
            step = ctx.record(reply)
            if step.tool_calls:
                ctx.run_tools(step)
            yield
            if not step.tool_calls:
                break
    client.close()


def bare_sdk_loop(server: StandIn) -> Iterator[None]:
    """The floor: a bare loop around the SDK that builds the same messages itself -- the reply
    appended as the server needs it (no ``content`` key on a tool-call turn without text),
    each tool run and its result appended -- and sends them with the same tools and options.
    Yields after each turn."""
    client = server.client()
    tools = [t.to_wire() for t in (weather.spec, clock.spec, archive.spec)]
    fns = {"weather": weather.func, "clock": clock.func, "archive": archive.func}
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
    while True:
        reply = client.chat.completions.create(
            model=SDK_MODEL,
            messages=messages,
            tools=tools,
            tool_choice="auto",
            max_tokens=256,
            temperature=0.0,
        )
        msg = reply.choices[0].message
        calls = msg.tool_calls or []
        wire: dict[str, Any] = {"role": "assistant"}
        if msg.content is not None:
            wire["content"] = msg.content
        if calls:
            wire["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": c.function.arguments},
                }
                for c in calls
            ]
        messages.append(wire)
        for c in calls:
            out = fns[c.function.name](**json.loads(c.function.arguments))
            messages.append({"role": "tool", "tool_call_id": c.id, "content": out})
        yield
        if not calls:
            break
    client.close()


def sent(server: StandIn, k: int) -> dict[str, Any]:
    """The messages and tools of request ``k`` as the stand-in server received them."""
    body = json.loads(server.bodies[k])
    return {"messages": body["messages"], "tools": body.get("tools")}


def transform_ms(requests: dict[str, list[dict[str, Any]]], repeats: int = 7) -> dict[str, float]:
    """The SDK's own request transform (what ``create`` runs over every message) of each
    loop's last request, by name: the fastest of ``repeats`` tries, the loops interleaved."""
    from openai._utils._transform import maybe_transform
    from openai.types.chat import completion_create_params

    params = completion_create_params.CompletionCreateParamsNonStreaming
    times: dict[str, list[float]] = {name: [] for name in requests}
    for _ in range(repeats):
        for name, messages in requests.items():
            t = time.process_time()
            maybe_transform({"messages": messages, "model": SDK_MODEL}, params)
            times[name].append((time.process_time() - t) * 1000)
    return {name: round(min(ts), 2) for name, ts in times.items()}


def sdk_compare(turns: int, work: Path, rounds: int) -> dict[str, Any]:
    """The three loops in lockstep: turn k of each, one after the other (the order rotating
    each turn), so a burst of load on the shared machine falls on all three alike; per loop
    the median over rounds of each window's median turn. The target: ``Context`` + SDK (form
    ``omit``) within 1.1x of the bare loop's CPU per turn at the last 50 turns."""
    replies = sdk_replies(turns)
    names = ("bare", "omit", "empty")
    runs: dict[str, list[list[float]]] = {n: [] for n in names}
    servers: dict[str, StandIn] = {}
    for r in range(rounds):
        folder = work / f"round{r}"
        folder.mkdir(parents=True, exist_ok=True)
        servers = {n: StandIn(replies) for n in names}
        loops = {
            "bare": bare_sdk_loop(servers["bare"]),
            "omit": context_sdk_loop(servers["omit"], folder, "omit"),
            "empty": context_sdk_loop(servers["empty"], folder, "empty"),
        }
        cpu: dict[str, list[float]] = {n: [] for n in names}
        for k in range(turns):
            for n in names[k % 3 :] + names[: k % 3]:
                t = time.process_time()
                next(loops[n])
                cpu[n].append((time.process_time() - t) * 1000)
        for n in names:
            for _ in loops[n]:  # the answer turn, and the context's close
                pass
            runs[n].append(cpu[n])
    last = turns - 1
    same = sent(servers["bare"], last) == sent(servers["omit"], last)
    out: dict[str, Any] = {"rounds": rounds, "same_messages_and_tools_as_bare": same}
    transform = transform_ms({n: sent(servers[n], last)["messages"] for n in names})
    # the same request with no text on any tool-call turn, each form: what the key alone costs
    bare_turns = [
        {k: v for k, v in m.items() if k != "content"} if m.get("tool_calls") else m
        for m in sent(servers["bare"], last)["messages"]
    ]
    out["sdk_transform_no_text_turns_ms"] = transform_ms(
        {"omit": bare_turns, "empty": [{**m, "content": ""} if m.get("tool_calls") else m for m in bare_turns]}
    )
    for name, per_round in runs.items():
        sums = [summary(xs, turns) for xs in per_round]
        out[name] = {
            "first_50_ms": round(statistics.median(s["first_50_ms"] for s in sums), 3),
            "last_50_ms": round(statistics.median(s["last_50_ms"] for s in sums), 3),
            "mean_ms": round(statistics.median(statistics.fmean(xs) for xs in per_round), 3),
            "last_50_ms_rounds": [s["last_50_ms"] for s in sums],
            "request_bytes": len(servers[name].bodies[last]),
            "sdk_transform_ms": transform[name],
        }
    for name in ("omit", "empty"):
        out[f"ratio_{name}"] = round(out[name]["last_50_ms"] / out["bare"]["last_50_ms"], 3)
        out[f"ratio_{name}_mean"] = round(out[name]["mean_ms"] / out["bare"]["mean_ms"], 3)
    out["within_1_1x"] = out["ratio_omit"] <= 1.1
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--turns", type=int, default=200, help="model calls with tool calls (at least 100)")
    p.add_argument("--window", type=int, default=131_072, help="the context window the compaction plans for")
    p.add_argument("--no-skills", action="store_true", help="no skills catalog and no Skill load")
    p.add_argument("--profile", metavar="PATH", help="write a cProfile of the Harness run here")
    p.add_argument(
        "--sdk-rounds", type=int, default=1, help="interleaved rounds of the openai-SDK loops (0: leave them out)"
    )
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
    sdk = sdk_compare(args.turns, work / "sdk", args.sdk_rounds) if args.sdk_rounds > 0 else None
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
        "sdk": sdk,
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
    if sdk is not None:
        rows = []
        for key, label in [
            ("bare", "bare openai-SDK loop (no content key on a tool-call turn)"),
            ("omit", 'Context + SDK, null_content="omit"'),
            ("empty", 'Context + SDK, null_content="empty" ("content": "")'),
        ]:
            r = sdk[key]
            ratio = sdk.get(f"ratio_{key}", 1.0)
            rows.append(
                [
                    label,
                    r["first_50_ms"],
                    r["last_50_ms"],
                    r["mean_ms"],
                    ratio,
                    r["sdk_transform_ms"],
                    r["request_bytes"],
                ]
            )
        console.print(
            table(
                f"per turn through the openai SDK · {args.turns} turns · {sdk['rounds']} interleaved rounds",
                [
                    "loop",
                    "turns 1-50 (ms)",
                    f"{last} (ms)",
                    "mean (ms)",
                    f"x bare at {last}",
                    "SDK transform of the last request (ms)",
                    "last request (bytes)",
                ],
                rows,
            )
        )
        if not sdk["same_messages_and_tools_as_bare"]:
            console.print(
                "[yellow]note[/] the bare loop's last request holds other messages or tools than the Context's"
            )
        console.print(
            ("[green]PASS[/] " if sdk["within_1_1x"] else "[red]FAIL[/] ")
            + f"Context + SDK within 1.1x of the bare SDK loop's CPU per turn at {last} (x{sdk['ratio_omit']})"
        )
    save(args, data)


if __name__ == "__main__":
    main()
