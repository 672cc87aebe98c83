"""Built-in tools: clock, offline weather sample, safe calculator, workspace file reading.

Why these: they let an agent loop be exercised end to end offline and deterministically
(except the clock), and each one shows a failure mode a real tool must handle -- bad
input that deserves a corrective message, paths that try to leave a sandbox, and input
that could burn CPU or memory. Every error here says what to send instead.
"""

from __future__ import annotations

import ast
import errno
import math
import operator
import os
import stat
import unicodedata
from collections.abc import Callable
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from ctxwright.errors import CalculatorError
from ctxwright.tools.beneath import CHANGED, OUTSIDE, SUPPORTED, Entry, walk_beneath
from ctxwright.tools.registry import Tool, ToolRegistry, tool

__all__ = [
    "DEMO_TOOL_NAMES",
    "WEATHER_TABLE",
    "calculator",
    "default_tools",
    "evaluate_expression",
    "get_current_time",
    "get_weather",
    "make_file_tools",
]


# --------------------------------------------------------------------------- clock


@lru_cache(maxsize=1)
def _zones_by_lower_name() -> dict[str, str]:
    return {z.lower(): z for z in available_timezones()}


def _load_zone(name: str) -> ZoneInfo:
    """The zone for ``name``, tolerating case ("america/vancouver", "utc")."""
    key = name.strip()
    for candidate in (key, _zones_by_lower_name().get(key.lower())):
        if not candidate:
            continue
        try:
            return ZoneInfo(candidate)
        except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: "America" is a directory
            continue
    raise ValueError(
        f'unknown time zone {name!r}: use an IANA name like "America/Vancouver", '
        '"Asia/Shanghai", "Europe/London" or "UTC"'
    )


@tool(trust="trusted", effects="read")
def get_current_time(timezone: str) -> dict[str, Any]:
    """Get the current date and time (real system clock) in an IANA time zone.

    Args:
        timezone: IANA time zone name, e.g. "America/Vancouver", "Asia/Shanghai" or "UTC".
    """
    zone = _load_zone(timezone)
    now = datetime.now(zone)
    offset = now.strftime("%z")  # "+0800" -> "+08:00"
    return {
        "iso_time": now.isoformat(timespec="seconds"),
        "timezone": zone.key,
        "utc_offset": f"{offset[:3]}:{offset[3:]}",
        "abbreviation": now.tzname(),
        "weekday": now.strftime("%A"),
    }


# --------------------------------------------------------------------------- weather

# name, country, temperature (°C), condition, humidity %, wind km/h, extra aliases.
# Fixed sample values: the point is a deterministic, offline tool, not a forecast.
WEATHER_TABLE: tuple[tuple[str, str, float, str, int, int, tuple[str, ...]], ...] = (
    ("Vancouver", "Canada", 11.0, "light rain", 84, 13, ()),
    ("Beijing", "China", 18.0, "sunny", 32, 11, ("peking",)),
    ("London", "United Kingdom", 13.0, "overcast", 76, 17, ()),
    ("New York", "United States", 16.0, "partly cloudy", 58, 15, ("new york city", "nyc")),
    ("Tokyo", "Japan", 20.0, "clear", 61, 9, ()),
    ("Paris", "France", 15.0, "cloudy", 70, 12, ()),
    ("San Francisco", "United States", 14.0, "fog", 80, 19, ("sf", "san fran")),
    ("Sydney", "Australia", 22.0, "sunny", 55, 20, ()),
    ("Berlin", "Germany", 12.0, "showers", 72, 16, ()),
    ("Toronto", "Canada", 9.0, "windy", 60, 28, ()),
    ("Shanghai", "China", 21.0, "humid haze", 78, 10, ()),
    ("Singapore", "Singapore", 31.0, "thunderstorms", 85, 8, ()),
    ("Mumbai", "India", 30.0, "humid", 79, 14, ("bombay",)),
    ("São Paulo", "Brazil", 24.0, "partly cloudy", 66, 11, ()),
    ("Cairo", "Egypt", 29.0, "sunny", 25, 14, ()),
    ("Mexico City", "Mexico", 19.0, "afternoon showers", 52, 10, ("cdmx",)),
)


