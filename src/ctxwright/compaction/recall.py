"""The ``recall(query)`` tool: search what compaction hid, and get the passage back.

Why: a compaction that hid a result the model needs later leaves it two bad choices -- guess
the fact, or run the tool again (if it can). ``read_result`` needs a result id the model may
no longer see. ``recall`` searches the text of every event this session's compactions hid
(replaced or dropped; the originals of offloaded results read from their files) and returns
the best passages with their event ids and result ids, appended like any tool result: the
harness never un-compacts anything, so the cached prefix stays as it is. Results the budget
layer shortened as they were recorded (offloaded to a file, or compressed by a strategy) are
searched too, from their full text on disk: their excerpt is all the model ever saw of them,
so a fact past the excerpt is as lost from view as one a compaction hid
(:func:`shortened_seqs`).

Ranking is BM25 with the index code tool search uses (``tools/search.py``: :func:`tokenize`,
:func:`bm25_index`, :func:`best_scored`), over passages of about :data:`PASSAGE_CHARS`
characters; each passage's identifiers (``identifiers.py``) are tokens too, whole and
lowercased, so a query for ``PROJ-4821`` or a URL matches that exact value. A lone digit is a
token (``tokenize(digits=True)``): "document 2" finds document 2, not every document.

Trust: a passage is as trusted as the event it came from. The tool is declared trusted and
its result is marked external (``ToolResult.external``) when any passage it returns came
from an untrusted tool's result -- recall can never launder external content into trusted
text. Results of ``recall`` and ``read_result`` themselves are not indexed (they are copies).

Bounded: at most :data:`MAX_PASSAGES` passages indexed (the newest hidden events win),
:data:`SCAN_CHARS` characters read per event, :data:`MAX_LIMIT` passages returned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ctxwright.compaction.identifiers import extract
from ctxwright.compaction.ledger import event_text, hidden_seqs
from ctxwright.compaction.offload import ResultFiles
from ctxwright.core.events import CompactionEvent, Event, MessageEvent, ToolEvent
from ctxwright.tools.component import Build, Component, register_core
from ctxwright.tools.registry import Tool, ToolResult

if TYPE_CHECKING:
    import bm25s

    from ctxwright.core.session import Session

RECALL_TOOL = "recall"
#: tools whose results are copies of other events' text: never indexed
_COPIES = frozenset({RECALL_TOOL, "read_result"})
PASSAGE_CHARS = 600
MAX_PASSAGES = 20_000
SCAN_CHARS = 200_000
MAX_LIMIT = 5


@dataclass(frozen=True)
class Passage:
    seq: int
    text: str
    tool: str | None
    result_id: str | None
    external: bool


def passages(text: str, size: int = PASSAGE_CHARS) -> list[str]:
    """``text`` in pieces of about ``size`` characters, cut at line ends where it can."""
    out: list[str] = []
    cur = ""
    for line in text.splitlines(keepends=True):
        while len(line) > size:  # one very long line: cut it
            if cur:
                out.append(cur)
                cur = ""
            out.append(line[:size])
            line = line[size:]
        if len(cur) + len(line) > size and cur:
            out.append(cur)
            cur = ""
        cur += line
    if cur.strip():
        out.append(cur)
    return [p.strip("\n") for p in out if p.strip()]


def tokens_of(text: str) -> list[str]:
    """A passage's (or a query's) search tokens: :func:`tokenize` with lone digits kept, plus
    its whole identifiers."""
    from ctxwright.tools.search import tokenize  # numpy and bm25s: loaded when a session first recalls

    return tokenize(text, digits=True) + [i.lower() for i in extract(text, limit=50)]


def shortened_seqs(events: list[Event]) -> set[int]:
    """Seqs of tool results recorded shorter than they were (offloaded or compressed at record
    time): the model saw an excerpt, the whole text is in the offload folder."""
    return {
        i
        for i, ev in enumerate(events)
        if isinstance(ev, ToolEvent) and ev.result_id and (ev.offload is not None or ev.compressed is not None)
    }


class Recall:
    """Binds the tool to a session and its offload folder (``ContextManager.bind``)."""

    def __init__(self) -> None:
        self.session: Session | None = None
        self.files: ResultFiles | None = None
        self._key: tuple[int, int, int] | None = None
        self._passages: list[Passage] = []
        self._bm25: bm25s.BM25 | None = None

    def bind(self, session: Session, files: ResultFiles) -> None:
        self.session, self.files = session, files
        self._key = None

    def _original(self, ev: ToolEvent) -> str | None:
        rid = ev.result_id
        if rid and self.files is not None and self.files.exists(rid):
            return self.files.read(rid, 0, SCAN_CHARS)[0]
        return None

    def _index(self) -> None:
        assert self.session is not None
        events = self.session.events
        compactions = sum(1 for ev in events if isinstance(ev, CompactionEvent))
        shortened = shortened_seqs(events)
        key = (id(self.session), compactions, len(shortened))
        if key == self._key:
            return
        found: list[Passage] = []
        hidden = hidden_seqs(events)
        for seq in sorted(hidden | shortened, reverse=True):  # newest first: they win the cap
            ev = events[seq] if 0 <= seq < len(events) else None
            if not isinstance(ev, MessageEvent):
                continue
            tool = ev.tool_name if isinstance(ev, ToolEvent) else None
            if tool in _COPIES:
                continue
            original = self._original(ev) if isinstance(ev, ToolEvent) else None
            if seq not in hidden and original is None:
                continue  # shortened, but its full text is not on disk: the excerpt is still in view
            text = event_text(ev, original)[:SCAN_CHARS]
            rid = ev.result_id if isinstance(ev, ToolEvent) else None
            external = isinstance(ev, ToolEvent) and ev.external
            found.extend(Passage(seq, p, tool, rid, external) for p in passages(text))
            if len(found) >= MAX_PASSAGES:
                break
        self._passages = found[:MAX_PASSAGES]
        from ctxwright.tools.search import bm25_index

        self._bm25 = bm25_index([tokens_of(p.text) for p in self._passages])
        self._key = key

    def search(self, query: str, limit: int = 3) -> list[Passage]:
        """The best ``limit`` hidden passages for ``query``, best first."""
        from ctxwright.tools.search import MAX_QUERY_CHARS, best_scored, bm25_scores

        if self.session is None:
            raise RuntimeError("recall is not bound to a session")
        if not isinstance(query, str) or not query.strip():
            raise ValueError("the query is empty: ask with the words or identifier you are looking for")
        if len(query) > MAX_QUERY_CHARS:
            raise ValueError(f"the query is {len(query):,} characters; ask with at most {MAX_QUERY_CHARS:,}")
        limit = max(1, min(int(limit), MAX_LIMIT))
        self._index()
        if self._bm25 is None:
            return []
        scores = bm25_scores(self._bm25, tokens_of(query))
        if scores is None:
            return []
        return [self._passages[i] for i, _ in best_scored(scores, limit)]

    def recall(self, query: str, limit: int = 3) -> ToolResult:
        """Search the earlier events that compaction hid from this conversation and return the
        best matching passages, each with its event id and result_id.

        Args:
            query: the words, name or identifier to look for (a ticket, a path, a hash...)
            limit: how many passages to return (at most 5)
        """
        hits = self.search(query, limit)
        if not hits:
            events = self.session.events if self.session else []
            if not hidden_seqs(events) and not shortened_seqs(events):
                return ToolResult("[recall: nothing has been hidden by compaction yet; everything is still above]")
            return ToolResult(f"[recall: no hidden passage matches {query!r}; try other words or an identifier]")
        parts = [f"[recall: {len(hits)} passage(s) from events compaction hid, best first]"]
        for p in hits:
            where = f"event {p.seq}"
            if p.tool:
                where += f" · {p.tool} result"
            if p.result_id:
                where += f' · read_result(result_id="{p.result_id}") shows all of it'
            parts.append(f"--- {where} ---\n{p.text}")
        return ToolResult("\n".join(parts), external=any(p.external for p in hits))

    def tool(self) -> Tool:
        return Tool.from_function(
            self.recall,
            name=RECALL_TOOL,
            description="Search the earlier parts of this conversation that were compacted away "
            "(summarized, cleared or dropped) and get the matching passages back.",
            # passages of untrusted results come back marked external (ToolResult.external)
            trust="trusted",
            effects="read",
        )


class RecallComponent(Component):
    """``recall`` in the prefix. The context manager binds it to its session (``bind``); a
    child agent recalls its own hidden events."""

    name = RECALL_TOOL

    def __init__(self) -> None:
        self.recaller = Recall()

    def add_tools(self, build: Build) -> None:
        register_core(build.tools, [self.recaller.tool()], "recall (recall=)")

    def own_tools(self) -> list[Tool]:
        return [self.recaller.tool()]

    def fork(self) -> Component | None:
        return RecallComponent()
