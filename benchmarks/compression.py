"""Experiment 2-9: which compression strategy keeps the facts with the fewest tokens?

An offline research task over a corpus our code generates (fixed seed): the founders of a
fictional organisation, Nordlys Labs, and their job changes (names, companies, years).
Pages are 5K-150K characters (``--quick``: 5K-8K) of navigation noise, unrelated text and
the facts, plus near-duplicate syndicated copies and pages about people who are not
founders. Tools: ``search(query)`` and ``fetch_page(page_id)``.

The research steps are scripted (identical tool calls for every strategy, so strategies are
compared on the same inputs): search the organisation, fetch its about page, then per
founder search the name and fetch their profile and one news page in parallel. Everything
else is the real code path: the agent loop, the layers, the strategy's summaries on the
model (the embedded model by default, any ``--base-url``), and at the end the model answers
"Where does <founder> work now?" for each founder from the final context (a JSON answer
constrained to the companies of the corpus).

Per strategy over ``--runs`` corpora: share of the required facts (founder, current
company, year joined) still present together in one message of the final context, answer
accuracy, prompt tokens of the research loop (Σ over its calls, counted with the model's
tokenizer), the same relative to ``none`` with an unlimited window and no layers,
iterations, compressions, LLM calls, failures.

The recall arm: the research runs with ``recall`` in its prefix (as a Harness has it whenever
compaction is on), and each founder's question is asked twice on the same final context:
once answered from the context alone, once with the ``recall`` tool. In the recall arm the
model's first answering turn has ``recall`` as its only tool and ``tool_choice="required"``:
the model writes the query, the tool searches the events compaction hid, its passages are
appended as a tool result, then the model answers. It measures whether recall brings a
dropped fact back and the model uses it, not whether the model chooses to call it (a
135M-parameter model rarely does). Per strategy: accuracy without and with recall, and the
share of recalls whose passages held the founder's current company and year.

    python benchmarks/compression.py [--quick] [--runs 5] [--founders 3] [--window 8192]
                                     [--strategies none,extractive,...] [--json PATH]
                                     [--no-recall] [--base-url URL --model NAME]
"""

from __future__ import annotations

import argparse
import json
import random
import time

from common import add_backend_args, console, machine, make_backend, median, save, table
from ctxwright.agent.loop import Agent, AgentConfig
from ctxwright.backends.scripted import ScriptedBackend, call
from ctxwright.compaction import CompactionConfig
from ctxwright.compaction.recall import Recall
from ctxwright.compaction.retrieval import ResultReader
from ctxwright.compaction.strategies import STRATEGIES
from ctxwright.core.events import CompactionEvent, SummaryFailedEvent, ToolEvent
from ctxwright.core.messages import Message, ToolCall
from ctxwright.core.prefix import Prefix
from ctxwright.core.request import ChatRequest
from ctxwright.core.session import Session
from ctxwright.errors import BackendError
from ctxwright.tools.registry import ToolRegistry, tool

FIRST = ["Alice", "Bruno", "Chiara", "Dmitri", "Elena", "Farid", "Greta", "Hiro", "Ines", "Jonas", "Kaia", "Luca"]
LAST = ["Varga", "Okafor", "Lindqvist", "Moreau", "Tanaka", "Costa", "Novak", "Haddad", "Berg", "Sato", "Quinn"]
COMPANIES = [
    "Helix Robotics",
    "Aurora Biotech",
    "Quanta Grid",
    "Borealis Maps",
    "Cinder Labs",
    "Tidewater AI",
    "Granite Cloud",
    "Lumen Health",
    "Orbital Freight",
    "Sable Security",
    "Vireo Energy",
    "Kestrel Pay",
]
ROLES = ["CTO", "CEO", "head of research", "VP engineering", "chief scientist", "product lead"]
NAV = (
    "Home | About | Products | Careers | Press | Investors | Contact | Login\n"
    "Subscribe to our newsletter. Follow us on social media. Cookie settings. Privacy. Terms of use.\n"
)
FILLER = [
    "The conference drew a large crowd and several panels discussed open standards for data exchange.",
    "Analysts expect the market for industrial sensors to grow steadily over the next decade.",
    "The city council approved a new bike lane network after a long public consultation.",
    "A retrospective on early web browsers recalled the excitement of the first graphical pages.",
    "Weather in the region stayed mild, with light rain expected over the weekend.",
    "The museum opened an exhibition of northern landscape paintings from the last century.",
]
#: The layers without an LLM (noise, clearing, trim) act only as the safety net here, at 90% of
#: the window, so that each strategy's own effect shows (``adaptive`` triggers at 80%).
SAFETY_NET_RATIO = 0.9
SYSTEM = "You are a research agent. Use search and fetch_page, then answer with the facts you found."
TASK = "Who founded Nordlys Labs, and where does each founder work now (company and year joined)?"


