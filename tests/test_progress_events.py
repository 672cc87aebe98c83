"""Progress events: every ``ProgressEvent`` type is documented in ``docs/events.md`` with its
kind and fields (the table is checked against the dataclasses, so a new event type cannot
ship undocumented), the doc's example runs, every event a run emits serialises with
``to_dict``, and the CLI printer ignores a type it does not know."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from ctxwright import Harness, ScriptedBackend, tool
from ctxwright.backends.scripted import call
from ctxwright.cli.progress import RunPrinter
from ctxwright.core.messages import Message, ToolCall
from ctxwright.core.progress import ProgressEvent, ToolDone, ToolStart

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "ctxwright"
DOC = ROOT / "docs" / "events.md"


def _event_modules() -> list[str]:
    """Every module of the package that defines a class deriving from ``ProgressEvent``
    (found in the source, so an event defined anywhere is seen without importing everything)."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and any(
                (isinstance(b, ast.Name) and b.id == "ProgressEvent")
                or (isinstance(b, ast.Attribute) and b.attr == "ProgressEvent")
                for b in node.bases
            ):
                parts = path.relative_to(SRC.parent).with_suffix("").parts
                found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
                break
    return found


def _event_types() -> list[type[ProgressEvent]]:
    for name in _event_modules():
        importlib.import_module(name)
    out: list[type[ProgressEvent]] = []
    todo = list(ProgressEvent.__subclasses__())
    while todo:
        cls = todo.pop()
        if cls.__module__.startswith("ctxwright."):
            out.append(cls)
        todo.extend(cls.__subclasses__())
    return out


def _documented() -> dict[str, tuple[str, list[str]]]:
    """kind -> (class, fields) from the doc's table."""
    rows: dict[str, tuple[str, list[str]]] = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        # a cell may hold an escaped pipe (a field typed ``X \| None``)
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if len(cells) != 4 or not cells[0].startswith("`"):
            continue
        kind, cls = cells[0].strip("`"), cells[1].strip("`")
        assert kind not in rows, f"{kind!r} is listed twice in docs/events.md"
        rows[kind] = (cls, re.findall(r"`([^`]*)`", cells[2]))
    return rows


def _row(cls: type[ProgressEvent]) -> tuple[str, list[str]]:
    where = cls.__module__.removeprefix("ctxwright.")
    fields = [f"{f.name}: {f.type}" for f in dataclasses.fields(cls) if f.name != "child"]
    return f"{where}.{cls.__name__}", fields


def test_every_event_type_is_documented_with_its_kind_and_fields():
    types = _event_types()
    assert len(types) >= 20
    kinds = [cls.kind for cls in types]
    assert len(set(kinds)) == len(kinds), "two event types share a kind"
    assert all(k != ProgressEvent.kind for k in kinds), "an event type without its own kind"
    documented = _documented()
    code = {cls.kind: _row(cls) for cls in types}
    missing = sorted(set(code) - set(documented))
    assert not missing, f"docs/events.md does not list: {missing}"
    assert not sorted(set(documented) - set(code)), "docs/events.md lists kinds no event type has"
    for kind, row in code.items():
        assert documented[kind] == row, f"docs/events.md's row for {kind!r} differs from the class"


def test_every_event_type_is_a_frozen_dataclass_with_keyword_fields():
    for cls in _event_types():
        params = dataclasses.fields(cls)
        assert cls.__dataclass_params__.frozen, cls  # type: ignore[attr-defined]
        assert all(f.kw_only for f in params), cls
        assert params[0].name == "child" and params[0].default is None


def _doc_blocks() -> list[str]:
    return re.findall(r"^```python[ \t]*\n(.*?)^```", DOC.read_text(encoding="utf-8"), re.M | re.S)


def test_the_docs_example_runs(capsys):
    (code,) = _doc_blocks()
    exec(compile(code, str(DOC), "exec"), {"__name__": "__events_doc__"})
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" (")[0] for line in lines] == ["model call 0", "add -> 5", "model call 1"]
    assert lines[1] == "add -> 5 (ok)"


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def test_the_events_of_a_run_serialise_with_to_dict():
    events: list[ProgressEvent] = []
    backend = ScriptedBackend([Message(role="assistant", tool_calls=(call("add", {"a": 2, "b": 3}),)), "5"])
    with Harness("You add numbers.", [add], backend=backend, db=None, on_event=events.append) as h:
        h.run("What is 2 + 3?")
    kinds = [e.kind for e in events]
    assert kinds[0] == "user" and kinds[-1] == "assistant" and kinds.count("request") == 2
    for e in events:
        out = json.loads(json.dumps(e.to_dict(), default=str))
        assert out["kind"] == e.kind and out["child"] is None
    (done,) = [e for e in events if isinstance(e, ToolDone)]
    assert done.to_dict()["call"] == {"id": done.call.id, "name": "add", "arguments": done.call.arguments}
    assert done.content == "5" and done.ok


def test_a_sub_agents_event_carries_its_session_id():
    event = dataclasses.replace(ToolStart(call=ToolCall("c1", "add", "{}")), child="child-session")
    assert event.child == "child-session" and event.kind == "tool_start"
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.child = None  # type: ignore[misc]


def test_the_printer_ignores_an_event_type_it_does_not_know():
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Unknown(ProgressEvent):
        kind = "unknown"
        value: str

    out, err = io.StringIO(), io.StringIO()
    printer = RunPrinter(Console(file=out, width=80), Console(file=err, width=80), live=False)
    printer(Unknown(value="x"))
    printer(Unknown(value="y", child="c"))
    printer.close()
    assert out.getvalue() == err.getvalue() == ""
