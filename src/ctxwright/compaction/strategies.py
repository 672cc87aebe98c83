"""The result-compression strategies of experiment 2-9, selectable by name.

A strategy decides what happens to tool results *when they are recorded* (or, for
``adaptive``, at a trigger). Compressing at record time touches nothing the provider has
cached -- the compressed text is what is sent, from the first time on.

* ``none`` -- results stay as the budget layer left them;
* ``per_result`` -- each result summarized alone (no notion of the task);
* ``combined`` -- all results of one tool round summarized together (the input is cut at
  the summarizer's budget: the tail of a long round can be lost, as the book observed);
* ``context_aware`` -- each result compressed *for the task*: the summarizer is told the
  query and what is already known, and keeps only new facts that answer it;
* ``context_aware_cited`` -- the same, every fact followed by its source id;
* ``adaptive`` -- nothing until the request passes 80% of the window, then every result not
  yet compressed, in one batch, each marked ``[COMPRESSED]`` and never compressed again;
* ``extractive`` -- no LLM: the query's most relevant sentences, verbatim, with source ids.

The original of every compressed result is saved (``offload.py``), so ``read_result``
restores it: the compression is lossy in the context and lossless on disk.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ctxwright.compaction.extractive import select_sentences

STRATEGIES = ("none", "per_result", "combined", "context_aware", "context_aware_cited", "adaptive", "extractive")
LLM_STRATEGIES = frozenset({"per_result", "combined", "context_aware", "context_aware_cited", "adaptive"})
COMPRESSED = "[COMPRESSED]"
#: Strategies read at most this much of a result (a 50 MB output is compressed from its start).
SCAN_CHARS = 400_000


@dataclass
class NewResult:
    tool_name: str
    result_id: str
    text: str  # the tool's full output
    content: str  # what the budget layer would record
    ok: bool = True


#: ``summarize(text, instruction, max_chars, query)``: one checked LLM summary, or None when it
#: failed or the circuit breaker is open. The manager provides it (``ContextManager.summarize``),
#: so failures, events and the breaker are handled in one place for strategies and layers alike.
Summarize = Callable[[str, str, int, "str | None"], "str | None"]


@dataclass
class StrategyContext:
    query: str
    known: list[str] = field(default_factory=list)  # earlier compressed results, newest last
    summarize: Summarize | None = None
    count: Callable[[str], int] = len
    #: result texts shorter than this are left alone: nothing to gain
    min_chars: int = 1_500
    max_summary_chars: int = 1_200

    def known_text(self, limit_chars: int = 1_500) -> str:
        out: list[str] = []
        used = 0
        for k in reversed(self.known):
            if used + len(k) > limit_chars:
                break
            out.append(k)
            used += len(k)
        return "\n".join(reversed(out)) or "(nothing yet)"


def _header(kind: str, r: NewResult) -> str:
    return (
        f"[{kind} of the {r.tool_name} result {r.result_id} ({len(r.text):,} chars); "
        f'read_result(result_id="{r.result_id}") shows the original]'
    )


def _llm(ctx: StrategyContext, text: str, instruction: str, query: str | None) -> str | None:
    """One summary, or None (no summarizer, a failure, or the breaker open)."""
    if ctx.summarize is None:
        return None
    return ctx.summarize(text[:SCAN_CHARS], instruction, ctx.max_summary_chars, query)


def aware_instruction(ctx: StrategyContext, cite: str | None) -> str:
    base = (
        f"Given the search query: {ctx.query}\nCurrent context: {ctx.known_text()}\n"
        "From the text below, write only the facts that help answer the query and are not already in the "
        "current context: names, roles, companies, dates. At most 8 short lines."
    )
    if cite:
        base += f" End every line with the source id [{cite}]."
    return base


def compress_one(name: str, r: NewResult, ctx: StrategyContext) -> str | None:
    """The compressed content of one result under strategy ``name``, or None to keep it."""
    if not r.ok or len(r.text) < ctx.min_chars:
        return None
    if name == "extractive":
        body = select_sentences(
            r.text[:SCAN_CHARS], ctx.query, max(64, ctx.max_summary_chars // 4), ctx.count, source=r.result_id
        )
        return f"{_header('extract', r)}\n{body}" if body else None
    if name == "per_result":
        out = _llm(ctx, r.text, "Summarize this tool result in 2-3 short paragraphs.", None)
        return f"{_header('summary', r)}\n{out}" if out else None
    if name in ("context_aware", "context_aware_cited", "adaptive"):
        cite = r.result_id if name == "context_aware_cited" else None
        out = _llm(ctx, r.text, aware_instruction(ctx, cite), ctx.query)
        if not out:
            return None
        tag = f"{COMPRESSED} " if name == "adaptive" else ""
        return f"{tag}{_header('task-aware summary', r)}\n{out}"
    return None


def compress_batch(name: str, results: list[NewResult], ctx: StrategyContext) -> list[str | None]:
    """Per result: the new content, or None to keep the budget layer's content."""
    if name in ("none", "adaptive"):
        return [None] * len(results)
    if name == "combined":
        todo = [r for r in results if r.ok and len(r.text) >= ctx.min_chars]
        if not todo:
            return [None] * len(results)
        joined = "\n\n".join(f"--- {r.tool_name} result {r.result_id} ---\n{r.text[:SCAN_CHARS]}" for r in todo)
        out = _llm(ctx, joined, "Summarize these tool results together in 2-3 short paragraphs.", None)
        if not out:
            return [None] * len(results)
        first = todo[0].result_id
        ids = ", ".join(r.result_id for r in todo)
        res: list[str | None] = []
        for r in results:
            if r not in todo:
                res.append(None)
            elif r.result_id == first:
                res.append(
                    f"[combined summary of results {ids}; read_result(result_id=...) shows each original]\n{out}"
                )
            else:
                res.append(
                    f'[summarized with result {first} above; read_result(result_id="{r.result_id}") shows the original]'
                )
        return res
    return [compress_one(name, r, ctx) for r in results]
