"""Tests for ctxwright.tools: schema generation, safe execution, and the built-in tools."""

from __future__ import annotations

import contextlib
import json
import math
import os
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwright.core.messages import ToolCall, canonical_json
from ctxwright.core.request import ToolSpec
from ctxwright.errors import CalculatorError
from ctxwright.tools.builtin import (
    WEATHER_TABLE,
    calculator,
    default_tools,
    evaluate_expression,
    get_current_time,
    get_weather,
    make_file_tools,
)
from ctxwright.tools.registry import (
    ERROR_INVALID_ARGUMENTS,
    ERROR_INVALID_JSON,
    ERROR_UNKNOWN_TOOL,
    BoundCall,
    Tool,
    ToolOutcome,
    ToolRegistry,
    error_outcome,
    tool,
)


def _schema(func) -> dict:
    return Tool.from_function(func).parameters


def _err(outcome: ToolOutcome) -> dict:
    assert not outcome.ok
    return json.loads(outcome.content)["error"]


# --------------------------------------------------------------------------- schema


def test_schema_scalars_and_docstring() -> None:
    def f(name: str, count: int, ratio: float, flag: bool) -> str:
        """Do a thing.

        Continued summary line.

        Args:
            name: The name.
            count (int): How many,
                wrapped onto two lines.
            ratio: A ratio.

        Returns:
            Something.
        """
        return ""

    t = Tool.from_function(f)
    assert t.description == "Do a thing."
    assert t.parameters == {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "The name."},
            "count": {"type": "integer", "description": "How many, wrapped onto two lines."},
            "ratio": {"type": "number", "description": "A ratio."},
            "flag": {"type": "boolean"},
        },
        "required": ["name", "count", "ratio", "flag"],
        "additionalProperties": False,
    }


def test_schema_summary_spanning_lines() -> None:
    def f(x: str) -> str:
        """First line of the summary
        second line of the summary.

        Details that are not part of the description.
        """
        return x

    assert Tool.from_function(f).description == "First line of the summary second line of the summary."


def test_schema_literal() -> None:
    def f(mode: Literal["a", "b"], level: Literal[1, 2, 3] = 2) -> str:
        """Doc."""
        return ""

    assert _schema(f)["properties"] == {
        "mode": {"type": "string", "enum": ["a", "b"]},
        "level": {"type": "integer", "enum": [1, 2, 3], "default": 2},
    }
    assert _schema(f)["required"] == ["mode"]


def test_schema_list_and_dict() -> None:
    def f(tags: list[str], weights: dict[str, float], grid: list[list[int]]) -> str:
        """Doc."""
        return ""

    assert _schema(f)["properties"] == {
        "tags": {"type": "array", "items": {"type": "string"}},
        "weights": {"type": "object", "additionalProperties": {"type": "number"}},
        "grid": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
    }


def test_schema_optional_forms() -> None:
    def f(
        a: int | None,
        b: str | None = None,
        c: Literal["x", "y"] | None = None,
        d: list[str] | None = None,
        e: int | None = None,
    ) -> str:  # type: ignore[assignment]
        """Doc."""
        return ""

    assert _schema(f) == {
        "type": "object",
        "properties": {
            "a": {"type": ["integer", "null"]},
            "b": {"type": ["string", "null"], "default": None},
            "c": {"type": ["string", "null"], "enum": ["x", "y", None], "default": None},
            "d": {"type": ["array", "null"], "items": {"type": "string"}, "default": None},
            "e": {"type": ["integer", "null"], "default": None},
        },
        "required": ["a"],
        "additionalProperties": False,
    }


def test_schema_defaults_not_required() -> None:
    def f(q: str, n: int = 5, on: bool = False, tags: list[str] = ["x"]) -> str:  # noqa: B006
        """Doc."""
        return ""

    schema = _schema(f)
    assert schema["required"] == ["q"]
    assert schema["properties"]["n"] == {"type": "integer", "default": 5}
    assert schema["properties"]["on"] == {"type": "boolean", "default": False}
    assert schema["properties"]["tags"] == {"type": "array", "items": {"type": "string"}, "default": ["x"]}


