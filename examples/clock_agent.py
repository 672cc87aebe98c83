"""An ordinary ``openai`` SDK agent with the current time in its system prompt.

The kind of program people already run: it reads ``OPENAI_BASE_URL`` (and ``OPENAI_API_KEY``)
like any SDK program, so ``ctxwright wrap -- python examples/clock_agent.py`` records it with no
change. Its task has three turns; each call re-sends the history plus what is new, and -- unless
``--no-clock`` -- puts the time first in the system prompt, as "Today is ..." usually is. That
one habit changes the request's first bytes on every call, so a provider's prompt cache (or
llama.cpp's KV cache) reuses nothing of it. It prints each answer and the time to its first
token (the prefill), measured here.

``make demo`` runs it twice through the proxy (``examples/cache_break_demo.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import openai

THINGS = ["fruit", "colour", "animal", "city", "river", "tree", "tool", "song"]


def rules(count: int) -> str:
    """The agent's instructions; 48 of them (about 1,100 tokens) make re-reading them visible in
    the prefill time, and take a hosted model's prompt past its 1,024-token caching minimum."""
    return "\n".join(
        f"Rule {n}: answer in one short sentence, name one {THINGS[n % len(THINGS)]}, and never repeat an earlier answer."
        for n in range(1, count + 1)
    )


TURNS = ("Name a fruit.", "Name another one.", "And one more.")


def run_task(client: openai.OpenAI, timestamp: bool, instructions: str, model: str = "smollm2") -> list[float]:
    """The agent: three turns, each re-sending the history plus what is new. Returns each
    call's time to its first token, in ms."""
    history: list[Any] = []
    ttft: list[float] = []
    for turn in TURNS:
        system = "You are a helpful assistant.\n" + instructions
        if timestamp:  # first, as "Today is ..." usually is: every byte after it is prefilled again
            now = f"{time.strftime('%Y-%m-%d %H:%M:%S')}.{time.time_ns() // 1000 % 10**6:06d}"
            system = f"Current time: {now}\n" + system
        history.append({"role": "user", "content": turn})
        start = time.perf_counter()
        first: float | None = None
        answer = ""
        stream = client.chat.completions.create(
            model=model,
            messages=[{"role": "system", "content": system}, *history],
            max_tokens=12,
            temperature=0,
            stream=True,
        )
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                first = first or time.perf_counter()
                answer += chunk.choices[0].delta.content
        ttft.append(((first or time.perf_counter()) - start) * 1000)
        history.append({"role": "assistant", "content": answer.strip() or "(nothing)"})
    return ttft


def main() -> int:
    ap = argparse.ArgumentParser(description="an openai SDK agent with the time in its system prompt")
    ap.add_argument("--no-clock", action="store_true", help="leave the time out of the system prompt")
    ap.add_argument("--rules", type=int, default=48, help="how many rules the system prompt holds (default 48)")
    ap.add_argument("--model", default=os.environ.get("OPENAI_MODEL", "smollm2"))
    args = ap.parse_args()
    client = openai.OpenAI(api_key=os.environ.get("OPENAI_API_KEY", "not-needed-locally"), max_retries=0)
    for turn, ms in zip(TURNS, run_task(client, not args.no_clock, rules(args.rules), args.model), strict=True):
        print(f"{turn:<18} first token after {ms:,.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
