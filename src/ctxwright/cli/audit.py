"""``ctxwright audit FILE``: the prefix-cache audit of any agent's request log, offline.

Why a command of its own: the cheapest fix to a cache-hit problem is finding the one
changed byte that breaks every later request's prefix. This prints, per request, where
it first differs from the previous request of its conversation and why, and for the whole
log (and each conversation in it) how much a cache could have reused, how much the provider
says it did, and what to change.

It runs in constant memory as it reads: the log is streamed line by line
(``audit/logs.py``), each row is printed as soon as it is audited, the summary comes from
running totals, and the conversations' summaries wait in a temporary file, not in memory
(``audit/compare.py`` bounds what the comparison keeps). A log of millions of requests is
audited in the memory of a small one.

Output is either a table for people or JSON for scripts (``--json``: stdout holds one JSON
document, ``{"requests": [...], "conversations": [...], "summary": {...}}``, written as the
rows are produced). Parts of the log that cannot be read go to stderr as ``line N: message``
in both modes, as they are met; nothing in the log makes the command raise.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from ctxwright.audit.compare import (
    AuditLimits,
    Auditor,
    AuditRequest,
    AuditRow,
    AuditSummary,
    Divergence,
    Prices,
    as_pricing,
    row_cost,
)
from ctxwright.audit.logs import MAX_RECORD_BYTES, ParseProblem, open_log, read_stream
from ctxwright.audit.provider_log import QUIET, LogVerdicts, describe, expiry_total
from ctxwright.audit.rules import BY_NAME, Finding, RuleRunner, Settings
from ctxwright.cache.prices import Pricing, pricing_of
from ctxwright.core.tokens import TokenCounter
from ctxwright.errors import CtxwrightError, LogUnreadable

#: One line of advice per cause that is not an append (shown only for causes present).
ADVICE = {
    "system_changed": "move dynamic values (time, user profile) out of the system prompt to the end of the trajectory",
    "tools_changed": "keep one tool list, in one order, for the whole session; never add, drop or "
    "reorder tools per turn",
    "options_changed": "look at the cached column on these rows: where it drops, the server renders the "
    "option into the prompt (llama.cpp's function-calling formats write the tool list only when tool_choice is "
    "set and not none) or routes by it (model, user, prompt_cache_key); keep such options the same for a whole "
    "conversation. Sampling options alone do not change the prompt",
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
#: below this many columns the divergence and its context go on a line of their own
_WIDE = 110


def add_price_options(parser: Any, *, prices_file: bool = True) -> None:
    """``--prices FILE`` (the recipe's ``prices`` option, declared once in
    ``recipe/options.py``) and ``--price-input X --price-cached Y --price-output Z`` (per
    million tokens; they override the table for every call), for ``audit``, ``report``,
    ``show`` (and ``run``, whose ``--prices`` comes with the recipe's flags)."""
    if prices_file:
        from ctxwright.recipe.declare import options
        from ctxwright.recipe.options import Recipe

        spec = next(s for s in options(Recipe) if s.keyword == "prices")
        flag = spec.flags[0]
        parser.add_argument(flag.name, dest=flag.destination, metavar=flag.metavar, help=flag.help_text())
    parser.add_argument(
        "--price-input", type=float, metavar="X", help="price per million uncached input tokens (every call)"
    )
    parser.add_argument("--price-cached", type=float, metavar="Y", help="price per million cached input tokens")
    parser.add_argument("--price-output", type=float, metavar="Z", help="price per million output tokens")


def pricing_from_args(args: Any) -> Pricing:
    """How the command prices calls: ``--prices FILE`` over the built-in table, the
    ``--price-*`` flags overriding both; a bad file is one line (``PricesFileError``)."""
    flat = prices_from_args(args)
    return pricing_of(getattr(args, "prices", None), flat.model_price() if flat is not None else None)


def given_pricing(args: Any) -> Pricing | None:
    """:func:`pricing_from_args` when ``--prices`` or ``--price-*`` was given, else ``None``
    (the built-in table then prices what it knows, and the audit adds cost columns only when
    the log's first request has a price)."""
    pricing = pricing_from_args(args)
    return pricing if getattr(args, "prices", None) is not None or pricing.flat is not None else None


def prices_from_args(args: Any) -> Prices | None:
    """The prices given with :func:`add_price_options`, or ``None`` when none were given."""
    if args.price_input is None and (args.price_cached is not None or args.price_output is not None):
        raise CtxwrightError("--price-cached and --price-output need --price-input (all per million tokens)")
    for name in ("price_input", "price_cached", "price_output"):
        v = getattr(args, name)
        if v is not None and not (v >= 0 and v != float("inf")):
            raise CtxwrightError(f"--{name.replace('_', '-')} {v}: give a price of zero or more per million tokens")
    if args.price_input is None:
        return None
    return Prices(input=args.price_input, cached=args.price_cached, output=args.price_output or 0.0)


def add_rule_options(parser: Any) -> None:
    """What the named rules (``audit/rules/``) are told, the same for ``audit``, ``proxy``,
    ``wrap`` and ``gate``: ``--max-tool-tokens N``, the tool budget of ``tool_budget``, and
    ``--keep ITEM``, the survival contract ``compaction_lost_item`` holds requests to."""
    parser.add_argument(
        "--max-tool-tokens",
        type=_tool_tokens,
        default=None,
        metavar="N",
        help="name the requests whose tool definitions take more than N tokens (the tool_budget rule: "
        "MCP-heavy agents); default: no budget",
    )
    parser.add_argument(
        "--keep",
        type=_keep,
        action="append",
        default=[],
        metavar="ITEM",
        help="the survival contract (repeatable): task, files, errors, constraints, or a regular expression; "
        "the compaction_lost_item rule names a request that drops a declared item the next request no "
        "longer holds anywhere (as CompactionConfig(keep=...) declares it)",
    )


def _keep(text: str) -> str:
    """One ``--keep`` declaration, checked as ``CompactionConfig(keep=...)`` checks it."""
    from ctxwright.compaction.survival import contract

    if text == "todos":
        raise argparse.ArgumentTypeError(
            "todos: a request holds no TODO list; give task, files, errors, constraints or a pattern"
        )
    try:
        contract([text])
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("compaction keep: ")) from None
    return text


