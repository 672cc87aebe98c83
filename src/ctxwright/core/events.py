"""Typed session events: one frozen dataclass per kind of thing recorded in a session.

Why typed: the event log is the only source of truth for what a session sent (the API is
stateless; ``core/session.py`` renders every request from it), and before this module eight
modules read it as ``kind`` strings and payload keys. A misspelt key read ``None`` without a
word, and the live session and the offline readers drifted apart. Here every kind has one
class, and :func:`event_from_row` is the one place a kind string meets a class.

The payload JSON keeps the shape the store has always held (store v1, see
``tests/fixtures/store_v1.db``), so old rows parse unchanged; keys a class does not model
are kept in ``extra`` and written back as they were. An event kind this build does not
know -- written by a newer ctxwright -- becomes an :class:`UnknownEvent` holding its payload
verbatim: an older reader must neither crash on a newer log nor lose part of it.
"""

from __future__ import annotations

import enum
import re
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Literal, TypeVar

from ctxwright.core.messages import Message, Usage
from ctxwright.core.skill_content import body_skill
from ctxwright.errors import EventFormatError

StatusMode = Literal["replace", "append"]
BreakerState = Literal["open", "closed"]
TodoStatus = Literal["pending", "in_progress", "completed", "cancelled"]

E = TypeVar("E", bound="Event")

#: ``UserEvent.extra`` key of a skills catalog message (``skills/tools.py``): the skill names
#: it announced. Such a message is context the harness added, not the user's task.
SKILLS_CATALOG_KEY = "skills_catalog"
#: ``UserEvent.extra`` key of an MCP tools reminder (``mcp/tools.py``): ``{"added": [names],
#: "removed": [names]}``, the tools a server's ``tools/list_changed`` added and removed.
MCP_TOOLS_KEY = "mcp_tools"
#: The keys that mark a user message as a reminder the harness appended, not the user's task.
REMINDER_KEYS = (SKILLS_CATALOG_KEY, MCP_TOOLS_KEY)


# -- reading payload values with a clear error ------------------------------------------------
def _where(kind: str, seq: int) -> str:
    return f"{kind} event {seq}"


def _int(p: Mapping[str, Any], key: str, where: str) -> int | None:
    v = p.get(key)
    if v is None:
        return None
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise EventFormatError(f"{where}: '{key}' is {type(v).__name__}, not an integer")
    return v


def _float(p: Mapping[str, Any], key: str, where: str) -> float | None:
    v = p.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise EventFormatError(f"{where}: '{key}' is {type(v).__name__}, not a number")
    return float(v)


def _str(p: Mapping[str, Any], key: str, where: str) -> str | None:
    v = p.get(key)
    if v is None or isinstance(v, str):
        return v
    raise EventFormatError(f"{where}: '{key}' is {type(v).__name__}, not a string")


def _message(p: Mapping[str, Any], where: str) -> Message:
    m = p.get("message")
    if not isinstance(m, Mapping):
        raise EventFormatError(f"{where} has no message")
    calls = m.get("tool_calls")
    if calls is not None and (
        not isinstance(calls, list)
        or not all(isinstance(c, Mapping) and isinstance(c.get("function") or {}, Mapping) for c in calls)
    ):
        raise EventFormatError(
            f"{where}: its message's 'tool_calls' must be a list of objects with a 'function' object"
        )
    try:
        msg = Message.from_wire(dict(m))
    except (KeyError, TypeError, ValueError) as exc:
        raise EventFormatError(f"{where}: its message cannot be read ({exc})") from exc
    # the renderer and the reasoning policy work on text: a number or object here was not
    # written by ctxwright, and must be refused here rather than break a render later
    for name in ("content", "tool_call_id", "name", "reasoning_content", "reasoning_blocks"):
        value = getattr(msg, name)
        if value is not None and not isinstance(value, str):
            raise EventFormatError(f"{where}: its message's '{name}' is {type(value).__name__}, not a string")
    return msg


def _seq_named(value: Any, where: str, what: str) -> int:
    """An event seq named by a compaction record: a whole number (a ``replace`` key holds it as
    text, since JSON object keys are strings). ``int()`` alone would take ``1.5`` as 1, ``true``
    as 1 and ``" 1_0"`` as 10, and raise OverflowError on ``1e400``."""
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]{1,18}", value):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "..."
    raise EventFormatError(f"{where}: '{what}' names {shown}, which is not an event seq (a whole number)")


def _extra(p: Mapping[str, Any], known: frozenset[str]) -> dict[str, Any]:
    return {k: v for k, v in p.items() if k not in known}


def _put(out: dict[str, Any], key: str, value: Any) -> None:
    """Optional fields are written only when set, as the release before typed events did."""
    if value is not None:
        out[key] = value


