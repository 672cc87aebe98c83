"""``ctxwright audit FILE``: the prefix-cache audit of any agent's request log, offline.

Why a command of its own: the cheapest fix to a cache-hit problem is finding the one
changed byte that breaks every later request's prefix. This prints, per request, where
it first differs from the previous one and why, and for the whole log how much a cache
could have reused, how much the provider says it did, and what to change.

Output is either a table for people or JSON for scripts (``--json``: stdout holds that
JSON document and nothing else). Lines of the log that cannot be read go to stderr as
``line N: message`` in both modes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ctxwright.audit.compare import Auditor, AuditRow, AuditSummary, Divergence, Prices
from ctxwright.audit.logs import ParseProblem, load_requests
from ctxwright.core.tokens import TokenCounter

#: One line of advice per cause that is not an append (shown only for causes present).
ADVICE = {
    "system_changed": "move dynamic values (time, user profile) out of the system prompt to the end of the trajectory",
    "tools_changed": "keep one tool list, in one order, for the whole session; never add, drop or "
    "reorder tools per turn",
    "history_edited": "never rewrite a message already sent; append a correction as a new message instead",
    "history_removed": "a sliding window re-sends everything after the cut each turn; drop old turns rarely "
    "and in large steps (or compact) instead of one at a time",
    "compaction": "each compaction re-sends everything after the summary; compact rarely, with headroom, "
    "not every few turns",
    "status_replaced": "a status block replaced in place breaks the cache where it sits; append status "
    "updates at the end instead",
    "other": "the request changed in a way that is not an append (a message inserted or a role changed); "
    "see the first divergence column",
}

_CAUSE_STYLE = {"first": "dim", "append": "green", "compaction": "yellow", "status_replaced": "yellow"}
_MAX_PROBLEMS_SHOWN = 100


def run_audit(path: str | Path, *, as_json: bool, prices: Prices | None, console: Console) -> int:
    """Load, audit and print the log at ``path``; 0 on success, 2 if nothing could be audited."""
    try:
        requests, problems = load_requests(path)
    except OSError as exc:
        print(f"ctxwright audit: cannot read {path}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    report_problems(problems)
    if not requests:
        print(
            f"ctxwright audit: no request could be read from {path}"
            + (f" ({len(problems)} problem(s) above)" if problems else " (the file is empty)"),
            file=sys.stderr,
        )
        return 2
    counter = TokenCounter()
    auditor = Auditor(counter)
    for req in requests:
        auditor.add(req)
    summary = auditor.summary(prices)
    if as_json:
        doc = {"requests": [r.to_json() for r in auditor.rows], "summary": summary.to_json()}
        print(json.dumps(doc, ensure_ascii=False), file=console.file)
    else:
        console.print(rows_table(auditor.rows))
        print_summary(console, summary, prices, counter.source)
    return 0


def report_problems(problems: list[ParseProblem]) -> None:
    """Each unreadable part of the log as ``line N: message`` on stderr (the first 100)."""
    for p in problems[:_MAX_PROBLEMS_SHOWN]:
        print(f"line {p.line}: {p.message}", file=sys.stderr)
    if len(problems) > _MAX_PROBLEMS_SHOWN:
        print(f"... and {len(problems) - _MAX_PROBLEMS_SHOWN} more problem(s)", file=sys.stderr)


# -- the table ------------------------------------------------------------------------------


def _n(v: int | None) -> str:
    return "?" if v is None else f"{v:,}"


def where(d: Divergence) -> str:
    """``msg#i field @byte`` (the system prompt is msg#0), or ``tools @byte``."""
    if d.message_index is None:
        return f"{d.field} @{d.byte_offset}"
    return f"msg#{d.message_index} {d.field} @{d.byte_offset}"


def _visible(s: str) -> str:
    """Context text on one line: newlines and tabs shown, not obeyed."""
    return s.replace("\r", "␍").replace("\n", "⏎").replace("\t", "⇥")


def context(d: Divergence) -> Text:
    """The ~40 characters either side of the divergence, the cut marked with a red bar."""
    if not d.before and not d.after:
        return Text("")
    return Text.assemble(("…" + _visible(d.before), "dim"), ("|", "bold red"), (_visible(d.after) + "…", ""))


def rows_table(rows: list[AuditRow]) -> Table:
    t = Table(title="prefix-cache audit: one row per request")
    for col in ("#", "cause", "prompt tok", "reusable tok", "cached tok"):
        t.add_column(col, justify="right" if col != "cause" else "left")
    t.add_column("first divergence", no_wrap=True)
    t.add_column("context (before | after)", overflow="fold")
    for r in rows:
        d = r.first_divergence
        t.add_row(
            str(r.index),
            Text(r.cause, style=_CAUSE_STYLE.get(r.cause, "bold red")),
            _n(r.prompt_tokens),
            _n(r.reusable_prefix_tokens),
            _n(r.cached_tokens),
            Text(where(d)) if d else "-",  # a field name from the log: shown as it is, never as markup
            context(d) if d else Text(""),
        )
    return t


# -- the summary ----------------------------------------------------------------------------


def _pct(v: float | None) -> str:
    return "unknown" if v is None else f"{v:.1%}"


def print_summary(console: Console, s: AuditSummary, prices: Prices | None, token_source: str) -> None:
    """Totals, ratios, cause counts, cost estimates and one line of advice per problem cause."""
    reusable_share = f" ({s.reusable_tokens / s.prompt_tokens:.1%} of prompt)" if s.prompt_tokens else ""
    console.print(
        f"[bold]{s.requests:,}[/] request(s) · prompt tokens {s.prompt_tokens:,} · reusable "
        f"{s.reusable_tokens:,}{reusable_share} · cached "
        + (f"{s.cached_tokens:,}" if s.cached_tokens is not None else "unknown (the log has no usage)")
    )
    console.print(
        f"hit ratio {_pct(s.hit_ratio)} (Σcached ÷ Σprompt) · efficiency {_pct(s.efficiency)} "
        "(Σcached ÷ Σreusable)"
        + ("" if s.cached_tokens is None else " · over the requests whose cached count is known")
    )
    console.print(Text("causes: " + " · ".join(f"{k} {v:,}" for k, v in s.causes.items())))
    if prices is not None and s.est_cost is not None and s.est_cost_if_stable is not None:
        saving = s.est_cost - s.est_cost_if_stable
        share = f", {saving / s.est_cost:.1%}" if s.est_cost else ""
        console.print(
            f"estimated cost {s.est_cost:,.4f} · with a stable prefix {s.est_cost_if_stable:,.4f} "
            f"(difference {saving:,.4f}{share}) at {prices.input:g} / "
            f"{prices.cached if prices.cached is not None else prices.input:g} cached / "
            f"{prices.output:g} output per million tokens"
        )
    advice = [(c, n) for c, n in s.causes.items() if c in ADVICE]
    if advice:
        console.print("[bold]advice[/]")
        for cause, n in advice:
            console.print(f"  {cause} ({n:,}): {ADVICE[cause]}")
    console.print(f"[dim]tokens not reported by the log are counted with: {token_source}[/]")
