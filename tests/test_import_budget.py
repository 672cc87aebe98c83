"""The start-up import budget: the commands that only print (``--version``, ``--help``, a
command's ``--help``) import none of the heavy libraries a command loads when it needs them.

Why a test: each of these libraries costs tens to hundreds of milliseconds of CPU and megabytes
on every ``ctxwright`` start (the MCP SDK alone about half a second), and one module-level
import anywhere on the parser's path -- a constant read from the module that talks to the SDK,
a config type beside the code that ranks with numpy -- brings it back without any test failing.
``benchmarks/startup.py`` measures the CPU and memory; this test names the module that came back.

The names are read from ``python -X importtime`` (every module the process imported, with
what it was imported under), so the message says which ctxwright module pulled one in.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

#: Top-level packages a print-only command must not import: the MCP SDK (and its types and
#: servers), the numerical and search stack of tool search (numpy, bm25s, scipy) and its
#: embedding model's runtime (onnxruntime, tokenizers), the embedded model (llama.cpp), the
#: provider SDKs, the proxy's HTTP stack, the tools' argument validators (pydantic,
#: jsonschema), the skills' YAML reader and OpenTelemetry.
HEAVY = frozenset(
    {
        "mcp",
        "mcp_types",
        "numpy",
        "scipy",
        "bm25s",
        "onnxruntime",
        "tokenizers",
        "llama_cpp",
        "openai",
        "anthropic",
        "starlette",
        "uvicorn",
        "httpx",
        "sse_starlette",
        "pydantic",
        "pydantic_core",
        "jsonschema",
        "yaml",
        "opentelemetry",
    }
)

COMMANDS = [
    ["--version"],
    ["--help"],
    ["audit", "--help"],
    ["run", "--help"],
    ["proxy", "--help"],
    ["sessions", "--help"],
]


def imported(python_args: list[str]) -> list[tuple[str, list[str]]]:
    """``(module, the modules it was imported under, innermost first)`` for every module
    ``python -X importtime PYTHON_ARGS`` imported, in the order importtime prints them."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "COLUMNS": "100"}
    env.pop("PYTHONPROFILEIMPORTTIME", None)
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *python_args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows: list[tuple[int, str]] = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        name_field = line.split("|", 2)[2]
        depth = (len(name_field) - len(name_field.lstrip(" ")) - 1) // 2
        rows.append((depth, name_field.strip()))
    # importtime prints a module after everything it imported, one level deeper: a row's
    # parent is the next row at a smaller depth
    out: list[tuple[str, list[str]]] = []
    for i, (depth, name) in enumerate(rows):
        parents: list[str] = []
        want = depth
        for d, n in rows[i + 1 :]:
            if d < want:
                parents.append(n)
                want = d
                if d == 0:
                    break
        out.append((name, parents))
    return out


def heavy_imports(python_args: list[str]) -> list[str]:
    """One line per heavy package imported: the package and the ctxwright modules it came through."""
    found: dict[str, str] = {}
    for name, parents in imported(python_args):
        top = name.split(".")[0]
        if top in HEAVY and top not in found:
            chain = [p for p in parents if p.startswith("ctxwright")]
            found[top] = f"{top} (via {' <- '.join(chain[:4]) or 'the interpreter'})"
    return sorted(found.values())


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_print_only_commands_import_nothing_heavy(argv: list[str]) -> None:
    heavy = heavy_imports(["-m", "ctxwright", *argv])
    assert not heavy, (
        f"`ctxwright {' '.join(argv)}` imported heavy packages at start-up; import them inside the "
        "function that needs them, or move the constant the parser reads to a module that imports "
        "nothing:\n  " + "\n  ".join(heavy)
    )


def test_the_audit_of_a_log_imports_nothing_heavy(tmp_path: Path) -> None:
    """``ctxwright audit FILE`` reads JSON and audits it: half its CPU on the benchmark's log
    was start-up when the recipe brought the MCP SDK and numpy."""
    system = {"role": "system", "content": "You are terse."}
    first = {"model": "gpt-4o", "messages": [system, {"role": "user", "content": "hi"}]}
    second = {
        "model": "gpt-4o",
        "messages": [*first["messages"], {"role": "assistant", "content": "hello"}, {"role": "user", "content": "?"}],
    }
    log = tmp_path / "requests.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in (first, second)), encoding="utf-8")
    heavy = heavy_imports(["-m", "ctxwright", "audit", str(log)])
    assert not heavy, "`ctxwright audit FILE` imported heavy packages:\n  " + "\n  ".join(heavy)


def test_the_budget_sees_a_heavy_import() -> None:
    """The reading of importtime's output finds a heavy package and the ctxwright module that
    imported it (so the test above can fail): recall's search loads the BM25 index (numpy,
    bm25s) through ``tools/search.py``."""
    heavy = heavy_imports(["-c", "from ctxwright.compaction.recall import tokens_of; tokens_of('x')"])
    assert any(line.startswith("numpy (via ctxwright.tools.search") for line in heavy), heavy
    assert any(line.startswith("bm25s (via ctxwright.tools.search") for line in heavy), heavy


def test_resolving_options_with_an_mcp_server_imports_no_sdk() -> None:
    """Every command that takes options resolves them (``ctxwright proxy`` reads its telemetry
    settings that way at start); reading an ``--mcp`` command line is ``shlex``'s job, and the
    recipe once imported the module that talks to the MCP SDK for it."""
    code = (
        "from ctxwright.recipe import Recipe, backend_defaults; "
        "r = Recipe.resolve({'mcp_servers': ['python server.py']}, None, backend_defaults('openai')); "
        "assert r.mcp.servers == [['python', 'server.py']], r.mcp.servers"
    )
    heavy = heavy_imports(["-c", code])
    assert not heavy, "resolving the options imported heavy packages:\n  " + "\n  ".join(heavy)