def test_schema_no_titles_anywhere() -> None:
    def f(a: list[dict[str, int]], b: Literal["p"] | None = None) -> str:
        """Doc."""
        return ""

    assert '"title"' not in Tool.from_function(f).spec.parameters_json


def test_schema_bytes_are_deterministic() -> None:
    def f(zeta: str, alpha: int = 1, mode: Literal["b", "a"] = "b") -> str:
        """Doc.

        Args:
            zeta: Last letter.
        """
        return ""

    first = Tool.from_function(f).spec
    for _ in range(5):
        again = Tool.from_function(f).spec
        assert again == first
        assert canonical_json(again.to_wire()).encode() == canonical_json(first.to_wire()).encode()
    # Order a model sees is the declared order; canonical JSON makes bytes stable.
    assert first.parameters["required"] == ["zeta"]
    assert first.parameters["properties"]["mode"]["enum"] == ["b", "a"]
    assert isinstance(first, ToolSpec)


def test_unsupported_hints_raise_clearly() -> None:
    def no_hint(x) -> str:  # type: ignore[no-untyped-def]
        """Doc."""
        return ""

    def bad_union(x: int | str) -> str:
        """Doc."""
        return ""

    def bad_dict(x: dict[int, str]) -> str:
        """Doc."""
        return ""

    def varargs(*xs: int) -> str:
        """Doc."""
        return ""

    with pytest.raises(TypeError, match="needs a type hint"):
        Tool.from_function(no_hint)
    with pytest.raises(TypeError, match="Optional"):
        Tool.from_function(bad_union)
    with pytest.raises(TypeError, match=r"dict\[str, T\]"):
        Tool.from_function(bad_dict)
    with pytest.raises(TypeError, match="named parameters"):
        Tool.from_function(varargs)


def test_name_and_description_validation() -> None:
    def undocumented(x: str) -> str:
        return x

    with pytest.raises(ValueError, match="no description"):
        Tool.from_function(undocumented)
    assert Tool.from_function(undocumented, description="Echo.").description == "Echo."
    with pytest.raises(ValueError, match="invalid tool name"):
        Tool.from_function(lambda x: x, description="d")  # "<lambda>"


def test_decorator_forms_and_callable() -> None:
    @tool
    def plain(x: int) -> int:
        """Double x."""
        return x * 2

    @tool(name="renamed", timeout_s=3.0)
    def configured(x: int) -> int:
        """Triple x."""
        return x * 3

    assert isinstance(plain, Tool) and plain.name == "plain" and plain(4) == 8
    assert configured.name == "renamed" and configured.timeout_s == 3.0
    assert configured.spec.name == "renamed"


def test_parameter_names_that_shadow_pydantic_attributes() -> None:
    def f(json: str, schema: int, model_config: bool = False) -> str:
        """Doc."""
        return f"{json}:{schema}:{model_config}"

    reg = ToolRegistry([f])
    out = reg.execute(ToolCall("c", "f", '{"json":"j","schema":2}'))
    assert out.ok and out.content == "j:2:False"


# --------------------------------------------------------------------------- registry


def _echo(text: str, times: int = 1) -> str:
    """Repeat text.

    Args:
        text: What to repeat.
        times: How often.
    """
    return text * times


