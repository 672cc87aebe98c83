"""``ctxwright wrap [options] -- COMMAND [ARGS...]`` (and ``ctxwright wrap claude``, ``ctxwright
wrap codex``): run an agent with every model call it makes recorded and audited, and say at
its exit what its prompt cache did.

It starts the recording proxy (``proxy/serve.py``: :class:`RecordingProxy`) on a free loopback
port, serving Anthropic Messages and OpenAI chat completions and Responses at once, points the
agent at it by the variables that agent reads (``proxy/agents.py``), and runs it. What it
protects:

* **The terminal is the agent's.** The agent is started with ctxwright's own stdin, stdout and
  stderr -- the same terminal, no pipe in between, so a TUI draws as it always does, and in
  the same process group, so the terminal's job control (Ctrl-C, Ctrl-Z, Ctrl-\\) reaches it
  as it reaches any program. While it runs, ctxwright writes nothing there: its own file
  descriptors 1 and 2 are pointed at the log file (``--log``) for as long, so not a per-call
  line, a warning nor a library's stray message lands in the agent's screen.
* **Signals and the exit code are the agent's.** Ctrl-C goes to the agent (the terminal sends
  SIGINT to the foreground process group; ctxwright ignores it meanwhile, as a shell waiting
  for its job does); a SIGTERM or SIGHUP sent to ctxwright is passed on to the agent; the exit
  status is the agent's, ``128 + N`` when signal N ended it, as a shell reports it.
* **Nothing recorded is lost.** Each answer's end is held until its exchange is written
  (``HOLD_END_S``), so an agent killed mid-session loses only the call in flight (recorded as
  cut short); at exit the recorder's queue is drained before the summary is computed, and what
  could not be recorded is said, ``--quiet`` or not.

The agent is not run under ctxwright's supervisor (``core/supervise.py``): the supervisor
moves its program into a session and process group of its own with stdin on ``/dev/null``,
which would take the terminal away from an interactive agent (no Ctrl-C, a stop on its first
read). Processes the agent leaves behind are its own, as they are without wrap; they lose the
proxy when wrap exits.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, BinaryIO

from ctxwright.core.words import counted
from ctxwright.errors import CtxwrightError

if TYPE_CHECKING:
    from ctxwright.cache.prices import Pricing
    from ctxwright.proxy.recorder import RecordedExchange
    from ctxwright.report.data import CallData, ReportData
    from ctxwright.store.sessions import Store

#: the breaks named in the summary, the costliest first
WORST_SHOWN = 3
#: miss causes named in the summary's "$ lost" line, the costliest first
CAUSES_SHOWN = 4


#: the command's line in ``ctxwright --help``: cli/main.py lists it without building the parser
HELP = "run an agent (claude, codex, an SDK program...) with every model call recorded and audited"


def add_wrap_parser(sub: Any) -> None:
    from ctxwright.cli.audit import add_price_options

    p = sub.add_parser(
        "wrap",
        help=HELP,
        description="Start a recording proxy on a free loopback port, point the agent at it (the variables each "
        "known agent reads: docs/agents.md) and run it with the terminal left to it. At its exit: one summary "
        "(calls, hit ratio, $ spent and lost by miss cause, the worst breaks with their byte) and a report.",
        usage="ctxwright wrap [options] -- COMMAND [ARGS...]   (or: ctxwright wrap claude | codex [ARGS...])",
    )
    from ctxwright.cli.proxy import add_compress_argument, add_keep_warm_arguments, add_upstream_arguments

    add_upstream_arguments(p, agent_env=True)  # as `ctxwright proxy` takes them
    p.add_argument(
        "--log",
        metavar="FILE",
        help="where the per-call lines and any warning go while the agent runs (default: a file in the store's "
        "folder, wrap/)",
    )
    p.add_argument("--report", metavar="FILE", help="the HTML report written at exit (default: beside the log)")
    p.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="longest silence from the upstream, before or during an answer (default 600 s)",
    )
    p.add_argument(
        "--quiet",
        action="store_true",
        help="at exit, one line instead of the summary (what could not be recorded is said all the same)",
    )
    add_price_options(p)
    from ctxwright.cli.audit import add_rule_options

    add_rule_options(p)  # --max-tool-tokens N, --keep ITEM: the named rules on the line per call
    add_keep_warm_arguments(p)  # --keep-warm for wrap's proxy (proxy/keep_warm.py)
    add_compress_argument(p)  # --compress for wrap's proxy (proxy/compress.py)
    # dest agent_words, not "command": that is the subcommand's name (cli/main.py reads it)
    p.add_argument(
        "agent_words", metavar="command", nargs=argparse.REMAINDER, help="the agent's command and its arguments"
    )
    p.set_defaults(func=cmd_wrap)


# -- the command line ------------------------------------------------------------------------


def agent_argv(args: argparse.Namespace) -> list[str]:
    """The agent's command: the words after ``wrap``'s own options, a leading ``--`` dropped."""
    words = list(getattr(args, "agent_words", None) or [])
    if words and words[0] == "--":
        words = words[1:]
    extra = getattr(args, "agent_command", None)  # a `--` cut off by the CLI before argparse
    if extra is not None:
        words = [*words, "--", *extra] if words else list(extra)
    if not words:
        raise CtxwrightError("name the agent to run: ctxwright wrap claude, or ctxwright wrap -- python agent.py")
    return words


def _check(args: argparse.Namespace) -> None:
    if not (args.timeout > 0 and math.isfinite(args.timeout)):
        raise CtxwrightError(f"--timeout {args.timeout:g}: give a number of seconds above 0, e.g. --timeout 600")
    for flag, value in (("--log", args.log), ("--report", args.report)):
        if value is None:
            continue
        path = Path(value).expanduser()
        if path.is_dir() or not path.parent.is_dir():
            raise CtxwrightError(f"{flag} {value}: give a file in an existing folder")


def _inherited(args: argparse.Namespace, env: dict[str, str]) -> list[str]:
    """A base URL the user already gives the agent becomes the upstream it stands for: the
    agent would have talked to that gateway or local server, so the proxy forwards there
    (``--*-upstream`` and ``--upstream`` win). Notes for the log."""
    notes: list[str] = []
    if args.upstream:
        return notes
    for provider, var in (("anthropic", "ANTHROPIC_BASE_URL"), ("openai", "OPENAI_BASE_URL")):
        given = env.get(var, "").strip()
        if given and not getattr(args, f"{provider}_upstream", None):
            setattr(args, f"{provider}_upstream", given)
            notes.append(f"{var}={given} was set: {provider} calls are forwarded there")
    return notes


def _folder(store: Store) -> Path:
    """Where wrap's logs and reports go by default: ``wrap/`` beside the SQLite store, or in
    the user data dir for a PostgreSQL store (made ``0700``)."""
    from ctxwright.store.private import private_dir

    if store.path is not None:
        base = store.path.parent
    else:
        from platformdirs import user_data_dir

        base = Path(user_data_dir("ctxwright", appauthor=False))
    return private_dir(base / "wrap")


# -- what runs while the agent does ------------------------------------------------------------


class LogFile:
    """The per-call lines and the recorder's warnings, one line per write, flushed at once (a
    ``ctxwright statusline`` or ``tail -f`` reads it live)."""

    def __init__(self, path: Path) -> None:
        from ctxwright.store.private import open_private

        self.path = path
        self.file: BinaryIO = open_private(path, append=True)
        self.lock = threading.Lock()
        self.warnings = 0

    def line(self, text: str) -> None:
        with self.lock:
            self.file.write((text + "\n").encode("utf-8", "replace"))
            self.file.flush()

    def warn(self, text: str) -> None:
        self.warnings += 1
        self.line(text)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.file.close()


@dataclass
class Seen:
    """The sessions the agent's calls were recorded in, in the order they first appeared."""

    sessions: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, recorded: RecordedExchange) -> None:
        with self.lock:
            self.sessions[recorded.session_id] = self.sessions.get(recorded.session_id, 0) + 1


