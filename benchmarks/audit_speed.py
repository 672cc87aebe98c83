"""How fast `ctxwright audit` reads and audits a large request log.

Generates, in a temporary directory and from a fixed seed, a JSONL log of
``--requests`` requests (default 1,000) of about ``--tokens`` estimated tokens each
(default 50,000; roughly 200 KB of JSON per line): sessions of 50 requests each,
append-only, with four deliberate breaks (a timestamp added to the system prompt, two
tools swapped, an earlier tool result edited, a sliding window dropping old turns).
Every line is ``{"request": ..., "response": ...}`` with OpenAI-style usage, so the
usage reader runs too. Then times ``load_requests`` and the audit separately.

    python benchmarks/audit_speed.py [--requests 1000] [--tokens 50000] [--json PATH]

Target: 1,000 requests of 50K tokens in under a minute on a 2-core machine.

Then memory: ``ctxwright audit`` itself, in a child process, on that log (200 MB) and on
generated logs of many small requests (``--memory-sizes``, default 50,000 and 100,000
requests): interleaved conversations growing by appends, with breaks (a timestamp in the
system prompt, a tool_choice switch, an edited message, a sliding window), a new
conversation when one ends. Each log is audited in table mode and with ``--json`` (output to
/dev/null); the table reports the child's peak RSS (``os.wait4``) and throughput, and the
RSS growth per request between the two largest logs -- about zero when memory is constant
(the smaller logs do not fill the 64 MB prefix index yet).

    python benchmarks/audit_speed.py --memory-sizes 20000,200000,2000000

Target: 2 million requests in under 1 GB of peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from rich.console import Console
from rich.table import Table

from ctxwright.audit.compare import Auditor
from ctxwright.audit.logs import load_requests
from ctxwright.core.messages import canonical_json
from ctxwright.core.tokens import TokenCounter

ROOT = Path(__file__).resolve().parent.parent
PER_SESSION = 50
#: (kind, request index within a session of 50) of each deliberate break
BREAKS = (("system", 20), ("tools", 30), ("edit", 25), ("window", 40))
CJK = "缓存前缀命中率工具调用结果会话压缩上下文窗口"


class TextMaker:
    """Deterministic filler text of a requested token size (mostly words, some CJK)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))) for _ in range(3000)]

    def text(self, tokens: int) -> str:
        # ~6.5 characters per word with its space, ~4 characters per estimated token
        words = self.rng.choices(self.words, k=max(1, tokens * 4 * 2 // 13))
        if self.rng.random() < 0.2:
            words.insert(len(words) // 2, "".join(self.rng.choices(CJK, k=12)))
        return " ".join(words)


def make_tools(maker: TextMaker, n: int = 12) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "description": maker.text(60),
                "parameters": {
                    "type": "object",
                    "properties": {f"arg_{j}": {"type": "string", "description": maker.text(10)} for j in range(3)},
                },
            },
        }
        for i in range(n)
    ]


def session_messages(maker: TextMaker, first_tokens: int, step_tokens: int, steps: int) -> list[dict[str, Any]]:
    """A task and ``steps`` rounds of tool call + tool result: the session's whole trajectory."""
    msgs: list[dict[str, Any]] = [{"role": "user", "content": maker.text(first_tokens)}]
    for k in range(steps):
        cid = f"call_{k}"
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": cid,
                        "type": "function",
                        "function": {"name": f"tool_{k % 12}", "arguments": json.dumps({"arg_0": maker.text(8)})},
                    }
                ],
            }
        )
        msgs.append({"role": "tool", "tool_call_id": cid, "content": maker.text(max(1, step_tokens - 40))})
    return msgs


