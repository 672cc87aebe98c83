"""The ``ctxwright`` command line: run an agent, list and show stored sessions.

Every command prints one clear line on failure (what was wrong, what to do) and exits
non-zero; nothing already recorded in the store is lost.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from rich.table import Table
from rich.text import Text

from ctxwright.cli.common import (
    approver,
    console,
    err_console,
    explain,
    id_column,
    system_and_tools,
)
from ctxwright.cli.common import existing_store as _store
from ctxwright.core.words import counted
from ctxwright.errors import CtxwrightError

if TYPE_CHECKING:
    from ctxwright.agent.loop import Agent, RunResult
    from ctxwright.cache.prices import Pricing

#: the question ``make demo`` asks (the demo's tools answer it); a run is never given it unasked
DEMO_PROMPT = "What's the current time and weather in Vancouver?"


def cmd_run(args: argparse.Namespace) -> int:
    """Turn the arguments into one :class:`~ctxwright.harness.Harness` and print its run."""
    from ctxwright.harness import Harness
    from ctxwright.store.sqlite import default_db_target

    if args.report is not None:  # a report that cannot be written is said before the run, not after it
        out = Path(args.report).expanduser()
        if not out.parent.is_dir() or out.is_dir():
            raise CtxwrightError(f"--report {args.report}: give a file in an existing folder, e.g. report.html")
    if args.prompt == "-":
        from ctxwright.cli.stdio import prompt_from_stdin

        args.prompt = prompt_from_stdin()
    system, tools = system_and_tools(args)
    if args.resume and args.continue_:
        raise CtxwrightError("--resume ID and --continue both name the session to continue: give one of them")
    if args.continue_:
        args.resume = _latest_session(args.db or default_db_target())
    if args.resume and not args.prompt:
        how = "--continue" if args.continue_ else "--resume ID"
        raise CtxwrightError(f'{how} needs a follow-up message: ctxwright run {how} "follow-up"')
    if not args.prompt and (tools is not None or system is not None) and not args.resume:
        raise CtxwrightError('give your agent its task: ctxwright run --system ... --tool ... "the task"')
    if not args.prompt and not args.resume:  # a run without a task used to answer a demo question, unasked
        raise CtxwrightError(
            f'give the agent its task: ctxwright run "the task" (to try it: ctxwright run "{DEMO_PROMPT}")'
        )
    from ctxwright.recipe import given_from_args

    options = given_from_args(args, approver=approver)  # only the flags given: on --resume the rest is the session's
    if options.get("backend") == "anthropic":  # an install without its SDK is refused before a store is made
        import ctxwright.backends.anthropic  # noqa: F401
    from ctxwright.cache.prices import load_prices

    prices = load_prices(args.prices) if args.prices is not None else None  # refused before a model loads
    from ctxwright.cli.progress import RunPrinter  # imported here: it loads the agent's whole stack (0.7 s)
    from ctxwright.core.progress import BackendFailed

    printer = RunPrinter(console, err_console)

    def on_event(event: Any) -> None:
        """The printer, but for the failure of the run's model call: that is said once, by
        :func:`_failed_run` at the end, with what was kept (the printer would say it first)."""
        if isinstance(event, BackendFailed):
            printer.close()
            return
        printer(event)

    with Harness(
        system,
        tools,
        db=args.db or default_db_target(),
        resume=args.resume,
        take_over=args.take_over,
        on_event=on_event,
        prices=prices,
        **options,
    ) as h:
        s, b = h.session, h.backend
        printer.session_id = s.id
        if args.resume:
            console.print(Text(f"resumed session {s.id} ({len(s.events)} events)", style="dim"))
        else:
            console.print(Text(f"session {s.id} · backend {b.name} · model {b.model}", style="dim"), soft_wrap=True)
        try:
            result = h.run(args.prompt)
        finally:
            printer.close()
        answered = bool(result.calls)
        if answered:  # a run no model answered has no table to show, only its error
            _print_summary(h.agent, result, wide=args.wide, pricing=h.pricing)
        # a new session no model answered holds only the command line: it is not kept
        discarded = (
            result.stop_reason == "backend_error"
            and not answered
            and not args.resume
            and s.recovery is None
            and h.store is not None
            and h.store.discard_unanswered(s.id)
        )
        if args.report is not None and not discarded:
            written = h.report(args.report)
            console.print(Text(f"report written to {written} (opens offline)", style="dim"), soft_wrap=True)
    if result.stop_reason == "backend_error":
        raise _failed_run(result.error or "", s.id, discarded=discarded)
    return 0


def _failed_run(error: str, session_id: str, *, discarded: bool) -> CtxwrightError:
    """The one line of a run whose model call failed (after its retries): the failure, what
    was kept of the session, and how to go on."""
    error = error.rstrip(". ")
    if discarded:
        return CtxwrightError(
            f"the model call failed: {error}. No model answered and nothing but the task was recorded, so session "
            f"{session_id} was not kept: run the command again once that is fixed"
        )
    return CtxwrightError(
        f"the model call failed: {error}. Every event before the failure is saved; continue with: "
        f'ctxwright run --resume {session_id} "..."'
    )


def _latest_session(db: str | Path) -> str:
    """``--continue``: the top-level session of ``db`` used last (a store that is not there
    is not created for it)."""
    from ctxwright.errors import StoreMissing
    from ctxwright.store.database import normalize_target
    from ctxwright.store.sessions import Store

    try:
        store = Store(normalize_target(db), must_exist=True)
    except StoreMissing:
        raise CtxwrightError(f'no session to continue in {db}: start one with ctxwright run "the task"') from None
    try:
        sid = store.latest_session()
    finally:
        store.close()
    if sid is None:
        raise CtxwrightError(f'no session to continue in {db}: start one with ctxwright run "the task"')
    return sid


def _print_summary(agent: Agent, result: RunResult, *, wide: bool = False, pricing: Pricing | None = None) -> None:
    """The per-call table, the session's cache reuse and cost, and why the run stopped."""
    from ctxwright.cli.progress import calls_table

    console.print(calls_table(result.calls, wide=wide))
    summ = agent.auditor.summary(pricing)
    if summ.hit_ratio is not None:
        console.print(
            f"cache: hit ratio {summ.hit_ratio:.1%} (Σcached ÷ Σprompt) · efficiency "
            f"{summ.efficiency if summ.efficiency is None else format(summ.efficiency, '.1%')} "
            f"(Σcached ÷ Σreusable) over {counted(summ.requests, 'call')} of this session"
        )
    if summ.est_cost is not None and summ.est_cost_if_held is not None:
        priced = "" if summ.priced_requests == summ.requests else f" ({summ.priced_requests} priced)"
        console.print(
            f"cost: {summ.est_cost:,.5f} USD · if the cache had held {summ.est_cost_if_held:,.5f} over "
            f"{counted(summ.requests, 'call')}{priced}",
            highlight=False,
        )
    comp = [r for r in result.calls if r.cause == "compaction"]
    if comp:
        cost = sum((r.prompt_tokens or 0) - (r.reusable_tokens or 0) for r in comp)
        console.print(
            f"compaction: {counted(sum(len(r.compactions) for r in result.calls), 'layer run')} before "
            f"{counted(len(comp), 'call')}; their cache cost: {cost:,} prompt tokens prefilled again"
        )
    console.print(
        Text.assemble(
            "stop reason: ",
            (result.stop_reason, "bold"),
            f" after {counted(result.iterations, 'iteration')} · session {agent.session.id} · tokens counted by "
            f"{agent.counter.source}",
        ),
        soft_wrap=True,
    )


