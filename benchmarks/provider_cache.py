"""The providers' own prompt caches: what a 50-call agent session costs with ctxwright's
breakpoints and TTL choice, against a single breakpoint at the end of the system prompt and
against none, on Anthropic's Messages API and OpenAI's Responses API.

No hosted provider is reached: each arm runs on the loopback simulators of ``tests/providers/``
(``AnthropicSim``, ``ResponsesSim``), which apply the providers' documented cache rules --
breakpoints, the 20-block lookback, minimum sizes, TTLs renewed on a read, OpenAI's routing by
the first ~256 tokens plus ``prompt_cache_key`` and its 128-token increments -- and report
usage in the providers' own fields. **Token counts are the simulators': ceil(bytes / 4) of
each block's canonical JSON**, not a real tokenizer, so the absolute numbers are
illustrative; the ratios between arms follow from the rules.

The session (identical script in every arm): a coding agent with a ~3,000-token system prompt
and six tools works through four user turns, 50 model calls in all (tool calls, one batch of
ten parallel reads, a final answer per turn), through the real ``Harness`` with the backend
object (``clock=sim.clock.now``). Between the turns the user is away 1, 6 and 70 minutes:
the simulators' clocks are advanced, nobody sleeps. Each model call advances the clock by
``--call-seconds`` (a model's latency; 5 s keeps one session under OpenAI's ~15 requests a
minute per prefix and key).

Arms. Anthropic (``claude-sonnet-4-5``): ctxwright's placement (``breakpoints="ctxwright"``:
the frozen prefix, the end of the trajectory, a grid within the lookback) with TTL 5m, 1h and
``auto`` (``--cache-ttl auto``: 5m or 1h from the gaps seen so far), ctxwright 5m with
keep-warm (``keep_warm=True``: a ``max_tokens=1`` re-send before expiry; its refreshes are
driven on the simulated clock by the project's own ``KeepWarmTimer.tick``), one breakpoint at
the end of the system prompt (``breakpoints="system"``), and none. OpenAI Responses: on
``gpt-5.5`` (no explicit breakpoints) ctxwright's derived ``prompt_cache_key`` with the
default in-memory retention and with ``24h``, and no key; on ``gpt-5.6-sol`` (explicit breakpoints)
ctxwright's key and breakpoints with TTL ``30m`` and ``12h``, and no key nor breakpoints.
"None" cannot mean "no cache" on OpenAI -- every prompt of 1,024+ tokens is cached
automatically -- so there it is what a caller gets who sends nothing cache-related.

Cost: each recorded call (the session's ``CallRecord``s, keep-warm refreshes included) priced
by ``cache/prices.py: call_cost`` on ``core/usage.py``'s split of the provider's own usage
fields, at the built-in table's row for the model (a model without a row would be priced at
gpt-5.5's row with writes at 1.25x input, said so in the output). Expiries are the calls whose fused verdict
(``CallRecord.audit["cache"]``) is ``ttl_expired``, with its ``expiry_cost``.

    python benchmarks/provider_cache.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.table import Table

from common import ROOT, console, machine, save

sys.path.insert(0, str(ROOT / "tests"))

from ctxwright import Harness, tool
from ctxwright.agent.provider_cache import is_keep_warm
from ctxwright.backends.anthropic import AnthropicBackend
from ctxwright.backends.base import Backend
from ctxwright.backends.openai_responses import ResponsesBackend
from ctxwright.cache.expiry import KeepWarmTimer, expiry_cost
from ctxwright.cache.prices import ModelPrice, call_cost, price_for
from ctxwright.core.request import ChatRequest
from ctxwright.core.usage import CacheUsage, raw_cache_usage
from providers.anthropic_sim import AnthropicSim
from providers.responses_sim import ResponsesSim
from providers.responses_sim import call as r_call
from providers.responses_sim import text as r_text

ANTHROPIC_MODEL = "claude-sonnet-4-5"
TOKEN_RULE = "simulator tokens: ceil(UTF-8 bytes / 4) of each block's canonical JSON (not a real tokenizer)"
GAPS_MIN = (1.0, 6.0, 70.0)

SYSTEM = (
    "You are a senior software engineer working in a large Python monorepo. "
    "Follow the house rules: read before you write; run the tests after every change; keep each change small; "
    "never touch generated files; explain what you changed and why in one paragraph at the end of each task. "
) * 40  # ~12,000 bytes: ~3,000 simulator tokens, above every minimum

# -- the tools (deterministic outputs of realistic sizes) ---------------------------------------


@tool
def read_file(path: str) -> str:
    """Read a file of the repository."""
    return f"# {path}\n" + "".join(f"def f{i}(x):\n    return x * {i}  # from {path}\n" for i in range(30))


@tool
def grep(pattern: str) -> str:
    """Search the repository for a regular expression."""
    return "\n".join(f"src/pkg/mod{i}.py:{10 * i}: ... {pattern} ..." for i in range(12))


@tool
def run_tests(target: str) -> str:
    """Run the test suite (or one target) and return its summary."""
    return f"pytest {target}\n" + "." * 120 + "\n120 passed in 4.2s"


@tool
def list_dir(path: str) -> str:
    """List a directory."""
    return "\n".join(f"{path}/file_{i}.py" for i in range(20))


@tool
def edit_file(path: str, old: str, new: str) -> str:
    """Replace text in a file."""
    return f"edited {path}: replaced {len(old)} characters with {len(new)}"


@tool
def write_note(text: str) -> str:
    """Append a note to the task log."""
    return f"noted ({len(text)} characters)"


TOOLS = [read_file, grep, run_tests, list_dir, edit_file, write_note]

# -- the session script ----------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One model reply: a sentence and the tool calls it makes (none: the turn's answer)."""

    text: str
    calls: tuple[tuple[str, dict[str, Any]], ...] = ()


