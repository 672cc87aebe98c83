"""Hostile inputs, measured: memory and time stay bounded on what a careless or hostile peer sends.

Each case runs in a fresh process and reads that process's peak RSS (``VmHWM`` in
``/proc/<pid>/status`` for a process this script talks to, ``os.wait4``'s ``ru_maxrss`` for a
command that runs to its end), beside the same process on a harmless input:

1. **Proxy.** A gzip request body that expands to 256 MiB (``--quick``: 64 MiB), and a gzip
   answer that does the same, through the real ``ctxwright proxy --record-cap 1`` (a
   subprocess on a free loopback port; the upstream is a minimal ASGI app on uvicorn in a
   child process of its own, which never decodes either). Reported: how much the proxy's
   peak RSS grew over its RSS just before (after a plain request; the peak is started afresh
   with ``/proc/<pid>/clear_refs``), the time of the exchange, and what the recorded row says.
2. **MCP line reading.** One JSON-RPC line of 5, 10 and 20 MB (quick: 2, 5, 10) cut into
   lines two ways, side by side: the loop of the ``mcp`` SDK's stdio reader
   (``mcp/client/stdio.py`` of mcp 2.3.0, ``stdio_client``'s ``stdout_reader``: each chunk
   decoded by an incremental UTF-8 decoder, as anyio's ``TextReceiveStream`` does, then
   ``lines = (buffer + chunk).split("\\n"); buffer = lines.pop()``), replicated because it is
   a closure inside ``stdio_client``, and ctxwright's ``LineSplitter``
   (``src/ctxwright/mcp/lines.py``), both fed the same 64 KiB chunks. Then the real readers,
   unmodified: the SDK's ``stdio_client`` and ctxwright's ``stdio_transport``, each reading
   the same line from ``cat FILE`` up to the message it delivers (ctxwright's through its
   supervisor process, whose start is in its time). Medians of ``--runs`` runs each. Then end
   to end: a real MCP server (written with the SDK's low-level ``Server``, started from this
   file) returning a 30 MB result (quick: 10 MB) to ctxwright's ``McpConnection`` (fails with
   ``mcp_result_too_large``) and to the SDK's own ``Client`` over ``stdio_client`` (reads it
   whole), then a small call on the same connection.
3. **Audit.** ``ctxwright audit --max-record-bytes 1048576`` of a log that is one line of
   64 MiB (quick: 16 MiB), ``ctxwright audit /dev/zero``, and ``cat /dev/zero | ctxwright audit
   --max-record-bytes 1048576 -``; beside ``ctxwright audit`` of a three-line log.
4. **Skills.** ``ctxwright skills show`` of a ``SKILL.md`` whose front matter is a YAML alias
   bomb (9**9 strings in under a kilobyte), under an address-space limit of 2 GiB as a guard;
   beside ``skills show`` of a plain skill.
5. **Workspace.** 2,000 reads (quick: 500) through ``read_file`` of a path whose folder (and
   a file) another process swaps for a symlink to a folder outside, as fast as it can; beside
   the same reads with no swapper. Leaks (a read that returned the outside file) are counted.
6. **Proxy backlog.** 4 clients sending requests of 200 KB as fast as the proxy answers, through
   one real ``ctxwright proxy --quiet`` process (SQLite store), ``--backlog-rounds`` rounds of
   ``--backlog-requests`` requests per client (default 2 × 250; quick 2 × 60), then the proxy
   is stopped with SIGINT (a clean stop), SIGTERM, or SIGKILL right after the last answer -- a
   fresh proxy for each. Reported: answered vs recorded (matched by a marker in each request),
   the backlog's peak (answered but not yet in the store, sampled every 20 ms from the
   database), the proxy's RSS after each round and its peak, requests per second. With an
   unbounded queue the recorder fell behind the relay without limit (RSS 642 -> 1,858 MB over
   four rounds) and a stop lost what the queue held. ``--backlog-only`` runs this part alone.

    python benchmarks/hostile.py [--quick] [--runs N] [--json PATH] [--backlog-only]

Targets: the proxy's peak RSS grows by under 64 MiB on a 256 MiB expansion and the row says
"decoded size over the recording cap"; ctxwright's line splitting at least 50x faster than the
SDK's loop at the largest size; the 30 MB MCP result fails with ``mcp_result_too_large`` within
5 s and the next call answers within 5 s; each audit and skills case exits with its one-line
refusal within 10 s in under 200 MiB of peak RSS; 0 leaks; the proxy backlog loses 0 answered
exchanges however the proxy stops, and the proxy's RSS grows by under 64 MiB from one round of
load to the next.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import hashlib
import itertools
import json
import os
import re
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, console, free_port, machine, save, serve_lifespan, table, wait_port

MIB = 1024 * 1024
CHUNK = 64 * 1024
#: what the proxy records at most of a body (``--record-cap 1``), in bytes
RECORD_CAP = MIB
AUDIT_CAP = MIB
#: address space of the skills child: a guard, so a regression fails there, not on the host
SKILLS_AS = 2 * 1024 * MIB
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
CHAT = {"model": "bench", "messages": [{"role": "user", "content": "hello"}]}
ANSWER = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "model": "bench",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 1},
    }
).encode()
#: "billion laughs": each level aliases the one before nine times (9**9 strings once expanded)
ALIAS_BOMB = (
    "---\nname: bomb\ndescription: Use for nothing.\nmetadata:\n"
    '  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    + "".join(f"  {n}: &{n} [{','.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True))
    + "---\nBody.\n"
)


# -- measuring ---------------------------------------------------------------------------------


def vm_hwm_kib(pid: int | str = "self") -> int:
    """Peak resident set size of a live process so far, in KiB (Linux ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise SystemExit(f"no VmHWM in /proc/{pid}/status")


def reset_peak(pid: int | str = "self") -> int:
    """Start a process's peak RSS afresh (``5`` to ``/proc/<pid>/clear_refs`` sets ``VmHWM`` to
    the current RSS) and return it in KiB, so that a later ``VmHWM`` is the peak of what came
    after. Where the kernel refuses, the peak so far (growth is then measured over that peak)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return vm_hwm_kib(pid)
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return vm_hwm_kib(pid)


def run_to_end(
    cmd: Sequence[str],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    stdin: Any = None,
    preexec_fn: Callable[[], None] | None = None,
    timeout: float = 300.0,
) -> dict[str, Any]:
    """Run ``cmd`` to its end: exit code, wall seconds, peak RSS (``os.wait4``), stdout, stderr."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        child = subprocess.Popen(
            list(cmd), cwd=cwd, env=env or ENV, stdin=stdin, stdout=out, stderr=err, preexec_fn=preexec_fn
        )
        killer = threading.Timer(timeout, child.kill)
        killer.start()
        try:
            _, status, usage = os.wait4(child.pid, 0)
        finally:
            killer.cancel()
        seconds = time.perf_counter() - t0
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return {
            "exit": child.returncode,
            "seconds": round(seconds, 3),
            "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),  # KiB on Linux
            "stdout": out.read().decode("utf-8", "replace"),
            "stderr": err.read().decode("utf-8", "replace"),
        }


