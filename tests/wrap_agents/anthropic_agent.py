"""A small agent on the official ``anthropic`` SDK, run by ``tests/test_wrap.py`` under
``ctxwright wrap``. It reads its base URL as any SDK program does (``ANTHROPIC_BASE_URL``) and
talks to the Anthropic simulator (``tests/providers/anthropic_sim.py``), which caches.

One conversation of three calls with a cache breakpoint on the system prompt; the answers on
stdout, one line on stderr, exit 0 -- or ``argv[1]`` as the exit code.
"""

from __future__ import annotations

import sys

import anthropic

SYSTEM = [
    {
        "type": "text",
        "text": "You are a careful assistant. " + "Rules of the house, repeated to fill the cache. " * 30,
        "cache_control": {"type": "ephemeral"},
    }
]


def main() -> int:
    client = anthropic.Anthropic(api_key="sk-ant-test-wrap", max_retries=0)
    messages: list[dict[str, str]] = []
    for question in ("What is 2+2?", "And 3+3?", "And 4+4?"):
        messages.append({"role": "user", "content": question})
        reply = client.messages.create(
            model="claude-sonnet-4-5",
            max_tokens=64,
            system=SYSTEM,  # type: ignore[arg-type]
            messages=messages,  # type: ignore[arg-type]
        )
        text = "".join(b.text for b in reply.content if b.type == "text")
        messages.append({"role": "assistant", "content": text})
        print(f"{question} -> {text}", flush=True)
    sys.stderr.write("anthropic agent: three calls made\n")
    return int(sys.argv[1]) if len(sys.argv) > 1 else 0


if __name__ == "__main__":
    sys.exit(main())
