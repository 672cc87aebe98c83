"""Which tokens of a request are the skills catalog: the one attribution the ledger, the audit
and ``ctxwright show`` share.

Why a ledger line of its own: the catalog (each skill's name, description and location, the
first level of progressive disclosure in the book's account of Skills) is paid on every call,
and where it sits decides what adding a skill costs. Appended as a ``<system-reminder>`` user
message it grows the trajectory and breaks no cached prefix; inside the ``Skill`` tool's
description it is part of the static prefix, and a new skill means a new prefix. Counted as
"history" or "system and tools" it would hide in the larger parts; counted apart, a user can
see what twenty installed skills cost per call.

The catalog is recognised by its text, so the rule reads any request, ours or another agent's
log (Claude Code, for one, lists skills in an ``<available_skills>`` block of its Skill tool):

* a **catalog message** is a user message whose content starts with ``<system-reminder>`` and
  holds an ``<available_skills>`` block: the whole message is counted (its framing included),
  as the ledger counts every message;
* a **catalog in a tool** is the ``<available_skills>`` … ``</available_skills>`` block of a
  tool's description: that block is counted, the rest of the description stays a tool.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ctxwright.core.messages import Message, canonical_json
from ctxwright.core.request import ToolSpec, tool_body

#: The tags the catalog is written with (``skills/tools.py``) and recognised by (here).
REMINDER_OPEN = "<system-reminder>"
REMINDER_CLOSE = "</system-reminder>"
CATALOG_OPEN = "<available_skills>"
CATALOG_CLOSE = "</available_skills>"

_STARTS_AS_REMINDER = re.compile(r"\s*" + re.escape(REMINDER_OPEN))


def _text(content: Any) -> str:
    """A message's text: a string as is, a list of text blocks (Anthropic, multi-part) joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b["text"] for b in content if isinstance(b, dict) and isinstance(b.get("text"), str))
    return ""


def is_catalog_message(role: Any, content: Any) -> bool:
    """True for a skills catalog message: a user message that starts with ``<system-reminder>``
    and holds an ``<available_skills>`` block."""
    if role != "user":
        return False
    text = _text(content)  # matched in place: a log's user message may be megabytes
    return _STARTS_AS_REMINDER.match(text) is not None and CATALOG_OPEN in text


def catalog_block(description: str) -> str:
    """The ``<available_skills>`` … ``</available_skills>`` block of a tool description, or ``""``
    when it has no such block (both tags)."""
    start = description.find(CATALOG_OPEN)
    end = description.find(CATALOG_CLOSE, start) if start >= 0 else -1
    # both tags: a description that only names the block ("listed in <available_skills>") has none
    return description[start : end + len(CATALOG_CLOSE)] if end >= 0 else ""


@dataclass(frozen=True)
class CatalogTokens:
    """Tokens of the skills catalog in one request: in appended messages (reminder mode) and in
    tool descriptions (prefix mode). ``message_indexes`` are the catalog messages' positions in
    the message list given, so a caller that splits the rest by role skips them."""

    messages: int = 0
    tools: int = 0
    message_indexes: frozenset[int] = frozenset()

    @property
    def total(self) -> int:
        return self.messages + self.tools


def _role_content(m: Message | Mapping[str, Any]) -> tuple[Any, Any]:
    if isinstance(m, Message):
        return m.role, m.content
    return m.get("role"), m.get("content")


def _description(t: ToolSpec | Mapping[str, Any]) -> str:
    if isinstance(t, ToolSpec):
        return t.description
    fn = tool_body(t)
    desc = fn.get("description") if isinstance(fn, Mapping) else None
    return desc if isinstance(desc, str) else ""


def skills_catalog_tokens(
    count: Callable[[str], int],
    messages: Iterable[Message | Mapping[str, Any]],
    tools: Iterable[ToolSpec | Mapping[str, Any]] = (),
) -> CatalogTokens:
    """How many tokens of a request are the skills catalog (see the module docstring).

    ``count`` is the caller's tokenizer (``TokenCounter.count``); a message is counted as its
    canonical wire JSON, the text the ledger and the audit count for every message, so the
    catalog's tokens are exactly the ones taken out of the other parts. ``messages`` are wire
    dicts or :class:`Message` objects, ``tools`` wire dicts (OpenAI or Anthropic) or
    :class:`ToolSpec` objects."""
    in_messages = 0
    indexes: list[int] = []
    for i, m in enumerate(messages):
        role, content = _role_content(m)
        if is_catalog_message(role, content):
            indexes.append(i)
            in_messages += count(m.canonical() if isinstance(m, Message) else canonical_json(m))
    in_tools = 0
    for t in tools:
        if isinstance(t, ToolSpec | Mapping):
            block = catalog_block(_description(t))
            if block:
                in_tools += count(block)
    return CatalogTokens(in_messages, in_tools, frozenset(indexes))


__all__ = [
    "CATALOG_CLOSE",
    "CATALOG_OPEN",
    "REMINDER_CLOSE",
    "REMINDER_OPEN",
    "CatalogTokens",
    "catalog_block",
    "is_catalog_message",
    "skills_catalog_tokens",
]
