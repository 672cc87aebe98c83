"""``ctxwright gate GOLDEN -- COMMAND [ARGS...]``: fail a build that breaks the prompt cache.

Runs COMMAND against a replay of GOLDEN (``replay/``) and judges the requests it sent
(``ci/judge.py``). Exit 0 when every rule holds, 1 with a regression (the verdict on the first
line, then one line each), 2 when the run could not be judged. ``--json`` prints the same as
one JSON object on stdout (the agent's own stdout then goes to stderr, so the JSON stays
parseable); ``--update`` writes the run's trace over GOLDEN -- only a run that replayed all
of it (else GOLDEN is left as it was and the exit is 2), and then says ``UPDATED`` and what it
accepts, never ``FAIL`` with exit 0. Ctrl-C (130) and SIGTERM (143) stop the agent and all it
started, leave GOLDEN as it was, and say so in one line of the gate's own.

``--resume-after N -- COMMAND [--then RESUME_COMMAND]``: resume parity (``ci/resume.py``) --
the agent is stopped after N calls as a user would stop it, then resumed by RESUME_COMMAND
(COMMAND again without ``--then``), whose first request must extend the last one before the
stop. The first ``--then`` after ``--`` splits the two only with ``--resume-after``: without it,
it is a word of the agent's own command (an agent may have a ``--then`` option of its own).
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from ctxwright.cli.replay import add_golden_limits, golden_limits
from ctxwright.core.words import counted
from ctxwright.errors import CtxwrightError

#: Exit status when the run could not be judged (also every error of the gate itself: 1 is
#: reserved for a regression, so a CI step can tell them apart).
UNJUDGED = 2


#: the command's line in ``ctxwright --help``: cli/main.py lists it without building the parser
HELP = "run an agent against a replay of its golden trace; fail on a cache regression"


def add_gate_parser(sub: Any) -> None:
    from ctxwright.cli.audit import add_price_options, add_rule_options

    p = sub.add_parser(
        "gate",
        usage="ctxwright gate [GOLDEN] [options] -- COMMAND [ARGS...] [--then RESUME_COMMAND [ARGS...]]",
        help=HELP,
        description="Replays GOLDEN's model replies to COMMAND (through OPENAI_BASE_URL and ANTHROPIC_BASE_URL) "
        "and judges the requests it sends: prefix byte-identical, append-only, reuse/tokens/cost within "
        "tolerances. Exit 0: pass; 1: a regression; 2: the run could not be judged.",
    )
    p.add_argument(
        "golden",
        nargs="?",
        metavar="GOLDEN",
        help="the golden: a request log or replay trace (JSONL), or a stored session's ID of any kind (from --db)",
    )
    p.add_argument("--proxy-session", metavar="ID", help="alias of GOLDEN for a proxy or framework session's ID")
    p.add_argument("--session", metavar="ID", help="alias of GOLDEN for a run session's ID")
    p.add_argument("--max-reuse-drop", type=_share, default=0.02, metavar="F", help="default 0.02")
    p.add_argument("--max-token-increase", type=_share, default=0.10, metavar="F", help="default 0.10 (10%%)")
    p.add_argument("--max-cost-increase", type=_share, default=0.10, metavar="F", help="default 0.10 (10%%)")
    add_price_options(p)
    add_rule_options(p)  # --max-tool-tokens N, --keep ITEM: the named rules fail the build
    p.add_argument(
        "--on-divergence",
        choices=("stop", "repeat-last"),
        default="stop",
        help="when the agent leaves the recording: answer 400 (stop, default) or the last recorded reply",
    )
    p.add_argument("--timeout", type=_seconds, default=600.0, metavar="S", help="longest run of COMMAND (600 s)")
    p.add_argument(
        "--resume-after",
        type=_calls,
        default=None,
        metavar="N",
        help="resume parity: stop the agent as Ctrl-C would once N calls were answered, run the resume command "
        "(the words after --then in COMMAND, else COMMAND again), and require its first request to extend the "
        "last one before the stop byte for byte",
    )
    p.add_argument("--trace", metavar="PATH", help="also keep the run's trace (JSONL, a golden itself) there")
    p.add_argument("--json", action="store_true", help="print the judgement as JSON")
    p.add_argument(
        "--update",
        action="store_true",
        help="write the run's trace over GOLDEN (a file), when the run replayed all of it",
    )
    add_golden_limits(p)
    p.set_defaults(func=cmd_gate)


#: Set when SIGTERM arrived: the ``KeyboardInterrupt`` raised for it is then said as SIGTERM's.
_TERMINATED = threading.Event()


def _on_sigterm(_signum: int, _frame: object) -> None:
    """SIGTERM, raised where the gate is as Ctrl-C's ``KeyboardInterrupt`` is: every ``finally``
    on the way out runs (the agent's supervisor is stopped and waited for, the replay closed, a
    half-written ``--update`` removed) instead of the process just ending. (A plain
    ``KeyboardInterrupt``, not a subclass: every exception class lives in ``errors.py``, and
    one derived from ``Exception`` would be caught on the way out.)"""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the stop under way is bounded
    _TERMINATED.set()
    raise KeyboardInterrupt


def cmd_gate(args: argparse.Namespace) -> int:
    """The gate's exit status; every failure of its own is one line and exit 2 (never 1).
    Ctrl-C and SIGTERM end here too, with the gate's own line (not ``run``'s advice)."""
    main_thread = threading.current_thread() is threading.main_thread()
    _TERMINATED.clear()  # a gate run before this one in the same process (a test) was another
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if main_thread else None
    try:
        return _gate(args)
    except KeyboardInterrupt:
        terminated = _TERMINATED.is_set()
        how = "stopped by SIGTERM" if terminated else "interrupted"
        kept = f"; {args.golden} is unchanged" if args.update and args.golden else ""
        print(
            f"ctxwright gate: {how} before a verdict: the agent and everything it started were ended{kept}",
            file=sys.stderr,
        )
        return 128 + signal.SIGTERM if terminated else 128 + signal.SIGINT
    except Exception as exc:
        if getattr(args, "debug", False):
            raise
        from ctxwright.cli.common import explain

        print(f"ctxwright gate: {explain(exc)}", file=sys.stderr)
        return UNJUDGED
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _gate(args: argparse.Namespace) -> int:
    from ctxwright.ci.gate import GateResult, replacing, run_gate
    from ctxwright.ci.judge import Tolerances
    from ctxwright.ci.resume import split_then
    from ctxwright.cli.audit import pricing_from_args
    from ctxwright.replay.golden import load_golden

    command = list(getattr(args, "agent_command", None) or [])  # the words after -- (cli/main.py)
    if not command:
        raise CtxwrightError("no command to run: ctxwright gate GOLDEN -- COMMAND [ARGS...]")
    _golden_source(args)
    if args.update and not args.golden:
        raise CtxwrightError(
            "--update writes a file: give GOLDEN as a file (ctxwright export ID --requests > golden.jsonl)"
        )
    store = args.db if getattr(args, "db", None) else None
    golden = load_golden(
        args.golden, proxy_session=args.proxy_session, session=args.session, store=store, **golden_limits(args)
    )
    tolerances = Tolerances(
        args.max_reuse_drop, args.max_token_increase, args.max_cost_increase, args.max_tool_tokens, tuple(args.keep)
    )
    pricing = pricing_from_args(args)
    stdout = sys.stderr.buffer if args.json else None

    then = None
    if args.resume_after is not None:  # else a --then is a word of the agent's own, as it always was
        command, then = split_then(command)
    if then is not None and (not command or not then):
        raise CtxwrightError(
            "give a command on each side of --then: ctxwright gate GOLDEN --resume-after N -- COMMAND --then "
            "RESUME_COMMAND"
        )

    def run(trace: Path | None) -> GateResult:
        return run_gate(
            golden,
            command,
            tolerances=tolerances,
            pricing=pricing,
            on_divergence=args.on_divergence,
            timeout=args.timeout,
            trace=trace,
            stdout=stdout,
            resume_after=args.resume_after,
            resume=then,
        )

    if not args.update:
        result = run(Path(args.trace) if args.trace else None)
        _print(result, args.json)
        return result.exit_code
    target = Path(args.golden)
    with replacing(target) as tmp:  # the golden is replaced only when the block ends without error
        result = run(tmp)
        incomplete = _incomplete(result)
        if incomplete is not None:
            _print(result, args.json)
            raise CtxwrightError(
                f"not updated, {target} is unchanged: the run did not replay the whole recording ({incomplete}); "
                "fix the run, or record a new golden through `ctxwright proxy`"
            )
    _print_updated(result, target, args.json)
    return 0


def _incomplete(result: Any) -> str | None:
    """Why the run cannot replace the golden (``None``: it can): it was not judged in full --
    the agent failed or was stopped, it made fewer calls than the golden (an agent that exits 0
    after none would write an empty golden), or it left the recording."""
    j = result.judgement
    if j.unjudged:
        return str(j.unjudged[0])
    if result.divergences:
        return f"it left the recording: {result.divergences[0]}"
    if result.status != 0:
        return "the agent was stopped" if result.status is None else f"the agent exited with status {result.status}"
    return None


def _print_updated(result: Any, target: Path, as_json: bool) -> None:
    """What ``--update`` prints when it replaced the golden: ``UPDATED`` and the changes it
    accepts (the regressions against the old golden), never ``FAIL`` -- the exit is 0."""
    j = result.judgement
    accepted = [r.line for r in j.regressions]
    what = f"{counted(len(accepted), 'change')} accepted against the old golden" if accepted else "no change"
    headline = f"UPDATED: {target} now holds this run ({counted(j.run.calls, 'call')}); {what}"
    if as_json:
        out = {**result.to_json(), "verdict": "updated", "exit_code": 0, "headline": headline, "updated": str(target)}
        print(json.dumps(out, ensure_ascii=False))
    else:
        print(headline)
        for line in accepted:
            print(f"  {line}")
    sys.stdout.flush()


def _golden_source(args: argparse.Namespace) -> None:
    """GOLDEN as a file, or a session ID of any kind (``cli/sessions.py``), set on ``args`` as
    ``golden`` (a file), ``session`` (a run's) or ``proxy_session`` (one recorded from the wire)."""
    from ctxwright.cli.sessions import SessionRef, named

    ref = named(
        args,
        args.golden,
        session=args.session,
        proxy_session=args.proxy_session,
        files=True,
        usage="ctxwright gate GOLDEN -- COMMAND (a trace FILE or a session ID)",
    )
    if ref is None:
        raise CtxwrightError("give one golden: a trace FILE or a session ID (ctxwright gate GOLDEN -- COMMAND)")
    args.golden, args.session, args.proxy_session = None, None, None
    if not isinstance(ref, SessionRef):
        args.golden = ref
    elif ref.from_the_wire:
        args.proxy_session = ref.id
    else:
        args.session = ref.id


def _print(result: Any, as_json: bool) -> None:
    if as_json:
        print(json.dumps(result.to_json(), ensure_ascii=False))
    else:
        for line in result.lines():
            print(line)
    sys.stdout.flush()


def _share(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; give a share such as 0.05") from None
    if not (math.isfinite(v) and v >= 0):
        raise argparse.ArgumentTypeError(f"{text} is not a share of 0 or more; give e.g. 0.05")
    return v


def _calls(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of calls") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a number of calls of 1 or more")
    return v


def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"{text} is not a number of seconds above 0")
    return v
