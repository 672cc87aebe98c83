"""Reasoning pass-back: what happens to a model's thinking on the *next* request.

Why this module exists: thinking is state. A reasoning model returns its chain of thought
next to its answer (``Message.reasoning_content``, or a ``<think>...</think>`` block at the
start of ``content``), and every family has its own rule for whether that thinking must,
may or must not be sent back:

* **DeepSeek** (thinking mode): when tools are in use, an assistant turn that made tool
  calls must carry its ``reasoning_content`` on every later request. Leave it out and the
  API answers HTTP 400 ("The reasoning_content in the thinking mode must be passed back
  to the API"). Reasoning of turns without tool calls is ignored if sent.
* **Anthropic** (Claude extended thinking): thinking blocks must go back *unmodified*,
  signature included, inside a tool loop; an edited or missing block is rejected.
* **Qwen3 / QwQ**: the chat template itself drops ``<think>...</think>`` from assistant
  turns before the last real user message and keeps it for the turn in progress (the
  tool loop after that user message). gpt-oss (harmony format) follows the same rule:
  earlier turns' analysis channel is dropped, the current turn's chain of thought is kept.
* **OpenAI-style models that do not take reasoning back** (GPT-4o, o-series over chat
  completions, small local models): the field is at best ignored and at worst rejected or
  rendered as text, so it is stripped.

And the choice has to be *stable across a session*: a provider's prompt cache reuses the
longest byte-identical prefix, so if turn 3 is rendered with its reasoning on one call and
without it on the next, the cache breaks from turn 3 on. Each mode below therefore renders
an earlier message the same way on every call -- except ``qwen3``, which rewrites history
at exactly one known point (a new user message), because the model's own template does
the same thing and the cached prefix is lost there anyway. :func:`install` records the
mode in the session's metadata (the renderer, ``core/render.py``, reads it from there) and
refuses to switch it later.

The modes (:data:`ReasoningMode`):

``strip``
    Remove ``reasoning_content`` from every assistant message, and any ``<think>...</think>``
    block at the start of its content.
``keep``
    Send every assistant message's reasoning back exactly as recorded.
``must_send_back``
    Like ``keep``, but check before sending: with tools in use, an assistant message with
    tool calls in the current tool loop (after the last user message) that has no
    ``reasoning_content`` raises :class:`ReasoningMissing` instead of costing an HTTP 400.
``qwen3``
    Drop reasoning (field and leading ``<think>`` block) from assistant turns before the
    last real user message; keep the current turn's reasoning exactly as recorded.

:func:`policy_for_model` picks a default from the model name; it is only a default --
pass any :class:`ReasoningPolicy` to :func:`install` to override it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal, get_args

from ctxwright.core.messages import Message, canonical_json
from ctxwright.errors import ReasoningMissing, ReasoningPolicyConflict

if TYPE_CHECKING:
    from ctxwright.core.session import Session

ReasoningMode = Literal["strip", "keep", "must_send_back", "qwen3"]

#: Every valid mode, in declaration order.
REASONING_MODES: tuple[str, ...] = get_args(ReasoningMode)

#: Key under which :func:`install` records the mode in ``Session.meta`` (and the store),
#: so a resumed session renders its history the way it was rendered before.
META_KEY = "reasoning_mode"


# -- <think> blocks in content ---------------------------------------------------------
_OPEN = "<think>"
_CLOSE = "</think>"


def split_think(content: str | None, *, allow_missing_open: bool = False) -> tuple[str | None, str | None]:
    """Split a leading ``<think>...</think>`` block off ``content``.

    Returns ``(thinking, rest)``; ``thinking`` is ``None`` when there is no such block and
    ``rest`` is then ``content`` unchanged. The block must start the content (leading
    whitespace allowed) and ends at the first ``</think>``; whitespace after it is dropped
    from ``rest``. With ``allow_missing_open``, content that has a ``</think>`` but no
    opening tag also counts: templates that put ``<think>`` into the generation prompt
    (QwQ, DeepSeek-R1) make the model's output start *inside* the block, and Qwen3's
    template accepts that form too. Without it, a model merely mentioning ``</think>``
    in an answer is left alone.
    """
    if not content:
        return None, content
    stripped = content.lstrip()
    if stripped.startswith(_OPEN):
        body = stripped[len(_OPEN) :]
    elif allow_missing_open and _OPEN not in content:
        body = content
    else:
        return None, content
    if _CLOSE not in body:  # unterminated (truncated) thinking: not a block we can cut cleanly
        return None, content
    thinking, rest = body.split(_CLOSE, 1)
    return thinking.strip(), rest.lstrip()


def _without_reasoning(msg: Message, *, allow_missing_open: bool) -> Message:
    """``msg`` with its reasoning field cleared and any leading think block cut. A provider's
    ``compaction`` block or item kept beside the reasoning stays: it is not reasoning but the
    context it replaced (``compaction/provider.py``), and the server needs it back."""
    thinking, rest = split_think(msg.content, allow_missing_open=allow_missing_open)
    if msg.reasoning_content is None and msg.reasoning_blocks is None and thinking is None:
        return msg  # nothing to remove: reuse the (immutable) object
    return replace(msg, reasoning_content=None, reasoning_blocks=_compactions(msg.reasoning_blocks), content=rest)


def _compactions(blocks: str | None) -> str | None:
    """The ``compaction`` blocks of ``reasoning_blocks`` (kept JSON), or ``None`` without any."""
    if blocks is None or '"compaction"' not in blocks:
        return None
    kept = [b for b in json.loads(blocks) if isinstance(b, dict) and b.get("type") == "compaction"]
    return canonical_json(kept) if kept else None


def _is_real_user(msg: Message) -> bool:
    """A user message typed by a person, not a tool result dressed as one.

    ctxwright sends tool results as ``tool`` messages, so normally every ``user`` message is
    real. The one exception Qwen3's template knows of is kept for fidelity: a user message
    that is entirely ``<tool_response>...</tool_response>`` is a tool result.
    """
    if msg.role != "user":
        return False
    text = (msg.content or "").strip()
    return not (text.startswith("<tool_response>") and text.endswith("</tool_response>"))


def last_user_index(messages: list[Message]) -> int:
    """Index of the last real user message, or ``-1`` if there is none.

    Everything after it is the current turn (the tool loop in progress).
    """
    for i in range(len(messages) - 1, -1, -1):
        if _is_real_user(messages[i]):
            return i
    return -1


# -- the policy ------------------------------------------------------------------------
@dataclass(frozen=True)
class ReasoningPolicy:
    """How assistant reasoning is rendered back to the model. See the module docstring."""

    mode: ReasoningMode = "strip"

    def __post_init__(self) -> None:
        if self.mode not in REASONING_MODES:
            raise ValueError(f"unknown reasoning mode {self.mode!r}: use one of {', '.join(REASONING_MODES)}")

    def apply(self, messages: list[Message], *, tools_in_use: bool = True, index_offset: int = 0) -> list[Message]:
        """Return the messages as they should be sent; never mutates the input.

        Changed messages are new objects (``dataclasses.replace``); unchanged ones are the
        same frozen objects. ``tools_in_use`` matters only to ``must_send_back`` (DeepSeek
        checks reasoning only when the request carries tools). ``index_offset`` is added
        to the index reported by :class:`ReasoningMissing`, so it can name the position in
        the full request (1 when a system message precedes ``messages``).
        """
        if self.mode == "keep":
            return list(messages)
        if self.mode == "strip":
            return [_without_reasoning(m, allow_missing_open=False) if m.role == "assistant" else m for m in messages]
        if self.mode == "must_send_back":
            if tools_in_use:
                self._check_current_loop(messages, index_offset)
            return list(messages)
        # qwen3: earlier turns lose their reasoning, the current turn keeps it as recorded.
        cut = last_user_index(messages)
        return [
            _without_reasoning(m, allow_missing_open=True) if m.role == "assistant" and i < cut else m
            for i, m in enumerate(messages)
        ]

    @property
    def per_message(self) -> bool:
        """Whether each message is rendered on its own, whatever its place (``keep``,
        ``strip``): then :meth:`apply_one` gives what :meth:`apply` gives for it, and a renderer
        can render only the messages new since the last request (``core/render.py``)."""
        return self.mode in ("keep", "strip")

    def apply_one(self, message: Message) -> Message:
        """``apply([message])[0]`` for a :attr:`per_message` mode."""
        if self.mode == "strip" and message.role == "assistant":
            return _without_reasoning(message, allow_missing_open=False)
        return message

    def _check_current_loop(self, messages: list[Message], index_offset: int) -> None:
        """Raise :class:`ReasoningMissing` for any assistant tool-call turn that has no
        ``reasoning_content``.

        DeepSeek's thinking-mode guide: reasoning of turns with tool calls "must be passed
        back to the API in all subsequent requests" -- earlier user turns included, so the
        whole history is checked, not only the current tool loop.

        Only the recorded field counts: DeepSeek checks the field, so a ``<think>`` block
        left inside ``content`` would still be rejected. An empty string counts as present
        (it is sent as ``"reasoning_content": ""``).
        """
        for i in range(len(messages)):
            m = messages[i]
            if m.role == "assistant" and m.tool_calls and m.reasoning_content is None:
                where = i + index_offset
                names = ", ".join(tc.name for tc in m.tool_calls)
                raise ReasoningMissing(
                    f"assistant message at index {where} (tool calls: {names}) has no reasoning_content, "
                    "and tools are in use: DeepSeek (thinking "
                    "mode) will reject this request with HTTP 400. Record the reasoning_content the "
                    "model returned with that message (Session.add_assistant(completion.message) keeps "
                    "it; check that the backend reads 'reasoning_content' or 'reasoning' from the "
                    "response), or use a non-thinking model with mode 'strip'.",
                    index=where,
                )


# -- defaults per model family ---------------------------------------------------------
#: ``(regex on the lower-cased model name, mode, why)``; the first match wins. A default
#: table only: callers with other knowledge pass their own policy (or table).
MODEL_FAMILIES: tuple[tuple[str, ReasoningMode, str], ...] = (
    (
        r"deepseek-r1-distill|r1-distill",
        "strip",
        "R1 distills run locally; their template cuts everything before </think> from every assistant turn",
    ),
    (
        r"deepseek.*(reasoner|r1|think|v4)",
        "must_send_back",
        "DeepSeek thinking mode (v4 thinks by default): tool-call turns without reasoning_content get HTTP 400",
    ),
    (r"deepseek", "keep", "DeepSeek non-thinking (deepseek-chat, v3): harmless to send back whatever was recorded"),
    (r"qwen3|qwq", "qwen3", "Qwen3/QwQ template drops reasoning before the last user message"),
    (r"gpt-oss", "qwen3", "harmony format drops earlier turns' analysis channel, keeps the current turn's"),
    (r"claude", "keep", "Anthropic thinking blocks must go back unmodified inside a tool loop"),
    (r"gpt|(^|[^a-z0-9])o[134]([^a-z0-9]|$)", "strip", "OpenAI chat completions do not take reasoning back"),
    (r"smollm", "strip", "no reasoning channel"),
)


def policy_for_model(
    model_name: str | None, table: tuple[tuple[str, ReasoningMode, str], ...] = MODEL_FAMILIES
) -> ReasoningPolicy:
    """The default policy for a model, by name pattern; ``strip`` for unknown names.

    This is a default, not a rule: a model served under an unexpected name, or a provider
    with different requirements, gets the policy you pass to :func:`install` instead (or
    pass your own ``table``).
    """
    name = (model_name or "").lower()
    for pattern, mode, _why in table:
        if re.search(pattern, name):
            return ReasoningPolicy(mode)
    return ReasoningPolicy("strip")


# -- wiring into a session ---------------------------------------------------------------
def install(session: Session, policy: ReasoningPolicy | None = None) -> ReasoningPolicy:
    """Make ``session`` render reasoning by ``policy``; returns the policy in force.

    With no ``policy``: the mode recorded in ``session.meta`` (a resumed session), else
    :func:`policy_for_model` on ``session.model``. The mode is recorded in ``session.meta``
    (and the store, if any) -- the renderer (``core/render.py``) reads it from there, so a
    resumed session and an offline reader of its export render reasoning exactly as the live
    session did. Asking for a different mode later raises :class:`ReasoningPolicyConflict`:
    switching would re-render every earlier assistant turn and break the prompt cache from
    the first one on. Installing the same mode again is a no-op.
    """
    recorded = session.meta.get(META_KEY)
    if policy is None:
        policy = ReasoningPolicy(recorded) if recorded is not None else policy_for_model(session.model)
    if recorded is not None and recorded != policy.mode:
        raise ReasoningPolicyConflict(
            f"session {session.id} renders reasoning in mode {recorded!r}; switching to {policy.mode!r} "
            "would change how every earlier assistant turn is rendered and break the provider's prompt "
            "cache from the first of them on. Keep the mode, or start a new session with the new one."
        )
    if recorded is None:
        session.meta[META_KEY] = policy.mode
        if session.store is not None:
            session.store.update_meta(session.id, session.meta)
    return policy
