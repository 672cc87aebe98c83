"""What `ctxwright proxy --workers 2` costs per request against one proxy process, with clients
that open a new connection per request.

Why this case: the kernel hands each new connection to whichever worker accepts it, so the
calls of one session land on both workers in turn, and each worker audits the calls the other
recorded before it audits its own (``proxy/session_audit.py``). Keep-alive clients stay on one
worker and do not show it.

Three kinds of process on loopback: the upstream of ``proxy_overhead.py`` (fixed bytes, streamed
or not), two real proxies recording to fresh SQLite files -- ``ctxwright proxy --quiet`` and
``ctxwright proxy --quiet --workers 2`` -- and this process as the clients (httpx, each request
on a new connection, several concurrent conversations that grow by one turn per call). The two
proxies take alternating rounds of the same load in the same run. Measured: the CPU time of
each proxy's processes per request (parent and workers, from ``/proc``: independent of what
else the machine runs), how many calls each recorded, the live audit's full rebuilds and calls
read back from the store (from the recorders' summaries), and whether both stored the same
audit causes for the same calls.

    python benchmarks/proxy_workers.py [--quick] [--json PATH]

Target: ``--workers 2`` costs <= 1.2x one process's CPU per request, plain and streamed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, console, free_port, machine, save, table, wait_port
from proxy_overhead import ANSWER, STREAM_BYTES, cpu_seconds

OVERHEAD = Path(__file__).resolve().parent / "proxy_overhead.py"
#: the target: CPU per request of --workers 2 over one process's
TARGET_RATIO = 1.2


def _body(client: str, turn: int, stream: bool) -> bytes:
    """One conversation's request at ``turn`` (about 4 KB + 300 bytes a turn), its first user
    message naming the conversation (the proxy groups calls by their repeated messages)."""
    msgs: list[dict[str, str]] = [{"role": "system", "content": "You are a careful agent. " * 150}]
    for t in range(turn + 1):
        msgs.append({"role": "user", "content": f"conversation {client} step {t}: " + "look at the file " * 8})
        if t < turn:
            msgs.append({"role": "assistant", "content": "ok " * 30})
    body: dict[str, Any] = {"model": "bench", "messages": msgs}
    if stream:
        body["stream"] = True
    return json.dumps(body).encode()


def tree_cpu(pid: int) -> float:
    """CPU seconds so far of ``pid`` and its live children (``--workers``' processes)."""
    total = cpu_seconds(pid)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid:
            with contextlib.suppress(OSError, IndexError):  # it ended meanwhile
                total += cpu_seconds(int(entry.name))
    return total


async def _conversation(base: str, name: str, calls: int, stream: bool, bad: list[int]) -> None:
    import httpx

    headers = {"content-type": "application/json", "authorization": "Bearer sk-bench-not-a-key"}
    for turn in range(calls):
        # a new client per request: a new connection, handed by the kernel to either worker
        async with httpx.AsyncClient(base_url=base, timeout=60) as c:
            r = await c.post("/v1/chat/completions", content=_body(name, turn, stream), headers=headers)
            if r.content != (STREAM_BYTES if stream else ANSWER):
                bad.append(1)


def run_round(base: str, tag: str, clients: int, calls: int, stream: bool) -> int:
    bad: list[int] = []

    async def go() -> None:
        await asyncio.gather(*(_conversation(base, f"{tag}-{i}", calls, stream, bad) for i in range(clients)))

    asyncio.run(go())
    return len(bad)


def start_proxy(db: Path, up_port: int, port: int, workers: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "ctxwright.cli.main", "proxy", "--quiet", "--db", str(db)]
    cmd += ["--upstream", f"http://127.0.0.1:{up_port}", "--port", str(port)]
    if workers > 1:
        cmd += ["--workers", str(workers)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def stored_causes(db: Path) -> dict[tuple[str, int], Any]:
    """Each stored call's audit cause, keyed by its conversation's first user message and turn."""
    from ctxwright.proxy.log import proxy_session_requests, proxy_sessions
    from ctxwright.store.sessions import Store

    store = Store(db)
    out: dict[tuple[str, int], Any] = {}
    try:
        for s in proxy_sessions(store):
            for rec in proxy_session_requests(store, s["id"]):
                msgs = rec["request"]["messages"]
                first = msgs[1]["content"].split(" step ", 1)[0]
                out[(first, (len(msgs) - 2) // 2)] = rec["proxy"]["audit"].get("cause")
    finally:
        store.close()
    return out


def summaries(stderr: bytes) -> list[str]:
    return [ln for ln in stderr.decode("utf-8", "replace").splitlines() if "recorded" in ln]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer requests (a smoke run)")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    args = p.parse_args(argv)
    clients, calls, rounds = (4, 10, 1) if args.quick else (4, 40, 3)
    load_start = os.getloadavg()[0]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    tmp = Path(tempfile.mkdtemp(prefix="proxy-workers-bench-"))
    up_port = free_port()
    upstream = subprocess.Popen([sys.executable, str(OVERHEAD), "--serve-upstream", str(up_port)], env=env)
    procs: dict[int, subprocess.Popen[bytes]] = {}
    ports: dict[int, int] = {}
    cpu: dict[tuple[int, bool], float] = {}
    requests: dict[tuple[int, bool], int] = {}
    bad = 0
    errs: dict[int, bytes] = {}
    try:
        wait_port(up_port, upstream, "the upstream")
        for w in (1, 2):
            ports[w] = free_port()
            procs[w] = start_proxy(tmp / f"workers{w}.db", up_port, ports[w], w, env)
        for w in (1, 2):
            wait_port(ports[w], procs[w], f"the proxy (--workers {w})")
        time.sleep(1.0)  # --workers' processes all listening
        for w in (1, 2):  # warm both (imports, the token counter)
            bad += run_round(f"http://127.0.0.1:{ports[w]}", "warm", 2, 2, False)
        for r in range(rounds):
            for stream in (False, True):
                for w in (1, 2) if r % 2 == 0 else (2, 1):
                    before = tree_cpu(procs[w].pid)
                    tag = f"r{r}-{'sse' if stream else 'plain'}"
                    bad += run_round(f"http://127.0.0.1:{ports[w]}", tag, clients, calls, stream)
                    time.sleep(0.3)  # the recorders finish the round's last calls
                    cpu[(w, stream)] = cpu.get((w, stream), 0.0) + tree_cpu(procs[w].pid) - before
                    requests[(w, stream)] = requests.get((w, stream), 0) + clients * calls
    finally:
        for w, proc in procs.items():
            proc.send_signal(signal.SIGINT)
            try:
                _, errs[w] = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, errs[w] = proc.communicate()
        upstream.terminate()
        upstream.wait(10)
    causes = {w: stored_causes(tmp / f"workers{w}.db") for w in (1, 2)}
    expected = 2 * 2 + rounds * 2 * clients * calls
    rows = []
    for stream in (False, True):
        one = cpu[(1, stream)] * 1000 / requests[(1, stream)]
        two = cpu[(2, stream)] * 1000 / requests[(2, stream)]
        rows.append(
            {
                "stream": stream,
                "requests_each": requests[(1, stream)],
                "one_process_cpu_ms_per_request": round(one, 3),
                "workers2_cpu_ms_per_request": round(two, 3),
                "ratio": round(two / one, 3),
            }
        )
    lines = {w: summaries(errs.get(w, b"")) for w in (1, 2)}
    checks = {
        f"workers2_cpu<={TARGET_RATIO}x_one_process_plain": rows[0]["ratio"] <= TARGET_RATIO,
        f"workers2_cpu<={TARGET_RATIO}x_one_process_sse": rows[1]["ratio"] <= TARGET_RATIO,
        "every_call_recorded": all(len(causes[w]) == expected for w in (1, 2)),
        "same_causes": causes[1] == causes[2],
        "answers_intact": bad == 0,
    }
    cols = ["mode", "requests each", "one process cpu ms/req", "--workers 2 cpu ms/req", "ratio"]
    trows = [
        [
            "stream" if r["stream"] else "plain",
            r["requests_each"],
            r["one_process_cpu_ms_per_request"],
            r["workers2_cpu_ms_per_request"],
            r["ratio"],
        ]
        for r in rows
    ]
    console.print(
        table(f"proxy --workers 2 vs one process ({clients} clients, a new connection per request)", cols, trows)
    )
    for w in (1, 2):
        for ln in lines[w]:
            console.print(f"[dim]--workers {w}: {ln}[/]")
    for name, ok in checks.items():
        console.print(f"{'PASS' if ok else 'FAIL'}  {name}")
    console.print(f"recorded {len(causes[1])} and {len(causes[2])} of {expected} calls")
    load = os.getloadavg()
    console.print(f"load average (1 min): {load_start:.1f} at the start, {load[0]:.1f} at the end")
    save(
        args,
        {
            "benchmark": "proxy_workers",
            "machine": machine(),
            "load_average_1m_at_start": round(load_start, 2),
            "load_average_1m_at_end": round(load[0], 2),
            "quick": args.quick,
            "clients": clients,
            "calls_per_conversation": calls,
            "rounds": rounds,
            "rows": rows,
            "recorder_summaries": {str(w): lines[w] for w in (1, 2)},
            "recorded_calls": {str(w): len(causes[w]) for w in (1, 2)},
            "expected_calls": expected,
            "checks": checks,
            "pass": all(checks.values()),
        },
    )
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
