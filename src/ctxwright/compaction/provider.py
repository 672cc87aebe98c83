"""The providers' own compaction: what to send, what came back, and what it kept.

Why: Anthropic and OpenAI now compact on their side. Anthropic's context editing clears old
tool results (``clear_tool_uses_20250919``) and thinking (``clear_thinking_20251015``) before
the model reads the prompt, and its server-side compaction (``compact_20260112``) summarises the
conversation into a ``compaction`` block; the Responses API's ``context_management`` compaction
returns an encrypted ``compaction`` item no one can read. None of them says which facts went.
This module sends their documented options (``CompactionConfig.provider``), turns what came
back into :class:`ProviderCompactionEvent` s, and scores them with the loss ledger's probes
(:func:`ctxwright.compaction.ledger.items_of`): every identifier and number of what was hidden,
kept or lost.

What is sent (platform.claude.com "Context editing" and "Compaction";
developers.openai.com "Compaction"; the field shapes are the official SDKs' types):

* Anthropic, ``"clear"``: beta ``context-management-2025-06-27``,
  ``context_management: {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}?,
  {"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": N},
  "keep": {"type": "tool_uses", "value": K}, "clear_at_least"?, "exclude_tools"?,
  "clear_tool_inputs"?}]}`` -- ``clear_thinking`` only with thinking on, and then first, as
  the API requires; ``keep: "all"`` keeps every thinking block (the cache-friendly setting).
  The reply's ``context_management.applied_edits`` says per edit how many tool uses (or
  thinking turns) and input tokens it cleared.
* Anthropic, ``"compact"``: beta ``compact-2026-01-12``, edit ``{"type": "compact_20260112",
  "trigger": {"type": "input_tokens", "value": N}}`` (default 150,000, at least 50,000). Once
  over the trigger the reply starts with a ``compaction`` block (a readable summary and a
  signature); sent back in its assistant turn, it makes the API drop every block before it.
* Responses, ``"compact"``: ``context_management: [{"type": "compaction",
  "compact_threshold": N}]``; over the threshold the output carries an encrypted
  ``compaction`` item, kept verbatim and sent back in place of what it replaced.

Scoring: a cleared tool result is known (the documented rule clears the oldest results first,
and the reply says how many), so its identifiers are checked against what the model still
reads; Anthropic's summary is readable, so it is checked the same way. An encrypted item can
only be probed: one question per identifier, asked of the model afterwards
(:func:`score_probed`). Against a simulator the answers are what the simulator's documented
behaviour gives, not what a hosted model would answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxwright.backends.base import Backend
from ctxwright.compaction.config import CompactionConfig
from ctxwright.compaction.ledger import Seen, appears, items_of
from ctxwright.compaction.survival import Turn, contract
from ctxwright.core.events import ProviderCompactionEvent
from ctxwright.core.messages import Message, Usage
from ctxwright.errors import ConfigError

__all__ = [
    "ANTHROPIC_COMPACT_BETA",
    "ANTHROPIC_COMPACT_MINIMUM",
    "ANTHROPIC_EDITS_BETA",
    "MODES",
    "Probe",
    "Score",
    "anthropic_options",
    "cleared_indices",
    "cleared_results",
    "configure",
    "declared_items",
    "events_of",
    "item_bytes",
    "probe_question",
    "read_answer",
    "responses_options",
    "score_probed",
    "score_view",
    "visible_text",
]

#: ``CompactionConfig.provider`` values.
MODES = ("clear", "compact")
ANTHROPIC_EDITS_BETA = "context-management-2025-06-27"
ANTHROPIC_COMPACT_BETA = "compact-2026-01-12"
CLEAR_TOOL_USES = "clear_tool_uses_20250919"
CLEAR_THINKING = "clear_thinking_20251015"
COMPACT = "compact_20260112"
#: Anthropic's documented defaults and minimum (input tokens).
ANTHROPIC_CLEAR_TRIGGER = 100_000
ANTHROPIC_COMPACT_TRIGGER = 150_000
ANTHROPIC_COMPACT_MINIMUM = 50_000
#: The Responses API documents no default threshold: this share of the window is used.
RESPONSES_SHARE = 0.8
#: Identifiers probed per compaction at most (one question each).
MAX_PROBES = 40


def _check(cfg: CompactionConfig) -> str:
    mode = cfg.provider
    if mode not in MODES:
        raise ConfigError(f"compaction provider {mode!r} is not one of {', '.join(MODES)}")
    n = cfg.provider_trigger_tokens
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n <= 0):
        raise ConfigError(f"provider_trigger_tokens must be a positive number of tokens, not {n!r}")
    if cfg.provider_keep_tool_uses < 0:
        raise ConfigError(f"provider_keep_tool_uses must be 0 or more, not {cfg.provider_keep_tool_uses!r}")
    return mode


def anthropic_options(cfg: CompactionConfig, *, thinking: bool) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The ``context_management`` object and the beta headers it needs (module docstring)."""
    mode = _check(cfg)
    if mode == "compact":
        trigger = cfg.provider_trigger_tokens or ANTHROPIC_COMPACT_TRIGGER
        if trigger < ANTHROPIC_COMPACT_MINIMUM:
            raise ConfigError(
                f"Anthropic's compaction trigger is at least {ANTHROPIC_COMPACT_MINIMUM:,} input tokens, not "
                f"{trigger:,}: raise provider_trigger_tokens"
            )
        edit = {"type": COMPACT, "trigger": {"type": "input_tokens", "value": trigger}}
        return {"edits": [edit]}, (ANTHROPIC_COMPACT_BETA,)
    clear: dict[str, Any] = {
        "type": CLEAR_TOOL_USES,
        "trigger": {"type": "input_tokens", "value": cfg.provider_trigger_tokens or ANTHROPIC_CLEAR_TRIGGER},
        "keep": {"type": "tool_uses", "value": cfg.provider_keep_tool_uses},
    }
    if cfg.provider_clear_at_least is not None:
        clear["clear_at_least"] = {"type": "input_tokens", "value": cfg.provider_clear_at_least}
    if cfg.provider_exclude_tools:
        clear["exclude_tools"] = list(cfg.provider_exclude_tools)
    if cfg.provider_clear_inputs:
        clear["clear_tool_inputs"] = True
    edits: list[dict[str, Any]] = [{"type": CLEAR_THINKING, "keep": "all"}] if thinking else []
    return {"edits": [*edits, clear]}, (ANTHROPIC_EDITS_BETA,)