def child_json(*args: str, timeout: float = 300.0) -> dict[str, Any]:
    """Run this file as ``--child ARGS`` and return the JSON it prints last. (Its memory is
    read inside it: ``os.wait4``'s peak would be the largest of it and every process it
    waited for, an MCP server or a swapper included.)"""
    done = run_to_end([sys.executable, __file__, "--child", *args], timeout=timeout)
    lines = done["stdout"].strip().splitlines()
    if done["exit"] != 0 or not lines:
        raise SystemExit(f"child {args} exited {done['exit']}: {done['stderr'].strip()[-800:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(30)


#: the words of each refusal quoted in the table (the rest of its line names the file and the fix)
SAID = re.compile(
    r"line 1 is longer than [\d,]+ bytes|is a character device, not a log|there is no skill named '\w+'"
    r"|front matter refused at line \d+: its aliases repeat more than [\d,]+ characters"
)


def told(done: dict[str, Any], tmp: Path) -> dict[str, Any]:
    """What a command said on stderr: its lines (the temporary folder written ``$TMP``), how
    many, whether a traceback was among them, and the refusal's words."""
    stderr = done.pop("stderr").replace(str(tmp), "$TMP").strip()
    stdout = done.pop("stdout")
    return {
        **done,
        "stdout_bytes": len(stdout),
        "stderr": stderr,
        "stderr_lines": len(stderr.splitlines()),
        "traceback": "Traceback" in stderr,
        "said": "; ".join(dict.fromkeys(SAID.findall(stderr))),
    }


def gzip_bomb(mib: int) -> bytes:
    """gzip of ``mib`` MiB of zeros (about 1 KB per MiB), made a MiB at a time."""
    c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(MIB)
    return b"".join(c.compress(zeros) for _ in range(mib)) + c.flush()


# -- 1. the proxy ------------------------------------------------------------------------------


def upstream_app(bomb: bytes) -> Any:
    """An OpenAI-shaped upstream that never decodes a body: a compressed request gets the 400 a
    provider gives a body it cannot parse; ``x-bench-bomb`` asks for the gzip answer ``bomb``."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send)
            return
        headers = dict(scope["headers"])
        while True:  # read the body and drop it
            msg = await receive()
            if not msg.get("more_body"):
                break
        status, extra, body = 200, [(b"content-type", b"application/json")], ANSWER
        if b"content-encoding" in headers:
            status = 400
            body = b'{"error": {"message": "We could not parse the JSON body of your request.", "type": "invalid_request_error"}}'
        elif b"x-bench-bomb" in headers:
            extra.append((b"content-encoding", b"gzip"))
            body = bomb
        extra.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": extra})
        await send({"type": "http.response.body", "body": body})

    return app


def serve_upstream(port: int, bomb_mib: int) -> None:
    import uvicorn

    app = upstream_app(gzip_bomb(bomb_mib))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, lifespan="on")


def _rows(db: Path) -> list[dict[str, Any]]:
    if not db.exists():
        return []
    try:
        with contextlib.closing(sqlite3.connect(db)) as con:
            con.row_factory = sqlite3.Row
            return [dict(r) for r in con.execute("SELECT * FROM proxy_exchanges ORDER BY id")]
    except sqlite3.OperationalError:  # the proxy has not created its tables yet
        return []


def _wait_rows(db: Path, n: int, timeout: float = 120.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        rows = _rows(db)
        if len(rows) >= n or time.monotonic() > deadline:
            return rows
        time.sleep(0.05)


def proxy_case(kind: str, upstream: str, bomb: bytes, bomb_mib: int, tmp: Path) -> dict[str, Any]:
    """A fresh ``ctxwright proxy``: one plain request (the baseline), then the case's request."""
    import httpx

    db, port = tmp / f"proxy-{kind}.db", free_port()
    cmd = [sys.executable, "-m", "ctxwright.cli.main", "proxy", "--quiet", "--db", str(db), "--upstream", upstream]
    cmd += ["--port", str(port), "--record-cap", str(RECORD_CAP // MIB)]
    proxy = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}/v1/chat/completions"
    headers = {"authorization": "Bearer sk-bench-not-a-key", "content-type": "application/json"}
    try:
        wait_port(port, proxy, "the proxy")
        with httpx.Client(timeout=120) as c:
            warm = c.post(base, json=CHAT, headers=headers)
            assert warm.status_code == 200, warm.text
            if len(_wait_rows(db, 1)) != 1:
                raise SystemExit("the proxy did not record the plain request")
            baseline = reset_peak(proxy.pid)  # warmed up: imports, one relay, one audit, one write
            t0 = time.perf_counter()
            if kind == "plain":
                r = c.post(base, json=CHAT, headers=headers)
                sent, got = len(json.dumps(CHAT)), r.content
            elif kind == "request":
                r = c.post(base, content=bomb, headers={**headers, "content-encoding": "gzip"})
                sent, got = len(bomb), r.content
            else:
                with c.stream("POST", base, json=CHAT, headers={**headers, "x-bench-bomb": "1"}) as r:
                    got = b"".join(r.iter_raw())  # raw: this side must not expand it either
                sent = len(json.dumps(CHAT))
            seconds = time.perf_counter() - t0
        rows = _wait_rows(db, 2)
        recorded_s = time.perf_counter() - t0
        peak = vm_hwm_kib(proxy.pid)
    finally:
        stop(proxy)
    if len(rows) != 2:
        raise SystemExit(f"the proxy recorded {len(rows)} rows for {kind}, not 2")
    row = rows[-1]
    side = "response" if kind == "answer" else "request"
    expected = bomb if kind == "answer" else ANSWER if kind == "plain" else None
    return {
        "case": kind,
        "sent_bytes": sent,
        "received_bytes": len(got),
        "expands_to_mib": bomb_mib if kind != "plain" else None,
        "status": r.status_code,
        "bytes_as_sent": expected is None or got == expected,
        "seconds": round(seconds, 3),
        "seconds_to_recorded": round(recorded_s, 3),
        "rss_before_mib": round(baseline / 1024, 1),
        "peak_rss_mib": round(peak / 1024, 1),
        "growth_mib": round((peak - baseline) / 1024, 1),
        "recorded": {
            "bytes": row[f"{side}_bytes"],
            "body_stored": row[f"{side}_body"] is not None,
            "sha256_matches": kind == "plain" or row[f"{side}_sha256"] == hashlib.sha256(bomb).hexdigest(),
            "error": row["error"],
            "status": row["status"],
            "outcome": row["outcome"],
        },
    }


def proxy_part(bomb_mib: int, tmp: Path) -> list[dict[str, Any]]:
    up_port = free_port()
    upstream = subprocess.Popen([sys.executable, __file__, "--serve-upstream", str(up_port), str(bomb_mib)], env=ENV)
    bomb = gzip_bomb(bomb_mib)
    try:
        wait_port(up_port, upstream, "the upstream")
        rows = [
            proxy_case(k, f"http://127.0.0.1:{up_port}", bomb, bomb_mib, tmp) for k in ("plain", "request", "answer")
        ]
    finally:
        stop(upstream)
    for r in rows:
        console.print(f"[dim]proxy {r['case']}: grew {r['growth_mib']:+.1f} MiB in {r['seconds']:.2f} s[/]")
    return rows


# -- 6. the proxy backlog ----------------------------------------------------------------------

#: the marker each backlog request carries, read back from the recorded bodies
MARKER = re.compile(rb"bl-\d+-\d+-\d+")


def _vm_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _recorded_markers(db: Path) -> list[str]:
    if not db.exists():
        return []
    try:
        with contextlib.closing(sqlite3.connect(db)) as con:
            rows = con.execute("SELECT substr(request_body, 1, 200) FROM proxy_exchanges").fetchall()
    except sqlite3.OperationalError:
        return []
    found = (MARKER.search(bytes(head or b"")) for (head,) in rows)
    return [m.group(0).decode() for m in found if m]


def _recorded_count(db: Path) -> int:
    try:
        with contextlib.closing(sqlite3.connect(db)) as con:
            return int(con.execute("SELECT COUNT(*) FROM proxy_exchanges").fetchone()[0])
    except sqlite3.OperationalError:
        return 0


def backlog_case(upstream: str, how: str, clients: int, each: int, rounds: int, size: int, tmp: Path) -> dict[str, Any]:
    """A fresh ``ctxwright proxy --quiet`` under ``rounds`` rounds of load, then stopped by ``how``."""
    import httpx

    db, port = tmp / f"backlog-{how}.db", free_port()
    cmd = [sys.executable, "-m", "ctxwright.cli.main", "proxy", "--quiet", "--db", str(db), "--upstream", upstream]
    proxy = subprocess.Popen([*cmd, "--port", str(port)], env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    answered: list[str] = []
    lock = threading.Lock()
    pad = "x" * size
    headers = {"authorization": "Bearer sk-bench-not-a-key"}
    rss_after: list[float] = []
    peak_backlog = 0
    done = threading.Event()

    def client(r: int, c: int) -> None:
        with httpx.Client(timeout=300) as http:
            for i in range(each):
                marker = f"bl-{r}-{c}-{i}"
                body = {"model": "bench", "messages": [{"role": "user", "content": f"{marker} {pad}"}]}
                resp = http.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, headers=headers)
                if resp.status_code == 200:
                    with lock:
                        answered.append(marker)

    def sample() -> None:
        nonlocal peak_backlog
        while not done.is_set():
            with lock:
                n = len(answered)
            peak_backlog = max(peak_backlog, n - _recorded_count(db))
            time.sleep(0.02)

    try:
        wait_port(port, proxy, "the proxy")
        t0 = time.perf_counter()
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        for r in range(rounds):
            threads = [threading.Thread(target=client, args=(r, c)) for c in range(clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            rss_after.append(round(_vm_rss_kib(proxy.pid) / 1024, 1))
        load_s = time.perf_counter() - t0
        done.set()
        sampler.join()
        peak = vm_hwm_kib(proxy.pid)
        proxy.send_signal(getattr(signal, how))
        _, err = proxy.communicate(timeout=300)
    finally:
        done.set()
        if proxy.poll() is None:
            proxy.kill()
            proxy.wait(30)
    recorded = _recorded_markers(db)
    return {
        "stop": how,
        "requests": clients * each * rounds,
        "request_bytes": size,
        "answered": len(answered),
        "recorded": len(recorded),
        "recorded_twice": len(recorded) - len(set(recorded)),
        "lost": len(set(answered) - set(recorded)),
        "backlog_peak": peak_backlog,
        "rss_after_rounds_mib": rss_after,
        "peak_rss_mib": round(peak / 1024, 1),
        "seconds": round(load_s, 2),
        "requests_per_s": round(len(answered) / load_s, 1),
        "exit": proxy.returncode,
        "stderr": err.decode("utf-8", "replace").strip()[-400:],
    }


def backlog_part(clients: int, each: int, rounds: int, size: int, tmp: Path) -> list[dict[str, Any]]:
    up_port = free_port()
    upstream = subprocess.Popen([sys.executable, __file__, "--serve-upstream", str(up_port), "1"], env=ENV)
    try:
        wait_port(up_port, upstream, "the upstream")
        url = f"http://127.0.0.1:{up_port}"
        rows = [backlog_case(url, how, clients, each, rounds, size, tmp) for how in ("SIGINT", "SIGTERM", "SIGKILL")]
    finally:
        stop(upstream)
    for r in rows:
        console.print(f"[dim]proxy backlog, {r['stop']}: {r['answered']} answered, {r['recorded']} recorded[/]")
    return rows


def backlog_table(rows: list[dict[str, Any]]) -> Any:
    columns = ["stop", "requests", "answered", "recorded", "lost", "backlog peak", "RSS MiB after each round"]
    columns += ["peak RSS MiB", "req/s"]
    return table(
        f"proxy backlog: 4 clients, requests of {rows[0]['request_bytes'] // 1000} KB, a fresh proxy per stop",
        columns,
        [
            [r["stop"], r["requests"], r["answered"], r["recorded"], r["lost"], r["backlog_peak"],
             " → ".join(f"{v:,.0f}" for v in r["rss_after_rounds_mib"]), r["peak_rss_mib"], r["requests_per_s"]]
            for r in rows
        ],
    )  # fmt: skip


def backlog_checks(rows: list[dict[str, Any]]) -> dict[str, bool]:
    return {
        "backlog_answered_lost==0": all(r["lost"] == 0 and r["answered"] == r["requests"] for r in rows),
        "backlog_recorded_once": all(r["recorded_twice"] == 0 for r in rows),
        "backlog_rss_growth_per_round_mib<64": all(
            b - a < 64 for r in rows for a, b in itertools.pairwise(r["rss_after_rounds_mib"])
        ),
    }


# -- 2. MCP line reading -----------------------------------------------------------------------


def rpc_line(mb: float) -> bytes:
    """A JSON-RPC tool result of ``mb`` MB of text: one line, as a server writes it."""
    text = b"x" * int(mb * 1_000_000)
    return b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"' + text + b'"}]}}\n'