def _quiet_handler(_signum: int, _frame: FrameType | None) -> None:
    """SIGINT and SIGQUIT while the agent runs: the terminal sent them to the agent too.
    A handler, not ``SIG_IGN``: an ignored signal stays ignored across ``exec``, and the agent
    would then not see Ctrl-C either; a handler is reset to the default in the new program."""


def with_parent_death_signal(argv: Sequence[str], executable: str) -> tuple[list[str], str]:
    """The agent's command, started so that it gets SIGHUP if ctxwright dies first (Linux's
    ``PR_SET_PDEATHSIG``, set by util-linux's ``setpriv`` just before it execs the agent).

    Why: the agent shares ctxwright's process group and terminal. Were ctxwright killed (a
    SIGKILL, the OOM killer), the shell would take the terminal back while the agent still read
    it, and the agent would go on calling a proxy that no longer listens. SIGHUP is what a
    closed terminal sends: agents end on it. Without ``setpriv`` (not Linux, a minimal image)
    the agent starts as it is; ``preexec_fn`` is no way round that, as it is not safe in a
    process with threads (the proxy's). The agent then sees its own path as ``argv[0]``."""
    setpriv = shutil.which("setpriv") if sys.platform.startswith("linux") else None
    if setpriv is None:
        return list(argv), executable
    return [setpriv, "--pdeathsig", "HUP", "--", executable, *argv[1:]], setpriv