class Generator:
    """Writes the log: sessions of append-only requests plus the deliberate breaks."""

    def __init__(self, requests: int, tokens: int, seed: int) -> None:
        self.n = requests
        self.maker = TextMaker(random.Random(seed))
        self.count = TokenCounter().count
        self.system = self.maker.text(min(2000, tokens // 10))
        self.tools = make_tools(self.maker)
        # request k of a session holds ~ start + k * step tokens: the median is ~ ``tokens``
        self.step = max(10, tokens // PER_SESSION)
        fixed = self.count(self.system) + self.count(canonical_json(self.tools))
        self.first = max(10, tokens - fixed - (PER_SESSION - 1) * self.step // 2)
        self.sessions = -(-requests // PER_SESSION)
        per = min(PER_SESSION, requests)
        self.break_at = {
            (min(self.sessions - 1, (i + 1) * self.sessions // 5), pos * per // 50): kind
            for i, (kind, pos) in enumerate(BREAKS)
        }
        #: id(message) -> (message, tokens); holding the message keeps its id from being reused
        self._tok: dict[int, tuple[dict[str, Any], int]] = {}

    def tokens_of(self, system: str, tools: list[Any], msgs: list[dict[str, Any]]) -> int:
        """What the simulated provider reports as prompt tokens (estimate, memoized per message)."""
        total = self.count(system) + self.count(canonical_json(tools))
        for m in msgs:
            hit = self._tok.get(id(m))
            if hit is None:
                hit = self._tok[id(m)] = (m, self.count(canonical_json(m)))
            total += hit[1]
        return total

    def write(self, path: Path) -> None:
        written = 0
        with path.open("w", encoding="utf-8") as f:
            for s in range(self.sessions):
                for line in self.session_lines(s, min(PER_SESSION, self.n - written)):
                    f.write(line + "\n")
                    written += 1

    def session_lines(self, s: int, count: int) -> list[str]:
        system, tools = self.system, list(self.tools)
        traj = session_messages(self.maker, self.first, self.step, count)
        self._tok.clear()
        dropped = 0  # messages removed by the sliding window
        prev_prompt = 0
        lines = []
        for k in range(count):
            kind = self.break_at.get((s, k))
            if kind == "system":
                system = system + f"\nCurrent time: 2026-05-{1 + s % 28:02d} 10:{k:02d}"
            elif kind == "tools":
                tools[0], tools[1] = tools[1], tools[0]
            elif kind == "edit" and len(traj) > 2:
                traj[2] = {**traj[2], "content": traj[2]["content"][:200] + " [edited]"}
            elif kind == "window":
                dropped = min(10, 2 * k - 1) if k > 0 else 0
            msgs = [traj[0], *traj[1 + dropped : 1 + 2 * k]]
            prompt = self.tokens_of(system, tools, msgs)
            fixed = self.tokens_of(system, tools, [])
            # a provider caches in 128-token steps: the previous request on an append, the shared
            # system + tools at a new session, nothing after a deliberate break
            cached = (0 if kind else prev_prompt if k else fixed if s else 0) // 128 * 128
            prev_prompt = prompt
            body = {"model": "bench", "messages": [{"role": "system", "content": system}, *msgs], "tools": tools}
            resp = {
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": 40,
                    "prompt_tokens_details": {"cached_tokens": min(cached, prompt)},
                }
            }
            lines.append(json.dumps({"request": body, "response": resp}, ensure_ascii=False))
        return lines


def run(requests: int, tokens: int, seed: int, console: Console) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "requests.jsonl"
        t = time.perf_counter()
        Generator(requests, tokens, seed).write(path)
        gen_s = time.perf_counter() - t
        size = path.stat().st_size
        t0 = time.perf_counter()
        reqs, problems = load_requests(path)
        t1 = time.perf_counter()
        auditor = Auditor(TokenCounter())
        for r in reqs:
            auditor.add(r)
        summary = auditor.summary()
        t2 = time.perf_counter()
        median_tokens = statistics.median(r.prompt_tokens for r in auditor.rows)
        del reqs, auditor
        cli = [audit_child(path, mode, summary.requests, size) for mode in ("table", "json")]
    if problems:
        console.print(f"[red]{len(problems)} parse problems[/], first: {problems[0]}")
    result = {
        "requests": summary.requests,
        "tokens_per_request_median": median_tokens,
        "seconds_parse": round(t1 - t0, 3),
        "seconds_audit": round(t2 - t1, 3),
        "seconds_total": round(t2 - t0, 3),
        "requests_per_second": round(summary.requests / (t2 - t0), 1),
        "cli": cli,
    }
    show(console, result, size, gen_s, summary.causes)
    show_memory(console, "ctxwright audit on the same log (child process)", cli)
    return result


def show(console: Console, result: dict[str, Any], size: int, gen_s: float, causes: dict[str, int]) -> None:
    t = Table(title="audit speed (load_requests + Auditor)")
    for c in ("requests", "median tok/request", "log MB", "parse s", "audit s", "total s", "requests/s"):
        t.add_column(c, justify="right")
    t.add_row(
        f"{result['requests']:,}",
        f"{result['tokens_per_request_median']:,.0f}",
        f"{size / 1e6:,.1f}",
        f"{result['seconds_parse']:.2f}",
        f"{result['seconds_audit']:.2f}",
        f"{result['seconds_total']:.2f}",
        f"{result['requests_per_second']:,.1f}",
    )
    console.print(t)
    console.print("causes: " + " · ".join(f"{k} {v}" for k, v in causes.items()))
    console.print(
        "[dim]each session's first request is `first` of its conversation (the audit splits the log into "
        f"its sessions); log generated in {gen_s:.1f} s, not timed[/]"
    )


# -- memory: many small requests, through the command ------------------------------------------

SYSTEMS = (
    "You are the support agent of Northwind. Answer from tool results only; cite order ids exactly.",
    "You are a coding assistant. Read files before editing them and run the tests after each change.",
    "You are a travel planner. Check availability with the tools before proposing an itinerary.",
)
SMALL_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name.replace('_', ' ')} by id",
            "parameters": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
        },
    }
    for name in ("lookup_order", "read_file", "search_flights", "get_weather")
]


class ConversationLog:
    """JSONL lines of ``concurrent`` interleaved conversations, each growing by appends.

    A conversation lives for 4 to 40 requests, each appending an assistant tool call and its
    result; then a new one starts (a new task, one of three system prompts). About one
    request in 25 carries a break: a timestamp added to the system prompt, a tool_choice
    switch, an earlier result edited, or a sliding window dropping the oldest exchange.
    Messages are short (40-120 characters), so millions of requests fit in a few GB.
    """

    def __init__(self, requests: int, seed: int, concurrent: int = 4) -> None:
        self.n = requests
        self.rng = random.Random(seed)
        self.words = ["".join(self.rng.choices(string.ascii_lowercase, k=self.rng.randint(2, 8))) for _ in range(800)]
        self.concurrent = concurrent
        self.tools_json = json.dumps(SMALL_TOOLS)
        self.started = 0

    def text(self, lo: int, hi: int) -> str:
        out: list[str] = []
        target = self.rng.randint(lo, hi)
        while sum(len(w) + 1 for w in out) < target:
            out.append(self.rng.choice(self.words))
        return " ".join(out)

    def new(self) -> dict[str, Any]:
        self.started += 1
        task = json.dumps({"role": "user", "content": f"task {self.started}: " + self.text(40, 120)})
        return {
            "system": self.rng.choice(SYSTEMS),
            "msgs": [task],
            "left": self.rng.randint(4, 40),
            "choice": "auto",
            "prompt": 0,
            "k": 0,
        }

    def lines(self) -> Iterator[str]:
        live = [self.new() for _ in range(self.concurrent)]
        for _ in range(self.n):
            i = self.rng.randrange(len(live))
            c = live[i]
            broke = self.rng.random() < 0.04 and c["k"] > 0
            if broke:
                kind = self.rng.choice(("system", "tool_choice", "edit", "window"))
                if kind == "system":
                    c["system"] = f"Now: 2026-05-{1 + c['k'] % 28:02d} 10:{c['k'] % 60:02d}. " + c["system"]
                elif kind == "tool_choice":
                    c["choice"] = "required" if c["choice"] == "auto" else "auto"
                elif kind == "edit" and len(c["msgs"]) > 2:
                    c["msgs"][2] = json.dumps({"role": "tool", "tool_call_id": "call_0", "content": "[edited]"})
                elif len(c["msgs"]) > 3:
                    c["msgs"][1:3] = []
            body = (
                '{"model": "bench", "messages": ['
                + json.dumps({"role": "system", "content": c["system"]})
                + ", "
                + ", ".join(c["msgs"])
                + '], "tools": '
                + self.tools_json
                + ', "tool_choice": "'
                + c["choice"]
                + '"}'
            )
            prompt = len(body) // 4
            cached = 0 if broke else min(c["prompt"], prompt) // 128 * 128
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": 20,
                "prompt_tokens_details": {"cached_tokens": cached},
            }
            yield '{"request": ' + body + ', "response": {"usage": ' + json.dumps(usage) + "}}"
            k = c["k"]
            c["msgs"].append(
                json.dumps(
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": f"call_{k}",
                                "type": "function",
                                "function": {"name": "lookup_order", "arguments": json.dumps({"id": f"A-{k}"})},
                            }
                        ],
                    }
                )
            )
            c["msgs"].append(json.dumps({"role": "tool", "tool_call_id": f"call_{k}", "content": self.text(40, 120)}))
            c["k"], c["prompt"], c["left"] = k + 1, prompt, c["left"] - 1
            if c["left"] <= 0:
                live[i] = self.new()

    def write(self, path: Path) -> None:
        with path.open("w", encoding="utf-8") as f:
            for line in self.lines():
                f.write(line + "\n")