def _normalize_city(text: str) -> str:
    """Lowercase, accents and punctuation dropped, spaces collapsed: "São Paulo!" -> "sao paulo"."""
    decomposed = unicodedata.normalize("NFKD", text)
    plain = "".join(c for c in decomposed if not unicodedata.combining(c)).lower()
    cleaned = "".join(c if c.isalnum() else " " for c in plain)
    return " ".join(cleaned.split())


@lru_cache(maxsize=1)
def _weather_index() -> dict[str, int]:
    index: dict[str, int] = {}
    for i, (name, _country, _t, _c, _h, _w, aliases) in enumerate(WEATHER_TABLE):
        for key in (name, *aliases):
            index[_normalize_city(key)] = i
    return index


def _known_cities() -> str:
    return ", ".join(row[0] for row in WEATHER_TABLE)


@tool(
    trust="trusted",
    effects="none",
    description=(
        "Look up weather for a city in a small OFFLINE SAMPLE TABLE bundled with ctxwright. "
        "The values are fixed examples, NOT live or current weather. Known cities: " + _known_cities() + "."
    ),
)
def get_weather(city: str, unit: Literal["celsius", "fahrenheit"] = "celsius") -> dict[str, Any]:
    """Sample weather for a city from the offline table.

    Args:
        city: City name, e.g. "Vancouver" or "Vancouver, BC" (case-insensitive).
        unit: Temperature unit.
    """
    index = _weather_index()
    full = _normalize_city(city)
    first = _normalize_city(city.split(",")[0])  # "Vancouver, BC" -> "vancouver"
    row_index = index.get(full, index.get(first))
    if row_index is None:
        raise ValueError(f"no sample weather for {city!r}; known cities: {_known_cities()}")
    name, country, temp_c, condition, humidity, wind, _aliases = WEATHER_TABLE[row_index]
    temperature = temp_c if unit == "celsius" else round(temp_c * 9 / 5 + 32, 1)
    return {
        "city": name,
        "country": country,
        "temperature": temperature,
        "unit": unit,
        "condition": condition,
        "humidity_pct": humidity,
        "wind_kph": wind,
        "source": "offline sample table (fixed values, not live data)",
    }


# --------------------------------------------------------------------------- calculator


MAX_EXPRESSION_CHARS = 1000
MAX_EXPONENT = 10_000
# Python refuses int -> str beyond 4300 digits by default, so results stop below that.
MAX_RESULT_DIGITS = 4000
_MAX_DEPTH = 400  # a left-associative chain of n terms is n levels deep
_LOG10_2 = math.log10(2)

_BINARY_OPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}


def _round(x: float, ndigits: int | None = None) -> float:
    # round(1, -10**9) would build 10**(10**9): cap ndigits.
    if ndigits is not None and (not isinstance(ndigits, int) or abs(ndigits) > 100):
        raise CalculatorError("round(x, n) needs an integer n between -100 and 100")
    return round(x) if ndigits is None else round(x, ndigits)


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sqrt": math.sqrt,
    "abs": abs,
    "round": _round,
    "min": min,
    "max": max,
    "floor": math.floor,
    "ceil": math.ceil,
    "exp": math.exp,
    "log": math.log,
    "log10": math.log10,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
}


def _digits(value: int) -> float:
    """Approximate decimal digits of an int, without str() (which is itself limited)."""
    return value.bit_length() * _LOG10_2


def _check_size(value: Any) -> Any:
    if isinstance(value, complex):
        raise CalculatorError("result is a complex number (e.g. a fractional power of a negative)")
    if isinstance(value, int) and _digits(value) > MAX_RESULT_DIGITS:
        raise CalculatorError(f"result would have more than {MAX_RESULT_DIGITS} digits")
    return value


