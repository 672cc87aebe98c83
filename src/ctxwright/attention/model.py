"""The attention map: what share of the model's attention each part of a request got.

One structure, read by every view (the CLI's table, ``--json``, the HTML page, the PNG and
the report), so the numbers a person reads in a browser are the numbers the JSON holds.

Why the sink is kept apart: in a causal transformer the first token collects a large share
of every row's attention (an *attention sink*, 40% and more on SmolLM2-135M) whatever the
question, because softmax must put its mass somewhere. Counted as content it would make the
first message look like the most read part of every request. So each row's weight on token 0
is reported as ``sink_share`` and the rest is renormalised to 1: the ``share`` of a span is
its part of the attention the model spent on content.

Why per layer: the lookup of a fact happens in middle layers, not only the last (on
SmolLM2-135M, layers 3–9 for a handbook question and 15–24 for reading a count off the
status bar), so an average over all layers can hide it; every share is kept per layer and a
view chooses the range (``layers``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from ctxwright.errors import AttentionError

#: ``message``: one message of the request (the message spans partition the prompt and
#: their shares sum to 1 per layer); ``answer``: the answer's own earlier tokens, which its
#: later tokens attend to (also part of the partition); ``section``: a Markdown section of the
#: system prompt; ``status_line``: one ``key: value`` line of the status bar. The last two
#: lie inside a message span.
SpanKind = Literal["message", "answer", "section", "status_line"]
#: the kinds of span that partition the prompt
PARTITION = frozenset({"message", "answer"})


@dataclass(frozen=True)
class Span:
    """A run of prompt tokens ``[start, end)`` and the attention it received, per layer."""

    label: str
    kind: SpanKind
    #: index of the message in the request (the answer: ``len(messages)``)
    message_index: int
    role: str
    start: int
    end: int
    #: the share of non-sink attention on these tokens, averaged over the answer tokens, per layer
    share_by_layer: tuple[float, ...]
    #: the share of raw attention on the sink token, if the span holds it (else zeros)
    sink_share_by_layer: tuple[float, ...]

    @property
    def tokens(self) -> int:
        return self.end - self.start

    @property
    def in_partition(self) -> bool:
        """A message or the answer: one of the spans that cover the prompt once, summing to 1."""
        kind: str = self.kind
        return kind in PARTITION

    def share(self, layers: Sequence[int] | None = None, *, all_layers: Sequence[int]) -> float:
        """Mean share over ``layers`` (indices into :attr:`AttentionMap.layers`' values)."""
        return _mean_over(self.share_by_layer, layers, all_layers)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["tokens"] = self.tokens
        d["share_by_layer"] = [round(x, 6) for x in self.share_by_layer]
        d["sink_share_by_layer"] = [round(x, 6) for x in self.sink_share_by_layer]
        return d


@dataclass(frozen=True)
class AttentionMap:
    """Attention of an answer's tokens over the request that produced it, by layer and span."""

    model: str
    #: the layer numbers the shares are listed for (``share_by_layer[i]`` is layer ``layers[i]``)
    layers: tuple[int, ...]
    #: the answer's tokens as text, in order (each one's row is averaged into the shares)
    answer_tokens: tuple[str, ...]
    prompt_tokens: int
    spans: tuple[Span, ...]
    #: the share of raw attention on the first token, per layer (averaged over answer rows)
    sink_share_by_layer: tuple[float, ...]
    #: each prompt token's text, and its non-sink share averaged over the answer rows and the
    #: layers in :attr:`strip_layers` (the per-token strip of the views)
    token_text: tuple[str, ...] = ()
    token_share: tuple[float, ...] = ()
    strip_layers: tuple[int, ...] = ()
    #: log-probability of each answer token given everything before it (teacher forced,
    #: without the grammar the live generation was constrained by)
    answer_logprobs: tuple[float, ...] = ()
    #: the token the model found most likely at each answer row (what greedy decoding would
    #: have written there, given the answer so far)
    answer_top_tokens: tuple[str, ...] = ()
    #: how the request was read (source, call index, renderer): shown in the views' headings
    meta: dict[str, Any] = field(default_factory=dict)

    def messages(self) -> list[Span]:
        """The spans that partition the prompt (messages and the answer so far)."""
        return [s for s in self.spans if s.in_partition]

    def mean_share(self, span: Span, layers: Sequence[int] | None = None) -> float:
        return span.share(layers, all_layers=self.layers)

    def mean_sink(self, layers: Sequence[int] | None = None) -> float:
        return _mean_over(self.sink_share_by_layer, layers, self.layers)

    def restrict(self, layers: Sequence[int]) -> AttentionMap:
        """The same map listing only ``layers`` (``--layers``): every per-layer list follows."""
        pos = [self.layers.index(n) for n in layers if n in self.layers]
        if not pos:
            raise AttentionError(f"none of the layers {list(layers)} is in this map (it has {list(self.layers)})")

        def pick(values: Sequence[float]) -> tuple[float, ...]:
            return tuple(values[i] for i in pos)

        return replace(
            self,
            layers=tuple(self.layers[i] for i in pos),
            sink_share_by_layer=pick(self.sink_share_by_layer),
            spans=tuple(
                replace(s, share_by_layer=pick(s.share_by_layer), sink_share_by_layer=pick(s.sink_share_by_layer))
                for s in self.spans
            ),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "layers": list(self.layers),
            "answer_tokens": list(self.answer_tokens),
            "prompt_tokens": self.prompt_tokens,
            "sink_share_by_layer": [round(x, 6) for x in self.sink_share_by_layer],
            "spans": [s.to_json() for s in self.spans],
            "tokens": {
                "text": list(self.token_text),
                "share": [round(x, 6) for x in self.token_share],
                "layers": list(self.strip_layers),
            },
            "answer_logprobs": [round(x, 6) for x in self.answer_logprobs],
            "answer_top_tokens": list(self.answer_top_tokens),
            "meta": self.meta,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> AttentionMap:
        """Read back what :meth:`to_json` wrote (the report reads stored maps this way)."""
        try:
            toks = d.get("tokens") or {}
            return cls(
                model=str(d["model"]),
                layers=tuple(int(x) for x in d["layers"]),
                answer_tokens=tuple(str(x) for x in d["answer_tokens"]),
                prompt_tokens=int(d["prompt_tokens"]),
                sink_share_by_layer=tuple(float(x) for x in d["sink_share_by_layer"]),
                spans=tuple(
                    Span(
                        label=str(s["label"]),
                        kind=s["kind"],
                        message_index=int(s["message_index"]),
                        role=str(s["role"]),
                        start=int(s["start"]),
                        end=int(s["end"]),
                        share_by_layer=tuple(float(x) for x in s["share_by_layer"]),
                        sink_share_by_layer=tuple(float(x) for x in s["sink_share_by_layer"]),
                    )
                    for s in d["spans"]
                ),
                token_text=tuple(str(x) for x in toks.get("text", ())),
                token_share=tuple(float(x) for x in toks.get("share", ())),
                strip_layers=tuple(int(x) for x in toks.get("layers", ())),
                answer_logprobs=tuple(float(x) for x in d.get("answer_logprobs", ())),
                answer_top_tokens=tuple(str(x) for x in d.get("answer_top_tokens", ())),
                meta=dict(d.get("meta") or {}),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise AttentionError(
                f"not an attention map ({type(exc).__name__}: {exc}); write one with `ctxwright attention --json`"
            ) from exc


def _mean_over(values: Sequence[float], layers: Sequence[int] | None, all_layers: Sequence[int]) -> float:
    if layers is None:
        picked = list(values)
    else:
        pos = {n: i for i, n in enumerate(all_layers)}
        picked = [values[pos[n]] for n in layers if n in pos]
    return sum(picked) / len(picked) if picked else 0.0


def parse_layers(text: str, n_layers: int) -> tuple[int, ...]:
    """``"15-24"``, ``"3,5,7-9"`` or ``"all"`` as layer numbers, each checked against the model's."""
    if text.strip().lower() in ("", "all"):
        return tuple(range(n_layers))
    out: list[int] = []
    try:
        for part in text.split(","):
            a, _, b = part.strip().partition("-")
            lo, hi = int(a), int(b) if b else int(a)
            if lo > hi:
                raise ValueError(f"{part.strip()} runs backwards")
            out.extend(range(lo, hi + 1))
    except ValueError as exc:
        raise AttentionError(f"--layers {text!r} is not a layer range ({exc}); write e.g. 15-24 or 3,5,7-9") from exc
    bad = [n for n in out if not 0 <= n < n_layers]
    if bad:
        raise AttentionError(f"--layers {text!r}: the model has layers 0-{n_layers - 1}, not {bad[0]}")
    return tuple(dict.fromkeys(out))