def _tool_tokens(text: str) -> int:
    try:
        value = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of tokens, 0 or more")
    return value


def rule_settings(args: Any, counter: TokenCounter | None = None) -> Settings:
    """The named rules' settings from the command's flags (:func:`add_rule_options`)."""
    settings = Settings(max_tool_tokens=getattr(args, "max_tool_tokens", None))
    keep = getattr(args, "keep", None)
    if keep:  # the contract is the compaction layer's: loaded only when one is declared
        from ctxwright.compaction.survival import contract

        settings.keep = contract(keep)
    return settings if counter is None else replace(settings, counter=counter)


def finding_text(f: Finding) -> str:
    """One finding in a line: ``rule NAME: where and what · fix: ...`` (``warning`` for a risk)."""
    return f"{'warning' if f.severity == 'warning' else 'rule'} {f.rule}: {f.line} · fix: {f.fix}"


def add_record_cap_option(parser: Any) -> None:
    """``--max-record-bytes N``: the longest line (one record) of a log that is read."""
    parser.add_argument(
        "--max-record-bytes",
        type=_record_cap,
        default=MAX_RECORD_BYTES,
        metavar="N",
        help=f"stop at a line (one record) longer than N bytes (default {MAX_RECORD_BYTES:,}: a record is "
        "parsed in memory, at several times its size)",
    )


