"""Experiment 2-1, point 5: what a stable prefix saves in prefill time.

A system prompt of about 2,000 tokens. Each run: one warm-up call, then a call with the
same prefix and a new question (``stable``), then a call whose system prompt differs in
its first characters (``broken``). The backend is the same object throughout, so the
only difference between the two measured calls is whether the KV cache of the prefix
can be reused. Prefill time is the time to the first generated token; one token is
generated. Medians over ``--runs`` runs and their ratio, measured side by side.

    python benchmarks/prefill_reuse.py [--runs 5] [--json PATH] [--base-url URL --model NAME]
"""

from __future__ import annotations

import argparse
import random
import time

from common import add_backend_args, console, machine, make_backend, median, save, table
from ctxwright.core.messages import Message
from ctxwright.core.request import ChatRequest


def system_prompt(target_tokens: int, count) -> str:
    """A deterministic operations manual of about ``target_tokens`` tokens."""
    rng = random.Random(7)
    topics = ["billing", "refunds", "shipping", "accounts", "security", "returns", "warranty", "loyalty"]
    verbs = ["check", "confirm", "record", "escalate", "verify", "explain", "document", "review"]
    lines = ["You are the support agent of Northwind Outfitters. Follow this manual exactly."]
    i = 0
    while count("\n".join(lines)) < target_tokens:
        i += 1
        t, v = rng.choice(topics), rng.choice(verbs)
        lines.append(
            f"Rule {i}: for {t} questions, {v} the order number, then {rng.choice(verbs)} the "
            f"customer's {rng.choice(topics)} history before answering; never promise dates."
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_backend_args(p)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--tokens", type=int, default=2000, help="system prompt size in tokens")
    args = p.parse_args()
    backend = make_backend(args)

    def count(t):
        return backend.count_tokens(t) or len(t) // 4

    system = system_prompt(args.tokens, count)
    sys_tokens = count(system)

    def call(sys_text: str, question: str) -> tuple[float | None, float, int | None, int | None]:
        req = ChatRequest(
            messages=(Message(role="system", content=sys_text), Message(role="user", content=question)),
            max_tokens=1,
            temperature=0.0,
        )
        t0 = time.perf_counter()
        c = backend.complete(req)
        wall = (time.perf_counter() - t0) * 1000
        return c.usage.prefill_ms, wall, c.usage.prompt_tokens, c.usage.cached_tokens

    stable, broken, stable_wall, broken_wall, cached_s, cached_b = [], [], [], [], [], []
    prompt_tokens = None
    for r in range(args.runs):
        call(system, f"Warm-up question {r}: where is my parcel?")
        pf, wall, prompt_tokens, cached = call(system, f"Question {r}: can I return a jacket?")
        stable.append(pf if pf is not None else wall)
        stable_wall.append(wall)
        cached_s.append(cached)
        changed = f"[{r:02d}:{time.time():.3f}] " + system  # the first characters differ
        pf, wall, _, cached = call(changed, f"Question {r}: can I return a jacket?")
        broken.append(pf if pf is not None else wall)
        broken_wall.append(wall)
        cached_b.append(cached)
        console.print(f"[dim]run {r}: stable {stable[-1]:.0f} ms · broken {broken[-1]:.0f} ms[/]")
    s_ms, b_ms = median(stable), median(broken)
    ratio = round(b_ms / s_ms, 2) if s_ms and b_ms else None
    data = {
        "stable_ms": s_ms,
        "broken_ms": b_ms,
        "ratio": ratio,
        "runs": args.runs,
        "backend": backend.name,
        "model": backend.model,
        "system_prompt_tokens": sys_tokens,
        "prompt_tokens": prompt_tokens,
        "stable_wall_ms": median(stable_wall),
        "broken_wall_ms": median(broken_wall),
        "stable_cached_tokens": median(cached_s),
        "broken_cached_tokens": median(cached_b),
        "machine": machine(),
    }
    console.print(
        table(
            f"prefill_reuse · {backend.name} · {backend.model} · system prompt {sys_tokens:,} tokens · "
            f"{args.runs} runs",
            ["variant", "median prefill ms (TTFT)", "median wall ms", "median cached tok", "ratio"],
            [
                ["stable prefix", s_ms, median(stable_wall), median(cached_s), 1.0],
                ["first characters changed", b_ms, median(broken_wall), median(cached_b), ratio],
            ],
        )
    )
    save(args, data)


if __name__ == "__main__":
    main()
