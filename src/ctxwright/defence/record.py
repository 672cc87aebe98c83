"""Where the defences meet a tool result being recorded: one path for every result.

Order, and why:

1. **Sanitize first** (``sanitize.py``), before the budget layer: the offload file, the
   preview, a record-time compression and ``read_result``'s pages then all hold the same
   cleaned text, and an offset the preview names is an offset in that text. The original is
   kept in the event when anything changed.
2. **Budget** (``compaction/budget.py``): cap, offload, preview -- not here.
3. **Wrap last** (``marking.py``): whatever text the budget layer chose -- the result, the
   preview of an offloaded one, a compressed form -- goes out inside one wrapper, so a
   preview is marked exactly like a whole result, and the wrapper is never cut by a cap.

A failed call whose message is the tool's own text (an MCP server's error) stays the one
structured error the model reads (``tools/registry.py``): only its ``message`` is sanitized
and wrapped, at once, and ctxwright's ``hint`` beside it stays outside the wrapper.

Only a result the registry reports as external (an untrusted tool's own text,
:attr:`~ctxwright.tools.registry.ToolOutcome.external`) is touched: ctxwright's own errors
and notes are not data from outside. A result recorded as a repeat of an earlier one
(``repeat_of``) carries ctxwright's note, not the tool's text, and is not wrapped either.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ctxwright.core.messages import canonical_json
from ctxwright.defence.levels import Features
from ctxwright.defence.marking import wrap
from ctxwright.defence.sanitize import sanitize

__all__ = ["Prepared", "finish", "prepare"]

_SURROGATES = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class Prepared:
    """A result ready for the budget layer, and what to record about its defences."""

    content: str | bytes
    #: fields for the ``tool`` event (``external``, ``sanitized``)
    fields: dict[str, Any]
    wrap: bool


def _clean(text: str, features: Features, fields: dict[str, Any]) -> str:
    if not features.sanitize:
        return text
    cleaned = sanitize(text)
    if cleaned.changed:
        # stored as JSON: bytes that were not UTF-8 are kept as U+FFFD, as the budget layer shows them
        fields["sanitized"] = {"counts": dict(cleaned.counts), "original": _SURROGATES.sub("\ufffd", text)}
    return cleaned.text


def prepare(
    content: str | bytes, *, external: bool, ok: bool, features: Features, tool_name: str, call_id: str
) -> Prepared:
    """Step 1 for one result: sanitized when the level says so, and whether to wrap it; a
    failed call's external message is sanitized and wrapped here, inside its error object."""
    if not (external and features.tags):
        return Prepared(content, {}, False)
    fields: dict[str, Any] = {"external": True}
    text = content if isinstance(content, str) else content.decode("utf-8", "surrogateescape")
    if not ok:
        try:
            body = json.loads(text)
            error = body["error"]
            message = error["message"]
        except (ValueError, TypeError, KeyError):
            body = message = None
        if isinstance(message, str):
            error["message"] = wrap(tool_name, call_id, _clean(message, features, fields))
            return Prepared(canonical_json(body), fields, False)
    return Prepared(_clean(text, features, fields), fields, True)


def finish(prepared: Prepared, body: str, extra: dict[str, Any], *, tool_name: str, call_id: str) -> str:
    """Step 3: the body the budget layer chose, wrapped (unless it is a repeat's note)."""
    if not prepared.wrap or "repeat_of" in extra:
        return body
    return wrap(tool_name, call_id, body)
