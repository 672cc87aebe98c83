"""The ``ctxwright`` command line: run an agent, list and show stored sessions.

Every command prints one clear line on failure (what was wrong, what to do) and exits
non-zero; nothing already recorded in the store is lost.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text
from rich.traceback import Traceback

from ctxwright.cli.progress import RunPrinter, calls_table
from ctxwright.errors import CtxwrightError

if TYPE_CHECKING:
    from ctxwright.agent.loop import Agent, RunResult

# Rich falls back to 80 columns when stdout is not a terminal (CI logs, `make demo | tee`),
# which folds the per-call table; give it room.
console = Console(highlight=False, width=None if sys.stdout.isatty() else 140)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)  # one line per error, never folded

DEFAULT_PROMPT = "What's the current time and weather in Vancouver?"


def _store(args: argparse.Namespace) -> Any:
    from ctxwright.store.sessions import Store

    return Store(args.db) if args.db else Store()


def _system_text(value: str) -> str:
    """``--system``: the text of an existing file, else the argument itself."""
    path = Path(value).expanduser()
    if not path.is_file():
        return value
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CtxwrightError(
            f"--system {value}: cannot read the file ({exc}); give a readable UTF-8 text file"
        ) from None


def _given(**options: Any) -> dict[str, Any]:
    """The options given on the command line; the Harness decides every other one."""
    return {k: v for k, v in options.items() if v is not None}


def _gate_options(args: argparse.Namespace) -> dict[str, Any]:
    """The confirmation gate's options (``cli/approve.py``): the allowlists given as flags, the
    rules file, the approval mode -- ``ask`` becomes a y/N prompt only on a terminal."""
    from ctxwright.cli.approve import cli_approve

    lists = {
        key: value
        for key, value in (("paths", args.allow_path), ("domains", args.allow_domain), ("hosts", args.allow_host))
        if value
    }
    gated = bool(lists or args.gate_rules or args.approve or args.approve_timeout is not None)
    wants_gate = gated or getattr(args, "defence", None) in ("gate", "provenance", "D4", "D5", "d4", "d5")
    return _given(
        allow=lists or None,
        gate_rules=args.gate_rules,
        approve=cli_approve(args.approve, err_console, timeout_s=args.approve_timeout) if wants_gate else None,
        approve_timeout=args.approve_timeout,
    )


def system_and_tools(args: argparse.Namespace) -> tuple[str | None, list[Any] | None]:
    """``--system`` and ``--tool`` as the Harness takes them (``None``: the defaults)."""
    from ctxwright.tools.imported import import_tool

    tools = [import_tool(spec) for spec in args.tool] if args.tool else None
    system = _system_text(args.system) if args.system is not None else None
    return system, tools


def harness_options(args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`~ctxwright.harness.Harness` keywords of the options :func:`add_run_options`
    defines, only those given (on ``--resume`` the others are the session's)."""
    # only the compaction flags given: on --resume the others are the session's (agent/recipe.py)
    fields = _given(
        result_cap_tokens=args.result_cap,
        trigger_ratio=args.clear_at,
        keep_recent_results=args.keep_results,
        strategy=args.compaction,
    )
    compaction: Any = False if args.no_compaction else (fields or None)
    options = _given(
        backend=args.backend,
        model=args.model,
        base_url=args.base_url,
        api_key_env=args.api_key_env,
        gguf=args.gguf,
        workspace=args.workspace,
        window=args.window,
        summaries=args.summaries,
        read_result=args.read_result,
        status=args.status,
        status_mode=args.status_mode,
        cache_price_ratio=args.cache_price_ratio,
        todo=args.todo,
        delegate=args.delegate,
        skills=args.skills,
        allow_skill_scripts=args.allow_skill_scripts or None,
        skill_script_timeout=args.skill_script_timeout,
        skills_catalog=args.skills_catalog,
        mcp_servers=args.mcp,
        mcp_timeout=args.mcp_timeout,
        defence=args.defence,
        sanitize=args.sanitize,
        reasoning=args.reasoning,
        max_iterations=args.max_iterations,
        max_tool_rounds=args.max_tool_rounds,
        tool_choice_first=args.tool_choice_first,
        max_tokens=args.max_tokens,
        tool_timeout=args.tool_timeout,
        timeout=args.timeout,
        max_retries=args.max_retries,
        stream=args.stream,
        timestamps=args.timestamps or None,
        max_repeats=args.max_repeats,
        compaction=compaction,
        defer_tools=args.defer_tools,
        tool_index=args.tool_index,
        **_gate_options(args),
    )
    return options


