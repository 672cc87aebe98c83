"""Every tool call gets an id that is unique in its session.

Why: a ``tool`` message answers its call by ``tool_call_id``, and chat APIs pair them by
that id (OpenAI rejects a tool message whose id answers no call; Anthropic needs every
``tool_use`` answered). Some OpenAI-compatible servers leave the id out, send ``null``, or
give every call the same id (``call_0``); without an id the harness cannot even record the
result (a tool message needs the id of the call it answers), and with a repeated one the
pairing of a later request is ambiguous. So before a reply is recorded, each call whose id
is missing or already used in the session gets a new one, and the reply's event records
which ids were given (``assigned_ids``: position -> id).

The new id is deterministic (the same session, call and position always give the same id)
and shaped to pass every server's check: 9 alphanumeric characters, which Mistral's chat
template demands and everyone else accepts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import replace

from ctxwright.core.messages import Message

_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _short_id(seed: str) -> str:
    n = int.from_bytes(hashlib.sha256(seed.encode("utf-8")).digest()[:8], "big")
    out = []
    for _ in range(9):
        n, r = divmod(n, len(_ALPHABET))
        out.append(_ALPHABET[r])
    return "".join(out)


def assign_ids(message: Message, session_id: str, call_index: int, used: set[str]) -> tuple[Message, dict[int, str]]:
    """``message`` with an id for every tool call that lacks one or repeats one in ``used``
    (the ids the session already holds), and ``{position: new id}``. ``used`` is updated
    with every id the message ends up with."""
    if not message.tool_calls:
        return message, {}
    calls = list(message.tool_calls)
    assigned: dict[int, str] = {}
    for i, tc in enumerate(calls):
        if tc.id and tc.id not in used:
            used.add(tc.id)
            continue
        attempt = 0
        new = _short_id(f"{session_id}:{call_index}:{i}")
        while new in used:
            attempt += 1
            new = _short_id(f"{session_id}:{call_index}:{i}:{attempt}")
        used.add(new)
        assigned[i] = new
        calls[i] = replace(tc, id=new)
    if not assigned:
        return message, {}
    return replace(message, tool_calls=tuple(calls)), assigned


def ids_in(messages: Iterable[Message]) -> set[str]:
    """Every tool-call id the given messages hold."""
    return {tc.id for m in messages for tc in m.tool_calls if tc.id}


__all__ = ["assign_ids", "ids_in"]