def _power(base: Any, exponent: Any) -> Any:
    """``base ** exponent`` refused up front when it would be huge (the slow part is computing it)."""
    if abs(exponent) > MAX_EXPONENT:
        raise CalculatorError(f"exponent {exponent!r} is too large (limit {MAX_EXPONENT})")
    huge_int = isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1
    if huge_int and exponent * math.log10(abs(base)) > MAX_RESULT_DIGITS:
        raise CalculatorError(f"result would have more than {MAX_RESULT_DIGITS} digits")
    return base**exponent


def _eval(node: ast.AST, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        raise CalculatorError("expression is too long or nested too deeply")
    if isinstance(node, ast.Expression):
        return _eval(node.body, depth + 1)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return node.value
        raise CalculatorError(f"only numbers are allowed, not {node.value!r}")
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _eval(node.operand, depth + 1)
        return -value if isinstance(node.op, ast.USub) else +value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY_OPS:
        left, right = _eval(node.left, depth + 1), _eval(node.right, depth + 1)
        if isinstance(node.op, ast.Pow):
            return _check_size(_power(left, right))
        return _check_size(_BINARY_OPS[type(node.op)](left, right))
    if isinstance(node, ast.Name):
        if node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        raise CalculatorError(f"unknown name {node.id!r}; allowed constants: {', '.join(_CONSTANTS)}")
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Attribute):
            raise CalculatorError("attribute access is not allowed")
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS:
            called = node.func.id if isinstance(node.func, ast.Name) else type(node.func).__name__
            raise CalculatorError(
                f"function {called!r} is not allowed; only these functions are allowed: {', '.join(_FUNCTIONS)}"
            )
        if node.keywords:
            raise CalculatorError("keyword arguments are not allowed")
        args = [_eval(arg, depth + 1) for arg in node.args]
        return _check_size(_FUNCTIONS[node.func.id](*args))
    if isinstance(node, ast.Attribute):
        raise CalculatorError("attribute access is not allowed")
    raise CalculatorError(
        f"unsupported syntax ({type(node).__name__}); use numbers, + - * / // % **, "
        "parentheses, pi, e and functions like sqrt()"
    )


def _format_number(value: int | float) -> str:
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        raise CalculatorError("result is not a finite number")
    return format(value, ".15g")  # 0.1 + 0.2 -> "0.3", not "0.30000000000000004"


def evaluate_expression(expression: str) -> str:
    """Evaluate arithmetic safely: parse with ``ast``, walk an allow-list, never ``eval``.

    Raises only :class:`CalculatorError`, whatever the input.
    """
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        reason = exc.msg if isinstance(exc, SyntaxError) else str(exc) or type(exc).__name__
        raise CalculatorError(f"not a valid arithmetic expression: {reason}") from None
    try:
        return _format_number(_eval(tree, 0))
    except CalculatorError:
        raise
    except ZeroDivisionError:
        raise CalculatorError("division by zero") from None
    except (ArithmeticError, ValueError, TypeError, RecursionError, MemoryError) as exc:
        raise CalculatorError(f"cannot evaluate: {exc or type(exc).__name__}") from None