def _boom(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(f"exploded: {reason}")


def _as_dict(n: int) -> dict:
    """Return a dict."""
    return {"b": n, "a": [1, 2]}


def test_registry_order_and_duplicates() -> None:
    def zz(x: str) -> str:
        """Z."""
        return x

    def aa(x: str) -> str:
        """A."""
        return x

    reg = ToolRegistry()
    reg.register(zz)
    reg.register(aa)
    reg.register(Tool.from_function(_echo, name="echo"))
    assert reg.names() == ("zz", "aa", "echo")
    assert [s.name for s in reg.specs()] == ["zz", "aa", "echo"]
    assert "aa" in reg and "nope" not in reg and len(reg) == 3
    assert reg.get("echo").name == "echo"
    with pytest.raises(KeyError, match="zz, aa, echo"):
        reg.get("missing")
    with pytest.raises(ValueError, match="already registered"):
        reg.register(aa)


def test_execute_success_and_result_rendering() -> None:
    reg = ToolRegistry([_echo, _as_dict])
    out = reg.execute(ToolCall("1", "_echo", '{"text":"ab","times":2}'))
    assert out == ToolOutcome(ok=True, content="abab", error_type=None, elapsed_ms=out.elapsed_ms)
    assert out.elapsed_ms >= 0
    assert reg.execute(ToolCall("2", "_echo", "")).ok is False  # empty args -> {} -> text missing
    assert reg.execute(ToolCall("3", "_as_dict", '{"n":3}')).content == '{"a":[1,2],"b":3}'


def test_execute_non_json_result_falls_back_to_str() -> None:
    class Thing:
        def __str__(self) -> str:
            return "a thing"

    def make() -> object:
        """Make a thing."""
        return Thing()

    reg = ToolRegistry([make])
    assert reg.execute(ToolCall("1", "make", "{}")).content == "a thing"


def test_unknown_tool_lists_available_names() -> None:
    reg = ToolRegistry([_echo, _boom])
    out = reg.execute(ToolCall("1", "_ecoh", '{"text":"x"}'))
    err = _err(out)
    assert out.error_type == ERROR_UNKNOWN_TOOL == err["type"]
    assert err["tool"] == "_ecoh" and err["arguments"] == '{"text":"x"}'
    assert "_echo, _boom" in err["hint"] and "'_echo'" in err["hint"]
    assert out.content == canonical_json(json.loads(out.content))  # canonical bytes


def test_invalid_json_arguments_include_raw_string() -> None:
    reg = ToolRegistry([_echo])
    raw = '{"text": "hi", times: 2'
    err = _err(reg.execute(ToolCall("1", "_echo", raw)))
    assert err["type"] == ERROR_INVALID_JSON
    assert err["arguments"] == raw
    assert "JSON object" in err["hint"] and "text (string, required)" in err["hint"]
    err = _err(reg.execute(ToolCall("1", "_echo", "[1, 2]")))
    assert err["type"] == ERROR_INVALID_JSON and "JSON object" in err["message"]


def test_validation_errors_name_fields_and_reasons() -> None:
    reg = ToolRegistry([_echo, get_weather])
    err = _err(reg.execute(ToolCall("1", "_echo", '{"times":"many","extra":1}')))
    assert err["type"] == ERROR_INVALID_ARGUMENTS
    assert "3 invalid fields" in err["message"]
    assert "text: required field is missing" in err["message"]
    assert "times:" in err["message"] and "'many'" in err["message"]
    assert "extra: unexpected field" in err["message"]
    assert "times (integer, default 1)" in err["hint"]
    err = _err(reg.execute(ToolCall("2", "get_weather", '{"city":"Paris","unit":"kelvin"}')))
    assert "unit:" in err["message"] and "'celsius' or 'fahrenheit'" in err["message"]
    assert '"celsius" | "fahrenheit"' in err["hint"]


def test_tool_exception_becomes_structured_error() -> None:
    reg = ToolRegistry([_boom])
    out = reg.execute(ToolCall("1", "_boom", '{"reason":"disk"}'))
    err = _err(out)
    assert out.error_type == "RuntimeError" == err["type"]
    assert err["message"] == "exploded: disk"
    assert err["tool"] == "_boom" and err["arguments"] == '{"reason":"disk"}' and err["hint"]


def test_tool_calling_sys_exit_does_not_escape() -> None:
    def quit_() -> str:
        """Exit."""
        raise SystemExit(3)

    out = ToolRegistry([Tool.from_function(quit_, name="quit")]).execute(ToolCall("1", "quit", "{}"))
    assert out.error_type == "SystemExit"


def test_resolve_then_run_split_for_threads() -> None:
    reg = ToolRegistry([_echo])
    bound = reg.resolve(ToolCall("1", "_echo", '{"text":"z"}'))
    assert isinstance(bound, BoundCall) and bound.kwargs == {"text": "z", "times": 1}
    assert bound.run().content == "z"
    assert isinstance(reg.resolve(ToolCall("1", "nope", "{}")), ToolOutcome)


def test_error_outcome_shape_for_the_loop() -> None:
    out = error_outcome(ToolCall("1", "slow", '{"a":1}'), "timeout", "took longer than 5s", "retry", 5000.0)
    assert not out.ok and out.error_type == "timeout" and out.elapsed_ms == 5000.0
    assert json.loads(out.content) == {
        "error": {
            "type": "timeout",
            "message": "took longer than 5s",
            "tool": "slow",
            "arguments": '{"a":1}',
            "hint": "retry",
        }
    }


# --------------------------------------------------------------------------- calculator


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1 + 2 * 3", "7"),
        ("(1 + 2) * 3", "9"),
        ("-3 ** 2", "-9"),
        ("(-3) ** 2", "9"),
        ("7 // 2", "3"),
        ("-7 // 2", "-4"),
        ("7 % 3", "1"),
        ("7 / 2", "3.5"),
        ("0.1 + 0.2", "0.3"),
        ("2 ** 10", "1024"),
        ("2 ** -1", "0.5"),
        ("sqrt(16)", "4"),
        ("abs(-5)", "5"),
        ("round(2.567, 2)", "2.57"),
        ("round(2.5)", "2"),
        ("min(3, 1, 2)", "1"),
        ("max(3, 1, 2)", "3"),
        ("pi", "3.14159265358979"),
        ("e ** 0", "1"),
        ("2 * pi", "6.28318530717959"),
        ("  +4 ", "4"),
        ("2 ** 100", str(2**100)),
    ],
)
def test_calculator_values(expression: str, expected: str) -> None:
    assert evaluate_expression(expression) == expected
    assert calculator(expression) == expected  # the Tool stays callable


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [
        ("__import__('os')", "only these functions"),
        ("__import__('os').system('echo hi')", "attribute access"),
        ("(1).real", "attribute access"),
        ("x + 1", "unknown name 'x'"),
        ("os", "unknown name"),
        ("'a' * 3", "only numbers"),
        ("True + 1", "only numbers"),
        ("[1, 2]", "unsupported syntax"),
        ("lambda: 1", "unsupported syntax"),
        ("1 if 1 else 2", "unsupported syntax"),
        ("1 << 3", "unsupported syntax"),
        ("1j", "only numbers"),
        ("sqrt(x=4)", "keyword"),
        ("2 ** 100000", "exponent"),
        ("9 ** 9 ** 9", "exponent"),
        ("99999 ** 9999", "digits"),
        ("(10 ** 3000) * (10 ** 3000)", "digits"),
        ("2.0 ** 5000", "cannot evaluate"),
        ("round(1, -1000000000)", "round"),
        ("1 / 0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("sqrt(-1)", "cannot evaluate"),
        ("(-8) ** 0.5", "complex"),
        ("1e999", "finite"),
        ("1 +", "not a valid"),
        ("", "not a valid"),
        ("1" * 1001, "longer than"),
        ("-" * 500 + "1", "nested too deeply"),
    ],
)
def test_calculator_refusals(expression: str, fragment: str) -> None:
    with pytest.raises(CalculatorError, match=None) as info:
        evaluate_expression(expression)
    assert fragment in str(info.value)