def cmd_run(args: argparse.Namespace) -> int:
    """Turn the arguments into one :class:`~ctxwright.harness.Harness` and print its run."""
    from ctxwright.harness import Harness
    from ctxwright.store.sqlite import default_db_path

    if args.report is not None:  # a report that cannot be written is said before the run, not after it
        out = Path(args.report).expanduser()
        if not out.parent.is_dir() or out.is_dir():
            raise CtxwrightError(f"--report {args.report}: give a file in an existing folder, e.g. report.html")
    system, tools = system_and_tools(args)
    if args.resume and args.continue_:
        raise CtxwrightError("--resume ID and --continue both name the session to continue: give one of them")
    if args.continue_:
        args.resume = _latest_session(args.db or default_db_path())
    if args.resume and not args.prompt:
        how = "--continue" if args.continue_ else "--resume ID"
        raise CtxwrightError(f'{how} needs a follow-up message: ctxwright run {how} "follow-up"')
    if not args.prompt and (tools is not None or system is not None) and not args.resume:
        raise CtxwrightError('give your agent its task: ctxwright run --system ... --tool ... "the task"')
    options = harness_options(args)
    printer = RunPrinter(console, err_console)
    with Harness(
        system,
        tools,
        db=args.db or default_db_path(),
        resume=args.resume,
        take_over=args.take_over,
        on_event=printer,
        **options,
    ) as h:
        s, b = h.session, h.backend
        printer.session_id = s.id
        if args.resume:
            console.print(Text(f"resumed session {s.id} ({len(s.events)} events)", style="dim"))
        else:
            console.print(Text(f"session {s.id} · backend {b.name} · model {b.model}", style="dim"), soft_wrap=True)
        try:
            result = h.run(args.prompt or (None if args.resume else DEFAULT_PROMPT))
        finally:
            printer.close()
        _print_summary(h.agent, result, wide=args.wide)
        if args.report is not None:
            written = h.report(args.report)
            console.print(Text(f"report written to {written} (opens offline)", style="dim"), soft_wrap=True)
    if result.stop_reason == "backend_error":
        err_console.print(
            Text.assemble(
                ("The model call failed:", "red"),
                f" {result.error or ''}\nEvery event before the failure is saved; continue with: "
                f'ctxwright run --resume {s.id} "..."',
            )
        )
        return 2
    return 0


def _latest_session(db: str | Path) -> str:
    """``--continue``: the top-level session of ``db`` used last."""
    from ctxwright.store.sessions import Store

    if not Path(db).expanduser().exists():
        raise CtxwrightError(f'no session to continue in {db}: start one with ctxwright run "the task"')
    store = Store(db)
    try:
        sid = store.latest_session()
    finally:
        store.close()
    if sid is None:
        raise CtxwrightError(f'no session to continue in {db}: start one with ctxwright run "the task"')
    return sid


def _print_summary(agent: Agent, result: RunResult, *, wide: bool = False) -> None:
    """The per-call table, the session's cache reuse, and why the run stopped."""
    console.print(calls_table(result.calls, wide=wide))
    summ = agent.auditor.summary()
    if summ.hit_ratio is not None:
        console.print(
            f"cache: hit ratio {summ.hit_ratio:.1%} (Σcached ÷ Σprompt) · efficiency "
            f"{summ.efficiency if summ.efficiency is None else format(summ.efficiency, '.1%')} "
            f"(Σcached ÷ Σreusable) over {summ.requests} call(s) of this session"
        )
    comp = [r for r in result.calls if r.cause == "compaction"]
    if comp:
        cost = sum((r.prompt_tokens or 0) - (r.reusable_tokens or 0) for r in comp)
        console.print(
            f"compaction: {sum(len(r.compactions) for r in result.calls)} layer run(s) before "
            f"{len(comp)} call(s); their cache cost: {cost:,} prompt tokens prefilled again"
        )
    console.print(
        Text.assemble(
            "stop reason: ",
            (result.stop_reason, "bold"),
            f" after {result.iterations} iteration(s) · session {agent.session.id} · tokens counted by "
            f"{agent.counter.source}",
        ),
        soft_wrap=True,
    )