# -- the base ----------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Event:
    """One thing that happened in a session, in order. ``seq`` starts at 0; an event not yet
    appended has ``seq == -1`` (``Session.append`` assigns it)."""

    KIND: ClassVar[str] = ""
    #: payload keys the class models; the rest of a stored payload goes to ``extra``
    KNOWN: ClassVar[frozenset[str]] = frozenset()

    seq: int = -1
    created_at: float = field(default_factory=time.time)
    #: payload keys this build does not model, kept verbatim
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return self.KIND

    def to_payload(self) -> dict[str, Any]:
        """The JSON object the store keeps for this event (without seq, kind, created_at)."""
        out = dict(self.extra)
        out.update(self._fields_payload())
        return out

    def _fields_payload(self) -> dict[str, Any]:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        """The event as one JSON object, as a session export holds it: the payload's keys
        next to ``seq``, ``kind`` and ``created_at``."""
        return {**self.to_payload(), "seq": self.seq, "kind": self.kind, "created_at": self.created_at}

    @classmethod
    def from_dict(cls: type[E], data: Mapping[str, Any], *, default_seq: int | None = None) -> E:
        """Parse the :meth:`to_dict` form (one event of a session export)."""
        ev = event_from_dict(data, default_seq=default_seq)
        if not isinstance(ev, cls):
            raise EventFormatError(f"{_where(ev.kind, ev.seq)} is not a {cls.KIND or cls.__name__} event")
        return ev

    @classmethod
    def _parse(cls, p: Mapping[str, Any], *, seq: int, created_at: float) -> Event:
        raise NotImplementedError


class _Infer(enum.Enum):
    """The marker of a ``skill`` flag not given: decide it from the result's text."""

    INFER = "infer"


#: ``ToolEvent.build(skill=...)`` left out: the flag is read from the text (a caller that
#: records a Skill tool result by hand, an event stored before the flag existed)
INFER_SKILL = _Infer.INFER


@dataclass(frozen=True, kw_only=True)
class MessageEvent(Event):
    """An event that carries one chat message of the trajectory."""

    message: Message


# -- message events ----------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class UserEvent(MessageEvent):
    """A user message (typed by a person, or a task handed to a sub-agent)."""

    KIND: ClassVar[str] = "user"
    KNOWN: ClassVar[frozenset[str]] = frozenset({"message"})

    def _fields_payload(self) -> dict[str, Any]:
        return {"message": self.message.to_wire()}

    @property
    def skills_announced(self) -> tuple[str, ...] | None:
        """The skill names this message announced if it is a skills catalog, else ``None``.

        A catalog is appended as a user message (never in the cached system prompt) but it is
        not the task: whatever looks for the task skips it, and the harness reads it to know
        which skills the session was already told about.
        """
        names = self.extra.get(SKILLS_CATALOG_KEY)
        return tuple(str(n) for n in names) if isinstance(names, list) else None

    @property
    def mcp_tools_announced(self) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
        """``(added, removed)`` tool names if this message is an MCP tools reminder, else ``None``.

        Like a skills catalog, it is appended when a server changes its tools (the frozen
        ``tools`` array is never rebuilt) and read back to know what the session was told.
        """
        told = self.extra.get(MCP_TOOLS_KEY)
        if not isinstance(told, Mapping):
            return None
        added, removed = told.get("added"), told.get("removed")
        return (
            tuple(str(n) for n in added) if isinstance(added, list) else (),
            tuple(str(n) for n in removed) if isinstance(removed, list) else (),
        )

    @property
    def is_reminder(self) -> bool:
        """True for a message the harness appended (a skills catalog, an MCP tools reminder):
        context, not the task, so whatever looks for the task skips it."""
        return any(key in self.extra for key in REMINDER_KEYS)

    @classmethod
    def _parse(cls, p: Mapping[str, Any], *, seq: int, created_at: float) -> UserEvent:
        w = _where(cls.KIND, seq)
        return cls(seq=seq, created_at=created_at, message=_message(p, w), extra=_extra(p, cls.KNOWN))


@dataclass(frozen=True, kw_only=True)
class AssistantEvent(MessageEvent):
    """A model reply. ``call_index`` names the model call it answered (``None`` for a reply
    recorded by hand, e.g. a test's scripted history)."""

    KIND: ClassVar[str] = "assistant"
    KNOWN: ClassVar[frozenset[str]] = frozenset({"message", "usage", "call_index", "finish_reason"})

    usage: Usage | None = None
    call_index: int | None = None
    finish_reason: str | None = None

    @classmethod
    def build(cls, message: Message, usage: Usage | None = None, **fields: Any) -> AssistantEvent:
        """From ``Session.add_assistant``'s arguments: known keys become fields, the rest ``extra``."""
        return cls(
            message=message,
            usage=usage,
            call_index=fields.pop("call_index", None),
            finish_reason=fields.pop("finish_reason", None),
            extra=fields,
        )

    def _fields_payload(self) -> dict[str, Any]:
        out: dict[str, Any] = {"message": self.message.to_wire()}
        if self.usage is not None:
            out["usage"] = self.usage.to_dict()
        _put(out, "call_index", self.call_index)
        # the agent loop records the finish reason with every call index, null included
        if self.finish_reason is not None or self.call_index is not None:
            out["finish_reason"] = self.finish_reason
        return out

    @classmethod
    def _parse(cls, p: Mapping[str, Any], *, seq: int, created_at: float) -> AssistantEvent:
        w = _where(cls.KIND, seq)
        u = p.get("usage")
        if u is not None and not isinstance(u, Mapping):
            raise EventFormatError(f"{w}: 'usage' is {type(u).__name__}, not an object")
        return cls(
            seq=seq,
            created_at=created_at,
            message=_message(p, w),
            usage=Usage.from_dict(dict(u)) if u is not None else None,
            call_index=_int(p, "call_index", w),
            finish_reason=_str(p, "finish_reason", w),
            extra=_extra(p, cls.KNOWN),
        )


