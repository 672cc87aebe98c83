"""``ctxwright tools ...``: look at tools outside a session.

``tools search --catalog FILE "QUERY" [--limit K] [--json] [--regex] [--ranker R]`` ranks the tools of a
JSONL catalog (one OpenAI tool object per line, see ``tools/catalog.py``) the way the agent's
``search_tools`` does; ``--queries QFILE`` answers a JSONL file of ``{"id", "query"}`` at once,
one ``{"id": ..., "results": [name, ...]}`` line per query in rank order, for evaluating a
catalog's searchability offline. In a batch, a bad line (not JSON, no ``id``, a query empty or
too long) is reported on stderr with its ``QFILE:line`` and the others are answered: one stray
line of a thousand used to cost the whole batch. The exit code is then 2, so a script sees that
some queries have no answer line.

``tools list [run options] [--json]`` lists the tools a ``ctxwright run`` with the same options
(one declaration, ``recipe/``) would have, in prefix order: whether each is in the request's
``tools`` array or deferred (``tools/deferred.py``), the tokens its schema costs, and what it
declares: ``trust`` (are its results marked as external content?) and ``effects`` (does a
confirmation gate check it?). Why: with deferral what the model sees on every call is not the
tool list you passed, and a user should see which tools the defences treat how before a session
starts (``docs/defence.md``, ``docs/tools.md``). It runs the same wiring as ``run``
(``agent/wiring.py``) in memory -- the same backend (the embedded model when no backend option
is given, as for ``run``) and the same components -- so it lists exactly the tools of the
first request ``run`` sends; nothing is stored and no model is called.

Each subcommand registers itself in :func:`add_tools_parser`; add the next one there.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Literal

from ctxwright.errors import ToolSearchError
from ctxwright.tools.fusion import RANKERS

#: what ``tools search`` does with a query: rank it (a ranker) or match a regex
Mode = Literal["bm25", "embed", "hybrid", "regex"]


#: the command's line in ``ctxwright --help``: cli/main.py lists it without building the parser
HELP = "list the tools of a run, or search a tool catalog"


def add_tools_parser(sub: Any) -> None:
    """Register ``tools`` and its subcommands on the ``ctxwright`` subcommand parser."""
    tools = sub.add_parser("tools", help=HELP)
    tools_sub = tools.add_subparsers(dest="tools_command", required=True)
    _add_search_parser(tools_sub)
    _add_list_parser(tools_sub)


def _add_list_parser(tools_sub: Any) -> None:
    from ctxwright.recipe import add_arguments

    ls = tools_sub.add_parser(
        "list", help="the tools a run with these options would have: in the prefix or deferred, with schema tokens"
    )
    add_arguments(ls)
    ls.add_argument("--json", action="store_true", help="print the list as JSON")
    ls.set_defaults(func=cmd_list)


def _add_search_parser(tools_sub: Any) -> None:
    se = tools_sub.add_parser(
        "search",
        help="rank the tools of a JSONL catalog for a query (BM25 over names, descriptions and parameters; "
        "--ranker embed or hybrid with the embeddings extra)",
    )
    se.add_argument("query", nargs="?", metavar="QUERY", help="what the tool should do, in a few words")
    se.add_argument(
        "--catalog",
        required=True,
        metavar="FILE",
        help="JSONL, one OpenAI tool object per line (names may contain dots)",
    )
    se.add_argument(
        "--queries",
        metavar="QFILE",
        help='JSONL of {"id", "query"}: answer them all, one {"id", "results": [name, ...]} line each',
    )
    se.add_argument("--limit", type=int, default=5, metavar="K", help="at most K results per query (default 5)")
    se.add_argument("--json", action="store_true", help="print the results, with their full tool objects, as JSON")
    se.add_argument(
        "--regex", action="store_true", help="QUERY is a case-insensitive regex over names and descriptions"
    )
    se.add_argument(
        "--ranker",
        choices=RANKERS,
        default="bm25",
        help="bm25 (default): words; embed: meaning, with a small sentence-embedding model; hybrid: both, "
        "as a weighted sum. embed and hybrid need: pip install 'ctxwright[embeddings]'; their vectors "
        "are cached in CTXWRIGHT_EMBEDDINGS (default: the user cache folder)",
    )
    se.set_defaults(func=cmd_search)


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def _answer_queries(index: Any, path: str, limit: int, mode: Mode) -> int:
    """``--queries``: one result line per good query on stdout, in file order, and one line per
    bad one on stderr as it comes (``QFILE:line`` and what is wrong); then, if any was bad, one
    error line counting them (exit 2). A file that cannot be read at all is one error."""
    from ctxwright.tools.catalog import read_jsonl

    bad = answered = 0

    def report(message: str) -> None:
        nonlocal bad
        bad += 1
        print(f"ctxwright: {message}", file=sys.stderr, flush=True)

    for where, value in read_jsonl(path, "queries file", on_bad=lambda exc: report(str(exc))):
        if not isinstance(value, dict) or "id" not in value or not isinstance(value.get("query"), str):
            report(f'{where}: expected {{"id": ..., "query": "words"}} with a string query; fix that line')
            continue
        qid = value["id"]
        try:
            hits = index.search(value["query"], limit, mode=mode)
        except ToolSearchError as exc:
            report(f"{where} (id {qid!r}): {exc}")
            continue
        answered += 1
        print(json.dumps({"id": qid, "results": [hit.name for hit in hits]}, ensure_ascii=False), flush=True)
    if bad:
        raise ToolSearchError(
            f"{bad} of {bad + answered} line(s) of {path} not answered (each named above), the others were; "
            "fix those lines and run them again"
        )
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from ctxwright.tools.catalog import load_catalog
    from ctxwright.tools.search import ToolIndex

    if (args.query is None) == (args.queries is None):
        raise ToolSearchError(
            'give either a QUERY or --queries QFILE: ctxwright tools search --catalog FILE "what to do"'
        )
    if args.limit < 1:
        raise ToolSearchError(f"--limit must be at least 1, got {args.limit}")
    mode: Mode = "regex" if args.regex else args.ranker
    tools = load_catalog(args.catalog, warn=_warn)
    if args.ranker == "bm25" or args.regex:  # a regex matches text: no vectors to compute
        index = ToolIndex(tool.spec for tool in tools)
    else:
        from ctxwright.tools.embeddings import VectorCache

        cache = VectorCache.at_default_path(warn=_warn)
        index = ToolIndex((tool.spec for tool in tools), ranker=args.ranker, cache=cache)
    if args.queries is not None:
        return _answer_queries(index, args.queries, args.limit, mode)
    hits = index.search(args.query, args.limit, mode=mode)
    if args.json:
        results = [
            {"rank": rank, "name": hit.name, "score": round(hit.score, 4), "tool": hit.spec.to_wire()}
            for rank, hit in enumerate(hits, start=1)
        ]
        print(json.dumps({"query": args.query, "mode": mode, "results": results}, ensure_ascii=False, indent=1))
        return 0
    if not hits:
        print(f"no tool in {args.catalog} matches {args.query!r} ({len(index)} tools searched)")
        return 0
    width = max(len(hit.name) for hit in hits)
    for rank, hit in enumerate(hits, start=1):
        summary = " ".join(hit.spec.description.split())
        summary = summary if len(summary) <= 80 else summary[:79] + "…"
        print(f"{rank:>2}. {hit.name:<{width}}  {hit.score:7.3f}  {summary}")
    return 0


def tools_report(args: argparse.Namespace) -> dict[str, Any]:
    """What ``tools list`` prints, as data: the tools the same wiring as ``ctxwright run``
    builds (``agent/wiring.py``: the same backend and its defaults, the same components in
    the same order), in an in-memory session -- nothing is stored and no model is called."""
    from ctxwright.agent.wiring import wire
    from ctxwright.cli.common import approver, system_and_tools
    from ctxwright.recipe import given_from_args
    from ctxwright.tools.deferred import DISPATCH_TOOLS, schema_tokens

    system, tools = system_and_tools(args)
    options = given_from_args(args, approver=approver)
    backend = options.pop("backend", None)
    wired = wire(
        {"system": system, "tools": tools, **options},
        backend=backend,
        db=None,
        resume=None,
        take_over=False,
        on_event=None,
        default_backend="embedded",
    )
    try:
        registry = wired.assembly.tools
        counter = wired.backend.token_counter()
        rows = []
        for t in registry:
            deferred = registry.is_deferred(t.name)
            kind = "search" if t.name in DISPATCH_TOOLS else ("core" if t.deferred is False else "")
            rows.append(
                {
                    "name": t.name,
                    "trust": t.trust,
                    "effects": t.effects,
                    "deferred": deferred,
                    "where": "deferred" if deferred else "prefix",
                    "tokens": schema_tokens([t.spec], counter),
                    "core": t.deferred is False,
                    "kind": kind,
                    "source": t.source,
                    "description": t.description,
                }
            )
        return {
            "backend": wired.backend.name,
            "model": wired.backend.model,
            "window": wired.backend.context_window,
            "tokens_counted_by": counter.source,
            "defer_tools": wired.session.meta.get("harness", {}).get("defer_tools"),
            "prefix_tools": len(registry.specs()),
            "prefix_tool_tokens": schema_tokens(registry.specs(), counter),
            "deferred_tools": len(registry.deferred()),
            "deferred_tool_tokens": schema_tokens((t.spec for t in registry.deferred()), counter),
            "tools": rows,
        }
    finally:
        wired.close()


def cmd_list(args: argparse.Namespace) -> int:
    rep = tools_report(args)
    if args.json:
        print(json.dumps(rep, ensure_ascii=False, indent=1))
        return 0
    rows = rep["tools"]
    width = max([4, *(len(str(r["name"])) for r in rows)])
    print(f"{'name':<{width}}  {'trust':<9}  {'effects':<8}  {'in':<8}  {'tokens':>6}  description")
    for r in rows:
        summary = " ".join(str(r["description"]).split())
        summary = summary if len(summary) <= 60 else summary[:59] + "…"
        print(
            f"{r['name']:<{width}}  {r['trust']:<9}  {r['effects']:<8}  {r['where']:<8}  {r['tokens']:>6,}  {summary}"
        )
    share = ""
    if rep["window"]:
        share = f" ({rep['prefix_tool_tokens'] / rep['window']:.1%} of the {rep['window']:,}-token window)"
    print(
        f"tools array (every request): {rep['prefix_tools']} tool(s), {rep['prefix_tool_tokens']:,} tokens{share}; "
        f"deferred (found with search_tools): {rep['deferred_tools']} tool(s), {rep['deferred_tool_tokens']:,} "
        f"tokens; counted by {rep['tokens_counted_by']}"
    )
    return 0
