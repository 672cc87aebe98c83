"""ctxwright's compaction tiers against the providers' own, on one scripted long tool session.

The session: a scripted model reads ``--records`` records one call each (every record about
``--lines`` lines: a ticket on its first line, a data path in its middle, a commit hash on its
last), then answers. It runs five times, each time through the official SDK against a loopback
simulator (``tests/providers/``):

* ``ctxwright`` on the Anthropic simulator and on the Responses simulator: ctxwright's tiers
  without the LLM layers (offload, clearing, trim; ``summaries=False``), on a ``--window``
  token window;
* ``anthropic clear``: Anthropic's ``clear_tool_uses_20250919`` at ``--trigger`` tokens,
  keeping 3 tool uses;
* ``anthropic compact``: Anthropic's ``compact_20260112`` at ``--trigger`` tokens (at least
  50,000, the documented minimum);
* ``responses compact``: the Responses API's ``context_management`` compaction at
  ``--trigger`` tokens.

Measured per run: the prompt tokens the server billed over the session's calls, the share of
them read from the cache, the request bytes sent, the compactions (ctxwright's compaction
events or the provider's applied edits and compaction items) and the items kept: every ticket,
path and commit of the records, each asked about once after the run (the ledger's probe, one
question per identifier through the same backend, with the session's context as it now stands).
The providers' columns are the simulators' documented behaviour (their summary keeps the user's
words and the first line of each tool result; a cleared result is a placeholder; the simulated
model answers a probe from exactly what it reads), not the hosted models': a hosted model's
summary keeps what it judges worth keeping, and its answers are not a perfect reader's.

    python benchmarks/compaction_providers.py [--records 24] [--lines 120] [--trigger 50000] [--window 56000] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from common import ROOT, console, machine, save, table

sys.path.insert(0, str(ROOT / "tests"))

from ctxwright import Harness, tool
from ctxwright.compaction.ledger import items_of
from ctxwright.compaction.provider import probe_question, read_answer, visible_text
from ctxwright.core.events import CompactionEvent, ProviderCompactionEvent
from ctxwright.core.messages import Message
from ctxwright.core.request import ChatRequest
from providers.anthropic_sim import AnthropicSim
from providers.responses_sim import ResponsesSim, call, text

CLAUDE = "claude-sonnet-4-6"
GPT = "gpt-5.5"
SYSTEM = "You are a careful records clerk. Read each record once; later you will be asked about them."
WORDS = [
    "the",
    "shipment",
    "was",
    "checked",
    "against",
    "the",
    "manifest",
    "and",
    "the",
    "clerk",
    "noted",
    "nothing",
    "unusual",
    "about",
    "its",
    "weight",
    "colour",
    "label",
    "seal",
    "or",
    "route",
    "while",
    "the",
    "carrier",
    "waited",
    "outside",
    "for",
    "the",
    "signature",
    "and",
    "the",
    "receipt",
    "that",
    "every",
    "delivery",
    "needs",
    "before",
    "the",
    "warehouse",
    "accepts",
    "it",
    "into",
    "the",
    "ledger",
    "of",
    "goods",
]


def filler(n: int, i: int) -> str:
    """A line of prose with no identifier and no number, different for every record and line
    (a repetitive log would be folded by ctxwright's lossless compressors before any tier ran)."""
    x = (n * 7919 + i * 104729) % 2_147_483_647
    words = []
    for _ in range(12):
        x = (x * 48271) % 2_147_483_647
        words.append(WORDS[x % len(WORDS)])
    return " ".join(words)


def record(n: int, lines: int) -> str:
    middle = [filler(n, i) for i in range(lines)]
    middle.insert(lines // 2, f"record {n} data kept at /srv/records/r{n:03d}/data.json")
    return "\n".join(
        [f"record {n} ticket REC-{5000 + n} is open", *middle, f"record {n} fixed in commit {n:03d}bead{n:03d}"]
    )


def probes(records: int, lines: int) -> list[tuple[str, str]]:
    """(identifier, question) for every ticket, path and commit of the records."""
    out = []
    for n in range(1, records + 1):
        text_ = record(n, lines)
        for _kind, value in items_of(text_):
            q = probe_question(value, text_)
            if q is not None and ("REC-" in value or "/srv/" in value or "bead" in value):
                out.append((value, q))
    return out


def last_probe_answer(body: dict[str, Any], anthropic: bool) -> str | None:
    """The simulated model's answer to a probe in the last user message (None: no probe)."""
    if anthropic:
        last = body["messages"][-1]
        texts = (
            [b.get("text", "") for b in last["content"] if b.get("type") == "text"] if last["role"] == "user" else []
        )
    else:
        last = body["input"][-1]
        content = last.get("content") if last.get("type") == "message" and last.get("role") == "user" else None
        texts = [content] if isinstance(content, str) else [p.get("text", "") for p in content or []]
    context = visible_text(body)
    for t in texts:
        answer = read_answer(str(t), context)
        if answer is not None:
            return answer
    return None


def scripted(sims: list[Any], records: int, anthropic: bool) -> Callable[[dict[str, Any]], list[dict[str, Any]]]:
    """Read records 1..records, one per call, then answer; answer probes from what is read."""

    def respond(body: dict[str, Any]) -> list[dict[str, Any]]:
        answer = last_probe_answer(body, anthropic)
        if answer is not None:
            return [{"type": "text", "text": answer}] if anthropic else [text(answer)]
        k = sum(1 for b in sims[0].seen if not _is_probe(b, anthropic))
        if k <= records:
            return (
                [{"type": "tool_use", "name": "lookup", "input": {"n": k}}] if anthropic else [call("lookup", {"n": k})]
            )
        return [{"type": "text", "text": "All records read."}] if anthropic else [text("All records read.")]

    return respond


def _is_probe(body: dict[str, Any], anthropic: bool) -> bool:
    return last_probe_answer(body, anthropic) is not None


@contextmanager
def simulator(kind: str, records: int) -> Iterator[Any]:
    ref: list[Any] = []
    anthropic = kind == "anthropic"
    sim = (
        AnthropicSim(respond=scripted(ref, records, True))
        if anthropic
        else ResponsesSim(respond=scripted(ref, records, False))
    )
    ref.append(sim)
    with sim:
        yield sim


def run(name: str, kind: str, compaction: Any, args: argparse.Namespace) -> dict[str, Any]:
    lines = args.lines

    @tool
    def lookup(n: int) -> str:
        """Look up record n."""
        return record(n, lines)

    anthropic = kind == "anthropic"
    with simulator(kind, args.records) as sim, tempfile.TemporaryDirectory() as tmp:
        opts: dict[str, Any] = {
            "system": SYSTEM,
            "tools": [lookup],
            "compaction": compaction,
            "summaries": False,
            "db": Path(tmp) / "ctx.db",
            "max_iterations": args.records + 5,
        }
        if compaction is True:  # ctxwright's tiers plan for this window; the providers' runs keep the default
            opts["window"] = args.window
        if anthropic:
            opts.update(backend="anthropic", base_url=sim.url, model=CLAUDE, api_key="sim")
        else:
            opts.update(backend="openai-responses", base_url=sim.url + "/v1", model=GPT, api_key="sim")
        with Harness(**opts) as h:
            result = h.run(f"Read records 1 to {args.records}.")
            assert result.final_answer == "All records read.", result
            session_calls = len(sim.responses)
            events = list(h.context.session.events)
            billed, cached = _billed(sim.responses, anthropic)
            sent_bytes = sum(len(json.dumps(r, separators=(",", ":"))) for r in sim.requests)
            # the probes: the session's context as it now stands, plus one question each
            base = h.context.session.build_request()
            final = Message(role="assistant", content=result.final_answer)
            kept, lost = [], []
            for value, question in probes(args.records, lines):
                req = ChatRequest(
                    messages=(*base.messages, final, Message(role="user", content=question)), tools=base.tools
                )
                answer = h.backend.complete(req).message.content or ""
                (kept if value in answer else lost).append(value)
    ours = [e for e in events if isinstance(e, CompactionEvent)]
    theirs = [e for e in events if isinstance(e, ProviderCompactionEvent) and (e.item is not None or e.cleared)]
    return {
        "run": name,
        "calls": session_calls,
        "prompt_tokens": billed,
        "cached_tokens": cached,
        "cache_share": round(cached / billed, 3) if billed else None,
        "request_bytes": sent_bytes,
        "compactions": len(ours) + len(theirs),
        "items": len(kept) + len(lost),
        "kept": len(kept),
        "lost_examples": lost[:6],
    }


def _billed(responses: list[dict[str, Any]], anthropic: bool) -> tuple[int, int]:
    total = cached = 0
    for r in responses:
        u = r["usage"]
        if anthropic:
            # the compaction pass is billed too, apart from the top-level usage (usage.iterations)
            passes = [u, *(i for i in u.get("iterations") or [] if i["type"] == "compaction")]
            total += sum(
                p["input_tokens"] + p["cache_read_input_tokens"] + p["cache_creation_input_tokens"] for p in passes
            )
            cached += sum(p["cache_read_input_tokens"] for p in passes)
        else:
            total += u["input_tokens"]
            cached += u["input_tokens_details"]["cached_tokens"]
    return total, cached


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=24)
    p.add_argument("--lines", type=int, default=120, help="filler lines per record")
    p.add_argument("--trigger", type=int, default=50_000, help="the providers' trigger, in tokens")
    p.add_argument("--window", type=int, default=56_000, help="the window ctxwright's tiers plan for")
    p.add_argument("--json", metavar="PATH", default=str(ROOT / "benchmarks" / "results" / "compaction_providers.json"))
    args = p.parse_args()
    off = {"enabled": False}
    runs = [
        ("ctxwright tiers (Anthropic sim)", "anthropic", True),
        (
            "anthropic clear_tool_uses",
            "anthropic",
            {**off, "provider": "clear", "provider_trigger_tokens": args.trigger},
        ),
        (
            "anthropic compact_20260112",
            "anthropic",
            {**off, "provider": "compact", "provider_trigger_tokens": args.trigger},
        ),
        ("ctxwright tiers (Responses sim)", "responses", True),
        ("responses compaction", "responses", {**off, "provider": "compact", "provider_trigger_tokens": args.trigger}),
    ]
    rows = [run(name, kind, comp, args) for name, kind, comp in runs]
    console.print(
        table(
            f"One session of {args.records} tool calls; providers triggered at {args.trigger:,} tokens, "
            f"ctxwright on a {args.window:,}-token window (simulators: documented behaviour, not the hosted models)",
            ["run", "calls", "prompt tokens", "cached", "cache share", "request bytes", "compactions", "items kept"],
            [
                [
                    r["run"],
                    r["calls"],
                    f"{r['prompt_tokens']:,}",
                    f"{r['cached_tokens']:,}",
                    r["cache_share"],
                    f"{r['request_bytes']:,}",
                    r["compactions"],
                    f"{r['kept']}/{r['items']}",
                ]
                for r in rows
            ],
        )
    )
    save(args, {"machine": machine(), "args": vars(args), "runs": rows})


if __name__ == "__main__":
    main()
