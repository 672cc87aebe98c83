"""Which prompt tokens belong to which message, status-bar line and system-prompt section.

Why through the rendered text: the model reads one token sequence, made by the chat template
from the messages (``backends/embedded.py: render_request``, the renderer the live calls
used). So each message's text is located in that rendered prompt, in order, and each token
is assigned by where its bytes start (the tokenizer's pieces, concatenated, are the prompt's
bytes: checked, not assumed).

The message spans partition the prompt, so their attention shares add up to 1: message
``i`` runs from the end of message ``i-1``'s text to the end of its own, so the template's
framing that opens a turn (``<|im_end|>`` of the last turn, ``<|im_start|>user``) counts for
the message it opens. What follows the last message -- the generation prompt
(``<|im_start|>assistant``) -- and the answer's own earlier tokens form the ``answer`` span.
Inside the system message, each Markdown section (a ``#`` heading line to the next; the tool
listing the embedded renderer appends is one) is a finer span; inside a status-bar message,
each ``key: value`` line is one.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ctxwright.attention.model import SpanKind
from ctxwright.backends.embedded import RESULTS_TRAILER, shown_text
from ctxwright.core.markdown import headings
from ctxwright.core.messages import Message
from ctxwright.core.request import ChatRequest
from ctxwright.errors import AttentionError
from ctxwright.status.bar import STATUS_CLOSE, STATUS_OPEN


@dataclass(frozen=True)
class TextSpan:
    """A labelled run of the prompt: characters ``[char_start, char_end)`` and tokens ``[start, end)``."""

    label: str
    kind: SpanKind
    message_index: int
    role: str
    char_start: int
    char_end: int
    start: int = 0
    end: int = 0


def answer_text(answer: str) -> str:
    """The answer as the embedded model writes it: the constrained ``{"answer": ...}`` or
    ``{"tool_calls": ...}`` JSON. Text that already is such JSON is kept byte for byte."""
    try:
        data = json.loads(answer, strict=False)
    except json.JSONDecodeError:
        data = None
    if isinstance(data, dict) and ("answer" in data or "tool_calls" in data):
        return answer
    return shown_text(Message(role="assistant", content=answer), {})


def _label(i: int, m: Message, names: dict[str, str]) -> str:
    if m.role == "assistant" and m.tool_calls:
        return f"#{i} assistant → {', '.join(tc.name for tc in m.tool_calls)}"
    if m.role == "tool":
        return f"#{i} tool {names.get(m.tool_call_id or '', 'tool')}"
    if m.role == "user" and (m.content or "").startswith(STATUS_OPEN):
        return f"#{i} status bar"
    return f"#{i} {m.role}"


def message_spans(prompt: str, request: ChatRequest) -> list[TextSpan]:
    """One span per message, then the answer span, partitioning ``prompt``; then the finer
    spans (system sections, status lines). Token ranges are filled by :func:`assign_tokens`."""
    names: dict[str, str] = {}
    ends: list[int] = []
    out: list[TextSpan] = []
    fine: list[TextSpan] = []
    cursor = 0
    msgs = request.messages
    for i, m in enumerate(msgs):
        text = shown_text(m, names, request.tools)
        at = prompt.find(text, cursor)
        if at < 0:
            raise AttentionError(
                f"message {i} ({m.role}) is not in the rendered prompt; the model's chat template changes "
                "message text, so its tokens cannot be mapped"
            )
        end = at + len(text)
        last_of_batch = m.role == "tool" and (i + 1 == len(msgs) or msgs[i + 1].role != "tool")
        trailer = "\n" + RESULTS_TRAILER
        if last_of_batch and prompt.startswith(trailer, end):
            end += len(trailer)
        start = ends[-1] if ends else 0
        label = _label(i, m, names)
        out.append(TextSpan(label, "message", i, m.role, start, end))
        if m.role == "system":
            fine.extend(_sections(text, at, i))
        elif m.role == "user" and (m.content or "").startswith(STATUS_OPEN):
            fine.extend(_status_lines(text, at, i))
        for tc in m.tool_calls:
            names[tc.id] = tc.name
        ends.append(end)
        cursor = end
    out.append(TextSpan("answer (turn opening + earlier answer tokens)", "answer", len(msgs), "assistant", cursor, -1))
    return out + fine


def _sections(text: str, offset: int, index: int) -> list[TextSpan]:
    """The system prompt's Markdown sections, each from its heading to the next
    (``core/markdown.py``: the headings the gate and the ablation cut at too)."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    heads = headings(lines)
    out: list[TextSpan] = []
    if not heads:
        return out
    first = starts[heads[0].index]
    if first > 0 and text[:first].strip():
        out.append(TextSpan("system § (before the first heading)", "section", index, "system", offset, offset + first))
    for k, h in enumerate(heads):
        stop = starts[heads[k + 1].index] if k + 1 < len(heads) else len(text)
        title = h.title or "#" * h.level
        out.append(TextSpan(f"system § {title}", "section", index, "system", offset + starts[h.index], offset + stop))
    return out


def _status_lines(text: str, offset: int, index: int) -> list[TextSpan]:
    out: list[TextSpan] = []
    pos = 0
    for line in text.splitlines(keepends=True):
        body = line.strip()
        if body and body not in (STATUS_OPEN, STATUS_CLOSE):
            key = body.split(":", 1)[0].strip()
            out.append(
                TextSpan(f"status · {key}", "status_line", index, "user", offset + pos, offset + pos + len(line))
            )
        pos += len(line)
    return out


def token_starts(prompt: str, tokens: Sequence[int], piece: Callable[[int], bytes]) -> list[int]:
    """The character offset at which each token starts in ``prompt``.

    The pieces must concatenate to the prompt's UTF-8 bytes; a token that starts inside a
    multi-byte character is placed at that character.
    """
    raw = prompt.encode("utf-8")
    byte_starts: list[int] = []
    at = 0
    for t in tokens:
        byte_starts.append(at)
        at += len(piece(t))
    if at != len(raw):
        raise AttentionError(
            f"the tokenizer's pieces make {at:,} bytes and the prompt has {len(raw):,}: this model's "
            "tokenizer changes text, so its tokens cannot be mapped to messages"
        )
    # character offset of every byte offset (a continuation byte maps to its character)
    char_at = [0] * (len(raw) + 1)
    c = 0
    for b in range(len(raw)):
        if raw[b] & 0xC0 != 0x80 and b > 0:
            c += 1
        char_at[b] = c
    char_at[len(raw)] = len(prompt)
    return [char_at[b] if b < len(raw) else len(prompt) for b in byte_starts]


def assign_tokens(spans: Sequence[TextSpan], starts: Sequence[int], total: int) -> list[TextSpan]:
    """Fill each span's token range: a token belongs to the span where it starts. The answer
    span (``char_end`` -1) runs to ``total``, the last key position any answer row sees."""
    out: list[TextSpan] = []
    for s in spans:
        a = bisect.bisect_left(starts, s.char_start)
        b = total if s.char_end < 0 else bisect.bisect_left(starts, s.char_end)
        out.append(TextSpan(s.label, s.kind, s.message_index, s.role, s.char_start, s.char_end, a, b))
    return out
