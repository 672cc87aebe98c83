"""Tool search: find the few tools a task needs in a catalog of hundreds or thousands.

Why it exists: with many tools (a few MCP servers are enough), sending every schema on every
call costs tens of thousands of prompt tokens and makes the model choose worse from a long list.
The book's rule is that the static prefix keeps only what is fixed: the agent gets a small,
fixed ``search_tools`` tool, and the full schemas of what it finds are appended to the
trajectory as a tool result, never added to the ``tools`` array (which would change the prefix
and throw away the provider's prompt cache on every discovery).

:class:`ToolIndex` ranks tools with BM25 (the ``bm25s`` library does the scoring) over four
fields of each tool:

- the **name**, split on ``.``, ``_``, ``-`` and camelCase, plus the whole name as one token
  (so ``github.issues.create`` matches "create a GitHub issue" and its own exact name);
- the **description**;
- the **parameter names** (split the same way) and **parameter descriptions**, walking nested
  objects, arrays and ``anyOf``/``oneOf``/``allOf`` branches.

Field weights are applied by repeating a field's tokens in the document (a term's frequency is
what BM25 counts): see :data:`FIELD_WEIGHTS`. Stopwords are ``bm25s``'s longer English list
(``bm25s.stopwords.STOPWORDS_EN_PLUS``, bundled, nothing is downloaded), since queries carry
conversational words ("can you", "what do we have") that would otherwise match any description
using them. ``bm25s`` stems only through the optional PyStemmer package, which ctxwright does
not depend on; :func:`tokenize` folds plural nouns instead ("issues" -> "issue"), the
inflection that most often separates how a user and a tool name word the same object.

Catalogs name tools with a handful of verbs (create, get, list, update, delete, search) while
people ask to "remove", "show every", "pull up" or "get rid of": the query, never the tools'
documents, is expanded with the verb its words stand for (:data:`ACTION_SYNONYMS`,
:data:`PHRASAL_VERBS`; ``expand_actions=False`` turns that off).

A query equal to a tool's exact name always ranks that tool first: a model that saw the name
(in an announcement or an earlier result) and searches for it must get it back.

Rankers (``ToolIndex(ranker=...)``, ``ctxwright tools search --ranker``): ``"bm25"`` (the
default, above); ``"embed"``, cosine similarity of the query and each tool's text
(:func:`tool_text`) with a small sentence-embedding model (``tools/embeddings.py``, the
``embeddings`` extra); ``"hybrid"``, a weighted sum of both (``tools/fusion.py``).
Measured on public function sets in ``benchmarks/tool_catalogs.py``.

``mode="regex"`` matches a case-insensitive regular expression against each tool's name and
description; tools whose name matches rank before those matched only by their description.

Limits, decided here: an empty query, a query longer than :data:`MAX_QUERY_CHARS` characters,
an invalid regular expression or a ``limit`` below 1 raise :class:`ToolSearchError` with a
message that says how to ask again (``search_tools`` turns it into a tool error the model reads);
a long query is refused rather than truncated, because a truncated query silently answers a
different question.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import bm25s
import numpy as np
from bm25s.stopwords import STOPWORDS_EN_PLUS

from ctxwright.core.request import ToolSpec
from ctxwright.errors import ConfigError, ToolCatalogError, ToolSearchError
from ctxwright.tools.fusion import RANKERS, Ranker, finite, weighted_sum

if TYPE_CHECKING:
    from ctxwright.tools.embeddings import Embedder, VectorCache

__all__ = [
    "ACTION_SYNONYMS",
    "FIELD_WEIGHTS",
    "MAX_QUERY_CHARS",
    "PHRASAL_VERBS",
    "QUERY_CACHE",
    "RANKERS",
    "Ranker",
    "SearchHit",
    "ToolIndex",
    "best_scored",
    "bm25_index",
    "bm25_scores",
    "numbered",
    "tokenize",
    "tool_text",
    "tool_tokens",
]

#: a tool whose text has a cosine below this with the query is not a match for ``embed``: every
#: text has some similarity with every query, and a search for something the catalog does not
#: have should come back empty, as BM25's does
MIN_COSINE = 0.2
#: characters of a tool's description embedded: the model reads 256 tokens, the first
#: sentences say what the tool does
EMBED_DESCRIPTION_CHARS = 1000

#: Query vectors an index keeps (least recently used dropped first): a model that searches again
#: with the same words -- a retry, the same task in the next session of a long-lived process --
#: skips the model's forward pass, the largest part of an embedding search (384 floats each).
QUERY_CACHE = 256

#: Longest query accepted, in characters. A real search is a few words; 1,000 characters is
#: already a paragraph, and a longer "query" is almost always a whole task pasted in by mistake.
MAX_QUERY_CHARS = 1000

#: How many times each field's tokens are counted in a tool's BM25 document. The name says
#: what the tool *is* (a word in it is the strongest evidence); the description says what it
#: does; parameters say what it takes, and are many, so they count once.
FIELD_WEIGHTS: dict[str, int] = {"name": 3, "description": 2, "parameter_names": 1, "parameter_descriptions": 1}

#: Words users say for the actions tool names are built from, by the action's usual word in a
#: tool's name. Catalogs name their tools with a handful of verbs (``create``, ``get``,
#: ``list``, ``update``, ``delete``, ``search``...) while people ask to "remove", "show every"
#: or "look up"; BM25 only matches words, so a query word listed here also searches for the
#: verb (expansion happens on the query only; the tools' documents are left as written).
#: The groups were decided by measurement on public function sets (``benchmarks/tool_catalogs.py``,
#: each group removed in turn; docs/tools.md has the table): ``send`` ("post", "email", "notify",
#: "tell") lowered recall@5 on two BFCL sets and raised it on none, so it is gone. The others
#: are kept: most raise a public set or change none and lift the user-phrased generated one; ``get`` and
#: ``search`` lower some public sets and raise another, and removing either would put one
#: below the ranking before the measurement.
ACTION_SYNONYMS: dict[str, tuple[str, ...]] = {
    "create": ("make", "add", "new", "register", "generate", "setup"),
    "get": ("fetch", "retrieve", "show", "view", "detail", "display", "lookup", "info", "see", "look"),
    "list": ("all", "every", "enumerate", "browse", "show", "overview"),
    "update": ("change", "edit", "modify", "rename", "alter", "patch"),
    "delete": ("remove", "erase", "destroy", "drop", "trash", "rid", "wipe", "purge"),
    "search": ("find", "look", "lookup", "locate", "seek", "query", "match", "mentioning"),
    "cancel": ("abort", "stop", "call", "revoke"),
}

#: Phrasal verbs whose first word means something else alone ("pull up the order" is not about
#: pull requests, "set up a repo" does not set anything): the pair is read as the action and the
#: first word is not searched.
PHRASAL_VERBS: dict[tuple[str, str], str] = {
    ("set", "up"): "create",
    ("pull", "up"): "get",
    ("look", "up"): "get",
    ("get", "rid"): "delete",
    ("call", "off"): "cancel",
    ("shut", "down"): "stop",
    ("turn", "off"): "stop",
    ("turn", "on"): "start",
    ("kick", "off"): "start",
    ("look", "for"): "search",
}

_STOPWORDS = frozenset(STOPWORDS_EN_PLUS)
#: a word: letters and digits of any script (``_`` and punctuation separate words)
_CHUNK = re.compile(r"[^\W_]+")
#: camelCase / PascalCase / acronym parts: "listOpenIssues" -> list Open Issues,
#: "HTTPServer" -> HTTP Server, "S3Bucket" -> S3 Bucket.
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z0-9]+|[A-Z]+[0-9]*|[0-9]+")
#: Sub-schema keys whose values are schemas (or lists / maps of schemas) to walk for parameters.
_SCHEMA_CHILDREN = frozenset(
    {"items", "additionalProperties", "anyOf", "oneOf", "allOf", "prefixItems", "not", "$defs", "definitions"}
)
_SCHEMA_MAPS = frozenset({"$defs", "definitions"})  # name -> schema maps (the names are not parameters)
#: Endings never folded as plurals ("status", "address", "analysis", "bus").
_NOT_PLURAL = ("ss", "us", "is", "os")


def _singular(word: str) -> str:
    """Fold a plural English noun to its singular; leave everything else alone."""
    if len(word) <= 3 or not word.endswith("s") or word.endswith(_NOT_PLURAL) or word[-2].isdigit():
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("sses", "shes", "ches", "xes", "zes", "tuses", "buses")):
        return word[:-2]
    return word[:-1]


def _norm(word: str) -> str | None:
    word = word.lower()
    if len(word) < 2 or word in _STOPWORDS:
        return None
    return _singular(word)


def _lone_digit(chunk: str) -> bool:
    return len(chunk) == 1 and chunk.isdigit()


def tokenize(text: str, *, identifiers: bool = False, digits: bool = False) -> list[str]:
    """The search tokens of text: words split on punctuation, lowercased, stopwords and
    one-character words dropped, plurals folded. A camelCase identifier ("listOpenIssues",
    "channelId") is split into its parts and also kept whole; in prose a capitalised word such
    as "GitHub" or "PagerDuty" is a proper name and stays one token (split, it would count a
    service's name two or three times over in every description that mentions it).
    ``identifiers=True`` (names, parameter names) splits every camelCase word. Words in other
    scripts are kept whole, lowercased.

    ``digits=True`` keeps a lone digit as a token: ``recall`` searches passages by it
    ("document 2", "step 3"; without it, "document 2" found documents 9, 8 and 1). Tool search
    does not: kept in its documents, lone digits lowered recall@5 on the public sets of
    ``benchmarks/tool_catalogs.py`` (a query's values, "0.5" or "5 heads", matched any
    description with a 5); a numbered name part is matched instead (:func:`numbered`)."""
    if not digits:
        return [
            token for chunk in _CHUNK.findall(text) for token in _chunk_tokens(chunk, identifiers or chunk[0].islower())
        ]
    return [
        token
        for chunk in _CHUNK.findall(text)
        for token in ((chunk,) if _lone_digit(chunk) else _chunk_tokens(chunk, identifiers or chunk[0].islower()))
    ]


def numbered(text: str) -> tuple[str, ...]:
    """The numbered parts of a name or a query: each lone digit with the word before it, as one
    token (``Weather_1_GetWeather`` -> ``weather_1``, "report for stage 4" -> ``stage_4``,
    ``v2.1`` -> ``v2_1``). Tool search ranks a tool whose name or parameter names have a
    numbered part the query names above those that match only its words
    (:meth:`ToolIndex.search`): "stage 4" means ``stage_4_report``, not the first stage_N.
    Kept out of the BM25 documents, which stay as measured (:func:`tokenize`)."""
    out: list[str] = []
    prev: str | None = None
    for chunk in _CHUNK.findall(text):
        if _lone_digit(chunk) and prev is not None:
            out.append(f"{prev}_{chunk}")
        word = chunk.lower()
        prev = None if chunk.isdigit() or word in _STOPWORDS else _singular(word)
    return tuple(dict.fromkeys(out))


@functools.lru_cache(maxsize=65536)
def _chunk_tokens(chunk: str, split: bool) -> tuple[str, ...]:
    """One word's tokens; cached because catalogs repeat the same words thousands of times
    (this halves the time to index 10,000 tools)."""
    whole = _norm(chunk)
    parts = _CAMEL.findall(chunk) if split and chunk.isascii() else []
    if len(parts) <= 1:
        return (whole,) if whole is not None else ()
    out = [whole] if whole is not None else []
    out.extend(token for token in map(_norm, parts) if token is not None)
    return tuple(out)


def _name_tokens(name: str) -> list[str]:
    """A name's parts plus the whole name, lowercased, as one token (``github.issues.create``)."""
    tokens = tokenize(name, identifiers=True)
    whole = name.lower()
    if whole not in tokens:
        tokens.append(whole)
    return tokens


def _walk_schema(schema: Any, names: list[str], texts: list[str]) -> None:
    """Collect parameter names and descriptions from a schema and every schema inside it."""
    if isinstance(schema, list):
        for item in schema:
            _walk_schema(item, names, texts)
        return
    if not isinstance(schema, dict):
        return
    for key, value in schema.items():
        if key == "description":
            if isinstance(value, str):
                texts.append(value)
        elif key == "properties":
            if isinstance(value, dict):
                for pname, sub in value.items():
                    names.append(str(pname))
                    _walk_schema(sub, names, texts)
        elif key in _SCHEMA_CHILDREN:
            _walk_schema(
                list(value.values()) if key in _SCHEMA_MAPS and isinstance(value, dict) else value, names, texts
            )


@functools.lru_cache(maxsize=65536)
def _text_tokens(text: str, identifiers: bool) -> tuple[str, ...]:
    """:func:`tokenize`, cached: parameter names and descriptions ("ID of the issue", "Page
    token from the previous call") repeat across the tools of one server."""
    return tuple(tokenize(text, identifiers=identifiers))


def tool_tokens(spec: ToolSpec) -> list[str]:
    """The BM25 document of one tool: each field's tokens repeated by its :data:`FIELD_WEIGHTS`."""
    names: list[str] = []
    texts: list[str] = []
    _walk_schema(json.loads(spec.parameters_json), names, texts)
    fields = {
        "name": _name_tokens(spec.name),
        "description": tokenize(spec.description),
        "parameter_names": [token for pname in names for token in _text_tokens(pname, True)],
        "parameter_descriptions": [token for text in texts for token in _text_tokens(text, False)],
    }
    return [token for field, tokens in fields.items() for _ in range(FIELD_WEIGHTS[field]) for token in tokens]


def tool_text(spec: ToolSpec) -> str:
    """The text of a tool the embedding model reads: its name as words and its description
    (``get user by id: Get a user.``). Parameter names were measured too and left out: with
    them the weighted sum's recall@5 was lower on 8 of the 9 sets of
    ``benchmarks/tool_catalogs.py`` and equal on one, and every text is longer to embed. Part of the vector cache's key (``tools/embeddings.py``), so a changed
    name or description gets a new vector."""
    words = " ".join(_CAMEL.findall(spec.name.replace(".", " ").replace("_", " ").replace("-", " "))) or spec.name
    return f"{words}: {' '.join(spec.description.split())[:EMBED_DESCRIPTION_CHARS]}"


def bm25_index(documents: Sequence[Sequence[str]]) -> bm25s.BM25 | None:
    """A BM25 index of token lists (:func:`tokenize`); ``None`` for no documents. The one
    place an index is made: tool search and ``recall`` (``compaction/recall.py``) share it."""
    if not documents:
        return None
    bm25 = bm25s.BM25()
    bm25.index([list(d) for d in documents], show_progress=False)
    return bm25


def bm25_scores(bm25: bm25s.BM25, tokens: Sequence[str]) -> np.ndarray[Any, np.dtype[np.float32]] | None:
    """Each document's score for the query ``tokens``; ``None`` when no token is in the index."""
    known = [token for token in tokens if token in bm25.vocab_dict]
    return bm25.get_scores(known) if known else None


def best_scored(scores: np.ndarray[Any, np.dtype[np.float32]], limit: int) -> list[tuple[int, float]]:
    """The ``limit`` best ``(position, score)`` pairs that match at all (score above 0), in a
    stable order: score descending, then the order the documents were indexed."""
    want = min(limit, len(scores))
    if want < 1:
        return []
    top = np.argpartition(-scores, want - 1)[:want] if want < len(scores) else np.arange(len(scores))
    ordered = sorted(top.tolist(), key=lambda i: (-float(scores[i]), i))
    return [(i, float(scores[i])) for i in ordered if float(scores[i]) > 0.0]


@dataclass(frozen=True)
class SearchHit:
    """One ranked result: the tool's name, its score (higher is better) and its full spec."""

    name: str
    score: float
    spec: ToolSpec


class ToolIndex:
    """A searchable set of tools, kept in sync as tools come and go (an MCP server's
    ``tools/list_changed``): :meth:`add` and :meth:`remove` mark the index stale, and the next
    :meth:`search` rebuilds the ``bm25s`` index from the cached token lists (a few hundred
    milliseconds for 10,000 tools; tokens are computed once per tool).

    Thread-safe: an MCP client may add or remove tools from its own thread while the agent
    searches; a lock keeps a search from seeing a half-rebuilt index."""

    def __init__(
        self,
        specs: Iterable[ToolSpec] = (),
        *,
        expand_actions: bool = True,
        synonyms: Mapping[str, Sequence[str]] = ACTION_SYNONYMS,
        ranker: Ranker = "bm25",
        embedder: Embedder | None = None,
        cache: VectorCache | None = None,
        query_cache: int = QUERY_CACHE,
    ) -> None:
        """``expand_actions=False`` searches the query's own words only, without
        :data:`ACTION_SYNONYMS` and :data:`PHRASAL_VERBS` (the benchmark measures both);
        ``synonyms`` replaces the table (the benchmark's earlier release).

        ``ranker``: how :meth:`search` ranks by default (``"bm25"``, ``"embed"``, ``"hybrid"``).
        Any other than ``"bm25"`` needs an ``embedder`` (default: ``tools/embeddings.py``'s
        MiniLM, loaded once per process; a :class:`ConfigError` that names the extra when it is
        not installed) and embeds every tool as it is added, reading vectors from ``cache``
        where it has them; the vectors of the last ``query_cache`` distinct queries are kept
        (:data:`QUERY_CACHE`; 0 keeps none)."""
        if ranker not in RANKERS:
            raise ConfigError(f"unknown tool search ranker {ranker!r}: use one of {', '.join(RANKERS)}")
        self.ranker: Ranker = ranker
        if ranker != "bm25" and embedder is None:
            from ctxwright.tools.embeddings import load_embedder

            embedder = load_embedder()
        self._embedder = embedder
        self._cache = cache
        self._vectors: dict[str, np.ndarray[Any, np.dtype[np.float32]]] = {}
        self._matrix: np.ndarray[Any, np.dtype[np.float32]] | None = None
        self._query_cache = max(0, query_cache)
        self._query_vectors: OrderedDict[str, np.ndarray[Any, np.dtype[np.float32]]] = OrderedDict()
        self._expand: dict[str, list[str]] = {}
        self._phrasal: dict[tuple[str, str], str] = dict(PHRASAL_VERBS) if expand_actions else {}
        for action, words in synonyms.items() if expand_actions else ():
            for word in words:
                self._expand.setdefault(_singular(word.lower()), []).append(action)
        self._specs: dict[str, ToolSpec] = {}
        self._tokens: dict[str, list[str]] = {}
        #: the index's tools (positions) by each numbered part of their names (:func:`numbered`)
        self._numbered: dict[str, list[int]] = {}
        self._order: list[str] = []
        self._position: dict[str, int] = {}
        self._bm25: bm25s.BM25 | None = None
        self._stale = True
        self._lock = threading.RLock()
        self.add(specs)

    def __len__(self) -> int:
        return len(self._specs)

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[ToolSpec]:
        with self._lock:
            return iter(list(self._specs.values()))

    def names(self) -> list[str]:
        """The tools' names, in the order they were added."""
        with self._lock:
            return list(self._specs)

    def get(self, name: str) -> ToolSpec | None:
        return self._specs.get(name)

    def add(self, specs: Iterable[ToolSpec]) -> None:
        """Add tools; a name already in the index (or twice in ``specs``) is refused with
        :class:`ToolCatalogError` and nothing is added, since two tools under one name would
        make ``call_tool`` ambiguous."""
        batch = list(specs)
        self._check_new(batch)  # before the work below: a refused batch costs nothing
        tokens = [tool_tokens(spec) for spec in batch]  # outside the lock: searches go on meanwhile
        vectors = self._embed_tools(batch)
        with self._lock:
            self._check_new(batch)  # again: another thread may have added one of them meanwhile
            for i, (spec, doc) in enumerate(zip(batch, tokens, strict=True)):
                self._specs[spec.name] = spec
                self._tokens[spec.name] = doc
                if vectors is not None:
                    self._vectors[spec.name] = vectors[i]
            if batch:
                self._stale = True

    def _check_new(self, batch: list[ToolSpec]) -> None:
        seen: set[str] = set()
        for spec in batch:
            if spec.name in self._specs or spec.name in seen:
                raise ToolCatalogError(
                    f"a tool named {spec.name!r} is already in the index; tool names must be unique "
                    "(rename one, or remove the old one first)"
                )
            seen.add(spec.name)

    def remove(self, names: Iterable[str]) -> int:
        """Remove tools by name; names not in the index are ignored (a server may announce a
        removal twice). Returns how many were removed."""
        removed = 0
        with self._lock:
            for name in names:
                if self._specs.pop(name, None) is not None:
                    del self._tokens[name]
                    self._vectors.pop(name, None)
                    removed += 1
            if removed:
                self._stale = True
        return removed

    def _index(self) -> bm25s.BM25 | None:
        if self._stale:
            self._order = list(self._specs)
            self._position = {name: i for i, name in enumerate(self._order)}
            self._bm25 = bm25_index([self._tokens[name] for name in self._order])
            self._numbered = {}
            for position, name in enumerate(self._order):
                for part in numbered(name):
                    self._numbered.setdefault(part, []).append(position)
            # one contiguous float32 block, in index order: the cosine is one pass over it
            self._matrix = (
                np.ascontiguousarray(np.stack([self._vectors[name] for name in self._order]), dtype=np.float32)
                if self._vectors and self._order
                else None
            )
            self._stale = False
        return self._bm25

    def _embed_tools(self, batch: list[ToolSpec]) -> np.ndarray[Any, np.dtype[np.float32]] | None:
        if self._embedder is None or not batch:
            return None
        from ctxwright.tools.embeddings import embed_cached

        return embed_cached(self._embedder, [tool_text(spec) for spec in batch], self._cache)

    def search(
        self, query: str, limit: int = 5, *, mode: Literal["bm25", "embed", "hybrid", "regex"] | None = None
    ) -> list[SearchHit]:
        """The best ``limit`` tools for ``query``, best first; tools that match nothing are
        left out, so fewer (or no) hits come back when few tools match. ``mode``: the
        index's ``ranker`` when not given; ``"bm25"`` always works, ``"embed"`` and
        ``"hybrid"`` need an index built with an embedding ranker, ``"regex"`` see above."""
        if not isinstance(query, str) or not query.strip():
            raise ToolSearchError("the search query is empty: search with a few words that describe the task")
        if len(query) > MAX_QUERY_CHARS:
            raise ToolSearchError(
                f"the search query is {len(query):,} characters; the limit is {MAX_QUERY_CHARS:,}: "
                "search with a few words that describe the task, not the whole task"
            )
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ToolSearchError(f"limit must be a whole number of at least 1, got {limit!r}")
        mode = self.ranker if mode is None else mode
        if mode not in (*RANKERS, "regex"):
            raise ToolSearchError(f"unknown search mode {mode!r}: use one of {', '.join((*RANKERS, 'regex'))}")
        if mode in ("embed", "hybrid") and self._embedder is None:
            raise ToolSearchError(
                f"search mode {mode!r} needs an index built with an embedding ranker (ToolIndex(ranker={mode!r}))"
            )
        with self._lock:
            if mode == "regex":
                return self._search_regex(query, limit)
            if mode == "bm25":
                return self._search_bm25(query.strip(), limit)
            return self._search_embedded(query.strip(), limit, hybrid=mode == "hybrid")

    def _search_bm25(self, query: str, limit: int) -> list[SearchHit]:
        bm25 = self._index()
        if bm25 is None:
            return []
        exact = query if query in self._specs else None
        scores = self._word_scores(bm25, query)
        hits: list[SearchHit] = []
        if exact is not None:
            position = self._position[exact]
            hits.append(SearchHit(exact, float(scores[position]) if scores is not None else 0.0, self._specs[exact]))
        if scores is None:
            return hits
        for position, score in best_scored(scores, limit + 1):
            name = self._order[position]
            if name != exact:
                hits.append(SearchHit(name, score, self._specs[name]))
        return hits[:limit]

    def scores(self, query: str) -> tuple[list[str], np.ndarray[Any, np.dtype[np.float32]] | None, Any]:
        """Every tool's raw scores for ``query``: the names in index order, BM25's scores
        (``None`` when no query word is indexed) and the cosines (``None`` without an
        embedding ranker). For analysis and for other fusions (``benchmarks/tool_catalogs.py``
        measures a weighted sum with it); :meth:`search` is the ranking."""
        with self._lock:
            words, cosine = self._raw_scores(query.strip())
            return list(self._order), words, cosine

    def _raw_scores(self, query: str) -> tuple[np.ndarray[Any, np.dtype[np.float32]] | None, Any]:
        """BM25's scores (``None`` when no query word is indexed) and the cosines (``None``
        without an embedding ranker), in index order; the caller holds the lock. A cosine that
        is not finite (a damaged vector, a query the model could not embed) is 0, so it
        neither matches nor hides what BM25 matches (``fusion.finite``)."""
        bm25 = self._index()
        words = self._word_scores(bm25, query) if bm25 is not None else None
        if self._matrix is None or self._embedder is None:
            return words, None
        return words, finite(self._cosines(self._matrix, self._embedder, query))

    def _cosines(
        self, matrix: np.ndarray[Any, np.dtype[np.float32]], embedder: Embedder, query: str
    ) -> np.ndarray[Any, np.dtype[np.float32]]:
        """Each tool's cosine with the query: its unit vector (from the query cache when the
        same words were searched lately) times the matrix of unit tool vectors. The product
        is ``einsum``'s own loop, not BLAS: numpy's OpenBLAS hands a matrix-vector product to
        its thread pool, and on a loaded machine those threads wait for a core. Probed on this
        project's 2-core machine at a load average of 9, 10,000 × 384: the ``@`` product's
        median went from 0.3 to 6.7 ms between rounds, ``einsum``'s stayed at 0.6 ms.
        ``benchmarks/tool_catalogs.py`` measures the whole query path before and after."""
        vector = self._query_vectors.get(query)
        if vector is None:
            vector = np.ascontiguousarray(embedder.embed([query])[0], dtype=np.float32)
            if self._query_cache:
                self._query_vectors[query] = vector
                while len(self._query_vectors) > self._query_cache:
                    self._query_vectors.popitem(last=False)
        else:
            self._query_vectors.move_to_end(query)
        return np.einsum("ij,j->i", matrix, vector)

    def _word_scores(self, bm25: bm25s.BM25, query: str) -> np.ndarray[Any, np.dtype[np.float32]] | None:
        """BM25's scores for the query's tokens (a query without spaces may be a name: its
        whole lowercased form is a token too), with the tools whose name has a numbered part
        the query names (:func:`numbered`: "stage 4", ``stage_4_report``) raised above every
        other by the query's best score; ``None`` when nothing matches."""
        scores = bm25_scores(bm25, self._query_tokens(query))
        boosted = sorted({p for part in numbered(query) for p in self._numbered.get(part, ())})
        if not boosted:
            return scores
        out = np.zeros(len(self._order), dtype=np.float32) if scores is None else scores.copy()
        out[boosted] += max(float(out.max()), 1.0)
        return out

    def _search_embedded(self, query: str, limit: int, *, hybrid: bool) -> list[SearchHit]:
        """``embed``: the tools closest in meaning (cosine of the normalised vectors, at least
        :data:`MIN_COSINE`); ``hybrid``: the tools either ranker matches (a BM25 score, or a
        cosine of at least :data:`MIN_COSINE`), by ``fusion.weighted_sum`` of both. An exact
        name comes first either way, as in BM25 search."""
        words, cosine = self._raw_scores(query)
        if cosine is None:
            return []
        exact = query if query in self._specs else None
        matched = cosine >= MIN_COSINE
        scores = cosine
        if hybrid:
            scores = weighted_sum(words, cosine)
            if words is not None:
                matched = matched | (words > 0)
        # best_scored keeps scores above 0: shift the matched ones up, the others to 0
        ranked = best_scored(np.where(matched, scores + 2.0, 0.0), limit + 1)
        hits: list[SearchHit] = []
        if exact is not None:
            position = self._position[exact]
            hits.append(SearchHit(exact, float(scores[position]), self._specs[exact]))
        for position, _ in ranked:
            name = self._order[position]
            if name != exact:
                hits.append(SearchHit(name, float(scores[position]), self._specs[name]))
        return hits[:limit]

    def _query_tokens(self, query: str) -> list[str]:
        """The query's tokens plus the action words its verbs stand for (expansion reads the
        words before stopwords are dropped: "show all", "set up")."""
        if not any(c.isspace() for c in query):
            return _name_tokens(query)  # a query without spaces may be a name
        words = [_singular(chunk.lower()) for chunk in _CHUNK.findall(query)]
        actions: list[str] = []
        skip: set[str] = set()
        for first, second in itertools.pairwise(words):
            action = self._phrasal.get((first, second))
            if action is not None:
                actions.append(action)
                skip.add(first)
        for word in words:
            if word not in skip:
                actions.extend(self._expand.get(word, ()))
        tokens = [token for token in tokenize(query) if token not in skip]
        return list(dict.fromkeys([*tokens, *actions]))

    def _search_regex(self, pattern: str, limit: int) -> list[SearchHit]:
        try:
            regex = re.compile(pattern, re.IGNORECASE)
        except re.error as exc:
            raise ToolSearchError(
                f"invalid regular expression {pattern!r}: {exc}; escape special characters "
                "(for example '\\.' for a dot) or search without regex mode"
            ) from None
        by_name: list[SearchHit] = []
        by_description: list[SearchHit] = []
        for name, spec in self._specs.items():
            if regex.search(name):
                by_name.append(SearchHit(name, 2.0, spec))
            elif regex.search(spec.description):
                by_description.append(SearchHit(name, 1.0, spec))
            if len(by_name) >= limit:
                break
        return (by_name + by_description)[:limit]
