"""A small agent on the official ``openai`` SDK, run by ``tests/test_wrap.py`` under ``ctxwright
wrap`` (and directly, to compare). It reads its base URL as any SDK program does
(``OPENAI_BASE_URL``) and talks to the loopback provider of ``tests/proxy_upstream.py``.

Modes (``argv[1]``):

* ``talk``: two conversations of two calls each (the second call of each carries the first
  answer), the answers on stdout with bytes a terminal interprets (an SGR escape, UTF-8, a
  carriage return), one line on stderr, exit 3;
* ``wait``: one call, then ``ready`` on stdout and a wait for SIGINT, which it reports and
  exits 130 on (as a shell reports a Ctrl-C);
* ``screen``: one call, then what a terminal program shows -- whether stdin and stdout are the
  terminal -- and a wait for one line on stdin;
* ``statusline``: one call, then ``ctxwright statusline`` run as Claude Code runs its status
  line command (a child of the agent, no stdin), its line printed.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import openai


def call(client: openai.OpenAI, messages: list[dict[str, str]]) -> str:
    reply = client.chat.completions.create(model="gpt-4o-mini", messages=messages)  # type: ignore[arg-type]
    return reply.choices[0].message.content or ""


def conversation(client: openai.OpenAI, topic: str) -> None:
    messages = [{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": topic}]
    first = call(client, messages)
    messages += [{"role": "assistant", "content": first}, {"role": "user", "content": "And then?"}]
    second = call(client, messages)
    sys.stdout.write(f"\x1b[1m{topic}\x1b[0m: {first} / {second} — café\r\n")
    sys.stdout.flush()


def main() -> int:
    mode = sys.argv[1]
    client = openai.OpenAI(api_key="sk-test-wrap", max_retries=0)
    if mode == "talk":
        conversation(client, "Name a colour.")
        conversation(client, "Name a river.")
        sys.stderr.write("agent: done, exiting 3\n")
        return 3
    call(client, [{"role": "user", "content": "Say hi."}])
    if mode == "wait":
        caught: list[int] = []
        signal.signal(signal.SIGINT, lambda signum, _frame: caught.append(signum))
        print("ready", flush=True)
        deadline = time.monotonic() + 120
        while not caught and time.monotonic() < deadline:
            time.sleep(0.05)
        print("caught SIGINT" if caught else "no SIGINT", flush=True)
        return 130 if caught else 1
    if mode == "statusline":
        line = subprocess.run(
            [sys.executable, "-m", "ctxwright.cli.main", "statusline"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
        print(f"status: {line.strip()}", flush=True)
        return 0
    print(f"agent screen: stdin tty {sys.stdin.isatty()}, stdout tty {sys.stdout.isatty()}", flush=True)
    line = sys.stdin.readline()
    print(f"agent read {line.strip()!r}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