def cmd_sessions(args: argparse.Namespace) -> int:
    store = _store(args)
    rows = store.list_sessions(limit=args.limit)
    if args.json:
        print(json.dumps(rows, ensure_ascii=False, indent=1))
        return 0
    t = Table(title=Text(f"sessions in {store.path}"))
    for c in ("id", "created", "backend", "model", "events", "calls", "first message"):
        t.add_column(c)
    for r in rows:  # stored text is shown as it is, never read as console markup
        t.add_row(
            Text(r["id"]),
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["created_at"])),
            Text(r["backend"] or ""),
            Text(r["model"] or ""),
            str(r["events"]),
            str(r["calls"]),
            Text((r["first_user"] or "")[:60]),
        )
    console.print(t)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from ctxwright.cli.show import render_session

    store = _store(args)
    render_session(store, args.id, console, as_json=args.json, wide=args.wide)
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    from ctxwright.cli.audit import prices_from_args, run_audit

    prices = prices_from_args(args)
    if args.proxy_session:
        from ctxwright.cli.proxy import audit_proxy_session

        if args.file:
            raise CtxwrightError("give a log FILE or --proxy-session ID, not both")
        return audit_proxy_session(
            args, lambda path: run_audit(path, as_json=args.json, prices=prices, console=console)
        )
    if not args.file:
        raise CtxwrightError("give a log to audit: ctxwright audit FILE (or --proxy-session ID)")
    return run_audit(args.file, as_json=args.json, prices=prices, console=console)


def result_cap_help() -> str:
    """What ``--result-cap`` does, with the numbers the code uses (``compaction/config.py``
    ``cap_for``, ``compaction/budget.py``, ``AgentConfig.max_result_chars``)."""
    from ctxwright.agent.loop import AgentConfig
    from ctxwright.compaction import CompactionConfig

    c = CompactionConfig()
    small = 8192  # the embedded model's default window (harness.py)
    return (
        f"tokens of one tool result before it is saved whole to disk (when it is recorded) and the model "
        f"gets a preview instead: up to its first {c.preview_head_chars:,} and last {c.preview_tail_chars:,} "
        f"characters and its result_id, for read_result (--read-result) to page through. The cap used is the "
        f"smaller of this (default {c.result_cap_tokens:,}) and {c.max_result_share:.0%} of the window less the "
        f"{c.reserve_output_tokens:,} tokens kept for the reply: {c.cap_for('', small - c.reserve_output_tokens):,} on the embedded "
        f"model's {small:,}-token window. No effect with --no-compaction, which cuts every result to {AgentConfig().max_result_chars:,} "
        "characters instead"
    )


def _add_switch(parser: Any, name: str, help_text: str) -> None:
    """``--name`` / ``--no-name``; left unset (None), the Harness decides by backend
    (``harness.backend_defaults``)."""
    group = parser.add_mutually_exclusive_group()
    flag = name.replace("_", "-")
    group.add_argument(
        f"--{flag}",
        dest=name,
        action="store_true",
        default=None,
        help=f"{help_text} (default: on, except on the embedded model)",
    )
    group.add_argument(f"--no-{flag}", dest=name, action="store_false")