def sdk_split(chunks: list[bytes]) -> list[str]:
    """The loop of mcp 2.3.0's ``stdio_client`` (``mcp/client/stdio.py``, ``stdout_reader``):
    each chunk decoded as anyio's ``TextReceiveStream`` decodes it, joined to the line read so
    far, and the whole split again."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="strict")
    buffer = ""
    out: list[str] = []
    for raw in chunks:
        chunk = decoder.decode(raw)
        if not chunk:
            continue
        lines = (buffer + chunk).split("\n")
        buffer = lines.pop()
        out.extend(lines)
    return out


def ours_split(chunks: list[bytes], cap: int) -> list[bytes]:
    from ctxwright.mcp.lines import LineSplitter  # imported before the timing (split_child)

    splitter = LineSplitter(cap)
    out: list[bytes] = []
    for raw in chunks:
        out.extend(line.data for line in splitter.feed(raw) if line.data is not None)
    return out


def split_child(impl: str, mb: float, runs: int) -> dict[str, Any]:
    import ctxwright.mcp.lines  # noqa: F401 -- its import is not the splitting's cost

    line = rpc_line(mb)
    size = len(line) - 1
    chunks = [line[i : i + CHUNK] for i in range(0, len(line), CHUNK)]
    del line
    cap = size + 1  # above the line: the splitter delivers it, as the SDK's loop does
    baseline = reset_peak()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        got: Sequence[str | bytes] = sdk_split(chunks) if impl == "sdk" else ours_split(chunks, cap)
        times.append(time.perf_counter() - t0)
        if len(got) != 1 or len(got[0]) != size:
            raise SystemExit(f"{impl} split {mb} MB into {[len(g) for g in got]}")
        del got
    return {
        "impl": impl,
        "mb": mb,
        "chunks": len(chunks),
        "seconds": [round(t, 4) for t in times],
        "median_s": round(statistics.median(times), 4),
        "growth_mib": round((vm_hwm_kib() - baseline) / 1024, 1),
    }


async def _read_one(impl: str, path: str, cap: int) -> tuple[float, str]:
    """Seconds from starting ``cat path`` to the message a real reader delivers."""
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from ctxwright.mcp.lines import LineStats
    from ctxwright.mcp.transport import stdio_transport

    with tempfile.TemporaryFile(mode="a+") as errlog:
        t0 = time.perf_counter()
        if impl == "sdk":
            transport: Any = stdio_client(StdioServerParameters(command="cat", args=[path]), errlog=errlog)
        else:
            transport = stdio_transport(
                ["cat", path], env=None, cwd=None, errlog=errlog, max_message_bytes=cap, stats=LineStats()
            )
        async with transport as (read, _write):
            message = await read.receive()
            seconds = time.perf_counter() - t0
    kind = type(getattr(message, "message", message)).__name__
    return seconds, kind


def reader_child(impl: str, path: str, runs: int) -> dict[str, Any]:
    import anyio
    import mcp.client.stdio  # noqa: F401

    import ctxwright.mcp.transport  # noqa: F401 -- imported before the baseline, as the SDK's is

    size = Path(path).stat().st_size
    baseline = reset_peak()
    times, kinds = [], set()
    for _ in range(runs):
        seconds, kind = anyio.run(_read_one, impl, path, size + 1)
        times.append(seconds)
        kinds.add(kind)
    return {
        "impl": impl,
        "bytes": size,
        "seconds": [round(t, 4) for t in times],
        "median_s": round(statistics.median(times), 4),
        "delivered": sorted(kinds),
        "growth_mib": round((vm_hwm_kib() - baseline) / 1024, 1),
    }


def serve_mcp() -> None:
    """An MCP server on the SDK's low-level ``Server``: ``ping`` and ``big`` (``mb`` MB of text)."""
    import anyio
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server
    from mcp.types import CallToolRequestParams, CallToolResult, ListToolsResult, TextContent, Tool

    tools = [
        Tool(name="ping", description="Answer pong.", input_schema={"type": "object", "properties": {}}),
        Tool(
            name="big",
            description="A text result of mb megabytes.",
            input_schema={"type": "object", "properties": {"mb": {"type": "number"}}, "required": ["mb"]},
        ),
    ]

    async def list_tools(ctx: object, params: object) -> ListToolsResult:
        return ListToolsResult(tools=tools)

    async def call_tool(ctx: object, params: CallToolRequestParams) -> CallToolResult:
        if params.name == "big":
            text = "x" * int(float((params.arguments or {})["mb"]) * 1_000_000)
            return CallToolResult(content=[TextContent(type="text", text=text)])
        return CallToolResult(content=[TextContent(type="text", text="pong")])

    server = Server("bench-hostile", on_list_tools=list_tools, on_call_tool=call_tool)

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    try:
        value = fn()
    except Exception as exc:
        value = exc
    return time.perf_counter() - t0, value


