"""``ctxwright audit PATH`` on the logs agents keep, and ``audit --claude`` / ``audit --codex``.

Why: most people with a cache bill never ran their agent through a proxy, but Claude Code and
Codex have logged every call's usage all along (``agent_logs/``). Read offline, those logs say
per session what was spent, what was lost because the cache reads fell, and why
(``agent_logs/causes.py``) -- sessions ranked by what they lost, ``--by project`` or ``--by day``
to see where, ``--json`` for scripts.

Streaming: the calls are judged as read and never held; the misses wait in a temporary file for
``--json``. Problems (a bad line, an over-long line, a file that is no agent's log) are one line
each on stderr as met, entry types passed over one line per type at the end; nothing else is
lost, and the exit status is 0 as long as one call was read.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import IO, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ctxwright.agent_logs import LogAudit, find_logs, read_logs
from ctxwright.agent_logs.analysis import GROUPS, JudgedCall, Tally
from ctxwright.agent_logs.causes import CAUSES, MISSES
from ctxwright.agent_logs.find import claude_roots, codex_root, detect
from ctxwright.agent_logs.reader import LogFile
from ctxwright.agent_logs.records import CLAUDE_CODE, CODEX, LogProblem, Skipped
from ctxwright.agent_logs.timestamps import clock, duration
from ctxwright.cache.prices import Pricing
from ctxwright.core.words import counted
from ctxwright.errors import CtxwrightError, LogUnreadable

_MAX_PROBLEMS_SHOWN = 100
#: sessions (or groups) shown in the table; --json lists them all
_ROWS = 25


def add_agent_log_options(parser: argparse.ArgumentParser) -> None:
    """``--claude``, ``--codex`` and ``--by`` on ``ctxwright audit``."""
    parser.add_argument(
        "--claude",
        action="store_true",
        help="audit Claude Code's own logs (~/.claude/projects; CLAUDE_CONFIG_DIR names others)",
    )
    parser.add_argument(
        "--codex", action="store_true", help="audit Codex's own logs (~/.codex/sessions; CODEX_HOME names another)"
    )
    parser.add_argument(
        "--by",
        choices=GROUPS,
        default=None,
        help="agent logs: rank sessions (default), projects or days (UTC) by what they lost to cache misses",
    )


def agent_log_roots(args: argparse.Namespace) -> list[tuple[Path, str | None]] | None:
    """What to read as agent logs, or ``None`` when the command is the request-log audit: the
    ``--claude`` / ``--codex`` folders, a folder given as PATH, or a file whose first lines are
    Claude Code's or Codex's."""
    given: str | None = args.file
    if args.claude or args.codex:
        if given is not None:
            raise CtxwrightError("give PATH or --claude/--codex, not both: ctxwright audit --claude")
        roots: list[tuple[Path, str | None]] = []
        if args.claude:
            roots += [(r, CLAUDE_CODE) for r in claude_roots()]
        if args.codex:
            roots.append((codex_root(), CODEX))
        return roots
    if given is not None and given != "-" and not getattr(args, "proxy_session", None):
        path = Path(given).expanduser()
        try:
            if path.is_dir():
                return [(path, None)]
            if path.is_file() and detect(path) is not None:
                return [(path, None)]
        except (OSError, LogUnreadable):
            return None
    if args.by is not None:
        raise CtxwrightError(
            "--by ranks agent logs: give a folder of them, a Claude Code or Codex log, --claude or --codex"
        )
    return None


def run_agent_log_audit(
    roots: list[tuple[Path, str | None]],
    *,
    by: str | None,
    as_json: bool,
    pricing: Pricing,
    console: Console,
    max_record: int,
) -> int:
    """Find, read, judge and print; 0 when at least one call was read, else 2."""
    files: list[LogFile] = []
    problems = _Problems()
    for root, agent in roots:
        found, bad = find_logs(root, agent)
        files += found
        for p in bad:
            problems.report(p)
    skipped = Skipped()
    with tempfile.TemporaryFile("w+", encoding="utf-8") as spool:

        def keep(jc: JudgedCall) -> None:
            if jc.judged.cause != "hit":
                spool.write(json.dumps(jc.to_json()) + "\n")

        audit = LogAudit(pricing, by=by or "session", on_call=keep if as_json else None, on_problem=problems.report)
        audit.feed(read_logs(files, skipped=skipped, cap=max_record))
        problems.finish()
        for kind, n in skipped.counts.items():
            file, line = skipped.first[kind]
            print(f"{file}:{line}: {counted(n, 'line')} of {kind} passed over (no usage in them)", file=sys.stderr)
        if not files and len(roots) == 1 and roots[0][0].is_dir() and not problems.count:
            print(
                f"ctxwright audit: {roots[0][0]} is a folder with no Claude Code or Codex log (*.jsonl) in it: give a "
                "request log file, or a folder of agent logs",
                file=sys.stderr,
            )
            return 2
        if not audit.total.calls:
            where = ", ".join(str(r) for r, _ in roots)
            print(
                f"ctxwright audit: no call with usage found in {where} ({counted(len(files), 'log file')}"
                + (f", {counted(problems.count, 'problem')} above)" if problems.count else ")"),
                file=sys.stderr,
            )
            return 2
        if as_json:
            spool.seek(0)
            _json(console.file, audit, len(files), problems.count, skipped, spool)
        else:
            _table(console, audit, len(files), problems.count)
    return 0


class _Problems:
    def __init__(self) -> None:
        self.count = 0

    def report(self, p: LogProblem) -> None:
        self.count += 1
        if self.count <= _MAX_PROBLEMS_SHOWN:
            print(_safe(str(p)), file=sys.stderr)

    def finish(self) -> None:
        if self.count > _MAX_PROBLEMS_SHOWN:
            print(f"... and {self.count - _MAX_PROBLEMS_SHOWN:,} more problems", file=sys.stderr)


def _safe(s: str) -> str:
    return s.encode("utf-8", "replace").decode("utf-8")


def _causes(t: Tally) -> dict[str, Any]:
    return {
        c: {"calls": t.causes[c], "lost_usd": round(t.lost_by_cause.get(c, 0.0), 6)} for c in CAUSES if c in t.causes
    }


def _json(out: IO[str], audit: LogAudit, files: int, problems: int, skipped: Skipped, spool: IO[str]) -> None:
    """One document: the totals, the causes, the ranked rows, then every call whose reads fell."""
    head = {
        "files": files,
        "problems": problems,
        "passed_over": dict(skipped.counts),
        "by": audit.by,
        "total": audit.total.to_json(),
        "causes": _causes(audit.total),
        "sessions": [t.to_json() for t in sorted(audit.sessions.values(), key=lambda t: (-t.lost, -t.spent, t.key))],
    }
    if audit.by != "session":
        head["groups"] = [t.to_json() for t in audit.ranked()]
    text = json.dumps(head)
    out.write(text[:-1] + ', "calls": [')
    for i, line in enumerate(spool):
        out.write((", " if i else "") + line.rstrip("\n"))
    out.write("]}\n")
    out.flush()


def _usd(v: float) -> str:
    return f"{v:,.4f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"


def _fell(t: Tally) -> str:
    parts = [f"{c} {t.causes[c]}" for c in MISSES if c in t.causes]
    return " · ".join(parts) or "-"


def _table(console: Console, audit: LogAudit, files: int, problems: int) -> None:
    total = audit.total
    agents = sorted({t.agent for t in audit.sessions.values() if t.agent})
    console.print(
        Text(
            f"agent logs: {counted(files, 'file')}, {counted(len(audit.sessions), 'session')}, "
            f"{counted(total.calls, 'call')} ({', '.join(agents)})"
            + (f" · {counted(problems, 'problem')} (stderr)" if problems else "")
        ),
        highlight=False,
    )
    rows = audit.ranked()
    label, title = {
        "session": ("session", "sessions"),
        "project": ("project", "projects"),
        "day": ("day", "days (UTC)"),
    }[audit.by]
    table = Table(title=f"{title}, most lost to cache misses first", title_justify="left", box=None, pad_edge=False)
    for name in ("lost $", "spent $", "hit", "calls", "compact", "model sw", "side", "idle>TTL"):
        table.add_column(name, justify="right", no_wrap=True, min_width=max(len(name), 5))
    table.add_column(label, no_wrap=True, overflow="ellipsis", min_width=10, max_width=36)
    table.add_column("reads fell", overflow="fold", min_width=16)
    for t in rows[:_ROWS]:
        table.add_row(
            _usd(t.lost),
            _usd(t.spent),
            _pct(t.hit_ratio),
            f"{t.calls:,}",
            str(t.compactions),
            str(t.model_switches),
            str(t.sidechain_calls),
            str(t.gaps_over_ttl),
            Text(_safe(t.key)),
            _fell(t),
        )
    console.print(table)
    if len(rows) > _ROWS:
        console.print(Text(f"... and {len(rows) - _ROWS:,} more (--json lists them all)"), highlight=False)
    u = total.usage
    share = f" ({total.lost / total.spent:.1%} of spend)" if total.spent else ""
    unpriced = (
        ""
        if total.priced == total.calls
        else f" · {counted(total.calls - total.priced, 'call')} unpriced (model not in the price table)"
    )
    console.print(
        Text(
            f"spent ${total.spent:,.4f} · lost ${total.lost:,.4f}{share} · hit ratio {_pct(total.hit_ratio)}{unpriced}"
        ),
        highlight=False,
    )
    console.print(
        Text(
            f"tokens: input {u.uncached_input:,} · cache write 5m {u.cache_write_5m:,} · 1h {u.cache_write_1h:,} · "
            f"cache read {u.cache_read:,} · output {u.output:,}"
        ),
        highlight=False,
    )
    causes = [
        f"{c} {total.causes[c]:,}" + (f" ${total.lost_by_cause[c]:,.4f}" if c in total.lost_by_cause else "")
        for c in CAUSES
        if c in total.causes
    ]
    console.print(Text("causes: " + " · ".join(causes)), highlight=False)
    worst = audit.worst_calls()
    if worst:
        console.print(Text("dearest misses", style="bold"))
        for jc in worst:
            c = jc.call
            gap = f" after {duration(jc.judged.gap_s)}" if jc.judged.gap_s is not None else ""
            console.print(
                Text(
                    _safe(
                        f"  {clock(c.at)}  lost ${jc.lost:,.4f}  {jc.judged.cause}{gap}  {c.session} ({c.chain})  "
                        f"{Path(c.file).name}:{c.line}  {jc.judged.evidence}"
                    )
                ),
                highlight=False,
                soft_wrap=True,
            )
    if "prefix_changed" in total.causes:
        console.print(
            Text(
                "prefix_changed is placed at the token where reads stopped: these logs do not hold the request "
                "sent, so the byte is named only by ctxwright wrap or ctxwright proxy",
                style="dim",
            ),
            highlight=False,
        )