def _turn(t: int, n: int, batch_at: int | None = None) -> list[Step]:
    """A user turn of ``n`` model calls: tool calls, then the answer; ``batch_at`` makes one
    call read ten files at once (parallel tool calls: more than the lookback of blocks)."""
    kinds: list[tuple[str, dict[str, Any]]] = [
        ("grep", {"pattern": f"TODO-{t}"}),
        ("read_file", {"path": f"src/pkg/mod{t}.py"}),
        ("list_dir", {"path": f"src/pkg{t}"}),
        ("edit_file", {"path": f"src/pkg/mod{t}.py", "old": "x * 1", "new": "x * 2"}),
        ("run_tests", {"target": f"tests/test_mod{t}.py"}),
        ("write_note", {"text": f"turn {t}: progress"}),
    ]
    steps = []
    for k in range(n - 1):
        if k == batch_at:
            calls = tuple(("read_file", {"path": f"src/pkg/batch{t}_{j}.py"}) for j in range(10))
            steps.append(Step(f"Reading ten related files ({t}.{k}).", calls))
        else:
            name, args = kinds[k % len(kinds)]
            steps.append(Step(f"Step {t}.{k}: {name}.", ((name, args),)))
    steps.append(Step(f"Turn {t} done: the change is in and the tests pass."))
    return steps