@tool(trust="trusted", effects="none")
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly (integers are arbitrary precision).

    Supports numbers, + - * / // % **, parentheses, constants pi and e, and the
    functions sqrt, abs, round, min, max, floor, ceil, exp, log, log10, sin, cos, tan.

    Args:
        expression: The expression, e.g. "(3 + 4) * 2 ** 10" or "sqrt(2) / 2".
    """
    return evaluate_expression(expression)


# --------------------------------------------------------------------------- files

MAX_READ_CHARS = 100_000
MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_DIR_ENTRIES = 1000


_KINDS = {
    stat.S_IFIFO: "a named pipe (FIFO)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
}


def _refuse_non_regular(mode: int, shown: str) -> None:
    if not stat.S_ISREG(mode):
        kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
        raise ValueError(
            f"{shown!r} is {kind}: read_file reads regular files only (a device or a pipe can be endless "
            "or block forever); ask for a regular file"
        )


def _walk(root: Path, path: str, missing: str) -> Entry:
    """The workspace entry ``path`` names (``tools/beneath.py``: no component is looked up by
    a path string another process could change), with the tools' own messages."""
    if "\x00" in path:
        raise ValueError("path contains a NUL character")
    try:
        return walk_beneath(root, path)
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"{missing}: {exc.filename!r} (use list_dir to look)") from None
    except OSError as exc:
        if exc.errno == OUTSIDE:
            raise PermissionError(
                f"access denied: {path!r} resolves outside the workspace {str(root)!r}; "
                "only paths inside the workspace can be read"
            ) from None
        if exc.errno == errno.ELOOP:
            raise ValueError(f"{path!r}: {exc.strerror}; ask for the file itself") from None
        raise


def _open(entry: Entry, flags: int) -> int:
    try:
        return entry.open(flags)
    except OSError as exc:
        if exc.errno != CHANGED:
            raise
        raise OSError(f"{entry.shown!r}: {exc.strerror}; try again") from None