@dataclass(frozen=True)
class Offload:
    """Where the budget layer saved a result's full text (``compaction/offload.py``)."""

    path: str
    chars: int
    bytes: int

    @classmethod
    def from_dict(cls, d: Any, where: str) -> Offload:
        if not isinstance(d, Mapping):
            raise EventFormatError(f"{where}: 'offload' is {type(d).__name__}, not an object")
        path, chars, size = _str(d, "path", where), _int(d, "chars", where), _int(d, "bytes", where)
        if path is None or chars is None or size is None:
            raise EventFormatError(f"{where}: 'offload' needs path, chars and bytes")
        return cls(path, chars, size)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "chars": self.chars, "bytes": self.bytes}


@dataclass(frozen=True)
class Sanitization:
    """What the sanitizer changed in an untrusted result (``defence/sanitize.py``): how many
    of each kind, and the text as the tool returned it (nothing the tool said is lost)."""

    counts: tuple[tuple[str, int], ...]
    original: str

    @classmethod
    def from_dict(cls, d: Any, where: str) -> Sanitization:
        if not isinstance(d, Mapping):
            raise EventFormatError(f"{where}: 'sanitized' is {type(d).__name__}, not an object")
        counts, original = d.get("counts"), d.get("original")
        if not isinstance(counts, Mapping) or not isinstance(original, str):
            raise EventFormatError(f"{where}: 'sanitized' needs counts (an object) and original (a string)")
        pairs = []
        for kind, n in counts.items():
            if isinstance(n, bool) or not isinstance(n, int):
                raise EventFormatError(f"{where}: 'sanitized' count {kind!r} is {type(n).__name__}, not an integer")
            pairs.append((str(kind), n))
        return cls(tuple(sorted(pairs)), original)  # by kind: the store writes keys sorted

    def to_dict(self) -> dict[str, Any]:
        return {"counts": dict(self.counts), "original": self.original}

    def summary(self) -> str:
        """``zero_width 3, control_tokens 1``: the counts in one line."""
        return ", ".join(f"{kind} {n:,}" for kind, n in self.counts)


@dataclass(frozen=True)
class BudgetRecord:
    """What compaction's record-time layers say about one result (``compaction/budget.py``,
    ``compaction/manager.py``), stored as the ``tool`` event's fields of the same names: the
    id ``read_result`` knows it by, its size (``tokens`` only when it was counted), its hash
    (for repeats), how many bytes were not UTF-8, where its full text went (``offload``), the
    earlier result it repeats, the record-time strategy that shortened it (``compressed``),
    and the lossless compressor that rewrote it with the characters it saved
    (``compress_rule``, ``compress_saved``: ``compaction/compress/``)."""

    result_id: str
    chars: int | None = None
    tokens: int | None = None
    sha256: str | None = None
    invalid_utf8: int | None = None
    offload: Offload | None = None
    repeat_of: str | None = None
    compressed: str | None = None
    compress_rule: str | None = None
    compress_saved: int | None = None


