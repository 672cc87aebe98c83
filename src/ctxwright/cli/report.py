"""``ctxwright report (ID | FILE) -o report.html``: the report of a stored session of any kind
(a run, or one the proxy or a framework recorded from the wire) or of any request log
``ctxwright audit`` reads, as one HTML file that opens offline (``report/``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ctxwright.core.words import counted
from ctxwright.errors import CtxwrightError

#: the command's line in ``ctxwright --help``: cli/main.py lists it without building the parser
HELP = "write an HTML report (charts of every call's context, cache reuse, breaks, tools, cost)"


def add_report_parser(sub: Any) -> None:
    """Register ``report`` on the ``ctxwright`` subcommand parser."""
    from ctxwright.cli.audit import add_price_options

    rp = sub.add_parser(
        "report",
        help=HELP,
    )
    rp.add_argument(
        "target",
        nargs="?",
        metavar="ID|FILE",
        help="a stored session's ID, of any kind (a unique start is enough), or a request log file (anything "
        "`ctxwright audit` reads)",
    )
    rp.add_argument("--proxy-session", metavar="ID", help="alias of ID for a proxy or framework session")
    rp.add_argument("-o", "--output", required=True, metavar="PATH", help="the HTML file to write")
    add_price_options(rp)
    rp.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    from ctxwright.cli.audit import pricing_from_args
    from ctxwright.cli.common import console

    prices = pricing_from_args(args)
    if (args.target is None) == (args.proxy_session is None):
        raise CtxwrightError(
            "name what to report: a session ID or a log FILE (one of them), e.g. ctxwright report SESSION_ID "
            "-o report.html"
        )
    out = Path(args.output).expanduser()
    if not out.parent.is_dir():
        raise CtxwrightError(f"-o {args.output}: the folder {out.parent} does not exist; create it or write elsewhere")
    if out.is_dir():
        raise CtxwrightError(f"-o {args.output} is a folder: give a file name, e.g. {out / 'report.html'}")
    data = _gather(args)
    from ctxwright.report import write_report

    write_report(data, out, prices)
    calls = sum(len(s.calls) for s in data.sessions)
    maps = sum(len(s.attention) for s in data.sessions)
    drawn = f", {counted(maps, 'attention map')}" if maps else ""  # saved by `ctxwright attention`
    console.print(
        f"report written to {out} ({counted(len(data.sessions), 'session')}, {counted(calls, 'call')}{drawn}, "
        f"{out.stat().st_size / 1e6:.1f} MB; opens offline)",
        highlight=False,
        markup=False,
        soft_wrap=True,  # one line a script can read, however long the path
    )
    return 0


def _gather(args: argparse.Namespace) -> Any:
    from ctxwright.cli.audit import pricing_from_args
    from ctxwright.cli.common import existing_store as _store
    from ctxwright.cli.sessions import SessionRef, named

    ref = named(args, args.target, proxy_session=args.proxy_session, files=True, usage="ctxwright report ID|FILE")
    if isinstance(ref, SessionRef):
        from ctxwright.report import from_proxy, from_store

        store = _store(args)
        try:
            if ref.from_the_wire:
                return from_proxy(store, ref.id, pricing=pricing_from_args(args))
            return from_store(store, ref.id)
        finally:
            store.close()
    target = Path(args.target).expanduser()
    if target.is_file():
        from ctxwright.report import from_log

        try:
            data = from_log(target, pricing=pricing_from_args(args))
        except OSError as exc:
            raise CtxwrightError(f"cannot read {args.target}: {exc.strerror or exc}") from None
        if not data.sessions and data.problems_total:
            raise CtxwrightError(
                f"no request could be read from {args.target} ({data.problems_total} problem(s), the first: "
                f"{data.problems[0]}); `ctxwright audit {args.target}` lists them"
            )
        return data
    if target.exists():
        raise CtxwrightError(f"{args.target} is not a file: give a request log file or a session ID")
    raise CtxwrightError(f"{args.target}: the report reads a request log from a file; write it to one first")
