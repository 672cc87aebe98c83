"""Judging a run of an agent against its golden trace: which cache regressions a change made.

Why a judge of its own, not the audit's summary: the audit explains one log; a CI gate must
say whether *this* build costs more than the recorded one, for the same conversation, at
zero API cost. The replay server (``replay/``) answers the agent with the golden's replies,
so the run's requests are the golden's requests plus exactly what the change under test
altered. Three rules, each a list of :class:`Regression`:

``prefix``
    the frozen prefix (system prompt, tools, and the request options that are part of the
    cached prompt) of every call is byte-identical to the golden's call at the same position.
    A provider caches the longest identical prefix: a per-session URL in a tool description
    or a timestamp in the system prompt makes every call of every session re-write it. Each
    change is named by its segment (``ci/segments.py``), JSON path, byte offset and the text
    on both sides, once, with the calls it affects.
``append_only``
    every request the run sent continues the run's previous request of its conversation (the
    audit's ``append``), or breaks it where the golden breaks too (a compaction the golden
    also made, by the audit's cause names). A sliding window, a tool result edited in place, a
    status line rewritten into the history each turn all re-write what follows them on every
    call. A tool result that merely *differs* from the golden's (a new timestamp) is appended,
    not edited, and is no regression. *Every* request is judged, whether the replay answered
    it or not: a rewrite often makes the request leave the recording (the replay refuses it),
    and a gate that judged only the answered calls would never name the rewrite -- only the
    run's end. A request the replay placed in a conversation (answered, or refused where it
    left the recording) is judged after the run's previous request of that conversation; one
    it could not place at all, after the run's previous request in arrival order -- when it
    kept at least one whole message of it (else it is a new conversation, as the audit's own
    conversation rules say, and the divergence alone says the run left the recording).
``tolerances``
    reuse (reusable ÷ prompt tokens: what a perfect prefix cache could reuse; the replay has
    no cache of its own), prompt tokens per task (a task is one conversation) and estimated
    cost per task (priced as ``ctxwright audit`` prices: the reusable prefix as cache reads)
    within the given tolerances of the golden's -- compared over the calls both sides made:
    the run's calls the replay answered, and the golden's calls at the same places. A run that
    stopped after 3 of 5 calls has a lower reuse than the whole golden only because a
    conversation's first calls reuse least; comparing it with the golden's first 3 calls
    measures the change, not where the run stopped. A request with no golden counterpart (it
    left the recording) is in no ratio: what it costs has nothing recorded to be compared with,
    and the append-only rule names what it did.

Both sides are counted by ctxwright's own tokenizer, with the golden's recorded usage set
aside: the run has no real usage (its replies are replayed), and comparing a provider's count
with ctxwright's would report the tokenizer's difference as a regression.

A run that cannot be judged -- it made fewer calls than the golden, left the recording, or the
agent failed -- is not a pass: :attr:`Judgement.unjudged` says why, and the exit code is 2
unless a regression was found in the requests it did send (then 1: that regression is real --
the rewrite that made a run leave the recording is one).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ctxwright.audit.compare import Auditor, AuditRequest, AuditRow, Divergence, changed_options, prompt_options
from ctxwright.audit.logs import ParseProblem, read_records
from ctxwright.audit.rules import Finding, Settings, run_rules
from ctxwright.cache.prices import Pricing
from ctxwright.ci.segments import diff_prefix
from ctxwright.compaction.survival import contract
from ctxwright.core.messages import canonical_json
from ctxwright.core.tokens import TokenCounter
from ctxwright.core.words import counted

#: The audit causes that keep the previous request of a conversation whole.
CONTINUES = frozenset({"first", "append"})
#: Characters of text shown on each side of a change.
CONTEXT = 40
#: How the replay placed a call of a run (a golden's calls are all answered): from the
#: recording at its conversation and position (it has a golden counterpart) ...
ANSWERED = "answered"
#: ... in its conversation, at the position where it left the recording (refused, or answered
#: the last recorded reply with ``--on-divergence repeat-last``) ...
DIVERGED = "diverged"
#: ... or in no conversation of the recording (``Call.conversation`` is empty and
#: ``Call.position`` the request's 0-based place in the run, in arrival order).
UNPLACED = "unplaced"


@dataclass(frozen=True)
class Tolerances:
    """How far the run may drift from the golden before the gate fails (``--max-*``)."""

    #: absolute drop of the reuse ratio (0.02: from 0.95 to below 0.93 fails)
    max_reuse_drop: float = 0.02
    #: relative increase of prompt tokens per task (0.10: 10% more fails)
    max_token_increase: float = 0.10
    #: relative increase of the estimated cost per task (when both sides are priced)
    max_cost_increase: float = 0.10
    #: ``--max-tool-tokens``: the tools' token budget of the named rule ``tool_budget`` (``None``: none)
    max_tool_tokens: int | None = None
    #: ``--keep``: the survival contract of the named rule ``compaction_lost_item`` -- the
    #: declarations of ``CompactionConfig(keep=...)`` (``compaction/survival.py``); empty: none
    keep: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.keep:  # a bad declaration is said before the agent runs, not after
            contract(self.keep)


@dataclass(frozen=True)
class Call:
    """One model call of a golden or a run, placed in its conversation."""

    conversation: str
    position: int
    request: AuditRequest
    #: :data:`ANSWERED`, :data:`DIVERGED` or :data:`UNPLACED`
    placed: str = ANSWERED


@dataclass(frozen=True)
class Regression:
    """One regression: ``rule`` (``prefix``, ``append_only``, ``reuse``, ``tokens``,
    ``cost``), one printable line, and its facts for ``--json``."""

    rule: str
    line: str
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "line": self.line, **dict(self.details)}


@dataclass(frozen=True)
class Figures:
    """One side's totals, by ctxwright's count."""

    calls: int
    conversations: int
    prompt_tokens: int
    reusable_tokens: int
    cost: float | None
    causes: Mapping[str, int]

    @property
    def reuse(self) -> float | None:
        return self.reusable_tokens / self.prompt_tokens if self.prompt_tokens else None

    @property
    def tokens_per_task(self) -> float | None:
        return self.prompt_tokens / self.conversations if self.conversations else None

    @property
    def cost_per_task(self) -> float | None:
        return self.cost / self.conversations if self.cost is not None and self.conversations else None

    def to_json(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "conversations": self.conversations,
            "prompt_tokens": self.prompt_tokens,
            "reusable_tokens": self.reusable_tokens,
            "reuse": None if self.reuse is None else round(self.reuse, 6),
            "tokens_per_task": None if self.tokens_per_task is None else round(self.tokens_per_task, 3),
            "cost_per_task": None if self.cost_per_task is None else round(self.cost_per_task, 8),
            "causes": dict(self.causes),
        }


@dataclass(frozen=True)
class Judgement:
    regressions: tuple[Regression, ...]
    golden: Figures
    run: Figures
    #: why the run could not be judged in full (one line each); empty when it could
    unjudged: tuple[str, ...] = ()
    #: what the tolerances compared when it is not ``golden`` and ``run`` whole: the golden's
    #: calls at the places the run's answered calls were, and those calls (see the module docstring)
    compared: tuple[Figures, Figures] | None = None

    @property
    def exit_code(self) -> int:
        """0: every rule holds; 1: a regression; 2: the run could not be judged."""
        if self.regressions:
            return 1
        return 2 if self.unjudged else 0

    @property
    def verdict(self) -> str:
        return {0: "pass", 1: "fail", 2: "error"}[self.exit_code]

    def headline(self) -> str:
        """The first line the gate prints: the verdict and what it rests on."""
        g, r = self.golden, self.run
        if self.regressions:
            n = len(self.regressions)
            return f"FAIL: {counted(n, 'cache regression')} in {counted(r.calls, 'call')} (golden: {g.calls})"
        if self.unjudged:
            return f"ERROR: the run could not be judged: {self.unjudged[0]}"
        reuse = "" if r.reuse is None else f", reuse {r.reuse:.3f} (golden {_f(g.reuse)})"
        cost = (
            "" if r.cost_per_task is None else f", ${r.cost_per_task:.4f} per task (golden ${_f(g.cost_per_task, 4)})"
        )
        return (
            f"PASS: {counted(r.calls, 'call')}, prefix identical, append-only{reuse}, "
            f"{_n(r.tokens_per_task)} prompt tokens per task (golden {_n(g.tokens_per_task)}){cost}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "headline": self.headline(),
            "regressions": [x.to_json() for x in self.regressions],
            "unjudged": list(self.unjudged),
            "golden": self.golden.to_json(),
            "run": self.run.to_json(),
            **(
                {"compared": {"golden": self.compared[0].to_json(), "run": self.compared[1].to_json()}}
                if self.compared is not None
                else {}
            ),
        }


# -- reading both sides -----------------------------------------------------------------------


def calls_of(conversations: Iterable[tuple[str, Sequence[Mapping[str, Any]]]]) -> tuple[list[Call], list[str]]:
    """The calls of ``(conversation id, its records in order)`` pairs, read by the audit's own
    reader (``audit/logs.py``: one reader per conversation, so a Responses request that names
    its previous response is expanded within its thread), and the problems met, one line each.
    """
    calls: list[Call] = []
    problems: list[str] = []
    for conv, records in conversations:
        position = 0
        for item in read_records(list(records)):
            if isinstance(item, ParseProblem):
                problems.append(f"conversation {conv}, call {item.line - 1}: {item.message}")
                continue
            calls.append(Call(conv, position, counted_here(item, conv)))
            position += 1
    return calls, problems


def counted_here(req: AuditRequest, conversation: str | None) -> AuditRequest:
    """The request without its recorded usage (see the module docstring), in ``conversation``
    (``None``: in none the replay knows)."""
    return replace(
        req,
        cached_tokens=None,
        prompt_tokens=None,
        completion_tokens=None,
        usage_split=None,
        provider_cache=None,
        reusable_tokens_hint=None,
        conversation=conversation,
    )


# -- the rules --------------------------------------------------------------------------------


def judge(
    golden: Sequence[Call],
    run: Sequence[Call],
    *,
    tolerances: Tolerances | None = None,
    pricing: Pricing | None = None,
    counter: TokenCounter | None = None,
) -> Judgement:
    """The regressions of ``run`` against ``golden`` (see the module docstring)."""
    tol = tolerances or Tolerances()
    pricing = pricing or Pricing()
    counter = counter or TokenCounter()
    g_rows, g_fig = _audit(golden, pricing, counter)
    r_rows, r_fig = _audit_run(run, pricing, counter)
    by_place = {(c.conversation, c.position): c for c in golden}
    answered = [c for c in run if c.placed == ANSWERED]
    places = {(c.conversation, c.position) for c in answered}
    matched = [c for c in golden if (c.conversation, c.position) in places]
    compared = None
    if len(matched) < len(golden) or len(answered) < len(run):
        compared = (_audit(matched, pricing, counter)[1], _audit(answered, pricing, counter)[1])
    reg_tolerances = tolerance_regressions(*(compared or (g_fig, r_fig)), tol)
    if compared is not None:
        over = (
            f" (over the {counted(compared[1].calls, 'call')} the replay answered, and the golden's at the same places)"
        )
        reg_tolerances = [replace(r, line=r.line + over) for r in reg_tolerances]
    regressions = [
        *prefix_regressions(golden, run, by_place),
        *append_regressions(
            run, r_rows, {(c.conversation, c.position): row for c, row in zip(golden, g_rows, strict=True)}
        ),
        *reg_tolerances,
        *named_regressions(golden, run, tol),
    ]
    return Judgement(tuple(regressions), g_fig, r_fig, tuple(coverage_problems(golden, answered)), compared)


def _audit(calls: Sequence[Call], pricing: Pricing, counter: TokenCounter) -> tuple[list[AuditRow], Figures]:
    auditor = Auditor(counter)
    rows = [auditor.add(c.request) for c in calls]
    s = auditor.summary(pricing)
    return rows, Figures(
        calls=len(calls),
        conversations=len({c.conversation for c in calls}),
        prompt_tokens=s.prompt_tokens,
        reusable_tokens=s.reusable_tokens,
        cost=s.est_cost,
        causes=dict(s.causes),
    )


def _audit_run(run: Sequence[Call], pricing: Pricing, counter: TokenCounter) -> tuple[list[AuditRow], Figures]:
    """Every request of a run (in arrival order), each with its append-only row: a placed one
    audited in its conversation, an unplaced one after the run's previous request
    (:func:`_after_previous`). The totals count each unplaced request as a conversation of its
    own (the replay found it in none); the causes are the judged ones."""
    auditor = Auditor(counter)
    rows: list[AuditRow] = []
    prev: AuditRequest | None = None
    for i, c in enumerate(run):
        if c.placed == UNPLACED:
            auditor.add(replace(c.request, conversation=f"{UNPLACED} {i}"))
            rows.append(_after_previous(prev, c.request, counter))
        else:
            rows.append(auditor.add(c.request))
        prev = c.request
    s = auditor.summary(pricing)
    causes: dict[str, int] = {}
    for row in rows:
        causes[row.cause] = causes.get(row.cause, 0) + 1
    return rows, Figures(
        calls=len(run),
        conversations=len({(c.conversation, c.position if c.placed == UNPLACED else 0) for c in run}),
        prompt_tokens=s.prompt_tokens,
        reusable_tokens=s.reusable_tokens,
        cost=s.est_cost,
        causes=causes,
    )


def _after_previous(prev: AuditRequest | None, cur: AuditRequest, counter: TokenCounter) -> AuditRow:
    """The audit row of ``cur`` as the next request after ``prev`` -- when it kept at least one
    whole message of it: a rewrite keeps something (a sliding window its newest messages, an
    edit the rest), while a request that shares no message is a new conversation (the audit's
    rule 3) and ``first``. Unlike the audit's rule 2, a request of one message that is
    ``prev``'s first is *not* a new run of the task here: a window that kept only the question
    is the rewrite to name."""
    auditor = Auditor(counter)
    if prev is not None and {canonical_json(m) for m in prev.messages}.intersection(
        canonical_json(m) for m in cur.messages
    ):
        auditor.add(replace(prev, conversation="previous"))
    return auditor.add(replace(cur, conversation="previous"))


def prefix_regressions(
    golden: Sequence[Call], run: Sequence[Call], by_place: Mapping[tuple[str, int], Call]
) -> list[Regression]:
    """Every change of the frozen prefix against the golden's call at the same place, once
    per distinct change, with the calls it affects."""
    first_of: dict[str, Call] = {}
    for c in golden:
        first_of.setdefault(c.conversation, c)
    found: dict[str, tuple[Regression, list[str]]] = {}
    for c in run:
        if c.placed == UNPLACED:
            continue  # in no recorded conversation: no golden call to compare its prefix with
        g = by_place.get((c.conversation, c.position)) or first_of.get(c.conversation)
        if g is None:
            continue
        here = f"call {c.position + 1} of {c.conversation}"  # 1-based, as the replay names calls
        for reg in prefix_changes(g.request, c.request):
            if reg.line in found:
                found[reg.line][1].append(here)
            else:
                found[reg.line] = (reg, [here])
    out = []
    for reg, where in found.values():
        calls = where[0] if len(where) == 1 else f"{len(where)} calls, the first {where[0]}"
        out.append(replace(reg, line=f"{reg.line} (on {calls})", details={**reg.details, "calls": where}))
    return out


def prefix_changes(
    g: AuditRequest,
    r: AuditRequest,
    *,
    rule: str = "prefix",
    head: str = "prefix",
    extra: Mapping[str, Any] | None = None,
) -> list[Regression]:
    """Each change of ``r``'s frozen prefix against ``g``'s -- segment by segment
    (``ci/segments.py``), then each option that is part of the cached prompt -- as a regression
    of ``rule`` whose line starts with ``head``. The gate compares the run with the golden
    (``prefix``); resume parity compares the first request after a resume with the last one
    before the stop (``resume``, ``ci/resume.py``)."""
    more = dict(extra or {})
    out: list[Regression] = []
    if g.system != r.system or g.tools != r.tools:
        provider = r.provider or g.provider
        for ch in diff_prefix((g.system, g.tools), (r.system, r.tools), provider=provider):
            details = {
                **more,
                "segment": ch.segment,
                "kind": ch.change,
                "path": ch.path,
                "offset": ch.offset,
                "before": ch.before,
                "after": ch.after,
                "was": ch.was,
            }
            out.append(Regression(rule, f"{head}: {ch.line}", details))
    names = prompt_options(changed_options(g.options, r.options))
    for name in names:
        before = (g.options or {}).get(name)
        after = (r.options or {}).get(name)
        out.append(
            Regression(
                rule,
                f"{head}: option {name!r} changed: {_short(before)} -> {_short(after)}",
                {
                    **more,
                    "segment": f"option {name}",
                    "kind": "changed",
                    "path": f"$.{name}",
                    "before": before,
                    "after": after,
                },
            )
        )
    return out


def append_regressions(
    run: Sequence[Call], rows: Sequence[AuditRow], golden_rows: Mapping[tuple[str, int], AuditRow]
) -> list[Regression]:
    """Each request that breaks its conversation where the golden does not (``run`` in
    arrival order, ``rows`` its audit rows: see :func:`judge`)."""
    out: list[Regression] = []
    for n, (c, row) in enumerate(zip(run, rows, strict=True), start=1):
        if row.cause in CONTINUES:
            continue
        g = golden_rows.get((c.conversation, c.position)) if c.placed != UNPLACED else None
        if g is not None and g.cause == row.cause:
            continue  # the golden breaks here too, for the same cause (a compaction it also made)
        d = row.first_divergence
        at = f" at {d.where}" if d is not None else ""
        text = f": {_change(d)}" if d is not None and (d.before or d.after) else ""
        if c.placed == UNPLACED:
            call = f"request {n} of the run (in no recorded conversation; judged after the request before it)"
        else:
            call = f"call {c.position + 1} of conversation {c.conversation}"
        left = " -- where the run left the recording" if c.placed != ANSWERED else ""
        out.append(
            Regression(
                "append_only",
                f"append-only: {call} is {row.cause}{at}{text}{left}",
                {
                    "conversation": c.conversation if c.placed != UNPLACED else None,
                    "position": c.position if c.placed != UNPLACED else None,
                    "request": n,
                    "placed": c.placed,
                    "cause": row.cause,
                    "where": d.where if d is not None else None,
                    "before": d.before if d is not None else None,
                    "after": d.after if d is not None else None,
                    "golden_cause": g.cause if g is not None else None,
                },
            )
        )
    return out


def tolerance_regressions(g: Figures, r: Figures, tol: Tolerances) -> list[Regression]:
    """Reuse, prompt tokens per task and cost per task against the golden's."""
    out: list[Regression] = []
    if g.reuse is not None and r.reuse is not None and g.reuse - r.reuse > tol.max_reuse_drop + 1e-12:
        out.append(
            Regression(
                "reuse",
                f"reuse dropped from {g.reuse:.3f} to {r.reuse:.3f} (more than {tol.max_reuse_drop:g})",
                {"golden": g.reuse, "run": r.reuse, "max_drop": tol.max_reuse_drop},
            )
        )
    for rule, name, before, after, limit, fmt in (
        ("tokens", "prompt tokens per task", g.tokens_per_task, r.tokens_per_task, tol.max_token_increase, _n),
        ("cost", "estimated cost per task", g.cost_per_task, r.cost_per_task, tol.max_cost_increase, _usd),
    ):
        if before is None or after is None or before <= 0:
            continue
        grew = after / before - 1.0
        if grew > limit + 1e-12:
            out.append(
                Regression(
                    rule,
                    f"{name} rose {grew:+.1%}, from {fmt(before)} to {fmt(after)} (more than {limit:+.0%})",
                    {"golden": before, "run": after, "increase": round(grew, 6), "max_increase": limit},
                )
            )
    return out