def make_corpus(seed: int, founders: int, size_range: tuple[int, int]) -> dict:
    rng = random.Random(seed)
    names = rng.sample([f"{first} {last}" for first in FIRST for last in LAST], founders + 4)
    people, others = names[:founders], names[founders:]
    facts = {}
    pages: dict[str, dict] = {}

    def pad(core: list[str], size: int) -> str:
        parts = [NAV]
        body = list(core)
        while sum(len(p) for p in parts) + sum(len(b) for b in body) < size:
            body.insert(rng.randrange(len(body) + 1), rng.choice(FILLER))
        parts.extend(body)
        parts.append(NAV)
        return "\n".join(parts)

    pid = 0

    def add(title: str, core: list[str]) -> str:
        nonlocal pid
        pid += 1
        key = f"P{pid:03d}"
        pages[key] = {"title": title, "text": pad(core, rng.randint(*size_range))}
        return key

    about = add("About Nordlys Labs", [f"Nordlys Labs was founded in 2015 by {', '.join(people)}."])
    plan = []
    for p in people:
        a, b = rng.sample(COMPANIES, 2)
        ya, yb = rng.randint(2017, 2019), rng.randint(2020, 2024)
        ra, rb = rng.choice(ROLES), rng.choice(ROLES)
        facts[p] = {"company": b, "year": yb, "role": rb}
        prof = add(
            f"{p} - profile",
            [
                f"{p} co-founded Nordlys Labs in 2015.",
                f"In {ya} {p} joined {a} as {ra}.",
                f"In {yb} {p} left {a} and joined {b} as {rb}.",
                f"{p.split()[0]} still works at {b} today.",
            ],
        )
        news = add(
            f"{p} moves to {b}", [f"News: {p} has joined {b} as {rb} ({yb}).", f"Before that, {p} was {ra} at {a}."]
        )
        add(
            f"{p} moves to {b} (syndicated)",
            [f"News: {p} has joined {b} as {rb} ({yb}).", "Reprinted with permission."],
        )
        plan.append((p, prof, news))
    for o in others:  # people who are not founders, at other companies
        add(f"{o} - profile", [f"{o} joined {rng.choice(COMPANIES)} in {rng.randint(2016, 2024)}."])
    return {"people": people, "facts": facts, "pages": pages, "about": about, "plan": plan}


def tools_for(corpus: dict) -> ToolRegistry:
    reg = ToolRegistry()
    pages = corpus["pages"]

    @tool
    def search(query: str) -> str:
        """Search the web archive.

        Args:
            query: words to look for
        """
        q = {w.lower() for w in query.split()}
        scored = sorted(
            pages,
            key=lambda k: -len(q & {w.lower() for w in (pages[k]["title"] + " " + pages[k]["text"][:3000]).split()}),
        )
        return "\n".join(f"{k}: {pages[k]['title']}" for k in scored[:5])

    @tool
    def fetch_page(page_id: str) -> str:
        """Fetch a page by its id.

        Args:
            page_id: the id from search, like P003
        """
        if page_id not in pages:
            raise KeyError(f"no page {page_id!r}; use an id from search")
        return pages[page_id]["text"]

    reg.register(search)
    reg.register(fetch_page)
    return reg


def research_policy(corpus: dict):
    steps = [[("search", {"query": "Nordlys Labs founders"})], [("fetch_page", {"page_id": corpus["about"]})]]
    for p, prof, news in corpus["plan"]:
        steps.append([("search", {"query": p})])
        steps.append([("fetch_page", {"page_id": prof}), ("fetch_page", {"page_id": news})])
    state = {"i": 0, "k": 0}

    def reply(request: ChatRequest) -> Message:
        if state["i"] >= len(steps):
            return Message(role="assistant", content="Research done; answering per founder.")
        batch = steps[state["i"]]
        state["i"] += 1
        calls = []
        for name, args in batch:
            state["k"] += 1
            calls.append(call(name, args, f"t{state['k']}"))
        return Message(role="assistant", tool_calls=tuple(calls))

    return reply, len(steps) + 1


def retained(corpus: dict, messages: list[Message]) -> float:
    """Share of founders whose current company and year appear together with their surname."""
    texts = [m.content or "" for m in messages]
    ok = 0
    for p, f in corpus["facts"].items():
        last = p.split()[1]
        if any(last in t and f["company"] in t and str(f["year"]) in t for t in texts):
            ok += 1
    return ok / len(corpus["facts"])


#: room left in the window for the question, a recall result and the answer
ANSWER_ROOM = 200
RECALL_ROOM = 700


