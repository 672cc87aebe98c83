"""What `ctxwright gate` adds to each replayed model call, side by side with a plain fake.

One agent (the official ``openai`` SDK, chat completions, in this process) walks the same
recorded conversation -- a system prompt of ~2,000 tokens, six tools, one tool call per reply,
the history growing by two messages a call -- against two loopback servers on the same
uvicorn setup (``proxy/server.py: ProxyThread``):

* **plain fake**: a Starlette app that parses the request and answers the precomputed reply
  for its position (the number of assistant turns it holds) -- what a hand-written test fake does;
* **gate**: the replay server (``replay/server.py``: matching, the providers' validation, the
  trace written to disk), then the judge (``ci/judge.py``) over the run, timed apart.

Rounds alternate fake, gate, fake, gate ... in one run, so both see the same machine load.
Added per call = median gate latency - median fake latency + judge time / calls. Target: under
5 ms per replayed call.

    python benchmarks/gate_overhead.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import openai
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from common import console, machine, save, table
from ctxwright.ci.gate import golden_calls, run_calls
from ctxwright.ci.judge import judge
from ctxwright.proxy.server import ProxyThread
from ctxwright.replay.golden import load_golden
from ctxwright.replay.server import ReplayServer

TARGET_MS = 5.0
MODEL = "bench-model"
SYSTEM = "\n\n".join(
    f"## Section {i}\n" + " ".join(f"Rule {i}.{j}: keep the prefix byte-identical on every call." for j in range(12))
    for i in range(12)
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": f"tool_{i}",
            "description": f"Tool number {i}: reads part {i} of the workspace and returns it as text.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
                "required": ["path"],
            },
        },
    }
    for i in range(6)
]


def reply(i: int, calls: int) -> dict[str, Any]:
    """The recorded reply of call ``i``: a tool call, the last one an answer."""
    message: dict[str, Any] = {"role": "assistant", "content": f"step {i}"}
    if i < calls - 1:
        message["tool_calls"] = [
            {
                "id": f"call_{i:04d}",
                "type": "function",
                "function": {"name": f"tool_{i % 6}", "arguments": json.dumps({"path": f"src/f{i}.py"})},
            }
        ]
    return {
        "id": f"chatcmpl-{i}",
        "object": "chat.completion",
        "created": 1,
        "model": MODEL,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if i < calls - 1 else "stop"}],
        "usage": {"prompt_tokens": 2000 + 40 * i, "completion_tokens": 20, "total_tokens": 2020 + 40 * i},
    }


def tool_result(i: int) -> str:
    return f"contents of src/f{i}.py: " + "x = 1\n" * 20


def golden_records(calls: int) -> list[dict[str, Any]]:
    """The golden: the conversation as recorded, one ``{"request", "response"}`` per call."""
    history: list[dict[str, Any]] = [{"role": "user", "content": "Read the workspace and summarise it."}]
    out = []
    for i in range(calls):
        body = {"model": MODEL, "messages": [{"role": "system", "content": SYSTEM}, *history], "tools": TOOLS}
        rep = reply(i, calls)
        out.append({"request": json.loads(json.dumps(body)), "response": rep})
        msg = rep["choices"][0]["message"]
        history.append(msg)
        for tc in msg.get("tool_calls", []):
            history.append({"role": "tool", "tool_call_id": tc["id"], "content": tool_result(i)})
    return out


def agent(base_url: str, calls: int) -> list[float]:
    """The agent under test: each call's latency at the client, in ms."""
    client = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0)
    history: list[dict[str, Any]] = [{"role": "user", "content": "Read the workspace and summarise it."}]
    took = []
    for i in range(calls):
        t0 = time.perf_counter()
        r = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "system", "content": SYSTEM}, *history],  # type: ignore[list-item]
            tools=TOOLS,  # type: ignore[arg-type]
        )
        took.append((time.perf_counter() - t0) * 1000)
        msg = r.choices[0].message
        turn: dict[str, Any] = {"role": "assistant", "content": msg.content}
        if msg.tool_calls:
            turn["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": c.function.arguments},
                }
                for c in msg.tool_calls
                if c.type == "function"
            ]
        history.append(turn)
        for tc in turn.get("tool_calls", []):
            history.append({"role": "tool", "tool_call_id": tc["id"], "content": tool_result(i)})
    return took