def test_calculator_tool_error_via_registry() -> None:
    err = _err(default_tools().execute(ToolCall("1", "calculator", '{"expression":"__import__(\'os\')"}')))
    assert err["type"] == "CalculatorError"


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=60))
def test_calculator_random_text_only_raises_calculator_error(text: str) -> None:
    try:
        result = evaluate_expression(text)
    except CalculatorError:
        return
    assert isinstance(result, str)


_ARITH = st.text(alphabet="0123456789+-*/%().e ", max_size=40) | st.builds(
    lambda a, op, b: f"{a}{op}{b}",
    st.integers(-(10**6), 10**6),
    st.sampled_from(["+", "-", "*", "/", "//", "%", "**"]),
    st.integers(-50, 50),
)


@settings(max_examples=400, deadline=None)
@given(_ARITH)
def test_calculator_arithmetic_like_text_only_raises_calculator_error(text: str) -> None:
    with contextlib.suppress(CalculatorError):
        evaluate_expression(text)


# --------------------------------------------------------------------------- weather and time


@pytest.mark.parametrize("query", ["Vancouver", "vancouver", "Vancouver, BC", "  VANCOUVER  ", "vancouver,canada"])
def test_weather_tolerant_lookup(query: str) -> None:
    assert get_weather(query)["city"] == "Vancouver"