@dataclass(frozen=True, kw_only=True)
class ToolEvent(MessageEvent):
    """One tool result, as recorded (after the budget layer, before any later compaction).

    ``result_id`` names the result for ``read_result``; ``offload`` is set when the full text
    went to disk; ``repeat_of`` when it equals an earlier result; ``compressed`` names the
    record-time strategy that shortened it; ``compress_rule`` the lossless compressor that
    rewrote it (``compaction/compress/``) and ``compress_saved`` the characters it saved
    (both absent from events stored before them, and written only when set). ``interrupted`` marks the answer the harness
    recorded for a call whose run was cut short (Ctrl-C, a crash, ``kill -9``) before its
    result was stored (``core/interrupted.py``): the call may have partially run.
    ``external``: the content is an untrusted tool's text, marked as external content
    (``defence/marking.py``); ``sanitized``: what the sanitizer changed in it, with the
    original text (``defence/sanitize.py``).

    ``skill``: the skill whose full instructions this result is, as the ``Skill`` tool said
    when it returned it (``tools/registry.py: ToolResult``); compaction keeps such a result
    in the context (``compaction/skills.py``). An event made without the flag -- stored by a
    release before it, or recorded by a caller that does not say -- is decided once, here,
    from its text as those releases did (:func:`~ctxwright.core.skill_content.body_skill`);
    ``skill_inferred`` then keeps the derived flag out of the payload, so such a row writes
    back byte for byte as it was stored.
    """

    KIND: ClassVar[str] = "tool"
    KNOWN: ClassVar[frozenset[str]] = frozenset(
        {
            "message",
            "tool_name",
            "ok",
            "elapsed_ms",
            "error_type",
            "result_id",
            "chars",
            "tokens",
            "sha256",
            "offload",
            "repeat_of",
            "compressed",
            "compress_rule",
            "compress_saved",
            "invalid_utf8",
            "interrupted",
            "external",
            "sanitized",
            "skill",
        }
    )

    tool_name: str
    ok: bool = True
    elapsed_ms: float | None = None
    error_type: str | None = None
    result_id: str | None = None
    chars: int | None = None
    tokens: int | None = None
    sha256: str | None = None
    offload: Offload | None = None
    repeat_of: str | None = None
    compressed: str | None = None
    compress_rule: str | None = None
    compress_saved: int | None = None
    invalid_utf8: int | None = None
    interrupted: bool = False
    external: bool = False
    sanitized: Sanitization | None = None
    skill: str | None = None
    skill_inferred: bool = field(default=False, compare=False, repr=False)

    @classmethod
    def build(
        cls,
        message: Message,
        *,
        tool_name: str,
        ok: bool = True,
        elapsed_ms: float | None = None,
        error_type: str | None = None,
        budget: BudgetRecord | None = None,
        external: bool = False,
        sanitized: Sanitization | None = None,
        interrupted: bool = False,
        skill: str | _Infer | None = INFER_SKILL,
    ) -> ToolEvent:
        """From ``Session.add_tool_result``'s arguments: the budget layer's record spread
        into the event's fields of the same names. ``skill`` left out (:data:`INFER_SKILL`): decided
        from the text, as for an event stored before the flag existed."""
        inferred = isinstance(skill, _Infer)
        spread: dict[str, Any] = {}  # compaction off: no result id, nothing offloaded
        if budget is not None:
            spread = {
                "result_id": budget.result_id,
                "chars": budget.chars,
                "tokens": budget.tokens,
                "sha256": budget.sha256,
                "offload": budget.offload,
                "repeat_of": budget.repeat_of,
                "compressed": budget.compressed,
                "compress_rule": budget.compress_rule,
                "compress_saved": budget.compress_saved,
                "invalid_utf8": budget.invalid_utf8,
            }
        return cls(  # built once: a second pass through __init__ for the budget's fields costs a turn
            message=message,
            tool_name=tool_name,
            ok=ok,
            elapsed_ms=elapsed_ms,
            error_type=error_type,
            interrupted=interrupted,
            external=external,
            sanitized=sanitized,
            skill=body_skill(tool_name, message.content) if isinstance(skill, _Infer) else skill,
            skill_inferred=inferred,
            **spread,
        )

    def _fields_payload(self) -> dict[str, Any]:
        # tool_name, ok, elapsed_ms and error_type were always written (null included)
        out: dict[str, Any] = {
            "message": self.message.to_wire(),
            "tool_name": self.tool_name,
            "ok": self.ok,
            "elapsed_ms": self.elapsed_ms,
            "error_type": self.error_type,
        }
        for key in (
            "result_id",
            "chars",
            "tokens",
            "sha256",
            "repeat_of",
            "compressed",
            "compress_rule",
            "compress_saved",
            "invalid_utf8",
        ):
            _put(out, key, getattr(self, key))
        if self.offload is not None:
            out["offload"] = self.offload.to_dict()
        if self.interrupted:  # written only when set: older rows stay byte for byte as they were
            out["interrupted"] = True
        if self.external:
            out["external"] = True
        if self.sanitized is not None:
            out["sanitized"] = self.sanitized.to_dict()
        if self.skill is not None and not self.skill_inferred:
            out["skill"] = self.skill
        return out

    @classmethod
    def _parse(cls, p: Mapping[str, Any], *, seq: int, created_at: float) -> ToolEvent:
        w = _where(cls.KIND, seq)
        ok = p.get("ok", True)
        if not isinstance(ok, bool):
            raise EventFormatError(f"{w}: 'ok' is {type(ok).__name__}, not true or false")
        interrupted = p.get("interrupted", False)
        if not isinstance(interrupted, bool):
            raise EventFormatError(f"{w}: 'interrupted' is {type(interrupted).__name__}, not true or false")
        external = p.get("external", False)
        if not isinstance(external, bool):
            raise EventFormatError(f"{w}: 'external' is {type(external).__name__}, not true or false")
        message = _message(p, w)
        tool_name = _str(p, "tool_name", w) or "tool"
        inferred = "skill" not in p  # stored before the flag: decided from the text, once
        return cls(
            seq=seq,
            created_at=created_at,
            message=message,
            tool_name=tool_name,
            ok=ok,
            elapsed_ms=_float(p, "elapsed_ms", w),
            error_type=_str(p, "error_type", w),
            result_id=_str(p, "result_id", w),
            chars=_int(p, "chars", w),
            tokens=_int(p, "tokens", w),
            sha256=_str(p, "sha256", w),
            offload=Offload.from_dict(p["offload"], w) if p.get("offload") is not None else None,
            repeat_of=_str(p, "repeat_of", w),
            compressed=_str(p, "compressed", w),
            compress_rule=_str(p, "compress_rule", w),
            compress_saved=_int(p, "compress_saved", w),
            invalid_utf8=_int(p, "invalid_utf8", w),
            interrupted=interrupted,
            external=external,
            sanitized=Sanitization.from_dict(p["sanitized"], w) if p.get("sanitized") is not None else None,
            skill=body_skill(tool_name, message.content) if inferred else _str(p, "skill", w),
            skill_inferred=inferred,
            extra=_extra(p, cls.KNOWN),
        )