def responses_options(cfg: CompactionConfig, window: int) -> list[dict[str, Any]]:
    """The Responses ``context_management`` list; only compaction exists there."""
    mode = _check(cfg)
    if mode != "compact":
        raise ConfigError(
            "the Responses API has no context editing, only compaction: use provider='compact' "
            "(compaction='provider') with the openai-responses backend"
        )
    threshold = cfg.provider_trigger_tokens or int(window * RESPONSES_SHARE)
    return [{"type": "compaction", "compact_threshold": threshold}]


def configure(backend: Backend, cfg: CompactionConfig | None) -> None:
    """Set the backend's provider options from ``cfg`` (nothing when ``cfg.provider`` is unset).
    Only the Anthropic and Responses backends have them: any other is refused in one line."""
    if cfg is None or cfg.provider is None:
        return
    if backend.name == "anthropic":
        thinking = getattr(backend, "thinking", None) is not None
        options, betas = anthropic_options(cfg, thinking=thinking)
        backend.context_management = options  # type: ignore[attr-defined]
        backend.betas = betas  # type: ignore[attr-defined]
    elif backend.name == "openai-responses":
        window = cfg.window_tokens or backend.context_window or 128_000
        backend.context_management = responses_options(cfg, window)  # type: ignore[attr-defined]
    else:
        raise ConfigError(
            f"compaction provider {cfg.provider!r} needs a backend with its own context management "
            f"(anthropic or openai-responses), not {backend.name}: choose one of those, or drop the provider option"
        )


# -- what came back -------------------------------------------------------------------------


