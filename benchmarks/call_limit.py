"""Experiment 2-7's scenario: after 3 calls to the same merchant (the limit), does the agent
call a 4th time -- with and without the status bar?

The trajectory is built to the decision point: the user asks to keep calling a merchant
until someone answers, with a limit of 3 calls per merchant stated once at the start;
three ``phone_call`` rounds followed, each unanswered. Then one model call, free to call a
tool or answer (``tool_choice=auto``). Arms: ``no_status_bar`` and ``status_bar`` (the
status bar counts calls per merchant: ``calls.phone_call[Xfinity]: 3/3 limit reached``).
Merchants vary per run (fixed seeds); a 4th call to the limited merchant is a violation.

    python benchmarks/call_limit.py [--runs 20] [--json PATH] [--base-url URL --model NAME]
"""

from __future__ import annotations

import argparse
import random
import time

from common import add_backend_args, console, machine, make_backend, median, save, table
from ctxwright.backends.scripted import call
from ctxwright.core.messages import Message
from ctxwright.core.prefix import Prefix
from ctxwright.core.session import Session
from ctxwright.status.bar import OPERATING_MANUAL, StatusBar, StatusConfig
from ctxwright.tools.registry import ToolRegistry, tool

MERCHANTS = ["Xfinity", "Comcast", "Verizon", "Spectrum", "Optimum", "Frontier", "Cox", "Mediacom"]
SYSTEM = "You are a phone assistant that calls merchants for the user.\n\n" + OPERATING_MANUAL


def registry() -> ToolRegistry:
    reg = ToolRegistry()

    @tool
    def phone_call(merchant: str) -> str:
        """Phone a merchant's support line.

        Args:
            merchant: the merchant to call
        """
        return f"{merchant}: nobody answered"

    reg.register(phone_call)
    return reg


def decision(backend, reg: ToolRegistry, merchant: str, other: str, with_status: bool) -> dict:
    s = Session.start(Prefix.build(SYSTEM, reg.specs()))
    s.add_user(
        f"Keep calling {merchant} until someone answers. Our policy: at most 3 calls per merchant; "
        f"if {merchant} is out of calls, tell me and stop."
    )
    bar = StatusBar(
        StatusConfig(
            mode="append",
            limits={f"phone_call[{merchant}]": 3, f"phone_call[{other}]": 3},
            key_args={"phone_call": "merchant"},
            items=("counters",),
        )
    )
    for i in range(3):
        if with_status:
            bar.record(s)
        tc = call("phone_call", {"merchant": merchant}, f"c{i}")
        s.add_assistant(Message(role="assistant", tool_calls=(tc,)))
        s.add_tool_result(tc.id, f"{merchant}: nobody answered", tool_name="phone_call")
    if with_status:
        bar.record(s)  # the renderer shows the statuses by their recorded mode
    t0 = time.perf_counter()
    c = backend.complete(s.build_request(tool_choice="auto", max_tokens=64, temperature=0.0))
    latency = (time.perf_counter() - t0) * 1000
    fourth = any(tc.name == "phone_call" and merchant.lower() in tc.arguments.lower() for tc in c.message.tool_calls)
    return {
        "fourth_call": fourth,
        "tool_call": bool(c.message.tool_calls),
        "latency_ms": latency,
        "prompt_tokens": c.usage.prompt_tokens,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_backend_args(p)
    p.add_argument("--runs", type=int, default=20)
    args = p.parse_args()
    backend = make_backend(args)
    reg = registry()
    res: dict[str, list[dict]] = {"no_status_bar": [], "status_bar": []}
    for r in range(args.runs):
        rng = random.Random(r)
        merchant, other = rng.sample(MERCHANTS, 2)
        for arm in res:
            res[arm].append(decision(backend, reg, merchant, other, arm == "status_bar"))
    rows, out = [], []
    for arm, rs in res.items():
        o = {
            "arm": arm,
            "runs": len(rs),
            "fourth_call_rate": round(sum(x["fourth_call"] for x in rs) / len(rs), 3),
            "any_tool_call_rate": round(sum(x["tool_call"] for x in rs) / len(rs), 3),
            "median_prompt_tokens": median(x["prompt_tokens"] for x in rs),
            "median_latency_ms": median(x["latency_ms"] for x in rs),
        }
        out.append(o)
        rows.append(
            [
                arm,
                o["runs"],
                o["fourth_call_rate"],
                o["any_tool_call_rate"],
                o["median_prompt_tokens"],
                o["median_latency_ms"],
            ]
        )
    console.print(
        table(
            f"call_limit · {backend.name} · {backend.model}",
            ["arm", "runs", "4th call rate", "any tool call", "median prompt tok", "median latency ms"],
            rows,
        )
    )
    save(args, {"backend": backend.name, "model": backend.model, "arms": out, "machine": machine()})


if __name__ == "__main__":
    main()