def run_agent(argv: Sequence[str], executable: str, env: dict[str, str], log_fd: int) -> int:
    """Run the agent on ctxwright's terminal until it exits; its exit status (``128 + N`` for
    a death by signal N). ctxwright's own stdout and stderr point at ``log_fd`` meanwhile."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved_out, saved_err = os.dup(1), os.dup(2)
    child: list[subprocess.Popen[bytes]] = []
    early: list[int] = []

    def forward(signum: int, _frame: FrameType | None) -> None:
        if not child:
            early.append(signum)
            return
        with contextlib.suppress(ProcessLookupError):
            child[0].send_signal(signum)

    handlers: dict[int, Callable[[int, FrameType | None], None]] = {
        signal.SIGINT: _quiet_handler,
        signal.SIGQUIT: _quiet_handler,
        signal.SIGTERM: forward,
        signal.SIGHUP: forward,
    }
    previous = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
    try:
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        command, program = with_parent_death_signal(argv, executable)
        proc = subprocess.Popen(
            command, executable=program, env=env, stdout=saved_out, stderr=saved_err, close_fds=True
        )
        child.append(proc)
        for signum in early:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signum)
        code = proc.wait()
    finally:
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
            sys.stderr.flush()
        os.dup2(saved_out, 1)
        os.dup2(saved_err, 2)
        os.close(saved_out)
        os.close(saved_err)
        for sig, old in previous.items():
            if sig in (signal.SIGTERM, signal.SIGHUP):  # SIGINT stays quiet until the recorder is drained
                signal.signal(sig, old)
    return 128 - code if code < 0 else code


@contextlib.contextmanager
def _quiet_interrupts() -> Iterator[None]:
    """Ctrl-C waits while the recorder drains (bounded): an interrupted drain would leave
    exchanges spooled instead of recorded."""
    old = signal.signal(signal.SIGINT, _quiet_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


# -- the summary -------------------------------------------------------------------------------


def _money(usd: float) -> str:
    """Dollars as the proxy's per-call line prints them (``cost_text``), cents from $1."""
    return f"${usd:,.2f}" if usd >= 1 else f"${usd:.4f}"


#: the provider's verdicts that are no miss, and those that only say the bytes changed (the
#: byte audit then names what changed: ``system_changed``, ``tools_changed``...)
_NO_MISS = frozenset({"hit", "first"})
_BYTES = frozenset({"byte_change", "provider_reported"})


def miss_cause(call: CallData) -> str | None:
    """Why a call missed the cache, or ``None`` when it did not: the provider's verdict when it
    names a cause of its own (``ttl_expired``, ``routing_key_changed``, ``below_minimum``...),
    else the byte audit's break (``system_changed``, ``tools_changed``, ``history_edited``...).
    A call that only appended (its cached count a little under its reusable prefix, as caches
    that read in blocks or at breakpoints report it) is no miss."""
    verdict = call.cache_cause
    if verdict in _NO_MISS:
        return None
    if verdict and verdict not in _BYTES:
        return verdict
    if call.is_break:
        return call.cause
    return verdict or None