def add_run_options(r: argparse.ArgumentParser) -> None:
    """The options that configure an agent (``run``, ``tools list``): one definition, so
    ``ctxwright tools list`` shows the tools of exactly the run its options describe."""
    from ctxwright.compaction.strategies import STRATEGIES
    from ctxwright.defence.levels import LEVELS

    r.add_argument(
        "--backend",
        choices=["embedded", "openai"],
        help="default: the resumed session's; else openai with --model or --base-url, embedded otherwise",
    )
    r.add_argument(
        "--system",
        metavar="FILE_OR_TEXT",
        help="the system prompt: the text of this file if it exists, else this text (default: the demo's)",
    )
    r.add_argument(
        "--tool",
        action="append",
        metavar="MODULE:FUNCTION",
        help="a function of yours as a tool (repeatable; the current directory is importable); "
        "its type hints and docstring are its schema. Replaces the demo tools",
    )
    r.add_argument("--gguf", metavar="PATH", help="run the embedded backend on this GGUF chat model")
    r.add_argument("--base-url", help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1")
    r.add_argument("--model", help="model name on the served endpoint")
    r.add_argument("--api-key-env", help="environment variable holding the API key (default: OPENAI_API_KEY)")
    r.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="seconds a served model may take to answer before a try is given up (default: 120)",
    )
    r.add_argument(
        "--max-retries",
        type=int,
        metavar="N",
        help="retries after a timeout, connection failure, HTTP 429 or 5xx, each printed (default: 2)",
    )
    stream = r.add_mutually_exclusive_group()
    stream.add_argument(
        "--stream",
        dest="stream",
        action="store_true",
        default=None,
        help="stream the answer's tokens as they are generated (default: on for the embedded model, off for served)",
    )
    stream.add_argument("--no-stream", dest="stream", action="store_false")
    r.add_argument("--max-iterations", type=int, help="model calls before the run stops (default: 20)")
    r.add_argument(
        "--max-tool-rounds", type=int, help="rounds of tool calls before an answer is required (embedded default: 1)"
    )
    _add_switch(r, "status", "an <agent_status> message before each call")
    r.add_argument(
        "--status-mode",
        choices=["auto", "replace", "append"],
        help="how status messages are updated (default auto: the cost model)",
    )
    r.add_argument(
        "--cache-price-ratio",
        type=float,
        help="cached ÷ uncached input price of the backend, for --status-mode auto (default: 0.1; 0 embedded)",
    )
    _add_switch(r, "todo", "give the agent the TODO tools")
    r.add_argument("--timestamps", action="store_true", help="prefix user and tool contents with [YYYY-MM-DD HH:MM:SS]")
    r.add_argument(
        "--reasoning",
        choices=["strip", "keep", "must_send_back", "qwen3"],
        help="how earlier reasoning is sent back (default: by model family; fixed per session)",
    )
    r.add_argument("--max-tokens", type=int, help="cap on each reply's tokens (default: 256)")
    r.add_argument("--tool-timeout", type=float, help="seconds before a tool call is abandoned (default: 30)")
    r.add_argument(
        "--max-repeats",
        type=int,
        metavar="N",
        help="identical tool calls (same tool, same arguments) in a row before the model is told; the next "
        "one is not run and ends the run with repeated_tool_call (default: 3; 0: no limit)",
    )
    r.add_argument(
        "--tool-choice-first",
        choices=["auto", "required", "none"],
        help="tool_choice of the first call (embedded default: required)",
    )
    r.add_argument("--workspace", help="give the agent read_file/list_dir confined to this folder")
    comp = r.add_argument_group("compaction (layers without an LLM; see CompactionConfig)")
    comp.add_argument(
        "--no-compaction",
        action="store_true",
        help="send the trajectory as recorded (a plain character cap per result only)",
    )
    comp.add_argument(
        "--window",
        type=int,
        help="the model's context window in tokens (default: the embedded model's n_ctx; 128,000 for a served model)",
    )
    comp.add_argument(
        "--result-cap",
        type=int,
        metavar="TOKENS",
        help=result_cap_help().replace("%", "%%"),  # argparse formats help with %
    )
    comp.add_argument(
        "--clear-at",
        type=float,
        help="share of the window at which noise and clearing run (default 0.55)",
    )
    comp.add_argument("--keep-results", type=int, help="newest tool results clearing keeps (default 4)")
    comp.add_argument(
        "--compaction",
        choices=STRATEGIES,
        help="how new tool results are compressed (default none; experiment 2-9, see compaction/strategies.py)",
    )
    _add_switch(
        comp,
        "summaries",
        "LLM layers: per-round archival summaries and two-stage full compaction, with a circuit breaker",
    )
    _add_switch(
        comp,
        "read_result",
        "give the agent read_result(result_id, offset, limit) to page back offloaded and cleared results",
    )
    _add_switch(r, "delegate", "give the agent the delegate(task) sub-agent tool")
    r.add_argument(
        "--skills",
        action="append",
        metavar="DIR",
        help="load Agent Skills from DIR (a skill folder or a folder of them; repeatable), then "
        ".agents/skills/ and ~/.agents/skills/; adds the Skill and read_skill_file tools",
    )
    r.add_argument(
        "--allow-skill-scripts",
        action="store_true",
        help="also let the agent run files of a skill's scripts/ folder (run_skill_script; off by default: "
        "a skill folder is third-party code); a resumed session keeps the setting",
    )
    r.add_argument(
        "--skill-script-timeout",
        type=float,
        metavar="SECONDS",
        help="seconds a skill script may run before it is killed (default 30)",
    )
    r.add_argument(
        "--skills-catalog",
        choices=("reminder", "prefix"),
        help="where the skills catalog goes: 'reminder' (default) appends it as a user message, one per new "
        "skill, no cache break; 'prefix' puts the skills known at start into the Skill tool's description, "
        "frozen with the prefix (a skill added later needs a new session)",
    )
    r.add_argument(
        "--mcp",
        action="append",
        metavar="COMMAND",
        help="start an MCP server over stdio (the command line in one quoted argument; repeatable) and give "
        "the agent its tools as SERVER__TOOL; on --resume, the session's servers unless given",
    )
    r.add_argument(
        "--mcp-timeout",
        type=float,
        metavar="SECONDS",
        help="seconds an MCP tool call may take before it is answered with a timeout error (default 60)",
    )
    r.add_argument(
        "--defence",
        choices=LEVELS,
        help="prompt-injection defence (the book's D1..D5): none; warning (a sentence in the system prompt); "
        "tags (default: untrusted results wrapped as <external_content>, the sanitizer); gate (tags + a "
        "confirmation before write/external tools); provenance (gate + argument provenance). "
        "See docs/defence.md; a resumed session keeps its level",
    )
    san = r.add_mutually_exclusive_group()
    san.add_argument(
        "--sanitize",
        dest="sanitize",
        action="store_true",
        default=None,
        help="strip invisible characters, chat-template tokens and fake role headers from untrusted results "
        "(default: on with tags)",
    )
    san.add_argument("--no-sanitize", dest="sanitize", action="store_false")
    gate = r.add_argument_group("confirmation gate (with --defence gate or provenance; docs/defence.md)")
    gate.add_argument(
        "--approve",
        choices=("ask", "deny", "allow-listed"),
        help="what happens to a flagged write/external call: 'ask' (default) asks y/N on a terminal and denies "
        "without one; 'deny' denies it; 'allow-listed' runs only calls whose every target is allowlisted",
    )
    gate.add_argument(
        "--allow-path", action="append", metavar="DIR", help="an allowed folder for written paths (repeatable)"
    )
    gate.add_argument(
        "--allow-domain",
        action="append",
        metavar="DOMAIN",
        help="an allowed e-mail domain (example.com) or address (bob@example.com) (repeatable)",
    )
    gate.add_argument(
        "--allow-host",
        action="append",
        metavar="HOST",
        help="an allowed host (api.example.com) or URL prefix (https://example.com/hooks/) (repeatable)",
    )
    gate.add_argument(
        "--gate-rules", metavar="FILE", help="a YAML file of allowlists: keys paths, domains, hosts (lists)"
    )
    gate.add_argument(
        "--approve-timeout",
        type=float,
        metavar="SECONDS",
        help="seconds to wait for an answer before a call counts as denied (default 120)",
    )
    r.add_argument(
        "--defer-tools",
        choices=["auto", "all", "none"],
        help="keep tools out of the request's tools array, found with search_tools and run with call_tool "
        "(default auto: when the schemas would take over 10%% of the window or there are over 30 tools; "
        "the harness's own tools are never deferred)",
    )
    r.add_argument(
        "--tool-index",
        choices=["none", "prefix"],
        help="prefix: also list the deferred tools, [name: summary] one a line, in search_tools' "
        "description (for small catalogs; default none: search only)",
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ctxwright", description="Context engineering for LLM agents.")
    p.add_argument("--version", action="version", version=f"ctxwright {_version()}")
    _add_global_options(p, None)
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="run the agent on a prompt")
    r.add_argument("prompt", nargs="?", help=f"the task (default: {DEFAULT_PROMPT!r})")
    add_run_options(r)
    r.add_argument(
        "--resume", metavar="ID", help="continue a stored session, with the options it recorded (flags given override)"
    )
    r.add_argument(
        "--continue",
        dest="continue_",
        action="store_true",
        help="continue the session used last (top-level) in the database, like --resume ID",
    )
    r.add_argument(
        "--take-over",
        action="store_true",
        help="continue a session another process is recorded as running (after checking it is gone)",
    )
    r.add_argument("--wide", action="store_true", help="the per-call table with all its columns (wider than 80)")
    r.add_argument(
        "--report",
        metavar="PATH",
        help="at the end of the run, write the session's HTML report there (as `ctxwright report ID -o PATH`)",
    )
    r.set_defaults(func=cmd_run)

    s = sub.add_parser("sessions", help="list stored sessions")
    s.add_argument("--limit", type=int, default=30)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_sessions)

    sh = sub.add_parser("show", help="print one session: messages, tool calls, per-call usage")
    sh.add_argument("id")
    sh.add_argument("--json", action="store_true")
    sh.add_argument("--wide", action="store_true", help="the calls table with all its columns (wider than 80)")
    sh.set_defaults(func=cmd_show)

    au = sub.add_parser("audit", help="audit a request log's prompt-cache reuse, offline")
    au.add_argument(
        "file",
        nargs="?",
        help="JSONL of request bodies or {request, response} pairs (OpenAI or Anthropic), "
        "or a session export from `ctxwright show ID --json`",
    )
    au.add_argument("--proxy-session", metavar="ID", help="audit a session recorded by `ctxwright proxy` instead")
    au.add_argument("--json", action="store_true", help="print the audit as JSON")
    from ctxwright.cli.audit import add_price_options

    add_price_options(au)
    au.set_defaults(func=cmd_audit)
    from ctxwright.cli.report import add_report_parser

    add_report_parser(sub)

    from ctxwright.cli.export import add_export_parser

    add_export_parser(sub)
    from ctxwright.cli.skills import add_skills_parser

    add_skills_parser(sub)
    from ctxwright.cli.tools import add_tools_parser

    add_tools_parser(sub)
    from ctxwright.cli.proxy import add_proxy_parser

    add_proxy_parser(sub)
    for command in sub.choices.values():  # `ctxwright show ID --db x.db` as well as `ctxwright --db x.db show ID`
        _add_global_options(command, argparse.SUPPRESS)
    return p


