"""Experiments 2-7 and 2-8: does a status bar computed by code lift a model's answers?

Generated tasks (fixed seeds), three kinds, each a log the model must read and a question:

* ``counting`` -- cage records ("cage 17: small black cat"); how many small black cats?
* ``state_tracking`` -- item moves ("the red box moved from the kitchen to the garage");
  where is item X now?
* ``limit_rule`` -- a log of calls to merchants' departments with a limit of 3 per
  (merchant, department); may I call M's department D again?

Each task is asked in four arms, identical except for the last message:

* ``no_status_bar`` -- the log and the question only;
* ``status_bar`` -- plus ``<agent_status>`` with the exact answer-bearing state, computed
  by code (triple counts / current locations / calls per merchant+department with limit);
* ``uncovered`` -- a status bar that does not cover the question's dimension (pair counts
  while the question asks a triple; moves per item; calls per merchant);
* ``noisy`` -- the covering status bar with 10% of its values wrong.

Answers are constrained to a JSON schema (an integer, one of the locations, yes/no) and
scored exactly. The log comes first and the status last, so on one backend object the
four arms of a task share the prefilled log (llama.cpp reuses it); ``--questions-per-log``
(default 5) tasks share one log too, so 30 tasks cost 6 log prefills, not 30.

    python benchmarks/context_distillation.py [--quick] [--tasks 30] [--lengths 1000,2000,6000]
                                              [--questions-per-log 5]
                                              [--json PATH] [--base-url URL --model NAME]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from dataclasses import dataclass

from common import add_backend_args, console, machine, make_backend, median, save, table
from ctxwright.core.messages import Message
from ctxwright.core.request import ChatRequest
from ctxwright.status.bar import OPERATING_MANUAL, StatusBar

ARMS = ["no_status_bar", "status_bar", "uncovered", "noisy"]
KINDS = ["counting", "state_tracking", "limit_rule"]
SYSTEM = "You answer questions about a log. Read the log carefully and reply with JSON only.\n\n" + OPERATING_MANUAL
SIZES, COLORS, ANIMALS = ["small", "large"], ["black", "white", "brown"], ["cat", "dog", "rabbit"]
ITEMS = ["red box", "blue crate", "green bag", "yellow case", "grey tin", "white jar"]
PLACES = ["kitchen", "garage", "attic", "cellar", "hallway", "office"]
MERCHANTS = [
    "Xfinity",
    "Comcast",
    "Verizon",
    "Spectrum",
    "Cox",
    "Optimum",
    "Frontier",
    "Windstream",
    "Mediacom",
    "Altice",
    "Sparklight",
    "Ziply",
    "Hughes",
    "Viasat",
    "Starry",
    "Rise",
]
DEPTS = ["billing", "support"]
LIMIT = 3


@dataclass
class Task:
    kind: str
    log: str
    question: str
    answer: str | int
    schema: dict
    status: dict[str, str]  # covering
    uncovered: dict[str, str]  # not covering
    noisy: dict[str, str]  # covering, 10% wrong


def _noisy(values: dict[str, int | str], rng: random.Random, choices: list | None = None) -> dict[str, str]:
    """Corrupt 10% of the entries (at least one), numbers by ±1..3, names by another choice."""
    keys = list(values)
    bad = set(rng.sample(keys, max(1, round(len(keys) * 0.1))))
    out = {}
    for k, v in values.items():
        if k in bad:
            v = (
                max(0, v + rng.choice([-3, -2, -1, 1, 2, 3]))
                if isinstance(v, int)
                else rng.choice([c for c in (choices or []) if c != v])
            )
        out[k] = str(v)
    return out


def counting(rng: random.Random, n: int, q: int) -> list[Task]:
    recs = [(rng.choice(SIZES), rng.choice(COLORS), rng.choice(ANIMALS)) for _ in range(n)]
    log = "\n".join(f"cage {i + 1}: {s} {c} {a}" for i, (s, c, a) in enumerate(recs))
    triples: dict[str, int] = {}
    pairs: dict[str, int] = {}
    for s, c, a in recs:
        triples[f"count.{s}_{c}_{a}"] = triples.get(f"count.{s}_{c}_{a}", 0) + 1
        pairs[f"count.{c}_{a}"] = pairs.get(f"count.{c}_{a}", 0) + 1
    present = sorted(set(recs))
    tasks = []
    for qt in _pick(rng, present, q):
        ans = sum(1 for r in recs if r == qt)
        tasks.append(
            Task(
                "counting",
                log,
                f'How many {qt[0]} {qt[1]} {qt[2]}s are in the cages? Reply {{"answer": N}}.',
                ans,
                {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]},
                {k: str(v) for k, v in triples.items()},
                {k: str(v) for k, v in pairs.items()},
                _noisy(triples, rng),
            )
        )
    return tasks


def state_tracking(rng: random.Random, n: int, q: int) -> list[Task]:
    where = {it: rng.choice(PLACES) for it in ITEMS}
    moves = {it: 0 for it in ITEMS}
    lines = [f"start: the {it} is in the {p}" for it, p in where.items()]
    for i in range(n):
        it = rng.choice(ITEMS)
        dst = rng.choice([p for p in PLACES if p != where[it]])
        lines.append(f"step {i + 1}: the {it} moved from the {where[it]} to the {dst}")
        where[it], moves[it] = dst, moves[it] + 1
    loc = {f"location.{it.replace(' ', '_')}": p for it, p in where.items()}
    return [
        Task(
            "state_tracking",
            "\n".join(lines),
            f'Where is the {qi} now? Reply {{"answer": PLACE}}.',
            where[qi],
            {"type": "object", "properties": {"answer": {"enum": PLACES}}, "required": ["answer"]},
            loc,
            {f"moves.{it.replace(' ', '_')}": str(m) for it, m in moves.items()},
            _noisy(loc, rng, PLACES),
        )
        for qi in _pick(rng, ITEMS, q)
    ]


def limit_rule(rng: random.Random, n: int, q: int) -> list[Task]:
    """Each asked (merchant, department) gets 1-4 calls (so "yes" and "no" are balanced); the
    other calls of the log go to pairs nobody asks about."""
    pairs = [(m, d) for m in MERCHANTS for d in DEPTS]
    asked = _pick(rng, pairs, q)
    ks = {pd: rng.choice([1, 2, 3, 4]) for pd in asked}
    others = [pd for pd in pairs if pd not in ks]
    calls = [pd for pd, k in ks.items() for _ in range(k)]
    calls += [rng.choice(others) for _ in range(max(0, n - len(calls)))]
    rng.shuffle(calls)
    log = "\n".join(f"call {i + 1}: phoned {m} {d}, nobody answered" for i, (m, d) in enumerate(calls))
    per: dict[str, int] = {f"calls.{m}_{d}": 0 for m, d in pairs}
    tot: dict[str, int] = {f"calls.{m}": 0 for m in MERCHANTS}
    for m, d in calls:
        per[f"calls.{m}_{d}"] += 1
        tot[f"calls.{m}"] += 1

    def fmt(v):
        return f"{v}/{LIMIT} limit reached" if v >= LIMIT else f"{v}/{LIMIT}"

    tasks = []
    for qm, qd in asked:
        noisy_counts = _noisy(per, rng)
        tasks.append(
            Task(
                "limit_rule",
                log,
                f"The limit is {LIMIT} calls per merchant and department. May I call {qm} {qd} again? "
                'Reply {"answer": "yes"} or {"answer": "no"}.',
                "yes" if ks[(qm, qd)] < LIMIT else "no",
                {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}}, "required": ["answer"]},
                {k2: fmt(v) for k2, v in per.items()},
                {k2: str(v) for k2, v in tot.items()},
                {k2: fmt(int(v)) for k2, v in noisy_counts.items()},
            )
        )
    return tasks


def _pick(rng: random.Random, pool: list, q: int) -> list:
    """``q`` questions over one log: distinct while the pool lasts, then repeats."""
    out = rng.sample(pool, min(q, len(pool)))
    return out + [rng.choice(pool) for _ in range(q - len(out))]


MAKERS = {"counting": counting, "state_tracking": state_tracking, "limit_rule": limit_rule}


def make_tasks(kind: str, seed: int, target_tokens: int, count, questions: int = 1) -> list[Task]:
    """One log of about ``target_tokens`` and ``questions`` tasks over it.

    Several questions share a log so that the log is prefilled once for all of them (and
    all four arms): prefill, not generation, is what a long grid costs on a small CPU.
    The log grows until it is within 10% of the target (same seed: same task family)."""
    n = max(4, target_tokens // 12)
    for _ in range(12):
        tasks = MAKERS[kind](random.Random(seed), n, questions)
        size = count(tasks[0].log)
        if abs(size - target_tokens) <= target_tokens * 0.1:
            break
        n = max(4, int(n * target_tokens / max(size, 1)))
    return tasks


def make_task(kind: str, seed: int, target_tokens: int, count) -> Task:
    return make_tasks(kind, seed, target_tokens, count, 1)[0]


def ask(backend, task: Task, arm: str) -> dict:
    msgs = [
        Message(role="system", content=SYSTEM),
        Message(role="user", content="Log:\n" + task.log),
        Message(role="user", content=task.question),
    ]
    status = {"status_bar": task.status, "uncovered": task.uncovered, "noisy": task.noisy}.get(arm)
    if status is not None:
        msgs.append(Message(role="user", content=StatusBar.render(status)))
    req = ChatRequest(
        messages=tuple(msgs),
        max_tokens=24,
        temperature=0.0,
        extra={"response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": task.schema}}},
    )
    t0 = time.perf_counter()
    c = backend.complete(req)
    latency = (time.perf_counter() - t0) * 1000
    try:
        got = json.loads(c.message.content or "{}").get("answer")
    except (json.JSONDecodeError, AttributeError):
        got = None
    if isinstance(task.answer, int):
        try:
            got = int(got) if got is not None else None
        except (TypeError, ValueError):
            got = None
    return {
        "correct": got == task.answer,
        "prompt_tokens": c.usage.prompt_tokens,
        "output_tokens": c.usage.completion_tokens,
        "latency_ms": latency,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_backend_args(p)
    p.add_argument("--tasks", type=int, default=30)
    p.add_argument("--lengths", default=None, help="comma-separated context sizes in tokens")
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument(
        "--questions-per-log",
        type=int,
        default=5,
        help="tasks that share one generated log (prefilled once); default 5",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="counting only, one length (1,000 tokens), 10 tasks over 2 logs: under two minutes",
    )
    args = p.parse_args()
    backend = make_backend(args)

    def count(t):
        return backend.count_tokens(t) or len(t) // 4

    lengths = [
        int(x)
        for x in (
            args.lengths or ("1000" if args.quick else ("1000,2000,6000" if not args.base_url else "2000,8000,32000"))
        ).split(",")
    ]
    n_tasks = 10 if args.quick else args.tasks
    kinds = ["counting"] if args.quick else [k for k in args.kinds.split(",") if k]
    per_log = max(1, args.questions_per_log)
    t_start = time.perf_counter()
    cells = []
    for kind in kinds:
        for length in lengths:
            res: dict[str, list[dict]] = {a: [] for a in ARMS}
            ctx_tokens = []
            for g in range(0, n_tasks, per_log):
                for task in make_tasks(kind, 1000 * length + g, length, count, min(per_log, n_tasks - g)):
                    ctx_tokens.append(count(task.log))
                    for arm in ARMS:
                        res[arm].append(ask(backend, task, arm))
            for arm in ARMS:
                rs = res[arm]
                cells.append(
                    {
                        "task": kind,
                        "context_tokens": int(statistics.median(ctx_tokens)),
                        "arm": arm,
                        "n": len(rs),
                        "accuracy": round(sum(r["correct"] for r in rs) / len(rs), 3),
                        "median_prompt_tokens": median(r["prompt_tokens"] for r in rs),
                        "median_output_tokens": median(r["output_tokens"] for r in rs),
                        "median_latency_ms": median(r["latency_ms"] for r in rs),
                    }
                )
            acc = {c["arm"]: c["accuracy"] for c in cells[-4:]}
            console.print(f"[dim]{kind} @ ~{length} tokens: " + " · ".join(f"{a} {acc[a]:.0%}" for a in ARMS) + "[/]")
    wall = time.perf_counter() - t_start
    console.print(
        table(
            f"context_distillation · {backend.name} · {backend.model} · {n_tasks} tasks per cell "
            f"({per_log} per log) · {wall:.0f} s",
            ["task", "context tok", "arm", "n", "accuracy", "median prompt tok", "median out tok", "median latency ms"],
            [
                [
                    c["task"],
                    c["context_tokens"],
                    c["arm"],
                    c["n"],
                    c["accuracy"],
                    c["median_prompt_tokens"],
                    c["median_output_tokens"],
                    c["median_latency_ms"],
                ]
                for c in cells
            ],
        )
    )
    save(
        args,
        {
            "backend": backend.name,
            "model": backend.model,
            "tasks_per_cell": n_tasks,
            "questions_per_log": per_log,
            "wall_s": round(wall, 1),
            "cells": cells,
            "machine": machine(),
        },
    )


if __name__ == "__main__":
    main()