def cmd_sessions(args: argparse.Namespace) -> int:
    """Every session in the store, of every kind (``cli/sessions.py``), newest first."""
    from ctxwright.cli.sessions import RUN, all_sessions

    store = _store(args)
    rows = all_sessions(store, args.limit)
    if args.json:
        print(json.dumps(rows, ensure_ascii=False, indent=1, default=str))
        return 0
    t = Table(title=Text(f"sessions in {store.location}"))
    id_column(t, [r["id"] for r in rows])
    for c in ("kind", "created", "backend / api", "model / upstream", "events", "calls", "first message / key"):
        t.add_column(c)
    for r in rows:  # stored text is shown as it is, never read as console markup
        run = r["kind"] == RUN
        key = f"{r.get('grouped_by') or ''} {r.get('group_key') or ''}".strip()
        t.add_row(
            Text(r["id"]),
            Text(r["kind"]),
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["created_at"])),
            Text((r.get("backend") if run else r.get("api")) or ""),
            Text((r.get("model") if run else r.get("upstream")) or ""),
            str(r["events"]) if run else "-",
            str(r["calls"]),
            Text(((r.get("first_user") or "") if run else key)[:60]),
        )
    console.print(t)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """One session of any kind: a run's trajectory (``cli/show.py``), a wire session's calls
    (``cli/show_proxy.py``). ``--json`` prints the view's data, not the session file
    (``ctxwright export ID``)."""
    from ctxwright.cli.audit import pricing_from_args
    from ctxwright.cli.sessions import refuse, resolve_session
    from ctxwright.cli.show import render_session

    pricing = pricing_from_args(args)  # a bad --prices file is refused before anything is read
    store = _store(args)
    ref = resolve_session(store, args.id)
    if ref.from_the_wire:
        if args.compactions:
            raise refuse(ref, "show --compactions", "it was recorded from the wire, where no ctxwright compaction ran")
        from ctxwright.cli.show_proxy import render_proxy_session

        render_proxy_session(store, ref.id, console, as_json=args.json, pricing=pricing)
        return 0
    if args.compactions:
        from ctxwright.cli.show import render_compactions

        render_compactions(store, ref.id, console, as_json=args.json)
        return 0
    render_session(store, ref.id, console, as_json=args.json, wide=args.wide, pricing=pricing)
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    """``audit FILE`` (a log, ``-`` for stdin) or ``audit ID`` (a session of any kind: a run's
    export, a wire session's calls as the proxy audited them live)."""
    from ctxwright.cli.audit import audit_items, given_pricing, pricing_from_args, rule_settings, run_audit
    from ctxwright.cli.sessions import named

    prices = given_pricing(args)
    from ctxwright.cli.audit_agents import agent_log_roots, run_agent_log_audit

    roots = agent_log_roots(args)  # Claude Code's or Codex's own logs: a folder, a file, --claude, --codex
    if roots is not None:
        pricing = pricing_from_args(args)
        by, cap = args.by, args.max_record_bytes
        return run_agent_log_audit(roots, by=by, as_json=args.json, pricing=pricing, console=console, max_record=cap)

    def audit(items: Any, source: str) -> int:
        return audit_items(items, source, as_json=args.json, prices=prices, console=console, rules=rule_settings(args))

    target = named(
        args,
        args.file,
        proxy_session=args.proxy_session,
        files=True,
        usage="ctxwright audit FILE or ctxwright audit ID",
    )
    if target is None:
        raise CtxwrightError(
            "give a log or a session to audit: ctxwright audit FILE (- for stdin) or ctxwright audit ID"
        )
    if isinstance(target, str):
        return run_audit(
            target,
            as_json=args.json,
            prices=prices,
            console=console,
            max_record=args.max_record_bytes,
            rules=rule_settings(args),
        )
    if target.from_the_wire:
        from ctxwright.cli.proxy import audit_proxy_session

        args.proxy_session = target.id
        return audit_proxy_session(args, audit)
    from ctxwright.audit.logs import read_records
    from ctxwright.store.export import session_export

    store = _store(args)
    try:
        export = session_export(store, target.id)
    finally:
        store.close()
    return audit(read_records([export]), f"session {target.id}")