def test_weather_table_contents_and_units() -> None:
    names = [row[0] for row in WEATHER_TABLE]
    assert len(names) >= 15
    for city in ["Vancouver", "Beijing", "London", "New York", "Tokyo", "Paris", "San Francisco"]:
        assert city in names
    assert get_weather("new york city")["city"] == "New York"
    assert get_weather("sao paulo")["city"] == "São Paulo"
    c = get_weather("Tokyo")
    f = get_weather("tokyo", unit="fahrenheit")
    assert f["temperature"] == pytest.approx(c["temperature"] * 9 / 5 + 32)
    assert f["unit"] == "fahrenheit" and "not live" in c["source"]
    assert "OFFLINE SAMPLE TABLE" in get_weather.description and "NOT live" in get_weather.description


def test_weather_unknown_city_lists_known() -> None:
    with pytest.raises(ValueError, match="known cities: Vancouver, Beijing"):
        get_weather("Atlantis")


@pytest.mark.parametrize("zone", ["America/Vancouver", "Asia/Shanghai", "UTC", "asia/tokyo"])
def test_time_tool_returns_iso_in_zone(zone: str) -> None:
    result = get_current_time(zone)
    stamp = datetime.fromisoformat(result["iso_time"])
    tz = ZoneInfo(result["timezone"])
    assert result["timezone"].lower() == zone.lower()
    assert stamp.utcoffset() == datetime.now(tz).utcoffset()
    assert abs(stamp - datetime.now(tz)) < timedelta(seconds=5)
    assert result["utc_offset"][0] in "+-" and result["utc_offset"][3] == ":"


@pytest.mark.parametrize("zone", ["Mars/Olympus", "", "America", "../etc/passwd", "/etc/localtime"])
def test_time_tool_unknown_zone(zone: str) -> None:
    with pytest.raises(ValueError, match="America/Vancouver"):
        get_current_time(zone)


# --------------------------------------------------------------------------- files


@pytest.fixture()
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "hello.txt").write_text("hello world\n", encoding="utf-8")
    (ws / "sub" / "deep.txt").write_text("x" * 50, encoding="utf-8")
    (ws / "latin1.txt").write_bytes("café".encode("latin-1"))
    (tmp_path / "secret.txt").write_text("top secret", encoding="utf-8")
    return ws


def _file_tools(ws: Path) -> ToolRegistry:
    return ToolRegistry(make_file_tools(ws))


def test_read_file_window_and_truncation(workspace: Path) -> None:
    reg = _file_tools(workspace)
    read = reg.get("read_file")
    full = read("hello.txt")
    assert full.splitlines()[0] == "[file: hello.txt | chars 0-12 of 12 (12 bytes) | truncated: no]"
    assert full.endswith("hello world\n")
    part = read("sub/deep.txt", offset=10, limit=15)
    assert "chars 10-25 of 50" in part and "truncated: yes, next offset 25" in part
    assert part.split("\n", 1)[1] == "x" * 15
    abs_inside = read(str(workspace / "hello.txt"))
    assert "hello world" in abs_inside


def test_read_file_non_utf8_is_replaced_and_said(workspace: Path) -> None:
    text = _file_tools(workspace).get("read_file")("latin1.txt")
    assert "not valid UTF-8" in text and "caf\ufffd" in text