def audit_child(path: Path, mode: str, requests: int, size: int) -> dict[str, Any]:
    """``ctxwright audit FILE [--json] > /dev/null`` in a child process: its own peak RSS."""
    cmd = [sys.executable, "-m", "ctxwright.cli.main", "audit", str(path), *(["--json"] if mode == "json" else [])]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    t = time.perf_counter()
    with open(os.devnull, "wb") as null:
        child = subprocess.Popen(cmd, stdout=null, stderr=subprocess.PIPE, env=env)
        _, status, usage = os.wait4(child.pid, 0)
        err = child.stderr.read().decode("utf-8", "replace") if child.stderr else ""
        child.stderr.close() if child.stderr else None
    seconds = time.perf_counter() - t
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"ctxwright audit exited {code}: {err.strip()[-500:]}")
    return {
        "mode": mode,
        "requests": requests,
        "log_mb": round(size / 1e6, 1),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),  # KiB on Linux
        "seconds": round(seconds, 1),
        "requests_per_second": round(requests / seconds, 1),
    }


def memory(sizes: list[int], seed: int, console: Console, keep: Path | None = None) -> dict[str, Any]:
    """Generate each size, audit it in both modes, report RSS and its growth per request."""
    rows: list[dict[str, Any]] = []
    for n in sizes:
        with tempfile.TemporaryDirectory(dir=keep) as tmp:
            path = Path(tmp) / f"small-{n}.jsonl"
            t = time.perf_counter()
            ConversationLog(n, seed).write(path)
            console.print(
                f"[dim]generated {n:,} requests ({path.stat().st_size / 1e6:,.0f} MB) in {time.perf_counter() - t:.0f} s[/]"
            )
            for mode in ("table", "json"):
                rows.append(audit_child(path, mode, n, path.stat().st_size))
                console.print(f"[dim]{rows[-1]}[/]")
    # growth between the two largest logs: by then the bounded structures (the prefix index,
    # 64 MB) are full, so what is left is what the audit keeps per request -- nothing
    growth = {}
    for mode in ("table", "json"):
        mine = [r for r in rows if r["mode"] == mode]
        if len(mine) > 1:
            a, b = mine[-2], mine[-1]
            growth[mode] = round(
                (b["peak_rss_mb"] - a["peak_rss_mb"]) * 1024 * 1024 / (b["requests"] - a["requests"]), 2
            )
    show_memory(console, "ctxwright audit, many small requests (child process)", rows)
    if growth:
        console.print(
            "RSS growth per request between the two largest logs: "
            + " · ".join(f"{m} {g:+,.2f} bytes" for m, g in growth.items())
        )
    return {"runs": rows, "rss_growth_bytes_per_request": growth}