def _read_regular_file(entry: Entry, cap: int) -> bytearray:
    """The bytes of the regular file ``entry``, at most ``cap`` of them, else ``ValueError``.

    Why each step: a device such as ``/dev/zero`` reports size 0 and never ends (one took
    2.9 GB in 8 s, and its abandoned thread kept reading after the tool timeout); opening a
    FIFO for reading blocks until a writer appears, and a thread stuck in ``open`` cannot be
    stopped. So the file's type is checked before it is opened (opening some devices has
    effects of its own), then opened with ``O_NONBLOCK`` (a FIFO swapped in meanwhile cannot
    block the open) and ``O_NOFOLLOW`` (nor a symlink), and must be the very file checked
    (``fstat``: same device and inode) -- what is read is what was checked.
    Whatever size the file claims (``/proc`` files claim 0, and ``/proc/self/pagemap`` never
    ends; a log grows while it is read), reading stops once more than ``cap`` bytes came:
    at most ``cap + 1`` bytes rounded up to a 4 KiB page (some ``/proc`` files refuse reads
    that are not whole records).
    """
    shown = entry.shown
    assert entry.info is not None
    _refuse_non_regular(entry.info.st_mode, shown)
    fd = _open(entry, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        info = os.fstat(fd)
        if info.st_size > cap:
            raise ValueError(f"{shown!r} is {info.st_size} bytes; files over {cap} bytes are not read")
        data = bytearray()
        while len(data) <= cap:
            want = cap + 1 - len(data)
            chunk = os.read(fd, min(1 << 20, -(-want // 4096) * 4096))
            if not chunk:
                return data
            data += chunk
    finally:
        os.close(fd)
    raise ValueError(
        f"{shown!r} holds more than {cap} bytes (it claimed {info.st_size}: it grew while being read, or its "
        f"size is not its length); files over {cap} bytes are not read"
    )


def _listing(fd: int) -> list[str]:
    """A folder's entries by name, each as list_dir shows it (nothing is followed or opened)."""
    with os.scandir(fd) as it:
        entries = sorted(it, key=lambda e: e.name)
    lines = []
    for entry in entries[:MAX_DIR_ENTRIES]:
        if entry.is_symlink():
            lines.append(f"{entry.name}@ (symlink)")
        elif entry.is_dir(follow_symlinks=False):
            lines.append(f"{entry.name}/")
        else:
            try:
                lines.append(f"{entry.name} ({entry.stat(follow_symlinks=False).st_size} bytes)")
            except OSError:
                lines.append(entry.name)
    extra = f", showing first {MAX_DIR_ENTRIES}" if len(entries) > MAX_DIR_ENTRIES else ""
    return [f"{len(entries)} entries{extra}", *lines]


def make_file_tools(workspace: Path) -> list[Tool]:
    """``read_file`` and ``list_dir`` tools confined to ``workspace`` (read-only).

    The workspace is resolved once here; every call then walks its path from the workspace's
    descriptor (``tools/beneath.py``), so no path outside it can be opened whatever another
    process does to the workspace meanwhile. Links that stay inside are followed.
    """
    if not SUPPORTED:
        raise NotImplementedError("the workspace file tools need openat() with O_NOFOLLOW (a POSIX system)")
    root = Path(workspace).expanduser().resolve()
    if not root.is_dir():
        raise NotADirectoryError(f"workspace {str(root)!r} is not an existing directory")

    def read_file(path: str, offset: int = 0, limit: int = 20000) -> str:
        """Read a text file from the workspace, a window of characters at a time.

        The first line reports the character window, the total size and whether the text
        was truncated (then call again with the next offset).

        Args:
            path: File path relative to the workspace root.
            offset: Index of the first character to return.
            limit: Maximum number of characters to return (at most 100000).
        """
        if offset < 0:
            raise ValueError("offset must be 0 or more")
        if not 1 <= limit <= MAX_READ_CHARS:
            raise ValueError(f"limit must be between 1 and {MAX_READ_CHARS}")
        with _walk(root, path, "no such file in the workspace") as entry:
            shown = entry.shown
            if entry.info is None:
                raise FileNotFoundError(f"no such file in the workspace: {shown!r} (use list_dir to look)")
            if stat.S_ISDIR(entry.info.st_mode):
                raise IsADirectoryError(f"{shown!r} is a directory; use list_dir to list it")
            raw = _read_regular_file(entry, MAX_FILE_BYTES)
        size = len(raw)
        try:
            text, note = raw.decode("utf-8"), ""
        except UnicodeDecodeError:
            text = raw.decode("utf-8", errors="replace")
            note = " | note: not valid UTF-8, undecodable bytes shown as U+FFFD"
        chunk = text[offset : offset + limit]
        end = offset + len(chunk)
        truncated = end < len(text)
        more = f"yes, next offset {end}" if truncated else "no"
        header = f"[file: {shown} | chars {offset}-{end} of {len(text)} ({size} bytes) | truncated: {more}{note}]"
        return f"{header}\n{chunk}"

    def list_dir(path: str = ".") -> str:
        """List a directory in the workspace: subdirectories end with "/", files show their size.

        Args:
            path: Directory path relative to the workspace root.
        """
        with _walk(root, path, "no such directory in the workspace") as entry:
            shown = entry.shown
            if entry.info is None:
                raise FileNotFoundError(f"no such directory in the workspace: {shown!r}")
            if not stat.S_ISDIR(entry.info.st_mode):
                raise NotADirectoryError(f"{shown!r} is a file; use read_file to read it")
            fd = _open(entry, os.O_RDONLY | os.O_DIRECTORY)
            try:
                count, *lines = _listing(fd)
            finally:
                os.close(fd)
        return "\n".join([f"[dir: {shown} | {count}]", *lines])

    # a file's text was written by someone else (a downloaded page, a README a stranger sent):
    # untrusted, so it is marked as external content; listing and reading change nothing
    return [
        Tool.from_function(read_file, timeout_s=10.0, trust="untrusted", effects="read"),
        Tool.from_function(list_dir, timeout_s=10.0, trust="untrusted", effects="read"),
    ]


def default_tools(workspace: Path | None = None) -> ToolRegistry:
    """The standard tool set in a fixed order (the order is part of the cached prefix)."""
    registry = ToolRegistry(list(_DEMO_TOOLS))
    if workspace is not None:
        for file_tool in make_file_tools(workspace):
            registry.register(file_tool)
    return registry


#: The demo tools, in their prefix order: what an agent gets when it is given no tools at all.
_DEMO_TOOLS = (get_current_time, get_weather, calculator)
DEMO_TOOL_NAMES: tuple[str, ...] = tuple(t.name for t in _DEMO_TOOLS)
