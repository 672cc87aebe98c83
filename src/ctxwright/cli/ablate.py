"""``ctxwright ablate``: which sections of a system prompt change what the agent does.

``ctxwright ablate --system PROMPT.md --tasks TASKS.jsonl [--trials N] [run options]`` runs
the agent on every task once per arm -- the full prompt, then the prompt with one section
removed -- scores every run by code and prints per arm the success rate with its 95% Wilson
interval, each check's pass rate and the prompt tokens (``ablation/`` has the mechanism,
``docs/ablation.md`` the file format).

Why the run options: the ablation measures the agent ``ctxwright run`` would be with the same
flags, so it takes exactly those (one declaration, ``recipe/``): ``--backend``, ``--base-url``,
``--model``, ``--max-tool-rounds``..., ``--tool`` for tools every task gets. Only what is the
ablation's own is declared here.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ctxwright.errors import AblationInputError

__all__ = ["add_ablate_parser", "cmd_ablate"]

#: a system prompt file larger than this is refused (a prompt, not a corpus)
MAX_PROMPT_BYTES = 1024 * 1024


#: the command's line in ``ctxwright --help``: cli/main.py lists it without building the parser
HELP = "run tasks once per arm of a system prompt (full, and each section removed), scored by code"


def add_ablate_parser(sub: Any) -> None:
    """Register ``ablate`` on the ``ctxwright`` subcommand parser."""
    from ctxwright.recipe import add_arguments

    ab = sub.add_parser(
        "ablate",
        help=HELP,
        description="Prompt ablation: the full system prompt, then one arm per section removed (Markdown "
        "headings, or a SystemPromptBuilder's sections), each run on every task of a JSONL file and scored by "
        "code (expected tool calls and arguments, final state, answer). Prints success per arm with its 95% "
        "interval. Takes every `ctxwright run` option (backend, model, limits).",
    )
    add_arguments(ab)  # --system, --tool, --backend, --base-url, --model...: as `ctxwright run`
    own = ab.add_argument_group("ablation")
    own.add_argument(
        "--tasks", required=True, metavar="FILE", help="JSONL, one task per line (docs/ablation.md: the format)"
    )
    own.add_argument(
        "--builder",
        metavar="MODULE:ATTR",
        help="take the prompt and its sections from a SystemPromptBuilder (or a function returning one) "
        "instead of --system's Markdown headings",
    )
    own.add_argument("--trials", type=int, default=1, metavar="N", help="runs of each task per arm (default 1)")
    own.add_argument("--limit", type=int, metavar="N", help="only the first N tasks of the file")
    own.add_argument(
        "--only",
        action="append",
        metavar="SECTION",
        help="remove only this section (repeatable; default: one arm per section)",
    )
    own.add_argument("--empty", action="store_true", help="add an arm with no system prompt at all")
    own.add_argument("--list", action="store_true", help="print the sections and arms, run nothing")
    own.add_argument(
        "--json",
        metavar="PATH",
        help="also write every run and arm summary as JSON here, as the runs go (a stopped ablation keeps what it did)",
    )
    own.add_argument(
        "--resume",
        action="store_true",
        help="continue the stopped ablation --json PATH holds: its runs are kept, only the missing ones are made",
    )
    own.add_argument("--quiet", action="store_true", help="no line per run on stderr, only the table")
    ab.set_defaults(func=cmd_ablate)


def _prompt(args: argparse.Namespace) -> Any:
    """The sectioned prompt from ``--system``/``--system-text`` (Markdown) or ``--builder``."""
    from ctxwright.ablation.sections import split_builder, split_markdown

    literal = getattr(args, "system_text", None)
    given = [x for x in (args.system, literal, args.builder) if x is not None]
    if len(given) != 1:
        raise AblationInputError(
            "give the prompt to ablate once: --system PROMPT.md (sections at its Markdown headings), "
            "--system-text TEXT, or --builder MODULE:ATTR (a SystemPromptBuilder)"
        )
    if args.builder is not None:
        return split_builder(_builder(args.builder))
    if args.system is not None:
        path = Path(args.system).expanduser()
        if path.is_file() and path.stat().st_size > MAX_PROMPT_BYTES:
            raise AblationInputError(
                f"--system {args.system}: {path.stat().st_size:,} bytes, more than {MAX_PROMPT_BYTES:,}; "
                "a system prompt, not a corpus"
            )
        from ctxwright.cli.common import system_text as _system_text

        return split_markdown(_system_text(args.system), where=f"--system {args.system}")
    return split_markdown(str(literal), where="--system-text")


def _builder(spec: str) -> Any:
    """The :class:`SystemPromptBuilder` named ``module:attr`` (or made by a function there)."""
    from ctxwright.ablation.env import load_object
    from ctxwright.core.sections import SystemPromptBuilder

    obj = load_object(spec, base=Path.cwd(), where="--builder")
    if not isinstance(obj, SystemPromptBuilder) and callable(obj):
        obj = obj()
    if not isinstance(obj, SystemPromptBuilder):
        raise AblationInputError(f"--builder {spec}: a {type(obj).__name__}, not a SystemPromptBuilder")
    return obj


def cmd_ablate(args: argparse.Namespace) -> int:
    from ctxwright.ablation.arms import make_arms
    from ctxwright.ablation.results import Checkpoint, read_results, stopped_runs
    from ctxwright.ablation.run import MAX_TRIALS, Runner, make_plan, run_ablation
    from ctxwright.ablation.tasks import load_tasks
    from ctxwright.cli.common import approver, console, err_console
    from ctxwright.recipe import given_from_args
    from ctxwright.tools.imported import import_tool

    if not 1 <= args.trials <= MAX_TRIALS:
        raise AblationInputError(f"--trials {args.trials}: give 1 to {MAX_TRIALS}")
    if args.limit is not None and args.limit < 1:
        raise AblationInputError(f"--limit {args.limit}: give at least 1")
    if args.resume and args.json is None:
        raise AblationInputError("--resume continues the ablation a --json file holds: give --json PATH too")
    if args.json is not None:
        out = Path(args.json).expanduser()
        if not out.parent.is_dir() or out.is_dir():
            raise AblationInputError(f"--json {args.json}: give a file in an existing folder, e.g. ablation.json")
    prompt = _prompt(args)
    arms = make_arms(prompt, args.only or (), empty=args.empty)
    tasks = load_tasks(args.tasks, limit=args.limit)
    if args.list:
        console.print(f"{len(prompt.sections)} section(s) ({prompt.source}), {len(tasks)} task(s)")
        for a in arms:
            console.print(Text(f"  {a.name}  ({len(a.system):,} characters)"))
        return 0
    if args.json is not None and not args.resume:
        stopped = stopped_runs(args.json)
        if stopped is not None:
            raise AblationInputError(
                f"--json {args.json} holds an ablation stopped after {stopped[0]:,} of {stopped[1]:,} runs: add "
                "--resume to continue it, or give another file"
            )
    extra = [import_tool(spec) for spec in args.tool] if args.tool else []
    options = given_from_args(args, approver=approver)
    total = len(arms) * len(tasks) * args.trials
    clock = _Clock()

    def progress(done: int, total: int, rec: Any) -> None:
        left = clock.left(total - done)
        if args.quiet:
            return
        mark = "pass" if rec.success else "FAIL"
        why = "" if rec.success or not rec.problems else f" · {rec.problems[0]}"
        eta = f" · about {duration(left)} left" if done < total else ""
        err_console.print(
            Text(f"[{done}/{total}] {rec.arm} · {rec.task} #{rec.trial}: {mark} ({rec.seconds:.1f} s){eta}{why}"),
            style="dim",
            soft_wrap=True,
        )

    checkpoint = Checkpoint(args.json) if args.json is not None else None
    with Runner(options, tools=extra) as runner:
        b = runner.backend
        resume = None
        if args.resume:
            plan = make_plan(arms, tasks, args.trials, b.name, str(b.model))
            resume = read_results(args.json, plan)
        kept = len(resume.runs) if resume is not None else 0
        console.print(
            Text(
                f"ablation: {len(arms)} arms x {len(tasks)} tasks x {args.trials} trial(s) = {total} runs · "
                f"backend {b.name} · model {b.model}" + (f" · {kept} run(s) kept from {args.json}" if kept else ""),
                style="dim",
            ),
            soft_wrap=True,
        )
        clock.start()
        try:
            result = run_ablation(
                runner, arms, tasks, trials=args.trials, on_run=progress, resume=resume, on_progress=checkpoint
            )
        except KeyboardInterrupt:
            if checkpoint is None:
                err_console.print(Text("interrupted; no --json file was given, so nothing was kept", style="red"))
                return 130
            checkpoint.flush()
            err_console.print(
                Text(
                    f"interrupted; the runs so far are in {args.json}: continue with the same command and --resume",
                    style="red",
                ),
                soft_wrap=True,
            )
            return 130
    print_table(result, console)
    if checkpoint is not None:
        checkpoint(lambda: result, True)
        console.print(Text(f"wrote {args.json}", style="dim"))
    return 0


class _Clock:
    """The time the runs left will take, at the pace of the runs this command has made so far
    (a resumed ablation's kept runs took no time here)."""

    def __init__(self) -> None:
        self.start()

    def start(self) -> None:
        self._t0 = time.monotonic()
        self._made = 0

    def left(self, runs_left: int) -> float:
        """Called as each run ends: the estimate for the ``runs_left`` after it."""
        self._made += 1
        return (time.monotonic() - self._t0) / self._made * runs_left


def duration(seconds: float) -> str:
    """``seconds`` as a person reads a wait: ``40 s``, ``12 min``, ``4 h 05 min``."""
    s = round(seconds)
    if s < 90:
        return f"{s} s"
    m = round(seconds / 60)
    if m < 60:
        return f"{m} min"
    return f"{m // 60} h {m % 60:02d} min"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def print_table(result: Any, console: Console) -> None:
    """The per-arm table: success with its interval and the change from ``full``, each
    check's pass rate, expected calls matched, mean prompt tokens of the first call."""
    t = Table(title=f"prompt ablation: {result.tasks} tasks x {result.trials} trial(s) per arm")
    for c in ("arm", "runs", "success", "95% interval", "vs full", "calls ok", "state ok", "answer ok"):
        t.add_column(c, justify="left" if c == "arm" else "right")
    t.add_column("call acc.", justify="right")
    t.add_column("prompt tok", justify="right")
    base = result.arms[0].success if result.arms else 0.0
    for a in result.arms:
        delta = "" if a.arm == "full" else f"{(a.success - base) * 100:+.0f} pt"
        t.add_row(
            Text(a.arm),
            str(a.runs),
            f"{a.successes}/{a.runs} {a.success:.0%}",
            f"{a.low:.0%}–{a.high:.0%}",
            delta,
            _pct(a.calls_ok),
            _pct(a.state_ok),
            _pct(a.answer_ok),
            _pct(a.call_accuracy),
            "-" if a.prompt_tokens is None else f"{a.prompt_tokens:,.0f}",
        )
    console.print(t)
    errors = sum(a.backend_errors for a in result.arms)
    if errors:
        console.print(Text(f"{errors} run(s) ended on a model error (scored as failures)", style="yellow"))
    if result.trials > 1 and result.backend == "embedded":
        console.print(
            Text("note: the embedded model decodes greedily, so its trials of one task repeat each other", style="dim")
        )
    sys.stdout.flush()
