"""Experiment 2-6 of the book: skills by progressive disclosure, against pasting every skill
into the system prompt, against no skills -- and what adding a skill mid-session costs.

Twenty skills are installed in a temporary folder (``skill_corpus.py``: the example
``house-style`` plus nineteen more, bodies of a few hundred tokens each); writing tasks need
the instructions of one of them (a title line, a fixed sign-off, a banned word...), and the
answer is checked by code. Three arms, each a real ``Harness`` session per task:

* ``catalog`` -- ``Harness(skills=[DIR])``: the catalog (names, descriptions, locations) as a
  ``<system-reminder>`` user message, the body only when the model calls ``Skill(name)``;
* ``paste_all`` -- every body pasted into the system prompt, no tools;
* ``none`` -- no skills.

Per arm: the task score (share of the skill's rules the answer meets), tasks fully right,
prompt tokens per call, and reuse efficiency (Σcached ÷ Σreusable, as the audit counts them).
The arms run one after another on one model object, so each arm's shared prefix stays cached
across its tasks, as it would in a long-running agent.

Then the cache cost of adding a twenty-first skill mid-session, in each catalog mode:

* reminder (the default): the session is resumed with the new folder present; one small
  reminder is appended and the next request extends the cached one;
* prefix (the catalog in the ``Skill`` tool's description): the prefix changes, so the
  conversation continued under the new prefix re-prefills everything after the tool
  definition.

Targets: reuse across the addition ≥ 0.99 in reminder mode; at most 15 tokens of catalog
framing per skill; with 20 skills, prompt tokens per call ≤ 25% of pasting every body.

On the embedded model the first call of a ``catalog`` task is forced to be ``Skill`` (the 135M
model cannot plan a tool call; it still has to pick the name); on a served model
(``--base-url``) the model decides.

On a loaded machine, ``--count-only`` (embedded model only) counts the paste-all arm's prompts
and the prefix-mode addition with the model's chat template and tokenizer instead of running
them: the prompt sizes and the tokens llama.cpp would reuse (the longest common token prefix)
are exact, the paste-all score is not measured. ``--scripted`` checks the plumbing without a
model.

    python benchmarks/skills.py [--quick] [--count-only] [--json PATH] [--base-url URL --model NAME]
"""

from __future__ import annotations

import argparse
import inspect
import json
import re
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

import skill_corpus as corpus
from common import add_backend_args, console, machine, make_backend, median, save, table
from ctxwright import Harness
from ctxwright.audit.compare import cache_ratios
from ctxwright.backends.scripted import ScriptedBackend, call
from ctxwright.core.events import AssistantEvent, UserEvent
from ctxwright.core.messages import Message
from ctxwright.core.request import ChatRequest
from ctxwright.skills import load_skills
from ctxwright.skills.loader import Skill
from ctxwright.skills.tools import SKILL_TOOL, SkillTools, catalog_message
from ctxwright.tools.registry import Tool

ARMS = ["catalog", "paste_all", "none"]
SYSTEM = (
    "You are the writing assistant of Northwind, a small software company. Write what the user asks for and "
    "reply with the finished text only."
)
#: Targets of the experiment.
MAX_FRAMING_PER_SKILL = 15
MIN_REUSE_ACROSS_ADDITION = 0.99
MAX_SHARE_OF_PASTE_ALL = 0.25
#: The embedded model's window: pasting twenty bodies needs more than SmolLM2's 8,192.
EMBEDDED_N_CTX = 16384


def pasted_system(skills: list[Skill]) -> str:
    """The paste-all arm's system prompt: every skill's body, under its name."""
    parts = [f'<skill name="{s.name}">\n{s.body.strip()}\n</skill>' for s in skills]
    return SYSTEM + "\n\nFollow the skill below whose description matches the task.\n\n" + "\n\n".join(parts)


def prefix_mode_available() -> bool:
    return "skills_catalog" in inspect.signature(Harness.__init__).parameters


def prefix_tools(skills: list[Skill]) -> list[Tool]:
    """Prefix mode built from the public pieces, for a build without ``skills_catalog``: the
    ``Skill`` tool's description carries the catalog, so it is frozen with the prefix."""
    tools = SkillTools(skills).tools()
    skill_tool = tools[0]
    listing = catalog_message(skills).split("<available_skills>", 1)[1].rsplit("</available_skills>", 1)[0]
    description = f"{skill_tool.description}\n<available_skills>{listing}</available_skills>"
    return [Tool.from_function(skill_tool.func, name=SKILL_TOOL, description=description), tools[1]]


