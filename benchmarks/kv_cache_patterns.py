"""Experiment 2-3: six ways to build the same agent's requests, five of them anti-patterns.

One multi-step task of six tool calls in which a value from the first step (the
customer id) and values from several middle steps are needed at the end. The same task
is run in six modes, side by side in one process, interleaved run by run:

* ``correct`` -- stable prefix, append-only trajectory;
* ``dynamic_system_time`` -- a timestamp at the top of the system prompt;
* ``dynamic_profile`` -- a user profile with a changing balance inside the system prompt;
* ``shuffled_tools`` -- tool order changes on every call;
* ``sliding_window`` -- only the last few messages are kept;
* ``text_format`` -- history flattened into one "USER: ... ASSISTANT: ..." user message.

On the embedded model the harness names the tool of each step (the 135M model cannot
plan six steps; it fills in the arguments, which must be copied from earlier results);
on a served model (``--base-url``) the model plans with ``tool_choice=auto``
(``--policy``). The final answer is correct when it contains the customer id and the
shipping quote. Per mode: median prefill ms per call, cached-token fraction, total
prompt tokens, repeated identical tool calls, correctness; ratios against ``correct``.

    python benchmarks/kv_cache_patterns.py [--runs 5] [--json PATH] [--base-url URL --model NAME]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import random
import statistics
import uuid

from common import add_backend_args, console, machine, make_backend, median, save, table
from ctxwright.core.messages import Message, ToolCall
from ctxwright.core.request import ChatRequest, ToolSpec
from ctxwright.tools.registry import ToolRegistry, tool

MODES = ["correct", "dynamic_system_time", "dynamic_profile", "shuffled_tools", "sliding_window", "text_format"]
PLAN = ["find_order", "get_customer", "get_item", "get_warehouse", "check_stock", "shipping_quote"]
QUESTION = (
    "Order A-1042 is late. Find the order, its customer and item, where it ships from, whether it is in "
    "stock, and the shipping quote. Then tell me the customer id and the shipping quote in euros."
)
EXPECTED = ("C-77812", "18.4")
ROLE = "You are the logistics assistant of Northwind Outfitters."
MANUAL = """# How to work
1. Call one tool per step; copy ids and cities exactly from earlier tool results.
2. Never guess an id: every id you need appears in a tool result above.
3. When all facts are in, answer with the customer id and the quote in euros."""
WINDOW = 4


def build_tools() -> ToolRegistry:
    reg = ToolRegistry()

    def err(what: str, got: str, want_from: str) -> str:
        raise ValueError(f"unknown {what} {got!r}; copy it from the {want_from} result")

    @tool
    def find_order(order_id: str) -> dict:
        """Look up an order by its id (like A-1042)."""
        if order_id.strip().upper() != "A-1042":
            err("order", order_id, "user's message")
        return {"order_id": "A-1042", "customer_id": "C-77812", "sku": "SKU-5521", "status": "late"}

    @tool
    def get_customer(customer_id: str) -> dict:
        """Get a customer's name and delivery city by customer id (like C-00000)."""
        if customer_id.strip().upper() != "C-77812":
            err("customer_id", customer_id, "find_order")
        return {"customer_id": "C-77812", "name": "Mira Okafor", "city": "Oslo"}

    @tool
    def get_item(sku: str) -> dict:
        """Get an item's weight and warehouse by SKU (like SKU-0000)."""
        if sku.strip().upper() != "SKU-5521":
            err("sku", sku, "find_order")
        return {"sku": "SKU-5521", "weight_kg": 3.2, "warehouse_id": "W-9"}

    @tool
    def get_warehouse(warehouse_id: str) -> dict:
        """Get a warehouse's city by warehouse id (like W-1)."""
        if warehouse_id.strip().upper() != "W-9":
            err("warehouse_id", warehouse_id, "get_item")
        return {"warehouse_id": "W-9", "city": "Hamburg"}

    @tool
    def check_stock(sku: str, warehouse_id: str) -> dict:
        """How many units of an item a warehouse holds."""
        if sku.strip().upper() != "SKU-5521" or warehouse_id.strip().upper() != "W-9":
            err("sku/warehouse", f"{sku}/{warehouse_id}", "get_item")
        return {"sku": "SKU-5521", "warehouse_id": "W-9", "in_stock": 14}

    @tool
    def shipping_quote(from_city: str, to_city: str, weight_kg: float) -> dict:
        """Quote shipping between two cities for a parcel weight."""
        if (from_city.strip().lower(), to_city.strip().lower()) != ("hamburg", "oslo"):
            err("route", f"{from_city}->{to_city}", "get_warehouse and get_customer")
        return {"from": "Hamburg", "to": "Oslo", "weight_kg": weight_kg, "quote_eur": 18.4, "days": 3}

    for t in (find_order, get_customer, get_item, get_warehouse, check_stock, shipping_quote):
        reg.register(t)
    return reg


