"""``ctxwright tools search`` through the real entry point, and the catalog loader's refusals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ctxwright.cli.main import main
from ctxwright.errors import ToolCatalogError
from ctxwright.tools.catalog import bfcl_to_json_schema, check_parameters, load_catalog

#: what the installed ``ctxwright`` console script runs (pyproject's [project.scripts])
ENTRY = "import sys; from ctxwright.cli.main import main; sys.exit(main())"
SRC = Path(__file__).resolve().parents[1] / "src"


def tool_line(name: str, description: str, properties: dict[str, object] | None = None, **extra: object) -> str:
    parameters = {"type": "object", "properties": properties or {}}
    return json.dumps(
        {"type": "function", "function": {"name": name, "description": description, "parameters": parameters, **extra}}
    )


TOOLS = [
    tool_line("github.issues.create", "Open a new issue in a GitHub repository.", {"repoName": {"type": "string"}}),
    tool_line("github.issues.list", "List the issues of a GitHub repository.", {"repoName": {"type": "string"}}),
    tool_line("slack.chat.postMessage", "Send a message to a Slack channel.", {"channelId": {"type": "string"}}),
    tool_line("calendar_events_create", "Schedule a meeting on the calendar.", {"startTime": {"type": "string"}}),
]


@pytest.fixture
def catalog(tmp_path: Path) -> Path:
    path = tmp_path / "catalog.jsonl"
    path.write_text("\n".join(TOOLS) + "\n\n", encoding="utf-8")  # a trailing blank line is fine
    return path


def write(tmp_path: Path, lines: list[str], name: str = "bad.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_search_prints_ranked_names(catalog: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tools", "search", "--catalog", str(catalog), "post a message in slack"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:2] == ["1.", "slack.chat.postMessage"] and "Send a message" in out[0]


def test_search_json_has_full_tool_objects_and_respects_limit(
    catalog: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["tools", "search", "--catalog", str(catalog), "github issues", "--limit", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["query"] == "github issues" and data["mode"] == "bm25" and len(data["results"]) == 1
    top = data["results"][0]
    assert top["rank"] == 1 and top["name"].startswith("github.issues.")
    assert top["tool"]["function"]["parameters"]["properties"] == {"repoName": {"type": "string"}}


def test_regex_search(catalog: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tools", "search", "--catalog", str(catalog), "--regex", r"\.create$", "--json"]) == 0
    assert [r["name"] for r in json.loads(capsys.readouterr().out)["results"]] == ["github.issues.create"]
    assert main(["tools", "search", "--catalog", str(catalog), "--regex", "[unclosed"]) == 2
    assert "invalid regular expression" in capsys.readouterr().err


def test_no_match_says_so(catalog: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tools", "search", "--catalog", str(catalog), "kubernetes"]) == 0
    assert "no tool in" in capsys.readouterr().out


def test_queries_file_answers_one_line_per_query_in_order(
    catalog: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    queries = write(
        tmp_path,
        [
            json.dumps({"id": "q1", "query": "book a meeting"}),
            json.dumps({"id": 2, "query": "open an issue on github"}),
            json.dumps({"id": "q3", "query": "zzz nothing"}),
        ],
        "queries.jsonl",
    )
    assert main(["tools", "search", "--catalog", str(catalog), "--queries", str(queries), "--limit", "2"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["id"] for line in lines] == ["q1", 2, "q3"]
    assert lines[0]["results"] == ["calendar_events_create"]
    assert lines[1]["results"][0] == "github.issues.create" and len(lines[1]["results"]) == 2
    assert lines[2]["results"] == []


def test_bad_query_line_names_the_line(catalog: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    queries = write(tmp_path, [json.dumps({"id": 1, "query": "ok"}), json.dumps({"id": 2})], "q.jsonl")
    assert main(["tools", "search", "--catalog", str(catalog), "--queries", str(queries)]) == 2
    assert f"{queries}:2: expected" in capsys.readouterr().err
    queries = write(
        tmp_path, [json.dumps({"id": 1, "query": "ok"}), json.dumps({"id": "long", "query": "x" * 10_000})], "q.jsonl"
    )
    assert main(["tools", "search", "--catalog", str(catalog), "--queries", str(queries)]) == 2
    captured = capsys.readouterr()
    assert f"{queries}:2 (id 'long'): the search query is 10,000 characters" in captured.err
    assert [json.loads(line)["id"] for line in captured.out.splitlines()] == [1]


def test_a_batch_reports_each_bad_line_and_answers_all_the_others(
    catalog: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Hostile probe: bad lines of every kind in the middle of a batch; the good ones before
    and after them are answered, each bad one named on stderr by its line, in file order."""
    queries = write(
        tmp_path,
        [
            json.dumps({"id": "q1", "query": "book a meeting"}),
            "{not json",
            json.dumps({"id": "nq"}),
            json.dumps({"id": "long", "query": "x" * 1001}),
            "",
            json.dumps({"id": "q6", "query": "open an issue on github"}),
            "[" * 100_000 + "]" * 100_000,  # deeper than Python's JSON parser goes
            json.dumps({"id": "empty", "query": "   "}),
            json.dumps(["id", "query"]),
            json.dumps({"id": "q10", "query": "post a message in slack"}),
        ],
        "queries.jsonl",
    )
    assert main(["tools", "search", "--catalog", str(catalog), "--queries", str(queries), "--limit", "1"]) == 2
    captured = capsys.readouterr()
    answers = [json.loads(line) for line in captured.out.splitlines()]
    assert answers == [
        {"id": "q1", "results": ["calendar_events_create"]},
        {"id": "q6", "results": ["github.issues.create"]},
        {"id": "q10", "results": ["slack.chat.postMessage"]},
    ]
    err = captured.err.splitlines()
    assert "Traceback" not in captured.err and len(err) == 7, err
    assert err[0].startswith(f"ctxwright: {queries}:2: not JSON")
    assert err[1].startswith(f"ctxwright: {queries}:3: expected")
    assert err[2].startswith(f"ctxwright: {queries}:4 (id 'long'): the search query is 1,001 characters")
    assert err[3].startswith(f"ctxwright: {queries}:7: JSON nested too deeply")
    assert err[4].startswith(f"ctxwright: {queries}:8 (id 'empty'): the search query is empty")
    assert err[5].startswith(f"ctxwright: {queries}:9: expected")
    assert err[6].startswith("ctxwright: 6 of 9 line(s) of") and "not answered" in err[6]


