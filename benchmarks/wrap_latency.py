"""What `ctxwright wrap` adds to each model call of the agent it runs, and to its start and exit.

The agent is this file run as a program (``--agent``): an `openai` SDK client that reads
``OPENAI_BASE_URL`` as any SDK program does and makes one conversation of N chat-completions
calls (the request growing by one turn per call, about 4 KB + 300 bytes a turn), plain or
streamed, timing each call itself (send to last byte; streamed, also to the first chunk). The
provider is a loopback upstream in a process of its own (the fixed-answer app of
``proxy_overhead.py``). Each round runs the agent twice, alternating: directly against the
upstream, and as ``ctxwright wrap --upstream UPSTREAM -- python wrap_latency.py --agent ...``
(the recording proxy in wrap's process, every call recorded and audited live). The table puts
both side by side: the median per call, the added milliseconds and the ratio, and the whole
command's wall time (wrap's start, its drain, summary and report at exit).

    python benchmarks/wrap_latency.py [--quick] [--json PATH]

Targets: median added <= 2 ms per non-streamed call; every wrapped call recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, console, free_port, machine, save, table, wait_port
from proxy_overhead import serve_upstream  # the same fixed answers, the same upstream


def agent(calls: int, stream: bool, out: str) -> int:
    """The wrapped program: ``calls`` calls of one conversation on the ``openai`` SDK, each
    call's latency (and first-chunk time, streamed) in ms written to ``out`` as JSON."""
    import openai

    client = openai.OpenAI(api_key="sk-bench-not-a-key", max_retries=0)
    system = {"role": "system", "content": "You are a careful agent. " * 150}
    messages: list[dict[str, str]] = [system]
    latency: list[float] = []
    first: list[float] = []
    for turn in range(calls):
        messages.append({"role": "user", "content": f"step {turn}: " + "look at the file " * 8})
        t0 = time.perf_counter()
        if stream:
            got: float | None = None
            for _chunk in client.chat.completions.create(model="bench", messages=messages, stream=True):  # type: ignore[arg-type]
                got = got or time.perf_counter()
            if got is not None:
                first.append((got - t0) * 1000)
        else:
            client.chat.completions.create(model="bench", messages=messages)  # type: ignore[arg-type]
        latency.append((time.perf_counter() - t0) * 1000)
        messages.append({"role": "assistant", "content": "ok " * 30})
    Path(out).write_text(json.dumps({"latency": latency, "first": first}))
    return 0