def e2e_ours(mb: float) -> dict[str, Any]:
    from ctxwright.errors import McpToolError
    from ctxwright.mcp.connection import McpConnection

    conn = McpConnection([sys.executable, __file__, "--serve-mcp"], timeout=300, startup_timeout=120)
    try:
        pings = [_timed(lambda: conn.call("ping", {}))[0] for _ in range(5)]
        baseline = reset_peak()
        big_s, big = _timed(lambda: conn.call("big", {"mb": mb}))
        after_s, after = _timed(lambda: conn.call("ping", {}))
        peak = vm_hwm_kib()
    finally:
        conn.close()
    return {
        "client": "ctxwright McpConnection",
        "mb": mb,
        "ping_median_s": round(statistics.median(pings), 4),
        "big_s": round(big_s, 3),
        "big_outcome": big.error_type if isinstance(big, McpToolError) else type(big).__name__,
        "next_call_s": round(after_s, 4),
        "next_call_ok": not isinstance(after, Exception) and after.content[0].text == "pong",
        "rss_before_mib": round(baseline / 1024, 1),
        "peak_rss_mib": round(peak / 1024, 1),
        "growth_mib": round((peak - baseline) / 1024, 1),
    }


def e2e_sdk(mb: float) -> dict[str, Any]:
    import anyio
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=sys.executable, args=[__file__, "--serve-mcp"])

    async def go() -> dict[str, Any]:
        async with Client(stdio_client(params), mode="legacy", read_timeout_seconds=300) as client:
            pings = []
            for _ in range(5):
                t0 = time.perf_counter()
                await client.call_tool("ping", {})
                pings.append(time.perf_counter() - t0)
            baseline = reset_peak()
            t0 = time.perf_counter()
            big = await client.call_tool("big", {"mb": mb})
            big_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            after = await client.call_tool("ping", {})
            after_s = time.perf_counter() - t0
            peak = vm_hwm_kib()
        text = big.content[0].text if big.content and hasattr(big.content[0], "text") else ""
        return {
            "client": "mcp SDK Client + stdio_client",
            "mb": mb,
            "ping_median_s": round(statistics.median(pings), 4),
            "big_s": round(big_s, 3),
            "big_outcome": f"result of {len(text):,} characters",
            "next_call_s": round(after_s, 4),
            "next_call_ok": getattr(after.content[0], "text", "") == "pong",
            "rss_before_mib": round(baseline / 1024, 1),
            "peak_rss_mib": round(peak / 1024, 1),
            "growth_mib": round((peak - baseline) / 1024, 1),
        }

    result: dict[str, Any] = anyio.run(go)
    return result