@dataclass(frozen=True, kw_only=True)
class StatusEvent(MessageEvent):
    """The status bar's user message before one call. ``mode`` says how it was meant to be
    shown: ``replace`` hides the previous status from then on, ``append`` keeps it
    (``status/bar.py`` explains the cache trade-off; ``core/render.py`` applies it)."""

    KIND: ClassVar[str] = "status"
    KNOWN: ClassVar[frozenset[str]] = frozenset({"message", "mode"})

    mode: StatusMode = "append"

    def _fields_payload(self) -> dict[str, Any]:
        return {"message": self.message.to_wire(), "mode": self.mode}

    @classmethod
    def _parse(cls, p: Mapping[str, Any], *, seq: int, created_at: float) -> StatusEvent:
        w = _where(cls.KIND, seq)
        mode = p.get("mode", "append")
        if mode not in ("replace", "append"):
            raise EventFormatError(f"{w}: mode {mode!r} is neither 'replace' nor 'append'")
        return cls(seq=seq, created_at=created_at, message=_message(p, w), mode=mode, extra=_extra(p, cls.KNOWN))


# -- events that change the view or the harness state -------------------------------------------
@dataclass(frozen=True)
class CompactionNote:
    """A user message shown before event ``before_seq`` in place of what was removed;
    ``replaces_all`` (a full-compaction summary) supersedes every earlier note."""

    before_seq: int
    text: str
    replaces_all: bool = False


@dataclass(frozen=True, kw_only=True)
class CompactionEvent(Event):
    """How the view shows earlier events from now on (never an edit of them): ``replace``
    maps event seqs to new contents, ``drop`` removes events whole, ``note`` stands in for
    what was removed. The rule that applies them is ``core/compaction_view.py``."""

    KIND: ClassVar[str] = "compaction"
    KNOWN: ClassVar[frozenset[str]] = frozenset(
        {"layer", "replace", "drop", "note", "call_index", "tokens_before", "stage", "ledger"}
    )

    layer: str
    replace: Mapping[int, str] = field(default_factory=dict)
    drop: tuple[int, ...] = ()
    note: CompactionNote | None = None
    call_index: int | None = None
    tokens_before: int | None = None
    stage: int | None = None
    #: what the compaction hid and which of its identifiers are still in view
    #: (``compaction/ledger.py`` writes and reads it; the renderer never does). JSON as
    #: written; events recorded before the ledger existed have none.
    ledger: Mapping[str, Any] | None = None

    @property
    def stall_ms(self) -> float | None:
        """How long the loop waited on this compaction before its call, in ms (written by
        ``compaction/background.py``; ``None`` for events recorded before it was)."""
        v = self.extra.get("stall_ms")
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

    @property
    def overflow_retry(self) -> bool:
        """Whether this compaction was forced by the server's context-length error, before
        the one retry of that call (``agent/loop.py``)."""
        return self.extra.get("overflow_retry") is True

    def _fields_payload(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "layer": self.layer,
            "replace": {str(k): v for k, v in self.replace.items()},
            "drop": list(self.drop),
        }
        if self.note is not None:
            note: dict[str, Any] = {"before_seq": self.note.before_seq, "text": self.note.text}
            if self.note.replaces_all:
                note["replaces"] = "all"
            out["note"] = note
        _put(out, "call_index", self.call_index)
        _put(out, "tokens_before", self.tokens_before)
        _put(out, "stage", self.stage)
        _put(out, "ledger", self.ledger)
        return out

    @classmethod
    def _parse(cls, p: Mapping[str, Any], *, seq: int, created_at: float) -> CompactionEvent:
        w = _where(cls.KIND, seq)
        rep = p.get("replace") or {}
        drop = p.get("drop") or []
        if not isinstance(rep, Mapping) or not all(isinstance(v, str) for v in rep.values()):
            raise EventFormatError(f"{w}: 'replace' must map event seqs to texts")
        if not isinstance(drop, list):
            raise EventFormatError(f"{w}: 'drop' must be a list of event seqs")
        replace = {_seq_named(k, w, "replace"): v for k, v in rep.items()}
        dropped = tuple(_seq_named(s, w, "drop") for s in drop)
        note = None
        raw = p.get("note")
        if raw is not None:
            if not isinstance(raw, Mapping) or not isinstance(raw.get("text"), str):
                raise EventFormatError(f"{w}: 'note' needs before_seq and text")
            before = _int(raw, "before_seq", w)
            if before is None:
                raise EventFormatError(f"{w}: 'note' needs before_seq and text")
            note = CompactionNote(before, raw["text"], raw.get("replaces") == "all")
        ledger = p.get("ledger")
        if ledger is not None and not isinstance(ledger, Mapping):
            raise EventFormatError(f"{w}: 'ledger' is {type(ledger).__name__}, not an object")
        return cls(
            seq=seq,
            created_at=created_at,
            layer=_str(p, "layer", w) or "",
            replace=replace,
            drop=dropped,
            note=note,
            call_index=_int(p, "call_index", w),
            tokens_before=_int(p, "tokens_before", w),
            stage=_int(p, "stage", w),
            ledger=ledger,
            extra=_extra(p, cls.KNOWN),
        )