@dataclass(frozen=True)
class Priced:
    session: str
    call: CallData
    cost: float | None
    lost: float | None


def summarize(data: ReportData, pricing: Pricing) -> list[str]:
    """The summary's lines after its first: the hit ratio, $ spent and $ lost by miss cause,
    and the worst breaks with their byte (the costliest first; unpriced calls by the tokens
    they prefilled)."""
    from ctxwright.audit.compare import cache_ratios

    rows: list[Priced] = []
    for s in data.sessions:
        for c in s.calls:
            r = c.priced(pricing)
            rows.append(Priced(s.key, c, None if r is None else r.cost, None if r is None else r.lost))
    known = [p.call for p in rows if p.call.cached_tokens is not None]
    ratio = cache_ratios(sum(c.cached_tokens or 0 for c in known), sum(c.prompt_tokens or 0 for c in known), 0)[0]
    prompt = sum(c.prompt_tokens or 0 for c in known)
    cached = sum(c.cached_tokens or 0 for c in known)
    hit = (
        f"hit ratio {ratio:.0%} ({cached:,} of {prompt:,} prompt tokens read from the cache)"
        if ratio is not None
        else "hit ratio unknown (no answer reported cached tokens)"
    )
    lines = [hit]
    priced = [p for p in rows if p.cost is not None]
    if priced:
        spent = sum(p.cost or 0.0 for p in priced)
        by_cause: dict[str, tuple[float, int]] = {}
        for p in priced:
            cause = miss_cause(p.call)
            if cause is not None and p.lost:
                total, n = by_cause.get(cause, (0.0, 0))
                by_cause[cause] = (total + p.lost, n + 1)
        lost = sum(t for t, _n in by_cause.values())
        refreshed = [r.cost for s in data.sessions for r in (c.priced(pricing) for c in s.refreshes) if r is not None]
        spent += sum(refreshed)  # --keep-warm's refreshes are paid for like any call
        money = f"{_money(spent)} spent"
        if refreshed:
            money += f" (of it {_money(sum(refreshed))} on {counted(len(refreshed), 'keep-warm refresh', 'keep-warm refreshes')})"
        if len(priced) < len(rows):
            money += f" ({len(priced)} of {counted(len(rows), 'call')} priced: the others' models have no price)"
        if by_cause:
            causes = sorted(by_cause.items(), key=lambda kv: -kv[1][0])
            named = ", ".join(f"{cause} {_money(t)} ({counted(n, 'call')})" for cause, (t, n) in causes[:CAUSES_SHOWN])
            more = f" and {len(causes) - CAUSES_SHOWN} more" if len(causes) > CAUSES_SHOWN else ""
            money += f"; {_money(lost)} lost to cache misses: {named}{more}"
        else:
            money += "; nothing lost to cache misses"
        lines.append(money)
    else:
        lines.append("$ unknown: no call's model has a price (give --prices FILE or --price-input/--price-cached/...)")
    breaks = [p for p in rows if miss_cause(p.call) is not None]
    breaks.sort(key=lambda p: (-(p.lost or 0.0), -p.call.prefilled))
    for p in breaks[:WORST_SHOWN]:
        c = p.call
        where = f" at {c.where}" if c.where else ""
        snippet = f": …{c.before[-20:]}|{c.after[:20]}…".replace("\n", "⏎") if (c.before or c.after) else ""
        shown = p.lost is not None and p.lost >= 0.00005  # what _money shows as more than $0.0000
        cost = f" ({_money(p.lost or 0.0)} lost)" if shown else f" ({c.prefilled:,} tokens prefilled)"
        lines.append(f"break: {p.session} #{c.index} {miss_cause(c)}{where}{snippet}{cost}")
    return lines


def _report(store: Store, seen: Seen, title: str, pricing: Pricing) -> ReportData | None:
    """Every session of this wrap audited as ``ctxwright report`` audits it, in one report."""
    from ctxwright.report.data import ReportData, from_proxy

    parts = [from_proxy(store, sid, pricing=pricing) for sid in seen.sessions]
    if not parts:
        return None
    return ReportData(
        title=title,
        sessions=[s for d in parts for s in d.sessions],
        token_source=parts[0].token_source,
        problems=[p for d in parts for p in d.problems],
        problems_total=sum(d.problems_total for d in parts),
    )


