"""Prompt ablation on our customer-service domain: which policy sections change what the agent does.

    python benchmarks/ablation.py [--quick] [--trials N] [--json PATH] [--base-url URL --model NAME]

The arms are the full system prompt of ``support_domain/policy.md`` (six Markdown sections: role,
order lookup, refunds, cancellations, address changes, answer format), the prompt with each
section removed, and no system prompt at all. Every arm runs the 24 tasks of
``support_domain/tasks.jsonl`` -- status questions, refunds inside and outside the 30-day window,
a refund over 100 USD that must go to a human, cancellations and address changes before and
after shipping, the answer format -- each on a fresh shop (``support_domain/domain.py``), scored by
code: expected tool calls and arguments, the shop's final state, substrings of the answer.

It is what ``ctxwright ablate --system support_domain/policy.md --tasks support_domain/tasks.jsonl
--empty`` runs (the same ``ctxwright.ablation`` runner, with the backend's defaults), plus a table:
per arm the success rate with its 95% Wilson interval, each check's pass rate, expected calls
matched and the first call's prompt tokens; and per task the arms it passed in.
The embedded model decodes greedily, so one trial per task is all it has to say; on a served
model with sampling, ``--trials`` repeats each task.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from common import add_backend_args, console, machine, save, table
from ctxwright.ablation import Runner, RunRecord, load_tasks, make_arms, run_ablation, split_markdown

HERE = Path(__file__).resolve().parent / "support_domain"
#: --quick: these tasks (one or two per section) and every arm
QUICK = ("status-shipped", "list-by-email", "refund-damaged", "refund-too-old", "cancel-shipped", "address-processing")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_backend_args(p)
    p.add_argument("--quick", action="store_true", help=f"{len(QUICK)} tasks instead of all (a few minutes)")
    p.add_argument("--trials", type=int, default=1, help="runs of each task per arm (default 1)")
    args = p.parse_args()
    options: dict[str, object] = {}
    if args.base_url:
        if not args.model:
            raise SystemExit("--base-url needs --model NAME")
        options = {"base_url": args.base_url, "model": args.model, "api_key_env": args.api_key_env}
    prompt = split_markdown((HERE / "policy.md").read_text(encoding="utf-8"))
    arms = make_arms(prompt, empty=True)
    tasks = load_tasks(HERE / "tasks.jsonl")
    if args.quick:
        tasks = [t for t in tasks if t.id in QUICK]
    start = time.perf_counter()

    def progress(done: int, total: int, r: RunRecord) -> None:
        mark = "pass" if r.success else "fail"
        console.print(f"[dim][{done}/{total}] {r.arm} · {r.task}: {mark} ({r.seconds:.1f} s)[/]", highlight=False)

    with Runner(options) as runner:
        result = run_ablation(runner, arms, tasks, trials=args.trials, on_run=progress)
    wall = time.perf_counter() - start

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.0%}"

    full = result.arms[0].success
    rows = [
        [
            a.arm,
            a.runs,
            f"{a.successes}/{a.runs} ({a.success:.0%})",
            f"{a.low:.0%}–{a.high:.0%}",
            "" if a.arm == "full" else f"{(a.success - full) * 100:+.0f} pt",
            pct(a.calls_ok),
            pct(a.state_ok),
            pct(a.answer_ok),
            pct(a.call_accuracy),
            None if a.prompt_tokens is None else round(a.prompt_tokens),
        ]
        for a in result.arms
    ]
    cols = ["arm", "runs", "success", "95% interval", "vs full", "calls ok", "state ok", "answer ok", "call acc."]
    console.print(
        table(
            f"prompt ablation · {result.backend} {result.model} · {len(tasks)} tasks x {args.trials} trial(s)",
            [*cols, "prompt tokens"],
            rows,
        )
    )
    by_task: dict[str, list[str]] = {}
    for r in result.runs:
        if r.success:
            by_task.setdefault(r.task, []).append(r.arm)
    console.print(
        table(
            "tasks passed, by arm",
            ["task", "arms passed"],
            [[t.id, ", ".join(dict.fromkeys(by_task.get(t.id, []))) or "none"] for t in tasks],
        )
    )
    console.print(f"{len(result.runs)} runs in {wall / 60:.1f} min ({wall / max(1, len(result.runs)):.1f} s per run)")
    data = result.to_dict()
    data.update(
        machine=machine(),
        quick=args.quick,
        wall_s=round(wall, 1),
        prompt="benchmarks/support_domain/policy.md",
        task_file="benchmarks/support_domain/tasks.jsonl",
        sections=prompt.names(),
    )
    save(args, data)


if __name__ == "__main__":
    main()