def test_list_dir(workspace: Path) -> None:
    listing = _file_tools(workspace).get("list_dir")()
    assert listing.splitlines() == ["[dir: . | 3 entries]", "hello.txt (12 bytes)", "latin1.txt (4 bytes)", "sub/"]
    assert "deep.txt (50 bytes)" in _file_tools(workspace).get("list_dir")("sub")


@pytest.mark.parametrize("bad", ["../secret.txt", "sub/../../secret.txt", "/etc/passwd"])
def test_workspace_escape_refused(workspace: Path, bad: str) -> None:
    reg = _file_tools(workspace)
    for name in ("read_file", "list_dir"):
        with pytest.raises(PermissionError, match="outside the workspace") as info:
            reg.get(name)(bad)
        assert str(workspace.resolve()) in str(info.value)


def test_absolute_path_outside_refused_via_registry(workspace: Path) -> None:
    secret = workspace.parent / "secret.txt"
    out = _file_tools(workspace).execute(ToolCall("1", "read_file", canonical_json({"path": str(secret)})))
    err = _err(out)
    assert err["type"] == "PermissionError" and "top secret" not in out.content


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_symlink_out_of_workspace_refused(workspace: Path) -> None:
    (workspace / "link.txt").symlink_to(workspace.parent / "secret.txt")
    (workspace / "linkdir").symlink_to(workspace.parent)
    (workspace / "inner_link.txt").symlink_to(workspace / "hello.txt")
    read = _file_tools(workspace).get("read_file")
    with pytest.raises(PermissionError, match="outside the workspace"):
        read("link.txt")
    with pytest.raises(PermissionError):
        read("linkdir/secret.txt")
    assert "hello world" in read("inner_link.txt")  # links that stay inside are fine


def test_file_errors_are_clear(workspace: Path) -> None:
    reg = _file_tools(workspace)
    with pytest.raises(FileNotFoundError, match="list_dir"):
        reg.get("read_file")("nope.txt")
    with pytest.raises(IsADirectoryError, match="list_dir"):
        reg.get("read_file")("sub")
    with pytest.raises(NotADirectoryError, match="read_file"):
        reg.get("list_dir")("hello.txt")
    err = _err(reg.execute(ToolCall("1", "read_file", '{"path":"hello.txt","limit":0}')))
    assert err["type"] == "ValueError" and "limit" in err["message"]


def test_make_file_tools_needs_existing_dir(tmp_path: Path) -> None:
    with pytest.raises(NotADirectoryError):
        make_file_tools(tmp_path / "missing")


# --------------------------------------------------------------------------- default set


def test_default_tools_order(workspace: Path) -> None:
    assert default_tools().names() == ("get_current_time", "get_weather", "calculator")
    reg = default_tools(workspace)
    assert reg.names() == ("get_current_time", "get_weather", "calculator", "read_file", "list_dir")
    again = default_tools(workspace)
    assert [s.parameters_json for s in reg.specs()] == [s.parameters_json for s in again.specs()]
    assert [s.description for s in reg.specs()] == [s.description for s in again.specs()]


def test_default_tools_end_to_end(workspace: Path) -> None:
    reg = default_tools(workspace)
    weather = reg.execute(ToolCall("1", "get_weather", '{"city":"Beijing"}'))
    assert weather.ok and json.loads(weather.content)["city"] == "Beijing"
    calc = reg.execute(ToolCall("2", "calculator", '{"expression":"sqrt(2)**2"}'))
    assert calc.ok and math.isclose(float(calc.content), 2.0)
    now = reg.execute(ToolCall("3", "get_current_time", '{"timezone":"Europe/London"}'))
    assert now.ok and json.loads(now.content)["timezone"] == "Europe/London"


# -- read_file: regular files only, a hard byte cap ------------------------------------------