def _add_global_options(parser: argparse.ArgumentParser, default: Any) -> None:
    """``--db`` and ``--debug``, before the command or after it. On a command's parser the
    default is ``SUPPRESS``: an option not given there leaves what was given before the
    command in place, instead of resetting it."""
    parser.add_argument(
        "--db",
        default=default,
        help="SQLite database (default: $CTXWRIGHT_DB or the user data dir); before or after the command",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        default=False if default is None else default,
        help="on an error, show the traceback too; before or after the command",
    )


def _version() -> str:
    """The installed distribution's version (what pip knows), else the package's own."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ctxwright")
    except PackageNotFoundError:
        from ctxwright import __version__

        return __version__


def main(argv: list[str] | None = None) -> int:
    """Every error ends here as one line on stderr (what was wrong, what to do) and a non-zero
    exit: 2 for an error ctxwright raised on purpose, 1 for anything else. ``--debug`` prints
    the traceback first."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        err_console.print(
            Text.assemble(
                ("interrupted", "red"),
                '; every event so far is saved in the store: continue with ctxwright run --continue "..."',
            )
        )
        return 130
    except Exception as exc:
        if args.debug:
            err_console.print(Traceback.from_exception(type(exc), exc, exc.__traceback__))
        err_console.print(Text.assemble(("ctxwright:", "red"), " ", explain(exc, debug=args.debug)), soft_wrap=True)
        return 2 if isinstance(exc, CtxwrightError) else 1


def explain(exc: BaseException, *, debug: bool = False) -> str:
    """One line for ``exc``: our own errors already say what to do; for anything else, say
    what kind of failure it is and how to see more. URL credentials never reach the screen
    (``core/redact.py``)."""
    from ctxwright.core.redact import redact

    text = " ".join(redact(str(exc)).split())
    if isinstance(exc, CtxwrightError):
        return text
    if isinstance(exc, sqlite3.Error):  # Store's own messages name the file and the fix
        return f"database error: {text}"
    if isinstance(exc, OSError):
        return f"{type(exc).__name__}: {text}. Check the path and its permissions"
    more = "" if debug else "; rerun with --debug for the traceback"
    return f"unexpected {type(exc).__name__}: {text or '(no message)'}{more}, and report it if it looks like a bug"


if __name__ == "__main__":
    sys.exit(main())