# -- the command -------------------------------------------------------------------------------


def cmd_wrap(args: argparse.Namespace) -> int:
    from ctxwright.cli.audit import pricing_from_args
    from ctxwright.cli.proxy import keep_warm_bounds, proxy_upstreams
    from ctxwright.core.supervise import find_executable
    from ctxwright.proxy.agents import agent_for
    from ctxwright.proxy.serve import HOLD_END_S
    from ctxwright.proxy.server import ProxyConfig
    from ctxwright.store.sessions import Store

    argv = agent_argv(args)
    row = agent_for(argv)
    if row.refuse:
        raise CtxwrightError(row.refuse)
    _check(args)
    keep_warm_bounds(args)  # a bad --keep-warm-max/--keep-warm-idle is said before anything starts
    pricing = pricing_from_args(args)  # a bad --prices file is said before anything starts
    env = dict(os.environ)
    try:
        executable = find_executable(argv[0], env, None)
    except FileNotFoundError:
        print(f"ctxwright wrap: {argv[0]}: command not found", file=sys.stderr)
        return 127
    except PermissionError:
        print(f"ctxwright wrap: {argv[0]}: not an executable file", file=sys.stderr)
        return 126
    notes = _inherited(args, env)
    upstream, upstreams, more = proxy_upstreams(args)
    notes += more
    try:
        config = ProxyConfig(
            upstream=upstream,
            upstreams=upstreams,
            read_timeout=args.timeout,
            record_before_end=HOLD_END_S,
            pricing=pricing,  # the per-call lines in the log priced as the summary prices them
            keep_headers=args.keep_warm,  # a keep-warm refresh needs the agent's key: held in memory only
            compress=args.compress,
            max_tool_tokens=args.max_tool_tokens,
            keep=tuple(args.keep),
        )
    except ValueError as exc:
        raise CtxwrightError(str(exc)) from None
    store = Store(args.db) if getattr(args, "db", None) else Store()
    try:
        return _wrapped(args, argv, executable, row, env, config, store, pricing, notes)
    finally:
        store.close()


def _wrapped(
    args: argparse.Namespace,
    argv: list[str],
    executable: str,
    row: Any,
    env: dict[str, str],
    config: Any,
    store: Store,
    pricing: Pricing,
    notes: list[str],
) -> int:
    from ctxwright.cli.proxy import keep_warmer, observers
    from ctxwright.proxy.agents import pointed
    from ctxwright.proxy.serve import SWITCH_INTERVAL_S, RecordingProxy

    stamp = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
    folder = _folder(store) if args.log is None or args.report is None else None
    log_path = Path(args.log).expanduser() if args.log else folder / f"{stamp}.log"  # type: ignore[operator]
    report_path = Path(args.report).expanduser() if args.report else folder / f"{stamp}.html"  # type: ignore[operator]
    log = LogFile(log_path)
    command = " ".join(argv)
    log.line(f"ctxwright wrap: {command} -> {config.label}, recording to {store.location}")
    for note in notes:
        log.line(f"ctxwright wrap: {note}")
    seen = Seen()
    try:
        warmer = keep_warmer(args, config.clock, printer=log.line)  # its lines go to the log, as the calls'
        observer = observers(seen, warmer.observe if warmer is not None else None)
        proxy = RecordingProxy.start(config, store, printer=log.line, warn=log.warn, observer=observer)
        if warmer is not None:
            warmer.attach(proxy.recorder)
    except Exception as exc:  # a port, a thread, a loop that would not start: the agent is not started
        from ctxwright.cli.common import explain

        log.close()
        raise CtxwrightError(f"the recording proxy did not start ({explain(exc)}); {argv[0]} was not started") from None
    sys.setswitchinterval(SWITCH_INTERVAL_S)  # as a served proxy: the relay waits less for the GIL
    try:
        full_argv, child_env = pointed(row, argv, proxy.url, env)
    except ValueError as exc:
        _stop(proxy, warmer)
        log.close()
        raise CtxwrightError(str(exc)) from None
    _no_proxy_for_loopback(child_env)
    child_env["CTXWRIGHT_DB"] = store.target  # `ctxwright statusline` run by the agent reads this store
    child_env["CTXWRIGHT_WRAP_LOG"] = str(log_path)
    log.line(f"ctxwright wrap: {row.name}: {' '.join(full_argv)} on {proxy.url}")
    try:
        code = run_agent(full_argv, executable, child_env, log.file.fileno())
    except OSError as exc:
        with _quiet_interrupts():
            _stop(proxy, warmer)
        log.close()
        raise CtxwrightError(f"cannot run {argv[0]}: {exc.strerror or exc}") from None
    with _quiet_interrupts():
        _stop(proxy, warmer)  # the recorder's queue is drained: every answered call is in the store
    recorder = proxy.recorder
    log.line(f"ctxwright wrap: {argv[0]} exited {code}; {recorder.summary()}")
    log.close()
    try:
        _say(args, os.path.basename(argv[0]), code, store, seen, recorder, log, report_path, pricing, command)
    except KeyboardInterrupt:
        print(f"ctxwright wrap: summary interrupted; {recorder.summary()} in {store.location}", file=sys.stderr)
    return code


