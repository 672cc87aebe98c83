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
from dataclasses import dataclass, replace

from ctxwright.core.events import Sanitization
from ctxwright.core.messages import canonical_json
from ctxwright.core.results import ResultDraft
from ctxwright.defence.levels import Features
from ctxwright.defence.marking import wrap
from ctxwright.defence.sanitize import sanitize

__all__ = ["Sanitize", "mark"]

_SURROGATES = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class Sanitize:
    """Step 1 (``core/results.py``): each external result sanitized when the level says so,
    and whether the mark step wraps it; a failed call's external message is sanitized and
    wrapped here, inside its error object."""

    features: Features

    def __call__(self, drafts: list[ResultDraft]) -> list[ResultDraft]:
        return [self.one(d) for d in drafts]

    def one(self, draft: ResultDraft) -> ResultDraft:
        if not (draft.external and self.features.tags):
            return replace(draft, external=False)
        content = draft.content
        text = content if isinstance(content, str) else content.decode("utf-8", "surrogateescape")
        if not draft.ok:
            try:
                body = json.loads(text)
                error = body["error"]
                message = error["message"]
            except (ValueError, TypeError, KeyError):
                body = message = None
            if isinstance(message, str):
                cleaned, record = self._clean(message)
                error["message"] = wrap(draft.origin, draft.call.id, cleaned)
                return replace(draft, content=canonical_json(body), sanitized=record, wrap=False)
        cleaned, record = self._clean(text)
        return replace(draft, content=cleaned, sanitized=record, wrap=True)

    def _clean(self, text: str) -> tuple[str, Sanitization | None]:
        if not self.features.sanitize:
            return text, None
        cleaned = sanitize(text)
        if not cleaned.changed:
            return cleaned.text, None
        # stored as JSON: bytes that were not UTF-8 are kept as U+FFFD, as the budget layer shows them
        return cleaned.text, Sanitization(tuple(sorted(cleaned.counts)), _SURROGATES.sub("\ufffd", text))


def mark(drafts: list[ResultDraft]) -> list[ResultDraft]:
    """Step 3: the text the budget step chose, wrapped (unless it is a repeat's note, which
    is ctxwright's text, not the tool's)."""
    return [
        replace(d, content=wrap(d.origin, d.call.id, d.text))
        if d.wrap and (d.budget is None or d.budget.repeat_of is None)
        else d
        for d in drafts
    ]
