"""Which recorded call an incoming request is, and whether the agent left the recording.

Every request is read into the same neutral messages whatever its API (:func:`said`): user
text, assistant turns (their text and tool calls, by id and name), tool results (the call id
each answers). System messages at the start are the prefix: never compared here -- a changed
prefix is what the gate is there to catch, not a reason to stop answering.

**Position.** A request is at position 1 + the position of the most recent recorded reply it
contains (0 when it holds none). Not a count of assistant turns: a regression under test may
drop or rewrite early messages (a sliding window), and the replay must still answer it. A
reply is recognised in a request by its tool-call ids, else by its text; a Responses request
naming a recorded response by ``previous_response_id`` contains that reply.

**Conversation.** A request that contains recorded replies continues the conversation they
came from (the replies came from this server, so they identify it; among conversations with
the same reply, the one holding most of the request's replies, then the one this server
already answered). A request that contains none starts the next golden conversation whose
first request has the same first user message; else continues a started conversation whose
next recorded request holds no reply either and has that first user message (a history
summarised by a compaction); else continues a started conversation, not yet at its end, one of
whose recorded turns that first user message opens -- at its next call (a sliding window that
kept only the newest question, or the question alone: it belongs to that conversation, and is
answered or diverges there, so the gate judges it against the conversation's previous request
rather than as a new conversation); else starts the next conversation not started yet.

**Divergence** ("the conversation left the recording"): the request is past the recording's
last call of its conversation, or a conversation the recording does not have; or its new
messages -- those after the most recent recorded reply it contains -- differ from the golden
request's at that position in role, count, the tool calls they answer, or the text of the
user's question (:func:`compare_new` says which user message that is: a harness's status block
next to the tool results changes every run, like a tool result); or the reply it sent back
names other tools than the recording's. A tool *result*
whose content differs is not a divergence (the gate judges it), nor is a changed prefix.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ctxwright.core.words import counted
from ctxwright.replay.golden import Golden, GoldenCall, GoldenConversation, entries
from ctxwright.replay.turns import ANTHROPIC, RESPONSES, as_list, as_object, content_text, is_assistant_entry

Signature = tuple[str, tuple[str, ...] | str]


@dataclass(frozen=True)
class Said:
    """One message in neutral form: ``role`` (``system``, ``user``, ``assistant`` or
    ``tool``), its ``text``, an assistant's tool ``calls`` as (id, name), and the call id a
    tool result ``answers``."""

    role: str
    text: str = ""
    calls: tuple[tuple[str, str], ...] = ()
    answers: str | None = None

    def signature(self) -> Signature:
        if self.calls:
            return ("calls", tuple(i for i, _n in self.calls))
        return ("text", self.text)


def said(api: str, body: dict[str, Any]) -> list[Said]:
    """The messages of a request body of ``api``, neutral, without the leading system ones."""
    out: list[Said] = []
    if api == RESPONSES:
        run: list[dict[str, Any]] = []
        for item in entries(api, body):
            if not isinstance(item, dict):
                continue
            if is_assistant_entry(api, item):
                run.append(item)
                continue
            if run:
                out.append(_responses_turn(run))
                run = []
            kind = item.get("type", "message")
            if kind in ("function_call_output", "custom_tool_call_output"):
                out.append(Said("tool", answers=str(item.get("call_id"))))
            else:
                out.append(Said(_role(item.get("role")), content_text(item.get("content"))))
        if run:
            out.append(_responses_turn(run))
    else:
        for m in entries(api, body):
            if not isinstance(m, dict):
                continue
            role = _role(m.get("role"))
            content = m.get("content")
            if role == "assistant":
                out.append(Said("assistant", content_text(content), _calls(api, m)))
            elif role == "tool":
                out.append(Said("tool", answers=str(m.get("tool_call_id"))))
            elif api == ANTHROPIC and isinstance(content, list):
                rest = []
                for b in content:
                    if isinstance(b, dict) and b.get("type") == "tool_result":
                        out.append(Said("tool", answers=str(b.get("tool_use_id"))))
                    else:
                        rest.append(b)
                if rest or not content:
                    out.append(Said(role, content_text(rest)))
            else:
                out.append(Said(role, content_text(content)))
    start = 0
    while start < len(out) and out[start].role == "system":
        start += 1
    return out[start:]


def _role(value: Any) -> str:
    role = str(value or "user")
    return "system" if role == "developer" else role


def _calls(api: str, m: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    if api == ANTHROPIC:
        content = as_list(m.get("content"))
        return tuple(
            (str(b.get("id")), str(b.get("name")))
            for b in content
            if isinstance(b, dict) and b.get("type") == "tool_use"
        )
    out = []
    for c in m.get("tool_calls") or ():
        if isinstance(c, dict):
            fn = as_object(c.get("function"))
            out.append((str(c.get("id")), str(fn.get("name"))))
    return tuple(out)


def _responses_turn(items: list[dict[str, Any]]) -> Said:
    calls = tuple(
        (str(it.get("call_id")), str(it.get("name")))
        for it in items
        if it.get("type") in ("function_call", "custom_tool_call")
    )
    text = "".join(content_text(it.get("content")) for it in items if it.get("type", "message") == "message")
    return Said("assistant", text, calls)


@dataclass(frozen=True)
class Placement:
    """Where a request is in the golden: its ``conversation`` (``None``: one the recording
    does not have), ``position`` (0-based), the golden ``call`` there (``None`` past the
    recording) and, when it left the recording, ``diverged``: one line naming the call."""

    conversation: GoldenConversation | None
    position: int
    call: GoldenCall | None
    diverged: str | None


class Matcher:
    """Places each request of a replay in the golden (see the module docstring). Not thread
    safe: the server calls it from its event loop only."""

    def __init__(self, golden: Golden) -> None:
        self.golden = golden
        self.convs = golden.conversations
        self._replies: dict[Signature, list[tuple[int, int]]] = {}
        self._by_id: dict[str, tuple[int, int]] = {}
        self._said: list[list[list[Said]]] = []
        self._asked: list[set[str]] = []  # per conversation, the user questions that open its turns
        for ci, conv in enumerate(self.convs):
            self._said.append([said(call.api, call.request) for call in conv.calls])
            self._asked.append(self._questions(ci))
            for pos, call in enumerate(conv.calls):
                self._replies.setdefault(call.turn.signature(), []).append((ci, pos))
                if call.turn.id is not None:
                    self._by_id.setdefault(call.turn.id, (ci, pos))
        self.progress: dict[int, int] = {}  # conversation -> 1 + the last position answered
        self._last: int | None = None  # the conversation answered last

    def place(self, api: str, body: dict[str, Any]) -> Placement:
        s = said(api, body)
        found: list[tuple[int, int, int]] = []  # (message index, conversation, position)
        for i, m in enumerate(s):
            if m.role == "assistant":
                for ci, pos in self._replies.get(m.signature(), ()):
                    found.append((i, ci, pos))
        prev = body.get("previous_response_id")
        prev_hit = self._by_id.get(prev) if isinstance(prev, str) else None
        if found or prev_hit is not None:
            ci = self._choose(found, prev_hit)
            mine = [(i, pos) for i, c, pos in found if c == ci]
            last_pos = max([pos for _i, pos in mine] + ([prev_hit[1]] if prev_hit and prev_hit[0] == ci else []))
            newest = max((i for i, pos in mine if pos == last_pos), default=-1)
            return self._check(ci, last_pos + 1, s, newest)
        ci_start = self._start(s)
        if ci_start is None:
            n = len(self.convs)
            return Placement(
                None,
                0,
                None,
                f"call 1 of a new conversation: the recording has {counted(n, 'conversation')}, all started",
            )
        return self._check(ci_start, self.progress.get(ci_start, 0), s, -1)

    def answered(self, placement: Placement) -> None:
        """Note that ``placement`` was answered (the next requests are placed knowing it)."""
        if placement.conversation is None:
            return
        ci = self.convs.index(placement.conversation)
        self._last = ci
        if placement.diverged is None:
            self.progress[ci] = max(self.progress.get(ci, 0), placement.position + 1)
        else:
            self.progress.setdefault(ci, placement.position)

    def last_conversation(self) -> GoldenConversation | None:
        """The conversation answered last (else the golden's last), for a repeat-last answer
        to a request of no conversation."""
        if self._last is not None:
            return self.convs[self._last]
        return self.convs[-1] if self.convs else None

    def _choose(self, found: list[tuple[int, int, int]], prev_hit: tuple[int, int] | None) -> int:
        votes: dict[int, int] = {}
        for _i, ci, _pos in found:
            votes[ci] = votes.get(ci, 0) + 1
        if prev_hit is not None:
            votes[prev_hit[0]] = votes.get(prev_hit[0], 0) + 1
        answered = {ci for _i, ci, pos in found if pos < self.progress.get(ci, 0)}
        return max(votes, key=lambda ci: (votes[ci], ci in answered, -ci))

    def _start(self, s: list[Said]) -> int | None:
        first = next((m.text for m in s if m.role == "user"), None)
        unstarted = [ci for ci in range(len(self.convs)) if ci not in self.progress]
        for ci in unstarted:
            if self._first_user(ci, 0) == first:
                return ci
        for ci, nxt in self.progress.items():
            if (
                nxt < len(self.convs[ci].calls)
                and self._first_user(ci, nxt) == first
                and not any(m.role == "assistant" for m in self._said[ci][nxt])
            ):
                return ci
        if first is not None:
            ongoing = [
                ci for ci, nxt in self.progress.items() if nxt < len(self.convs[ci].calls) and first in self._asked[ci]
            ]
            if ongoing:
                return self._last if self._last in ongoing else min(ongoing)
        return unstarted[0] if unstarted else None

    def _questions(self, ci: int) -> set[str]:
        """The user questions of conversation ``ci``: the first user message of each recorded
        batch that opens a turn (its first call, or one after a reply without a tool call) --
        the same message :func:`compare_new` compares by text."""
        out: set[str] = set()
        calls = self.convs[ci].calls
        for pos, messages in enumerate(self._said[ci]):
            if pos and calls[pos - 1].turn.tool_calls:
                continue  # a batch of tool results: its user messages are a harness's, not a question
            newest = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=-1) if pos else -1
            asked = next((m.text for m in messages[newest + 1 :] if m.role == "user"), None)
            if asked is not None:
                out.add(asked)
        return out

    def _first_user(self, ci: int, pos: int) -> str | None:
        return next((m.text for m in self._said[ci][pos] if m.role == "user"), None)

    def _check(self, ci: int, pos: int, s: list[Said], newest: int) -> Placement:
        conv = self.convs[ci]
        where = f"call {pos + 1} of conversation {conv.id}"
        if pos >= len(conv.calls):
            why = f"the recording of {conv.id} ends after {counted(len(conv.calls), 'call')}"
            return Placement(conv, pos, None, f"{where}: {why}")
        call = conv.calls[pos]
        reason = None
        if newest >= 0 and pos > 0:
            reason = _tool_names(s[newest], conv.calls[pos - 1])
        if reason is None:
            golden = self._said[ci][pos]
            g_newest = max((i for i, m in enumerate(golden) if m.role == "assistant"), default=-1) if pos else -1
            opens_turn = newest < 0 or not conv.calls[pos - 1].turn.tool_calls
            reason = compare_new(s[newest + 1 :], golden[g_newest + 1 :], opens_turn=opens_turn)
        return Placement(conv, pos, call, f"{where}: {reason}" if reason else None)


def _tool_names(sent: Said, reply_call: GoldenCall) -> str | None:
    """The tools the agent's copy of the reply names, where they differ from the recording's."""
    got = [n for _i, n in sent.calls]
    want = [c.name for c in reply_call.turn.tool_calls]
    for a, b in zip(got, want, strict=False):
        if a != b:
            return f"the agent called tool {a!r} where the recording called {b!r}"
    if len(got) != len(want):
        return f"the agent sent back {counted(len(got), 'tool call')} where the recording made {len(want)}"
    return None


_WHAT = {
    "user": "a user message",
    "tool": "a tool result",
    "assistant": "an assistant message",
    "system": "a system message",
}


def compare_new(got: Sequence[Said], want: Sequence[Said], *, opens_turn: bool = True) -> str | None:
    """Why the new messages ``got`` differ from the recording's ``want``, or ``None``.

    The text compared is the user's question: the first user message of a batch that opens a
    turn (``opens_turn``: the conversation's first request, or one after a reply that ended
    its turn without a tool call). The other user messages of a batch -- a status block, a
    reminder or the environment a harness writes next to the tool results, with its clock and
    working folder in it -- are compared by role and count only: they change from run to run
    as tool results do, and the gate judges them, not the replay."""
    asked = not opens_turn
    for k, (a, b) in enumerate(zip(got, want, strict=False)):
        if a.role != b.role:
            return f"new message {k + 1} is {_WHAT.get(a.role, a.role)} where the recording has {_WHAT.get(b.role, b.role)}"
        if a.role == "tool" and a.answers != b.answers:
            return f"the agent answered tool call {a.answers!r} where the recording answered {b.answers!r}"
        if a.role == "user" and not asked:
            asked = True
            if a.text != b.text:
                return f"the user message differs from the recording's: {_diff(a.text, b.text)}"
        if a.role == "assistant" and a.signature() != b.signature():
            return "an assistant message differs from the recording's"
    if len(got) != len(want):
        return f"the agent sent {counted(len(got), 'new message')} where the recording sent {len(want)}"
    return None


def _diff(a: str, b: str, width: int = 30) -> str:
    """The first difference of two texts, a window of each, on one line."""
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    lo = max(0, i - width)

    def show(t: str) -> str:
        cut = t[lo : i + width]
        return ("…" if lo else "") + json.dumps(cut, ensure_ascii=False)[1:-1] + ("…" if len(t) > i + width else "")

    return f"'{show(a)}' where the recording has '{show(b)}' (at character {i})"


__all__ = ["Matcher", "Placement", "Said", "compare_new", "said"]