def events_of(
    usage: Usage,
    call_index: int | None,
    sent: Sequence[Message] | None = None,
    exclude_tools: Iterable[str] = (),
    keep: Iterable[Any] = (),
) -> list[ProviderCompactionEvent]:
    """The provider's applied edits and compaction items in one reply, as events; scored when
    the request's messages (``sent``) are given and what was hidden can be read: the ledger's
    identifiers, and the items ``keep`` declares (``CompactionConfig.keep``, the survival
    contract) under ``"survival"``."""
    keep = tuple(keep)
    raw = usage.raw
    provider = str(raw.get("provider") or "")
    out: list[ProviderCompactionEvent] = []
    managed = raw.get("context_management")
    applied = managed.get("applied_edits") if isinstance(managed, Mapping) else None
    for edit in applied if isinstance(applied, list) else ():
        if not isinstance(edit, Mapping):
            continue
        kind = str(edit.get("type") or "")
        cleared = edit.get("cleared_tool_uses", edit.get("cleared_thinking_turns"))
        score = None
        if kind == CLEAR_TOOL_USES and sent is not None and isinstance(cleared, int):
            hidden, rest = cleared_results(sent, cleared, exclude_tools)
            at = cleared_indices(sent, cleared, exclude_tools)
            score = score_view(hidden, rest, declared_items(sent, at, keep)).to_dict()
        out.append(
            ProviderCompactionEvent(
                provider=provider,
                edit=kind,
                call_index=call_index,
                cleared=cleared if isinstance(cleared, int) else None,
                cleared_tokens=_int_or_none(edit.get("cleared_input_tokens")),
                score=score,
            )
        )
    items = raw.get("compactions")
    for item in items if isinstance(items, list) else ():
        if not isinstance(item, Mapping):
            continue
        score = None
        summary = readable_summary(item)
        if sent is not None and summary is not None:
            system = [m.content or "" for m in sent[:1] if m.role == "system"]
            every = {i for i, m in enumerate(sent) if m.role != "system"}
            declared = declared_items(sent, every, keep)
            score = score_view(_text(m for m in sent if m.role != "system"), [*system, summary], declared).to_dict()
        out.append(
            ProviderCompactionEvent(provider=provider, edit="compaction", call_index=call_index, item=item, score=score)
        )
    return out


def readable_summary(item: Mapping[str, Any]) -> str | None:
    """The text of a compaction block a client can read (Anthropic's: a summary in ``content``);
    ``None`` for an opaque one (the Responses API's ``encrypted_content``), which only probes
    can score."""
    content = item.get("content")
    return content if isinstance(content, str) else None


def _int_or_none(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _text(messages: Iterable[Message]) -> str:
    parts: list[str] = []
    for m in messages:
        if m.content:
            parts.append(m.content)
        parts.extend(f"{tc.name} {tc.arguments}" for tc in m.tool_calls)
    return "\n".join(parts)


def cleared_indices(messages: Sequence[Message], count: int, exclude_tools: Iterable[str] = ()) -> list[int]:
    """The messages a ``clear_tool_uses`` edit that cleared ``count`` tool uses hid, by the
    documented rule: the oldest results first, excluded tools never."""
    excluded = set(exclude_tools)
    names = {tc.id: tc.name for m in messages for tc in m.tool_calls}
    out: list[int] = []
    for i, m in enumerate(messages):
        if len(out) >= count:
            break
        if m.role == "tool" and names.get(m.tool_call_id or "") not in excluded:
            out.append(i)
    return out


def cleared_results(
    messages: Sequence[Message], count: int, exclude_tools: Iterable[str] = ()
) -> tuple[str, list[str]]:
    """The text of the results a ``clear_tool_uses`` edit hid (:func:`cleared_indices`), and
    the texts the model still reads (everything else)."""
    at = set(cleared_indices(messages, count, exclude_tools))
    hidden = [messages[i].content or "" for i in sorted(at)]
    rest = [_text([m]) for i, m in enumerate(messages) if i not in at]
    return "\n".join(hidden), rest


def declared_items(messages: Sequence[Message], hidden: Iterable[int], keep: Sequence[Any]) -> list[tuple[str, str]]:
    """The items the survival contract (``keep``) puts at stake when ``hidden`` (indices of
    ``messages``) are hidden: (kind, text) each, read by the contract's own rules."""
    if not keep:
        return []
    names = {tc.id: tc.name for m in messages for tc in m.tool_calls}
    turns = [
        (
            i,
            Turn(
                m.role,
                m.content or "",
                calls=" ".join(tc.arguments for tc in m.tool_calls),
                tool=names.get(m.tool_call_id or "") if m.role == "tool" else None,
            ),
        )
        for i, m in enumerate(messages)
        if m.role != "system"
    ]
    return [(d.kind, d.text) for d in contract(keep).items(turns, set(hidden))]


# -- the score --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """One identifier of what was hidden: ``how`` it survived (``visible``: still in what the
    model reads; ``answered``: the model gave it back when asked) or ``lost``."""

    kind: str
    value: str
    how: str

    @property
    def kept(self) -> bool:
        return self.how != "lost"


@dataclass
class Score:
    """Kept and lost identifiers of one provider compaction."""

    probes: list[Probe] = field(default_factory=list)
    #: identifiers found but not probed (over :data:`MAX_PROBES`, or no question has one answer)
    left_out: int = 0
    #: the survival contract's declared items at stake, each kept or lost the same way
    declared: list[Probe] = field(default_factory=list)

    @property
    def kept(self) -> list[str]:
        return [p.value for p in self.probes if p.kept]

    @property
    def lost(self) -> list[str]:
        return [p.value for p in self.probes if not p.kept]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kept": len(self.kept),
            "lost": len(self.lost),
            "items": [{"kind": p.kind, "value": p.value, "how": p.how} for p in self.probes],
        }
        if self.left_out:
            out["left_out"] = self.left_out
        if self.declared:
            out["survival"] = {
                "kept": sum(1 for p in self.declared if p.kept),
                "lost": sum(1 for p in self.declared if not p.kept),
                "items": [{"kind": p.kind, "text": p.value, "how": p.how} for p in self.declared],
            }
        return out


def score_view(hidden: str, seen: Iterable[str], declared: Sequence[tuple[str, str]] = ()) -> Score:
    """Each identifier of ``hidden`` (and each ``declared`` item) kept if it still stands
    whole in what the model reads."""
    view = Seen(seen)
    found = items_of(hidden)
    return Score(
        [Probe(k, v, "visible" if view.shows(v) else "lost") for k, v in found],
        declared=[Probe(k, v, "visible" if view.shows(v) else "lost") for k, v in declared],
    )


def score_probed(
    hidden: str,
    seen: Iterable[str],
    ask: Callable[[str], str],
    limit: int = MAX_PROBES,
    declared: Sequence[tuple[str, str]] = (),
) -> Score:
    """:func:`score_view`, then each identifier (and ``declared`` item) not in view asked
    about (``ask(question) -> answer``, one model call each): kept if the answer holds it
    whole. For an opaque compaction item this is the only way to tell; against a simulator it
    measures the simulator's documented behaviour."""
    view = Seen(seen)
    asked = 0
    left_out = 0

    def judge(kind: str, value: str) -> Probe | None:
        nonlocal asked, left_out
        if view.shows(value):
            return Probe(kind, value, "visible")
        question = probe_question(value, hidden)
        if question is None or asked >= limit:
            left_out += 1
            return None
        asked += 1
        return Probe(kind, value, "answered" if appears(value, ask(question)) else "lost")

    probes = [p for k, v in items_of(hidden) if (p := judge(k, v)) is not None]
    kept = [p for k, v in declared if (p := judge(k, v)) is not None]
    return Score(probes, left_out, kept)


