"""The demo tools (get_current_time, get_weather, calculator) are there only when no source of
tools at all is given: beside the user's own tools a small model called get_weather instead.
Through the real wiring (``Harness``, ``ctxwright tools list``), with a real MCP server
subprocess from ``tests/mcp_servers`` and a real skill folder."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from ctxwright import Harness, ScriptedBackend, tool
from ctxwright.cli.main import main
from ctxwright.tools.builtin import DEMO_TOOL_NAMES, default_tools
from skill_folders import make_skill, no_conventional_skills  # noqa: F401 (an autouse fixture)

SERVERS = Path(__file__).parent / "mcp_servers"
#: the harness's own optional tools off: what is left is the tool sources' own
QUIET: dict[str, Any] = {"status": False, "todo": False, "delegate": False, "read_result": False, "recall": False}
SERVED = ["--backend", "openai", "--model", "m", "--base-url", "http://127.0.0.1:9/v1"]


@tool
def lookup_order(order_id: str) -> str:
    """Look an order up.

    Args:
        order_id: the order's id
    """
    return f"order {order_id}: shipped"


def first_request_tools(**options: Any) -> list[str]:
    backend = ScriptedBackend(["done"])
    with Harness(backend=backend, **QUIET, **options) as h:
        h.run("hello")
    return [t.name for t in backend.requests[0].tools]


def skills_root(tmp_path: Path) -> Path:
    root = tmp_path / "skills"
    make_skill(root, "house-style")
    return root


def test_nothing_given_is_the_demo_tools() -> None:
    assert first_request_tools() == list(DEMO_TOOL_NAMES)


@pytest.mark.parametrize("source", ["skills", "mcp", "workspace", "tools", "no tools", "skills catalog"])
def test_any_tool_source_leaves_the_demo_tools_out(source: str, tmp_path: Path) -> None:
    options: dict[str, Any] = {
        "skills": {"skills": [str(skills_root(tmp_path))]},
        "mcp": {"mcp_servers": [f"{sys.executable} {SERVERS / 'basic.py'}"]},
        "workspace": {"workspace": tmp_path},
        "tools": {"tools": [lookup_order]},
        "no tools": {"tools": []},
        "skills catalog": {"skills_catalog": "prefix"},
    }[source]
    names = first_request_tools(**options)
    assert not set(DEMO_TOOL_NAMES) & set(names), names
    if source not in ("no tools", "skills catalog"):
        assert names, "the source's own tools are there"


def test_tools_list_with_skills_or_mcp_shows_no_demo_tools(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = skills_root(tmp_path)
    mcp = f"{sys.executable} {SERVERS / 'basic.py'}"
    for flags in (["--skills", str(root)], ["--mcp", mcp], ["--skills", str(root), "--mcp", mcp], []):
        assert (
            main(
                [
                    "tools",
                    "list",
                    "--json",
                    "--no-todo",
                    "--no-delegate",
                    "--no-read-result",
                    "--no-recall",
                    *flags,
                    *SERVED,
                ]
            )
            == 0
        )
        names = [r["name"] for r in json.loads(capsys.readouterr().out)["tools"]]
        if flags:
            assert "get_weather" not in names and names, (flags, names)
        else:
            assert names == list(DEMO_TOOL_NAMES)


def test_a_session_started_with_demo_tools_beside_skills_resumes_with_them(tmp_path: Path) -> None:
    """A session's prefix is frozen: one that has the demo tools beside skills (as sessions
    started before the demo tools gave way) resumes with them, and one without them, without."""
    db, root = tmp_path / "s.db", skills_root(tmp_path)
    with Harness(tools=default_tools(), backend=ScriptedBackend(["a"]), db=db, skills=[root], **QUIET) as h:
        h.run("one")
        with_demo = h.session.id
    with Harness(backend=ScriptedBackend(["b"]), db=db, skills=[root], **QUIET) as h:
        h.run("two")
        without = h.session.id
    for sid, demo in ((with_demo, True), (without, False)):
        backend = ScriptedBackend(["c"])
        with Harness(backend=backend, db=db, resume=sid, **QUIET) as h:
            h.run("again")
        names = [t.name for t in backend.requests[0].tools]
        assert (names[:3] == list(DEMO_TOOL_NAMES)) is demo and "Skill" in names