def script(calls: int) -> list[list[Step]]:
    """Four user turns, ``calls`` model calls in all (50 by default)."""
    sizes = [calls // 4 + (1 if i < calls % 4 else 0) for i in range(4)]
    return [_turn(t, n, batch_at=2 if t == 1 and n > 4 else None) for t, n in enumerate(sizes)]


PROMPTS = [
    "Find the TODOs in the storage layer and fix the first one.",
    "Now do the same for the parser module.",
    "Next, the scheduler: same procedure.",
    "Last one: the CLI module. Then summarise everything you changed.",
]


class Responder:
    """The simulators' scripted model: the next step of the current turn, whatever the body;
    a keep-warm refresh (``max_tokens=1``) gets one word and does not advance the script.
    Each call advances the simulated clock by the model's latency."""

    def __init__(self, turns: list[list[Step]], advance: Callable[[float], Any], call_s: float) -> None:
        self.turns, self.advance, self.call_s = turns, advance, call_s
        self.turn = 0
        self.step = 0
        self.lock = threading.Lock()

    def next(self, body: dict[str, Any]) -> Step | None:
        with self.lock:
            if body.get("max_tokens") == 1 or body.get("max_output_tokens") == 1:
                self.advance(1.0)
                return None
            steps = self.turns[self.turn]
            s = steps[min(self.step, len(steps) - 1)]
            self.step += 1
            self.advance(self.call_s)
            return s

    def anthropic(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        s = self.next(body)
        if s is None:
            return [{"type": "text", "text": "ok"}]
        return [{"type": "text", "text": s.text}] + [{"type": "tool_use", "name": n, "input": a} for n, a in s.calls]

    def responses(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        s = self.next(body)
        if s is None:
            return [r_text("ok")]
        return [r_text(s.text)] + [r_call(n, a) for n, a in s.calls]


# -- the arms --------------------------------------------------------------------------------


class NoKeyResponses(ResponsesBackend):
    """The Responses backend without ``prompt_cache_key`` (what a caller sends who sets none):
    OpenAI then routes on the prompt's first ~256 tokens alone."""

    def routing_key_for(self, request: ChatRequest) -> str:
        return ""

    def body(self, request: ChatRequest, key: str) -> dict[str, Any]:
        out = super().body(request, key)
        out.pop("prompt_cache_key", None)
        return out


@dataclass(frozen=True)
class Arm:
    provider: str  # "anthropic" | "openai-responses"
    name: str
    model: str
    make: Callable[[str, Callable[[], float]], Backend]
    keep_warm: bool = False
    note: str = ""
    #: ctxwright's own choice for this provider/model (the arm the test compares with "none")
    ctxwright: bool = False
    none: bool = False


def _anthropic(breakpoints: str, ttl: str) -> Callable[[str, Callable[[], float]], Backend]:
    def make(url: str, clock: Callable[[], float]) -> Backend:
        return AnthropicBackend(model=ANTHROPIC_MODEL, base_url=url, ttl=ttl, breakpoints=breakpoints, clock=clock)

    return make


def _responses(model: str, retention: str | None, *, key: bool = True, breakpoints: bool | None = None) -> Any:
    def make(url: str, clock: Callable[[], float]) -> Backend:
        cls = ResponsesBackend if key else NoKeyResponses
        return cls(model=model, base_url=url + "/v1", retention=retention, breakpoints=breakpoints, clock=clock)

    return make


def arms() -> list[Arm]:
    a, r = "anthropic", "openai-responses"
    return [
        Arm(a, "ctxwright, TTL auto", ANTHROPIC_MODEL, _anthropic("ctxwright", "auto"), ctxwright=True),
        Arm(a, "ctxwright, TTL 5m", ANTHROPIC_MODEL, _anthropic("ctxwright", "5m")),
        Arm(a, "ctxwright, TTL 1h", ANTHROPIC_MODEL, _anthropic("ctxwright", "1h")),
        Arm(a, "ctxwright, 5m + keep-warm", ANTHROPIC_MODEL, _anthropic("ctxwright", "5m"), keep_warm=True),
        Arm(a, "ctxwright, auto + keep-warm", ANTHROPIC_MODEL, _anthropic("ctxwright", "auto"), keep_warm=True),
        Arm(a, "system breakpoint only, 5m", ANTHROPIC_MODEL, _anthropic("system", "5m")),
        Arm(a, "none", ANTHROPIC_MODEL, _anthropic("none", "5m"), none=True),
        Arm(r, "ctxwright key, retention 24h", "gpt-5.5", _responses("gpt-5.5", "24h"), ctxwright=True),
        Arm(r, "ctxwright key, in-memory", "gpt-5.5", _responses("gpt-5.5", None)),
        Arm(r, "none: no key, in-memory", "gpt-5.5", _responses("gpt-5.5", None, key=False), none=True),
        Arm(r, "ctxwright key + bp, 12h", "gpt-5.6-sol", _responses("gpt-5.6-sol", "12h"), ctxwright=True),
        Arm(r, "ctxwright key + bp, 30m", "gpt-5.6-sol", _responses("gpt-5.6-sol", "30m")),
        Arm(
            r,
            "none: no key, no bp",
            "gpt-5.6-sol",
            _responses("gpt-5.6-sol", None, key=False, breakpoints=False),
            none=True,
        ),
    ]


def price_of_model(provider: str, model: str) -> tuple[ModelPrice, str]:
    """The model's row of the built-in table, or for gpt-5.6 (no row) gpt-5.5's with writes at
    1.25x input -- said so."""
    p = price_for(provider, model)
    if p is not None:
        return p, f"built-in row {p.model!r} ({p.source})"
    base = price_for(provider, "gpt-5.5")
    assert base is not None
    w = base.input * 1.25
    assumed = replace(base, model=model, cache_write_5m=w, cache_write_1h=w, source="assumed")
    return assumed, f"no row for {model!r}: assumed gpt-5.5's prices with cache writes at 1.25x input ({w:g})"


# -- one run ---------------------------------------------------------------------------------


@dataclass
class Measured:
    provider: str
    arm: str
    model: str
    price_row: str
    calls: int = 0
    prompt_tokens: int = 0
    cache_read: int = 0
    cache_write: int = 0
    uncached: int = 0
    output: int = 0
    hit_ratio: float = 0.0
    cost_usd: float = 0.0
    expiries: int = 0
    expiry_extra_usd: float = 0.0
    expired_at_calls: list[int] = field(default_factory=list)
    #: tokens each expiry re-wrote (the audit's ``expiry_cost.tokens``)
    expiry_tokens: list[int] = field(default_factory=list)
    keep_warm_refreshes: int = 0
    keep_warm_usd: float = 0.0
    #: each refresh's cost, in order
    refresh_usd: list[float] = field(default_factory=list)
    causes: dict[str, int] = field(default_factory=dict)
    ttls_sent: list[str] = field(default_factory=list)
    max_breakpoints: int = 0
    refused: int = 0
    wall_s: float = 0.0


def _drive_keep_warm(h: Harness, until: float, clock: Callable[[], float], advance: Callable[[float], Any]) -> None:
    """The idle gap with keep-warm on: the project's plan decides when, the project's timer
    tick sends (``KeepWarmTimer.tick``), the simulated clock moves to each due time."""
    pc = h.context.provider_cache
    pc.stop_timer()  # the harness's background timer waits in real seconds; drive it here instead
    if pc.plan is None:
        return
    timer = KeepWarmTimer(pc.plan, pc.refresh)
    while True:
        at = pc.plan.next_at()
        if at is None or at >= until:
            return
        if at > clock():
            advance(at - clock())
        if not timer.tick():
            return


def run_arm(arm: Arm, turns: list[list[Step]], call_s: float, db_dir: Path) -> Measured:
    t0 = time.perf_counter()
    price, row = price_of_model(arm.provider, arm.model)
    sim: AnthropicSim | ResponsesSim
    if arm.provider == "anthropic":
        sim = AnthropicSim()
    else:
        sim = ResponsesSim()
    responder = Responder(turns, sim.clock.advance, call_s)
    sim.respond = responder.anthropic if arm.provider == "anthropic" else responder.responses
    with sim:
        backend = arm.make(sim.url, sim.clock.now)
        db = db_dir / f"{arm.provider}-{len(list(db_dir.iterdir()))}.db"
        with Harness(
            system=SYSTEM,
            tools=TOOLS,
            backend=backend,
            db=db,
            max_iterations=max(len(t) for t in turns) + 5,
            keep_warm=arm.keep_warm,
        ) as h:
            for t, prompt in enumerate(PROMPTS[: len(turns)]):
                responder.turn, responder.step = t, 0
                result = h.run(prompt)
                if result.stop_reason != "final_answer":
                    raise SystemExit(f"{arm.provider} / {arm.name}: turn {t} ended with {result.stop_reason}")
                if t < len(GAPS_MIN) and t < len(turns) - 1:
                    until = sim.clock.now() + GAPS_MIN[t] * 60.0
                    if arm.keep_warm:
                        _drive_keep_warm(h, until, sim.clock.now, sim.clock.advance)
                    left = until - sim.clock.now()
                    if left > 0:
                        sim.clock.advance(left)
            h.context.provider_cache.stop_timer()
            assert h.store is not None
            records = h.store.calls(h.session_id)
        refused = len(sim.requests) - len(sim.responses)  # each simulator answers a refusal with no response body
        bodies = list(sim.requests)
    m = Measured(arm.provider, arm.name, arm.model, row, refused=refused)
    total = CacheUsage()
    for rec in records:
        split = raw_cache_usage(rec.usage.get("raw"))
        if split is None:
            continue
        _, u = split
        cost = call_cost(u, price)
        m.cost_usd += cost
        if is_keep_warm(rec.usage):
            m.keep_warm_refreshes += 1
            m.keep_warm_usd += cost
            m.refresh_usd.append(round(cost, 6))
            continue
        m.calls += 1
        total = total + u
        cache = rec.audit.raw.get("cache") or {}
        cause = str(cache.get("cause") or "?")
        m.causes[cause] = m.causes.get(cause, 0) + 1
        if cause == "ttl_expired":
            m.expiries += 1
            m.expired_at_calls.append(m.calls)
            priced = cache.get("expiry_cost") or {}
            m.expiry_tokens.append(int(priced.get("tokens") or 0))
            if "extra_usd" in priced:
                m.expiry_extra_usd += float(priced["extra_usd"])
            else:  # the audit had no price for the model: its re-written tokens at this arm's price
                prev_ttl = m.ttls_sent[-1] if m.ttls_sent else None
                m.expiry_extra_usd += expiry_cost(int(priced.get("tokens") or 0), prev_ttl, price).extra_usd
        ttl = ((rec.usage.get("raw") or {}).get("cache") or {}).get("ttl")
        if ttl and (not m.ttls_sent or m.ttls_sent[-1] != ttl):
            m.ttls_sent.append(str(ttl))
    m.prompt_tokens, m.cache_read, m.cache_write = total.prompt, total.cache_read, total.cache_write
    m.uncached, m.output = total.uncached_input, total.output
    m.hit_ratio = round(total.cache_read / total.prompt, 4) if total.prompt else 0.0
    m.max_breakpoints = max((_breakpoints(arm.provider, b) for b in bodies), default=0)
    m.cost_usd, m.keep_warm_usd, m.expiry_extra_usd = (
        round(m.cost_usd, 6),
        round(m.keep_warm_usd, 6),
        round(m.expiry_extra_usd, 6),
    )
    m.wall_s = round(time.perf_counter() - t0, 3)
    return m


def _breakpoints(provider: str, body: dict[str, Any]) -> int:
    """Explicit breakpoints in one request body (``cache_control`` / ``prompt_cache_breakpoint``)."""
    text = repr(body)
    return text.count("'cache_control'") if provider == "anthropic" else text.count("'prompt_cache_breakpoint'")


# -- main ------------------------------------------------------------------------------------

COLUMNS = [
    "prompt tok",
    "read",
    "write",
    "uncached",
    "hit",
    "expiries",
    "expiry +$",
    "refreshes",
    "refresh $",
    "cost $",
    "vs none",
]


def render(title: str, arms_json: dict[str, Any]) -> Table:
    """One provider's arms, one row each (the arm's name unwrapped, the numbers right-aligned)."""
    t = Table(title=title)
    t.add_column("arm", justify="left", no_wrap=True)
    for c in COLUMNS:
        t.add_column(c, justify="right")
    for name, e in arms_json.items():
        t.add_row(
            name,
            f"{e['prompt_tokens']:,}",
            f"{e['cache_read']:,}",
            f"{e['cache_write']:,}",
            f"{e['uncached']:,}",
            f"{e['hit_ratio']:.3f}",
            str(e["expiries"]),
            f"{e['expiry_extra_usd']:.4f}",
            str(e["keep_warm_refreshes"]),
            f"{e['keep_warm_usd']:.4f}",
            f"{e['cost_usd']:.4f}",
            f"{e['vs_none']:.3f}" if e["vs_none"] is not None else "?",
        )
    return t


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a 20-call session instead of 50 (same gaps, same arms)")
    p.add_argument("--calls", type=int, help="model calls in the session (default 50, 20 with --quick)")
    p.add_argument("--call-seconds", type=float, default=5.0, help="simulated seconds per model call")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    args = p.parse_args(argv)
    calls = args.calls or (20 if args.quick else 50)
    if calls < 8:
        p.error("--calls must be at least 8 (four turns of two calls)")
    turns = script(calls)
    t0 = time.perf_counter()
    results: list[Measured] = []
    with tempfile.TemporaryDirectory(prefix="ctxwright-provider-cache-") as tmp:
        for arm in arms():
            results.append(run_arm(arm, turns, args.call_seconds, Path(tmp)))
    wall = round(time.perf_counter() - t0, 2)
    by_provider: dict[str, Any] = {}
    for arm, m in zip(arms(), results, strict=True):
        none = next(x for a, x in zip(arms(), results, strict=True) if a.none and a.model == arm.model)
        entry = asdict(m) | {
            "ctxwright_choice": arm.ctxwright,
            "is_none": arm.none,
            "vs_none": round(m.cost_usd / none.cost_usd, 4) if none.cost_usd else None,
        }
        prov = by_provider.setdefault(m.provider, {"arms": {}})
        prov["arms"][m.arm if m.provider == "anthropic" else f"{m.model}: {m.arm}"] = entry
    for provider, data in by_provider.items():
        console.print(render(f"{provider}: a {calls}-call session, idle gaps of 1, 6 and 70 min", data["arms"]))
        for row in sorted({e["price_row"] for e in data["arms"].values()}):
            console.print(f"[dim]priced: {row}[/]")
    console.print(f"[dim]{TOKEN_RULE}; wall time {wall} s for {len(results)} sessions[/]")
    data = {
        "benchmark": "provider_cache",
        "machine": machine(),
        "quick": bool(args.quick),
        "calls": calls,
        "gaps_min": list(GAPS_MIN),
        "call_seconds": args.call_seconds,
        "token_rule": TOKEN_RULE,
        "wall_s": wall,
        "providers": by_provider,
    }
    save(args, data)
    return data


if __name__ == "__main__":
    main()
