"""What `ctxwright proxy` adds to each model call, against a bare relay on the same stack.

Four processes on loopback: an upstream (a minimal ASGI app on uvicorn that answers an
OpenAI chat-completions request with fixed bytes, streamed or not, after ``--upstream-ms``
of think time), the real proxy (`ctxwright proxy --quiet`, recording to a fresh SQLite file
and auditing every call), the floor -- a bare relay on the proxy's own stack (Starlette on
uvicorn with httptools and uvloop, one httpx client, the answer streamed back as it comes,
nothing recorded) -- and this process as the clients (httpx, 1, 8 and 32 concurrent clients,
each a conversation whose request grows by one turn per call). Clients either keep their
connection alive or open a new one per request. Every configuration is run against the
upstream directly, through the relay and through the proxy, alternating rounds, in the same
run; the table puts them side by side.

Measured per request at the client: latency (send to last byte) and, streaming, time to the
first body byte. Added latency: each configuration runs ``ROUNDS`` rounds, each round the
upstream directly, the relay and the proxy in turn (who goes first rotates); a path's added
latency in a round is its median minus the direct median of that round, and the row's figure
is the median over rounds. The proxy's ratio to the relay is judged only where the relay's
added latency stands out of the measurement's own noise (above 1 ms and above the spread of
its per-round figures); where it does not, a ratio of two noise-sized numbers means nothing,
the table says so ("noise: ...") and the row is judged by proxy minus relay against that
noise. The JSON keeps every per-round figure. Bytes altered:
the upstream returns the sha256 of the body it received in a header, and the client compares
it with what it sent and the body it received with the upstream's fixed bytes; any difference
counts. Each relay's CPU time per request (the proxy's: relay, recording and live audit
together; every thread of the process and any process under it) is read from ``/proc``:
unlike latency, it hardly depends on what else the machine runs.

    python benchmarks/proxy_overhead.py [--quick] [--upstream-ms MS] [--json PATH]

Target: at 8 and 32 clients, for both client kinds and both modes, the proxy's added latency
(or, where the relay's is within the noise, the difference) and CPU per request within 1.3x
the bare relay's; 0 bytes altered; every call recorded.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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
#: the proxy's added latency and CPU per request may be at most this times the bare relay's
TARGET_RATIO = 1.3
#: the client counts the target holds at
TARGET_CLIENTS = (8, 32)
#: rounds per configuration (each runs direct, relay and proxy in turn)
ROUNDS = 5
#: the upstream's think time before it answers (seconds; ``--upstream-ms``)
UPSTREAM_DELAY_S = 0.0


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
    if UPSTREAM_DELAY_S:
        await asyncio.sleep(UPSTREAM_DELAY_S)  # a provider's time to the first token
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


def serve_upstream(port: int, delay_ms: float = 0.0) -> None:
    import uvicorn

    global UPSTREAM_DELAY_S
    UPSTREAM_DELAY_S = delay_ms / 1000
    uvicorn.run(upstream_app, host="127.0.0.1", port=port, log_level="warning", access_log=False, lifespan="on")


# -- the floor: a bare relay on the proxy's stack (run in a child process) ---------------------


def serve_relay(port: int, upstream: str) -> None:
    """Starlette on uvicorn (httptools, uvloop when installed, as the proxy), one httpx client
    for the process's life, each answer streamed back as its raw bytes: what any relay on this
    stack costs, nothing recorded or audited."""
    import contextlib

    import httpx
    import uvicorn
    from starlette.applications import Starlette
    from starlette.background import BackgroundTask
    from starlette.requests import Request
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    from ctxwright.proxy.server import listening_socket, uvicorn_config

    state: dict[str, httpx.AsyncClient] = {}
    hop = {"host", "connection", "keep-alive", "transfer-encoding", "content-length"}

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> Any:
        async with httpx.AsyncClient(base_url=upstream, timeout=600) as client:
            state["client"] = client
            yield

    async def relay(request: Request) -> StreamingResponse:
        headers = [(k, v) for k, v in request.headers.raw if k.decode("latin-1").lower() not in hop]
        outgoing = state["client"].build_request(
            request.method, request.url.path, headers=headers, content=await request.body()
        )
        r = await state["client"].send(outgoing, stream=True)
        out = {k: v for k, v in r.headers.items() if k.lower() not in hop}
        return StreamingResponse(
            r.aiter_raw(), status_code=r.status_code, headers=out, background=BackgroundTask(r.aclose)
        )

    app = Starlette(routes=[Route("/{path:path}", relay, methods=["GET", "POST"])], lifespan=lifespan)
    sock = listening_socket("127.0.0.1")
    sock.bind(("127.0.0.1", port))
    uvicorn.Server(uvicorn_config(app, "127.0.0.1", port)).run(sockets=[sock])


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
    httpx_mod: Any, base: str, client_id: int, calls: int, stream: bool, fresh: bool, out: dict[str, list[float]]
) -> None:
    # a new connection per request (``fresh``): no idle connection is kept, each request dials
    limits = httpx_mod.Limits(max_keepalive_connections=0) if fresh else httpx_mod.Limits()
    async with httpx_mod.AsyncClient(base_url=base, timeout=60, limits=limits) as c:
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


async def _round(
    base: str, clients: int, calls: int, stream: bool, fresh: bool, first_id: int
) -> tuple[dict[str, list[float]], float]:
    import httpx

    out: dict[str, list[float]] = {"latency": [], "ttfb": [], "altered": []}
    t0 = time.perf_counter()
    await asyncio.gather(*(_one_client(httpx, base, first_id + i, calls, stream, fresh, out) for i in range(clients)))
    return out, time.perf_counter() - t0


def _p(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float:
    """:func:`cpu_seconds` of a process and every process under it: whatever part of a relay
    runs in another process counts too."""
    total = cpu_seconds(pid)
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in children:
            with contextlib.suppress(OSError):  # (gone meanwhile)
                total += tree_cpu_seconds(int(child))
    return total


TARGETS = ("direct", "relay", "proxy")
#: each round's conversations are new ones (new client ids): the proxy places each in a new
#: session, as it would a new agent's, instead of finding the same conversation again
_ids = iter(range(10**9))
#: an added latency at or under this is within loopback timing's own noise, whatever the rounds say
NOISE_FLOOR_MS = 1.0


def _judge(relay_rounds: list[float], proxy_rounds: list[float]) -> dict[str, Any]:
    """The added-latency verdict of one configuration from its per-round figures.

    Each round measures the upstream directly, through the relay and through the proxy, one
    after the other, and a path's added latency in that round is its median minus the direct
    median of the same round: what the machine did meanwhile moves all three. The row's
    figure is the median over rounds. The ratio to the floor means something only when the
    floor's own added latency stands out of the noise -- above ``NOISE_FLOOR_MS`` and above
    the spread (max - min) of its per-round figures; otherwise a ratio of two noise-sized
    numbers says nothing (a floor of -0.8 ms once gave 11.6x), and the row is judged by the
    absolute difference proxy - relay against that same noise instead. Every per-round figure
    is kept in the JSON."""
    relay, proxy = statistics.median(relay_rounds), statistics.median(proxy_rounds)
    spread = max(relay_rounds) - min(relay_rounds)
    noise = max(NOISE_FLOOR_MS, spread)
    meaningful = relay > noise
    ratio = proxy / relay if relay > 0 else None
    ok = (ratio is not None and ratio <= TARGET_RATIO) if meaningful else (proxy - relay <= noise)
    return {
        "relay_added_median_ms": round(relay, 3),
        "proxy_added_median_ms": round(proxy, 3),
        "relay_added_rounds_ms": [round(x, 3) for x in relay_rounds],
        "proxy_added_rounds_ms": [round(x, 3) for x in proxy_rounds],
        "relay_added_spread_ms": round(spread, 3),
        "noise_ms": round(noise, 3),
        "added_difference_ms": round(proxy - relay, 3),
        "added_ratio": None if ratio is None else round(ratio, 2),
        "added_ratio_meaningful": meaningful,
        "added_within_target": ok,
    }


def measure(
    bases: dict[str, str], clients: int, calls: int, stream: bool, fresh: bool, rounds: int, pids: dict[str, int]
) -> dict[str, Any]:
    res = {name: {"latency": [], "ttfb": [], "altered": []} for name in TARGETS}
    wall = dict.fromkeys(TARGETS, 0.0)
    cpu = dict.fromkeys(TARGETS, 0.0)
    medians: dict[str, list[float]] = {name: [] for name in TARGETS}
    cpu_rounds: dict[str, list[float]] = {"relay": [], "proxy": []}
    for name in TARGETS:  # warm every path (connections, imports)
        asyncio.run(_round(bases[name], clients, 2, stream, fresh, next(_ids) * 64))
    for r in range(rounds):
        order = TARGETS[r % 3 :] + TARGETS[: r % 3]  # who goes first changes from round to round
        for name in order:
            pid = pids.get(name)
            before = tree_cpu_seconds(pid) if pid else 0.0
            out, secs = asyncio.run(_round(bases[name], clients, calls, stream, fresh, next(_ids) * 64))
            if pid:
                time.sleep(0.2)  # (a relay's last calls end: the proxy's recorder, say)
                used = tree_cpu_seconds(pid) - before
                cpu[name] += used
                cpu_rounds[name].append(round(used * 1000 / len(out["latency"]), 3))
            for k in out:
                res[name][k] += out[k]
            wall[name] += secs
            medians[name].append(statistics.median(out["latency"]))
    row: dict[str, Any] = {
        "clients": clients,
        "stream": stream,
        "connection": "new" if fresh else "keep-alive",
        "rounds": rounds,
        "requests": len(res["proxy"]["latency"]),
    }
    for name in TARGETS:
        lat = res[name]["latency"]
        row[f"{name}_median_ms"] = round(statistics.median(lat), 3)
        row[f"{name}_round_medians_ms"] = [round(x, 3) for x in medians[name]]
        row[f"{name}_p99_ms"] = round(_p(lat, 0.99), 3)
        row[f"{name}_rps"] = round(len(lat) / wall[name], 1)
        if res[name]["ttfb"]:
            row[f"{name}_ttfb_median_ms"] = round(statistics.median(res[name]["ttfb"]), 3)
        row[f"{name}_altered"] = int(sum(res[name]["altered"]))
    added = {
        name: [m - d for m, d in zip(medians[name], medians["direct"], strict=True)] for name in ("relay", "proxy")
    }
    for name in ("relay", "proxy"):
        row[f"{name}_cpu_ms_per_request"] = round(cpu[name] * 1000 / len(res[name]["latency"]), 3)
        row[f"{name}_cpu_rounds_ms_per_request"] = cpu_rounds[name]
        row[f"{name}_added_p99_ms"] = round(row[f"{name}_p99_ms"] - row["direct_p99_ms"], 3)
        if stream:
            row[f"{name}_added_ttfb_ms"] = round(row[f"{name}_ttfb_median_ms"] - row["direct_ttfb_median_ms"], 3)
    row.update(_judge(added["relay"], added["proxy"]))
    row["cpu_ratio"] = round(row["proxy_cpu_ms_per_request"] / max(row["relay_cpu_ms_per_request"], 1e-3), 2)
    row["within_target"] = row["added_within_target"] and row["cpu_ratio"] <= TARGET_RATIO
    return row


def _added_text(row: dict[str, Any]) -> str:
    """The added-latency verdict as the table says it: the ratio, or the difference within the noise."""
    if row["added_ratio_meaningful"]:
        return f"x{row['added_ratio']:.2f}"
    return f"~{row['added_difference_ms']:+.1f}±{row['noise_ms']:.1f}"


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer requests (a smoke run)")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    p.add_argument(
        "--upstream-ms",
        type=float,
        help="the upstream's think time before it answers (default 50; 0 when serving the upstream alone)",
    )
    p.add_argument("--serve-upstream", type=int, metavar="PORT", help=argparse.SUPPRESS)
    p.add_argument("--serve-relay", nargs=2, metavar=("PORT", "UPSTREAM"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve_upstream:
        serve_upstream(args.serve_upstream, args.upstream_ms or 0.0)  # (proxy_workers.py serves it without)
        return 0
    if args.serve_relay:
        serve_relay(int(args.serve_relay[0]), args.serve_relay[1])
        return 0
    if args.upstream_ms is None:
        args.upstream_ms = 50.0
    load_start = os.getloadavg()[0]
    up_port, px_port, rl_port = free_port(), free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    tmp = tempfile.mkdtemp(prefix="proxy-bench-")
    db = Path(tmp) / "proxy.db"
    up_url = f"http://127.0.0.1:{up_port}"
    upstream = subprocess.Popen(
        [sys.executable, __file__, "--serve-upstream", str(up_port), "--upstream-ms", str(args.upstream_ms)], env=env
    )
    relay = subprocess.Popen([sys.executable, __file__, "--serve-relay", str(rl_port), up_url], env=env)
    proxy = subprocess.Popen(
        [
            *(sys.executable, "-m", "ctxwright.cli.main", "proxy", "--quiet", "--db", str(db)),
            *("--upstream", up_url, "--port", str(px_port)),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
    )
    rows = []
    try:
        wait_port(up_port, upstream, "the upstream")
        wait_port(rl_port, relay, "the bare relay")
        wait_port(px_port, proxy, "the proxy")
        bases = {"direct": up_url, "relay": f"http://127.0.0.1:{rl_port}", "proxy": f"http://127.0.0.1:{px_port}"}
        pids = {"relay": relay.pid, "proxy": proxy.pid}
        rounds = 2 if args.quick else ROUNDS
        per_client = {1: 24, 8: 15, 32: 6} if not args.quick else {1: 6, 8: 3, 32: 2}
        for stream in (False, True):
            for fresh in (False, True):
                for clients in (1, 8, 32):
                    row = measure(bases, clients, per_client[clients], stream, fresh, rounds, pids)
                    rows.append(row)
                    console.print(
                        f"{'stream' if stream else 'plain '} {row['connection']:>10} {clients:>2} clients: "
                        f"added relay {row['relay_added_median_ms']:+.2f} ms, proxy {row['proxy_added_median_ms']:+.2f} "
                        f"({_added_text(row)}); cpu relay {row['relay_cpu_ms_per_request']:.2f} ms, "
                        f"proxy {row['proxy_cpu_ms_per_request']:.2f} (x{row['cpu_ratio']:.2f})"
                    )
    finally:
        _stop([proxy, relay, upstream])
    from ctxwright.proxy.log import proxy_sessions
    from ctxwright.store.sessions import Store

    store = Store(db)
    recorded = sum(s["calls"] for s in proxy_sessions(store))
    store.close()
    expected = sum(r["requests"] + 2 * r["clients"] for r in rows)  # + warm-up calls
    altered = sum(r[f"{n}_altered"] for r in rows for n in TARGETS)
    targeted = [r for r in rows if r["clients"] in TARGET_CLIENTS]
    checks = {
        f"added_latency<={TARGET_RATIO}x_relay_or_within_noise_at_8_and_32_clients": all(
            r["added_within_target"] for r in targeted
        ),
        f"cpu_per_request_ratio<={TARGET_RATIO}_at_8_and_32_clients": all(
            r["cpu_ratio"] <= TARGET_RATIO for r in targeted
        ),
        "bytes_altered==0": altered == 0,
        "every_call_recorded": recorded == expected,
    }
    cols = ["mode", "connection", "clients", "requests", "direct med ms", "relay added", "proxy added", "noise ±"]
    cols += ["added ×"]
    cols += [
        "relay cpu ms",
        "proxy cpu ms",
        "cpu ×",
        "ttfb relay +",
        "ttfb proxy +",
    ]
    cols += ["altered"]  # (p99s and requests per second: in the JSON)
    trows = [
        [
            "stream" if r["stream"] else "plain",
            r["connection"],
            r["clients"],
            r["requests"],
            r["direct_median_ms"],
            r["relay_added_median_ms"],
            r["proxy_added_median_ms"],
            r["noise_ms"],
            _added_text(r),
            r["relay_cpu_ms_per_request"],
            r["proxy_cpu_ms_per_request"],
            r["cpu_ratio"],
            r.get("relay_added_ttfb_ms"),
            r.get("proxy_added_ttfb_ms"),
            sum(r[f"{n}_altered"] for n in TARGETS),
        ]
        for r in rows
    ]
    title = f"proxy overhead against a bare relay (loopback upstream answering after {args.upstream_ms:g} ms)"
    console.print(table(title, cols, trows))
    console.print(
        f"added latency: medians over {rounds} rounds of (path median - direct median) in the same round. "
        "'added ×' is the proxy's over the relay's where the relay's stands out of the noise; '~d±n' where it "
        f"does not (under {NOISE_FLOOR_MS:g} ms or under the spread of its rounds): no ratio means anything "
        "there, and the row is judged by the difference d against the noise n"
    )
    for name, ok in checks.items():
        console.print(f"{'PASS' if ok else 'FAIL'}  {name}")
    console.print(f"recorded {recorded} of {expected} calls in the proxy's store")
    load = os.getloadavg()
    console.print(
        f"load average (1 min): {load_start:.1f} at the start, {load[0]:.1f} at the end, on {os.cpu_count()} cores "
        "(clients, upstream, relay and proxy share them with whatever else runs)"
    )
    save(
        args,
        {
            "benchmark": "proxy_overhead",
            "machine": machine(),
            "load_average_1m_at_start": round(load_start, 2),
            "load_average_1m_at_end": round(load[0], 2),
            "quick": args.quick,
            "upstream_ms": args.upstream_ms,
            "target_ratio": TARGET_RATIO,
            "rounds": rounds,
            "noise_floor_ms": NOISE_FLOOR_MS,
            "added_latency_rule": (
                "per round: a path's median minus the direct median of the same round; per row: the median over "
                "rounds. The ratio to the relay is judged only when the relay's added latency exceeds the noise "
                f"(max of {NOISE_FLOOR_MS} ms and the spread of its per-round figures); otherwise the row is judged "
                "by proxy - relay <= noise and added_ratio_meaningful is false"
            ),
            "target_clients": list(TARGET_CLIENTS),
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