class Runner:
    def __init__(self, args: argparse.Namespace, backend: Any, work: Path) -> None:
        self.args, self.backend, self.work = args, backend, work
        self.embedded = backend.name == "embedded"

    def options(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "compaction": False,
            "status": False,
            "todo": False,
            "delegate": False,
            "max_tokens": self.args.max_tokens,
            "max_iterations": 6,
        }

    def first_choice(self) -> str | None:
        return SKILL_TOOL if self.embedded else None

    def harness(self, arm: str, skills_dir: Path, skills: list[Skill], db: Path | None = None, **kw: Any) -> Harness:
        o = {**self.options(), "db": db, **kw}
        if arm == "catalog":
            h = Harness(system=SYSTEM, tools=[], skills=[skills_dir], tool_choice_first=self.first_choice(), **o)
            if sorted(s.name for s in h.skills) != sorted(s.name for s in skills):
                raise SystemExit(
                    f"expected {len(skills)} skills, the harness loaded {len(h.skills)}: {h.skill_warnings}"
                )
            return h
        if arm == "paste_all":
            return Harness(system=pasted_system(skills), tools=[], **o)
        return Harness(system=SYSTEM, tools=[], **o)

    def counted(self, request: ChatRequest) -> list[int]:
        """``--count-only``: the prompt's tokens as the embedded backend would send them
        (its chat template and tokenizer on the exact request), without running the model."""
        return list(self.backend.tokenize(self.backend.render_prompt(request)))

    def task(self, arm: str, task: corpus.Task, skills_dir: Path, skills: list[Skill]) -> dict[str, Any]:
        if arm == "paste_all" and self.args.count_only:
            msgs = (Message(role="system", content=pasted_system(skills)), Message(role="user", content=task.prompt))
            n = len(self.counted(ChatRequest(messages=msgs, tools=(), tool_choice="auto")))
            call = {"prompt_tokens": n, "cached_tokens": None, "reusable_tokens": None, "prefill_ms": None}
            return {
                "skill": task.skill,
                "counted_only": True,
                "score": None,
                "passed": None,
                "checks": None,
                "skills_loaded": [],
                "right_skill_loaded": False,
                "stop_reason": None,
                "answer": None,
                "calls": [{**call, "wall_ms": None}],
            }
        with self.harness(arm, skills_dir, skills) as h:
            result = h.run(task.prompt)
            loaded = [
                json.loads(tc.arguments or "{}").get("name")
                for ev in h.session.events
                if isinstance(ev, AssistantEvent)
                for tc in ev.message.tool_calls
                if tc.name == SKILL_TOOL
            ]
        checks = corpus.check(task, result.final_answer)
        return {
            "skill": task.skill,
            "checks": checks,
            "score": round(sum(checks.values()) / len(checks), 4),
            "passed": all(checks.values()),
            "skills_loaded": loaded,
            "right_skill_loaded": task.skill in loaded,
            "stop_reason": result.stop_reason,
            "answer": result.final_answer,
            "calls": [
                {
                    "prompt_tokens": c.prompt_tokens,
                    "cached_tokens": c.cached_tokens,
                    "reusable_tokens": c.reusable_tokens,
                    "prefill_ms": c.prefill_ms,
                    "wall_ms": c.wall_ms,
                }
                for c in result.calls
            ],
        }

    # -- the addition of one skill mid-session ------------------------------------------
    def reset(self) -> None:
        if hasattr(self.backend, "reset_cache"):
            self.backend.reset_cache()

    def add_reminder(self, folder: Path, skills: list[Skill]) -> dict[str, Any]:
        """A session with the twenty skills of ``folder`` runs a task; a twenty-first skill folder
        appears; the session is resumed and runs a task that needs the new skill. Run right after
        the catalog arm, whose sessions share this one's prefix and catalog (so it starts warm)."""
        db = self.work / "add-reminder.db"
        with self.harness("catalog", folder, skills, db=db) as h1:
            r1 = h1.run(corpus.TASKS[0].prompt)
            sid = h1.session_id
            self.conversation = [
                m
                for m in h1.session.messages()
                if not (m.role == "user" and (m.content or "").startswith("<system-reminder>"))
            ]
        corpus.write_skill(folder, corpus.ADDED)
        with Harness.resume(
            sid, tools=[], db=db, skills=[folder], tool_choice_first=self.first_choice(), **self.options()
        ) as h2:
            r2 = h2.run(corpus.ADDED_TASK.prompt)
            reminders = [
                ev.message.content or ""
                for ev in h2.session.events
                if isinstance(ev, UserEvent) and ev.skills_announced is not None
            ]
            added_tokens = h2.agent.counter.count(reminders[-1]) if len(reminders) > 1 else None
            first_tokens = h2.agent.counter.count(reminders[0]) if reminders else None
            summary = h2.agent.auditor.summary()
            loaded_new = any(
                tc.name == SKILL_TOOL and corpus.ADDED.name in (tc.arguments or "")
                for ev in h2.session.events
                if isinstance(ev, AssistantEvent)
                for tc in ev.message.tool_calls
            )
        before, after = r1.calls[-1], r2.calls[0]
        checks = corpus.check(corpus.ADDED_TASK, r2.final_answer)
        return {
            "mode": "reminder",
            "how": "Harness.resume with the new skill folder present",
            "reminders": len(reminders),
            "catalog_tokens_at_start": first_tokens,
            "tokens_added": added_tokens,
            **across(before.prompt_tokens, after.prompt_tokens, after.cached_tokens, after.reusable_tokens),
            "session_reuse_efficiency": summary.efficiency,
            "new_skill_loaded": loaded_new,
            "new_task_score": round(sum(checks.values()) / len(checks), 4),
        }

    def add_prefix(self, skills: list[Skill]) -> dict[str, Any]:
        """The same, with the catalog in the ``Skill`` tool's description: the request the
        session would send to continue with the new skill has a new prefix."""
        folder = self.work / "add-prefix"
        corpus.install(folder)
        if self.args.count_only:
            return self.add_prefix_counted(folder, skills)
        self.reset()
        native = prefix_mode_available()
        if native:
            h1 = self.harness("catalog", folder, skills, skills_catalog="prefix")
        else:
            h1 = Harness(
                system=SYSTEM, tools=prefix_tools(skills), tool_choice_first=self.first_choice(), **self.options()
            )
        with h1:
            r1 = h1.run(corpus.TASKS[0].prompt)
            history = h1.session.messages()
        corpus.write_skill(folder, corpus.ADDED)
        skills21 = load_skills([folder]).skills
        if native:
            with Harness(
                system=SYSTEM, tools=[], skills=[folder], skills_catalog="prefix", db=None, **self.options()
            ) as h:
                tools = h.session.prefix.tools
                system = h.session.prefix.system_message()
        else:
            tools = tuple(t.spec for t in prefix_tools(skills21))
            system = history[0]
        request = ChatRequest(
            messages=(system, *history[1:], Message(role="user", content=corpus.ADDED_TASK.prompt)),
            tools=tools,
            tool_choice=self.first_choice() or "auto",
            max_tokens=self.args.max_tokens,
            temperature=0.0,
        )
        after = self.backend.complete(request).usage
        reusable = after.raw.get("reusable_tokens") if isinstance(after.raw, dict) else None
        before = r1.calls[-1]
        return {
            "mode": "prefix",
            "how": (
                "Harness(skills_catalog='prefix'); the conversation continued under the new prefix"
                if native
                else "built from the public pieces (catalog in the Skill tool's description; this build "
                "has no skills_catalog option); the conversation continued under the new prefix"
            ),
            "tokens_added": None,
            **across(before.prompt_tokens, after.prompt_tokens, after.cached_tokens, reusable),
        }

    def add_prefix_counted(self, folder: Path, skills: list[Skill]) -> dict[str, Any]:
        """``--count-only``: the reminder session's conversation (without its catalog message)
        under the prefix-mode tools of twenty skills, then of twenty-one; llama.cpp reuses the
        longest common token prefix with what it holds, so that is what is counted as cached."""
        native = prefix_mode_available()
        tools20 = self.prefix_specs(folder, skills)
        corpus.write_skill(folder, corpus.ADDED)
        tools21 = self.prefix_specs(folder, load_skills([folder]).skills)
        choice = self.first_choice() or "auto"
        conv = tuple(self.conversation)
        before = self.counted(ChatRequest(messages=conv, tools=tools20, tool_choice=choice))
        after_msgs = (*conv, Message(role="user", content=corpus.ADDED_TASK.prompt))
        after = self.counted(ChatRequest(messages=after_msgs, tools=tools21, tool_choice=choice))
        how = "Harness(skills_catalog='prefix') tools" if native else "tools built from the public pieces"
        common = 0
        for x, y in zip(before, after[:-1], strict=False):
            if x != y:
                break
            common += 1
        return {
            "mode": "prefix",
            "how": f"counted, not run (--count-only): the reminder session's conversation under {how}",
            "tokens_added": None,
            **across(len(before), len(after), common, common),
        }

    def prefix_specs(self, folder: Path, skills: list[Skill]) -> tuple[Any, ...]:
        """The prefix-mode tool specs for the skills of ``folder`` (no model call)."""
        if not prefix_mode_available():
            return tuple(t.spec for t in prefix_tools(skills))
        with Harness(system=SYSTEM, tools=[], skills=[folder], skills_catalog="prefix", **self.options()) as h:
            return tuple(h.session.prefix.tools)