def ask_recall(backend, messages: tuple[Message, ...], recaller: Recall) -> tuple[tuple[Message, ...], str]:
    """The recall turn: the model must call ``recall`` (its only tool); the result is appended.

    Returns the messages to answer from and the passages' text ("" when the model's call
    could not be run: no call, unreadable arguments)."""
    spec = recaller.tool().spec
    try:
        c = backend.complete(
            ChatRequest(messages=messages, tools=(spec,), tool_choice="required", max_tokens=48, temperature=0.0)
        )
        tc = c.message.tool_calls[0]
        query = json.loads(tc.arguments or "{}").get("query")
        text = recaller.recall(str(query)).content
    except (BackendError, IndexError, json.JSONDecodeError, AttributeError, ValueError):
        return messages, ""
    asked = Message(role="assistant", tool_calls=(ToolCall(id="r1", name=tc.name, arguments=tc.arguments or "{}"),))
    return (*messages, asked, Message(role="tool", tool_call_id="r1", name=tc.name, content=text)), text


def answer(
    backend, corpus: dict, messages: list[Message], window: int, count, recaller: Recall | None = None
) -> tuple[float | None, int, float | None]:
    """Ask the model per founder; None if the context does not fit the window.

    With ``recaller``: each question goes through :func:`ask_recall` first. The third value is
    the share of recalls whose passages held the founder's current company and year."""
    tokens = sum(count(m.canonical()) + 4 for m in messages)
    if tokens + ANSWER_ROOM + (RECALL_ROOM if recaller is not None else 0) > window:
        return None, tokens, None
    right = 0
    found = 0
    companies = sorted({c for c in COMPANIES})
    for p in corpus["people"]:
        q = Message(role="user", content=f'Where does {p} work now? Reply {{"answer": COMPANY}}.')
        asked: tuple[Message, ...] = (*messages, q)
        if recaller is not None:
            asked, text = ask_recall(backend, asked, recaller)
            f = corpus["facts"][p]
            found += f["company"] in text and str(f["year"]) in text
        req = ChatRequest(
            messages=asked,
            max_tokens=16,
            temperature=0.0,
            tool_choice="none",
            extra={
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {
                        "name": "answer",
                        "schema": {
                            "type": "object",
                            "properties": {"answer": {"enum": companies}},
                            "required": ["answer"],
                        },
                    },
                }
            },
        )
        try:
            c = backend.complete(req)
            got = json.loads(c.message.content or "{}").get("answer")
        except (BackendError, json.JSONDecodeError, AttributeError):
            got = None
        right += got == corpus["facts"][p]["company"]
    n = len(corpus["people"])
    return right / n, tokens, (found / n if recaller is not None else None)


