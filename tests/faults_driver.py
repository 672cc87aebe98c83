"""The child side of the kill -9 test (``tests/test_faults.py``): a fork server.

``python tests/faults_driver.py serve`` imports ctxwright once, prints ``ready``, then reads
one JSON command per line from stdin. For each it forks a child that runs one real
``Harness`` run (a new session, or ``--resume`` of one) against the loopback OpenAI server
whose URL the command names, prints ``{"pid": N}``, waits for the child and prints
``{"pid": N, "status": S}``. The test kills children with SIGKILL at chosen moments.

Why a fork server: importing ctxwright and the OpenAI SDK takes about a second; a hundred
kills each paying it would take minutes. A forked child is still its own process with its
own database connection, opened after the fork, and ``kill -9`` ends it like any other.

The child writes to its ``ack`` file (unbuffered ``os.write``: what was written survives the
kill) ``seq N`` right after event N was stored, ``tool+ T``/``tool- T`` around each tool
(``time.monotonic``, shared by every process of the machine), ``session ID`` once the
session is known and ``stop REASON`` at the end.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import traceback
from typing import Any

WINDOW = 4500  # small enough that every resumed run compacts, with an LLM summary


def _note(fd: int, text: str) -> None:
    os.write(fd, (text + "\n").encode("utf-8"))


def child(cmd: dict[str, Any]) -> int:
    from ctxwright import Harness, tool
    from ctxwright.core.events import Event
    from ctxwright.store.sessions import Store

    random.seed(os.getpid() ^ time.time_ns())  # a fork copies the server's random state
    ack = os.open(cmd["ack"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    class AckStore(Store):
        """Acknowledges each event once SQLite has it."""

        def append_event(self, session_id: str, event: Event) -> None:
            super().append_event(session_id, event)
            _note(ack, f"seq {event.seq}")

    @tool
    def lookup(topic: str) -> str:
        """Look a topic up (slowly)."""
        _note(ack, f"tool+ {time.monotonic():.6f}")
        time.sleep(random.uniform(0.03, 0.2))
        _note(ack, f"tool- {time.monotonic():.6f}")
        return f"{topic}: found 3 facts"

    @tool
    def report(topic: str) -> str:
        """Write a long report on a topic."""
        _note(ack, f"tool+ {time.monotonic():.6f}")
        text = "".join(f"{topic} report line {i:04d}: nothing unusual\n" for i in range(120))
        _note(ack, f"tool- {time.monotonic():.6f}")
        return text

    store = AckStore(cmd["db"])
    try:
        if cmd.get("resume"):
            h = Harness.resume(cmd["resume"], tools=[lookup, report], db=store)
        else:
            h = Harness(
                system="You look topics up and report on them.",
                tools=[lookup, report],
                backend="openai",
                model="fake",
                base_url=cmd["url"],
                db=store,
                window=WINDOW,
                summaries=True,
                todo=False,
                delegate=False,
                max_tokens=64,
                compaction={
                    "result_cap_tokens": 300,
                    "min_calls_between": 1,
                    "keep_recent_results": 2,
                    "trigger_ratio": 0.35,
                },
            )
        with h:
            _note(ack, f"session {h.session_id}")
            result = h.run(cmd["prompt"])
            _note(ack, f"stop {result.stop_reason} {result.error or ''}")
            return 0 if result.stop_reason == "final_answer" else 3
    finally:
        store.close()


def serve() -> None:
    import ctxwright.backends.openai_compat  # everything a child needs, loaded once
    import ctxwright.harness  # noqa: F401

    print("ready", flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        pid = os.fork()
        if pid == 0:  # the child
            code = 1
            try:
                err = os.open(cmd["ack"] + ".err", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                os.dup2(err, 1)
                os.dup2(err, 2)
                code = child(cmd)
            except BaseException:
                traceback.print_exc()
                sys.stderr.flush()
            finally:
                os._exit(code)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"pid": pid, "status": status}), flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["serve"]:
        serve()
    else:
        sys.exit("usage: faults_driver.py serve")