def scripted_backend() -> ScriptedBackend:
    """The ``--scripted`` policy: ``Skill(best match)`` once per task when the tool is offered, then
    the task's text as the answer. Token counts are the scripted backend's estimates."""
    defs = [*corpus.STYLE, corpus.ADDED, *corpus.NEIGHBOURS]
    descriptions = {d.name: d.description for d in defs}
    descriptions["house-style"] = corpus.house_style_description()

    def words(text: str) -> set[str]:
        return set(re.findall(r"[a-z]{4,}", text.lower()))

    def reply(request: ChatRequest) -> Message:
        last = max(i for i, m in enumerate(request.messages) if m.role == "user")
        task = request.messages[last].content or ""
        loaded = any(m.role == "tool" for m in request.messages[last:])
        if any(t.name == SKILL_TOOL for t in request.tools) and request.tool_choice != "none" and not loaded:
            best = max(descriptions, key=lambda n: len(words(task) & words(descriptions[n])))
            return Message(role="assistant", tool_calls=(call(SKILL_TOOL, {"name": best}),))
        return Message(role="assistant", content=task)

    return ScriptedBackend([reply], model="scripted-skill-picker")


def across(before_prompt: int | None, prompt: int | None, cached: int | None, reusable: int | None) -> dict[str, Any]:
    """The first request after the addition against the last one before it: how much of the
    earlier (cached) request it reused, and how many tokens had to be prefilled."""
    return {
        "prompt_before": before_prompt,
        "prompt_after": prompt,
        "cached_after": cached,
        "reusable_after": reusable,
        # what the provider reused of the request it had cached; a stable prefix keeps it all
        "reuse_across_addition": round(min(1.0, cached / before_prompt), 4)
        if cached is not None and before_prompt
        else None,
        "reuse_efficiency": round(cached / reusable, 4) if cached is not None and reusable else None,
        "tokens_prefilled": prompt - cached if prompt is not None and cached is not None else None,
    }


