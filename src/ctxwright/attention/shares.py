"""From a request and its answer to an :class:`~ctxwright.attention.model.AttentionMap`.

The one pipeline every caller goes through -- ``ctxwright attention`` on a stored session or
on a request file, and ``benchmarks/attention.py`` -- so a number in a benchmark table and
the same number in the CLI's table are computed by the same lines:

1. render the request as the embedded backend renders it, tokenize it, and the answer
   (``spans.answer_text``: the JSON the model writes);
2. map tokens to spans (``spans.py``);
3. read the attention of the answer rows (``capture.py``);
4. sum each layer's non-sink shares over each span's tokens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxwright.attention.capture import AttentionReader, Capture
from ctxwright.attention.model import AttentionMap, Span
from ctxwright.attention.spans import TextSpan, answer_text, assign_tokens, message_spans, token_starts
from ctxwright.core.request import ChatRequest


def attention_map(
    reader: AttentionReader,
    request: ChatRequest,
    answer: str,
    *,
    rows: Sequence[int] | None = None,
    strip_layers: Sequence[int] | None = None,
    meta: Mapping[str, Any] | None = None,
) -> AttentionMap:
    """Explain ``answer`` (plain text, or the model's raw JSON) given ``request``.

    ``rows`` picks the answer tokens whose attention is averaged (all by default: the
    benchmark picks the one token that carries a count); ``strip_layers`` the layers the
    per-token strip averages (all by default).
    """
    prompt = reader.render(request)
    p_tokens = reader.tokenize(prompt)
    shown = answer_text(answer)
    a_tokens = reader.tokenize(shown)
    starts = token_starts(prompt, p_tokens, reader.piece)
    cap = reader.read(p_tokens, a_tokens, rows)
    spans = assign_tokens(message_spans(prompt, request), starts, cap.n_keys)
    layers = tuple(range(cap.n_layer))
    strip = tuple(strip_layers) if strip_layers is not None else layers
    return build_map(
        reader.model,
        cap,
        spans,
        token_text=[reader.piece(t).decode("utf-8", "replace") for t in p_tokens],
        answer_tokens=[reader.piece(t).decode("utf-8", "replace") for t in a_tokens],
        top_tokens=[reader.piece(t).decode("utf-8", "replace") for t in cap.top_tokens],
        strip_layers=strip,
        meta={**(meta or {}), "answer": shown, "rows": list(cap.rows)},
    )


def build_map(
    model: str,
    cap: Capture,
    spans: Sequence[TextSpan],
    *,
    token_text: Sequence[str],
    answer_tokens: Sequence[str],
    strip_layers: Sequence[int],
    top_tokens: Sequence[str] = (),
    meta: Mapping[str, Any],
) -> AttentionMap:
    """Sum each layer's reduced attention over each span (the pure step, tested on its own)."""
    out: list[Span] = []
    for s in spans:
        share = tuple(float(v[s.start : s.end].sum()) for v in cap.nonsink)
        holds_sink = s.start <= 0 < s.end
        sink = tuple(cap.sink) if holds_sink else (0.0,) * cap.n_layer
        out.append(Span(s.label, s.kind, s.message_index, s.role, s.start, s.end, share, sink))
    P = cap.prompt_tokens
    strip = [cap.nonsink[layer][:P] for layer in strip_layers] or [cap.nonsink[0][:P] * 0]
    per_token = sum(strip[1:], strip[0]) / len(strip)
    return AttentionMap(
        model=model,
        layers=tuple(range(cap.n_layer)),
        answer_tokens=tuple(answer_tokens),
        prompt_tokens=P,
        spans=tuple(out),
        sink_share_by_layer=tuple(cap.sink),
        token_text=tuple(token_text),
        token_share=tuple(float(x) for x in per_token),
        strip_layers=tuple(strip_layers),
        answer_logprobs=tuple(cap.logprobs),
        answer_top_tokens=tuple(top_tokens),
        meta=dict(meta),
    )