#: rules not run between the golden and the run: a tool description the developer changed since
#: the golden is the ``prefix`` rule's (a rug pull is a change *within* a session, or against the
#: lock's approved hashes), and the tool budget holds each request alone
NOT_AGAINST_GOLDEN = frozenset({"mcp_rug_pull", "tool_budget", "compaction_lost_item"})
#: rules that hold the run to what the user declared (``--max-tool-tokens``, ``--keep``), not to
#: the golden: they fail whatever the golden did -- a compaction the golden's build made that
#: lost a declared item is the bug the contract is there to catch, not a baseline
USER_DECLARED = frozenset({"tool_budget", "compaction_lost_item"})


def named_regressions(golden: Sequence[Call], run: Sequence[Call], tol: Tolerances) -> list[Regression]:
    """The named rules (``audit/rules/``) on each request of the run -- after the run's previous
    request of its conversation, and after the golden's request at the same place (a date
    written into the prompt since the golden, a per-session id, tools sorted differently: each
    the same on every call of the run, so only the golden shows the change) -- against the same
    rules on the golden's own calls: a rule that fires on the run where it does not on the golden
    is a regression naming the rule, where, and its fix -- once per distinct finding, with the
    calls it affects. The tool budget (``--max-tool-tokens``) is the user's, not the golden's:
    it fails whatever the golden did, and so does the survival contract (``--keep``: a
    compaction of the run that takes a declared item out of the request, ``compaction_lost_item``)."""
    settings = Settings(tol.max_tool_tokens, keep=contract(tol.keep) if tol.keep else None)
    by_place = {(c.conversation, c.position): c for c in golden}
    on_golden: dict[tuple[str, int], set[str]] = {}
    last: dict[str, AuditRequest] = {}
    for c in golden:
        on_golden[(c.conversation, c.position)] = {
            f.rule for f in run_rules(last.get(c.conversation), c.request, settings)
        }
        last[c.conversation] = c.request
    found: dict[tuple[str, str], tuple[Finding, list[str]]] = {}
    last = {}
    for c in run:
        fired = run_rules(last.get(c.conversation), c.request, settings)
        last[c.conversation] = c.request
        g = by_place.get((c.conversation, c.position))
        if g is not None:  # and against the golden's request at this place: what the change under test did
            named = {f.rule for f in fired}
            fired += [
                f
                for f in run_rules(g.request, c.request, settings)
                if f.rule not in named and f.rule not in NOT_AGAINST_GOLDEN
            ]
        golden_fired = on_golden.get((c.conversation, c.position), set())
        here = f"call {c.position + 1} of {c.conversation or 'the run'}"
        for f in fired:
            if f.rule in golden_fired and f.rule not in USER_DECLARED:
                continue
            if (f.rule, f.line) in found:
                found[(f.rule, f.line)][1].append(here)
            else:
                found[(f.rule, f.line)] = (f, [here])
    out = []
    for f, where in found.values():
        calls = where[0] if len(where) == 1 else f"{len(where)} calls, the first {where[0]}"
        out.append(
            Regression(
                f.rule,
                f"{f.rule}: {f.line} (on {calls}); fix: {f.fix}",
                {"named_rule": True, "severity": f.severity, "fix": f.fix, **dict(f.details), "calls": where},
            )
        )
    return out