class Parser(argparse.ArgumentParser):
    """Every ``ctxwright`` parser: a bad flag or value is one line on stderr -- what was wrong and
    where the help is -- with argparse's exit status 2, not its usage block (``run``'s alone
    was 44 lines, and the error sat under it)."""

    def error(self, message: str) -> NoReturn:
        message = " ".join(message.split())
        flag = message.removeprefix("argument ").split(":")[0].split("/")[-1]
        if message.endswith(": expected one argument") and flag.startswith("--"):
            # argparse takes a value that starts with '-' (--status-fields -cwd,-os) for a flag
            message += f" (a value that starts with '-' goes after '=': {flag}=-VALUE)"
        self.exit(2, f"{self.prog}: {message}; see `{self.prog} --help`\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Every command's parser. ``command``: the command the line names (``""``: none), when
    only that one will parse: the others are listed by name and help line only. A command's
    options import what declares them -- ``run``'s and the price flags come from the recipe
    (every mechanism's config types), the audit's from the audit -- the largest part of a
    start, which ``ctxwright --help`` and another command's parse do not need."""
    from ctxwright.cli import (
        ablate,
        attention,
        export,
        gate,
        lock,
        proxy,
        replay,
        report,
        skills,
        statusline,
        tools,
        wrap,
    )
    from ctxwright.cli.replay import _count  # the one "whole number above 0" of the flags

    def wanted(name: str) -> bool:
        return command is None or command == name

    p = Parser(prog="ctxwright", description="Context engineering for LLM agents.")
    p.add_argument("--version", action=_VersionAction)
    _add_global_options(p, None)
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser(
        "run",
        usage="ctxwright run [OPTIONS] [PROMPT]",  # the options are listed below, by group
        help="run the agent on a prompt",
    )
    r.add_argument("prompt", nargs="?", help="the task, or - to read it from stdin")
    session_group = _add_run_arguments(r) if command in (None, "run") else r
    r.set_defaults(func=cmd_run)

    s = sub.add_parser("sessions", help="list stored sessions of every kind (run, proxy, framework), newest first")
    s.add_argument("--limit", type=_count, default=30, metavar="N", help="at most N sessions (default 30)")
    s.add_argument("--json", action="store_true", help="print the rows as JSON (each kind's fields, and its kind)")
    s.set_defaults(func=cmd_sessions)

    sh = sub.add_parser("show", help="print one session: messages, tool calls, per-call usage")
    sh.set_defaults(func=cmd_show)
    if wanted("show"):
        _add_show_arguments(sh)

    au = sub.add_parser("audit", help="audit a request log's prompt-cache reuse, offline")
    au.set_defaults(func=cmd_audit)
    if wanted("audit"):
        _add_audit_arguments(au)
    for name, summary, add in (  # in the order --help lists them
        ("report", report.HELP, report.add_report_parser),
        ("export", export.HELP, export.add_export_parser),
        ("skills", skills.HELP, skills.add_skills_parser),
        ("tools", tools.HELP, tools.add_tools_parser),
        ("proxy", proxy.HELP, proxy.add_proxy_parser),
        ("replay", replay.HELP, replay.add_replay_parser),
        ("lock", lock.HELP, lock.add_lock_parser),
        ("gate", gate.HELP, gate.add_gate_parser),
        ("ablate", ablate.HELP, ablate.add_ablate_parser),
        ("attention", attention.HELP, attention.add_attention_parser),
        ("wrap", wrap.HELP, wrap.add_wrap_parser),
        ("statusline", statusline.HELP, statusline.add_statusline_parser),
    ):
        if wanted(name):
            add(sub)
        else:
            sub.add_parser(name, help=summary)
    for each in sub.choices.values():  # `ctxwright show ID --db x.db` as well as `ctxwright --db x.db show ID`
        _add_global_options(session_group if each is r else each, argparse.SUPPRESS)
    return p


def _add_show_arguments(sh: argparse.ArgumentParser) -> None:
    sh.add_argument("id", help="a session ID of any kind (a unique start of it is enough)")
    sh.add_argument(
        "--json",
        action="store_true",
        help="print what the view shows as JSON (a run's: the session, and what each event is sent as, each "
        "call's cost, the totals); the session file to keep or audit is `ctxwright export ID`",
    )
    sh.add_argument("--wide", action="store_true", help="the calls table with all its columns (wider than 80)")
    sh.add_argument(
        "--compactions",
        action="store_true",
        help="only the compactions: per compaction the events it hid, the identifiers and numbers lost from "
        "view and where to read them back (the loss ledger; with --json, as JSON)",
    )
    from ctxwright.cli.audit import add_price_options

    add_price_options(sh)


def _add_audit_arguments(au: argparse.ArgumentParser) -> None:
    au.add_argument(
        "file",
        nargs="?",
        metavar="FILE|ID",
        help="JSONL of request bodies or {request, response} pairs (OpenAI or Anthropic), "
        "or a session file from `ctxwright export ID`; a regular file or a pipe, - for stdin; or a stored "
        "session's ID, of any kind; or Claude Code's or Codex's own logs (a file, or a folder of them)",
    )
    au.add_argument("--proxy-session", metavar="ID", help="alias of ID for a proxy or framework session")
    au.add_argument("--json", action="store_true", help="print the audit as JSON")
    from ctxwright.cli.audit import add_price_options, add_record_cap_option, add_rule_options

    add_price_options(au)
    add_record_cap_option(au)
    add_rule_options(au)
    from ctxwright.cli.audit_agents import add_agent_log_options

    add_agent_log_options(au)


def _add_run_arguments(r: argparse.ArgumentParser) -> Any:
    """``run``'s options, by group; the group the global options join."""
    from ctxwright.recipe.flags import OUTPUT_GROUP, SESSION_GROUP, add_arguments, argument_group

    run_groups = add_arguments(r)  # every option's flags, grouped, from its one declaration (recipe/options.py)
    session_group = argument_group(r, run_groups, SESSION_GROUP)
    output_group = argument_group(r, run_groups, OUTPUT_GROUP)
    session_group.add_argument(
        "--resume", metavar="ID", help="continue a stored session, with the options it recorded (flags given override)"
    )
    session_group.add_argument(
        "--continue",
        dest="continue_",
        action="store_true",
        help="continue the session used last (top-level) in the database, like --resume ID",
    )
    session_group.add_argument(
        "--take-over",
        action="store_true",
        help="continue a session another process is recorded as running (after checking it is gone)",
    )
    output_group.add_argument(
        "--wide", action="store_true", help="the per-call table with all its columns (wider than 80)"
    )
    output_group.add_argument(
        "--report",
        metavar="PATH",
        help="at the end of the run, write the session's HTML report there (as `ctxwright report ID -o PATH`)",
    )
    return session_group


def _add_global_options(parser: Any, default: Any) -> None:
    """``--db`` and ``--debug``, before the command or after it. On a command's parser the
    default is ``SUPPRESS``: an option not given there leaves what was given before the
    command in place, instead of resetting it."""
    parser.add_argument(
        "--db",
        default=default,
        help="the store: an SQLite file, or a postgresql://USER@HOST/DB URL (the postgres extra) (default: "
        "$CTXWRIGHT_DB or the user data dir); before or after the command",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        default=False if default is None else default,
        help="on an error, show the traceback too; before or after the command",
    )


class _VersionAction(argparse.Action):
    """argparse's ``version`` action with the version read when the flag is given:
    ``importlib.metadata`` costs every other command's start ~20 ms of CPU."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(
            option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="show program's version number and exit"
        )

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> NoReturn:
        print(f"ctxwright {_version()}")  # on stdout, as argparse's own action prints it
        parser.exit()


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
    the traceback first. A reader of stdout that went away ends the command quietly, with
    the status of a Unix tool killed by ``SIGPIPE`` (``cli/stdio.py``)."""
    from ctxwright.cli.stdio import end_quietly, stdout_gone

    argv = sys.argv[1:] if argv is None else list(argv)
    if argv == ["--version"]:  # what argparse's version action does, without building every command's parser
        print(f"ctxwright {_version()}")
        raise SystemExit(0)
    if argv[:1] == ["statusline"]:  # run after every agent message: none of the other commands' parsers or imports
        from ctxwright.cli.statusline import main as statusline

        return statusline(argv[1:])
    argv, agent = split_agent_command(argv)
    parser = build_parser(command_word(argv))
    args, extra = parser.parse_known_args(argv)
    if extra:  # said by the command's own parser, so the line names its help
        _command_parser(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    if agent is not None:
        args.agent_command = agent
    try:
        status = int(args.func(args) or 0)
        sys.stdout.flush()  # what is still buffered fails here, where it is handled, not at exit
        return status
    except BrokenPipeError as exc:
        if stdout_gone():
            return end_quietly()
        return _failed(exc, args)
    except KeyboardInterrupt:
        # what is saved, and how to go on, is the run's to say; another command only stopped
        resume = (
            '; every event so far is saved in the store: continue with ctxwright run --continue "..."'
            if getattr(args, "command", None) == "run"
            else f"; ctxwright {args.command} stopped"
        )
        err_console.print(Text.assemble(("interrupted", "red"), resume))
        return 130
    except Exception as exc:
        return _failed(exc, args)


def _command_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the subcommand ``args`` were parsed for (``parser`` itself when none)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found = action.choices.get(getattr(args, "command", None) or "")
            if isinstance(found, argparse.ArgumentParser):
                return found
    return parser


def command_word(argv: list[str]) -> str:
    """The command a line names (``""``: none): the first word that is not a global option
    (``--db VALUE``, ``--debug``) or its value."""
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] == "--db" else 1
    return argv[i] if i < len(argv) else ""


def split_agent_command(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """``ctxwright gate GOLDEN [OPTIONS] -- COMMAND [ARGS...]``: the agent's command is every
    word after the first ``--``, cut off before argparse reads the line -- argparse would take
    the gate's own options after GOLDEN as the command's, or the command's as the gate's."""
    if "--" not in argv:
        return argv, None
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "--":
        i += 2 if argv[i] == "--db" else 1  # the global options before the command
    if i < len(argv) and argv[i] == "gate":
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1 :]
    return argv, None


def _failed(exc: Exception, args: argparse.Namespace) -> int:
    if args.debug:
        from rich.traceback import Traceback

        err_console.print(Traceback.from_exception(type(exc), exc, exc.__traceback__))
    err_console.print(Text.assemble(("ctxwright:", "red"), " ", explain(exc, debug=args.debug)), soft_wrap=True)
    return 2 if isinstance(exc, CtxwrightError) else 1


if __name__ == "__main__":
    sys.exit(main())