def _record_cap(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of bytes, 1 or more")
    return value


def run_audit(
    path: str | Path,
    *,
    as_json: bool,
    prices: Prices | Pricing | None,
    console: Console,
    limits: AuditLimits | None = None,
    max_record: int = MAX_RECORD_BYTES,
    rules: Settings | None = None,
) -> int:
    """Read, audit and print the log at ``path`` (``-``: stdin) as it is read; 0 on success, 2
    if nothing could be audited or the file could not be read to its end. ``rules``: the named
    rules' settings (``--max-tool-tokens``)."""
    try:
        f = sys.stdin.buffer if str(path) == "-" else open_log(path)
    except OSError as exc:
        print(f"ctxwright audit: cannot read {path}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except LogUnreadable as exc:
        print(f"ctxwright audit: {exc}", file=sys.stderr)
        return 2
    with f:
        return audit_items(
            read_stream(f, max_record=max_record),
            str(path),
            as_json=as_json,
            prices=prices,
            console=console,
            limits=limits,
            rules=rules,
        )


def audit_items(
    items: Iterable[ParseProblem | AuditRequest],
    source: str,
    *,
    as_json: bool,
    prices: Prices | Pricing | None,
    console: Console,
    limits: AuditLimits | None = None,
    rules: Settings | None = None,
) -> int:
    """:func:`run_audit` on requests already read (a log's, or a proxy session's from the
    store); ``source`` names them in messages. Each request is also checked by the named rules
    (``audit/rules/``) where its cause says they can fire."""
    problems = _Problems()
    limits = limits or AuditLimits()
    counter = TokenCounter(cache_size=limits.token_memo)
    explicit = prices is not None
    pricing = as_pricing(prices) or Pricing()  # the built-in table when nothing was given
    report: _Report = _JsonReport(console.file, pricing) if as_json else _TableReport(console, pricing, explicit)
    status = 0
    verdicts = LogVerdicts(pricing=pricing)
    settings = rules or Settings()
    runner = RuleRunner(replace(settings, counter=counter), max_open=limits.open_conversations)

    with tempfile.TemporaryFile("w+", encoding="utf-8") as spool:

        def closed(c: Any) -> None:
            print(json.dumps(c.to_json()), file=spool)
            runner.forget(c.number)  # the rules keep no more conversations than the audit

        auditor = Auditor(counter, keep_rows=False, limits=limits, on_close=closed)
        try:
            for item in items:
                if isinstance(item, ParseProblem):
                    problems.report(item)
                else:
                    row = auditor.add(item)
                    report.row(row, verdicts.add(item, row), runner.add(row.conversation, item, row.cause))
        except BrokenPipeError:  # our stdout, not the log: the CLI's entry point ends quietly
            raise
        except (OSError, LogUnreadable) as exc:  # the file went away, the disk failed, a record over the cap
            why = (exc.strerror or exc) if isinstance(exc, OSError) else f"{exc}; --max-record-bytes N raises the cap"
            print(
                f"ctxwright audit: reading {source} stopped after {auditor.count:,} request(s): {why}",
                file=sys.stderr,
            )
            if not auditor.count:
                return 2
            status = 2
        problems.finish()
        if not auditor.count:
            print(
                f"ctxwright audit: no request could be read from {source}"
                + (f" ({problems.count} problem(s) above)" if problems.count else " (the file is empty)"),
                file=sys.stderr,
            )
            return 2
        auditor.finish()
        spool.seek(0)
        report.expiries = verdicts.expiries
        report.rules = dict(runner.counts)
        report.finish(auditor.summary(pricing), (json.loads(line) for line in spool), pricing, counter.source)
    return status


class _Problems:
    """Each unreadable part of the log as ``line N: message`` on stderr, as met (the first 100)."""

    def __init__(self) -> None:
        self.count = 0

    def report(self, p: ParseProblem) -> None:
        self.count += 1
        if self.count <= _MAX_PROBLEMS_SHOWN:
            print(f"line {p.line}: {p.message}", file=sys.stderr)

    def finish(self) -> None:
        if self.count > _MAX_PROBLEMS_SHOWN:
            print(f"... and {self.count - _MAX_PROBLEMS_SHOWN:,} more problem(s)", file=sys.stderr)


def _safe(s: str) -> str:
    """``s`` printable to a UTF-8 stream: a lone surrogate from the log becomes U+FFFD."""
    return s.encode("utf-8", "replace").decode("utf-8")


class _Report:
    #: the logged calls the provider missed after an idle gap longer than the TTL
    expiries: list[dict[str, Any]] = []  # noqa: RUF012 -- replaced per audit, never mutated
    #: the named rules' findings of the whole audit, by rule
    rules: dict[str, int] = {}  # noqa: RUF012 -- replaced per audit, never mutated

    def row(self, r: AuditRow, cache: dict[str, Any] | None = None, findings: Sequence[Finding] = ()) -> None:
        raise NotImplementedError

    def finish(
        self,
        s: AuditSummary,
        conversations: Iterable[dict[str, Any]],
        prices: Prices | Pricing | None,
        token_source: str,
    ) -> None:
        raise NotImplementedError


# -- JSON -----------------------------------------------------------------------------------


class _JsonReport(_Report):
    """One JSON document, written piece by piece: each row as it is audited, then the
    conversations from the spool, then the summary. ASCII-escaped, so no byte of the log
    (a lone surrogate included) can make stdout fail."""

    def __init__(self, out: IO[str], pricing: Pricing) -> None:
        self.out = out
        self.pricing = pricing
        self.started = False
        self.provider_cache = False

    def row(self, r: AuditRow, cache: dict[str, Any] | None = None, findings: Sequence[Finding] = ()) -> None:
        rec = r.to_json()
        rec["rules"] = [f.to_json() for f in findings]
        c = row_cost(r, self.pricing)
        rec["cost"], rec["cost_if_held"] = (round(c.cost, 8), round(c.if_held, 8)) if c else (None, None)
        if cache is not None:
            rec["cache"] = cache
            self.provider_cache = True
        self.out.write((", " if self.started else '{"requests": [') + json.dumps(rec))
        self.started = True

    def finish(
        self,
        s: AuditSummary,
        conversations: Iterable[dict[str, Any]],
        prices: Prices | Pricing | None,
        token_source: str,
    ) -> None:
        self.out.write('], "conversations": [')
        for i, c in enumerate(conversations):
            self.out.write((", " if i else "") + json.dumps(c))
        self.out.write("]")
        if self.provider_cache:  # a log of Anthropic or Responses exchanges: the expiries too
            tokens, usd = expiry_total(self.expiries)
            expiries = {"calls": self.expiries, "tokens": tokens, "extra_usd": usd}
            self.out.write(', "expiries": ' + json.dumps(expiries))
        self.out.write(', "rules": ' + json.dumps(self.rules))
        self.out.write(', "summary": ' + json.dumps(s.to_json()) + "}\n")
        self.out.flush()


# -- the table ------------------------------------------------------------------------------


def _n(v: int | None) -> str:
    return "?" if v is None else f"{v:,}"


def where(d: Divergence) -> str:
    """``msg#i field @byte`` (the system prompt is msg#0), ``tools @byte``, or the options."""
    return _safe(d.where)


def _visible(s: str) -> str:
    """Context text on one line: newlines and tabs shown, not obeyed."""
    return _safe(s).replace("\r", "␍").replace("\n", "⏎").replace("\t", "⇥")


def context_parts(d: Divergence) -> list[tuple[str, str]]:
    """The ~40 characters either side of the divergence, the cut marked with a red bar
    (for options: their values before → after), as (text, style) parts."""
    if d.field == "options" and d.message_index is None:
        return [(_visible(d.before), "dim"), (" → ", "bold red"), (_visible(d.after), "")]
    if not d.before and not d.after:
        return []
    return [("…" + _visible(d.before), "dim"), ("|", "bold red"), (_visible(d.after) + "…", "")]


def context(d: Divergence) -> Text:
    """:func:`context_parts` as rich text."""
    return Text.assemble(*context_parts(d))


_HEADER = f"{'#':>7} {'conv':>5} {'cause':<15} {'prompt tok':>10} {'reusable':>10} {'cached':>10}"
_COST_HEADER = f" {'cost $':>10} {'if held $':>10}"


def _usd(v: float | None) -> str:
    """A cost in USD to the hundred-thousandth of a dollar (``-``: no price for the model)."""
    return "-" if v is None else f"{v:,.5f}"


class _TableReport(_Report):
    """A row per request, printed as it is audited (a table that waited for its widest cell
    would hold every row). Fixed columns, every line cut to the console's width; narrower
    than ``_WIDE`` columns, the first divergence and its context take a second, indented line.

    On a terminal the rows are styled by rich; written to a file or a pipe they are plain text
    written directly -- the same characters, without rich's per-row rendering, which would
    cost more than the audit itself on a log of millions of requests.
    """

    def __init__(self, console: Console, pricing: Pricing, explicit: bool = False) -> None:
        self.console = console
        self.pricing = pricing
        #: cost columns: when prices were given, or the first request has a price in the table
        self.costs = explicit
        self.width = console.width
        self.wide = self.width >= _WIDE
        self.styled = console.is_terminal
        self.started = False

    def _emit(self, parts: list[tuple[str, str]]) -> None:
        """One line of (text, style) parts, cut to the width."""
        if self.styled:
            text = Text.assemble(*parts)
            text.truncate(self.width, overflow="ellipsis")
            self.console.print(text, no_wrap=True, crop=True, soft_wrap=False, highlight=False)
        else:
            self.console.file.write(_fit("".join(p for p, _ in parts), self.width) + "\n")

    def row(self, r: AuditRow, cache: dict[str, Any] | None = None, findings: Sequence[Finding] = ()) -> None:
        self._row(r)
        if cache is not None and cache.get("cause") not in QUIET:
            self._emit([(" " * 8 + "provider cache: ", "dim"), (_safe(describe(cache)), "")])
        for f in findings:
            style = "yellow" if f.severity == "warning" else "bold red"
            self._emit([(" " * 8, ""), (_visible(finding_text(f)), style)])

    def _row(self, r: AuditRow) -> None:
        cost = row_cost(r, self.pricing)
        if not self.started:
            self.started = True
            self.costs = self.costs or cost is not None
            self._emit([("prefix-cache audit: one row per request", "bold")])
            head = _HEADER + (_COST_HEADER if self.costs else "")
            head += "  first divergence        context (before | after)" if self.wide else ""
            self._emit([(head, "bold")])
        line = [
            (f"{r.index:>7} {r.conversation:>5} ", ""),
            (f"{r.cause:<15}", _CAUSE_STYLE.get(r.cause, "bold red")),
            (f" {_n(r.prompt_tokens):>10} {_n(r.reusable_prefix_tokens):>10} {_n(r.cached_tokens):>10}", ""),
        ]
        if self.costs:
            line.append((f" {_usd(cost.cost if cost else None):>10} {_usd(cost.if_held if cost else None):>10}", ""))
        d = r.first_divergence
        if d is None:
            self._emit(line)
            return
        label = where(d) + (": " + ", ".join(r.options_changed) if d.field == "options" else "")
        if self.wide:
            self._emit([*line, (f"  {label:<22}  ", ""), *context_parts(d)])
            return
        self._emit(line)
        self._emit([(" " * 8 + label + "  ", ""), *context_parts(d)])

    def finish(
        self,
        s: AuditSummary,
        conversations: Iterable[dict[str, Any]],
        prices: Prices | Pricing | None,
        token_source: str,
    ) -> None:
        self.console.file.flush()
        print_summary(self.console, s, prices, token_source)
        print_rules(self.console, self.rules)
        print_expiries(self.console, self.expiries)
        if s.conversations > 1:
            print_conversations(self.console, conversations)


def _fit(s: str, width: int) -> str:
    """``s`` cut to ``width`` terminal cells, an ellipsis marking the cut (CJK counts double)."""
    if s.isascii():
        return s if len(s) <= width else s[: width - 1] + "…"
    if cell_len(s) <= width:
        return s
    text = Text(s)
    text.truncate(width, overflow="ellipsis")
    return text.plain


# -- the summary ----------------------------------------------------------------------------


def _pct(v: float | None) -> str:
    return "unknown" if v is None else f"{v:.1%}"


def cached_text(s: AuditSummary) -> str:
    """What the log says about cached tokens: "no usage" only when no request had usage."""
    if s.cached_tokens is None:
        if not s.usage_known:
            return "unknown (the log has no usage)"
        return f"unknown (the usage of {s.usage_known:,} request(s) has no cached-token count)"
    known = "" if s.cached_known == s.requests else f" (reported for {s.cached_known:,} of {s.requests:,} requests)"
    return f"{s.cached_tokens:,}{known}"


def print_summary(console: Console, s: AuditSummary, prices: Prices | Pricing | None, token_source: str) -> None:
    """Totals, ratios, cause counts, cost estimates and one line of advice per problem cause."""
    reusable_share = f" ({s.reusable_tokens / s.prompt_tokens:.1%} of prompt)" if s.prompt_tokens else ""
    conversations = f" in {s.conversations:,} conversations" if s.conversations > 1 else ""
    console.print(
        f"[bold]{s.requests:,}[/] request(s){conversations} · prompt tokens {s.prompt_tokens:,} · reusable "
        f"{s.reusable_tokens:,}{reusable_share} · cached {cached_text(s)}",
        highlight=False,
    )
    console.print(
        f"hit ratio {_pct(s.hit_ratio)} (Σcached ÷ Σprompt) · efficiency {_pct(s.efficiency)} "
        "(Σcached ÷ Σreusable)"
        + ("" if s.cached_tokens is None else " · over the requests whose cached count is known"),
        highlight=False,
    )
    # names as plain text, never as markup (a cause or option name must print as it is)
    console.print(Text("causes: " + " · ".join(f"{k} {v:,}" for k, v in s.causes.items())), highlight=False)
    if s.options_changed:
        names = " · ".join(f"{k} {v:,}" for k, v in s.options_changed.items())
        console.print(Text("options changed: " + names), highlight=False)
    if s.skills_catalog_requests:
        share = f" ({s.skills_catalog_tokens / s.prompt_tokens:.1%} of prompt)" if s.prompt_tokens else ""
        console.print(
            f"skills catalog: {s.skills_catalog_tokens:,} tokens{share} in {s.skills_catalog_requests:,} "
            f"request(s), {s.skills_catalog_tokens // s.skills_catalog_requests:,} per request that had one",
            highlight=False,
        )
    if s.est_cost is not None and s.est_cost_if_stable is not None and s.est_cost_if_held is not None:
        saving = s.est_cost - s.est_cost_if_stable
        share = f", {saving / s.est_cost:.1%}" if s.est_cost else ""
        priced = "" if s.priced_requests == s.requests else f" over the {s.priced_requests:,} priced request(s)"
        console.print(
            f"estimated cost {s.est_cost:,.4f} · if the cache had held {s.est_cost_if_held:,.4f} · with a stable "
            f"prefix {s.est_cost_if_stable:,.4f} (difference {saving:,.4f}{share}){priced}",
            highlight=False,
        )
        for line in s.prices_used:
            console.print(Text("  at " + line, style="dim"), highlight=False, soft_wrap=True)
    advice = [(c, n) for c, n in s.causes.items() if c in ADVICE]
    if advice:
        console.print("[bold]advice[/]")
        for cause, n in advice:
            console.print(f"  {cause} ({n:,}): {ADVICE[cause]}", highlight=False)
    console.print(f"[dim]tokens not reported by the log are counted with: {token_source}[/]")


def print_rules(console: Console, counts: dict[str, int]) -> None:
    """The named rules that fired, with how many requests each, and each one's fix
    (``docs/rules.md``)."""
    if not counts:
        return
    named = [r for r in BY_NAME if r in counts]
    console.print(Text("rules: " + " · ".join(f"{r} {counts[r]:,}" for r in named)), highlight=False)
    for r in named:
        console.print(Text(f"  {r}: {BY_NAME[r].fix}"), highlight=False, soft_wrap=True)


def print_expiries(console: Console, expiries: list[dict[str, Any]]) -> None:
    """Each call the provider missed because its cache had expired, and what that cost."""
    if not expiries:
        return
    tokens, usd = expiry_total(expiries)
    cost = f", ${usd:.4f} more than reads" if usd is not None else ""
    console.print(Text(f"expiries: {len(expiries):,} ({tokens:,} tokens re-written{cost})"), highlight=False)
    for e in expiries:
        console.print(Text(f"  request {e['index']}: {describe(e)}"), highlight=False, soft_wrap=True)


def print_conversations(console: Console, conversations: Iterable[dict[str, Any]]) -> None:
    """One line per conversation, from its summary (read back from the spool)."""
    console.print("[bold]conversations[/] [dim](how a log is split: docs/prefix-cache.md)[/]")
    head = f"{'conv':>5} {'requests':>8} {'first #':>8} {'prompt tok':>11} {'reusable':>11} {'cached':>11} {'hit':>6}  causes"
    console.print(Text(head, style="bold"), no_wrap=True, crop=True, overflow="ellipsis")
    for c in conversations:
        causes = " · ".join(f"{k} {v:,}" for k, v in c["causes"].items() if k != "first")
        session = f" [{c['session']}]" if c.get("session") not in (None, "?") else ""
        line = (
            f"{c['conversation']:>5} {c['requests']:>8,} {c['first_request']:>8} {c['prompt_tokens']:>11,} "
            f"{c['reusable_tokens']:>11,} {_n(c['cached_tokens']):>11} {_pct(c['hit_ratio']):>6}  "
            f"{causes or '-'}{session}"
        )
        text = Text(_safe(line))
        text.truncate(console.width, overflow="ellipsis")
        console.print(text, no_wrap=True, crop=True, soft_wrap=False, highlight=False)