def catalog_framing(skills: list[Skill], count: Any) -> dict[str, Any]:
    """Tokens of the catalog message minus the tokens of what it lists (names, descriptions,
    locations): the framing, in all and per skill."""
    text = catalog_message(skills)
    total = count(text)
    content = sum(count(s.name) + count(s.description) + count(str(s.folder / "SKILL.md")) for s in skills)
    fixed = count(catalog_message([]))  # the intro and the wrapper, paid once per catalog
    return {
        "skills": len(skills),
        "catalog_tokens": total,
        "listed_tokens": content,
        "framing_tokens": total - content,
        "framing_per_skill": round((total - content) / len(skills), 2),
        "framing_fixed_tokens": fixed,
        "framing_per_entry": round((total - content - fixed) / len(skills), 2),
        "body_tokens": [count(s.body) for s in skills],
    }


def summarise(arm: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    calls = [c for r in runs for c in r["calls"]]
    prompts = [c["prompt_tokens"] for c in calls if c["prompt_tokens"] is not None]
    known = [c for c in calls if c["cached_tokens"] is not None]
    hit, eff = cache_ratios(
        sum(c["cached_tokens"] for c in known),
        sum(c["prompt_tokens"] or 0 for c in known),
        sum(c["reusable_tokens"] or 0 for c in known),
    )
    return {
        "arm": arm,
        "tasks": len(runs),
        "score": round(statistics.mean(r["score"] for r in runs), 4)
        if all(r["score"] is not None for r in runs)
        else None,
        "tasks_passed": sum(bool(r["passed"]) for r in runs),
        "counted_only": any(r.get("counted_only") for r in runs),
        "right_skill_loaded": sum(r["right_skill_loaded"] for r in runs) if arm == "catalog" else None,
        "calls": len(calls),
        "prompt_tokens_per_call": round(sum(prompts) / len(prompts), 1) if prompts else None,
        "median_prompt_tokens_per_call": median(prompts),
        "prompt_tokens_per_task": round(sum(prompts) / len(runs), 1) if prompts else None,
        "hit_ratio": hit if known else None,
        "reuse_efficiency": eff if known else None,
        "median_prefill_ms": median(c["prefill_ms"] for c in calls),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_backend_args(p)
    p.add_argument("--quick", action="store_true", help="two tasks per arm instead of eight")
    p.add_argument("--tasks", type=int, help="tasks per arm (default 8, --quick 2)")
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--keep", action="store_true", help="keep the temporary skills folder")
    p.add_argument(
        "--count-only",
        action="store_true",
        help="embedded model only, for a loaded machine: count the paste-all arm's prompts and the prefix-mode "
        "addition with the model's template and tokenizer instead of running them (no scores for paste-all)",
    )
    p.add_argument(
        "--scripted",
        action="store_true",
        help="plumbing check without a model: a scripted policy loads the skill whose description shares the "
        "most words with the task and echoes the task (its scores say nothing about a model)",
    )
    args = p.parse_args()
    n_tasks = args.tasks or (2 if args.quick else len(corpus.TASKS))
    tasks = corpus.TASKS[:n_tasks]
    arms = [a for a in args.arms.split(",") if a]
    backend = scripted_backend() if args.scripted else make_backend(args, n_ctx=EMBEDDED_N_CTX)
    if args.count_only and backend.name != "embedded":
        raise SystemExit("--count-only needs the embedded model (its template and tokenizer count the prompts)")
    work = Path(tempfile.mkdtemp(prefix="ctxwright-skills-"))
    try:
        skills_dir = work / "skills"
        corpus.install(skills_dir)
        loaded = load_skills([skills_dir])
        if loaded.warnings or len(loaded.skills) != 20:
            raise SystemExit(f"the corpus did not load cleanly: {loaded.warnings}")
        skills = loaded.skills
        runner = Runner(args, backend, work)
        with Harness(system=SYSTEM, tools=[], skills=[skills_dir], **runner.options()) as probe:
            count = probe.agent.counter.count
            counted_by = probe.agent.counter.source
        framing = catalog_framing(skills, count)

        per_arm: dict[str, list[dict[str, Any]]] = {}
        addition: list[dict[str, Any]] = []
        for arm in arms:
            runner.reset()  # each arm starts cold, then keeps its own prefix warm across its tasks
            per_arm[arm] = []
            for task in tasks:
                res = runner.task(arm, task, skills_dir, skills)
                per_arm[arm].append(res)
                console.print(
                    f"[dim]{arm:9s} {task.skill:17s} score {res['score']} loaded {res['skills_loaded']} "
                    f"prompt/call {[c['prompt_tokens'] for c in res['calls']]} cached "
                    f"{[c['cached_tokens'] for c in res['calls']]}  answer: {(res['answer'] or '')[:80]!r}[/]"
                )
            if arm == "catalog":  # right away: its sessions share the catalog arm's prefix, still cached
                addition.append(runner.add_reminder(skills_dir, skills))
        if not addition:
            addition.append(runner.add_reminder(skills_dir, skills))
        addition.append(runner.add_prefix(skills))
        for a in addition:
            console.print(f"[dim]addition {a['mode']}: {a}[/]")
        out = [summarise(arm, per_arm[arm]) for arm in arms]
        by = {o["arm"]: o for o in out}
        paste = by.get("paste_all", {}).get("prompt_tokens_per_call")
        for o in out:
            o["share_of_paste_all"] = (
                round(o["prompt_tokens_per_call"] / paste, 4) if paste and o["prompt_tokens_per_call"] else None
            )

    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    # the mean body size at which the catalog arm would reach the share target exactly
    cat = by.get("catalog", {}).get("prompt_tokens_per_call")
    bodies = sum(framing["body_tokens"])
    break_even = round((cat / MAX_SHARE_OF_PASTE_ALL - (paste - bodies)) / len(skills)) if cat and paste else None
    reminder = addition[0]
    targets = [
        {
            "target": "reuse across the addition (reminder mode)",
            "value": reminder["reuse_across_addition"],
            "limit": f">= {MIN_REUSE_ACROSS_ADDITION}",
            "pass": None
            if reminder["reuse_across_addition"] is None
            else reminder["reuse_across_addition"] >= MIN_REUSE_ACROSS_ADDITION,
        },
        {
            "target": "catalog framing tokens per skill",
            "value": framing["framing_per_skill"],
            "limit": f"<= {MAX_FRAMING_PER_SKILL}",
            "pass": framing["framing_per_skill"] <= MAX_FRAMING_PER_SKILL,
        },
        {
            "target": "catalog prompt tokens per call / paste-all",
            "value": by.get("catalog", {}).get("share_of_paste_all"),
            "limit": f"<= {MAX_SHARE_OF_PASTE_ALL}",
            "pass": None
            if by.get("catalog", {}).get("share_of_paste_all") is None
            else by["catalog"]["share_of_paste_all"] <= MAX_SHARE_OF_PASTE_ALL,
        },
    ]
    title = f"skills · {backend.name} · {backend.model} · {len(tasks)} tasks per arm · 20 skills"
    console.print(
        table(
            title,
            [
                "arm",
                "score",
                "tasks right",
                "right skill loaded",
                "calls",
                "prompt tok/call",
                "× paste-all",
                "cached ÷ prompt",
                "reuse efficiency",
                "median prefill ms",
            ],
            [
                [
                    o["arm"],
                    o["score"],
                    "counted, not run" if o["counted_only"] else f"{o['tasks_passed']}/{o['tasks']}",
                    "-" if o["right_skill_loaded"] is None else f"{o['right_skill_loaded']}/{o['tasks']}",
                    o["calls"],
                    o["prompt_tokens_per_call"],
                    o["share_of_paste_all"],
                    o["hit_ratio"],
                    o["reuse_efficiency"],
                    o["median_prefill_ms"],
                ]
                for o in out
            ],
        )
    )
    console.print(
        table(
            "adding a 21st skill mid-session",
            [
                "catalog mode",
                "prompt before",
                "prompt after",
                "cached after",
                "reuse across",
                "tokens added",
                "tokens prefilled",
            ],
            [
                [
                    a["mode"],
                    a["prompt_before"],
                    a["prompt_after"],
                    a["cached_after"],
                    a["reuse_across_addition"],
                    a["tokens_added"],
                    a["tokens_prefilled"],
                ]
                for a in addition
            ],
        )
    )
    console.print(
        f"catalog of 20 skills: {framing['catalog_tokens']:,} tokens, {framing['listed_tokens']:,} of names, "
        f"descriptions and locations, framing {framing['framing_per_skill']} per skill ({framing['framing_fixed_tokens']} "
        f"once for the intro, {framing['framing_per_entry']} per entry; counted by {counted_by}); "
        f"mean body {statistics.mean(framing['body_tokens']):.0f} tokens; the share target is met from a mean body "
        f"of about {break_even} tokens"
    )
    for t in targets:
        verdict = "?" if t["pass"] is None else ("PASS" if t["pass"] else "FAIL")
        color = "yellow" if t["pass"] is None else ("green" if t["pass"] else "red")
        console.print(f"[{color}]{verdict}[/] {t['target']}: {t['value']} (target {t['limit']})")
    save(
        args,
        {
            "backend": backend.name,
            "model": backend.model,
            "policy": "first call forced to Skill" if runner.embedded else "auto",
            "tasks_per_arm": len(tasks),
            "skills_installed": len(skills),
            "tokens_counted_by": counted_by,
            "arms": out,
            "catalog": {**framing, "mean_body_tokens": round(statistics.mean(framing["body_tokens"]), 1)},
            "break_even_mean_body_tokens": break_even,
            "addition": addition,
            "targets": targets,
            "runs": {arm: per_arm[arm] for arm in arms},
            "machine": machine(),
        },
    )


if __name__ == "__main__":
    main()