def _run(cmd: list[str], env: dict[str, str], out: Path) -> tuple[dict[str, list[float]], float]:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, timeout=600)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:6])} ... exited {done.returncode}: {done.stderr.decode()[-2000:]}")
    return json.loads(out.read_text()), wall


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer calls (a smoke run)")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    p.add_argument("--serve-upstream", type=int, metavar="PORT", help=argparse.SUPPRESS)
    p.add_argument("--agent", type=int, metavar="CALLS", help=argparse.SUPPRESS)
    p.add_argument("--stream", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve_upstream:
        serve_upstream(args.serve_upstream)
        return 0
    if args.agent:
        return agent(args.agent, args.stream, args.out)
    load_start = os.getloadavg()[0]
    port = free_port()
    tmp = Path(tempfile.mkdtemp(prefix="wrap-bench-"))
    db = tmp / "wrap.db"
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL")}
    env.update(PYTHONPATH=str(ROOT / "src"), NO_PROXY="127.0.0.1,localhost")
    upstream = subprocess.Popen([sys.executable, __file__, "--serve-upstream", str(port)], env=env)
    calls = 20 if args.quick else 100
    rounds = 2 if args.quick else 3
    rows: list[dict[str, Any]] = []
    wrapped_calls = 0
    try:
        wait_port(port, upstream, "the upstream")
        url = f"http://127.0.0.1:{port}"
        for stream in (False, True):
            res: dict[str, dict[str, list[float]]] = {
                "direct": {"latency": [], "first": [], "wall": []},
                "wrap": {"latency": [], "first": [], "wall": []},
            }
            for r in range(rounds + 1):  # round 0 warms both paths (imports, the page cache) and is dropped
                out = tmp / f"calls-{stream}-{r}.json"
                me = [sys.executable, __file__, "--agent", str(calls), "--out", str(out)] + (
                    ["--stream"] if stream else []
                )
                wrap = [sys.executable, "-m", "ctxwright.cli.main", "--db", str(db), "wrap", "--quiet"]
                wrap += ["--upstream", url, "--log", str(tmp / "wrap.log"), "--report", str(tmp / "wrap.html"), "--"]
                for name, cmd, cmd_env in (
                    ("direct", me, {**env, "OPENAI_BASE_URL": url + "/v1"}),
                    ("wrap", [*wrap, *me], env),
                ):
                    got, wall = _run(cmd, cmd_env, out)
                    if name == "wrap":
                        wrapped_calls += calls
                    if r == 0:
                        continue
                    res[name]["latency"] += got["latency"]
                    res[name]["first"] += got["first"]
                    res[name]["wall"].append(wall)
            row: dict[str, Any] = {"stream": stream, "calls": len(res["wrap"]["latency"])}
            for name in ("direct", "wrap"):
                row[f"{name}_median_ms"] = round(statistics.median(res[name]["latency"]), 3)
                row[f"{name}_p90_ms"] = round(statistics.quantiles(res[name]["latency"], n=10)[-1], 3)
                if res[name]["first"]:
                    row[f"{name}_first_chunk_ms"] = round(statistics.median(res[name]["first"]), 3)
                row[f"{name}_wall_s"] = round(statistics.median(res[name]["wall"]), 3)
            row["added_median_ms"] = round(row["wrap_median_ms"] - row["direct_median_ms"], 3)
            row["ratio_median"] = round(row["wrap_median_ms"] / row["direct_median_ms"], 3)
            row["added_wall_s"] = round(row["wrap_wall_s"] - row["direct_wall_s"], 3)
            if stream:
                row["added_first_chunk_ms"] = round(row["wrap_first_chunk_ms"] - row["direct_first_chunk_ms"], 3)
            rows.append(row)
    finally:
        upstream.terminate()
        try:
            upstream.wait(10)
        except subprocess.TimeoutExpired:
            upstream.kill()
    from ctxwright.proxy.log import proxy_sessions
    from ctxwright.store.sessions import Store

    store = Store(db)
    recorded = sum(int(s["calls"]) for s in proxy_sessions(store))
    store.close()
    plain = next(r for r in rows if not r["stream"])
    checks = {
        "median_added_ms_plain<=2": plain["added_median_ms"] <= 2.0,
        "every_call_recorded": recorded == wrapped_calls,
    }
    cols = ["mode", "calls", "direct med ms", "wrap med ms", "added med ms", "ratio", "direct p90", "wrap p90"]
    cols += ["first chunk direct", "first chunk wrap", "direct wall s", "wrap wall s", "added wall s"]
    trows = [
        [
            "stream" if r["stream"] else "plain",
            r["calls"],
            r["direct_median_ms"],
            r["wrap_median_ms"],
            r["added_median_ms"],
            r["ratio_median"],
            r["direct_p90_ms"],
            r["wrap_p90_ms"],
            r.get("direct_first_chunk_ms"),
            r.get("wrap_first_chunk_ms"),
            r["direct_wall_s"],
            r["wrap_wall_s"],
            r["added_wall_s"],
        ]
        for r in rows
    ]
    console.print(table(f"ctxwright wrap: added latency per call ({calls} calls per run, {rounds} runs)", cols, trows))
    for name, ok in checks.items():
        console.print(f"{'PASS' if ok else 'FAIL'}  {name}")
    console.print(f"recorded {recorded} of {wrapped_calls} wrapped calls in the store")
    load = os.getloadavg()
    console.print(
        f"load average (1 min): {load_start:.1f} at the start, {load[0]:.1f} at the end, on {os.cpu_count()} cores"
    )
    save(
        args,
        {
            "benchmark": "wrap_latency",
            "machine": machine(),
            "load_average_1m_at_start": round(load_start, 2),
            "load_average_1m_at_end": round(load[0], 2),
            "quick": args.quick,
            "calls_per_run": calls,
            "runs": rounds,
            "rows": rows,
            "recorded_calls": recorded,
            "wrapped_calls": wrapped_calls,
            "checks": checks,
            "pass": all(checks.values()),
        },
    )
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