def run_one(strategy: str, corpus: dict, backend, args, count, unlimited: bool = False) -> dict:
    reg = tools_for(corpus)
    reg.register(ResultReader().tool())
    recaller = Recall()
    if args.recall and not unlimited:
        reg.register(recaller.tool())  # bound to the session by the agent's context manager
    policy, steps = research_policy(corpus)
    s = Session.start(Prefix.build(SYSTEM, reg.specs()))
    comp = (
        CompactionConfig(enabled=False)
        if unlimited
        else CompactionConfig(
            window_tokens=args.window,
            strategy=strategy,
            summary_input_tokens=args.summary_input,
            summary_max_tokens=args.summary_tokens,
            summary_timeout_s=args.summary_timeout,
            trigger_ratio=SAFETY_NET_RATIO,
        )
    )
    agent = Agent(
        s,
        ScriptedBackend([policy], model="research-script"),
        reg,
        AgentConfig(compaction=comp, max_iterations=steps + 2, max_result_chars=10**9),
        counter=count,
        summary_backend=backend,
    )
    t0 = time.perf_counter()
    r = agent.run(TASK)
    prompt = sum(c.ledger.total for c in r.calls)
    final = s.messages()
    ctx = agent.context
    out = {
        "strategy": strategy,
        "prompt_tokens": prompt,
        "iterations": len(r.calls),
        "fact_retention": retained(corpus, final),
        "compressions": sum(1 for ev in s.events if isinstance(ev, ToolEvent) and ev.compressed)
        + sum(len(ev.replace) for ev in s.events if isinstance(ev, CompactionEvent) and ev.layer == "adaptive"),
        "llm_calls": ctx.summarizer.calls if ctx is not None and ctx.summarizer is not None else 0,
        "failures": sum(1 for ev in s.events if isinstance(ev, SummaryFailedEvent)),
        "research_s": round(time.perf_counter() - t0, 1),
    }
    if not unlimited:
        acc, final_tokens, _ = answer(backend, corpus, final, args.window, count.count)
        out.update(answer_accuracy=acc, final_context_tokens=final_tokens)
        if args.recall:
            racc, _, found = answer(backend, corpus, final, args.window, count.count, recaller)
            out.update(recall_accuracy=racc, recall_found=found)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_backend_args(p)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--founders", type=int, default=3)
    p.add_argument("--window", type=int, default=8192)
    p.add_argument("--strategies", default=",".join(STRATEGIES))
    p.add_argument("--summary-input", type=int, default=800, help="summarizer input budget in tokens")
    p.add_argument("--summary-tokens", type=int, default=128, help="summary length cap in tokens")
    p.add_argument("--summary-timeout", type=float, default=180.0)
    p.add_argument("--quick", action="store_true", help="1 run, 2 founders, pages of 5K-8K characters")
    p.add_argument("--no-recall", dest="recall", action="store_false", help="leave the recall arm out")
    args = p.parse_args()
    if args.quick:
        args.runs, args.founders = 1, 2
        args.summary_input, args.summary_tokens = 400, 64
    sizes = (5_000, 8_000) if args.quick else (5_000, 150_000)
    backend = make_backend(args, n_ctx=args.window)
    count = backend.token_counter()
    strategies = [s for s in args.strategies.split(",") if s]
    rows: dict[str, list[dict]] = {s: [] for s in strategies}
    base: list[int] = []
    t0 = time.perf_counter()
    for run in range(args.runs):
        corpus = make_corpus(100 + run, args.founders, sizes)
        base.append(run_one("none", corpus, backend, args, count, unlimited=True)["prompt_tokens"])
        for s in strategies:
            res = run_one(s, corpus, backend, args, count)
            rows[s].append(res)
            console.print(
                f"[dim]run {run + 1}/{args.runs} {s}: retention {res['fact_retention']:.2f} · accuracy "
                f"{res['answer_accuracy']} · with recall {res.get('recall_accuracy')} · prompt {res['prompt_tokens']:,} · llm {res['llm_calls']} · "
                f"{res['research_s']} s[/]"
            )
    out = []
    for s, rs in rows.items():
        accs = [r["answer_accuracy"] for r in rs]
        raccs = [r.get("recall_accuracy") for r in rs]
        founds = [r["recall_found"] for r in rs if r.get("recall_found") is not None]
        out.append(
            {
                "name": s,
                "runs": len(rs),
                "fact_retention": round(sum(r["fact_retention"] for r in rs) / len(rs), 3),
                "answer_accuracy": (round(sum(a or 0 for a in accs) / len(rs), 3)),
                "overflowed_runs": sum(a is None for a in accs),
                "recall_accuracy": round(sum(a or 0 for a in raccs) / len(rs), 3) if args.recall else None,
                "recall_found": round(sum(founds) / len(founds), 3) if founds else None,
                "recall_overflowed_runs": sum(a is None for a in raccs) if args.recall else None,
                "prompt_tokens": int(median(r["prompt_tokens"] for r in rs) or 0),
                "token_ratio_vs_none": round(sum(r["prompt_tokens"] for r in rs) / max(1, sum(base)), 3),
                "iterations": int(median(r["iterations"] for r in rs) or 0),
                "compressions": int(median(r["compressions"] for r in rs) or 0),
                "llm_calls": int(median(r["llm_calls"] for r in rs) or 0),
                "failures": sum(r["failures"] for r in rs),
                "final_context_tokens": int(median(r["final_context_tokens"] for r in rs) or 0),
            }
        )
    wall = time.perf_counter() - t0
    console.print(
        table(
            f"compression · {backend.name} · {backend.model} · {args.runs} run(s) × {args.founders} "
            f"founders · window {args.window:,} · none-unlimited prompt tokens {int(median(base)):,} · "
            f"{wall:.0f} s",
            [
                "strategy",
                "runs",
                "fact retention",
                "answer accuracy",
                "+ recall",
                "recall found",
                "overflowed",
                "prompt tok",
                "÷ none (unlimited)",
                "iterations",
                "compressions",
                "LLM calls",
                "failures",
                "final context tok",
            ],
            [
                [
                    o["name"],
                    o["runs"],
                    o["fact_retention"],
                    o["answer_accuracy"],
                    "-" if o["recall_accuracy"] is None else o["recall_accuracy"],
                    "-" if o["recall_found"] is None else o["recall_found"],
                    o["overflowed_runs"],
                    o["prompt_tokens"],
                    o["token_ratio_vs_none"],
                    o["iterations"],
                    o["compressions"],
                    o["llm_calls"],
                    o["failures"],
                    o["final_context_tokens"],
                ]
                for o in out
            ],
        )
    )
    save(
        args,
        {
            "backend": backend.name,
            "model": backend.model,
            "runs": args.runs,
            "founders": args.founders,
            "window": args.window,
            "recall_arm": args.recall,
            "none_unlimited_prompt_tokens": base,
            "wall_s": round(wall, 1),
            "strategies": out,
            "machine": machine(),
        },
    )


if __name__ == "__main__":
    main()