def mcp_part(sizes: list[float], runs: int, e2e_mb: float, tmp: Path) -> dict[str, Any]:
    split, readers = [], []
    for mb in sizes:
        pair = {impl: child_json("split", impl, str(mb), str(runs)) for impl in ("sdk", "ours")}
        split.append({"mb": mb, **pair, "ratio": round(pair["sdk"]["median_s"] / pair["ours"]["median_s"], 1)})
        path = tmp / f"line-{mb}.jsonl"
        path.write_bytes(rpc_line(mb))
        pair = {impl: child_json("reader", impl, str(path), str(runs)) for impl in ("sdk", "ours")}
        readers.append({"mb": mb, **pair, "ratio": round(pair["sdk"]["median_s"] / pair["ours"]["median_s"], 1)})
        path.unlink()
        console.print(
            f"[dim]MCP line of {mb:g} MB: split SDK {split[-1]['sdk']['median_s']:.3f} s, ctxwright "
            f"{split[-1]['ours']['median_s']:.4f} s; readers SDK {readers[-1]['sdk']['median_s']:.3f} s, "
            f"ctxwright {readers[-1]['ours']['median_s']:.3f} s[/]"
        )
    e2e = [child_json("e2e", impl, str(e2e_mb)) for impl in ("ours", "sdk")]
    for r in e2e:
        console.print(f"[dim]MCP {e2e_mb:g} MB result, {r['client']}: {r['big_outcome']} in {r['big_s']:.2f} s[/]")
    return {"chunk_bytes": CHUNK, "runs": runs, "split": split, "readers": readers, "e2e": e2e}


# -- 3. audit ----------------------------------------------------------------------------------


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "ctxwright.cli.main", *args]