def show_memory(console: Console, title: str, rows: list[dict[str, Any]]) -> None:
    t = Table(title=title)
    for c in ("mode", "requests", "log MB", "peak RSS MB", "seconds", "requests/s"):
        t.add_column(c, justify="right")
    for r in rows:
        t.add_row(
            r["mode"],
            f"{r['requests']:,}",
            f"{r['log_mb']:,.1f}",
            f"{r['peak_rss_mb']:,.1f}",
            f"{r['seconds']:,.1f}",
            f"{r['requests_per_second']:,.0f}",
        )
    console.print(t)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=1000, help="requests in the generated log")
    p.add_argument("--tokens", type=int, default=50_000, help="median estimated tokens per request")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    p.add_argument(
        "--memory-sizes",
        default="50000,100000",
        help="comma-separated request counts of the small-request logs (empty: skip)",
    )
    p.add_argument("--tmp", metavar="DIR", help="where to write the generated logs (default: the system's)")
    args = p.parse_args(argv)
    if args.requests < 1 or args.tokens < 100:
        p.error("--requests must be at least 1 and --tokens at least 100")
    sizes = [int(x.replace("_", "")) for x in args.memory_sizes.split(",") if x.strip()]
    console = Console(highlight=False, width=140)
    result = run(args.requests, args.tokens, args.seed, console)
    if sizes:
        result["memory"] = memory(sizes, args.seed, console, Path(args.tmp) if args.tmp else None)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
        console.print(f"[dim]wrote {args.json}[/]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