def flatten(history: list[Message]) -> str:
    lines = []
    for m in history:
        if m.role == "assistant" and m.tool_calls:
            lines.append("ASSISTANT: " + "; ".join(f"call {tc.name}({tc.arguments})" for tc in m.tool_calls))
        elif m.role == "tool":
            lines.append(f"TOOL: {m.content}")
        else:
            lines.append(f"{m.role.upper()}: {m.content}")
    return "\n".join(lines)


def render(
    mode: str, history: list[Message], tools: tuple[ToolSpec, ...], call_no: int, rng: random.Random
) -> tuple[tuple[Message, ...], tuple[ToolSpec, ...]]:
    system = f"{ROLE}\n\n{MANUAL}"
    if mode == "dynamic_system_time":
        system = f"Current time: {dt.datetime.now().isoformat(timespec='microseconds')}\n\n{system}"
    elif mode == "dynamic_profile":
        system = (
            f"{ROLE}\nUser profile: Mira Okafor, balance EUR {100 - 7.25 * call_no:.2f}, "
            f"session call {call_no}.\n\n{MANUAL}"
        )
    if mode == "shuffled_tools":
        tools = tuple(rng.sample(list(tools), len(tools)))
    msgs = list(history)
    if mode == "sliding_window" and len(msgs) > WINDOW:
        msgs = msgs[-WINDOW:]
        while msgs and msgs[0].role == "tool":  # never send an orphan tool result
            msgs = msgs[1:]
    if mode == "text_format":
        msgs = [Message(role="user", content=flatten(history))]
    return (Message(role="system", content=system), *msgs), tools