def audit_part(line_mib: int, tmp: Path) -> list[dict[str, Any]]:
    small = tmp / "small.jsonl"
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    with small.open("w") as f:
        for i in range(3):
            msgs.append({"role": "user", "content": f"question {i}"})
            usage = {
                "prompt_tokens": 20 + 10 * i,
                "completion_tokens": 2,
                "prompt_tokens_details": {"cached_tokens": 0},
            }
            f.write(json.dumps({"request": {"model": "m", "messages": msgs}, "response": {"usage": usage}}) + "\n")
            msgs.append({"role": "assistant", "content": "ok"})
    big = tmp / "one-line.jsonl"
    head = b'{"request": {"model": "m", "messages": [{"role": "user", "content": "'
    with big.open("wb") as f:
        f.write(head)
        for _ in range(line_mib):
            f.write(b"x" * MIB)
        f.write(b'"}]}}\n')
    cap = str(AUDIT_CAP)
    rows = [
        {"case": "three-line log", "input": f"{small.stat().st_size:,} bytes", **run_to_end(cli("audit", str(small)))},
        {
            "case": f"one line of {line_mib} MiB, --max-record-bytes {AUDIT_CAP:,}",
            "input": f"{big.stat().st_size:,} bytes",
            **run_to_end(cli("audit", "--max-record-bytes", cap, str(big))),
        },
        {"case": "/dev/zero", "input": "endless", **run_to_end(cli("audit", "/dev/zero"))},
    ]
    with subprocess.Popen(["cat", "/dev/zero"], stdout=subprocess.PIPE) as zeros:
        try:
            done = run_to_end(cli("audit", "--max-record-bytes", cap, "-"), stdin=zeros.stdout)
        finally:
            zeros.kill()
    rows.append({"case": f"cat /dev/zero | audit -, --max-record-bytes {AUDIT_CAP:,}", "input": "endless", **done})
    big.unlink()
    rows = [told(r, tmp) for r in rows]
    for r in rows:
        console.print(f"[dim]audit {r['case']}: exit {r['exit']} in {r['seconds']:.2f} s, {r['peak_rss_mib']} MiB[/]")
    return rows


# -- 4. skills ---------------------------------------------------------------------------------


def _limit_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (SKILLS_AS, SKILLS_AS))


def skills_part(tmp: Path) -> list[dict[str, Any]]:
    home = tmp / "home"
    home.mkdir()
    for name, text in (
        ("plain", "---\nname: plain\ndescription: Use for plain tasks.\n---\nDo it well.\n"),
        ("bomb", ALIAS_BOMB),
    ):
        (tmp / f"skills-{name}" / name).mkdir(parents=True)
        (tmp / f"skills-{name}" / name / "SKILL.md").write_text(text)
    env = {**ENV, "HOME": str(home)}  # no skills of the user's own
    rows = []
    for name in ("plain", "bomb"):
        root = tmp / f"skills-{name}"  # a folder each: listing skills reads every SKILL.md in it
        size = (root / name / "SKILL.md").stat().st_size
        done = run_to_end(
            cli("skills", "show", name, "--skills", str(root)), cwd=home, env=env, preexec_fn=_limit_memory
        )
        case = "plain SKILL.md" if name == "plain" else "YAML alias bomb (9**9 strings)"
        rows.append({"case": case, "input": f"{size:,} bytes", **told(done, tmp)})
        console.print(f"[dim]skills {name}: exit {done['exit']} in {done['seconds']:.2f} s[/]")
    return rows


# -- 5. workspace ------------------------------------------------------------------------------

SWAPPER = r"""
import os, sys
ws, outside, stop = sys.argv[1:4]
d, hold, link = (os.path.join(ws, n) for n in ("d", "d.hold", "d.link"))
g, g_hold, g_link = (os.path.join(ws, n) for n in ("g.txt", "g.hold", "g.link"))
os.symlink(outside, link)
os.symlink(os.path.join(outside, "f.txt"), g_link)
print("ready", flush=True)
swaps = 0
while not os.path.exists(stop):
    os.rename(d, hold); os.rename(link, d)        # the folder is now a link to outside
    os.rename(g, g_hold); os.rename(g_link, g)    # the file too
    os.rename(d, link); os.rename(hold, d)        # and back
    os.rename(g, g_link); os.rename(g_hold, g)
    swaps += 1
print(swaps, flush=True)
"""


def workspace_child(n: int) -> dict[str, Any]:
    from ctxwright.core.messages import ToolCall, canonical_json
    from ctxwright.tools.builtin import make_file_tools
    from ctxwright.tools.registry import ToolRegistry

    with tempfile.TemporaryDirectory(prefix="hostile-ws-") as tmp_name:
        tmp = Path(tmp_name)
        ws, outside, stop_file = tmp / "ws", tmp / "outside", tmp / "stop"
        (ws / "d").mkdir(parents=True)
        outside.mkdir()
        (ws / "d" / "f.txt").write_text("inside", encoding="utf-8")
        (ws / "g.txt").write_text("inside", encoding="utf-8")
        (outside / "f.txt").write_text("SECRET-outside", encoding="utf-8")
        reg = ToolRegistry(make_file_tools(ws))
        paths = ("d/f.txt", "g.txt")

        def reads(count: int) -> dict[str, Any]:
            times, leaked, inside = [], 0, 0
            refused: dict[str, int] = {}
            said: dict[str, str] = {}  # the first message of each kind of refusal
            for i in range(count):
                call = ToolCall(str(i), "read_file", canonical_json({"path": paths[i % 2]}))
                t0 = time.perf_counter()
                out = reg.execute(call)
                times.append(time.perf_counter() - t0)
                if "SECRET" in out.content:
                    leaked += 1
                elif out.ok:
                    inside += 1
                else:
                    error = json.loads(out.content)["error"]
                    refused[error["type"]] = refused.get(error["type"], 0) + 1
                    said.setdefault(error["type"], str(error.get("message", "")).replace(tmp_name, "$TMP"))
            return {
                "reads": count,
                "median_ms": round(statistics.median(times) * 1000, 4),
                "p99_ms": round(sorted(times)[int(0.99 * (count - 1))] * 1000, 4),
                "total_s": round(sum(times), 3),
                "read_inside": inside,
                "refused": refused,
                "refused_said": said,
                "leaked": leaked,
            }

        reads(50)  # warm up: imports, the descriptor cache, the file cache
        plain = reads(n)
        swapper = subprocess.Popen(
            [sys.executable, "-c", SWAPPER, str(ws), str(outside), str(stop_file)], stdout=subprocess.PIPE, text=True
        )
        try:
            assert swapper.stdout is not None and swapper.stdout.readline().strip() == "ready"
            swapped = reads(n)
        finally:
            stop_file.touch()
            swaps = int(swapper.stdout.readline() or 0) if swapper.stdout else 0
            swapper.wait(60)
    return {"plain": plain, "swapped": {**swapped, "swaps": swaps}, "peak_rss_mib": round(vm_hwm_kib() / 1024, 1)}