def bfcl_line(name: str, parameters: dict[str, object]) -> str:
    return json.dumps({"type": "function", "function": {"name": name, "description": name, "parameters": parameters}})


def test_a_catalog_with_bfcl_type_names_loads_with_one_warning_and_json_schema_types(tmp_path: Path) -> None:
    area = {
        "type": "dict",
        "properties": {
            "base": {"type": "float", "description": "the base", "default": {"type": "dict"}},
            "point": {"type": "tuple", "items": {"type": "float"}},
            "options": {
                "type": "dict",
                "properties": {"anything": {"type": "any", "description": "a value"}, "n": {"type": ["float", "null"]}},
            },
            "shape": {"anyOf": [{"type": "dict", "properties": {}}, {"type": "string", "enum": ["dict", "float"]}]},
            "unit": {"type": "string"},
        },
        "required": ["base"],
    }
    path = write(
        tmp_path,
        [
            TOOLS[0],
            bfcl_line("geometry.area", area),
            bfcl_line(
                "math.mean", {"type": "dict", "properties": {"xs": {"type": "array", "items": {"type": "float"}}}}
            ),
        ],
        "bfcl.jsonl",
    )
    warnings: list[str] = []
    tools = load_catalog(path, warn=warnings.append)
    assert len(warnings) == 1
    assert f"{path}: 2 tool(s) use BFCL type names" in warnings[0] and f"first at {path}:2" in warnings[0]
    assert "dict as object" in warnings[0] and "float as number" in warnings[0] and "any as any type" in warnings[0]
    assert tools[1].spec.parameters == {
        "type": "object",
        "properties": {
            "base": {"type": "number", "description": "the base", "default": {"type": "dict"}},  # a value, kept
            "point": {"type": "array", "items": {"type": "number"}},
            "options": {
                "type": "object",
                "properties": {"anything": {"description": "a value"}, "n": {"type": ["number", "null"]}},
            },
            "shape": {"anyOf": [{"type": "object", "properties": {}}, {"type": "string", "enum": ["dict", "float"]}]},
            "unit": {"type": "string"},
        },
        "required": ["base"],
    }
    assert tools[2].spec.parameters["properties"]["xs"] == {"type": "array", "items": {"type": "number"}}
    assert tools[0].spec.to_wire() == json.loads(TOOLS[0])  # JSON Schema as it was: untouched
    # hostile: a type list with a non-name in it is mapped, then refused by the metaschema as it is
    odd = write(
        tmp_path, [bfcl_line("odd", {"type": "dict", "properties": {"x": {"type": ["float", {}]}}})], "odd.jsonl"
    )
    with pytest.raises(ToolCatalogError, match="not valid JSON Schema"):
        load_catalog(odd, warn=warnings.append)
    assert bfcl_to_json_schema({"type": ["float", "number", "null"]}, set()) == {"type": ["number", "null"]}


