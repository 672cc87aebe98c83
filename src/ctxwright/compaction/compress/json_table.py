"""Rule ``json_table``: a JSON array of objects -- the whole result, or the largest such
array inside a JSON object -- becomes a compact table: the keys once, then one row per
item, every cell a compact JSON value. Nothing is dropped.

Why: API listings (``gh api``, ``kubectl -o json``, a database's rows) repeat every key in
every item and pretty-print with indentation; a model reads a table just as well, and the
keys-once form is often half the tokens. Every value is kept as the same JSON value (numbers
as their exact literal, so ``1.50`` stays ``1.50``): the table parses back into the same
items (:func:`parse_table` does, for the tests and any reader). The order of keys inside an
item is the table's column order, which JSON does not give a meaning.

Used only when it saves ``MIN_SAVING`` of the text. Bounded: texts over ``MAX_CHARS`` are
not parsed; JSON nested deeper than the parser allows raises ``RecursionError``, caught;
an object with a duplicate key is left alone (a parser keeps one of them: a lost value).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

#: parsed, a JSON text takes many times its size in objects; a larger one is never under a
#: result cap as a table either (it is offloaded and previewed as it is)
MAX_CHARS = 2_000_000
MIN_SAVING = 0.15
MIN_ROWS = 2
#: how deep inside a JSON object the largest array of objects is looked for
SEARCH_DEPTH = 6
#: the placeholder for the array in the rest of the document
PLACEHOLDER = "<table above>"


class _Num(str):
    """A JSON number or constant kept as its literal text."""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        # a plain ValueError, caught with JSON's own errors: an object with a duplicate key has
        # no one table form, so the text is left as it is
        raise ValueError("duplicate key")
    return out


def _load(text: str) -> Any:
    return json.loads(text, object_pairs_hook=_pairs, parse_float=_Num, parse_int=_Num, parse_constant=_Num)


def dump(value: Any) -> str:
    """Compact JSON of a parsed value, numbers as their literal text."""
    if isinstance(value, _Num):
        return str(value)
    if isinstance(value, dict):
        return "{" + ",".join(_str(k) + ":" + dump(v) for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(dump(v) for v in value) + "]"
    return _str(value) if isinstance(value, str) else json.dumps(value)


def _str(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def _tables(value: Any, path: tuple[str, ...], depth: int) -> Iterator[tuple[tuple[str, ...], list[dict[str, Any]]]]:
    """Arrays of objects in ``value``, each with the keys leading to it."""
    if isinstance(value, list):
        if len(value) >= MIN_ROWS and all(isinstance(v, dict) and v for v in value):
            yield path, value
        return
    if isinstance(value, dict) and depth < SEARCH_DEPTH:
        for k, v in value.items():
            yield from _tables(v, (*path, k), depth + 1)


def _replace(value: Any, path: tuple[str, ...]) -> Any:
    """A copy of ``value`` with the array at ``path`` replaced by the placeholder."""
    if not path:
        return PLACEHOLDER
    return {k: (_replace(v, path[1:]) if k == path[0] else v) for k, v in value.items()}


def compress(text: str) -> str | None:
    """The table form, or ``None`` (not such JSON, or it would not save enough)."""
    if len(text) > MAX_CHARS or text[:200].lstrip()[:1] not in ("[", "{"):
        return None
    try:
        doc = _load(text)
        # the largest array; the first found on a tie (documents keep their key order)
        found = max(_tables(doc, (), 0), key=lambda t: len(t[1]), default=None)
        if found is None:
            return None
        path, items = found
        keys: dict[str, None] = {}
        for item in items:
            keys.update(dict.fromkeys(item))
        where = f"at {dump(list(path))} " if path else ""
        lines = [
            f"[JSON array {where}of {len(items)} objects as a table: the first row names the keys, "
            "each later row is one object, each cell a JSON value, an empty cell a key the object lacks]",
            ",".join(_str(k) for k in keys),
            *(",".join(dump(item[k]) if k in item else "" for k in keys) for item in items),
        ]
        if path:
            lines.append(f"[the rest of the JSON, the array shown as {_str(PLACEHOLDER)}]")
            lines.append(dump(_replace(doc, path)))
        out = "\n".join(lines)
    except (ValueError, RecursionError):
        return None
    return out if len(out) <= len(text) * (1 - MIN_SAVING) else None


def parse_table(out: str) -> tuple[list[str], list[dict[str, Any]]]:
    """The keys and the items of a table made by :func:`compress` (numbers as Python
    numbers): the proof that nothing was dropped."""
    lines = out.split("\n")
    keys = [str(k) for k in _cells(lines[1])]
    items: list[dict[str, Any]] = []
    for line in lines[2:]:
        if line.startswith("[the rest of the JSON"):
            break
        cells = _cells(line)
        items.append({k: v for k, v in zip(keys, cells, strict=True) if v is not _MISSING})
    return keys, items


_MISSING = object()


def _cells(line: str) -> list[Any]:
    """The cells of one row: JSON values separated by commas, an empty cell missing."""
    decoder = json.JSONDecoder()
    out: list[Any] = []
    pos = 0
    while True:
        if pos >= len(line) or line[pos] == ",":
            out.append(_MISSING)
        else:
            value, pos = decoder.raw_decode(line, pos)
            out.append(value)
        if pos >= len(line):
            return out
        pos += 1  # the comma