def _within(seconds: float, fn, *args):
    """``fn(*args)`` in a daemon thread: its result or exception, or a failure if it is still
    running after ``seconds`` (a read that blocks or never ends must fail the test, not hang it)."""
    import threading

    box: list = []

    def target():
        try:
            box.append(("ok", fn(*args)))
        except BaseException as exc:
            box.append(("raised", exc))

    th = threading.Thread(target=target, daemon=True)
    th.start()
    th.join(seconds)
    assert box, f"still running after {seconds} s"
    kind, value = box[0]
    if kind == "raised":
        raise value
    return value


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_read_file_refuses_a_fifo_at_once(workspace: Path) -> None:
    fifo = workspace / "pipe"
    os.mkfifo(fifo)
    read = _file_tools(workspace).get("read_file")
    try:
        with pytest.raises(ValueError, match=r"named pipe.*regular files only"):
            _within(5, read, "pipe")
        (workspace / "pipe-link").symlink_to(fifo)  # and through a link inside the workspace
        with pytest.raises(ValueError, match="named pipe"):
            _within(5, read, "pipe-link")
    finally:  # a reader stuck in open() (the bug) is released by a writer
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_read_file_refuses_dev_zero_through_a_symlink(tmp_path: Path) -> None:
    """A workspace that contains ``/dev`` (here ``/``): a link to ``/dev/zero`` stays inside
    it, so only the file-type check stands between the tool and an endless read."""
    (tmp_path / "zero").symlink_to("/dev/zero")
    read = ToolRegistry(make_file_tools(Path("/"))).get("read_file")
    with pytest.raises(ValueError, match="character device"):
        _within(5, read, str(tmp_path / "zero"))
    out = ToolRegistry(make_file_tools(Path("/"))).execute(
        ToolCall("z", "read_file", canonical_json({"path": str(tmp_path / "zero")}))
    )
    assert _err(out)["type"] == "ValueError" and "regular files only" in _err(out)["message"]


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_read_file_cap_holds_whatever_size_the_file_claims(monkeypatch: pytest.MonkeyPatch) -> None:
    """``/proc`` files are regular files that claim 0 bytes: the cap counts what is read."""
    import ctxwright.tools.builtin as builtin

    read = ToolRegistry(make_file_tools(Path("/"))).get("read_file")
    whole = read("/proc/self/status")
    length = int(whole.split("(", 1)[1].split(" bytes")[0])
    assert length > 100 and "Name:" in whole  # its real length, not the 0 it claims
    monkeypatch.setattr(builtin, "MAX_FILE_BYTES", 100)
    with pytest.raises(ValueError, match=r"holds more than 100 bytes .*claimed 0"):
        read("/proc/self/status")


@pytest.mark.skipif(not Path("/proc/self/pagemap").exists(), reason="needs /proc/self/pagemap")
def test_read_file_of_an_endless_regular_file_stops_at_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """``/proc/self/pagemap`` is a regular file that claims 0 bytes and never ends (8 bytes
    per page of the address space): the /dev/zero of regular files, and a file that grows
    faster than it is read looks the same to the reader. Only the byte cap stops it."""
    import ctxwright.tools.builtin as builtin

    monkeypatch.setattr(builtin, "MAX_FILE_BYTES", 1 << 20)
    read = ToolRegistry(make_file_tools(Path("/"))).get("read_file")
    with pytest.raises(ValueError, match=r"holds more than 1048576 bytes \(it claimed 0"):
        _within(10, read, "/proc/self/pagemap")


# -- the workspace walk: hostile probes -------------------------------------------------------

