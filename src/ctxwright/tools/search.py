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
what BM25 counts): see :data:`FIELD_WEIGHTS`. English stopwords come from ``bm25s``
(``bm25s.stopwords.STOPWORDS_EN``, bundled, nothing is downloaded). ``bm25s`` offers stemming
only through the optional PyStemmer package, which ctxwright does not depend on; instead
:func:`tokenize` folds plural nouns ("issues" -> "issue"), the one inflection that separates
how users and tool names word the same object.

A query equal to a tool's exact name always ranks that tool first: a model that saw the name
(in an announcement or an earlier result) and searches for it must get it back.

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
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import bm25s
import numpy as np
from bm25s.stopwords import STOPWORDS_EN

from ctxwright.core.request import ToolSpec
from ctxwright.errors import ToolCatalogError, ToolSearchError

__all__ = ["FIELD_WEIGHTS", "MAX_QUERY_CHARS", "SearchHit", "ToolIndex", "tokenize", "tool_tokens"]

#: Longest query accepted, in characters. A real search is a few words; 1,000 characters is
#: already a paragraph, and a longer "query" is almost always a whole task pasted in by mistake.
MAX_QUERY_CHARS = 1000

#: How many times each field's tokens are counted in a tool's BM25 document. The name says
#: what the tool *is* (a word in it is the strongest evidence); the description says what it
#: does; parameters say what it takes, and are many, so they count once.
FIELD_WEIGHTS: dict[str, int] = {"name": 3, "description": 2, "parameter_names": 1, "parameter_descriptions": 1}

_STOPWORDS = frozenset(STOPWORDS_EN)
_CHUNK = re.compile(r"[A-Za-z0-9]+")
#: camelCase / PascalCase / acronym parts: "listOpenIssues" -> list Open Issues,
#: "HTTPServer" -> HTTP Server, "S3Bucket" -> S3 Bucket.
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z0-9]+|[A-Z]+[0-9]*|[0-9]+")
#: Sub-schema keys whose values are schemas (or lists / maps of schemas) to walk for parameters.
_SCHEMA_CHILDREN = (
    "items",
    "additionalProperties",
    "anyOf",
    "oneOf",
    "allOf",
    "prefixItems",
    "not",
    "$defs",
    "definitions",
)
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


def tokenize(text: str) -> list[str]:
    """The search tokens of free text: words split on punctuation and camelCase, lowercased,
    stopwords dropped, plurals folded. A camelCase word also keeps its whole form ("GitHub" ->
    github, git, hub), so a query matches it written either way."""
    return [token for chunk in _CHUNK.findall(text) for token in _chunk_tokens(chunk)]


@functools.lru_cache(maxsize=65536)
def _chunk_tokens(chunk: str) -> tuple[str, ...]:
    """One word's tokens; cached because catalogs repeat the same words thousands of times
    (this halves the time to index 10,000 tools)."""
    out: list[str] = []
    parts = _CAMEL.findall(chunk)
    if len(parts) > 1:
        whole = _norm(chunk)
        if whole is not None:
            out.append(whole)
    for part in parts:
        token = _norm(part)
        if token is not None:
            out.append(token)
    return tuple(out)


def _name_tokens(name: str) -> list[str]:
    """A name's parts plus the whole name, lowercased, as one token (``github.issues.create``)."""
    tokens = tokenize(name)
    whole = name.lower()
    if whole not in tokens:
        tokens.append(whole)
    return tokens


def _walk_schema(schema: Any, names: list[str], texts: list[str]) -> None:
    if isinstance(schema, list):
        for item in schema:
            _walk_schema(item, names, texts)
        return
    if not isinstance(schema, dict):
        return
    description = schema.get("description")
    if isinstance(description, str):
        texts.append(description)
    properties = schema.get("properties")
    if isinstance(properties, dict):
        for pname, sub in properties.items():
            names.append(str(pname))
            _walk_schema(sub, names, texts)
    for key in _SCHEMA_CHILDREN:
        child = schema.get(key)
        if isinstance(child, dict) and key in ("$defs", "definitions"):
            _walk_schema(list(child.values()), names, texts)
        elif child is not None:
            _walk_schema(child, names, texts)