def coverage_problems(golden: Sequence[Call], run: Sequence[Call]) -> list[str]:
    """Why the run does not cover the golden: a conversation it never started, or one it
    stopped before the golden did."""
    made: dict[str, int] = {}
    for c in run:
        made[c.conversation] = max(made.get(c.conversation, 0), c.position + 1)
    wanted: dict[str, int] = {}
    for c in golden:
        wanted[c.conversation] = max(wanted.get(c.conversation, 0), c.position + 1)
    out = []
    if not run:
        out.append("the agent made no model call (is it reading OPENAI_BASE_URL / ANTHROPIC_BASE_URL?)")
    else:
        for conv, n in wanted.items():
            got = made.get(conv, 0)
            if got < n:
                out.append(f"conversation {conv}: the run made {got} of its {counted(n, 'recorded call')}")
    return out


# -- text -------------------------------------------------------------------------------------


def _change(d: Divergence) -> str:
    return f"{_short(d.before, tail=True)} | {_short(d.after)}"


def _short(value: Any, *, tail: bool = False) -> str:
    text = value if isinstance(value, str) else repr(value)
    text = text.replace("\n", "⏎").replace("\t", "⇥")
    if len(text) > CONTEXT:
        text = ("…" + text[-CONTEXT:]) if tail else (text[:CONTEXT] + "…")
    return repr(text)


def _n(v: float | None) -> str:
    return "?" if v is None else f"{round(v):,}"


def _usd(v: float | None) -> str:
    return "?" if v is None else f"${v:.4f}"


def _f(v: float | None, digits: int = 3) -> str:
    return "?" if v is None else f"{v:.{digits}f}"


__all__ = [
    "ANSWERED",
    "DIVERGED",
    "UNPLACED",
    "Call",
    "Figures",
    "Judgement",
    "Regression",
    "Tolerances",
    "append_regressions",
    "calls_of",
    "counted_here",
    "coverage_problems",
    "judge",
    "named_regressions",
    "prefix_changes",
    "prefix_regressions",
    "tolerance_regressions",
]
