"""An agent under the CI gate for the process and ``--update`` probes (``tests/test_gate_processes.py``).

``python tests/gate_agent.py GOLDEN N [--system TEXT] [--daemons PIDFILE] [--then exit|sleep|flood]``
sends the first N requests of GOLDEN (a request log) to ``$OPENAI_BASE_URL/chat/completions``,
in order, as recorded (the system prompt replaced by TEXT with ``--system``: a prompt change),
with nothing but the standard library (it starts in milliseconds). With ``--daemons`` it first
starts two daemons that ignore SIGTERM and leave its process group and session -- one a
``setsid`` child of its own, one double-forked (orphaned at once) -- and writes
``AGENT_PID DAEMON_PID DAEMON_PID`` to PIDFILE (whole: written, then renamed). ``--then``: what
it does after its calls: exit 0 (default), sleep for ten minutes, or write to stdout without end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request

#: a daemon: ``python -c DAEMON MODE``; it tells its pid on its stdout (a pipe it closes then)
DAEMON = """
import os, signal, sys, time
if sys.argv[1] == "double" and os.fork():
    os._exit(0)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
os.write(1, b"%d\\n" % os.getpid())
os.close(1)
time.sleep(600)
"""


def daemon(mode: str) -> int:
    p = subprocess.Popen(
        [sys.executable, "-c", DAEMON, mode, "ctxwright-gate-probe-daemon"],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
    )
    assert p.stdout is not None
    pid = int(p.stdout.readline())
    p.stdout.close()
    if mode == "double":
        p.wait()
    return pid


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("golden")
    ap.add_argument("n", type=int)
    ap.add_argument("--system")
    ap.add_argument("--daemons")
    ap.add_argument("--then", choices=("exit", "sleep", "flood"), default="exit")
    args = ap.parse_args()
    if args.daemons:
        pids = [os.getpid(), daemon("setsid"), daemon("double")]
        tmp = args.daemons + ".tmp"
        with open(tmp, "w") as f:
            f.write(" ".join(map(str, pids)))
        os.replace(tmp, args.daemons)
    with open(args.golden, encoding="utf-8") as f:
        requests = [json.loads(line)["request"] for line in f if line.strip()]
    base = os.environ["OPENAI_BASE_URL"].rstrip("/")
    for body in requests[: args.n]:
        if args.system is not None:
            body["messages"][0]["content"] = args.system
        req = urllib.request.Request(
            base + "/chat/completions",
            data=json.dumps(body).encode(),
            headers={"content-type": "application/json", "authorization": "Bearer " + os.environ["OPENAI_API_KEY"]},
        )
        with urllib.request.urlopen(req, timeout=60) as r:
            json.loads(r.read())
    if args.then == "sleep":
        time.sleep(600)
    elif args.then == "flood":
        chunk = b"flood " * 10_000
        while True:
            sys.stdout.buffer.write(chunk)
    return 0


if __name__ == "__main__":
    sys.exit(main())