def tool_tokens(spec: ToolSpec) -> list[str]:
    """The BM25 document of one tool: each field's tokens repeated by its :data:`FIELD_WEIGHTS`."""
    names: list[str] = []
    texts: list[str] = []
    _walk_schema(json.loads(spec.parameters_json), names, texts)
    fields = {
        "name": _name_tokens(spec.name),
        "description": tokenize(spec.description),
        "parameter_names": [token for pname in names for token in tokenize(pname)],
        "parameter_descriptions": [token for text in texts for token in tokenize(text)],
    }
    return [token for field, tokens in fields.items() for _ in range(FIELD_WEIGHTS[field]) for token in tokens]


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
    milliseconds for 10,000 tools; tokens are computed once per tool)."""

    def __init__(self, specs: Iterable[ToolSpec] = ()) -> None:
        self._specs: dict[str, ToolSpec] = {}
        self._tokens: dict[str, list[str]] = {}
        self._order: list[str] = []
        self._bm25: bm25s.BM25 | None = None
        self._stale = True
        self.add(specs)

    def __len__(self) -> int:
        return len(self._specs)

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(self._specs.values())

    def names(self) -> list[str]:
        """The tools' names, in the order they were added."""
        return list(self._specs)

    def get(self, name: str) -> ToolSpec | None:
        return self._specs.get(name)

    def add(self, specs: Iterable[ToolSpec]) -> None:
        """Add tools; a name already in the index (or twice in ``specs``) is refused with
        :class:`ToolCatalogError` and nothing is added, since two tools under one name would
        make ``call_tool`` ambiguous."""
        batch = list(specs)
        seen: set[str] = set()
        for spec in batch:
            if spec.name in self._specs or spec.name in seen:
                raise ToolCatalogError(
                    f"a tool named {spec.name!r} is already in the index; tool names must be unique "
                    "(rename one, or remove the old one first)"
                )
            seen.add(spec.name)
        for spec in batch:
            self._specs[spec.name] = spec
            self._tokens[spec.name] = tool_tokens(spec)
        if batch:
            self._stale = True

    def remove(self, names: Iterable[str]) -> int:
        """Remove tools by name; names not in the index are ignored (a server may announce a
        removal twice). Returns how many were removed."""
        removed = 0
        for name in names:
            if self._specs.pop(name, None) is not None:
                del self._tokens[name]
                removed += 1
        if removed:
            self._stale = True
        return removed

    def _index(self) -> bm25s.BM25 | None:
        if self._stale:
            self._order = list(self._specs)
            if self._order:
                bm25 = bm25s.BM25()
                bm25.index([self._tokens[name] for name in self._order], show_progress=False)
                self._bm25 = bm25
            else:
                self._bm25 = None
            self._stale = False
        return self._bm25

    def search(self, query: str, limit: int = 5, *, mode: Literal["bm25", "regex"] = "bm25") -> list[SearchHit]:
        """The best ``limit`` tools for ``query``, best first; tools that match nothing are
        left out, so fewer (or no) hits come back when few tools match."""
        if not isinstance(query, str) or not query.strip():
            raise ToolSearchError("the search query is empty: search with a few words that describe the task")
        if len(query) > MAX_QUERY_CHARS:
            raise ToolSearchError(
                f"the search query is {len(query):,} characters; the limit is {MAX_QUERY_CHARS:,}: "
                "search with a few words that describe the task, not the whole task"
            )
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ToolSearchError(f"limit must be a whole number of at least 1, got {limit!r}")
        if mode == "regex":
            return self._search_regex(query, limit)
        if mode != "bm25":
            raise ToolSearchError(f"unknown search mode {mode!r}: use 'bm25' or 'regex'")
        return self._search_bm25(query.strip(), limit)

    def _search_bm25(self, query: str, limit: int) -> list[SearchHit]:
        bm25 = self._index()
        if bm25 is None:
            return []
        exact = query if query in self._specs else None
        # a query without spaces may be a name: its whole lowercased form is a token too
        tokens = list(dict.fromkeys(tokenize(query) if any(c.isspace() for c in query) else _name_tokens(query)))
        scores: np.ndarray[Any, np.dtype[np.float32]] | None = None
        known = [token for token in tokens if token in bm25.vocab_dict]
        if known:
            scores = bm25.get_scores(known)
        hits: list[SearchHit] = []
        if exact is not None:
            position = self._order.index(exact)
            hits.append(SearchHit(exact, float(scores[position]) if scores is not None else 0.0, self._specs[exact]))
        if scores is None:
            return hits
        want = min(limit + 1, len(scores))
        top = np.argpartition(-scores, want - 1)[:want] if want < len(scores) else np.arange(len(scores))
        # stable order: score descending, then the order tools were added
        for position in sorted(top.tolist(), key=lambda i: (-float(scores[i]), i)):
            score = float(scores[position])
            name = self._order[position]
            if score <= 0.0 or name == exact:
                continue
            hits.append(SearchHit(name, score, self._specs[name]))
        return hits[:limit]

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