@dataclass(frozen=True, kw_only=True)
class BreakerEvent(Event):
    """A state change of the LLM-compaction circuit breaker (``compaction/breaker.py``)."""

    KIND: ClassVar[str] = "breaker"
    KNOWN: ClassVar[frozenset[str]] = frozenset({"state", "call_index", "failures", "reason", "retry_at_call"})

    state: BreakerState
    call_index: int = 0
    failures: int | None = None
    reason: str | None = None
    retry_at_call: int | None = None

    def _fields_payload(self) -> dict[str, Any]:
        out: dict[str, Any] = {"state": self.state, "call_index": self.call_index}
        _put(out, "failures", self.failures)
        _put(out, "reason", self.reason)
        _put(out, "retry_at_call", self.retry_at_call)
        return out

    @classmethod
    def _parse(cls, p: Mapping[str, Any], *, seq: int, created_at: float) -> BreakerEvent:
        w = _where(cls.KIND, seq)
        state = p.get("state")
        if state not in ("open", "closed"):
            raise EventFormatError(f"{w}: state {state!r} is neither 'open' nor 'closed'")
        return cls(
            seq=seq,
            created_at=created_at,
            state=state,
            call_index=_int(p, "call_index", w) or 0,
            failures=_int(p, "failures", w),
            reason=_str(p, "reason", w),
            retry_at_call=_int(p, "retry_at_call", w),
            extra=_extra(p, cls.KNOWN),
        )


@dataclass(frozen=True, kw_only=True)
class SummaryFailedEvent(Event):
    """An LLM summary that failed its checks or its call; nothing was replaced."""

    KIND: ClassVar[str] = "summary_failed"
    KNOWN: ClassVar[frozenset[str]] = frozenset({"reason", "detail", "call_index"})

    reason: str
    detail: str = ""
    call_index: int | None = None

    def _fields_payload(self) -> dict[str, Any]:
        out: dict[str, Any] = {"reason": self.reason, "detail": self.detail}
        _put(out, "call_index", self.call_index)
        return out

    @classmethod
    def _parse(cls, p: Mapping[str, Any], *, seq: int, created_at: float) -> SummaryFailedEvent:
        w = _where(cls.KIND, seq)
        return cls(
            seq=seq,
            created_at=created_at,
            reason=_str(p, "reason", w) or "",
            detail=_str(p, "detail", w) or "",
            call_index=_int(p, "call_index", w),
            extra=_extra(p, cls.KNOWN),
        )


@dataclass(frozen=True)
class TodoItem:
    """One step of the agent's plan (``status/todo.py`` keeps the list)."""

    id: int
    text: str
    status: TodoStatus = "pending"
    created_at: float = 0.0
    updated_at: float = 0.0


@dataclass(frozen=True, kw_only=True)
class TodoEvent(Event):
    """The whole TODO list after one change (small), so it is rebuilt exactly on resume."""

    KIND: ClassVar[str] = "todo"
    KNOWN: ClassVar[frozenset[str]] = frozenset({"items", "next_id"})

    items: tuple[TodoItem, ...] = ()
    next_id: int = 1

    def _fields_payload(self) -> dict[str, Any]:
        return {"items": [asdict(i) for i in self.items], "next_id": self.next_id}

    @classmethod
    def _parse(cls, p: Mapping[str, Any], *, seq: int, created_at: float) -> TodoEvent:
        w = _where(cls.KIND, seq)
        raw = p.get("items")
        if not isinstance(raw, list):
            raise EventFormatError(f"{w}: 'items' must be a list")
        try:
            items = tuple(TodoItem(**d) for d in raw)
        except TypeError as exc:
            raise EventFormatError(f"{w}: a TODO item cannot be read ({exc})") from exc
        next_id = _int(p, "next_id", w)
        return cls(
            seq=seq,
            created_at=created_at,
            items=items,
            next_id=next_id if next_id is not None else len(items) + 1,
            extra=_extra(p, cls.KNOWN),
        )


GateVerdict = Literal["approve", "deny"]


@dataclass(frozen=True, kw_only=True)
class GateEvent(Event):
    """The confirmation gate's decision on one call (``defence/gate.py``), recorded before the
    call's result: ``by`` says who decided (``policy``, ``allowlist``, ``mode``, ``callback``,
    ``no_approver``, ``callback_error``, ``callback_timeout``, ``callback_invalid``), ``flags``
    what was found (each a dict: type, argument, value, what, reason, and where an untrusted
    value was seen). Not a message: the renderer skips it; a denied call is answered by its
    ``gate_denied`` tool result, so every call stays answered."""

    KIND: ClassVar[str] = "gate"
    KNOWN: ClassVar[frozenset[str]] = frozenset(
        {"call_id", "tool", "effects", "decision", "by", "reason", "mode", "flags"}
    )

    call_id: str
    tool: str
    decision: GateVerdict
    effects: str = ""
    by: str = ""
    reason: str = ""
    mode: str = ""
    flags: tuple[Mapping[str, Any], ...] = ()

    def _fields_payload(self) -> dict[str, Any]:
        return {
            "call_id": self.call_id,
            "tool": self.tool,
            "effects": self.effects,
            "decision": self.decision,
            "by": self.by,
            "reason": self.reason,
            "mode": self.mode,
            "flags": [dict(f) for f in self.flags],
        }

    @classmethod
    def _parse(cls, p: Mapping[str, Any], *, seq: int, created_at: float) -> GateEvent:
        w = _where(cls.KIND, seq)
        decision = p.get("decision")
        if decision not in ("approve", "deny"):
            raise EventFormatError(f"{w}: decision {decision!r} is neither 'approve' nor 'deny'")
        flags = p.get("flags") or []
        if not isinstance(flags, list) or not all(isinstance(f, Mapping) for f in flags):
            raise EventFormatError(f"{w}: 'flags' must be a list of objects")
        return cls(
            seq=seq,
            created_at=created_at,
            call_id=_str(p, "call_id", w) or "",
            tool=_str(p, "tool", w) or "",
            decision=decision,
            effects=_str(p, "effects", w) or "",
            by=_str(p, "by", w) or "",
            reason=_str(p, "reason", w) or "",
            mode=_str(p, "mode", w) or "",
            flags=tuple(dict(f) for f in flags),
            extra=_extra(p, cls.KNOWN),
        )