_SWAPPER = r"""
import os, sys
ws, outside, stop = sys.argv[1:4]
d, hold, link = (os.path.join(ws, n) for n in ("d", "d.hold", "d.link"))
g, g_hold, g_link = (os.path.join(ws, n) for n in ("g.txt", "g.hold", "g.link"))
os.symlink(outside, link)
os.symlink(os.path.join(outside, "f.txt"), g_link)
print("ready", flush=True)
swaps = 0
while not os.path.exists(stop):
    os.rename(d, hold); os.rename(link, d)        # the folder is now a link to outside
    os.rename(g, g_hold); os.rename(g_link, g)    # the file too
    os.rename(d, link); os.rename(hold, d)        # and back
    os.rename(g, g_link); os.rename(g_hold, g)
    swaps += 1
print(swaps, flush=True)
"""


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_a_folder_swapped_for_a_link_outside_never_leaks(tmp_path: Path) -> None:
    """Hostile probe: another process swaps a workspace folder (and a file) for a symlink to a
    folder outside, as fast as it can, while the agent reads through it thousands of times.
    A check-then-open returned the outside file; the walk from the workspace's descriptor
    never does, whatever the timing."""
    import subprocess
    import sys
    import time

    ws, outside = tmp_path / "ws", tmp_path / "outside"
    (ws / "d").mkdir(parents=True)
    outside.mkdir()
    (ws / "d" / "f.txt").write_text("inside", encoding="utf-8")
    (ws / "g.txt").write_text("inside", encoding="utf-8")
    (outside / "f.txt").write_text("SECRET-outside", encoding="utf-8")
    (outside / "SECRET-name.txt").touch()
    stop = tmp_path / "stop"
    reg = _file_tools(ws)
    proc = subprocess.Popen(
        [sys.executable, "-c", _SWAPPER, str(ws), str(outside), str(stop)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        leaked, read, refused = [], 0, 0
        deadline = time.monotonic() + 60
        tries = 0
        while tries < 6000 and time.monotonic() < deadline:
            tries += 1
            name = ("read_file", "list_dir")[tries % 5 == 0]
            path = ("d/f.txt", "g.txt", "d")[tries % 3] if name == "read_file" else "d"
            out = reg.execute(ToolCall(str(tries), name, canonical_json({"path": path})))
            if "SECRET" in out.content:
                leaked.append(out.content)
            if out.ok:
                read += 1
            else:
                refused += 1
        stop.touch()
        swaps = int(proc.stdout.readline())
    finally:
        stop.touch()
        proc.wait(timeout=60)
    assert not leaked, f"{len(leaked)} of {tries} reads returned content from outside: {leaked[:2]}"
    assert swaps > 10 and read > 0 and refused > 0  # the race was really run, both ways


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_links_inside_the_workspace_are_followed_component_by_component(workspace: Path) -> None:
    (workspace / "sub" / "deeper").mkdir()
    (workspace / "sub" / "deeper" / "x.txt").write_text("deep x", encoding="utf-8")
    (workspace / "to_sub").symlink_to("sub")  # relative
    (workspace / "abs_sub").symlink_to(workspace / "sub")  # absolute, inside
    (workspace / "sub" / "up").symlink_to("..")  # back to the root: still inside
    (workspace / "chain1").symlink_to("chain2")
    (workspace / "chain2").symlink_to("to_sub/deeper/x.txt")
    (workspace / "loop").symlink_to("loop")
    (workspace / "sub" / "escape").symlink_to("../../secret.txt")
    reg = _file_tools(workspace)
    read, ls = reg.get("read_file"), reg.get("list_dir")
    assert read("to_sub/deep.txt").startswith("[file: sub/deep.txt |")  # shown by its real path
    assert "deep x" in read("abs_sub/deeper/x.txt")
    assert "hello world" in read("sub/up/hello.txt")
    assert "deep x" in read("chain1")
    assert "deep x" in read("to_sub/deeper/../deeper/x.txt")  # ".." of a linked folder is its real parent
    assert ls("to_sub").startswith("[dir: sub |") and "escape@ (symlink)" in ls("sub")
    assert ls("sub/up/sub/..").startswith("[dir: . |")
    with pytest.raises(ValueError, match="symbolic links"):
        read("loop")
    for bad in ("sub/escape", "sub/up/../secret.txt", "to_sub/../../secret.txt", str(workspace.parent / "secret.txt")):
        with pytest.raises(PermissionError, match="outside the workspace"):
            read(bad)
    with pytest.raises(FileNotFoundError, match="no such file"):
        read("hello.txt/x")  # a file is not a folder on the way
    with pytest.raises(FileNotFoundError, match=r"sub/nope/x\.txt"):
        read("to_sub/nope/x.txt")