def run_task(backend, reg: ToolRegistry, mode: str, policy: str, seed: int, log=None) -> dict:
    rng = random.Random(seed)
    if hasattr(backend, "reset_cache"):
        backend.reset_cache()  # every run starts cold, so modes compare like with like
    tools = reg.specs()
    history: list[Message] = [Message(role="user", content=QUESTION)]
    prefill, prompt, cached, reusable, seen_calls, repeats = [], 0, 0, 0, set(), 0
    cached_known = True
    answer = ""
    max_steps = len(PLAN) if policy == "forced" else 12
    for step in range(max_steps + 1):
        choice = "none" if step == max_steps else (PLAN[step] if policy == "forced" else "auto")
        msgs, tspecs = render(mode, history, tools, step, rng)
        request = ChatRequest(messages=msgs, tools=tspecs, tool_choice=choice, max_tokens=96, temperature=0.0)
        c = backend.complete(request)
        u = c.usage
        if log is not None:  # the request body and an OpenAI-shaped usage, for `ctxwright audit`
            details = {"cached_tokens": u.cached_tokens} if u.cached_tokens is not None else None
            log.write(
                json.dumps(
                    {
                        "mode": mode,
                        "request": request.to_wire(backend.model),
                        "response": {
                            "usage": {
                                "prompt_tokens": u.prompt_tokens,
                                "completion_tokens": u.completion_tokens,
                                "prompt_tokens_details": details,
                            }
                        },
                    },
                    ensure_ascii=False,
                )
                + "\n"
            )
        prefill.append(u.prefill_ms if u.prefill_ms is not None else u.raw.get("latency_ms"))
        prompt += u.prompt_tokens or 0
        if u.cached_tokens is None:
            cached_known = False
        cached += u.cached_tokens or 0
        reusable += u.raw.get("reusable_tokens") or 0 if isinstance(u.raw, dict) else 0
        msg = c.message
        if not msg.tool_calls:
            answer = msg.content or ""
            break
        calls = tuple(
            ToolCall(id=f"call_{uuid.uuid4().hex[:8]}", name=tc.name, arguments=tc.arguments) for tc in msg.tool_calls
        )
        history.append(Message(role="assistant", tool_calls=calls))
        for tc in calls:
            key = (tc.name, tc.arguments)
            repeats += key in seen_calls
            seen_calls.add(key)
            history.append(Message(role="tool", tool_call_id=tc.id, content=reg.execute(tc).content))
    correct = all(x in answer for x in EXPECTED)
    return {
        "prefill_ms": prefill,
        "prompt_tokens": prompt,
        "cached_tokens": cached if cached_known else None,
        "reusable_tokens": reusable or None,
        "repeats": repeats,
        "correct": correct,
        "answer": answer,
        "calls": len(prefill),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_backend_args(p)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--policy", choices=["forced", "auto"], help="default: forced on embedded, auto on a server")
    p.add_argument(
        "--log", metavar="PATH", help="also write every request + usage as JSONL (input for ctxwright audit)"
    )
    args = p.parse_args()
    backend = make_backend(args)
    policy = args.policy or ("auto" if args.base_url else "forced")
    modes = [m for m in args.modes.split(",") if m]
    reg = build_tools()
    results: dict[str, list[dict]] = {m: [] for m in modes}
    with contextlib.ExitStack() as stack:
        log = stack.enter_context(open(args.log, "w", encoding="utf-8")) if args.log else None
        for r in range(args.runs):
            for mode in modes:
                res = run_task(backend, reg, mode, policy, seed=r, log=log)
                results[mode].append(res)
                console.print(
                    f"[dim]run {r} {mode:20s} calls {res['calls']} prompt {res['prompt_tokens']:,} "
                    f"cached {res['cached_tokens']} median prefill {median(res['prefill_ms'])} ms "
                    f"correct {res['correct']}  answer: {res['answer'][:70]!r}[/]"
                )
    out = []
    for mode in modes:
        rs = results[mode]
        frac = [
            r["cached_tokens"] / r["prompt_tokens"] for r in rs if r["cached_tokens"] is not None and r["prompt_tokens"]
        ]
        out.append(
            {
                "mode": mode,
                "runs": len(rs),
                "median_prefill_ms_per_call": median(x for r in rs for x in r["prefill_ms"]),
                "cached_fraction": round(statistics.median(frac), 4) if frac else None,
                "median_total_prompt_tokens": median(r["prompt_tokens"] for r in rs),
                # Σcached ÷ Σreusable: how much of the physically reusable prefix was reused
                "reuse_efficiency": (
                    round(sum(r["cached_tokens"] for r in rs) / sum(r["reusable_tokens"] or 0 for r in rs), 4)
                    if all(r["cached_tokens"] is not None for r in rs) and sum(r["reusable_tokens"] or 0 for r in rs)
                    else None
                ),
                "repeated_tool_calls": sum(r["repeats"] for r in rs),
                "correct_runs": sum(r["correct"] for r in rs),
            }
        )
    base = next((o for o in out if o["mode"] == "correct"), None)
    for o in out:
        if base and base["median_prefill_ms_per_call"] and o["median_prefill_ms_per_call"]:
            o["prefill_ratio_vs_correct"] = round(
                o["median_prefill_ms_per_call"] / base["median_prefill_ms_per_call"], 2
            )
        if base and base["median_total_prompt_tokens"]:
            o["prompt_tokens_ratio_vs_correct"] = round(
                o["median_total_prompt_tokens"] / base["median_total_prompt_tokens"], 2
            )
    console.print(
        table(
            f"kv_cache_patterns · {backend.name} · {backend.model} · policy {policy} · {args.runs} runs",
            [
                "mode",
                "median prefill ms/call",
                "× correct",
                "cached fraction",
                "cached ÷ reusable",
                "median prompt tok",
                "repeated calls",
                "correct answers",
            ],
            [
                [
                    o["mode"],
                    o["median_prefill_ms_per_call"],
                    o.get("prefill_ratio_vs_correct"),
                    o["cached_fraction"],
                    o["reuse_efficiency"],
                    o["median_total_prompt_tokens"],
                    o["repeated_tool_calls"],
                    f"{o['correct_runs']}/{o['runs']}",
                ]
                for o in out
            ],
        )
    )
    save(
        args,
        {
            "backend": backend.name,
            "model": backend.model,
            "policy": policy,
            "runs": args.runs,
            "modes": out,
            "machine": machine(),
        },
    )


if __name__ == "__main__":
    main()