@dataclass(frozen=True, kw_only=True)
class HookEvent(Event):
    """One call of a user's compaction hook (``compaction/hooks.py``): ``hook`` is
    ``before_compaction`` or ``after_compaction``, ``tier`` the tier it was called for, and
    ``decision`` what came of it -- ``ok``, ``vetoed``, ``edited`` (``kept``: the seqs the hook
    took out of the plan, which stay in view), ``noted`` (``note``: the text added to the
    compaction note), ``overridden`` (a veto or edit not honoured because the request was over
    the window), ``refused`` (an edit that broke an invariant: the plan applied as planned),
    ``failed`` (the hook raised or returned something else), ``timeout`` (it did not return
    within its timeout; its thread was left behind) or ``skipped`` (earlier calls still hang).
    ``reason`` says why, credentials removed (``core/redact.py``). Not a message: the renderer
    skips it; recorded so a resumed or replayed session shows who changed its compactions."""

    KIND: ClassVar[str] = "compaction_hook"
    KNOWN: ClassVar[frozenset[str]] = frozenset(
        {"hook", "tier", "layer", "decision", "call_index", "duration_ms", "kept", "note", "reason", "compaction_seq"}
    )

    hook: str
    tier: str
    decision: str
    layer: str = ""
    call_index: int | None = None
    duration_ms: float = 0.0
    kept: tuple[int, ...] = ()
    note: str | None = None
    reason: str = ""
    #: the ``compaction`` event an ``after_compaction`` call saw
    compaction_seq: int | None = None

    def _fields_payload(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "hook": self.hook,
            "tier": self.tier,
            "layer": self.layer,
            "decision": self.decision,
            "duration_ms": self.duration_ms,
        }
        _put(out, "call_index", self.call_index)
        if self.kept:
            out["kept"] = list(self.kept)
        _put(out, "note", self.note)
        if self.reason:
            out["reason"] = self.reason
        _put(out, "compaction_seq", self.compaction_seq)
        return out

    @classmethod
    def _parse(cls, p: Mapping[str, Any], *, seq: int, created_at: float) -> HookEvent:
        w = _where(cls.KIND, seq)
        kept = p.get("kept") or []
        if not isinstance(kept, list):
            raise EventFormatError(f"{w}: 'kept' must be a list of event seqs")
        return cls(
            seq=seq,
            created_at=created_at,
            hook=_str(p, "hook", w) or "",
            tier=_str(p, "tier", w) or "",
            layer=_str(p, "layer", w) or "",
            decision=_str(p, "decision", w) or "",
            call_index=_int(p, "call_index", w),
            duration_ms=_float(p, "duration_ms", w) or 0.0,
            kept=tuple(_seq_named(s, w, "kept") for s in kept),
            note=_str(p, "note", w),
            reason=_str(p, "reason", w) or "",
            compaction_seq=_int(p, "compaction_seq", w),
            extra=_extra(p, cls.KNOWN),
        )


@dataclass(frozen=True, kw_only=True)
class ProviderCompactionEvent(Event):
    """What the provider's own context management did to one call (``compaction/provider.py``).

    Not a :class:`CompactionEvent`: those change ctxwright's view, and the provider's edits
    change only what its server reads -- the trajectory stays as recorded. ``edit`` is the
    provider's name for it (``clear_tool_uses_20250919``, ``clear_thinking_20251015``,
    ``compaction``); ``cleared`` the tool uses or thinking turns it cleared and
    ``cleared_tokens`` the input tokens it says it removed; ``item`` the opaque compaction
    block or item verbatim (it is also in the assistant message that carries it, which is what
    a resume sends back); ``score`` which of the hidden identifiers are still answerable."""

    KIND: ClassVar[str] = "provider_compaction"
    KNOWN: ClassVar[frozenset[str]] = frozenset(
        {"provider", "edit", "call_index", "cleared", "cleared_tokens", "item", "score"}
    )

    provider: str
    edit: str
    call_index: int | None = None
    cleared: int | None = None
    cleared_tokens: int | None = None
    item: Mapping[str, Any] | None = None
    score: Mapping[str, Any] | None = None

    def _fields_payload(self) -> dict[str, Any]:
        out: dict[str, Any] = {"provider": self.provider, "edit": self.edit}
        _put(out, "call_index", self.call_index)
        _put(out, "cleared", self.cleared)
        _put(out, "cleared_tokens", self.cleared_tokens)
        _put(out, "item", None if self.item is None else dict(self.item))
        _put(out, "score", None if self.score is None else dict(self.score))
        return out

    @classmethod
    def _parse(cls, p: Mapping[str, Any], *, seq: int, created_at: float) -> ProviderCompactionEvent:
        w = _where(cls.KIND, seq)
        item, score = p.get("item"), p.get("score")
        for key, v in (("item", item), ("score", score)):
            if v is not None and not isinstance(v, Mapping):
                raise EventFormatError(f"{w}: '{key}' is {type(v).__name__}, not an object")
        return cls(
            seq=seq,
            created_at=created_at,
            provider=_str(p, "provider", w) or "",
            edit=_str(p, "edit", w) or "",
            call_index=_int(p, "call_index", w),
            cleared=_int(p, "cleared", w),
            cleared_tokens=_int(p, "cleared_tokens", w),
            item=item,
            score=score,
            extra=_extra(p, cls.KNOWN),
        )


