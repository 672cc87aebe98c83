"""Read llama.cpp's attention weights while the model re-reads a request and its answer.

How: llama.cpp calls a per-tensor *evaluation callback* (``cb_eval`` in the context
parameters, ``ggml_backend_sched_eval_callback`` in ``ggml-backend.h``) for every tensor of
the compute graph; asked first whether it wants a tensor, then given it once computed. With
flash attention off, each layer's softmaxed attention is a tensor named
``kq_soft_max-<layer>``, shaped ``[n_kv, n_tokens, n_head]`` (keys fastest), which this module
reads through a ``ctypes`` mirror of ``struct ggml_tensor`` (``ggml.h``).

Why teacher forcing: the answer to explain is the one the model actually gave. Generating
again (or in another runtime) could give another answer, so the prompt *and* that answer are
fed in one pass, and only the rows that produced the answer are kept: the query at position
``P-1+j`` is the one whose output chose answer token ``j``. The prompt is decoded first with
the callback idle; the answer rows follow as one batch with it on, so the rows read are
``len(answer)`` × ``n_kv`` per head and layer -- megabytes, where whole matrices of a
1,500-token prompt would be gigabytes. Each layer is reduced as it arrives (mean over heads,
sink apart, rest renormalised, mean over the chosen rows), so memory stays bounded by one
layer's rows whatever the prompt.

Why it is pinned: the tensor's name and the struct's layout are llama.cpp internals, not API.
Every tensor read is checked -- its name, type, shape, strides, rows summing to 1 and zeros
past each row's causal limit -- and any change is one :class:`~ctxwright.errors.AttentionError`
naming the installed llama-cpp-python and the version this reader was written against
(:data:`PINNED`), instead of numbers read from the wrong bytes. ``tests/test_attention.py``
guards the same facts on the real model.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ctxwright.core.threads import default_threads
from ctxwright.errors import AttentionError, BackendUnavailable

if TYPE_CHECKING:
    import jinja2
    import numpy.typing as npt

    from ctxwright.core.request import ChatRequest

#: The llama-cpp-python release whose llama.cpp this reader was checked against.
PINNED = "0.3.36"
#: llama.cpp names each layer's softmaxed ``K·Q`` this, followed by ``-<layer>``.
TENSOR_PREFIX = "kq_soft_max-"
#: ``GGML_TYPE_F32`` in ``ggml.h``.
_GGML_F32 = 0
#: at most this many answer tokens are explained (one batch; bounds the rows read per layer)
MAX_ANSWER_TOKENS = 512
#: tolerance of the checks on each row (llama.cpp computes softmax in float32)
ROW_SUM_TOL = 1e-3
_CAUSAL_TOL = 1e-6


class _GgmlTensor(ctypes.Structure):
    """``struct ggml_tensor`` of ``ggml.h`` (GGML_MAX_DIMS 4, GGML_MAX_OP_PARAMS 64,
    GGML_MAX_SRC 10, GGML_MAX_NAME 64), as shipped in llama-cpp-python :data:`PINNED`."""

    _fields_ = (
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * 4),
        ("nb", ctypes.c_size_t * 4),
        ("op", ctypes.c_int),
        ("op_params", ctypes.c_int32 * 16),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * 10),
        ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("name", ctypes.c_char * 64),
        ("extra", ctypes.c_void_p),
        ("padding", ctypes.c_char * 8),
    )


@dataclass
class Capture:
    """What one teacher-forced pass read, reduced per layer.

    ``nonsink[layer]`` has one value per key position (``0 … n_keys-1``): that key's share of
    the non-sink attention, averaged over heads and over the chosen answer rows (position 0,
    the sink, is 0). ``sink[layer]`` is the raw share on position 0, averaged the same way.
    """

    n_layer: int
    prompt_tokens: int
    answer_tokens: int
    rows: tuple[int, ...]
    sink: list[float] = field(default_factory=list)
    nonsink: list[npt.NDArray[np.float64]] = field(default_factory=list)
    #: log-probability of each answer token given everything before it
    logprobs: list[float] = field(default_factory=list)
    #: the token the model found most likely at each answer row (unconstrained greedy choice)
    top_tokens: list[int] = field(default_factory=list)

    @property
    def n_keys(self) -> int:
        """Keys any kept row can see: the prompt and every answer token but the last."""
        return self.prompt_tokens + self.answer_tokens - 1


def _layout_error(what: str) -> AttentionError:
    import llama_cpp

    installed = getattr(llama_cpp, "__version__", "?")
    return AttentionError(
        f"llama.cpp's attention tensor is not laid out as expected ({what}); ctxwright reads it as in "
        f"llama-cpp-python {PINNED} and {installed} is installed. Install llama-cpp-python=={PINNED}."
    )


class _Pass:
    """One read's state while llama.cpp computes its answer rows: each layer's tensor is
    checked and reduced as it arrives (:meth:`reduce`), so only the reductions are kept."""

    def __init__(self, cap: Capture, n_head: int, base: int) -> None:
        self.cap, self.n_head, self.base = cap, n_head, base
        self.pick = np.asarray(cap.rows)
        self.seen: dict[int, tuple[float, npt.NDArray[np.float64]]] = {}
        self.errors: list[AttentionError] = []

    def reduce(self, t: _GgmlTensor, layer: int) -> None:
        A, n_keys, base = self.cap.answer_tokens, self.cap.n_keys, self.base
        if layer in self.seen:
            raise _layout_error(f"layer {layer} was computed twice in one batch")
        ne, nb = tuple(t.ne), tuple(t.nb)
        if t.type != _GGML_F32:
            raise _layout_error(f"type {t.type}, not F32")
        if ne[1] != A or ne[2] != self.n_head or ne[3] != 1 or ne[0] < n_keys:
            raise _layout_error(f"shape {ne}, expected [>= {n_keys}, {A}, {self.n_head}, 1]")
        if nb[0] != 4 or nb[1] != 4 * ne[0] or nb[2] != nb[1] * ne[1]:
            raise _layout_error(f"strides {nb} are not contiguous float32")
        if not t.data:
            raise _layout_error("no host data")
        buf = (ctypes.c_float * (ne[0] * ne[1] * ne[2])).from_address(t.data)
        heads = np.ctypeslib.as_array(buf).reshape(ne[2], ne[1], ne[0])
        m = heads.mean(axis=0, dtype=np.float64)  # (A rows, n_kv keys)
        sums = m.sum(axis=1)
        if np.abs(sums - 1.0).max() > ROW_SUM_TOL:
            raise _layout_error(f"layer {layer}: rows sum to {sums.min():.4f}-{sums.max():.4f}, not 1")
        for j in range(A):  # causal: row j sees positions 0 … base+j
            if m[j, base + j + 1 :].max(initial=0.0) > _CAUSAL_TOL:
                raise _layout_error(f"layer {layer}: row {j} attends past its own position")
        sink = m[self.pick, 0]
        rest = m[self.pick, 1:n_keys] / np.maximum(1.0 - sink, 1e-12)[:, None]
        vec = np.zeros(n_keys)
        vec[1:] = rest.mean(axis=0)
        self.seen[layer] = (float(sink.mean()), vec)


class AttentionReader:
    """A GGUF model loaded once, read by :meth:`read` on as many requests as needed.

    The weights are loaded by llama-cpp-python's ``Llama`` (which also tokenizes and holds
    the chat template); the reads share a context of their own, sized to the largest request,
    with flash attention off (flash attention never materialises the softmax) and the
    callback installed, kept for the next read (:meth:`read`) and freed by :meth:`close`.
    """

    def __init__(self, model_path: str | Path | None = None, *, n_threads: int | None = None) -> None:
        try:
            import llama_cpp
        except ImportError as exc:
            raise BackendUnavailable(
                "llama-cpp-python is not installed; install the embedded extra (`pip install "
                "'ctxwright[embedded]'`, or run `make demo`)."
            ) from exc
        from ctxwright.backends.embedded import MODEL_FILE, MODEL_NAME, chat_template, find_model_file

        self.model_path = Path(model_path) if model_path else find_model_file()
        if not self.model_path.is_file():
            raise AttentionError(f"--gguf {self.model_path} is not a file; name a GGUF chat model")
        self.model = MODEL_NAME if self.model_path.name == MODEL_FILE else self.model_path.stem
        self._threads = n_threads or default_threads()
        try:
            self.llm = llama_cpp.Llama(
                model_path=str(self.model_path), n_ctx=64, n_batch=64, n_threads=self._threads, verbose=False
            )
        except (ValueError, RuntimeError, OSError) as exc:
            raise AttentionError(f"llama.cpp could not load {self.model_path} ({exc}); name a GGUF chat model") from exc
        self.template: jinja2.Template = chat_template(self.llm.metadata)
        self.n_layer = int(llama_cpp.llama_model_n_layer(self.llm.model))
        self.n_head = int(llama_cpp.llama_model_n_head(self.llm.model))
        self.n_ctx_train = int(llama_cpp.llama_model_n_ctx_train(self.llm.model))
        self.n_vocab = int(self.llm.n_vocab())
        self._ctx: Any = None
        self._n_ctx = 0
        self._n_batch = max(512, MAX_ANSWER_TOKENS)
        #: the tokens the kept context holds (a prompt but its last token)
        self._held: list[int] = []
        self._pass: _Pass | None = None
        #: kept referenced as long as any context may call it
        self._callback = llama_cpp.ggml_backend_sched_eval_callback(self._on_tensor)

    # -- text and tokens ------------------------------------------------------------------
    def render(self, request: ChatRequest) -> str:
        """The prompt text, rendered as the embedded backend rendered it live."""
        from ctxwright.backends.embedded import render_request

        return render_request(self.template, request)

    def tokenize(self, text: str) -> list[int]:
        """As the embedded backend tokenizes a prompt: special tokens parsed, no BOS added."""
        return list(self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def piece(self, token: int) -> bytes:
        """The bytes of one token as it stands in the text (special tokens included)."""
        return bytes(self.llm.detokenize([token], special=True))

    # -- the pass -------------------------------------------------------------------------
    def read(self, prompt: Sequence[int], answer: Sequence[int], rows: Sequence[int] | None = None) -> Capture:
        """Feed ``prompt + answer`` and reduce the attention of the rows that produced the
        answer (``rows``: indices into ``answer``; all of them by default).

        The context is kept between reads, holding the prompt's tokens but its last: a next
        read prefills only what follows the longest common token prefix (as llama.cpp's own
        prompt cache does), which is what makes arms that differ only at the end cheap.
        """
        import llama_cpp

        P, A = len(prompt), len(answer)
        if P < 1 or A < 1:
            raise AttentionError("both the request and the answer must have at least one token")
        if A > MAX_ANSWER_TOKENS:
            raise AttentionError(
                f"the answer is {A:,} tokens; at most {MAX_ANSWER_TOKENS} are explained at once -- pass a shorter --answer"
            )
        if self.n_ctx_train < P + A:
            raise AttentionError(
                f"the request and answer are {P + A:,} tokens, over {self.model}'s {self.n_ctx_train:,}-token window"
            )
        chosen = tuple(range(A)) if rows is None else tuple(dict.fromkeys(rows))
        if not chosen or any(not 0 <= r < A for r in chosen):
            raise AttentionError(f"answer rows {list(rows or [])} are outside the answer's {A} tokens")
        ctx = self._context(P + A)
        mem = llama_cpp.llama_get_memory(ctx)
        keep = 0
        for x, y in zip(self._held, prompt[: P - 1], strict=False):
            if x != y:
                break
            keep += 1
        llama_cpp.llama_memory_seq_rm(mem, 0, keep, -1)  # what differs, and the last read's answer
        self._held = self._held[:keep]
        cap = Capture(self.n_layer, P, A, chosen)
        step = self._n_batch
        for i in range(keep, P - 1, step):  # the prompt but its last token, callback idle
            chunk = list(prompt[i : min(i + step, P - 1)])
            self._decode(ctx, chunk, i, logits=False)
            self._held.extend(chunk)
        self._pass = _Pass(cap, self.n_head, P - 1)
        try:
            # the rows that produced the answer: the prompt's last token, then every answer token but the last
            logits = self._decode(ctx, [prompt[-1], *answer[:-1]], P - 1, logits=True)
            done = self._pass
        finally:
            self._pass = None
            llama_cpp.llama_memory_seq_rm(mem, 0, P - 1, -1)  # keep only the prompt's tokens
        if done.errors:
            raise done.errors[0]
        if sorted(done.seen) != list(range(self.n_layer)):
            missing = sorted(set(range(self.n_layer)) - set(done.seen))
            raise _layout_error(f"no {TENSOR_PREFIX}N tensor for layers {missing[:5]}")
        for layer in range(self.n_layer):
            sink, vec = done.seen[layer]
            cap.sink.append(sink)
            cap.nonsink.append(vec)
        for j, z in enumerate(logits):
            top = z.max()
            cap.logprobs.append(float(z[answer[j]] - top - math.log(float(np.exp(z - top).sum()))))
            cap.top_tokens.append(int(z.argmax()))
        return cap

    def _context(self, tokens: int) -> Any:
        """The kept context, made anew (larger) when ``tokens`` do not fit it."""
        import llama_cpp

        if self._ctx is not None and tokens <= self._n_ctx:
            return self._ctx
        self._free()
        params = llama_cpp.llama_context_default_params()
        self._n_ctx = min(self.n_ctx_train, int(math.ceil(tokens / 1024) * 1024))
        self._n_batch = max(512, MAX_ANSWER_TOKENS)
        params.n_ctx = self._n_ctx
        params.n_batch = params.n_ubatch = self._n_batch
        params.n_threads = params.n_threads_batch = self._threads
        params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        params.cb_eval = self._callback
        params.cb_eval_user_data = None
        ctx = llama_cpp.llama_init_from_model(self.llm.model, params)
        if not ctx:
            raise AttentionError(f"llama.cpp could not create a {self._n_ctx:,}-token context for {self.model}")
        self._ctx, self._held = ctx, []
        return ctx

    def _decode(self, ctx: Any, tokens: list[int], pos: int, *, logits: bool) -> list[npt.NDArray[np.float64]]:
        """Decode ``tokens`` at positions ``pos…``; with ``logits``, return each row's logits."""
        import llama_cpp

        n = len(tokens)
        batch = llama_cpp.llama_batch_init(n, 0, 1)
        try:
            batch.n_tokens = n
            for j, tok in enumerate(tokens):
                batch.token[j] = tok
                batch.pos[j] = pos + j
                batch.n_seq_id[j] = 1
                batch.seq_id[j][0] = 0
                batch.logits[j] = 1 if logits else 0
            rc = llama_cpp.llama_decode(ctx, batch)
            if rc != 0:
                raise AttentionError(f"llama.cpp failed to decode tokens {pos:,}-{pos + n - 1:,} (code {rc})")
            if not logits:
                return []
            return [
                np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, j), shape=(self.n_vocab,)).astype(np.float64)
                for j in range(n)
            ]
        finally:
            llama_cpp.llama_batch_free(batch)

    def _on_tensor(self, ptr: int, ask: bool, _user: int) -> bool:
        """llama.cpp's evaluation callback: idle unless a pass is on (see :class:`_Pass`)."""
        p = self._pass
        if p is None:
            return False
        try:
            t = ctypes.cast(ptr, ctypes.POINTER(_GgmlTensor)).contents
            name = t.name.decode("utf-8", "replace")
            if not name.startswith(TENSOR_PREFIX):
                return not ask  # computed tensors we did not ask for: go on
            if ask:
                return True
            p.reduce(t, int(name[len(TENSOR_PREFIX) :]))
        except AttentionError as exc:
            p.errors.append(exc)
        except Exception as exc:  # a ctypes callback must not raise: llama.cpp would print and go on
            p.errors.append(_layout_error(f"{type(exc).__name__}: {exc}"))
        return True

    def _free(self) -> None:
        import llama_cpp

        if self._ctx is not None:
            llama_cpp.llama_free(self._ctx)
            self._ctx, self._held = None, []

    def close(self) -> None:
        self._free()
        self.llm.close()

    def __enter__(self) -> AttentionReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
