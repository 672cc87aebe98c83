"""What `ctxwright proxy` adds to each model call: latency, throughput, time to first byte.

Three processes on loopback: an upstream (a minimal ASGI app on uvicorn that answers an
OpenAI chat-completions request with fixed bytes, streamed or not), the real proxy
(`ctxwright proxy --quiet`, recording to a fresh SQLite file and auditing every call), and
this process as the clients (httpx, 1, 8 and 32 concurrent clients, each a conversation whose
request grows by one turn per call). Every configuration is run against the upstream directly
and through the proxy, alternating rounds, in the same run; the table puts them side by side.

Measured per request at the client: latency (send to last byte) and, streaming, time to the
first body byte. Added latency = proxy minus direct, at the median and at p99. Bytes altered:
the upstream returns the sha256 of the body it received in a header, and the client compares
it with what it sent and the body it received with the upstream's fixed bytes; any difference
counts. The proxy process's CPU time per request (relay, recording and live audit together) is
read from ``/proc``: unlike latency, it does not depend on what else the machine runs.

    python benchmarks/proxy_overhead.py [--quick] [--json PATH]

Targets: median added <= 2 ms and p99 added <= 10 ms per non-streaming request at 8
concurrent clients; streamed time to first byte within 2 ms of the upstream's; 0 bytes altered.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
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
from common import ROOT, console, free_port, machine, save, serve_lifespan, table, wait_port

#: the fixed non-streaming answer and the fixed stream (20 events, the first sent at once)
STREAM_EVENTS = 20
STREAM_GAP_S = 0.002


def _answer() -> bytes:
    reply = {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1,
        "model": "bench",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok " * 100}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 2000, "completion_tokens": 100, "prompt_tokens_details": {"cached_tokens": 1920}},
    }
    return json.dumps(reply).encode()


def _events() -> list[bytes]:
    out = []
    for i in range(STREAM_EVENTS):
        chunk = {
            "id": "c",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": f"w{i} "}}],
        }
        out.append(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    out.append(b"data: [DONE]\n\n")
    return out


ANSWER = _answer()
EVENTS = _events()
STREAM_BYTES = b"".join(EVENTS)


# -- the upstream (run in a child process) -----------------------------------------------------


async def upstream_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await serve_lifespan(receive, send)
        return
    body = b""
    while True:
        msg = await receive()
        body += msg.get("body", b"")
        if not msg.get("more_body"):
            break
    digest = hashlib.sha256(body).hexdigest().encode()
    # streamed when the JSON says so, in either spacing: json.dumps writes '"stream": true', the
    # openai SDK (wrap_latency.py's agent) writes it compact
    stream = b'"stream": true' in body or b'"stream":true' in body
    ctype = b"text/event-stream" if stream else b"application/json"
    headers = [(b"content-type", ctype), (b"x-body-sha256", digest)]
    if not stream:
        headers.append((b"content-length", str(len(ANSWER)).encode()))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": ANSWER})
        return
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    for i, ev in enumerate(EVENTS):
        if i:
            await asyncio.sleep(STREAM_GAP_S)
        await send({"type": "http.response.body", "body": ev, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


def serve_upstream(port: int) -> None:
    import uvicorn

    uvicorn.run(upstream_app, host="127.0.0.1", port=port, log_level="warning", access_log=False, lifespan="on")


# -- the clients -------------------------------------------------------------------------------


def _body(client: int, turn: int, stream: bool) -> bytes:
    """A chat request that grows by one turn per call (about 4 KB + 300 bytes a turn)."""
    msgs: list[dict[str, str]] = [{"role": "system", "content": "You are a careful agent. " * 150}]
    for t in range(turn + 1):
        msgs.append({"role": "user", "content": f"client {client} step {t}: " + "look at the file " * 8})
        if t < turn:
            msgs.append({"role": "assistant", "content": "ok " * 30})
    body: dict[str, Any] = {"model": "bench", "messages": msgs}
    if stream:
        body["stream"] = True
    return json.dumps(body).encode()


async def _one_client(
    httpx_mod: Any, base: str, client_id: int, calls: int, stream: bool, out: dict[str, list[float]]
) -> None:
    async with httpx_mod.AsyncClient(base_url=base, timeout=30) as c:
        for turn in range(calls):
            body = _body(client_id, turn, stream)
            sent_sha = hashlib.sha256(body).hexdigest()
            headers = {"content-type": "application/json", "authorization": "Bearer sk-bench-not-a-key"}
            t0 = time.perf_counter()
            async with c.stream("POST", "/v1/chat/completions", content=body, headers=headers) as r:
                got = b""
                first: float | None = None
                async for chunk in r.aiter_raw():
                    if first is None:
                        first = time.perf_counter()
                    got += chunk
            t1 = time.perf_counter()
            out["latency"].append((t1 - t0) * 1000)
            if first is not None:
                out["ttfb"].append((first - t0) * 1000)
            expected = STREAM_BYTES if stream else ANSWER
            altered = r.headers.get("x-body-sha256") != sent_sha or got != expected
            out["altered"].append(float(altered))


async def _round(base: str, clients: int, calls: int, stream: bool) -> tuple[dict[str, list[float]], float]:
    import httpx

    out: dict[str, list[float]] = {"latency": [], "ttfb": [], "altered": []}
    t0 = time.perf_counter()
    await asyncio.gather(*(_one_client(httpx, base, i, calls, stream, out) for i in range(clients)))
    return out, time.perf_counter() - t0


def _p(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(
    direct: str, proxied: str, clients: int, calls: int, stream: bool, rounds: int, proxy_pid: int
) -> dict[str, Any]:
    res: dict[str, dict[str, list[float]]] = {
        "direct": {"latency": [], "ttfb": [], "altered": []},
        "proxy": {"latency": [], "ttfb": [], "altered": []},
    }
    wall = {"direct": 0.0, "proxy": 0.0}
    asyncio.run(_round(direct, clients, 2, stream))  # warm both paths (connections, imports)
    asyncio.run(_round(proxied, clients, 2, stream))
    proxy_cpu = 0.0
    for _ in range(rounds):
        for name, base in (("direct", direct), ("proxy", proxied)):
            before = cpu_seconds(proxy_pid)
            out, secs = asyncio.run(_round(base, clients, calls, stream))
            if name == "proxy":
                time.sleep(0.2)  # the recorder finishes the round's last calls
                proxy_cpu += cpu_seconds(proxy_pid) - before
            for k in out:
                res[name][k] += out[k]
            wall[name] += secs
    row: dict[str, Any] = {"clients": clients, "stream": stream, "requests": len(res["proxy"]["latency"])}
    for name in ("direct", "proxy"):
        lat = res[name]["latency"]
        row[f"{name}_median_ms"] = round(statistics.median(lat), 3)
        row[f"{name}_p99_ms"] = round(_p(lat, 0.99), 3)
        row[f"{name}_rps"] = round(len(lat) / wall[name], 1)
        if res[name]["ttfb"]:
            row[f"{name}_ttfb_median_ms"] = round(statistics.median(res[name]["ttfb"]), 3)
        row[f"{name}_altered"] = int(sum(res[name]["altered"]))
    row["proxy_cpu_ms_per_request"] = round(proxy_cpu * 1000 / len(res["proxy"]["latency"]), 3)
    row["added_median_ms"] = round(row["proxy_median_ms"] - row["direct_median_ms"], 3)
    row["added_p99_ms"] = round(row["proxy_p99_ms"] - row["direct_p99_ms"], 3)
    if stream:
        row["added_ttfb_ms"] = round(row["proxy_ttfb_median_ms"] - row["direct_ttfb_median_ms"], 3)
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer requests (a smoke run)")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    p.add_argument("--serve-upstream", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve_upstream:
        serve_upstream(args.serve_upstream)
        return 0
    load_start = os.getloadavg()[0]
    up_port, px_port = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    tmp = tempfile.mkdtemp(prefix="proxy-bench-")
    db = Path(tmp) / "proxy.db"
    upstream = subprocess.Popen([sys.executable, __file__, "--serve-upstream", str(up_port)], env=env)
    proxy = subprocess.Popen(
        [
            *(sys.executable, "-m", "ctxwright.cli.main", "proxy", "--quiet", "--db", str(db)),
            *("--upstream", f"http://127.0.0.1:{up_port}", "--port", str(px_port)),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
    )
    rows = []
    try:
        wait_port(up_port, upstream, "the upstream")
        wait_port(px_port, proxy, "the proxy")
        direct, proxied = f"http://127.0.0.1:{up_port}", f"http://127.0.0.1:{px_port}"
        rounds = 1 if args.quick else 3
        per_client = {1: 100, 8: 30, 32: 10} if not args.quick else {1: 20, 8: 5, 32: 2}
        for stream in (False, True):
            for clients in (1, 8, 32):
                row = measure(direct, proxied, clients, per_client[clients], stream, rounds, proxy.pid)
                rows.append(row)
                console.print(
                    f"{'stream' if stream else 'plain '} {clients:>2} clients: direct {row['direct_median_ms']:.2f} ms, "
                    f"proxy {row['proxy_median_ms']:.2f} ms (added {row['added_median_ms']:+.2f}, "
                    f"p99 {row['added_p99_ms']:+.2f})"
                )
    finally:
        for proc in (proxy, upstream):
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
    from ctxwright.proxy.log import proxy_sessions
    from ctxwright.store.sessions import Store

    store = Store(db)
    recorded = sum(s["calls"] for s in proxy_sessions(store))
    store.close()
    expected = sum(r["requests"] for r in rows) + sum(2 * r["clients"] for r in rows)  # + warm-up calls
    plain8 = next(r for r in rows if r["clients"] == 8 and not r["stream"])
    ttfb_worst = max(r["added_ttfb_ms"] for r in rows if r["stream"])
    altered = sum(r["proxy_altered"] + r["direct_altered"] for r in rows)
    checks = {
        "median_added_ms_8_clients<=2": plain8["added_median_ms"] <= 2.0,
        "p99_added_ms_8_clients<=10": plain8["added_p99_ms"] <= 10.0,
        "ttfb_added_ms<=2": ttfb_worst <= 2.0,
        "bytes_altered==0": altered == 0,
        "every_call_recorded": recorded == expected,
    }
    cols = ["mode", "clients", "requests", "direct med ms", "proxy med ms", "added med", "direct p99", "proxy p99"]
    cols += ["added p99", "direct req/s", "proxy req/s", "ttfb direct", "ttfb proxy", "ttfb added", "proxy cpu ms"]
    cols += ["altered"]
    trows = [
        [
            "stream" if r["stream"] else "plain",
            r["clients"],
            r["requests"],
            r["direct_median_ms"],
            r["proxy_median_ms"],
            r["added_median_ms"],
            r["direct_p99_ms"],
            r["proxy_p99_ms"],
            r["added_p99_ms"],
            r["direct_rps"],
            r["proxy_rps"],
            r.get("direct_ttfb_median_ms"),
            r.get("proxy_ttfb_median_ms"),
            r.get("added_ttfb_ms"),
            r["proxy_cpu_ms_per_request"],
            r["proxy_altered"] + r["direct_altered"],
        ]
        for r in rows
    ]
    console.print(table("proxy overhead (loopback upstream, ms per request)", cols, trows))
    for name, ok in checks.items():
        console.print(f"{'PASS' if ok else 'FAIL'}  {name}")
    console.print(f"recorded {recorded} of {expected} calls in the proxy's store")
    load = os.getloadavg()
    console.print(
        f"load average (1 min): {load_start:.1f} at the start, {load[0]:.1f} at the end, on {os.cpu_count()} cores "
        "(client, upstream and proxy share them with whatever else runs)"
    )
    save(
        args,
        {
            "benchmark": "proxy_overhead",
            "machine": machine(),
            "load_average_1m_at_start": round(load_start, 2),
            "load_average_1m_at_end": round(load[0], 2),
            "quick": args.quick,
            "stream_events": STREAM_EVENTS,
            "stream_gap_ms": STREAM_GAP_S * 1000,
            "request_bytes_first": len(_body(0, 0, False)),
            "rows": rows,
            "recorded_calls": recorded,
            "expected_calls": expected,
            "checks": checks,
            "pass": all(checks.values()),
        },
    )
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