def test_tools_search_on_a_bfcl_catalog_prints_one_warning_and_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(
        tmp_path,
        [
            bfcl_line("geometry.area", {"type": "dict", "properties": {"base": {"type": "float"}}}),
            bfcl_line("math.mean", {"type": "dict", "properties": {"xs": {"type": "tuple"}}}),
        ],
        "bfcl.jsonl",
    )
    assert main(["tools", "search", "--catalog", str(path), "area of a triangle", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["results"][0]["tool"]["function"]["parameters"]["type"] == "object"
    (line,) = captured.err.splitlines()
    assert line.startswith("warning: ") and "2 tool(s) use BFCL type names" in line


def test_a_schema_nested_too_deeply_is_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Hostile probe: a schema deeper than the checks recurse is refused by name, no traceback."""
    schema: dict[str, object] = {"type": "object", "properties": {}}
    inner = schema
    for _ in range(300):
        nested: dict[str, object] = {"type": "dict", "properties": {}}
        inner["properties"] = {"a": nested}
        inner = nested
    path = write(tmp_path, [bfcl_line("deep", schema)], "deep.jsonl")
    assert main(["tools", "search", "--catalog", str(path), "x"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"{path}:1 (deep): " in err and "nested too deeply" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "give either a QUERY or --queries"),
        (["   "], "the search query is empty"),
        (["x" * 10_000], "10,000 characters; the limit is 1,000"),
        (["github", "--limit", "0"], "--limit must be at least 1"),
    ],
)
def test_bad_arguments_are_one_clear_line(
    catalog: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["tools", "search", "--catalog", str(catalog), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ([TOOLS[0], "{not json"], "bad.jsonl:2: not JSON"),
        ([json.dumps([1, 2])], "bad.jsonl:1: expected a JSON object, got list"),
        (
            [json.dumps({"name": "x", "description": "y"})],
            "bad.jsonl:1: not a tool object (it looks like a bare function: wrap it)",
        ),
        ([tool_line("has space", "d")], 'bad.jsonl:1: "function.name" must be a non-empty string without spaces'),
        ([tool_line("t", "d", {"a": {"type": "strin"}})], 'bad.jsonl:1 (t): "parameters" is not valid JSON Schema'),
        (
            [json.dumps({"type": "function", "function": {"name": "t", "parameters": {"type": "string"}}})],
            '"parameters" must describe an object',
        ),
        ([TOOLS[0], TOOLS[1], TOOLS[0]], "bad.jsonl:3: duplicate tool name 'github.issues.create', already defined at"),
        ([""], "has no tools"),
    ],
)
def test_bad_catalog_is_refused_naming_the_line(
    tmp_path: Path, lines: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, lines)
    assert main(["tools", "search", "--catalog", str(path), "github"]) == 2
    err = capsys.readouterr().err
    assert message in " ".join(err.split()) and "Traceback" not in err
    if "duplicate" in message:
        assert f"{path}:1" in err.replace("\n", "")


def test_missing_and_non_utf8_catalogs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tools", "search", "--catalog", str(tmp_path / "nope.jsonl"), "x"]) == 2
    assert "does not exist" in capsys.readouterr().err
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(TOOLS[0].replace("Open", "\xd6pen").encode("latin-1"))
    assert main(["tools", "search", "--catalog", str(path), "x"]) == 2
    assert "is not UTF-8" in capsys.readouterr().err


def test_catalog_keeps_dotted_names_verbatim_with_their_source(catalog: Path) -> None:
    tools = load_catalog(catalog)
    assert [t.spec.name for t in tools][:2] == ["github.issues.create", "github.issues.list"]
    assert tools[2].source == f"{catalog}:3"


def test_check_parameters_honours_the_schema_draft() -> None:
    draft7 = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"a": {"type": "string"}},
    }
    assert check_parameters(draft7, "here") is draft7
    with pytest.raises(ToolCatalogError, match=r"here: .*not valid JSON Schema.*\$\.properties\.a\.minimum"):
        check_parameters({"type": "object", "properties": {"a": {"minimum": "zero"}}}, "here")


def test_console_entry_point_runs_tools_search(catalog: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", ENTRY, "tools", "search", "--catalog", str(catalog), "schedule a meeting", "--json"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["results"][0]["name"] == "calendar_events_create"
