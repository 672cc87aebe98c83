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
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import string
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from rich.console import Console
from rich.table import Table

from ctxwright.audit.compare import Auditor
from ctxwright.audit.logs import load_requests
from ctxwright.core.messages import canonical_json
from ctxwright.core.tokens import TokenCounter

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
    if problems:
        console.print(f"[red]{len(problems)} parse problems[/], first: {problems[0]}")
    result = {
        "requests": len(reqs),
        "tokens_per_request_median": statistics.median(r.prompt_tokens for r in auditor.rows),
        "seconds_parse": round(t1 - t0, 3),
        "seconds_audit": round(t2 - t1, 3),
        "seconds_total": round(t2 - t0, 3),
        "requests_per_second": round(len(reqs) / (t2 - t0), 1),
    }
    show(console, result, size, gen_s, summary.causes)
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
        "[dim]each session's first request differs from the previous session's last one, so "
        "session starts count as breaks too (history_edited, or the cause of a break that "
        f"session carried); log generated in {gen_s:.1f} s, not timed[/]"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=1000, help="requests in the generated log")
    p.add_argument("--tokens", type=int, default=50_000, help="median estimated tokens per request")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    args = p.parse_args(argv)
    if args.requests < 1 or args.tokens < 100:
        p.error("--requests must be at least 1 and --tokens at least 100")
    console = Console(highlight=False, width=140)
    result = run(args.requests, args.tokens, args.seed, console)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
        console.print(f"[dim]wrote {args.json}[/]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