#: the probe's form, read back by :func:`read_answer`
_PROBE = re.compile(r"^Earlier in this conversation, what came right after «(.+)»\? Reply with that alone\.$", re.S)


def probe_question(value: str, hidden: str) -> str | None:
    """A question whose answer is ``value`` without naming it: what followed the text right
    before its first appearance in ``hidden`` (up to 60 characters of the same line).
    ``None`` when nothing stands before it on its line, or when that text stands before
    something else too (the question would have two answers): such an identifier is not
    probed, and counted as left out."""
    at = hidden.find(value)
    if at < 0:
        return None
    line_start = hidden.rfind("\n", 0, at) + 1
    before = hidden[max(line_start, at - 60) : at]
    if not before.strip() or hidden.count(before) > 1:
        return None
    return f"Earlier in this conversation, what came right after «{before}»? Reply with that alone."


def read_answer(question: str, context: str) -> str | None:
    """What a reader that misses nothing answers to a :func:`probe_question` over ``context``
    (the rest of the line after the quoted text), or ``None`` when ``question`` is no probe.
    The simulators' scripted model answers probes with it: an upper bound -- a fact it cannot
    find is one the compaction took from view."""
    m = _PROBE.match(question.strip())
    if m is None:
        return None
    before = m.group(1)
    at = context.find(before)
    if at < 0:
        return "I cannot tell from what I can see."
    rest = context[at + len(before) :]
    return rest.split("\n", 1)[0][:200] or "I cannot tell from what I can see."


def visible_text(body: Mapping[str, Any]) -> str:
    """Every string of a request body (Anthropic's or the Responses API's), joined: what a
    simulated model reads. Encrypted fields are opaque and left out."""
    parts: list[str] = []

    def walk(v: Any, key: str = "") -> None:
        if isinstance(v, str):
            if key not in ("encrypted_content", "signature", "id", "call_id", "tool_use_id", "type", "role"):
                parts.append(v)
        elif isinstance(v, Mapping):
            for k, x in v.items():
                walk(x, str(k))
        elif isinstance(v, list):
            for x in v:
                walk(x, key)

    walk(body)
    return "\n".join(parts)


def item_bytes(item: Mapping[str, Any]) -> str:
    """An opaque item as canonical JSON: what "sent back byte-identical" compares."""
    return json.dumps(item, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