def _stop(proxy: Any, warmer: Any) -> None:
    """Stop the keep-warm refreshes (``--keep-warm``; their held keys forgotten), then the proxy."""
    if warmer is not None:
        warmer.stop()
    proxy.stop()


def _no_proxy_for_loopback(env: dict[str, str]) -> None:
    """An ``HTTP(S)_PROXY`` in the environment would carry the agent's calls to 127.0.0.1 to
    that proxy (httpx and Node's clients honour it for loopback too): ``NO_PROXY`` names it."""
    for var in ("NO_PROXY", "no_proxy"):
        hosts = [h for h in env.get(var, "").split(",") if h.strip()]
        for host in ("127.0.0.1", "localhost"):
            if host not in hosts:
                hosts.append(host)
        env[var] = ",".join(hosts)


def _say(
    args: argparse.Namespace,
    program: str,
    code: int,
    store: Store,
    seen: Seen,
    recorder: Any,
    log: LogFile,
    report_path: Path,
    pricing: Pricing,
    command: str,
) -> None:
    """The one summary on stderr, and the report. ``--quiet`` keeps its first line and what
    must be said whatever: what was not recorded, the warnings, a report not written."""
    calls = sum(seen.sessions.values())
    head = (
        f"ctxwright wrap: {program} exited {code}; {counted(calls, 'model call')} in "
        f"{counted(len(seen.sessions), 'session')} recorded in {store.location}"
    )
    must: list[str] = []  # said even with --quiet
    if recorder.unrecorded:
        must.append(f"NOT all recorded: {recorder.summary()}")
    if log.warnings:
        must.append(f"{counted(log.warnings, 'warning')} about the recording in {log.path}")
    detail: list[str] = []
    written: Path | None = None
    if seen.sessions:
        from ctxwright.report import write_report

        try:
            data = _report(store, seen, f"ctxwright wrap: {command}", pricing)
            if data is not None:
                detail += summarize(data, pricing)
                written = write_report(data, report_path, pricing)
        except CtxwrightError as exc:  # a store gone away, a report that cannot be written
            must.append(f"no report: {exc}")
        detail.append(f"sessions: {' '.join(seen.sessions)}   per-call lines: {log.path}")
    if args.quiet:
        lines = [head + (f"; report: {written}" if written else ""), *must]
    else:
        lines = [head, *must, *detail, *([f"report: {written}"] if written else [])]
    text = "\n".join([lines[0], *(f"  {line}" for line in lines[1:])])
    with contextlib.suppress(OSError):  # a terminal that hung up (SIGHUP) takes no summary
        sys.stderr.write(text + "\n")
        sys.stderr.flush()


__all__ = ["LogFile", "Seen", "add_wrap_parser", "agent_argv", "cmd_wrap", "run_agent", "summarize"]