def fake_app(records: list[dict[str, Any]]) -> Starlette:
    answers = [json.dumps(r["response"]).encode() for r in records]

    async def endpoint(request: Request) -> Response:
        body = json.loads(await request.body())
        i = sum(1 for m in body["messages"] if m.get("role") == "assistant")
        return Response(answers[min(i, len(answers) - 1)], media_type="application/json")

    return Starlette(routes=[Route("/v1/chat/completions", endpoint, methods=["POST"])])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="20 calls x 3 rounds")
    p.add_argument("--calls", type=int, default=None)
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    calls = args.calls or (20 if args.quick else 60)
    rounds = args.rounds or (3 if args.quick else 7)
    records = golden_records(calls)
    tmp = Path(tempfile.mkdtemp(prefix="gate-bench-"))
    golden_path = tmp / "golden.jsonl"
    golden_path.write_text("".join(json.dumps(r) + "\n" for r in records))
    golden = load_golden(golden_path)
    expected, _ = golden_calls(golden)
    fake_ms: list[float] = []
    gate_ms: list[float] = []
    judge_ms: list[float] = []
    regressions: list[int] = []
    started = time.perf_counter()
    with ProxyThread(fake_app(records)) as fake:
        for r in range(rounds):
            fake_ms += agent(fake.url + "/v1", calls)
            with ReplayServer.start(golden, trace=tmp / f"trace-{r}.jsonl") as srv:
                gate_ms += agent(srv.url + "/v1", calls)
                t0 = time.perf_counter()
                got, _ = run_calls(srv)
                j = judge(expected, got)
                judge_ms.append((time.perf_counter() - t0) * 1000)
                regressions.append(len(j.regressions) + len(j.unjudged) + len(srv.divergences))
    wall = time.perf_counter() - started
    f_med, g_med = statistics.median(fake_ms), statistics.median(gate_ms)
    judge_per_call = statistics.median(judge_ms) / calls
    added = g_med - f_med + judge_per_call
    result = {
        "machine": machine(),
        "calls_per_round": calls,
        "rounds": rounds,
        "request_bytes_last_call": len(json.dumps(records[-1]["request"])),
        "fake_ms_median": round(f_med, 3),
        "gate_ms_median": round(g_med, 3),
        "fake_ms_p90": round(sorted(fake_ms)[int(0.9 * len(fake_ms))], 3),
        "gate_ms_p90": round(sorted(gate_ms)[int(0.9 * len(gate_ms))], 3),
        "judge_ms_per_run_median": round(statistics.median(judge_ms), 3),
        "judge_ms_per_call": round(judge_per_call, 3),
        "added_ms_per_call": round(added, 3),
        "target_ms": TARGET_MS,
        "pass": added < TARGET_MS,
        "runs_with_a_regression_or_divergence": sum(1 for n in regressions if n),
        "wall_s": round(wall, 2),
    }
    console.print(
        table(
            f"ctxwright gate vs a plain fake: {calls} calls x {rounds} rounds, alternating",
            ["", "median ms/call", "p90 ms/call"],
            [
                ["plain fake", f"{f_med:.2f}", f"{result['fake_ms_p90']:.2f}"],
                ["replay (trace on)", f"{g_med:.2f}", f"{result['gate_ms_p90']:.2f}"],
                ["judge, per call", f"{judge_per_call:.2f}", ""],
                [
                    "added by the gate",
                    f"{added:.2f}",
                    f"target < {TARGET_MS:g}: {'PASS' if result['pass'] else 'FAIL'}",
                ],
            ],
        )
    )
    console.print(
        f"last request {result['request_bytes_last_call']:,} bytes; runs with a regression or divergence "
        f"(must be 0): {result['runs_with_a_regression_or_divergence']}; wall {wall:.1f} s"
    )
    save(args, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