# -- the run -----------------------------------------------------------------------------------


def run_child(args: list[str]) -> None:
    kind, rest = args[0], args[1:]
    if kind == "split":
        out = split_child(rest[0], float(rest[1]), int(rest[2]))
    elif kind == "reader":
        out = reader_child(rest[0], rest[1], int(rest[2]))
    elif kind == "e2e":
        out = e2e_ours(float(rest[1])) if rest[0] == "ours" else e2e_sdk(float(rest[1]))
    elif kind == "workspace":
        out = workspace_child(int(rest[0]))
    else:
        raise SystemExit(f"no child {kind}")
    print(json.dumps(out), flush=True)


def summary_rows(res: dict[str, Any]) -> list[list[Any]]:
    """The one table: case, input, peak RSS (and growth), seconds, outcome."""
    rows: list[list[Any]] = []
    for r in res["proxy"]:
        what = {"plain": "proxy: plain request", "request": "proxy: gzip request body", "answer": "proxy: gzip answer"}
        size = f"{r['sent_bytes'] if r['case'] != 'answer' else r['received_bytes']:,} B"
        if r["expands_to_mib"]:
            size += f" of gzip → {r['expands_to_mib']} MiB"
        rec = r["recorded"]
        outcome = f"{r['status']}; recorded {'body' if rec['body_stored'] else 'size + sha256'}"
        if rec["error"]:
            outcome += f': "{rec["error"]}"'
        peak = f"{r['peak_rss_mib']:,.1f} ({r['growth_mib']:+.1f})"
        rows.append([what[r["case"]], size, peak, f"{r['seconds']:.3f}", outcome])
    for r in res["mcp"]["e2e"]:
        peak = f"{r['peak_rss_mib']:,.1f} ({r['growth_mib']:+.1f})"
        ok = "ok" if r["next_call_ok"] else "FAILED"
        outcome = f"{r['big_outcome']}; next call {ok} in {r['next_call_s'] * 1000:,.0f} ms"
        outcome += f" (a call before: {r['ping_median_s'] * 1000:,.1f} ms)"
        rows.append([f"MCP: {r['client']}", f"{r['mb']:g} MB result", peak, f"{r['big_s']:.3f}", outcome])
    for part, label in (("audit", "audit"), ("skills", "skills show")):
        base = res[part][0]["peak_rss_mib"]  # the harmless case, first
        for r in res[part]:
            outcome = f"exit {r['exit']}"
            if r["stderr_lines"]:
                n = r["stderr_lines"]
                outcome += f": {r['said'] or '?'} ({n} line{'s' if n != 1 else ''} on stderr)"
            peak = f"{r['peak_rss_mib']:,.1f} ({r['peak_rss_mib'] - base:+.1f})"
            rows.append([f"{label}: {r['case']}", r["input"], peak, f"{r['seconds']:.3f}", outcome])
    ws = res["workspace"]
    for name in ("plain", "swapped"):
        w = ws[name]
        label = "workspace: reads, no swapper" if name == "plain" else "workspace: reads while swapped"
        refused = ", ".join(f"{v} {k}" for k, v in sorted(w["refused"].items())) or "none"
        outcome = (
            f"median {w['median_ms']:.3f} ms a read; {w['read_inside']} inside, refused {refused}; leaked {w['leaked']}"
        )
        if name == "swapped":
            outcome += f"; {w['swaps']:,} swaps"
        rows.append([label, f"{w['reads']:,} reads", f"{ws['peak_rss_mib']:,.1f}", f"{w['total_s']:.3f}", outcome])
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="smaller inputs, 3 runs (a smoke run, under a minute)")
    p.add_argument("--runs", type=int, help="runs per MCP line size (default 5, quick 3); the median is reported")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    p.add_argument("--backlog-only", action="store_true", help="run only the proxy backlog part (6)")
    p.add_argument("--backlog-requests", type=int, help="requests per client per round (default 250, quick 60)")
    p.add_argument("--backlog-rounds", type=int, default=2, help="rounds of load per proxy (default 2)")
    p.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    p.add_argument("--serve-upstream", nargs=2, type=int, metavar=("PORT", "MIB"), help=argparse.SUPPRESS)
    p.add_argument("--serve-mcp", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve_mcp:
        serve_mcp()
        return 0
    if args.serve_upstream:
        serve_upstream(*args.serve_upstream)
        return 0
    if args.child:
        run_child(args.child)
        return 0
    if not Path("/proc/self/status").exists():
        sys.exit("this benchmark reads peak memory from /proc (Linux)")
    quick = args.quick
    runs = args.runs or (3 if quick else 5)
    sizes = [2.0, 5.0, 10.0] if quick else [5.0, 10.0, 20.0]
    bomb_mib, line_mib, reads, e2e_mb = (64, 16, 500, 10.0) if quick else (256, 64, 2000, 30.0)
    load_start = os.getloadavg()[0]
    started = time.perf_counter()
    res: dict[str, Any] = {}
    each = args.backlog_requests or (60 if quick else 250)
    if args.backlog_only:
        return backlog_only(args, each, load_start, started)
    with tempfile.TemporaryDirectory(prefix="hostile-bench-") as tmp_name:
        tmp = Path(tmp_name)
        res["proxy"] = proxy_part(bomb_mib, tmp)
        res["mcp"] = mcp_part(sizes, runs, e2e_mb, tmp)
        res["audit"] = audit_part(line_mib, tmp)
        res["skills"] = skills_part(tmp)
        res["workspace"] = child_json("workspace", str(reads))
        res["backlog"] = backlog_part(4, each, args.backlog_rounds, 200_000, tmp)
    elapsed = time.perf_counter() - started
    load = os.getloadavg()[0]

    console.print(
        table(
            "hostile inputs: peak RSS MiB of the process doing the work (growth over the same on a harmless input)",
            ["case", "input", "peak RSS MiB", "seconds", "outcome"],
            summary_rows(res),
        )
    )
    split_rows = [
        [
            f"{r['mb']:g} MB",
            r["sdk"]["chunks"],
            f"{r['sdk']['median_s'] * 1000:,.1f}",
            f"{r['ours']['median_s'] * 1000:,.2f}",
            f"{r['ratio']:,.0f}×",
            r["sdk"]["growth_mib"],
            r["ours"]["growth_mib"],
        ]
        for r in res["mcp"]["split"]
    ]
    console.print(
        table(
            f"MCP: one line in 64 KiB chunks, the SDK's split loop vs ctxwright's LineSplitter (median of {runs})",
            ["line", "chunks", "SDK ms", "ctxwright ms", "ratio", "SDK +MiB", "ctxwright +MiB"],
            split_rows,
        )
    )
    reader_rows = [
        [
            f"{r['mb']:g} MB",
            f"{r['sdk']['median_s'] * 1000:,.0f}",
            f"{r['ours']['median_s'] * 1000:,.0f}",
            f"{r['ratio']:,.1f}×",
            r["sdk"]["growth_mib"],
            r["ours"]["growth_mib"],
        ]
        for r in res["mcp"]["readers"]
    ]
    console.print(
        table(
            f"MCP: the real readers on `cat FILE`, SDK stdio_client vs ctxwright stdio_transport (median of {runs})",
            ["line", "SDK ms", "ctxwright ms", "ratio", "SDK +MiB", "ctxwright +MiB"],
            reader_rows,
        )
    )

    proxy = {r["case"]: r for r in res["proxy"]}
    ours_e2e, sdk_e2e = res["mcp"]["e2e"]
    audit, skills, ws = res["audit"], res["skills"], res["workspace"]
    over_cap = f"decoded size over the recording cap ({RECORD_CAP:,} bytes)"
    checks = {
        "proxy_request_bomb_growth_mib<64": proxy["request"]["growth_mib"] < 64,
        "proxy_answer_bomb_growth_mib<64": proxy["answer"]["growth_mib"] < 64,
        "proxy_rows_say_over_the_recording_cap": all(
            (proxy[k]["recorded"]["error"] or "").endswith(over_cap) and proxy[k]["recorded"]["sha256_matches"]
            for k in ("request", "answer")
        ),
        "proxy_answer_bytes_as_sent": proxy["answer"]["bytes_as_sent"],
        "mcp_split_ratio_at_largest>=50": res["mcp"]["split"][-1]["ratio"] >= 50,
        "mcp_readers_delivered_the_line": all(
            r[impl]["delivered"] == ["JSONRPCResponse"] for r in res["mcp"]["readers"] for impl in ("sdk", "ours")
        ),
        "mcp_result_too_large_within_5s": ours_e2e["big_outcome"] == "mcp_result_too_large" and ours_e2e["big_s"] < 5,
        "mcp_next_call_within_5s": ours_e2e["next_call_ok"] and ours_e2e["next_call_s"] < 5,
        "audit_refusals_exit_2_one_line_10s": all(
            r["exit"] == 2 and r["stderr_lines"] == 1 and r["said"] and r["seconds"] < 10 for r in audit[1:]
        ),
        "audit_peak_rss_mib<200": all(r["peak_rss_mib"] < 200 for r in audit),
        "skills_bomb_refused_one_line_10s": skills[1]["exit"] == 1
        and skills[1]["stderr"].count("front matter refused") == 1
        and not skills[1]["traceback"]
        and skills[1]["seconds"] < 10,
        "skills_peak_rss_mib<200": all(r["peak_rss_mib"] < 200 for r in skills),
        "workspace_leaks==0": ws["plain"]["leaked"] == 0 and ws["swapped"]["leaked"] == 0,
        "workspace_race_ran": ws["swapped"]["swaps"] > 10 and sum(ws["swapped"]["refused"].values()) > 0,
    }
    console.print(backlog_table(res["backlog"]))
    checks.update(backlog_checks(res["backlog"]))
    for name, ok in checks.items():
        console.print(f"{'PASS' if ok else 'FAIL'}  {name}")
    console.print(
        f"SDK e2e for comparison: the {sdk_e2e['mb']:g} MB result read whole in {sdk_e2e['big_s']:.2f} s, "
        f"the next call {sdk_e2e['next_call_s'] * 1000:,.0f} ms"
    )
    console.print(
        f"{elapsed:.0f} s in all; load average (1 min) {load_start:.1f} at the start, {load:.1f} at the end, "
        f"on {os.cpu_count()} cores"
    )
    save(
        args,
        {
            "benchmark": "hostile",
            "machine": machine(),
            "load_average_1m_at_start": round(load_start, 2),
            "load_average_1m_at_end": round(load, 2),
            "quick": quick,
            "seconds": round(elapsed, 1),
            "sdk": f"mcp {_version('mcp')}",
            **res,
            "checks": checks,
            "pass": all(checks.values()),
        },
    )
    return 0 if all(checks.values()) else 1


def backlog_only(args: argparse.Namespace, each: int, load_start: float, started: float) -> int:
    """``--backlog-only``: part 6 alone, its table, checks and JSON."""
    with tempfile.TemporaryDirectory(prefix="hostile-bench-") as tmp_name:
        rows = backlog_part(4, each, args.backlog_rounds, 200_000, Path(tmp_name))
    console.print(backlog_table(rows))
    checks = backlog_checks(rows)
    for name, ok in checks.items():
        console.print(f"{'PASS' if ok else 'FAIL'}  {name}")
    elapsed, load = time.perf_counter() - started, os.getloadavg()[0]
    console.print(
        f"{elapsed:.0f} s in all; load average (1 min) {load_start:.1f} at the start, {load:.1f} at the end, "
        f"on {os.cpu_count()} cores"
    )
    data = {"benchmark": "hostile", "machine": machine(), "quick": args.quick, "seconds": round(elapsed, 1)}
    save(args, {**data, "backlog": rows, "checks": checks, "pass": all(checks.values())})
    return 0 if all(checks.values()) else 1


def _version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist)


if __name__ == "__main__":
    sys.exit(main())