PinBy = Literal["user", "tool", "model"]


@dataclass(frozen=True, kw_only=True)
class PinEvent(Event):
    """Events pinned: every compaction tier keeps them whole (``compaction/pins.py``).

    ``targets`` are the pinned events' seqs; ``text`` the fact pinned when one was given as
    text (it is also in the trajectory: the pinned note the pin appended, one of ``targets``);
    ``by`` who pinned: ``user`` (``ctx.pin``), ``tool`` (a result of a ``@tool(pin=True)``
    tool), ``model`` (the ``pin`` tool). An event, not a flag on the pinned message, because
    the message is already recorded and events are never edited; a resumed session reads its
    pins back from here."""

    KIND: ClassVar[str] = "pin"
    KNOWN: ClassVar[frozenset[str]] = frozenset({"targets", "text", "by"})

    targets: tuple[int, ...] = ()
    text: str | None = None
    by: PinBy = "user"

    def _fields_payload(self) -> dict[str, Any]:
        out: dict[str, Any] = {"targets": list(self.targets), "by": self.by}
        _put(out, "text", self.text)
        return out

    @classmethod
    def _parse(cls, p: Mapping[str, Any], *, seq: int, created_at: float) -> PinEvent:
        w = _where(cls.KIND, seq)
        raw = p.get("targets")
        if not isinstance(raw, list):
            raise EventFormatError(f"{w}: 'targets' must be a list of event seqs")
        by = p.get("by", "user")
        if by not in ("user", "tool", "model"):
            raise EventFormatError(f"{w}: 'by' is {by!r}, not 'user', 'tool' or 'model'")
        return cls(
            seq=seq,
            created_at=created_at,
            targets=tuple(_seq_named(t, w, "targets") for t in raw),
            text=_str(p, "text", w),
            by=by,
            extra=_extra(p, cls.KNOWN),
        )


@dataclass(frozen=True, kw_only=True)
class UnknownEvent(Event):
    """An event of a kind this build does not know, kept verbatim (a newer writer's)."""

    name: str
    payload: Mapping[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return self.name

    def _fields_payload(self) -> dict[str, Any]:
        return dict(self.payload)


#: Every kind this build knows, by its stored name.
KINDS: dict[str, type[Event]] = {
    c.KIND: c
    for c in (
        UserEvent,
        AssistantEvent,
        ToolEvent,
        StatusEvent,
        CompactionEvent,
        BreakerEvent,
        SummaryFailedEvent,
        TodoEvent,
        GateEvent,
        PinEvent,
        HookEvent,
        ProviderCompactionEvent,
    )
}


def event_from_row(seq: int, kind: str, created_at: float, payload: Mapping[str, Any]) -> Event:
    """The typed event of one stored row; :class:`UnknownEvent` for a kind this build does not
    know. Raises :class:`~ctxwright.errors.EventFormatError` for a payload of the wrong shape."""
    if not isinstance(payload, Mapping):
        raise EventFormatError(f"{_where(kind, seq)}: the payload is {type(payload).__name__}, not an object")
    cls = KINDS.get(kind)
    if cls is None:
        return UnknownEvent(seq=seq, created_at=created_at, name=kind, payload=dict(payload))
    return cls._parse(payload, seq=seq, created_at=created_at)


def event_from_dict(data: Mapping[str, Any], *, default_seq: int | None = None) -> Event:
    """One event of a session export (``{"seq", "kind", "created_at", **payload}``).

    ``default_seq`` stands in for a missing ``seq`` (a hand-written export)."""
    if not isinstance(data, Mapping):
        raise EventFormatError(f"an event is a JSON {type(data).__name__}, not an object")
    kind = data.get("kind")
    seq = data.get("seq", default_seq)
    if isinstance(seq, float) and seq.is_integer():
        seq = int(seq)
    if not isinstance(seq, int) or isinstance(seq, bool):
        seq = default_seq
    if seq is None:
        raise EventFormatError(f"{kind} event has no seq" if isinstance(kind, str) and kind else "an event has no seq")
    if not isinstance(kind, str) or not kind:
        raise EventFormatError(f"event {seq} has no kind")
    created = data.get("created_at")
    created_at = float(created) if isinstance(created, (int, float)) and not isinstance(created, bool) else 0.0
    payload = {k: v for k, v in data.items() if k not in ("seq", "kind", "created_at")}
    return event_from_row(seq, kind, created_at, payload)
